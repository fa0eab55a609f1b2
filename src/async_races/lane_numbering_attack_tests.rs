//! Attacks over the fake device of `async_races` on the send lane's one-comparison success
//! (`CqShared::poll_for_lane` matching `wr_id == awaited` first, `LaneBook::complete_awaited`
//! checking only `seq < done`) and on `LaneBook::reset_from` (a pushed-out completion reported
//! "gone", a forced reset reported only from `reset_from` on): post lists refused at every index
//! with and without `bad_wr` naming a request, forced first signals, made-up completions carrying
//! the awaited number (from another QP, with an error status), the refused numbers, and numbers
//! past `posted`; lanes reopened across scopes after a drain's forced reset.

use super::*;
use crate::wc::WcStatus;
use crate::Error;

/// `(posted, done, first_error, reset_from)` of a lane book, read from its `Debug`.
fn book(lane: &crate::queue::LaneBook) -> (u64, u64, u64, u64) {
    let s = format!("{lane:?}");
    let field = |name: &str| -> u64 {
        let at = s.find(&format!("{name}: ")).unwrap_or_else(|| panic!("no {name} in {s}")) + name.len() + 2;
        s[at..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
    };
    (field("posted"), field("done"), field("first_error"), field("reset_from"))
}

/// The book never says more is complete than was posted: `outstanding()` saturates, so a
/// `done` past `posted` would hand back prepared requests whose memory is still in flight.
fn assert_sane(shared: &QpShared, when: &str) {
    let (posted, done, _, _) = book(&shared.sq.lane);
    assert!(done <= posted, "{when}: the lane book has done {done:#x} > posted {posted:#x}");
}

/// A lane's token T0 is outstanding when a post list of three is refused: at each index with
/// `bad_wr` naming it, with `bad_wr` NULL, and naming a foreign request; the list's first request
/// forced signaled or not. Then the device makes up completions: T0's own number with success
/// but another QP's number, T0's number with an error status on another QP, every number of the
/// list the provider did not take, and numbers past `posted`; all polled by another poll than
/// the lane's wait. None of them completes T0 (its wait times out, its prepared request is not
/// handed back), the book never has `done > posted`, and T0's own completion then completes it.
/// The list's taken prefix is settled by a later signaled request, never by the made-up ones.
#[test]
fn made_up_completions_around_a_refused_list_never_complete_an_awaited_token() {
    let answers: Vec<Answer> =
        (0..3).map(Answer::RefuseAt).chain([Answer::RefuseNull, Answer::RefuseNamingOther]).collect();
    for (case, answer) in answers.into_iter().enumerate() {
        for forced_first in [false, true] {
            bounded(20, move || {
                let w = World::new();
                let (cq, fake) = w.cq();
                let qpn = 0xe10 + (case as u32) * 2 + u32::from(forced_first);
                let (mut qp, shared) = w.rc_qp(qpn, 16, &cq);
                let what = format!("{answer:?}, forced first {forced_first}");
                let r = scope(|s| {
                    let mut lane = s.send_lane(&mut qp).expect("lane");
                    let mut wr = lane.prepare(Read::new(w.local_mut(0x1000, 64), remote())).expect("prepared");
                    let wrs: Vec<_> = (0..3u64).map(|k| Write::new(w.local(0x4000 + 64 * k, 8), remote())).collect();
                    let mut list = lane.prepare_list(wrs, 3).expect("list");
                    let t0 = lane.post(&mut wr).expect("posted");
                    let s0 = sends(&shared).last().unwrap().0;
                    if forced_first {
                        // A run of unsignaled requests after T0 so long that the list's
                        // unsignaled lead (two) would pass the forced signal (half the depth
                        // after T0): its first request is signaled.
                        for _ in 0..7 {
                            lane.post_unsignaled(&mut wr).expect("taken");
                        }
                    }
                    let before = sends(&shared).len();
                    let (posted_before, ..) = book(&shared.sq.lane);
                    answer_next(&shared, answer);
                    lane.post_list(&mut list).expect_err("refused");
                    assert_sane(&shared, &what);
                    let took = sends(&shared)[before..].to_vec();
                    if let Some(&(_, signaled)) = took.first() {
                        assert_eq!(signaled, forced_first, "{what}: the list's first request's signal");
                    }
                    let (posted, ..) = book(&shared.sq.lane);
                    // The provider's word: the prefix it named as taken, or the whole list.
                    let expect_posted = match answer {
                        Answer::RefuseAt(i) => posted_before + i as u64,
                        _ => posted_before + 3,
                    };
                    assert_eq!(posted, expect_posted, "{what}: posted after the refusal");
                    // Made-up completions.
                    fake.complete(wc_of(0x7abc, s0, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
                    fake.complete(wc_of(0x7abc, s0, sys::IBV_WC_REM_ACCESS_ERR, sys::IBV_WC_RDMA_READ));
                    for id in posted..posted + 8 {
                        for status in [sys::IBV_WC_SUCCESS, sys::IBV_WC_WR_FLUSH_ERR] {
                            fake.complete(wc_of(qpn, id, status, sys::IBV_WC_RDMA_WRITE));
                        }
                    }
                    cq.take_all().unwrap();
                    assert_sane(&shared, &what);
                    let (_, done, first_error, _) = book(&shared.sq.lane);
                    assert!(done <= s0, "{what}: a made-up completion completed T0 (done {done:#x}, T0 {s0:#x})");
                    assert_eq!(first_error, u64::MAX, "{what}: a made-up failure was recorded");
                    // The lane's own wait polls the same made-up numbers again: nothing.
                    for id in [s0 + 100, posted, posted + 1] {
                        fake.complete(wc_of(qpn, id, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
                    }
                    let e = lane.wait(t0, Duration::from_millis(30)).expect_err("T0 did not complete");
                    assert!(matches!(e.error, Error::Timeout { .. }), "{what}: {:?}", e.error);
                    assert_sane(&shared, &what);
                    let wr = wr.into_inner().expect_err("T0's READ destination is still in flight");
                    let list = list.into_inner().expect_err("lane requests in flight");
                    fake.complete(wc_of(qpn, s0, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
                    let c = lane.wait(e.token, Duration::from_secs(1)).expect("own completion");
                    assert!(c.is_success(), "{what}: {c:?}");
                    assert_sane(&shared, &what);
                    // Whatever of the list (or of the unsignaled run) is still outstanding is
                    // settled by a later signaled request.
                    let mut wr = wr;
                    if lane.outstanding() > 0 {
                        let t = lane.post(&mut wr).expect("posted");
                        let last = sends(&shared).last().unwrap().0;
                        fake.complete(wc_of(qpn, last, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
                        assert!(lane.wait(t, Duration::from_secs(1)).expect("completes").is_success());
                    }
                    assert_eq!(lane.outstanding(), 0, "{what}");
                    assert_sane(&shared, &what);
                    wr.into_inner().expect("nothing outstanding");
                    list.into_inner().expect("nothing outstanding");
                });
                assert!(r.is_ok(), "{what}: {r:?}");
                assert!(shared.check_usable().is_ok(), "{what}");
            });
        }
    }
}

/// A list refused at index 0 with `bad_wr` naming its first request unposts its numbers, and the
/// next request takes the first of them: a completion the device made up for that number while
/// it was unposted, polled (by another poll) before the number was reused, is gone and cannot
/// complete the new request; the new request's wait times out until its own completion comes.
#[test]
fn a_made_up_completion_of_an_unposted_number_polled_before_its_reuse_is_no_answer() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0xe30, 8, &cq);
        let r = scope(|s| {
            let mut lane = s.send_lane(&mut qp).expect("lane");
            let mut wr = lane.prepare(Read::new(w.local_mut(0x1000, 64), remote())).expect("prepared");
            let wrs: Vec<_> = (0..2u64).map(|k| Write::new(w.local(0x4000 + 64 * k, 8), remote())).collect();
            let mut list = lane.prepare_list(wrs, 1).expect("list");
            let (first, ..) = book(&shared.sq.lane);
            answer_next(&shared, Answer::RefuseAt(0));
            lane.post_list(&mut list).expect_err("refused");
            assert_eq!(book(&shared.sq.lane).0, first, "nothing was posted");
            fake.complete(wc_of(0xe30, first, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
            fake.complete(wc_of(0xe30, first + 1, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
            cq.take_all().unwrap();
            assert_sane(&shared, "after made-up completions of unposted numbers");
            let t = lane.post(&mut wr).expect("posted");
            assert_eq!(sends(&shared).last().unwrap().0, first, "the number is reused");
            let e = lane.wait(t, Duration::from_millis(30)).expect_err("not complete");
            assert!(matches!(e.error, Error::Timeout { .. }), "{:?}", e.error);
            let wr = wr.into_inner().expect_err("in flight");
            fake.complete(wc_of(0xe30, first, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
            assert!(lane.wait(e.token, Duration::from_secs(1)).expect("own").is_success());
            wr.into_inner().expect("done");
        });
        assert!(r.is_ok(), "{r:?}");
    });
}

/// `reset_from` across a drain's forced reset and the lane's reopening in a later scope. Scope
/// 1's send lane ends with an unsignaled tail, which the drain settles by ERR and RESET
/// (`QpBroken`): its book records the reset from the tail's first number. The program resets
/// the QP (here: what `Qp::reset` does in the library) and a scope 2 opens a lane again: the
/// book's `reset_from` and `first_error` are cleared, so a token of the new lane whose failed
/// completion is pushed out of the bounded store says "gone", not a forced reset, and the first
/// failure is still reported as the device gave it. A scope 3 then ends with nothing
/// outstanding: no reset, and the book still records none.
#[test]
fn a_lane_reopened_after_a_forced_reset_reports_a_pushed_out_completion_gone() {
    bounded(30, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0xe40, 2, &cq);
        let r = scope(|s| {
            let mut lane = s.send_lane(&mut qp).expect("lane");
            let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
            lane.post_unsignaled(&mut wr).expect("taken");
            book(&shared.sq.lane).1
        });
        assert!(matches!(r, Err(Error::QpBroken { .. })), "the uncovered tail forces a reset: {r:?}");
        let (posted, done, first_error, reset_from) = book(&shared.sq.lane);
        assert_eq!(done, posted, "the reset completed the tail");
        assert!(reset_from < posted, "the reset is recorded: reset_from {reset_from:#x}");
        assert_eq!(first_error, reset_from);
        shared.fake_after_reset();
        assert!(shared.check_usable().is_ok());
        let r = scope(|s| {
            let mut lane = s.send_lane(&mut qp).expect("lane reopens");
            let (_, _, first_error, reset_from) = book(&shared.sq.lane);
            assert_eq!((first_error, reset_from), (u64::MAX, u64::MAX), "the reopened lane starts clean");
            let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
            let t0 = lane.post(&mut wr).expect("posted");
            let s0 = sends(&shared).last().unwrap().0;
            fake.complete(wc_of(0xe40, s0, sys::IBV_WC_REM_ACCESS_ERR, sys::IBV_WC_RDMA_WRITE));
            cq.poll_and_route().unwrap();
            let t1 = lane.post(&mut wr).expect("posted");
            let s1 = sends(&shared).last().unwrap().0;
            fake.complete(wc_of(0xe40, s1, sys::IBV_WC_WR_FLUSH_ERR, 0));
            cq.poll_and_route().unwrap();
            for _ in 0..2 {
                let _t = lane.post(&mut wr).expect("posted");
                let sn = sends(&shared).last().unwrap().0;
                fake.complete(wc_of(0xe40, sn, sys::IBV_WC_WR_FLUSH_ERR, 0));
                cq.poll_and_route().unwrap();
            }
            let e = lane.wait(t1, Duration::from_secs(1)).expect_err("its completion was pushed out");
            assert!(
                matches!(&e.error, Error::InvalidArgument { reason, .. } if reason.contains("gone")),
                "a pushed-out completion of a reopened lane: {:?}",
                e.error
            );
            let c0 = lane.wait(t0, Duration::from_secs(1)).expect("complete");
            assert_eq!(c0.status(), WcStatus::RemAccessErr, "the first failure: {c0:?}");
            assert_eq!(lane.outstanding(), 0);
        });
        assert!(r.is_ok(), "{r:?}");
        let r = scope(|s| {
            let mut lane = s.send_lane(&mut qp).expect("lane reopens");
            let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
            let t = lane.post(&mut wr).expect("posted");
            let sn = sends(&shared).last().unwrap().0;
            fake.complete(wc_of(0xe40, sn, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
            assert!(lane.wait(t, Duration::from_secs(1)).expect("own").is_success());
        });
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(book(&shared.sq.lane).3, u64::MAX, "no reset since the lane reopened");
    });
}

/// A lane that cannot open (its send queue has an owned request outstanding) leaves the book
/// as it was: `open_book` opens the lane's book (which clears `first_error`, `reset_from`, the
/// kept completions and the covered mark) only for a queue with nothing outstanding. The
/// numbering goes on where it was.
#[test]
fn a_refused_lane_opening_leaves_the_numbering_where_it_was() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0xe50, 4, &cq);
        let r = scope(|s| {
            let mut lane = s.send_lane(&mut qp).expect("lane");
            let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
            let t = lane.post(&mut wr).expect("posted");
            let sn = sends(&shared).last().unwrap().0;
            fake.complete(wc_of(0xe50, sn, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
            assert!(lane.wait(t, Duration::from_secs(1)).expect("own").is_success());
        });
        assert!(r.is_ok(), "{r:?}");
        let (posted, done, ..) = book(&shared.sq.lane);
        let owned = post_send(&shared, true);
        let r = scope(|s| {
            let e = s.send_lane(&mut qp).expect_err("an owned request is outstanding");
            assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        });
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(book(&shared.sq.lane).0, posted, "a refused opening moved the numbering");
        assert_eq!(book(&shared.sq.lane).1, done);
        drop(owned);
        let _ = &fake;
    });
}
