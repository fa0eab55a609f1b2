// ibv_reg_mr(3) takes the access values regions are registered with (`access::LOCAL_RW`,
// `access::REMOTE_RW`, ...); a memory window's rights (`access::window::*`) are not one.
use typed_verbs::access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd) -> typed_verbs::Result<()> {
    let _mr = pd.alloc_mr(4096, access::window::READ)?;
    Ok(())
}

fn main() {}
