// Memory the caller owns: what must compile. A registered Vec is a region like any other
// (views, remote, as_slice where no peer writes, chunks through into_mr); a borrowed
// registration lends views to a scope; the closure form binds a window to borrowed memory and
// lets a RemoteSlice (no borrow) leave the closure.
use std::time::Duration;
use typed_verbs::access::{self, window};
use typed_verbs::caller::{BorrowedMr, Registered, ScopedMr};
use typed_verbs::mr::{Chunk, RemoteSlice};
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::pd::Pd;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

const T: Duration = Duration::from_secs(1);

fn owned(pd: &Pd, qp: &Qp<RC, RTS>) -> typed_verbs::Result<Vec<u8>> {
    let mut src: Registered<access::LocalRw, Vec<u8>> = pd.register(vec![7u8; 4096], access::LOCAL_RW)?;
    src.as_mut_slice()[0] = 1;
    let dst = pd.register(vec![0u8; 4096].into_boxed_slice(), access::REMOTE_RW)?;
    scope(|s| -> typed_verbs::Result<()> {
        let t = s.post_send(qp, wr::Write::new(src.slice(..)?, dst.remote(..)?))?;
        s.wait(t, T)?.0.ok()?;
        Ok(())
    })??;
    let chunks: Vec<Chunk<access::RemoteRw>> = dst.into_mr().into_chunks(1024)?;
    drop(chunks);
    src.deregister().map_err(|(e, _)| e)
}

fn borrowed(pd: &Pd, qp: &Qp<RC, RTS>, buf: &mut [u8]) -> typed_verbs::Result<()> {
    let mut mr: BorrowedMr<'_, access::LocalRw> = pd.register_borrowed(&mut *buf, access::LOCAL_RW)?;
    mr.as_mut_slice()[0] = 1;
    scope(|s| -> typed_verbs::Result<()> {
        let t = s.post_recv(qp, wr::Recv::new(mr.slice_mut(..)?))?;
        s.wait(t, T)?;
        Ok(())
    })??;
    let buf: &mut [u8] = mr.deregister().map_err(|(e, _)| e)?;
    buf[0] = 2;
    Ok(())
}

fn scoped(pd: &Pd, qp: &Qp<RC, RTS>, mw: Mw<Type1>, buf: &mut [u8]) -> typed_verbs::Result<RemoteSlice<access::Full>> {
    let remote = pd.with_registered(buf, access::FULL, |mr: &mut ScopedMr<'_, access::Full>| {
        scope(|s| -> typed_verbs::Result<()> {
            let t = s.bind_mw(qp, mw, mr, 0, 64, window::READ_WRITE)?;
            let bound = s.wait(t, T)?.1.map_err(|_| typed_verbs::Error::QpBroken { qp_num: 0 })?;
            let _peer: RemoteSlice<window::ReadWrite> = bound.remote(..)?;
            Ok(())
        })??;
        let second = mr.remote(8..16)?;
        scope(|s| -> typed_verbs::Result<()> {
            let t = s.post_send(qp, wr::Read::new(mr.slice_mut(..8)?, second))?;
            s.wait(t, T)?;
            Ok(())
        })??;
        scope(|s| -> typed_verbs::Result<()> {
            let t = s.post_send(qp, wr::Send::new(mr.slice(..8)?))?;
            s.wait(t, T)?;
            Ok(())
        })??;
        mr.remote(..)
    })??;
    Ok(remote)
}

fn main() {
    let _ = (owned, borrowed, scoped);
}
