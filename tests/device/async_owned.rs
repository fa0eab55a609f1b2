//! Owned work requests awaited as futures (`tokio` feature): the completion and the buffers
//! come back through `.await`; a CQ without a completion channel is a typed error; and every
//! way of abandoning a future (a `select!` timeout, runtime shutdown, a drop before the first
//! poll, a panicking task, an aborted task) leaves the buffers with the library until the device
//! is done with them, shown by sentinel bytes read back over RDMA from the region they belong
//! to. A thousand futures over eight QP pairs sharing one CQ each resolve exactly once, an
//! idle future is not polled in a loop (unless its CQ asks for polls before sleeping, and then
//! that many times), and a ping-pong of lone awaits on two threads wakes the channel's idle
//! driver task every time. Each test runs on a current-thread and on a
//! multi-threaded runtime.

use std::collections::BTreeSet;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use tokio::time::{sleep, timeout};
use typed_verbs::mr::Chunk;
use typed_verbs::owned::completion;
use typed_verbs::prelude::*;

use crate::common::*;

/// A current-thread and a multi-threaded (two workers) runtime, I/O and timer enabled.
pub(crate) fn runtimes() -> [(&'static str, tokio::runtime::Runtime); 2] {
    [
        ("current-thread", tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()),
        ("multi-thread", tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()),
    ]
}

/// Two connected RC QPs whose CQs both report to one completion channel.
pub(crate) struct AsyncRig {
    pub(crate) ctx: Context,
    pub(crate) pd: Pd,
    pub(crate) ch: CompChannel,
    pub(crate) cq_a: Cq,
    pub(crate) cq_b: Cq,
    pub(crate) pair: RcPair,
}

pub(crate) fn async_rig() -> AsyncRig {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let cq_a = ctx.create_cq_with_channel(256, &ch).unwrap();
    let cq_b = ctx.create_cq_with_channel(256, &ch).unwrap();
    let pair = rc_pair(&pd, &cq_a, &cq_b, access::REMOTE_RW, QpCaps::default());
    AsyncRig { ctx, pd, ch, cq_a, cq_b, pair }
}

/// `LOCAL_WRITE | REMOTE_READ`: receive and READ buffers the peer may read back (never write).
pub(crate) type Rx = typed_verbs::access::Access<typed_verbs::access::LocalWrite, (), typed_verbs::access::RemoteRead>;
pub(crate) const RX: Rx = Access::NONE.local_write().remote_read();

/// `n` chunks of `len` bytes of one region the peer may read.
pub(crate) fn chunks(pd: &Pd, n: usize, len: usize) -> Vec<Chunk<Rx>> {
    pd.alloc_mr(n * len, RX).unwrap().into_chunks(len).unwrap()
}

/// A chunk holding `bytes`.
pub(crate) fn message(pd: &Pd, bytes: &[u8]) -> Chunk<Rx> {
    let mut c = chunks(pd, 1, bytes.len()).remove(0);
    c.as_mut_slice().copy_from_slice(bytes);
    c
}

/// Polls `cq` until `qp` keeps no parked buffer (bounded).
pub(crate) fn until_unparked<T: typed_verbs::transport::Transport, S: typed_verbs::transport::QpState>(
    qp: &Qp<T, S>,
    cq: &Cq,
) {
    let start = Instant::now();
    while qp.parked_buffers() > 0 {
        assert!(start.elapsed() < WAIT, "{} buffers still parked after {WAIT:?}", qp.parked_buffers());
        cq.progress().unwrap();
        std::thread::yield_now();
    }
}

/// Sends `bytes` from `qp` (owned, waited synchronously) and asserts success.
pub(crate) fn send_sync(pd: &Pd, qp: &Qp<RC, RTS>, bytes: &[u8]) {
    let t = qp.post_send_owned(wr::Send::new(message(pd, bytes))).map_err(|e| e.error).unwrap();
    let (c, _) = t.wait(WAIT).map_err(|e| e.error).unwrap();
    assert!(c.is_success(), "{c:?}");
}

/// Reads `remote` over `qp` into a fresh chunk (synchronously) and returns its bytes.
pub(crate) fn read_back(pd: &Pd, qp: &Qp<RC, RTS>, remote: RemoteSlice<Rx>, len: usize) -> Vec<u8> {
    let dst = chunks(pd, 1, len).remove(0);
    let t = qp.post_send_owned(wr::Read::new(dst, remote)).map_err(|e| e.error).unwrap();
    let (c, dst) = t.wait(WAIT).map_err(|e| e.error).unwrap();
    assert!(c.is_success(), "{c:?}");
    dst.as_slice().to_vec()
}

#[test]
fn an_awaited_send_and_receive_hand_back_the_completion_and_the_buffers() {
    for (name, rt) in runtimes() {
        let r = async_rig();
        rt.block_on(async {
            let recv = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
            let recv = tokio::spawn(recv.into_future());
            let sent = r.pair.a.post_send_owned(wr::Send::new(message(&r.pd, b"async hello"))).unwrap();
            let (c, back) = timeout(WAIT, completion(sent)).await.expect("bounded").map_err(|e| e.error).unwrap();
            assert!(c.is_success(), "{name}: {c:?}");
            assert_eq!(back.as_slice(), b"async hello", "{name}: the send's chunk comes back");
            let (c, buf) = timeout(WAIT, recv).await.expect("bounded").expect("task").map_err(|e| e.error).unwrap();
            assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, 11), "{name}: {c:?}");
            assert_eq!(&buf.as_slice()[..11], b"async hello", "{name}");
        });
        assert_eq!(r.pair.a.parked_buffers() + r.pair.b.parked_buffers(), 0, "{name}");
    }
}

