// ibv_modify_qp(3): qp_access_flags take the access values regions are registered with
// (`access::REMOTE_RW`, `Access::NONE.remote_write()`); a memory window's rights are not one.
use typed_verbs::access;
use typed_verbs::qp::ConnectedInit;

fn main() {
    let _ = ConnectedInit::new(1, access::window::READ_WRITE);
}
