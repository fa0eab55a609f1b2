// scope: a receive buffer handed back by `wait` can be posted again as a send source in the same scope ("send what was received"): as it is (a `LocalBufMut` is memory the device may read), or turned into a `LocalBuf` of the same lifetime with `into_local` (shared, so it can be posted more than once).
use std::time::Duration;
use typed_verbs::access;
use typed_verbs::mr::{LocalBuf, Mr};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn check(qp: &Qp<RC, RTS>, a: &mut Mr<access::LocalRw>, b: &mut Mr<access::LocalRw>) -> typed_verbs::Result<()> {
    let timeout = Duration::from_secs(10);
    scope(|s| -> typed_verbs::Result<()> {
        // Echo: receive, then send the received bytes back from the same buffer.
        let token = s.post_recv(qp, wr::Recv::new(a.slice_mut(..)?))?;
        let (completion, received) = s.wait(token, timeout)?;
        let (head, _rest) = received.split_at(completion.byte_len() as usize)?;
        let token = s.post_send(qp, wr::Send::new(head))?;
        let (_, _head) = s.wait(token, timeout)?;
        // The same, as a shared view: posted twice without waiting in between.
        let token = s.post_recv(qp, wr::Recv::new(b.slice_mut(..)?))?;
        let (_, received) = s.wait(token, timeout)?;
        let shared: LocalBuf<'_> = received.into_local();
        let _first = s.post_send(qp, wr::Send::new(shared))?;
        let _second = s.post_send(qp, wr::Send::new(shared))?;
        Ok(())
    })??;
    Ok(())
}

fn main() {
    let _ = check;
}