#[test]
fn a_token_whose_cq_has_no_channel_resolves_to_a_typed_error_with_the_token() {
    for (name, rt) in runtimes() {
        let Rig { _ctx, pd, cq } = rig();
        let pair = rc_pair(&pd, &cq, &cq, Access::NONE, QpCaps::default());
        let recv = pair.b.post_recv_owned(wr::Recv::new(chunks(&pd, 1, 64).remove(0))).unwrap();
        let back = rt.block_on(async {
            match timeout(WAIT, recv.into_future()).await.expect("resolves at once, does not hang") {
                Err(e) => {
                    assert!(matches!(e.error, Error::NoCompletionChannel { .. }), "{name}: {:?}", e.error);
                    assert!(e.error.to_string().contains("create_cq_with_channel"), "{name}: {}", e.error);
                    e.token
                }
                Ok(got) => panic!("{name}: resolved without a message: {got:?}"),
            }
        });
        // The token is intact: the synchronous wait takes the receive.
        send_sync(&pd, &pair.a, b"still mine");
        let (c, buf) = back.wait(WAIT).map_err(|e| e.error).unwrap();
        assert!(c.is_success(), "{name}: {c:?}");
        assert_eq!(&buf.as_slice()[..10], b"still mine", "{name}");
    }
}

/// QP b of `r` keeps one chunk parked (a dropped receive's, filled with 0xEE, at `remote`): a
/// message sent now lands there, and nowhere else in it, as read back over RDMA.
fn assert_the_late_message_lands_only_in_the_parked_chunk(r: &AsyncRig, remote: RemoteSlice<Rx>, name: &str) {
    assert_eq!(r.pair.b.parked_buffers(), 1, "{name}: the dropped future's chunk is parked");
    send_sync(&r.pd, &r.pair.a, b"late message");
    until_unparked(&r.pair.b, &r.cq_b);
    let landed = read_back(&r.pd, &r.pair.a, remote, 64);
    assert_eq!(&landed[..12], b"late message", "{name}: the late message landed in the parked chunk");
    assert!(landed[12..].iter().all(|&b| b == 0xEE), "{name}: only the message's bytes were written");
}

#[test]
fn a_receive_dropped_by_a_select_timeout_stays_parked_and_the_late_message_lands_only_there() {
    for (name, rt) in runtimes() {
        let r = async_rig();
        // Chunk 0 is the receive buffer; chunk 1 keeps the region registered after chunk 0 is
        // released, so that what landed in chunk 0 can be read back over RDMA.
        let mut region = chunks(&r.pd, 2, 64);
        let keep = region.pop().unwrap();
        let mut dropped = region.pop().unwrap();
        dropped.as_mut_slice().fill(0xEE);
        let dropped_remote = dropped.remote();
        rt.block_on(async {
            let recv = r.pair.b.post_recv_owned(wr::Recv::new(dropped)).unwrap();
            tokio::select! {
                got = recv.into_future() => panic!("{name}: nothing was sent, yet {got:?}"),
                _ = sleep(Duration::from_millis(50)) => {}
            }
        });
        assert_the_late_message_lands_only_in_the_parked_chunk(&r, dropped_remote, name);
        // A chunk that came back through `.await` and is reused is not written again: the
        // next message goes to the next receive.
        rt.block_on(async {
            let first = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
            send_sync(&r.pd, &r.pair.a, b"first");
            let (c, mut reused) = timeout(WAIT, first).await.expect("bounded").map_err(|e| e.error).unwrap();
            assert!(c.is_success(), "{name}: {c:?}");
            reused.as_mut_slice().fill(0x5A);
            let second = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
            send_sync(&r.pd, &r.pair.a, b"second");
            let (c, buf) = timeout(WAIT, second).await.expect("bounded").map_err(|e| e.error).unwrap();
            assert!(c.is_success(), "{name}: {c:?}");
            assert_eq!(&buf.as_slice()[..6], b"second", "{name}");
            assert!(reused.as_slice().iter().all(|&b| b == 0x5A), "{name}: a returned chunk was written");
        });
        drop(keep);
        assert_eq!(r.pair.b.parked_buffers(), 0, "{name}");
    }
}

