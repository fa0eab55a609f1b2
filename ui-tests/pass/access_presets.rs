// ibv_reg_mr(3): every access set with LOCAL_WRITE whenever REMOTE_WRITE or REMOTE_ATOMIC is set registers.
use typed_verbs::access::{self, Access};
use typed_verbs::mr::Mr;
use typed_verbs::pd::Pd;

fn check(pd: &Pd) -> typed_verbs::Result<()> {
    let _: Mr<access::LocalRead> = pd.alloc_mr(4096, access::LOCAL_READ)?;
    let _: Mr<access::LocalRw> = pd.alloc_mr(4096, access::LOCAL_RW)?;
    let _: Mr<access::RemoteReadOnly> = pd.alloc_mr(4096, access::REMOTE_READ_ONLY)?;
    let _: Mr<access::LocalRemoteWrite> = pd.alloc_mr(4096, access::LOCAL_REMOTE_WRITE)?;
    let _: Mr<access::RemoteRw> = pd.alloc_mr(4096, access::REMOTE_RW)?;
    let _: Mr<access::RemoteAll> = pd.alloc_mr(4096, access::REMOTE_ALL)?;
    let _: Mr<access::WindowBindable> = pd.alloc_mr(4096, access::WINDOW_BINDABLE)?;
    let _: Mr<access::Full> = pd.alloc_mr(4096, access::FULL)?;
    // Builder forms, including sets without a preset.
    let _ = pd.alloc_mr(4096, Access::NONE.local_write().remote_atomic())?;
    let _ = pd.alloc_mr(4096, Access::NONE.remote_read().mw_bind())?;
    let _ = pd.alloc_mr(4096, Access::NONE.mw_bind())?;
    // Plain slices on memory no peer can write.
    let mut mr = pd.alloc_mr(4096, access::LOCAL_RW)?;
    mr.as_mut_slice()[0] = 1;
    let _ = pd.alloc_mr(4096, access::REMOTE_READ_ONLY)?.as_slice()[0];
    let _ = pd.alloc_mr(4096, Access::NONE.remote_read().mw_bind())?.as_slice()[0];
    Ok(())
}

fn main() {
    let _ = check;
}
