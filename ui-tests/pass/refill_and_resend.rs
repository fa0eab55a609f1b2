// Refilling and re-sending one registered buffer: fill, send, wait, refill, send. In one scope, the view `wait` hands back is written again (`LocalBufMut::write_volatile_from`) and posted again; without a scope, an owned chunk does the same.
use std::time::Duration;
use typed_verbs::access;
use typed_verbs::mr::{Chunk, Mr};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn in_one_scope(qp: &Qp<RC, RTS>, mr: &mut Mr<access::LocalRw>) -> typed_verbs::Result<()> {
    let timeout = Duration::from_secs(10);
    scope(|s| -> typed_verbs::Result<()> {
        let mut buf = mr.slice_mut(..5)?;
        for msg in [b"hello", b"world", b"again"] {
            buf.write_volatile_from(msg);
            let token = s.post_send(qp, wr::Send::new(buf))?;
            let (completion, back) = s.wait(token, timeout)?;
            completion.ok()?;
            buf = back;
        }
        Ok(())
    })??;
    // After the scope, the region is free for plain access again.
    mr.as_mut_slice()[0] = b'j';
    Ok(())
}

fn owned(qp: &Qp<RC, RTS>, mut chunk: Chunk<access::LocalRw>) -> typed_verbs::Result<Chunk<access::LocalRw>> {
    let timeout = Duration::from_secs(10);
    for msg in [b"hello", b"world"] {
        chunk.as_mut_slice()[..5].copy_from_slice(msg);
        let token = qp.post_send_owned(wr::Send::new(chunk))?;
        let (completion, back) = token.wait(timeout)?;
        completion.ok()?;
        chunk = back;
    }
    Ok(chunk)
}

fn main() {
    let _ = (in_one_scope, owned);
}