#[test]
fn reads_abandoned_in_flight_come_back_only_through_the_queue_with_the_data_in_them() {
    const N: usize = 32;
    const LEN: usize = 4096;
    for (name, rt) in runtimes() {
        let r = async_rig();
        // The peer's source: request i reads bytes of value i + 1.
        let mut source = chunks(&r.pd, N, LEN);
        for (i, c) in source.iter_mut().enumerate() {
            c.as_mut_slice().fill(i as u8 + 1);
        }
        // The READs' destinations, one region (kept registered by `keep`), zeroed.
        let mut dst = chunks(&r.pd, N + 1, LEN);
        let keep = dst.pop().unwrap();
        let remotes: Vec<_> = dst.iter().map(|c| c.remote()).collect();
        let (done, aborted) = rt.block_on(async {
            let mut tasks = Vec::new();
            for (i, d) in dst.into_iter().enumerate() {
                let t = r.pair.a.post_send_owned(wr::Read::new(d, source[i].remote())).unwrap();
                tasks.push(tokio::spawn(t.into_future()));
            }
            // Abandoned wherever they are: half before their first poll (on the current-thread
            // runtime none has run yet), the others after it: waiting, or complete but not yet
            // polled.
            for t in tasks.iter().step_by(2) {
                t.abort();
            }
            tokio::task::yield_now().await;
            for t in &tasks {
                t.abort();
            }
            let (mut done, mut aborted) = (Vec::new(), Vec::new());
            for (i, t) in tasks.into_iter().enumerate() {
                match timeout(WAIT, t).await.expect("bounded") {
                    Ok(Ok((c, buf))) => {
                        assert!(c.is_success(), "{name}: {c:?}");
                        done.push((i, buf));
                    }
                    Ok(Err(e)) => panic!("{name}: {:?}", e.error),
                    Err(e) => {
                        assert!(e.is_cancelled(), "{name}: {e:?}");
                        aborted.push(i);
                    }
                }
            }
            (done, aborted)
        });
        if name == "current-thread" {
            assert!(aborted.len() >= N / 2, "{name}: {} abandoned before their first poll", aborted.len());
        }
        // Every READ still in flight holds its buffer with the queue (read in this order: a
        // completion meanwhile releases a buffer only after its request is complete), and only
        // abandoned ones do.
        let parked = r.pair.a.parked_buffers();
        let in_flight = r.pair.a.outstanding().0 as usize;
        assert!(parked >= in_flight, "{name}: {in_flight} READs in flight, {parked} buffers held");
        assert!(parked <= aborted.len(), "{name}: {parked} buffers held, {} abandoned", aborted.len());
        until_unparked(&r.pair.a, &r.cq_a);
        // Each abandoned READ's data landed in its parked buffer before it was released.
        for &i in &aborted {
            let got = read_back(&r.pd, &r.pair.b, remotes[i], LEN);
            assert!(got.iter().all(|&b| b == i as u8 + 1), "{name}: READ {i} did not land in its parked buffer");
        }
        // A buffer that came back holds its data, and nothing writes it afterwards.
        let mut done = done;
        for (i, buf) in done.iter_mut() {
            assert!(buf.as_slice().iter().all(|&b| b == *i as u8 + 1), "{name}: READ {i}");
            buf.as_mut_slice().fill(0xC3);
        }
        std::thread::sleep(Duration::from_millis(50));
        r.cq_a.progress().unwrap();
        for (i, buf) in &done {
            assert!(buf.as_slice().iter().all(|&b| b == 0xC3), "{name}: returned buffer {i} was written");
        }
        drop((keep, source));
    }
}

