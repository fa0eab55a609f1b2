// ibv_reg_mr(3): every access set with LOCAL_WRITE whenever REMOTE_WRITE or REMOTE_ATOMIC is set registers. Of the 32 sets of the five flags, these are the 20 that `LegalAccess` implements: with LOCAL_WRITE, any of REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC, MW_BIND (16); without it, any of REMOTE_READ, MW_BIND (4). The other 12 set REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE (ui-tests access/remote_*_without_local_write).
use typed_verbs::access::{self, Access, LocalWrite as LW, MwBind as MB, RemoteAtomic as RA, RemoteRead as RR, RemoteWrite as RW};
use typed_verbs::mr::Mr;
use typed_verbs::pd::Pd;

fn every_legal_set(pd: &Pd) -> typed_verbs::Result<()> {
    let n = Access::NONE;
    let l = Access::NONE.local_write();
    // With LOCAL_WRITE: REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC, MW_BIND each set or not (16).
    let _: Mr<Access<LW, (), (), (), ()>> = pd.alloc_mr(4096, l)?;
    let _: Mr<Access<LW, (), (), (), MB>> = pd.alloc_mr(4096, l.mw_bind())?;
    let _: Mr<Access<LW, (), (), RA, ()>> = pd.alloc_mr(4096, l.remote_atomic())?;
    let _: Mr<Access<LW, (), (), RA, MB>> = pd.alloc_mr(4096, l.remote_atomic().mw_bind())?;
    let _: Mr<Access<LW, (), RR, (), ()>> = pd.alloc_mr(4096, l.remote_read())?;
    let _: Mr<Access<LW, (), RR, (), MB>> = pd.alloc_mr(4096, l.remote_read().mw_bind())?;
    let _: Mr<Access<LW, (), RR, RA, ()>> = pd.alloc_mr(4096, l.remote_read().remote_atomic())?;
    let _: Mr<Access<LW, (), RR, RA, MB>> = pd.alloc_mr(4096, l.remote_read().remote_atomic().mw_bind())?;
    let _: Mr<Access<LW, RW, (), (), ()>> = pd.alloc_mr(4096, l.remote_write())?;
    let _: Mr<Access<LW, RW, (), (), MB>> = pd.alloc_mr(4096, l.remote_write().mw_bind())?;
    let _: Mr<Access<LW, RW, (), RA, ()>> = pd.alloc_mr(4096, l.remote_write().remote_atomic())?;
    let _: Mr<Access<LW, RW, (), RA, MB>> = pd.alloc_mr(4096, l.remote_write().remote_atomic().mw_bind())?;
    let _: Mr<Access<LW, RW, RR, (), ()>> = pd.alloc_mr(4096, l.remote_write().remote_read())?;
    let _: Mr<Access<LW, RW, RR, (), MB>> = pd.alloc_mr(4096, l.remote_write().remote_read().mw_bind())?;
    let _: Mr<Access<LW, RW, RR, RA, ()>> = pd.alloc_mr(4096, l.remote_write().remote_read().remote_atomic())?;
    let _: Mr<Access<LW, RW, RR, RA, MB>> = pd.alloc_mr(4096, l.remote_write().remote_read().remote_atomic().mw_bind())?;
    // Without LOCAL_WRITE: REMOTE_READ and MW_BIND each set or not (4).
    let _: Mr<Access<(), (), (), (), ()>> = pd.alloc_mr(4096, n)?;
    let _: Mr<Access<(), (), (), (), MB>> = pd.alloc_mr(4096, n.mw_bind())?;
    let _: Mr<Access<(), (), RR, (), ()>> = pd.alloc_mr(4096, n.remote_read())?;
    let _: Mr<Access<(), (), RR, (), MB>> = pd.alloc_mr(4096, n.remote_read().mw_bind())?;
    Ok(())
}

fn presets(pd: &Pd) -> typed_verbs::Result<()> {
    let _: Mr<access::LocalRead> = pd.alloc_mr(4096, access::LOCAL_READ)?;
    let _: Mr<access::LocalRw> = pd.alloc_mr(4096, access::LOCAL_RW)?;
    let _: Mr<access::RemoteReadOnly> = pd.alloc_mr(4096, access::REMOTE_READ_ONLY)?;
    let _: Mr<access::LocalRemoteWrite> = pd.alloc_mr(4096, access::LOCAL_REMOTE_WRITE)?;
    let _: Mr<access::RemoteRw> = pd.alloc_mr(4096, access::REMOTE_RW)?;
    let _: Mr<access::RemoteAll> = pd.alloc_mr(4096, access::REMOTE_ALL)?;
    let _: Mr<access::WindowBindable> = pd.alloc_mr(4096, access::WINDOW_BINDABLE)?;
    let _: Mr<access::Full> = pd.alloc_mr(4096, access::FULL)?;
    Ok(())
}

// Plain slices on memory no peer can write (`PeerCannotWrite`): no REMOTE_WRITE, no
// REMOTE_ATOMIC, and no MW_BIND together with LOCAL_WRITE (a writable window could be bound):
// LOCAL_WRITE and REMOTE_READ each set or not without MW_BIND (4), and MW_BIND with or without
// REMOTE_READ but without LOCAL_WRITE (2).
fn plain_slices(pd: &Pd) -> typed_verbs::Result<()> {
    let n = Access::NONE;
    pd.alloc_mr(4096, n)?.as_mut_slice()[0] = 1;
    pd.alloc_mr(4096, n.local_write())?.as_mut_slice()[0] = 1;
    pd.alloc_mr(4096, n.remote_read())?.as_mut_slice()[0] = 1;
    pd.alloc_mr(4096, n.local_write().remote_read())?.as_mut_slice()[0] = 1;
    pd.alloc_mr(4096, n.mw_bind())?.as_mut_slice()[0] = 1;
    let _ = pd.alloc_mr(4096, n.remote_read().mw_bind())?.as_slice()[0];
    Ok(())
}

fn main() {
    let _ = (every_legal_set, presets, plain_slices);
}
