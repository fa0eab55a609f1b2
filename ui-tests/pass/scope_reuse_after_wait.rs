// scope: waiting on a token hands the buffer view back for reuse; after the scope the region is free again.
use std::time::Duration;
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn check(
    qp: &Qp<RC, RTS>,
    src: &mut Mr<access::LocalRw>,
    dst: &mut Mr<access::LocalRw>,
    remote: RemoteSlice<access::RemoteRw>,
) -> typed_verbs::Result<()> {
    src.as_mut_slice()[..5].copy_from_slice(b"hello");
    let timeout = Duration::from_secs(10);
    scope(|s| -> typed_verbs::Result<()> {
        // A receive buffer comes back from `wait` and is posted again.
        let token = s.post_recv(qp, wr::Recv::new(dst.slice_mut(..)?))?;
        let (completion, buf) = s.wait(token, timeout)?;
        completion.ok()?;
        let token = s.post_recv(qp, wr::Recv::new(buf))?;
        let (_, buf) = s.wait(token, timeout)?;
        let mut first = [0u8; 1];
        buf.read_volatile_into(&mut first);
        // A source view comes back too, and shared views can be posted more than once.
        let token = s.post_send(qp, wr::Write::new(src.slice(..5)?, remote))?;
        let (_, sent) = s.wait(token, timeout)?;
        let _again = s.post_send(qp, wr::Send::new(sent))?;
        let _twice = s.post_send(qp, wr::Send::new(sent))?;
        Ok(())
    })??;
    // After the scope, the regions are free for plain access again.
    src.as_mut_slice()[0] = b'j';
    let _ = dst.as_slice()[0];
    Ok(())
}

fn main() {
    let _ = check;
}