#[test]
fn futures_dropped_before_their_first_poll_park_their_buffers() {
    for (name, rt) in runtimes() {
        let r = async_rig();
        rt.block_on(async {
            let mut futs = Vec::new();
            for _ in 0..4 {
                let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
                futs.push(completion(t));
            }
            drop(futs);
        });
        assert_eq!(r.pair.b.parked_buffers(), 4, "{name}: never polled, all parked");
        for i in 0..4u8 {
            send_sync(&r.pd, &r.pair.a, &[i; 8]);
        }
        until_unparked(&r.pair.b, &r.cq_b);
        // The next receive is a fresh one: the four messages went to the parked buffers.
        rt.block_on(async {
            let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
            send_sync(&r.pd, &r.pair.a, b"fifth");
            let (c, buf) = timeout(WAIT, t).await.expect("bounded").map_err(|e| e.error).unwrap();
            assert!(c.is_success(), "{name}: {c:?}");
            assert_eq!(&buf.as_slice()[..5], b"fifth", "{name}");
        });
    }
}

#[test]
fn a_runtime_shut_down_with_futures_waiting_parks_their_buffers_and_a_new_runtime_serves_the_channel() {
    for (name, rt) in runtimes() {
        let r = async_rig();
        let resolved = Arc::new(AtomicUsize::new(0));
        for _ in 0..4 {
            let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
            let resolved = Arc::clone(&resolved);
            rt.spawn(async move {
                let _ = t.await;
                resolved.fetch_add(1, Ordering::SeqCst);
            });
        }
        // Let every task start waiting, then shut the runtime down under them.
        rt.block_on(async { sleep(Duration::from_millis(50)).await });
        rt.shutdown_timeout(Duration::from_secs(5));
        assert_eq!(resolved.load(Ordering::SeqCst), 0, "{name}: nothing was sent");
        assert_eq!(r.pair.b.parked_buffers(), 4, "{name}: the dropped futures' chunks are parked");
        for _ in 0..4 {
            send_sync(&r.pd, &r.pair.a, b"after shutdown");
        }
        until_unparked(&r.pair.b, &r.cq_b);
        // The same channel, served by a task of a new runtime.
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
            let waiting = tokio::spawn(t.into_future());
            sleep(Duration::from_millis(20)).await;
            send_sync(&r.pd, &r.pair.a, b"new runtime");
            let (c, buf) = timeout(WAIT, waiting).await.expect("bounded").unwrap().map_err(|e| e.error).unwrap();
            assert!(c.is_success(), "{name}: {c:?}");
            assert_eq!(&buf.as_slice()[..11], b"new runtime", "{name}");
        });
    }
}

#[test]
fn a_task_panicking_with_a_receive_in_flight_parks_its_buffer() {
    for (name, rt) in runtimes() {
        let r = async_rig();
        let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
        let joined = rt.block_on(async {
            let task = tokio::spawn(async move {
                let mut fut = t.into_future();
                // Polled (it registers and waits), then the task panics holding it.
                tokio::select! {
                    biased;
                    got = &mut fut => panic!("nothing was sent, yet {got:?}"),
                    _ = sleep(Duration::from_millis(20)) => {}
                }
                panic!("a task panics with a receive in flight");
            });
            timeout(WAIT, task).await.expect("bounded")
        });
        assert!(joined.expect_err("the task panicked").is_panic(), "{name}");
        assert_eq!(r.pair.b.parked_buffers(), 1, "{name}: the unwound future's chunk is parked");
        send_sync(&r.pd, &r.pair.a, b"after the panic");
        until_unparked(&r.pair.b, &r.cq_b);
    }
}

/// Counts the polls of a future.
struct Counted<F> {
    inner: F,
    polls: Arc<AtomicUsize>,
}

impl<F: Future + Unpin> Future for Counted<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        Pin::new(&mut self.inner).poll(cx)
    }
}

#[test]
fn an_idle_future_is_not_polled_in_a_loop_and_wakes_for_its_completion() {
    idle_receive_then_woken(0);
}

/// `Cq::set_await_polls`: a future that misses its completion polls the CQ that many more
/// times, yielding to the runtime between polls, then sleeps until the event as with none.
#[test]
fn a_future_polls_as_many_more_times_as_its_cq_says_then_sleeps_and_wakes_for_its_completion() {
    idle_receive_then_woken(50);
}

/// A receive of 64 bytes on `r`'s QP b, awaited, its polls counted.
fn counted_receive(r: &AsyncRig) -> (Counted<typed_verbs::owned::OwnedCompletion<Chunk<Rx>>>, Arc<AtomicUsize>) {
    let polls = Arc::new(AtomicUsize::new(0));
    let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
    (Counted { inner: t.into_future(), polls: Arc::clone(&polls) }, polls)
}

