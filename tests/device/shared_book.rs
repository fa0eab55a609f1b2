//! One send queue's book shared by every kind of poster at once, in safe code: two threads
//! posting and waiting through one scope, a third posting owned requests and dropping half of
//! its tokens in flight, a fourth only polling (`Cq::progress`), all on one QP and one CQ.
//! The book's counters, its ring of owners and its stored completions serve them all; each
//! token must get its own request's completion whoever polled it: a READ's destination holds
//! the data once its token is handed back, a completion of its own names its token's
//! operation, and no dropped token's buffer is kept once everything completed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use typed_verbs::prelude::*;
use typed_verbs::wc::CompletionSource;

use crate::common::*;

const ROUNDS: usize = 150;
/// Requests per round and thread; all but the last unsignaled.
const BATCH: usize = 6;
const PIECE: usize = 4096;
/// The READ source holds this many pieces; a request reads piece `(round + i) % SOURCE`.
const SOURCE: usize = 7;

fn pattern(i: usize) -> u8 {
    (i * 13 % 251) as u8 + 1
}

/// A completion that the token's request produced itself names that request's operation; an
/// implied one is a success.
fn check_own(c: &Completion, op: WcOpcode, what: &str) {
    assert!(c.is_success(), "{what}: {c:?}");
    if c.source() == CompletionSource::Own {
        assert_eq!(c.opcode(), op, "{what}: another request's completion: {c:?}");
    }
}

#[test]
fn every_poster_of_one_send_queue_gets_its_own_completions_whoever_polls() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, access::REMOTE_RW, QpCaps::default());
    let mut source = r.pd.alloc_mr(SOURCE * PIECE, access::REMOTE_READ_ONLY).unwrap();
    for (i, b) in source.as_mut_slice().iter_mut().enumerate() {
        *b = pattern(i);
    }
    let target = r.pd.alloc_mr(2 * BATCH * PIECE, access::LOCAL_REMOTE_WRITE).unwrap();
    let mut dst = r.pd.alloc_mr(BATCH * PIECE, access::LOCAL_RW).unwrap();
    let mut src = r.pd.alloc_mr(BATCH * PIECE, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(0x77);
    let mut owned = r.pd.alloc_mr((ROUNDS + 1) * 64, access::LOCAL_READ).unwrap().into_chunks(64).unwrap();
    let done = AtomicBool::new(false);

    scope(|s| {
        let mut pieces = Vec::new();
        let mut rest = dst.slice_mut(..).unwrap();
        for _ in 1..BATCH {
            let (piece, tail) = rest.split_at(PIECE).unwrap();
            pieces.push(piece);
            rest = tail;
        }
        pieces.push(rest);
        let (qp, source, target, src) = (&p.a, &source, &target, &src);
        std::thread::scope(|t| {
            let readers = t.spawn(move || {
                for round in 0..ROUNDS {
                    let mut tokens = Vec::new();
                    for (i, mut piece) in pieces.drain(..).enumerate() {
                        piece.write_volatile_from(&[0; PIECE]);
                        let from = (round + i) % SOURCE * PIECE;
                        let wr = wr::Read::new(piece, source.remote(from..from + PIECE).unwrap());
                        let t = if i + 1 < BATCH {
                            s.post_send(qp, wr.unsignaled()).unwrap()
                        } else {
                            s.post_send(qp, wr).unwrap()
                        };
                        tokens.push((from, t));
                    }
                    // The last (signaled) first: the unsignaled ones are then complete already.
                    let mut back = Vec::new();
                    for (from, t) in tokens.into_iter().rev() {
                        let (c, piece) = s.wait(t, WAIT).unwrap();
                        check_own(&c, WcOpcode::RdmaRead, "a READ");
                        let mut seen = vec![0u8; PIECE];
                        piece.read_volatile_into(&mut seen);
                        assert!(
                            seen.iter().enumerate().all(|(j, &b)| b == pattern(from + j)),
                            "round {round}: a READ's token came back before its data landed"
                        );
                        back.push(piece);
                    }
                    back.reverse();
                    pieces = back;
                }
            });
            let writers = t.spawn(move || {
                for round in 0..ROUNDS {
                    let mut tokens = Vec::new();
                    for i in 0..BATCH {
                        let at = (BATCH + i) * PIECE;
                        let wr = wr::Write::new(
                            src.slice(i * PIECE..(i + 1) * PIECE).unwrap(),
                            target.remote(at..at + PIECE).unwrap(),
                        );
                        let t = if i + 1 < BATCH {
                            s.post_send(qp, wr.unsignaled()).unwrap()
                        } else {
                            s.post_send(qp, wr).unwrap()
                        };
                        tokens.push(t);
                    }
                    // One token given up in flight each round (its result, if it has one of
                    // its own, waits for the scope's end), the others waited in posting order.
                    drop(tokens.remove(round % (BATCH - 1)));
                    for t in tokens {
                        let (c, _) = s.wait(t, WAIT).unwrap();
                        check_own(&c, WcOpcode::RdmaWrite, "a WRITE");
                    }
                }
            });
            let owners = t.spawn(|| {
                let mut kept = owned.pop().unwrap();
                for round in 0..ROUNDS {
                    let at = round % (2 * BATCH) * PIECE;
                    let gone =
                        qp.post_send_owned(wr::Write::new(owned.pop().unwrap(), target.remote(at..at + 64).unwrap()));
                    let waited = qp.post_send_owned(wr::Write::new(kept, target.remote(at + 64..at + 128).unwrap()));
                    drop(gone.unwrap());
                    let (c, chunk) = waited.unwrap().wait(WAIT).unwrap();
                    check_own(&c, WcOpcode::RdmaWrite, "an owned WRITE");
                    kept = chunk;
                }
            });
            let poller = t.spawn(|| {
                while !done.load(Ordering::Acquire) {
                    r.cq.progress().unwrap();
                    std::thread::yield_now();
                }
            });
            let joined = [readers.join(), writers.join(), owners.join()];
            done.store(true, Ordering::Release);
            poller.join().unwrap();
            for j in joined {
                if let Err(panic) = j {
                    std::panic::resume_unwind(panic);
                }
            }
        });
    })
    .expect("the scope drains cleanly: every request completed");
    assert_eq!(p.a.outstanding(), (0, 0));
    // Every owned token given up in flight had its chunk kept until its request completed;
    // a poll releases what is complete.
    let deadline = Instant::now() + Duration::from_secs(5);
    while p.a.parked_buffers() != 0 && Instant::now() < deadline {
        r.cq.progress().unwrap();
    }
    assert_eq!(p.a.parked_buffers(), 0, "a given-up owned token's chunk was never released");
}
