//! The three ways to post: scopes, owned tokens, lanes.
//!
//! ibv_post_send(3): "The buffers used by a WR can only be safely reused after the request is
//! fully executed and a work completion has been retrieved". A token that merely borrows the
//! buffer does not enforce that (`mem::forget` ends the borrow while the device still writes).
//! Each of the three paths enforces it another way; all three check the same rules (the
//! opcode table and flags at compile time; lengths, alignment, inline size, PDs, ODP and queue
//! depth before the provider sees the request).
//!
//! # Which one
//!
//! | | scope tokens | owned tokens | lanes |
//! |---|---|---|---|
//! | calls | [`scope`](crate::scope::scope), [`Scope::post_send`](crate::scope::Scope::post_send) / [`post_recv`](crate::scope::Scope::post_recv), [`Scope::wait`](crate::scope::Scope::wait) | [`Qp::post_send_owned`](crate::qp::Qp::post_send_owned) / [`post_recv_owned`](crate::qp::Qp::post_recv_owned), [`Srq::post_recv_owned`](crate::srq::Srq::post_recv_owned), [`OwnedToken::wait`](crate::owned::OwnedToken::wait) | inside a scope: [`Scope::send_lane`](crate::scope::Scope::send_lane), [`recv_lane`](crate::scope::Scope::recv_lane), [`lanes`](crate::scope::Scope::lanes); `prepare` once, `post` many times |
//! | memory | borrowed views ([`LocalBuf`](crate::mr::LocalBuf), [`LocalBufMut`](crate::mr::LocalBufMut)) and owned [`Chunk`](crate::mr::Chunk)s | owned only (`Send + 'static`: chunks) | borrowed views only |
//! | the QP | borrowed (`&Qp`) until the scope ends: no transition meanwhile | shared: it may change state with requests outstanding (receives posted in INIT, collected in RTS) | `&mut Qp` until the scope ends: the lane is the queue's only poster |
//! | what comes back | the views or chunks, with the completion | the chunks, with the completion, on success, error and flush | nothing to hand back: the borrow ends with the scope; received bytes through [`PreparedRecv::received`](crate::lane::PreparedRecv::received) |
//! | a token dropped or forgotten | the memory stays borrowed until the scope ends, and the scope waits for the device | dropped: its buffers are kept with the queue until the request completes, the QP is reset or destroyed; forgotten: leaked | nothing to lose: lane tokens are plain data |
//! | end | `scope` returns only after every request completed; past the drain timeout (30 s by default) it flushes and resets the QP and returns [`Error::QpBroken`](crate::Error::QpBroken) | none: each token is waited for, or dropped | as scope tokens |
//! | only here | memory window binds and invalidations ([`windows`](super::windows): they borrow the region); a token per request of a post list ([`Scope::post_send_list`](crate::scope::Scope::post_send_list)) | SRQ receives; tokens that outlive any scope, stored or moved between threads | prepared post lists ([`SendLane::post_list`](crate::lane::SendLane::post_list)); unsignaled runs without a token each |
//! | user-space instructions per RDMA WRITE, against C's 226 (BENCHMARKS.md, "Zero-cost check") | 412: 1.83x | 467: 2.07x; awaited, 555: 2.46x | 234: 1.04x (send lane); a SEND with its receive, send and receive lanes: 510 against 440, 1.16x; a ping-pong message, two lanes per QP: 655 against 515, 1.27x |
//! | against perftest 4.5 on Soft-RoCE (BENCHMARKS.md, "perftest next to `perf`"; differences under ~10 % are noise there) | 64 B message rate: WRITE 1.04, SEND 1.67; t_typical latency: WRITE 1.08, SEND 1.08 | awaited SEND latency: 3.13 (0.99 with `Cq::set_await_polls(256)`, "Awaited latency") | 64 B message rate: WRITE 1.16, SEND 1.52; t_typical latency: WRITE 1.03, SEND 1.03 (busy-polling `wait_spin`: 0.76 and 0.96) |
//!
//! The figures are from one commit on Soft-RoCE under QEMU (BENCHMARKS.md, "Current results",
//! and "Caveats of emulation"): rates and latencies are ratios within one run, whose rounds
//! spread by 1.5x and more; instruction counts do not depend on the emulator's speed. The
//! perftest comparison runs owned tokens only awaited, on the SEND latency.
//!
//! In short: scopes by default; owned tokens where buffers must outlive a function or cross
//! state transitions, and for SRQs; lanes for the loop that re-posts the same few requests and
//! must come closest to C.
//!
//! # Scope tokens
//!
//! [`scope`](crate::scope::scope) works like `std::thread::scope`: a request posted through
//! the [`Scope`](crate::scope::Scope) may use memory borrowed from outside the closure, and
//! `scope` returns (or resumes a panic) only after the device is done with every request it
//! posted. The views move into a [`Token`](crate::scope::Token);
//! [`Scope::wait`](crate::scope::Scope::wait) hands them back with the
//! [`Completion`](crate::wc::Completion), whatever its status.
//!
//! ```no_run
//! use std::time::Duration;
//! use typed_verbs::prelude::*;
//! use typed_verbs::wr;
//!
//! fn echo(qp: &Qp<RC, RTS>, inbox: &mut Mr<access::LocalRw>, out: &Mr<access::LocalRead>) -> typed_verbs::Result<()> {
//!     let t = Duration::from_secs(10);
//!     scope(|s| -> typed_verbs::Result<()> {
//!         let recv = s.post_recv(qp, wr::Recv::new(inbox.slice_mut(..)?))?;
//!         let send = s.post_send(qp, wr::Send::new(out.slice(..64)?))?;
//!         s.wait(send, t)?.0.ok()?;
//!         let (c, received) = s.wait(recv, t)?;
//!         let n = c.ok()?.byte_len() as usize;
//!         // The device is done with `received`: send it back (a LocalBufMut is also a source).
//!         let back = s.post_send(qp, wr::Send::new(received.split_at(n)?.0))?;
//!         s.wait(back, t)?.0.ok()?;
//!         Ok(())
//!     })??; // the outer `?`: the scope's own error (a QP it had to break)
//!     Ok(())
//! }
//! ```
//!
//! A view stays borrowed until `scope` returns, even after `wait` handed it back: to write a
//! buffer again inside one scope, write the view that came back
//! ([`LocalBufMut::write_volatile_from`](crate::mr::LocalBufMut::write_volatile_from); the
//! README's "Refilling one buffer"). Receives still posted when the closure ends keep the
//! scope waiting until the drain timeout: collect them, or end with
//! [`Scope::flush`](crate::scope::Scope::flush) ([`teardown`](super::teardown)).
//!
//! # Owned tokens
//!
//! Requests whose memory is owned ([`Chunk`](crate::mr::Chunk)s, inline payloads) are posted
//! on the QP itself and return an [`OwnedToken`](crate::owned::OwnedToken), which owns the
//! buffers and a reference to the QP. Nothing is borrowed, so the QP may move through its
//! states meanwhile: the C pingpong tools' receives posted in INIT are owned receives.
//!
//! ```no_run
//! use std::time::Duration;
//! use typed_verbs::prelude::*;
//! use typed_verbs::wr;
//!
//! fn pipeline(pd: &Pd, qp: Qp<RC, INIT>, me: &Endpoint, peer: &Endpoint, link: Link) -> typed_verbs::Result<()> {
//!     let t = Duration::from_secs(10);
//!     let mut chunks = pd.alloc_mr(8 * 4096, access::LOCAL_RW)?.into_chunks(4096)?;
//!     let mut out = chunks.pop().expect("8 chunks");
//!     // Receives posted in INIT, before the peer may send.
//!     let recvs: Vec<_> = chunks.into_iter().map(|c| qp.post_recv_owned(wr::Recv::new(c))).collect::<Result<_, _>>()?;
//!     let path = qp.path_to(link, peer)?;
//!     let qp = qp.connect_path(me, peer, &path)?;
//!     out.as_mut_slice()[..5].copy_from_slice(b"hello");
//!     let (c, _out) = qp.post_send_owned(wr::Send::new(out))?.wait(t)?;
//!     c.ok()?;
//!     for token in recvs {
//!         // The chunk comes back on success, error and flush alike.
//!         let (c, chunk) = token.wait(t)?;
//!         if c.is_success() {
//!             // The length is the device's word: `get`, not an index that could panic.
//!             let _bytes = chunk.as_slice().get(..c.byte_len() as usize);
//!         }
//!     }
//!     Ok(())
//! }
//! ```
//!
//! A token dropped before its completion parks its buffers with the QP
//! ([`Qp::parked_buffers`](crate::qp::Qp::parked_buffers) counts them) until a later poll sees
//! the request complete, or the QP is reset or destroyed; a forgotten one leaks them. A
//! send lane refuses to open while owned requests are outstanding on its queue.
//!
//! # Lanes
//!
//! A [`SendLane`](crate::lane::SendLane) is the exclusive poster of one QP's send queue for the
//! rest of a scope. [`SendLane::prepare`](crate::lane::SendLane::prepare) builds and checks a
//! request once; [`SendLane::post`](crate::lane::SendLane::post) (signaled, returns a
//! [`LaneToken`](crate::lane::LaneToken)) and
//! [`SendLane::post_unsignaled`](crate::lane::SendLane::post_unsignaled) only set the `wr_id`
//! and the flags and call the provider, as a C loop re-posts one `ibv_send_wr`. A signaled
//! completion also completes the lane's earlier requests (send queues complete in order). The
//! lane signals by itself at least every `depth / 2` requests of an unsignaled run and keeps
//! at most `depth` outstanding, so the queue can neither overflow nor fill with requests that
//! nothing completes.
//!
//! ```no_run
//! use std::time::Duration;
//! use typed_verbs::prelude::*;
//! use typed_verbs::wr;
//!
//! fn stream(qp: &mut Qp<RC, RTS>, src: &Mr<access::LocalRead>, dst: RemoteSlice<access::RemoteRw>) -> typed_verbs::Result<()> {
//!     scope(|s| -> typed_verbs::Result<()> {
//!         let mut lane = s.send_lane(qp)?;
//!         let mut write = lane.prepare(wr::Write::new(src.slice(..64)?, dst.slice(0, 64)?))?;
//!         for i in 0..1000 {
//!             if i % 16 == 15 {
//!                 let token = lane.post(&mut write)?;
//!                 lane.wait(token, Duration::from_secs(5))?.ok()?; // completes the 15 before it too
//!             } else {
//!                 lane.post_unsignaled(&mut write)?;
//!             }
//!         }
//!         Ok(())
//!     })??;
//!     Ok(())
//! }
//! ```
//!
//! A [`RecvLane`](crate::lane::RecvLane) does the same for a receive queue;
//! [`Scope::lanes`](crate::scope::Scope::lanes) opens both of one QP (a ping-pong posts both).
//! The received bytes are read through the prepared receive, once its last post completed:
//!
//! ```no_run
//! use std::time::Duration;
//! use typed_verbs::prelude::*;
//! use typed_verbs::wr;
//!
//! fn pong(qp: &mut Qp<RC, RTS>, inbox: &mut Mr<access::LocalRw>, out: &Mr<access::LocalRead>) -> typed_verbs::Result<()> {
//!     let t = Duration::from_secs(5);
//!     scope(|s| -> typed_verbs::Result<()> {
//!         let (mut tx, mut rx) = s.lanes(qp)?;
//!         let mut recv = rx.prepare(wr::Recv::new(inbox.slice_mut(..)?))?;
//!         let mut send = tx.prepare(wr::Send::new(out.slice(..8)?))?;
//!         for _ in 0..100 {
//!             let r = rx.post(&mut recv)?;
//!             rx.wait(r, t)?.ok()?;
//!             let _ping = recv.received().expect("its post completed");
//!             let w = tx.post(&mut send)?;
//!             tx.wait(w, t)?.ok()?;
//!         }
//!         Ok(())
//!     })??;
//!     Ok(())
//! }
//! ```
//!
//! A loop that waits for its receives in the order it posted them, as this one does, needs no
//! token per receive: [`RecvLane::ordered`](crate::lane::RecvLane::ordered) makes the lane an
//! [`OrderedRecvLane`](crate::lane::OrderedRecvLane), whose `post` returns nothing and whose
//! [`wait_next`](crate::lane::OrderedRecvLane::wait_next) hands out the oldest receive not
//! handed out yet (`let mut rx = rx.ordered(); ... rx.post(&mut recv)?; rx.wait_next(t)?.ok()?;`).
//!
//! What lanes do not take: owned chunks (a prepared request may only hold memory whose drop
//! frees nothing), a QP with an SRQ (receive lanes), other posts on the same queue while the
//! lane is open (scope and owned receives are refused while a receive lane is open; a send
//! lane opened alone leaves the receive queue to [`Scope::post_recv_lane`](crate::scope::Scope::post_recv_lane)).
//!
//! # Waiting
//!
//! Every wait takes a timeout and returns the token with [`Error::Timeout`](crate::Error::Timeout)
//! when it runs out, to wait again. [`Scope::wait`](crate::scope::Scope::wait),
//! [`SendLane::wait`](crate::lane::SendLane::wait) and
//! [`RecvLane::wait`](crate::lane::RecvLane::wait) yield the thread after an empty poll; the
//! `wait_spin` forms busy-poll (a thread on its own core, latency first). Any wait polls the
//! CQ and routes every completion it finds to its own request's token, so QPs and threads can
//! share a CQ ([`completions`](super::completions)).