/// On each runtime, a receive future spawned with nothing sent, its CQ asking for `polls`
/// polls before sleeping: in 300 ms of waiting it is polled `polls + 1` times (its first poll
/// and the polls; once more for a spurious wake-up), then the message wakes it and it resolves
/// within two more polls.
fn idle_receive_then_woken(polls: u32) {
    for (name, rt) in runtimes() {
        let r = async_rig();
        assert_eq!(r.cq_b.await_polls(), 0, "{name}: the default arms at the first miss");
        r.cq_b.set_await_polls(polls);
        assert_eq!(r.cq_b.await_polls(), polls, "{name}");
        let (fut, count) = counted_receive(&r);
        rt.block_on(async {
            let task = tokio::spawn(fut);
            sleep(Duration::from_millis(300)).await;
            let idle = count.load(Ordering::SeqCst);
            let expected = polls as usize + 1;
            assert!((expected..=expected + 1).contains(&idle), "{name}: polled {idle} times in 300 ms of waiting");
            send_sync(&r.pd, &r.pair.a, b"wake up");
            let (c, buf) = timeout(WAIT, task).await.expect("bounded").unwrap().map_err(|e| e.error).unwrap();
            assert!(c.is_success(), "{name}: {c:?}");
            assert_eq!(&buf.as_slice()[..7], b"wake up", "{name}");
            let total = count.load(Ordering::SeqCst);
            assert!(total <= idle + 2, "{name}: {total} polls to take one completion");
        });
    }
}

/// A completion that lands while its future polls is taken by a poll: the future never arms
/// the CQ, so no driver task is started for the channel and no event is left on it.
#[test]
fn a_completion_that_lands_while_its_future_polls_is_taken_without_the_event() {
    for (name, rt) in runtimes() {
        let r = async_rig();
        r.cq_b.set_await_polls(u32::MAX);
        let (fut, polls) = counted_receive(&r);
        rt.block_on(async {
            let task = tokio::spawn(fut);
            // It polls again and again while nothing was sent. (Waited for, bounded: on a
            // loaded emulator its worker may get no time for a while.)
            let start = Instant::now();
            while polls.load(Ordering::SeqCst) < 2 {
                let n = polls.load(Ordering::SeqCst);
                assert!(start.elapsed() < WAIT, "{name}: polled {n} times in {WAIT:?} while nothing was sent");
                sleep(Duration::from_millis(5)).await;
            }
            send_sync(&r.pd, &r.pair.a, b"taken by a poll");
            let (c, buf) = timeout(WAIT, task).await.expect("bounded").unwrap().map_err(|e| e.error).unwrap();
            assert!(c.is_success(), "{name}: {c:?}");
            assert_eq!(&buf.as_slice()[..15], b"taken by a poll", "{name}");
            // The poll that takes it may be one counted before the loop above ended (on the
            // multi-threaded runtime it may wait meanwhile for the CQ's routing lock, which the
            // send's own wait holds while it routes the receive).
            // The finished task leaves the count just after it wakes its `JoinHandle` (on the
            // multi-threaded runtime, possibly after this); a driver task would stay.
            let start = Instant::now();
            while rt.metrics().num_alive_tasks() > 0 {
                assert!(
                    start.elapsed() < Duration::from_secs(1),
                    "{name}: a driver task: something slept on the channel"
                );
                sleep(Duration::from_millis(1)).await;
            }
        });
        let event = r.ch.wait(Duration::from_millis(100));
        assert!(matches!(event, Err(Error::Timeout { .. })), "{name}: the CQ was armed: {event:?}");
    }
}

/// A future dropped while it polls (a `select!` timeout) drops its token as at any other point:
/// the buffer is parked, and a message that arrives afterwards lands only there.
#[test]
fn a_receive_dropped_while_its_future_polls_stays_parked_and_the_late_message_lands_only_there() {
    for (name, rt) in runtimes() {
        let r = async_rig();
        r.cq_b.set_await_polls(u32::MAX);
        let mut region = chunks(&r.pd, 2, 64);
        let keep = region.pop().unwrap();
        let mut dropped = region.pop().unwrap();
        dropped.as_mut_slice().fill(0xEE);
        let dropped_remote = dropped.remote();
        let polls = Arc::new(AtomicUsize::new(0));
        rt.block_on(async {
            let t = r.pair.b.post_recv_owned(wr::Recv::new(dropped)).unwrap();
            let fut = Counted { inner: t.into_future(), polls: Arc::clone(&polls) };
            tokio::select! {
                got = fut => panic!("{name}: nothing was sent, yet {got:?}"),
                _ = sleep(Duration::from_millis(50)) => {}
            }
        });
        assert!(polls.load(Ordering::SeqCst) > 1, "{name}: the future was dropped while it polled");
        assert_the_late_message_lands_only_in_the_parked_chunk(&r, dropped_remote, name);
        drop(keep);
    }
}

