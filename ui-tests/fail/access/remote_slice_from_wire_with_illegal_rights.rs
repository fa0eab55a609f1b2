// A peer's rkey is typed by the rights its region was registered with, and no region can be
// registered with REMOTE_WRITE but without LOCAL_WRITE (ibv_reg_mr(3)): such a remote
// description does not exist.
use typed_verbs::access::{Access, RemoteWrite};
use typed_verbs::mr::RemoteSlice;

fn main() {
    let _ = RemoteSlice::<Access<(), RemoteWrite>>::from_wire(0x1000, 64, 0x1234);
}