#[test]
fn a_thousand_futures_over_eight_qp_pairs_sharing_one_cq_each_resolve_exactly_once() {
    const PAIRS: usize = 8;
    const PER_PAIR: [usize; PAIRS] = [63, 63, 63, 63, 62, 62, 62, 62]; // 500 messages
    for (name, rt) in runtimes() {
        let ctx = open();
        let pd = ctx.alloc_pd().unwrap();
        let ch = ctx.create_comp_channel().unwrap();
        // 16 QPs, each reserving 64 send and 64 receive entries.
        let cq = ctx.create_cq_with_channel(2048, &ch).unwrap();
        let pairs: Vec<RcPair> = (0..PAIRS).map(|_| rc_pair(&pd, &cq, &cq, Access::NONE, QpCaps::default())).collect();
        let resolved = Arc::new(AtomicUsize::new(0));
        let (ids, sends) = rt.block_on(async {
            let mut receives = Vec::new();
            let mut sends = Vec::new();
            for (p, pair) in pairs.iter().enumerate() {
                for _ in 0..PER_PAIR[p] {
                    let t = pair.b.post_recv_owned(wr::Recv::new(chunks(&pd, 1, 8).remove(0))).unwrap();
                    let resolved = Arc::clone(&resolved);
                    receives.push(tokio::spawn(async move {
                        let got = t.await;
                        resolved.fetch_add(1, Ordering::SeqCst);
                        got
                    }));
                }
            }
            let mut id = 0u32;
            for (p, pair) in pairs.iter().enumerate() {
                for _ in 0..PER_PAIR[p] {
                    let mut m = chunks(&pd, 1, 8).remove(0);
                    m.as_mut_slice()[..4].copy_from_slice(&id.to_le_bytes());
                    id += 1;
                    let t = pair.a.post_send_owned(wr::Send::new(m)).unwrap();
                    let resolved = Arc::clone(&resolved);
                    sends.push(tokio::spawn(async move {
                        let got = t.await;
                        resolved.fetch_add(1, Ordering::SeqCst);
                        got
                    }));
                }
            }
            let mut ids = Vec::new();
            for t in receives {
                let (c, buf) = timeout(WAIT, t).await.expect("bounded").unwrap().map_err(|e| e.error).unwrap();
                assert!(c.is_success(), "{name}: {c:?}");
                ids.push(u32::from_le_bytes(buf.as_slice()[..4].try_into().unwrap()));
            }
            let mut ok = 0;
            for t in sends {
                let (c, _) = timeout(WAIT, t).await.expect("bounded").unwrap().map_err(|e| e.error).unwrap();
                assert!(c.is_success(), "{name}: {c:?}");
                ok += 1;
            }
            (ids, ok)
        });
        assert_eq!(sends, 500, "{name}");
        assert_eq!(resolved.load(Ordering::SeqCst), 1000, "{name}: every future resolved once");
        let distinct: BTreeSet<u32> = ids.iter().copied().collect();
        assert_eq!((ids.len(), distinct.len()), (500, 500), "{name}: a message delivered twice or lost");
        assert_eq!(distinct.iter().next_back(), Some(&499), "{name}");
        assert_eq!(cq.progress().unwrap(), 0, "{name}: a completion was left in the CQ");
        for pair in &pairs {
            assert_eq!(pair.a.parked_buffers() + pair.b.parked_buffers(), 0, "{name}");
        }
        drop(ch);
    }
}

#[test]
fn shared_receive_queue_receives_are_awaited_and_an_srq_without_a_qp_is_a_typed_error() {
    for (name, rt) in runtimes() {
        let ctx = open();
        let pd = ctx.alloc_pd().unwrap();
        let ch = ctx.create_comp_channel().unwrap();
        let cq = ctx.create_cq_with_channel(256, &ch).unwrap();
        let srq = pd.create_srq(16).unwrap();
        // No QP takes receives from the SRQ yet: it completes on no CQ.
        let early = srq.post_recv_owned(wr::Recv::new(chunks(&pd, 1, 64).remove(0))).unwrap();
        let early = rt.block_on(async {
            match timeout(WAIT, early.into_future()).await.expect("resolves at once") {
                Err(e) => {
                    assert!(matches!(e.error, Error::NoCompletionChannel { .. }), "{name}: {:?}", e.error);
                    e.token
                }
                Ok(got) => panic!("{name}: {got:?}"),
            }
        });
        let sq = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
        let rq = pd.create_qp::<RC>(&QpConfig::new(&cq).srq(&srq)).unwrap();
        let (es, er) = (sq.endpoint(PORT, gid_index(), 0x10).unwrap(), rq.endpoint(PORT, gid_index(), 0x20).unwrap());
        let (sq, _rq) = (connect_rc(sq, Access::NONE, &es, &er), connect_rc(rq, Access::NONE, &er, &es));
        rt.block_on(async {
            // The early receive, awaited again now that a QP completes it on `cq`.
            let waiting = tokio::spawn(early.into_future());
            let more: Vec<_> = (0..3)
                .map(|_| {
                    tokio::spawn(completion(srq.post_recv_owned(wr::Recv::new(chunks(&pd, 1, 64).remove(0))).unwrap()))
                })
                .collect();
            sleep(Duration::from_millis(20)).await;
            for i in 0..4u8 {
                let t = sq.post_send_owned(wr::Send::new(message(&pd, &[i; 16]))).unwrap();
                let (c, _) = timeout(WAIT, t).await.expect("bounded").map_err(|e| e.error).unwrap();
                assert!(c.is_success(), "{name}: {c:?}");
            }
            let mut got = BTreeSet::new();
            for t in std::iter::once(waiting).chain(more) {
                let (c, buf) = timeout(WAIT, t).await.expect("bounded").unwrap().map_err(|e| e.error).unwrap();
                assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, 16), "{name}: {c:?}");
                got.insert(buf.as_slice()[0]);
            }
            assert_eq!(got, (0..4u8).collect::<BTreeSet<_>>(), "{name}: each message once");
        });
    }
}

/// `examples/async_echo`: the server and the client on the device's address, 4 connections of
/// 16 requests in flight each; both exit 0 and report every message echoed and every reply
/// verified.
#[test]
fn the_async_echo_example_verifies_every_reply() {
    let ip = crate::cm::local_ip().to_string();
    let port = TcpPort::CmAsyncEcho.get().to_string();
    let common = |role: &str| -> Vec<String> {
        [role, "-s", &ip, "-p", &port, "--connections", "4", "--depth", "16", "-t", "120"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let mut server = Proc::spawn("async_echo server", &example("async_echo"), &common("server"));
    if let Err(e) = server.wait_for_line("server listening", WAIT) {
        server.stop();
        panic!("{e}\n{}", server.output());
    }
    let mut client_args = common("client");
    client_args.extend(["-n".to_string(), "128".to_string()]);
    let mut client = Proc::spawn("async_echo client", &example("async_echo"), &client_args);
    let out = client.expect_success(Duration::from_secs(150));
    for i in 0..4 {
        assert!(out.contains(&format!("client: connection {i}: 128 replies verified")), "{out}");
    }
    assert!(out.contains("async_echo: client: 4 connections, 512 replies verified"), "{out}");
    let out = server.expect_success(Duration::from_secs(30));
    assert!(out.contains("async_echo: server: 4 connections, 512 messages echoed"), "{out}");
}

/// The channel's driver task: started by the first future that has to wait on a runtime, kept
/// while no future waits (the next waiting future starts no other task and registers nothing
/// again with the reactor), and ended once the channel is dropped, the runtime still running.
#[test]
fn the_driver_task_stays_while_idle_and_ends_with_its_channel() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let r = async_rig();
    assert_eq!(rt.metrics().num_alive_tasks(), 0);
    for round in 0..3u8 {
        rt.block_on(async {
            let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
            let mut fut = t.into_future();
            let waited = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut fut).poll(cx).is_pending())).await;
            assert!(waited, "round {round}: nothing was sent yet");
            send_sync(&r.pd, &r.pair.a, &[round; 8]);
            let (c, buf) = timeout(WAIT, fut).await.expect("bounded").map_err(|e| e.error).unwrap();
            assert!(c.is_success(), "round {round}: {c:?}");
            assert_eq!(&buf.as_slice()[..8], &[round; 8]);
            // Idle now: the runtime runs its tasks for a while.
            sleep(Duration::from_millis(20)).await;
        });
        assert_eq!(rt.metrics().num_alive_tasks(), 1, "round {round}: one driver task, kept while idle");
    }
    drop(r);
    rt.block_on(async {
        let start = Instant::now();
        while rt.metrics().num_alive_tasks() > 0 {
            assert!(start.elapsed() < WAIT, "the driver task outlived its channel");
            sleep(Duration::from_millis(1)).await;
        }
    });
}

/// After futures awaited on a channel, its driver task idles and reads no event: the
/// program's own `wait_async` on the same channel, on the same runtime, gets the event of a
/// CQ it armed itself.
#[test]
fn an_idle_driver_task_leaves_the_channels_events_to_the_programs_own_wait() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let r = async_rig();
    rt.block_on(async {
        // A future waits (the driver task starts), resolves; the driver idles.
        let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
        let waiting = tokio::spawn(t.into_future());
        sleep(Duration::from_millis(20)).await;
        send_sync(&r.pd, &r.pair.a, b"to the future");
        let (c, _) = timeout(WAIT, waiting).await.expect("bounded").unwrap().map_err(|e| e.error).unwrap();
        assert!(c.is_success(), "{c:?}");
        assert_eq!(rt.metrics().num_alive_tasks(), 1, "the driver task idles");
        for round in 0..3u8 {
            // The program's own event loop on the same channel: arm, receive, wait for the event.
            let scratch = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
            r.cq_b.req_notify(false).unwrap();
            send_sync(&r.pd, &r.pair.a, &[round; 4]);
            let ev =
                timeout(WAIT, r.ch.wait_async()).await.expect("the event was not taken by the idle driver").unwrap();
            assert!(ev.cq().same_as(&r.cq_b), "round {round}: the event names the receive CQ");
            let (c, buf) = scratch.wait(WAIT).map_err(|e| e.error).unwrap();
            assert!(c.is_success(), "round {round}: {c:?}");
            assert_eq!(&buf.as_slice()[..4], &[round; 4]);
        }
    });
}

/// Two threads ping-pong over one channel, each driving its side with `block_on` on the same
/// runtime, one request at a time: nearly every await waits alone, so the channel's driver task
/// goes idle between them (no future waiting) and the next waiting future, on either thread,
/// must wake it (`add_waiter`) while it may be storing its waker on a worker thread. A lost
/// wake-up leaves an await unserved, and its bound fails the test; every payload is checked.
#[test]
fn a_ping_pong_of_lone_awaits_on_two_threads_wakes_the_idle_driver_every_time() {
    const ROUNDS: u32 = 300;
    for (name, rt) in runtimes() {
        let r = async_rig();
        let awaited = |what: &str, i: u32| format!("{name}: round {i}: {what}");
        // One receive posted ahead on each side before either starts.
        let first_a = r.pair.a.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 8).remove(0))).unwrap();
        let first_b = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 8).remove(0))).unwrap();
        let (rt, r) = (&rt, &r);
        std::thread::scope(|s| {
            let pinger = s.spawn(move || {
                rt.block_on(async {
                    let mut recv = first_a;
                    for i in 0..ROUNDS {
                        let sent = r.pair.a.post_send_owned(wr::Send::new(message(&r.pd, &i.to_le_bytes()))).unwrap();
                        let (c, _) = timeout(WAIT, sent)
                            .await
                            .unwrap_or_else(|_| panic!("{}", awaited("ping's send", i)))
                            .unwrap();
                        assert!(c.is_success(), "{}: {c:?}", awaited("ping's send", i));
                        let (c, buf) =
                            timeout(WAIT, recv).await.unwrap_or_else(|_| panic!("{}", awaited("pong", i))).unwrap();
                        assert!(c.is_success(), "{}: {c:?}", awaited("pong", i));
                        assert_eq!(&buf.as_slice()[..4], &(!i).to_le_bytes(), "{}", awaited("pong", i));
                        recv = r.pair.a.post_recv_owned(wr::Recv::new(buf)).unwrap();
                    }
                    recv
                })
            });
            let ponger = s.spawn(move || {
                rt.block_on(async {
                    let mut recv = first_b;
                    for i in 0..ROUNDS {
                        let (c, buf) =
                            timeout(WAIT, recv).await.unwrap_or_else(|_| panic!("{}", awaited("ping", i))).unwrap();
                        assert!(c.is_success(), "{}: {c:?}", awaited("ping", i));
                        assert_eq!(&buf.as_slice()[..4], &i.to_le_bytes(), "{}", awaited("ping", i));
                        recv = r.pair.b.post_recv_owned(wr::Recv::new(buf)).unwrap();
                        let sent =
                            r.pair.b.post_send_owned(wr::Send::new(message(&r.pd, &(!i).to_le_bytes()))).unwrap();
                        let (c, _) = timeout(WAIT, sent)
                            .await
                            .unwrap_or_else(|_| panic!("{}", awaited("pong's send", i)))
                            .unwrap();
                        assert!(c.is_success(), "{}: {c:?}", awaited("pong's send", i));
                    }
                    recv
                })
            });
            // The receives left posted after the last round: nothing was sent to them.
            let (left_a, left_b) = (pinger.join().unwrap(), ponger.join().unwrap());
            assert!(!left_a.is_complete() && !left_b.is_complete(), "{name}: a message too many arrived");
        });
        assert_eq!(r.cq_a.progress().unwrap() + r.cq_b.progress().unwrap(), 0, "{name}: a completion was left");
    }
}
