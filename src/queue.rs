//! Book-keeping of the work requests outstanding on one work queue (pure logic, no FFI).
//!
//! Each posted work request gets the next sequence number of its queue, which is also its
//! `wr_id` (with the top bit telling the receive queue from the send queue). Completions of a
//! work queue arrive in posting order, and an unsignaled send request is complete once any
//! later request of the same send queue has completed (ibv_post_send(3), completion ordering).
//! A send queue's book ([`SendBook`]) keeps counters and the completions a request has of its
//! own; a receive queue's ([`WorkQueue`]) records, for each sequence number, whether it is
//! still pending, completed (with its [`Completion`]) or already consumed. Both refuse new
//! requests beyond the queue depth ([`Book`]).

use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Lock, LockGuard, Mutex, MutexGuard, Ordering};
use std::collections::VecDeque;

use crate::wc::Completion;

/// The top bit of a `wr_id`: set for receive-queue requests.
pub(crate) const RECV_BIT: u64 = 1 << 63;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Posted, not completed. `covered`: a completion of its own will come (a signaled send,
    /// an accepted receive); an unsignaled send, or a request the provider refused after it may
    /// have queued it, is not covered. `abandoned`: nobody will consume the result.
    Pending { covered: bool, abandoned: bool },
    /// Completed; the result awaits its consumer.
    Done(Completion),
    /// Completed and consumed (or abandoned): only kept until the front of the deque moves.
    Gone,
}

/// A request set aside pending ([`WorkQueue::set_aside`]): its number, its
/// [`Slot::Pending`] fields and its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stuck {
    seq: u64,
    covered: bool,
    abandoned: bool,
    owner: u64,
}

/// What `try_take` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// The request completed; its result is handed over (once).
    Done(Completion),
    /// Still outstanding.
    Pending,
    /// No such request (never posted here, or already consumed).
    Unknown,
}

/// The book of a receive queue or a shared receive queue: every request completes with a
/// completion of its own (a shared receive queue's in any order), which is kept until taken.
#[derive(Debug)]
pub(crate) struct WorkQueue {
    depth: u32,
    /// Sequence number of `slots[0]`.
    base: u64,
    /// Each request's state, and the scope that posted it (0: no scope, an owned token).
    slots: VecDeque<(Slot, u64)>,
    /// Requests posted and not yet completed (they occupy the hardware queue).
    outstanding: u32,
    /// Completions (with their sequence numbers and owners) that stayed uncollected at the
    /// front of `slots` while it grew past twice the depth: set aside (`compact`), so that one
    /// whose token was leaked does not keep every later slot in the book.
    aside: Vec<(u64, Completion, u64)>,
    /// Requests (with their sequence numbers and owners) that stayed pending at the front of
    /// `slots` while it grew past twice the depth: set aside as well (`compact`). A receive
    /// that never completes (refused with no name and never queued; a shared receive queue's
    /// receive consumed by a QP whose destroy took its completion off the CQ, as mlx5's does)
    /// would otherwise keep every later slot in the book.
    stuck: Vec<Stuck>,
    /// Results held for their tokens: the `Done` slots and the completions set aside. Published
    /// ([`Settled::held`]) so that a waiter knows without the lock that none is there.
    held: usize,
}

impl WorkQueue {
    pub(crate) fn new(depth: u32) -> Self {
        WorkQueue {
            depth,
            base: 0,
            slots: VecDeque::new(),
            outstanding: 0,
            aside: Vec::new(),
            stuck: Vec::new(),
            held: 0,
        }
    }

    /// Publishes how many results the book holds to `settled` (under the lock): see
    /// [`Settled::held`].
    #[inline(always)]
    fn publish(&self, settled: &Settled) {
        settled.held.store(self.held, Ordering::Release);
    }

    /// [`WorkQueue::held`] counted from the slots and the completions set aside (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn held_counted(&self) -> (usize, usize) {
        (self.held, self.slots.iter().filter(|(s, _)| matches!(s, Slot::Done(_))).count() + self.aside.len())
    }

    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }

    pub(crate) fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// The next request's number.
    #[inline]
    fn next(&self) -> u64 {
        self.base + self.slots.len() as u64
    }

    /// Whether `n` more requests fit.
    #[inline]
    fn room_for(&self, n: usize) -> bool {
        (self.outstanding as usize).saturating_add(n) <= self.depth as usize
    }

    /// Records that the request with sequence `next_seq()` was posted by the scope `owner` (0:
    /// an owned token); `covered`: a completion of its own will come (false for a request the
    /// provider refused after it may have queued it).
    #[inline]
    pub(crate) fn push_owned(&mut self, covered: bool, owner: u64) -> u64 {
        let seq = self.next();
        self.slots.push_back((Slot::Pending { covered, abandoned: false }, owner));
        self.outstanding += 1;
        seq
    }

    fn index(&self, seq: u64) -> Option<usize> {
        let i = seq.checked_sub(self.base)?;
        (i < self.slots.len() as u64).then_some(i as usize)
    }

    /// Records the completion of `seq`. Returns false if `seq` is not an outstanding request of
    /// this queue.
    pub(crate) fn complete(&mut self, seq: u64, c: Completion) -> bool {
        let Some(idx) = self.index(seq) else {
            return self.complete_stuck(seq, Some(c));
        };
        let Slot::Pending { abandoned, .. } = self.slots[idx].0 else {
            return false;
        };
        self.outstanding -= 1;
        self.slots[idx].0 = if abandoned {
            Slot::Gone
        } else {
            self.held += 1;
            Slot::Done(c)
        };
        self.compact();
        true
    }

    /// Records the completion of `seq` for the wait of `seq`'s own token, which takes it at
    /// once: [`WorkQueue::complete`] then [`WorkQueue::try_take`], with nothing stored between.
    /// False (nothing changed) if `seq` is not outstanding, or its token was given up.
    #[inline]
    fn complete_taken(&mut self, seq: u64) -> bool {
        let Some(idx) = self.index(seq) else {
            return self.complete_stuck(seq, None);
        };
        if !matches!(self.slots[idx].0, Slot::Pending { abandoned: false, .. }) {
            return false;
        }
        self.outstanding -= 1;
        self.consume(idx);
        true
    }

    /// The result in slot `idx` was taken (or given up): the slot is gone. The front slot, the
    /// one a queue consumed in order takes, is popped at once (the book only shrinks, so
    /// nothing is set aside); another is marked and popped once the slots before it are.
    #[inline(always)]
    fn consume(&mut self, idx: usize) {
        if idx == 0 {
            self.slots.pop_front();
            self.base += 1;
            self.pop_gone();
        } else {
            self.slots[idx].0 = Slot::Gone;
            self.compact();
        }
    }

    /// Hands over the result of `seq` if it completed.
    pub(crate) fn try_take(&mut self, seq: u64) -> Take {
        let Some(idx) = self.index(seq) else {
            return self.take_aside(seq);
        };
        match self.slots[idx].0 {
            Slot::Done(c) => {
                self.held -= 1;
                self.consume(idx);
                Take::Done(c)
            }
            Slot::Pending { .. } => Take::Pending,
            Slot::Gone => Take::Unknown,
        }
    }

    /// A completion set aside (`compact`), taken; a request set aside pending is still so.
    #[cold]
    fn take_aside(&mut self, seq: u64) -> Take {
        if self.stuck(seq).is_some() {
            return Take::Pending;
        }
        match self.aside.iter().position(|a| a.0 == seq) {
            Some(i) => {
                self.held -= 1;
                Take::Done(self.aside.swap_remove(i).1)
            }
            None => Take::Unknown,
        }
    }

    /// Where request `seq` is among those set aside pending (`stuck`).
    #[cold]
    fn stuck(&self, seq: u64) -> Option<usize> {
        self.stuck.iter().position(|s| s.seq == seq)
    }

    /// [`WorkQueue::complete`] (`c`: its completion) or [`WorkQueue::complete_taken`] (`None`)
    /// of a request set aside pending: its result, unless it is taken at once or abandoned,
    /// joins the completions set aside. False (nothing changed) as theirs.
    #[cold]
    fn complete_stuck(&mut self, seq: u64, c: Option<Completion>) -> bool {
        let Some(i) = self.stuck(seq) else {
            return false;
        };
        let Stuck { abandoned, owner, .. } = self.stuck[i];
        if abandoned && c.is_none() {
            return false;
        }
        self.stuck.swap_remove(i);
        self.outstanding -= 1;
        if let (Some(c), false) = (c, abandoned) {
            self.held += 1;
            self.aside.push((seq, c, owner));
        }
        true
    }

    /// Nobody will consume the result of `seq`: drop it now or on completion.
    pub(crate) fn abandon(&mut self, seq: u64) {
        let Some(idx) = self.index(seq) else {
            match self.stuck(seq) {
                Some(i) => self.stuck[i].abandoned = true,
                None => drop(self.take_aside(seq)),
            }
            return;
        };
        match &mut self.slots[idx].0 {
            Slot::Done(_) => {
                self.held -= 1;
                self.slots[idx].0 = Slot::Gone;
            }
            Slot::Pending { abandoned, .. } => *abandoned = true,
            Slot::Gone => {}
        }
        self.compact();
    }

    /// The requests of scope `owner` whose results nobody has taken yet (outstanding, or
    /// complete and uncollected).
    pub(crate) fn owned_by(&self, owner: u64) -> Vec<u64> {
        let aside = self.aside.iter().filter(|a| a.2 == owner).map(|a| a.0);
        let stuck = self.stuck.iter().filter(|s| s.owner == owner).map(|s| s.seq);
        let slots = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, (slot, o))| *o == owner && *slot != Slot::Gone)
            .map(|(i, _)| self.base + i as u64);
        let mut owned: Vec<u64> = aside.chain(stuck).chain(slots).collect();
        // In posting order (the set-aside ones are not kept in order).
        owned.sort_unstable();
        owned
    }

    /// True if `seq` is still outstanding on the device.
    pub(crate) fn is_pending(&self, seq: u64) -> bool {
        match self.index(seq) {
            Some(i) => matches!(self.slots[i].0, Slot::Pending { .. }),
            None => self.stuck(seq).is_some(),
        }
    }

    /// Whether request `seq` is pending and may never complete by itself (see
    /// [`WorkQueue::has_uncovered`]).
    fn is_uncovered(&self, seq: u64) -> bool {
        match self.index(seq) {
            Some(i) => matches!(self.slots[i].0, Slot::Pending { covered: false, .. }),
            None => self.stuck(seq).is_some_and(|i| !self.stuck[i].covered),
        }
    }

    /// Whether a pending request may never complete by itself: one the provider refused after
    /// it may have queued it. Nothing but a reset settles it.
    pub(crate) fn has_uncovered(&self) -> bool {
        self.slots.iter().any(|(s, _)| matches!(s, Slot::Pending { covered: false, .. }))
            || self.stuck.iter().any(|s| !s.covered)
    }

    /// The QP was reset: nothing is outstanding on the device any more. Every pending request
    /// is completed with a synthetic flush.
    pub(crate) fn force_flush(&mut self, qp_num: u32) {
        for (s, _) in self.slots.iter_mut() {
            if let Slot::Pending { abandoned, .. } = *s {
                *s = if abandoned {
                    Slot::Gone
                } else {
                    self.held += 1;
                    Slot::Done(Completion::forced_reset(qp_num))
                };
            }
        }
        for Stuck { seq, abandoned, owner, .. } in std::mem::take(&mut self.stuck) {
            if !abandoned {
                self.held += 1;
                self.aside.push((seq, Completion::forced_reset(qp_num), owner));
            }
        }
        self.outstanding = 0;
        self.compact();
    }

    fn compact(&mut self) {
        self.pop_gone();
        if self.slots.len() > 2 * self.depth as usize {
            self.set_aside();
        }
    }

    /// Drops the consumed slots at the front.
    #[inline(always)]
    fn pop_gone(&mut self) {
        while matches!(self.slots.front(), Some((Slot::Gone, _))) {
            self.slots.pop_front();
            self.base += 1;
        }
    }

    /// The book grew past twice the depth behind a completion nobody collects (its token
    /// leaked, or kept uncollected for long) or a request that never completes: the ones at
    /// its front are set aside (`aside`, `stuck`), or the book would keep every slot behind
    /// them, one more per receive, for as long as they stay.
    #[cold]
    #[inline(never)]
    fn set_aside(&mut self) {
        while self.slots.len() > 2 * self.depth as usize {
            match self.slots.front() {
                Some(&(Slot::Done(c), owner)) => self.aside.push((self.base, c, owner)),
                Some(&(Slot::Pending { covered, abandoned }, owner)) => {
                    self.stuck.push(Stuck { seq: self.base, covered, abandoned, owner })
                }
                Some((Slot::Gone, _)) => {}
                None => return,
            }
            self.slots.pop_front();
            self.base += 1;
        }
        self.pop_gone();
    }
}

/// The owner word's bit that marks a request whose result nobody will take
/// ([`SendBook::abandon`]); scope ids never reach it.
const ABANDONED: u64 = 1 << 63;

/// The book of a send queue, whose completions arrive in posting order and where a completion
/// also completes every earlier request (an unsignaled request has none of its own; an error
/// always has one): the requests below `done` are complete, those from `done` to `next` are
/// outstanding. Only a completion of its own (a signaled request's, an error, a flush, a forced
/// reset) is stored, until taken; a complete request without one succeeded, implied by a later
/// completion. So posting and collecting an unsignaled request stores nothing, and the state of
/// the queue is a few counters and, per outstanding request, who posted it.
///
/// Unlike [`WorkQueue`], the book does not remember which results were taken: each request's
/// result is taken by the one token that holds its number, which the taking consumes (a scope
/// [`Token`](crate::scope::Token), an [`OwnedToken`](crate::owned::OwnedToken)), so a second
/// take of the same number cannot be asked for.
#[derive(Debug)]
pub(crate) struct SendBook {
    depth: u32,
    /// The QP's number, for the completions the book makes up (implied, forced reset).
    qp_num: u32,
    /// The next request's number (requests posted so far).
    next: u64,
    /// Every request below this is complete.
    done: u64,
    /// One past the last request that a completion of its own will cover.
    covered: u64,
    /// Every this many requests one is signaled even if asked not to be (`depth / 2`, at
    /// least 1): see [`Book::must_signal`].
    signal_every: u64,
    /// The first request that must be signaled: the `signal_every`-th after the last signaled
    /// one (`covered + signal_every - 1`; the requests from `covered` on are unsignaled).
    force_at: u64,
    /// For each outstanding request (at `seq & mask`; at most `depth` are outstanding): the
    /// scope that posted it (0: an owned token), with [`ABANDONED`].
    owners: Box<[u64]>,
    mask: u64,
    /// The completions of their own not yet taken, in request order, with the owner.
    results: VecDeque<(u64, u64, Completion)>,
}

impl SendBook {
    pub(crate) fn new(depth: u32, qp_num: u32) -> Self {
        let cap = depth.max(1).next_power_of_two() as usize;
        SendBook {
            depth,
            qp_num,
            next: 0,
            done: 0,
            covered: 0,
            signal_every: u64::from((depth / 2).max(1)),
            force_at: u64::from((depth / 2).max(1)) - 1,
            owners: vec![0; cap].into_boxed_slice(),
            mask: cap as u64 - 1,
            results: VecDeque::new(),
        }
    }

    /// Requests posted and not yet complete.
    #[inline(always)]
    fn outstanding(&self) -> u32 {
        (self.next - self.done) as u32
    }

    /// The depth the queue is kept to.
    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }

    /// Whether `n` more requests fit.
    #[inline(always)]
    fn room_for(&self, n: usize) -> bool {
        (self.outstanding() as usize).saturating_add(n) <= self.depth as usize
    }

    /// The sequence number of the next request, if it fits beside `beside` requests of the
    /// queue's lane still outstanding (both are bounded by the depth, so nothing overflows).
    #[inline(always)]
    pub(crate) fn next_beside(&self, beside: u64) -> Option<u64> {
        (self.next - self.done + beside < u64::from(self.depth)).then_some(self.next)
    }

    /// Whether a request that asks to be unsignaled must be signaled anyway, `ahead`
    /// unsignaled requests being about to be posted before it (see [`Book::must_signal`]).
    #[inline(always)]
    pub(crate) fn must_signal(&self, ahead: u32) -> bool {
        self.next + u64::from(ahead) >= self.force_at
    }

    /// The completion of a complete request that has none of its own stored: a success,
    /// implied by a later completion.
    #[inline(always)]
    fn implied(&self) -> Completion {
        Completion::implied(self.qp_num, u32::MAX)
    }

    /// Room for a stored completion per request the ring can hold, at once: storing then
    /// allocates nothing more while the program collects its completions (more are stored
    /// only for complete requests whose tokens are kept uncollected, or leaked).
    #[cold]
    fn reserve_results(&mut self) {
        self.results.reserve_exact(self.owners.len());
    }

    #[inline(always)]
    pub(crate) fn push_owned(&mut self, signaled: bool, owner: u64) -> u64 {
        let seq = self.next;
        debug_assert!(self.outstanding() < self.owners.len() as u32, "more outstanding than the depth");
        self.owners[(seq & self.mask) as usize] = owner;
        self.next = seq + 1;
        if signaled {
            self.covered = self.next;
            self.force_at = self.next + self.signal_every - 1;
        }
        seq
    }

    #[inline(always)]
    fn is_pending(&self, seq: u64) -> bool {
        self.done <= seq && seq < self.next
    }

    #[inline(always)]
    fn owner(&self, seq: u64) -> u64 {
        self.owners[(seq & self.mask) as usize]
    }

    /// Records the completion of `seq`, and with it of every earlier request. False if `seq` is
    /// not outstanding (stale: a late flush after a forced reset; or foreign).
    #[inline]
    fn complete(&mut self, seq: u64, c: Completion) -> bool {
        if !self.is_pending(seq) {
            return false;
        }
        let owner = self.owner(seq);
        if owner & ABANDONED == 0 {
            if self.results.capacity() == 0 {
                self.reserve_results();
            }
            self.results.push_back((seq, owner, c));
        }
        self.done = seq + 1;
        true
    }

    /// Records the completion of `seq` (and of every earlier request) for the wait of `seq`'s
    /// own token, which takes it at once: [`SendBook::complete`] then [`SendBook::try_take`],
    /// with nothing stored between. False (nothing changed) if `seq` is not outstanding, or its
    /// token was given up.
    #[inline]
    fn complete_taken(&mut self, seq: u64) -> bool {
        if !self.is_pending(seq) || self.owner(seq) & ABANDONED != 0 {
            return false;
        }
        self.done = seq + 1;
        true
    }

    #[inline(always)]
    fn try_take(&mut self, seq: u64) -> Take {
        if seq >= self.done {
            return if seq < self.next { Take::Pending } else { Take::Unknown };
        }
        match self.results.front() {
            Some(&(s, _, c)) if s == seq => {
                self.results.pop_front();
                Take::Done(c)
            }
            None => Take::Done(self.implied()),
            Some(_) => Take::Done(self.remove_stored(seq).unwrap_or_else(|| self.implied())),
        }
    }

    /// Removes the stored completion of the complete request `seq`, if it has one (the results
    /// are in request order).
    #[cold]
    fn remove_stored(&mut self, seq: u64) -> Option<Completion> {
        let i = self.results.binary_search_by_key(&seq, |r| r.0).ok()?;
        self.results.remove(i).map(|r| r.2)
    }

    fn abandon(&mut self, seq: u64) {
        if self.is_pending(seq) {
            self.owners[(seq & self.mask) as usize] |= ABANDONED;
        } else if seq < self.done {
            self.remove_stored(seq);
        }
    }

    fn owned_by(&self, owner: u64) -> Vec<u64> {
        let mut mine: Vec<u64> = self.results.iter().filter(|r| r.1 == owner).map(|r| r.0).collect();
        mine.extend((self.done..self.next).filter(|&s| self.owner(s) & !ABANDONED == owner));
        mine
    }

    fn has_uncovered(&self) -> bool {
        self.done < self.next && self.covered < self.next
    }

    fn force_flush(&mut self, qp_num: u32) {
        for seq in self.done..self.next {
            let owner = self.owner(seq);
            if owner & ABANDONED == 0 {
                self.results.push_back((seq, owner, Completion::forced_reset(qp_num)));
            }
        }
        self.done = self.next;
    }

    /// Publishes `done` and the first stored completion's number to `settled` (under the
    /// book's lock, after every change of either): see [`Settled`].
    #[inline(always)]
    fn publish(&self, settled: &Settled) {
        let stored_from = self.results.front().map_or(u64::MAX, |r| r.0);
        settled.stored_from.store(stored_from, Ordering::Relaxed);
        settled.done.store(self.done, Ordering::Release);
    }
}

/// What a waiter may read of a book without taking its lock (a receive queue's: only `held`,
/// see there). A send queue's: every request below
/// `done` is complete, and no request below `stored_from` has a completion of its own stored
/// (`u64::MAX`: none is stored). So a request below both is complete without a completion of
/// its own, a success implied by a later completion, which [`TrackedQueue::try_take`] hands
/// over without the lock: the common case of an unsignaled request covered by a later
/// signaled one.
///
/// Why a request `seq` below both has no completion stored: completions are stored only for
/// requests at or above `done` (outstanding ones, `SendBook::complete` and `force_flush`),
/// and `done` moves past them only afterwards; each change is published under the book's lock,
/// `stored_from` before `done` (`Release`). A waiter loads `done` (`Acquire`), then
/// `stored_from`: if `done > seq` is the publication of the change that moved `done` past
/// `seq`, or a later one, the `stored_from` it reads is that publication's or a later one's,
/// each the smallest stored number then. A completion stored for `seq` stays stored until the
/// one token holding `seq` takes it (or is dropped: then nobody asks), so each of those is at
/// most `seq`, and the waiter takes the lock. (`stored_from` only grows otherwise, when others' completions are taken, which
/// is never wrong: it is the smallest stored number at each publication.) The loom model
/// `queue::loom_model::loom_settled_*` checks it.
pub(crate) struct Settled {
    done: AtomicU64,
    stored_from: AtomicU64,
    /// A receive queue's book: how many results it holds ([`WorkQueue::held`]), published
    /// under its lock after each change (`Release`). Zero: no result of any request is there,
    /// so a waiter may poll the CQ without looking at the book first.
    held: AtomicUsize,
    /// The QP's number, for the completion of an implied success (built where it is handed
    /// over: its other fields are constants, written straight into the waiter's result).
    qp_num: u32,
}

impl Settled {
    fn new(qp_num: u32) -> Self {
        Settled { done: AtomicU64::new(0), stored_from: AtomicU64::new(u64::MAX), held: AtomicUsize::new(0), qp_num }
    }

    /// Whether the published state proves `seq` complete without a completion of its own (see
    /// [`Settled`]).
    #[inline(always)]
    fn is_implied(&self, seq: u64) -> bool {
        seq < self.done.load(Ordering::Acquire) && seq < self.stored_from.load(Ordering::Relaxed)
    }
}

/// The book of one work queue: a send queue's ([`SendBook`]), or a receive queue's or a
/// shared receive queue's ([`WorkQueue`]). The methods are [`WorkQueue`]'s.
#[derive(Debug)]
pub(crate) enum Book {
    /// A send queue.
    Send(SendBook),
    /// A receive queue or a shared receive queue.
    Recv(WorkQueue),
}

impl Book {
    /// The send queue's book: `None` for a receive queue's.
    #[inline(always)]
    pub(crate) fn as_send(&mut self) -> Option<&mut SendBook> {
        match self {
            Book::Send(b) => Some(b),
            Book::Recv(_) => None,
        }
    }

    pub(crate) fn depth(&self) -> u32 {
        match self {
            Book::Send(b) => b.depth,
            Book::Recv(q) => q.depth(),
        }
    }

    #[inline(always)]
    pub(crate) fn outstanding(&self) -> u32 {
        match self {
            Book::Send(b) => b.outstanding(),
            Book::Recv(q) => q.outstanding(),
        }
    }

    /// The sequence number the next request will get, if there is room for it.
    pub(crate) fn next_seq(&self) -> Option<u64> {
        self.next_seq_beside(1, 0)
    }

    /// Whether `n` more requests fit.
    #[cfg(test)]
    pub(crate) fn room_for(&self, n: usize) -> bool {
        self.next_seq_beside(n, 0).is_some()
    }

    /// The sequence number the next of `n` requests will get, if all `n` fit beside `beside`
    /// requests of the queue's lane still outstanding: the queue's depth bounds the two
    /// together, as the CQ's room is reserved for the depth once (`CqShared::register`).
    #[inline(always)]
    pub(crate) fn next_seq_beside(&self, n: usize, beside: u64) -> Option<u64> {
        let beside = usize::try_from(beside).unwrap_or(usize::MAX);
        let n = n.saturating_add(beside);
        match self {
            Book::Send(b) => b.room_for(n).then_some(b.next),
            Book::Recv(q) => q.room_for(n).then(|| q.next()),
        }
    }

    /// Whether a send request that asks to be unsignaled must be signaled anyway, given
    /// `ahead` unsignaled requests about to be posted before it: a send queue whose requests are
    /// all unsignaled never frees a slot, so every `depth / 2`-th one is signaled. (Receives
    /// are never unsignaled: false.)
    #[inline(always)]
    pub(crate) fn must_signal(&self, ahead: u32) -> bool {
        match self {
            Book::Send(b) => b.must_signal(ahead),
            Book::Recv(_) => false,
        }
    }

    /// Records that the request with sequence `next_seq()` was posted (by no scope).
    pub(crate) fn push(&mut self, signaled: bool) -> u64 {
        self.push_owned(signaled, 0)
    }

    /// Records that the request with sequence `next_seq()` was posted by the scope `owner` (0:
    /// an owned token); `signaled`: a completion of its own will come (false for an unsignaled
    /// send, or a request the provider refused after it may have queued it).
    #[inline(always)]
    pub(crate) fn push_owned(&mut self, signaled: bool, owner: u64) -> u64 {
        match self {
            Book::Send(b) => b.push_owned(signaled, owner),
            Book::Recv(q) => q.push_owned(signaled, owner),
        }
    }

    /// As [`WorkQueue::complete`] (a send queue's completions imply the earlier requests').
    #[cfg(test)]
    fn complete(&mut self, seq: u64, c: Completion) -> bool {
        match self {
            Book::Send(b) => b.complete(seq, c),
            Book::Recv(q) => q.complete(seq, c),
        }
    }

    /// Records `c` for request `seq` (as [`SendBook::complete`] or [`WorkQueue::complete`]),
    /// publishing the change to `settled` (under the lock): a send queue's `done` and first
    /// stored number, a receive queue's count of held results.
    #[inline(always)]
    fn complete_published(&mut self, seq: u64, c: Completion, settled: &Settled) {
        match self {
            Book::Send(b) => {
                if b.complete(seq, c) {
                    b.publish(settled);
                }
            }
            Book::Recv(q) => {
                if q.complete(seq, c) {
                    q.publish(settled);
                }
            }
        }
    }

    /// Takes request `seq`'s result (as [`SendBook::try_take`] or [`WorkQueue::try_take`]),
    /// publishing the change to `settled` (under the lock): a send queue's `done` and first
    /// stored number, a receive queue's count of held results.
    #[inline(always)]
    fn try_take_published(&mut self, seq: u64, settled: &Settled) -> Take {
        match self {
            Book::Send(b) => {
                let taken = b.try_take(seq);
                // Only a take changes what is published (a waiter spinning on a pending request
                // does not write the line that the lock-free readers load).
                if let Take::Done(_) = taken {
                    b.publish(settled);
                }
                taken
            }
            Book::Recv(q) => {
                let taken = q.try_take(seq);
                if let Take::Done(_) = taken {
                    q.publish(settled);
                }
                taken
            }
        }
    }

    /// As [`WorkQueue::try_take`]; a send queue's book hands a result over to the one token that
    /// holds its number ([`SendBook`]).
    #[inline(always)]
    #[cfg(test)]
    fn try_take(&mut self, seq: u64) -> Take {
        match self {
            Book::Send(b) => b.try_take(seq),
            Book::Recv(q) => q.try_take(seq),
        }
    }

    fn abandon(&mut self, seq: u64) {
        match self {
            Book::Send(b) => b.abandon(seq),
            Book::Recv(q) => q.abandon(seq),
        }
    }

    /// As [`WorkQueue::owned_by`]; on a send queue, the complete requests of `owner` that have
    /// no completion of their own are left out (nothing is kept for them).
    pub(crate) fn owned_by(&self, owner: u64) -> Vec<u64> {
        match self {
            Book::Send(b) => b.owned_by(owner),
            Book::Recv(q) => q.owned_by(owner),
        }
    }

    #[inline(always)]
    pub(crate) fn is_pending(&self, seq: u64) -> bool {
        match self {
            Book::Send(b) => b.is_pending(seq),
            Book::Recv(q) => q.is_pending(seq),
        }
    }

    /// Whether request `seq` is pending and no completion will come for it: not a completion
    /// of its own, nor of a later request of the queue. A send request after the last
    /// signaled one (an unsignaled tail, or a refused request that may have been queued); a
    /// refused receive ([`WorkQueue::has_uncovered`]). Another request's uncovered tail does
    /// not make `seq` uncovered.
    pub(crate) fn is_uncovered(&self, seq: u64) -> bool {
        match self {
            Book::Send(b) => b.is_pending(seq) && seq >= b.covered,
            Book::Recv(q) => q.is_uncovered(seq),
        }
    }

    /// As [`WorkQueue::has_uncovered`], for this queue's kind.
    pub(crate) fn has_uncovered(&self) -> bool {
        match self {
            Book::Send(b) => b.has_uncovered(),
            Book::Recv(q) => q.has_uncovered(),
        }
    }

    fn force_flush(&mut self, qp_num: u32) {
        match self {
            Book::Send(b) => b.force_flush(qp_num),
            Book::Recv(q) => q.force_flush(qp_num),
        }
    }
}

/// The bit of a `wr_id` that marks a request of a send lane ([`crate::lane::SendLane`]).
pub(crate) const LANE_BIT: u64 = 1 << 62;

/// Whether a completion's `wr_id` is that of a send lane's request.
#[inline(always)]
pub(crate) fn is_lane_request(wr_id: u64) -> bool {
    wr_id & (RECV_BIT | LANE_BIT) == LANE_BIT
}

/// Whether a completion's `wr_id` is that of a receive lane's request
/// ([`crate::lane::RecvLane`]: `RECV_BIT` with the lane's number).
#[inline(always)]
pub(crate) fn is_recv_lane_request(wr_id: u64) -> bool {
    wr_id & (RECV_BIT | LANE_BIT) == RECV_BIT | LANE_BIT
}

/// The book-keeping of a send lane: the requests that one exclusive poster (the lane) puts on
/// a send queue, numbered in posting order from `LANE_BIT` on (`LANE_BIT`, `LANE_BIT + 1`...);
/// the number is the `wr_id`.
///
/// Send queue completions arrive in posting order, and an error always produces a completion,
/// so two counters describe every request: requests `< done` are complete, and they succeeded
/// unless their number is `>= first_error`, in which case their (error or flush) completion is
/// in `kept`. Only the lane writes `posted` and `covered`; only the poller holding the CQ's
/// routing lock writes `done`, `first_error` and `kept`. Nothing is stored for a successful
/// request: posting and collecting it takes no lock.
///
/// A receive lane ([`crate::lane::RecvLane`]) uses the same book on a receive queue, whose
/// completions also arrive in posting order, one per request. A successful receive completion
/// carries what the program needs (length, immediate data, source), so it is kept too, unless
/// the lane's own wait polled it and takes it at once (the common case: nothing is stored).
/// `first_error` then only marks the requests a reset completed without a completion.
#[derive(Debug)]
pub(crate) struct LaneBook {
    /// Requests posted so far.
    posted: AtomicU64,
    /// Every request with a lower number is complete.
    done: AtomicU64,
    /// One past the last signaled request: a completion will come for every request below it.
    covered: AtomicU64,
    /// The lowest request number that did not complete successfully (`u64::MAX`: none).
    first_error: AtomicU64,
    /// The lowest request number a reset of the QP completed (`u64::MAX`: none since the lane
    /// opened): those have no completion of their own.
    reset_from: AtomicU64,
    /// The completions kept until collected: a send lane's failures; a receive lane's
    /// completions that its wait did not take itself (at most the queue's depth of them).
    kept: Mutex<Vec<(u64, Completion)>>,
    /// A receive lane is open ([`LaneBook::set_open`]).
    open: AtomicBool,
    /// Receive lane: one past the last receive the provider refused without naming it (it may
    /// have been queued, and nothing promises it a completion); 0 for none.
    refused: AtomicU64,
}

/// What [`LaneBook::take_kept`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kept {
    /// Still outstanding.
    Pending,
    /// Complete, with this completion.
    Done(Completion),
    /// Complete, but its completion was dropped: more completions were kept after it than the
    /// queue is deep.
    Lost,
}

/// What [`LaneBook::result`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LaneResult {
    /// Still outstanding.
    Pending,
    /// Completed successfully.
    Success,
    /// Completed with this (error, flush, or forced reset) completion.
    Failed(Completion),
    /// Complete, not successfully or after a failure, but its completion was dropped: more
    /// completions were kept after it than the queue is deep.
    Lost,
}

impl LaneBook {
    fn new() -> Self {
        LaneBook {
            posted: AtomicU64::new(LANE_BIT),
            done: AtomicU64::new(LANE_BIT),
            covered: AtomicU64::new(LANE_BIT),
            first_error: AtomicU64::new(u64::MAX),
            reset_from: AtomicU64::new(u64::MAX),
            kept: Mutex::new(Vec::new()),
            open: AtomicBool::new(false),
            refused: AtomicU64::new(0),
        }
    }

    /// Opens the book for a new lane: nothing of an earlier one may be outstanding. Returns the
    /// number of the next request.
    pub(crate) fn open(&self) -> Option<u64> {
        let posted = self.posted.load(Ordering::Acquire);
        if self.done.load(Ordering::Acquire) != posted {
            return None;
        }
        self.first_error.store(u64::MAX, Ordering::Release);
        self.reset_from.store(u64::MAX, Ordering::Release);
        // Nothing below is outstanding: the new lane's first run starts here.
        self.covered.store(posted, Ordering::Release);
        self.refused.store(0, Ordering::Release);
        lock(&self.kept).clear();
        Some(posted)
    }

    /// The number of the lane's next request. (Only the lane writes `posted`, so its own
    /// last store is what it reads.)
    #[inline(always)]
    pub(crate) fn next(&self) -> u64 {
        self.posted.load(Ordering::Relaxed)
    }

    /// The lane is about to post request `seq`. Recorded before the post, so that a poller on
    /// another thread that sees the completion at once knows the request.
    #[inline(always)]
    pub(crate) fn posting(&self, seq: u64) {
        self.posted.store(seq + 1, Ordering::Release);
    }

    /// The provider accepted request `seq`, signaled: a completion will cover it.
    #[inline(always)]
    pub(crate) fn covered(&self, seq: u64) {
        self.covered.store(seq + 1, Ordering::Release);
    }

    /// One past the last signaled request of the lane (or where it opened).
    #[inline(always)]
    pub(crate) fn covered_upto(&self) -> u64 {
        self.covered.load(Ordering::Acquire)
    }

    /// The provider refused request `seq`: it was not posted.
    pub(crate) fn unpost(&self, seq: u64) {
        self.posted.store(seq, Ordering::Release);
    }

    /// Records the completion of request `seq`, and with it of every earlier one. `ok`: its
    /// status is success; `c()` gives it decoded, with the queue's depth, when it is kept: a
    /// failure, or a success after a failure (a device's mistake: RC, UC and UD send queues
    /// flush every request after one that failed), kept so that it is reported from the book as
    /// the device gave it, as the lane's own wait reports it when it polls it
    /// ([`LaneBook::complete_awaited`]). At most the depth of completions are kept: the oldest
    /// goes first, never the first failure's. A stale number (already complete, or never
    /// posted: a made-up duplicate) changes nothing. Called with the CQ's routing lock held, so
    /// completions are recorded in the order the device produced them.
    #[inline]
    pub(crate) fn complete(&self, seq: u64, ok: bool, c: impl FnOnce() -> (Completion, u32)) {
        if self.is_stale(seq) {
            return;
        }
        if !ok || self.first_error.load(Ordering::Acquire) <= seq {
            let (c, keep) = c();
            self.kept_completion(seq, ok, keep, c);
        }
        self.done.store(seq + 1, Ordering::Release);
    }

    /// Records the successful completion of request `seq`, polled by the wait for `seq` itself,
    /// which reports it at once (so nothing is kept). False, and nothing changed, for a number
    /// already complete: a made-up duplicate is no answer to its wait. Called with the CQ's
    /// routing lock held.
    ///
    /// `seq` is a token's, so it was posted: a token is made only once the provider took its
    /// request, recorded as posted before the call, and `posted` goes back only to the first
    /// request of a list that the provider refused, above every earlier token's number. Only
    /// the lower bound of [`LaneBook::is_stale`] is checked here (a test in debug builds).
    #[inline(always)]
    pub(crate) fn complete_awaited(&self, seq: u64) -> bool {
        debug_assert!(seq < self.posted.load(Ordering::Acquire), "a token's number {seq:#x} is posted");
        if seq < self.done.load(Ordering::Acquire) {
            return false;
        }
        self.done.store(seq + 1, Ordering::Release);
        true
    }

    /// Keeps the completion `c` of request `seq` for its token (`ok`: a success after a
    /// failure; otherwise a failure), at most `keep` of them: a lane that goes on posting after
    /// an error has every later request flushed, unsignaled ones included, whose completions
    /// no token takes.
    #[cold]
    fn kept_completion(&self, seq: u64, ok: bool, keep: u32, c: Completion) {
        if !ok {
            self.first_error.fetch_min(seq, Ordering::AcqRel);
        }
        let first = self.first_error.load(Ordering::Acquire);
        self.keep_bounded(seq, c, keep as usize, Some(first));
    }

    /// Keeps the completion `c` of request `seq`, at most `keep` (at least one): when there is
    /// no room, the oldest kept one goes, never `spared`'s.
    fn keep_bounded(&self, seq: u64, c: Completion, keep: usize, spared: Option<u64>) {
        let mut kept = lock(&self.kept);
        if kept.len() >= keep.max(1) {
            let oldest = kept.iter().enumerate().filter(|(_, (s, _))| Some(*s) != spared).min_by_key(|(_, (s, _))| *s);
            if let Some(i) = oldest.map(|(i, _)| i) {
                kept.swap_remove(i);
            }
        }
        kept.push((seq, c));
    }

    /// Whether request `seq` is complete (successfully or not).
    #[inline(always)]
    pub(crate) fn is_done(&self, seq: u64) -> bool {
        self.done.load(Ordering::Acquire) > seq
    }

    /// Whether request `seq` completed successfully.
    #[inline(always)]
    pub(crate) fn succeeded(&self, seq: u64) -> bool {
        self.is_done(seq) && self.first_error.load(Ordering::Acquire) > seq
    }

    /// Whether request `seq` completed, and how.
    #[inline]
    pub(crate) fn result(&self, seq: u64, qp_num: u32) -> LaneResult {
        if !self.is_done(seq) {
            return LaneResult::Pending;
        }
        if self.first_error.load(Ordering::Acquire) > seq {
            return LaneResult::Success;
        }
        self.failure(seq, qp_num)
    }

    #[cold]
    fn failure(&self, seq: u64, qp_num: u32) -> LaneResult {
        self.completion_of_done(seq, qp_num).map_or(LaneResult::Lost, LaneResult::Failed)
    }

    /// The completion of complete request `seq` that the book hands out (a send lane's
    /// failure or success after one, a receive lane's completion): the kept one, taken; a
    /// forced reset's for a request the reset completed, which has none of its own; `None`
    /// when it came and was pushed out of the bounded store (said, not invented).
    fn completion_of_done(&self, seq: u64, qp_num: u32) -> Option<Completion> {
        match self.take(seq) {
            Some(c) => Some(c),
            None if self.reset_from.load(Ordering::Acquire) <= seq => Some(Completion::forced_reset(qp_num)),
            None => None,
        }
    }

    /// Takes the kept completion of request `seq`, if there is one.
    fn take(&self, seq: u64) -> Option<Completion> {
        let mut kept = lock(&self.kept);
        let i = kept.iter().position(|(s, _)| *s == seq)?;
        Some(kept.swap_remove(i).1)
    }

    /// Receive lane: request `seq` completed with `c`, polled by someone else than its wait;
    /// kept for the wait, at most `keep` completions (the oldest goes first). Called with the
    /// CQ's routing lock held, as [`LaneBook::complete`].
    #[cold]
    pub(crate) fn complete_kept(&self, seq: u64, c: Completion, keep: usize) {
        if self.is_stale(seq) {
            return;
        }
        self.keep_bounded(seq, c, keep, None);
        self.done.store(seq + 1, Ordering::Release);
    }

    /// Receive lane: request `seq` completed and the wait that polled it takes its completion
    /// at once. False for a stale or foreign number (then nothing changed). Called with the
    /// CQ's routing lock held.
    #[inline(always)]
    pub(crate) fn complete_taken(&self, seq: u64) -> bool {
        if self.is_stale(seq) {
            return false;
        }
        self.done.store(seq + 1, Ordering::Release);
        true
    }

    /// A number that is already complete (e.g. a late flush after a forced reset) or was
    /// never posted: its completion must change nothing. (Completions are recorded one at a
    /// time, under the routing lock, so load-then-store is enough.)
    #[inline(always)]
    fn is_stale(&self, seq: u64) -> bool {
        seq >= self.posted.load(Ordering::Acquire) || seq < self.done.load(Ordering::Acquire)
    }

    /// Receive lane: the completion of request `seq`, if it is complete and was kept.
    #[inline]
    pub(crate) fn take_kept(&self, seq: u64, qp_num: u32) -> Kept {
        if !self.is_done(seq) {
            return Kept::Pending;
        }
        self.completion_of_done(seq, qp_num).map_or(Kept::Lost, Kept::Done)
    }

    /// Requests posted and not complete.
    #[inline(always)]
    pub(crate) fn outstanding(&self) -> u64 {
        self.posted.load(Ordering::Acquire).saturating_sub(self.done.load(Ordering::Acquire))
    }

    /// A receive lane is open on the queue (set when it opens, cleared when it is dropped or,
    /// for a forgotten lane, when its scope's drain ends): the lane alone posts receives then,
    /// since it counts the queue's depth by itself.
    pub(crate) fn set_open(&self, open: bool) {
        self.open.store(open, Ordering::Release);
    }

    /// Whether a receive lane is open on the queue ([`LaneBook::set_open`]).
    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Whether outstanding requests remain that no completion will cover (the last ones posted
    /// were unsignaled).
    pub(crate) fn has_uncovered_tail(&self) -> bool {
        let posted = self.posted.load(Ordering::Acquire);
        self.done.load(Ordering::Acquire) < posted && self.covered.load(Ordering::Acquire) < posted
    }

    /// Receive lane: the provider refused receive `seq` without naming it, so it stays posted
    /// (it may have been queued) with no completion promised.
    pub(crate) fn refused_unnamed(&self, seq: u64) {
        self.refused.store(seq + 1, Ordering::Release);
    }

    /// Receive lane: whether the last receive posted is outstanding and was refused without a
    /// name: no completion is promised for it. (A receive accepted after it is promised one,
    /// and receives complete in order, so its completion settles the refused one too.)
    pub(crate) fn has_refused_tail(&self) -> bool {
        let posted = self.posted.load(Ordering::Acquire);
        self.done.load(Ordering::Acquire) < posted && self.refused.load(Ordering::Acquire) == posted
    }

    /// The QP was reset: nothing is outstanding on the device; what had not completed failed.
    /// Called with the CQ's routing lock held, so no completion is recorded meanwhile (`done`
    /// cannot move under it). The failure is recorded before `done` moves, as `complete` does:
    /// a waiter that sees the new `done` then sees the failure too, never a success (the loom
    /// model's reset scenario checks this order).
    fn force_flush(&self) {
        let posted = self.posted.load(Ordering::Acquire);
        let done = self.done.load(Ordering::Acquire);
        if done < posted {
            self.reset_from.fetch_min(done, Ordering::AcqRel);
            self.first_error.fetch_min(done, Ordering::AcqRel);
        }
        self.done.store(posted, Ordering::Release);
    }
}

/// A work queue's [`Book`] behind its lock, with the buffers of tokens that were dropped while
/// their request was outstanding ("graves"), kept until the request is no longer outstanding.
pub(crate) struct TrackedQueue {
    wq: Lock<Book>,
    /// The depth the queue is kept to (the work queue's, fixed at creation).
    depth: u32,
    /// Whether a completion also completes the earlier requests (send queues).
    ordered: bool,
    graves: Mutex<Vec<(u64, Box<dyn std::any::Any + Send>)>>,
    grave_count: AtomicUsize,
    /// The wakers of futures awaiting requests of this queue ([`crate::owned::OwnedCompletion`]),
    /// by request: registered only when a future has to wait, woken when a poll records the
    /// request's completion (or a reset completes it).
    wakers: Mutex<Vec<(u64, std::task::Waker)>>,
    waker_count: AtomicUsize,
    /// A send queue's `done` and first stored completion, readable without the lock (a receive
    /// queue's stays at its start, where it proves nothing).
    settled: Settled,
    /// The requests of the queue's lane (a send lane, or a receive lane).
    pub(crate) lane: LaneBook,
}

std::thread_local! {
    /// How many [`DeferWakes`] are alive on this thread.
    static DEFERRING: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// Whether `DEFERRED` holds wakers (or `DEFERRED_PANIC` a panic).
    static PENDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether [`wake_deferred`] is running on this thread (a task it runs inline may drop a
    /// `DeferWakes` of its own: that one leaves the waking to the running loop).
    static WAKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The wakers kept on this thread ([`keep`]): of completions recorded here, woken once
    /// the locks are released (by the outermost [`DeferWakes`] if one is alive), and those a
    /// panicking waker left.
    static DEFERRED: std::cell::RefCell<std::collections::VecDeque<std::task::Waker>> =
        const { std::cell::RefCell::new(std::collections::VecDeque::new()) };
    /// The first panic of a released buffer's drop on this thread ([`drop_deferring`]), to come
    /// out with the kept wakers' (`PENDING` is set for it too).
    static DEFERRED_PANIC: std::cell::RefCell<Option<Box<dyn std::any::Any + Send>>> =
        const { std::cell::RefCell::new(None) };
}

/// Drops `held` (a released buffer or window), which may be the program's and panic: the panic
/// is kept to come out when the kept wakers are woken ([`wake_kept`], or the outermost
/// [`DeferWakes`]), after the locks are released and the poll's whole batch routed. A panic
/// left in the middle of a batch would lose the completions polled after it (a failed request
/// later read as implied successful) and the CQs a dispatch had still to serve. While the
/// thread's locals are being destroyed it is leaked, as a later panic is.
fn drop_deferring(held: Box<dyn std::any::Any + Send>) {
    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(held))) {
        let mut p = Some(p);
        let _ = DEFERRED_PANIC.try_with(|d| {
            if let Some(p) = p.take() {
                keep_first_panic(&mut d.borrow_mut(), p);
            }
        });
        if let Some(p) = p {
            std::mem::forget(p);
        }
        let _ = PENDING.try_with(|p| p.set(true));
    }
}

/// While alive, the futures woken by completions recorded on this thread are woken only when it
/// is dropped (by the outermost one, if several are alive). A poll creates one before it takes
/// a CQ's routing lock and drops it after releasing the lock: a waker may run its task at once,
/// and a task that polls the same CQ would spin on that lock forever (it is not reentrant).
/// Two thread-local counters on the way in and out; the list is touched only by a wake.
pub(crate) struct DeferWakes(());

impl DeferWakes {
    #[inline]
    pub(crate) fn new() -> Self {
        DEFERRING.with(|n| n.set(n.get() + 1));
        DeferWakes(())
    }
}

impl Drop for DeferWakes {
    #[inline]
    fn drop(&mut self) {
        let left = DEFERRING.with(|n| {
            let left = n.get() - 1;
            n.set(left);
            left
        });
        if left == 0 && PENDING.with(std::cell::Cell::get) {
            wake_deferred();
        }
    }
}

/// Keeps `waker`, to be woken once the caller released its locks: by [`wake_kept`], or by the
/// outermost [`DeferWakes`] alive on this thread. Moves it into this thread's list, whose
/// storage stays: once it grew to the most wakers kept at one time, keeping allocates nothing.
/// While the thread's locals are being destroyed (the list is gone) it goes to the process's
/// list of [`ORPHANED`] wakers instead, which the same wake empties: never woken under the
/// caller's locks, where a waker that runs its task inline would spin on them.
fn keep(waker: std::task::Waker) {
    let mut waker = Some(waker);
    let _ = DEFERRED.try_with(|d| d.borrow_mut().extend(waker.take()));
    if let Some(w) = waker {
        keep_orphaned(w);
    }
    PENDING.with(|p| p.set(true));
}

/// Wakers kept by a thread whose locals were being destroyed (its own list gone), woken by
/// [`wake_deferred`] of that thread (or of any thread that wakes first: a waker may be woken
/// from any thread). Only ever used on that path.
static ORPHANED: std::sync::Mutex<Vec<std::task::Waker>> = std::sync::Mutex::new(Vec::new());
/// Whether [`ORPHANED`] may hold wakers: one load per wake otherwise.
static ANY_ORPHANED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[cold]
fn keep_orphaned(w: std::task::Waker) {
    ORPHANED.lock().unwrap_or_else(|e| e.into_inner()).push(w);
    ANY_ORPHANED.store(true, std::sync::atomic::Ordering::Release);
}

/// Wakes the [`ORPHANED`] wakers, one at a time, with the list's lock released while a waker
/// runs (a panic kept as in [`wake_deferred`]).
#[cold]
fn wake_orphaned(panic: &mut Option<Box<dyn std::any::Any + Send>>) {
    loop {
        let next = {
            let mut list = ORPHANED.lock().unwrap_or_else(|e| e.into_inner());
            let next = list.pop();
            if list.is_empty() {
                ANY_ORPHANED.store(false, std::sync::atomic::Ordering::Release);
            }
            next
        };
        match next {
            Some(w) => wake_catching(w, panic),
            None => return,
        }
    }
}

/// Wakes the kept wakers now, unless a [`DeferWakes`] is alive on this thread (its drop will).
fn wake_kept() {
    if DEFERRING.with(std::cell::Cell::get) == 0 && PENDING.with(std::cell::Cell::get) {
        wake_deferred();
    }
}

/// Wakes the kept wakers in the order they were kept, one at a time, with no borrow of the
/// list held while a waker runs. A task that a waker runs inline may keep wakers of its own:
/// they join the list and this loop wakes them; the wake its own `DeferWakes` starts returns
/// at once (`WAKING`), so inline tasks never nest more than one deep. If a waker panics, the
/// others are woken all the same, and the first panic comes out at the end (unless the thread
/// is already unwinding).
#[cold]
#[inline(never)]
fn wake_deferred() {
    /// Clears `WAKING` when the loop ends, by a panicking waker too.
    struct Waking;
    impl Drop for Waking {
        fn drop(&mut self) {
            WAKING.with(|w| w.set(false));
        }
    }
    if WAKING.with(|w| w.replace(true)) {
        return;
    }
    let _waking = Waking;
    // Every kept waker is woken, even after one panicked: left in this thread's list, the rest
    // would wait for this thread's next wake, and on a multi-threaded runtime the task that
    // retries may run on another thread. The first panic comes out once the list is empty;
    // later payloads are leaked (their drop could panic again).
    let mut panic = None;
    loop {
        while let Some(w) = DEFERRED.try_with(|d| d.borrow_mut().pop_front()).ok().flatten() {
            wake_catching(w, &mut panic);
        }
        if !ANY_ORPHANED.load(std::sync::atomic::Ordering::Acquire) {
            break;
        }
        // An orphaned waker may run its task inline, and that task keep wakers on this
        // thread: they join this thread's list, which is looked at again (left there, they
        // would wait for this thread's next wake, which may never come).
        wake_orphaned(&mut panic);
    }
    if let Some(p) = DEFERRED_PANIC.try_with(|d| d.borrow_mut().take()).ok().flatten() {
        keep_first_panic(&mut panic, p);
    }
    PENDING.with(|p| p.set(false));
    if let Some(p) = panic {
        // Not while the thread is already unwinding (a `DeferWakes` dropped by a panic): a
        // second panic would abort the process. The waker's panic is leaked then.
        if std::thread::panicking() {
            std::mem::forget(p);
        } else {
            std::panic::resume_unwind(p);
        }
    }
}

/// Wakes `w`; a panic of its wake is kept in `panic` ([`keep_first_panic`]).
fn wake_catching(w: std::task::Waker, panic: &mut Option<Box<dyn std::any::Any + Send>>) {
    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.wake())) {
        keep_first_panic(panic, p);
    }
}

/// Of the panics caught while work goes on (to be resumed once it is done), keeps the first in
/// `first`; a later one's payload is leaked, not dropped: its `Drop` could panic again,
/// outside any `catch_unwind`.
pub(crate) fn keep_first_panic(first: &mut Option<Box<dyn std::any::Any + Send>>, p: Box<dyn std::any::Any + Send>) {
    match first {
        None => *first = Some(p),
        Some(_) => std::mem::forget(p),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The book-keeping is consistent at every step, so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
impl TrackedQueue {
    /// The slots a receive queue's book holds (`None` for a send queue's).
    pub(crate) fn recv_slots(&self) -> Option<usize> {
        match &*self.lock() {
            Book::Recv(w) => Some(w.slots.len()),
            Book::Send(_) => None,
        }
    }
}

impl TrackedQueue {
    /// The book of a send queue (`Some(qp_num)`: completions imply the earlier requests'), or
    /// of a receive queue or a shared receive queue (`None`).
    pub(crate) fn new(depth: u32, send_of: Option<u32>) -> Self {
        let book = match send_of {
            Some(qp_num) => Book::Send(SendBook::new(depth, qp_num)),
            None => Book::Recv(WorkQueue::new(depth)),
        };
        TrackedQueue {
            wq: Lock::new(book),
            depth,
            ordered: send_of.is_some(),
            graves: Mutex::new(Vec::new()),
            grave_count: AtomicUsize::new(0),
            wakers: Mutex::new(Vec::new()),
            waker_count: AtomicUsize::new(0),
            settled: Settled::new(send_of.unwrap_or(0)),
            lane: LaneBook::new(),
        }
    }

    /// The depth the library keeps the queue to (what the program asked for at creation; the
    /// provider may have granted more).
    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }

    /// The queue, locked, for posting.
    #[inline(always)]
    pub(crate) fn lock(&self) -> LockGuard<'_, Book> {
        self.wq.lock()
    }

    /// Records the completion of `seq` (routed by a poll). Releases the graves and wakes the
    /// futures of requests that are no longer outstanding; for a queue with neither, that is
    /// one branch.
    #[inline]
    pub(crate) fn complete(&self, seq: u64, c: Completion) {
        self.wq.lock().complete_published(seq, c, &self.settled);
        self.recorded();
    }

    /// After a completion was recorded (the book's lock released): releases the graves and
    /// wakes the futures of requests that are no longer outstanding, if the queue has any.
    #[inline(always)]
    fn recorded(&self) {
        if (self.grave_count.load(Ordering::Acquire) | self.waker_count.load(Ordering::Acquire)) != 0 {
            self.after_complete();
        }
    }

    #[cold]
    #[inline(never)]
    fn after_complete(&self) {
        if self.grave_count.load(Ordering::Acquire) > 0 {
            let mut graves = lock(&self.graves);
            // Dropped under the graves' lock, so that whoever takes it next sees them gone
            // (`holds_settled_grave`); a drop that panics (a program's buffer) does not cut the
            // poll's routing short: its panic comes out once the routing is done
            // (`drop_deferring`).
            let mut i = 0;
            while i < graves.len() {
                if self.is_pending(graves[i].0) {
                    i += 1;
                } else {
                    drop_deferring(graves.remove(i).1);
                }
            }
            self.grave_count.store(graves.len(), Ordering::Release);
        }
        if self.waker_count.load(Ordering::Acquire) > 0 {
            self.wake_completed();
        }
        // Woken outside the locks, the CQ's routing lock included (`DeferWakes`): a waker may
        // run code of its executor, which may poll. A dropped grave's panic comes out here too.
        wake_kept();
    }

    /// Whether something a dropped token held is still kept although its request is no longer
    /// outstanding: the poll that completed it drops it just after, maybe on another thread,
    /// under the graves' lock, which this takes, so a drop in progress is waited out. (The count
    /// is stored after the drops, so a count of 0 means none is in progress.)
    pub(crate) fn holds_settled_grave(&self) -> bool {
        self.grave_count.load(Ordering::Acquire) > 0 && lock(&self.graves).iter().any(|(s, _)| !self.is_pending(*s))
    }

    /// Keeps (and forgets) the wakers of every request that is no longer outstanding, to be
    /// woken by the caller's [`wake_kept`], outside the locks. At most one waker per outstanding
    /// request is registered, so this is bounded by the depth.
    fn wake_completed(&self) {
        {
            let mut wakers = lock(&self.wakers);
            let book = self.wq.lock();
            // Moved out, not cloned, in one pass over the list (linear in the wakers: the
            // ones still waiting are swapped to the front, in their order); the list keeps its
            // storage (no allocation per wake). At most one waker per outstanding request:
            // bounded by the depth.
            let mut waiting = 0;
            for i in 0..wakers.len() {
                if book.is_pending(wakers[i].0) {
                    wakers.swap(waiting, i);
                    waiting += 1;
                }
            }
            for (_, w) in wakers.drain(waiting..) {
                keep(w);
            }
            self.waker_count.store(wakers.len(), Ordering::Release);
        }
    }

    /// A future waits for request `seq`: `waker` is woken once a poll records its completion
    /// (replacing the waker registered before for `seq`). The caller looks at the book again
    /// after this (`try_take`): a completion recorded between its last look and the
    /// registration wakes nobody, but that look sees it (the registration is stored before the
    /// book's lock is taken, and a completion is recorded under that lock before the count is
    /// read, so one of the two sees the other).
    pub(crate) fn register_waker(&self, seq: u64, waker: &std::task::Waker) {
        // Cloned before the lock: a waker's clone is the program's code (its executor's),
        // which may poll the CQ, whose routing wakes under this lock (`wake_completed`).
        let new = waker.clone();
        let unused = {
            let mut wakers = lock(&self.wakers);
            let unused = match wakers.iter_mut().find(|(s, _)| *s == seq) {
                // `will_wake` compares the wakers' data and vtable: no program code.
                Some((_, w)) if w.will_wake(&new) => Some(new),
                Some((_, w)) => Some(std::mem::replace(w, new)),
                None => {
                    if wakers.capacity() == 0 {
                        // At most one waker per outstanding request: room for the depth at
                        // once, so that registering never allocates again.
                        wakers.reserve_exact(self.depth as usize);
                    }
                    wakers.push((seq, new));
                    None
                }
            };
            self.waker_count.store(wakers.len(), Ordering::SeqCst);
            unused
        };
        // Dropped outside the lock, as in `forget_waker`.
        drop(unused);
    }

    /// Wakes (and forgets) every registered waker: the set of CQs the queue's requests
    /// complete on grew (a QP was attached to a shared receive queue), and each waiting future
    /// must wait on the new one too. The woken futures register again when polled.
    pub(crate) fn wake_all(&self) {
        if self.waker_count.load(Ordering::Acquire) == 0 {
            return;
        }
        {
            let mut wakers = lock(&self.wakers);
            self.waker_count.store(0, Ordering::Release);
            for (_, w) in wakers.drain(..) {
                keep(w);
            }
        }
        // Woken outside the locks, as in `after_complete`.
        wake_kept();
    }

    /// Reserves room for a waker per outstanding request and, on a send queue, for a stored
    /// completion per outstanding request (both bounded by the depth): for a queue that
    /// futures may wait on, whose waits then allocate nothing.
    pub(crate) fn reserve_for_futures(&self) {
        lock(&self.wakers).reserve_exact(self.depth as usize);
        if let Some(b) = self.wq.lock().as_send() {
            b.reserve_results();
        }
    }

    /// The future of request `seq` is gone or done: forgets its waker.
    pub(crate) fn forget_waker(&self, seq: u64) {
        if self.waker_count.load(Ordering::Acquire) == 0 {
            return;
        }
        let forgotten = {
            let mut wakers = lock(&self.wakers);
            let at = wakers.iter().position(|(s, _)| *s == seq);
            let forgotten = at.map(|i| wakers.remove(i));
            self.waker_count.store(wakers.len(), Ordering::Release);
            forgotten
        };
        // Dropped once the lock is released and the count is right: a waker's drop is the
        // program's code, which may take other locks, or panic.
        drop(forgotten);
    }

    /// A send queue's request `seq` completed, polled by the wait of its own token, which takes
    /// the completion at once (it is not stored): as [`TrackedQueue::complete`] followed by a
    /// take, under one lock. False (nothing changed: the caller records it as usual) for a
    /// receive queue, or if `seq` is not outstanding or its token was given up.
    #[inline]
    pub(crate) fn complete_taken(&self, seq: u64) -> bool {
        {
            let mut book = self.wq.lock();
            let Some(b) = book.as_send() else { return false };
            if !b.complete_taken(seq) {
                return false;
            }
            b.publish(&self.settled);
        }
        self.recorded();
        true
    }

    /// [`TrackedQueue::complete_taken`] for a QP's own receive queue: false (nothing changed)
    /// for a send queue too.
    #[inline]
    pub(crate) fn complete_taken_recv(&self, seq: u64) -> bool {
        {
            let mut book = self.wq.lock();
            let Book::Recv(q) = &mut *book else { return false };
            if !q.complete_taken(seq) {
                return false;
            }
        }
        self.recorded();
        true
    }

    /// Takes the completion of `seq` if it is complete. An implied one (an unsignaled send
    /// covered by a later completion) is handed over without the lock ([`Settled`]).
    #[inline(always)]
    pub(crate) fn try_take(&self, seq: u64) -> Take {
        if let Some(c) = self.implied(seq) {
            return Take::Done(c);
        }
        self.try_take_locked(seq)
    }

    /// Whether the book may hold the result of request `seq` already (routed there by another
    /// poll), read without the lock ([`Settled`]): a send queue's book publishes `done`, below
    /// which every request is complete, a receive queue's how many results it holds (`send`:
    /// this is a send queue's book). A change published after the read is one the caller's
    /// next look at the book under its lock sees.
    #[inline(always)]
    pub(crate) fn may_hold(&self, seq: u64, send: bool) -> bool {
        if send {
            seq < self.settled.done.load(Ordering::Acquire)
        } else {
            self.settled.held.load(Ordering::Acquire) > 0
        }
    }

    /// The completion of `seq` if it is an implied one, proved without the lock ([`Settled`]):
    /// the first half of [`TrackedQueue::try_take`], for a wait that hands the completion
    /// straight to its token.
    #[inline(always)]
    pub(crate) fn implied(&self, seq: u64) -> Option<Completion> {
        self.settled.is_implied(seq).then(|| Completion::implied(self.settled.qp_num, u32::MAX))
    }

    /// The second half of [`TrackedQueue::try_take`]: under the lock.
    #[inline(always)]
    pub(crate) fn try_take_locked(&self, seq: u64) -> Take {
        self.wq.lock().try_take_published(seq, &self.settled)
    }

    pub(crate) fn abandon(&self, seq: u64) {
        let mut book = self.wq.lock();
        book.abandon(seq);
        self.publish(&book);
    }

    /// A forced reset's flush of the book, which the caller holds locked: every outstanding
    /// request completes with a synthetic flush.
    pub(crate) fn flush_book(&self, book: &mut Book, qp_num: u32) {
        book.force_flush(qp_num);
        self.publish(book);
    }

    /// After a change of the book, under its lock: see [`Settled`].
    #[inline(always)]
    fn publish(&self, book: &Book) {
        match book {
            Book::Send(b) => b.publish(&self.settled),
            Book::Recv(q) => q.publish(&self.settled),
        }
    }

    pub(crate) fn owned_by(&self, owner: u64) -> Vec<u64> {
        self.wq.lock().owned_by(owner)
    }

    pub(crate) fn is_pending(&self, seq: u64) -> bool {
        self.wq.lock().is_pending(seq)
    }

    /// Requests outstanding on the device, the lane's included.
    pub(crate) fn outstanding(&self) -> u32 {
        let lane = u32::try_from(self.lane.outstanding()).unwrap_or(u32::MAX);
        self.wq.lock().outstanding().saturating_add(lane)
    }

    /// Whether request `seq` (of the book, not of a lane) is pending and may never complete by
    /// itself ([`Book::is_uncovered`]).
    pub(crate) fn is_uncovered(&self, seq: u64) -> bool {
        self.wq.lock().is_uncovered(seq)
    }

    /// Whether something outstanding on this queue may never complete by itself
    /// ([`WorkQueue::has_uncovered`], and the lane's unsignaled tail).
    pub(crate) fn has_uncovered_tail(&self) -> bool {
        // A receive lane's receives complete on their own, but for one the provider refused
        // without naming it.
        let lane = if self.ordered { self.lane.has_uncovered_tail() } else { self.lane.has_refused_tail() };
        self.wq.lock().has_uncovered() || lane
    }

    /// Releases `held`, memory (or a window) that request `seq` names, by the one rule of
    /// DESIGN.md §6: what the device may touch is released only once the request completed
    /// (its completion was polled), or the library observed a reset or a flush of the queue,
    /// or the queue was destroyed successfully. Dropped now if `seq` is no longer outstanding;
    /// otherwise kept with the queue ("buried") until a poll sees it complete, a reset
    /// (`QpShared::force_state`, `Qp::reset`) or a successful destroy releases it; leaked if the
    /// destroy fails ([`TrackedQueue::leak_graves`]). Every path that gives up memory of a
    /// posted request goes through here: dropped scope and owned tokens, refused posts.
    pub(crate) fn release(&self, seq: u64, held: Box<dyn std::any::Any + Send>) {
        let mut graves = lock(&self.graves);
        if self.is_pending(seq) {
            graves.push((seq, held));
            self.grave_count.store(graves.len(), Ordering::Release);
            // A poll that completed `seq` after the look above may have read the count before
            // the store, and released nothing (`recorded`): look again. Each look takes the
            // book's lock, so a completion recorded after this one finds the count stored.
            if !self.is_pending(seq) {
                let done = graves.iter().position(|(s, _)| *s == seq).map(|i| graves.remove(i));
                self.grave_count.store(graves.len(), Ordering::Release);
                drop(graves);
                drop(done);
            }
            return;
        }
        drop(graves);
        drop(held);
    }

    /// The queue's destroy failed: the device may still own the buried buffers, so they are
    /// leaked, never freed.
    pub(crate) fn leak_graves(&self) {
        let graves = std::mem::take(&mut *lock(&self.graves));
        self.grave_count.store(0, Ordering::Release);
        std::mem::forget(graves);
    }

    /// How many buffers of dropped tokens are kept.
    pub(crate) fn parked(&self) -> usize {
        self.grave_count.load(Ordering::Acquire)
    }

    /// The device no longer uses any buffer of this queue (the QP was reset): every pending
    /// request completes with a synthetic flush and the graves are released.
    ///
    /// The caller holds the routing lock of the queue's CQ: the lane's book is written by the
    /// pollers under it (`QpShared::flush_lanes_and_graves` for a QP).
    #[cfg(test)]
    pub(crate) fn force_flush(&self, qp_num: u32) {
        self.flush_book(&mut self.wq.lock(), qp_num);
        self.lane_flushed();
        self.release_graves();
    }

    /// A reset's flush of the queue's lane: what had not completed failed. Called with the
    /// routing lock of the queue's CQ held.
    pub(crate) fn lane_flushed(&self) {
        self.lane.force_flush();
    }

    /// A reset's release of the graves: the device no longer touches them. The futures of
    /// requests the reset completed are woken.
    pub(crate) fn release_graves(&self) {
        {
            let mut graves = lock(&self.graves);
            for (_, held) in graves.drain(..) {
                drop_deferring(held);
            }
            self.grave_count.store(0, Ordering::Release);
        }
        if self.waker_count.load(Ordering::Acquire) > 0 {
            self.wake_completed();
        }
        wake_kept();
    }
}

// The loom model of the lanes' protocol: `--cfg loom` only (see the module's documentation).
#[cfg(all(test, loom))]
mod loom_model;

// Property tests of the sequence arithmetic (not under `--cfg loom`: the book's atomics are
// loom's there).
#[cfg(all(test, not(loom)))]
mod properties;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wc::{CompletionSource, WcStatus};

    fn wc(qp: u32) -> Completion {
        Completion::implied(qp, typed_verbs_sys::IBV_WC_SEND)
    }

    fn send(depth: u32) -> Book {
        Book::Send(SendBook::new(depth, 1))
    }

    fn results(q: &Book) -> usize {
        match q {
            Book::Send(b) => b.results.len(),
            Book::Recv(w) => w.slots.len(),
        }
    }

    /// The send queue's room counts the requests of its lane still outstanding beside the
    /// book's own: a post fits only while both together stay below the depth.
    #[test]
    fn a_send_queues_room_counts_its_lanes_outstanding_requests() {
        let mut b = SendBook::new(8, 1);
        for _ in 0..5 {
            b.push_owned(true, 0);
        }
        assert_eq!(b.next_beside(0), Some(5));
        assert_eq!(b.next_beside(2), Some(5), "5 + 2 below 8");
        assert_eq!(b.next_beside(3), None, "5 + 3 fill the queue");
        assert_eq!(b.next_beside(7), None);
    }

    #[test]
    fn depth_is_enforced_and_freed_by_completion() {
        let mut q = send(2);
        assert_eq!(q.next_seq(), Some(0));
        q.push(true);
        q.push(true);
        assert_eq!(q.next_seq(), None);
        assert!(q.complete(0, wc(1)));
        assert_eq!(q.next_seq(), Some(2));
    }

    #[test]
    fn signaled_completion_covers_earlier_unsignaled() {
        let mut q = send(8);
        let a = q.push(false);
        let b = q.push(false);
        let c = q.push(true);
        assert!(!q.has_uncovered());
        assert_eq!(q.try_take(a), Take::Pending);
        assert!(q.complete(c, wc(1)));
        // Only the signaled request's own completion is stored.
        assert_eq!(results(&q), 1);
        match q.try_take(a) {
            Take::Done(x) => assert_eq!(x.source(), CompletionSource::ImpliedByLater),
            other => panic!("{other:?}"),
        }
        assert!(matches!(q.try_take(b), Take::Done(_)));
        match q.try_take(c) {
            Take::Done(x) => assert_eq!(x, wc(1)),
            other => panic!("{other:?}"),
        }
        assert_eq!(q.outstanding(), 0);
        assert_eq!(results(&q), 0);
        assert_eq!(q.try_take(c + 1), Take::Unknown, "never posted");
    }

    #[test]
    fn a_result_out_of_order_is_found() {
        // Two stored completions (their tokens not collected yet): the later one is taken first.
        let mut q = send(8);
        let a = q.push(true);
        let b = q.push(false);
        let c = q.push(true);
        let (ca, cc) = (Completion::implied(1, 7), Completion::implied(1, 9));
        assert!(q.complete(a, ca) && q.complete(c, cc));
        assert_eq!(q.try_take(c), Take::Done(cc));
        assert!(matches!(q.try_take(b), Take::Done(x) if x.source() == CompletionSource::ImpliedByLater));
        assert_eq!(q.try_take(a), Take::Done(ca));
        assert_eq!(results(&q), 0);
    }

    #[test]
    fn runs_of_unsignaled_requests_are_broken_before_they_fill_the_queue() {
        let mut q = send(8);
        let mut forced = 0;
        for _ in 0..8 {
            let signaled = q.must_signal(0);
            forced += usize::from(signaled);
            q.push(signaled);
        }
        assert_eq!(forced, 2, "every 4th of 8 is signaled");
        assert!(!q.has_uncovered());
    }

    #[test]
    fn receive_queue_does_not_imply() {
        let mut q = WorkQueue::new(8);
        let a = q.push_owned(true, 0);
        let b = q.push_owned(true, 0);
        assert!(q.complete(b, wc(1)));
        assert_eq!(q.try_take(a), Take::Pending);
        assert!(q.is_pending(a));
    }

    /// A receive taken by the wait that polled it: nothing is stored, the request is no longer
    /// outstanding, and a second take, a late duplicate or a given-up request changes nothing.
    #[test]
    fn receives_taken_by_their_poll_store_nothing_and_are_taken_once() {
        let mut q = WorkQueue::new(4);
        let (a, b, c) = (q.push_owned(true, 0), q.push_owned(true, 0), q.push_owned(true, 0));
        // Out of order, as a shared receive queue's may complete.
        assert!(q.complete_taken(b));
        assert_eq!(q.outstanding(), 2);
        assert_eq!(q.try_take(b), Take::Unknown, "taken once, stored nowhere");
        assert!(!q.complete_taken(b), "a duplicate changes nothing");
        assert!(!q.complete(b, wc(1)), "nor does a late completion of it");
        assert!(q.is_pending(a) && q.is_pending(c));
        q.abandon(c);
        assert!(!q.complete_taken(c), "a given-up request is recorded as usual, not taken");
        assert!(q.complete(c, wc(1)));
        assert!(q.complete_taken(a));
        assert_eq!((q.outstanding(), q.slots.len()), (0, 0), "every slot compacted away");
        assert!(!q.complete_taken(q.next()), "a number never posted");
    }

    /// A receive completion whose token was leaked stays uncollected at the front of the book:
    /// every later receive must still leave the book, which stays within twice the depth, and
    /// the leaked one is still found by its number (a scope's drain, a late take).
    #[test]
    fn an_uncollected_receive_completion_does_not_keep_the_receives_after_it() {
        let depth = 4;
        let mut q = WorkQueue::new(depth);
        let leaked = q.push_owned(true, 7);
        assert!(q.complete(leaked, wc(1)));
        for _ in 0..10_000 {
            let r = q.push_owned(true, 0);
            assert!(q.complete(r, wc(2)));
            assert!(matches!(q.try_take(r), Take::Done(_)));
            assert!(q.slots.len() <= 2 * depth as usize + 1, "the book grew to {}", q.slots.len());
        }
        assert_eq!((q.outstanding(), q.aside.len()), (0, 1));
        assert_eq!(q.owned_by(7), vec![leaked], "the scope that posted it still finds it");
        assert!(!q.is_pending(leaked) && !q.complete(leaked, wc(3)), "complete, once");
        assert_eq!(q.try_take(leaked), Take::Done(wc(1)));
        assert_eq!(q.try_take(leaked), Take::Unknown, "taken once");
        // Given up instead of taken, it goes too.
        let other = q.push_owned(true, 0);
        assert!(q.complete(other, wc(4)));
        for _ in 0..3 * depth {
            let r = q.push_owned(true, 0);
            assert!(q.complete_taken(r));
        }
        assert_eq!(q.aside.len(), 1);
        q.abandon(other);
        assert!(q.aside.is_empty() && q.slots.is_empty());
    }

    /// A receive that stays pending at the front of the book (never queued, or consumed by a
    /// QP whose destroy took its completion away) is set aside as well: later receives leave
    /// the book, which stays within twice the depth, and the stuck one keeps every answer a
    /// pending request gives (pending, uncovered, owned, completed once if it ever completes,
    /// flushed by a reset, dropped when abandoned).
    #[test]
    fn a_receive_that_never_completes_does_not_keep_the_receives_after_it() {
        let depth = 4;
        let mut q = WorkQueue::new(depth);
        let stuck = q.push_owned(false, 7);
        let lost = q.push_owned(true, 8);
        let late = q.push_owned(true, 9);
        let cycle = |q: &mut WorkQueue| {
            for _ in 0..3 * depth {
                let r = q.push_owned(true, 0);
                assert!(q.complete(r, wc(2)));
                assert!(matches!(q.try_take(r), Take::Done(_)));
                assert!(q.slots.len() <= 2 * depth as usize + 1, "the book grew to {}", q.slots.len());
            }
        };
        for _ in 0..1_000 {
            cycle(&mut q);
        }
        assert_eq!((q.outstanding(), q.stuck.len()), (3, 3));
        assert!(q.is_pending(stuck) && q.is_uncovered(stuck) && q.has_uncovered());
        assert!(q.is_pending(lost) && !q.is_uncovered(lost));
        assert_eq!(q.try_take(stuck), Take::Pending);
        assert_eq!((q.owned_by(7), q.owned_by(8)), (vec![stuck], vec![lost]));
        // One completes late, with its own completion: kept for its token, once.
        assert!(q.complete(late, wc(5)) && !q.complete(late, wc(6)));
        assert_eq!(q.try_take(late), Take::Done(wc(5)));
        assert_eq!(q.try_take(late), Take::Unknown);
        // One given up: dropped when it completes, which its token's wait then cannot take.
        q.abandon(lost);
        assert!(!q.complete_taken(lost), "a token given up takes nothing");
        assert!(q.complete(lost, wc(7)));
        assert_eq!((q.try_take(lost), q.owned_by(8)), (Take::Unknown, vec![]));
        assert_eq!(q.outstanding(), 1);
        // A reset flushes the last one.
        q.force_flush(0x11);
        assert_eq!((q.outstanding(), q.stuck.len(), q.has_uncovered()), (0, 0, false));
        assert!(matches!(q.try_take(stuck), Take::Done(c) if c.status() == crate::wc::WcStatus::WrFlushErr));
        cycle(&mut q);
        assert!(q.aside.is_empty() && q.stuck.is_empty());
    }

    #[test]
    fn abandoned_results_are_dropped() {
        for mut q in [send(8), Book::Recv(WorkQueue::new(8))] {
            let a = q.push(true);
            q.abandon(a);
            assert!(q.complete(a, wc(1)));
            assert_eq!(results(&q), 0, "nothing kept for an abandoned request");
            let b = q.push(true);
            assert!(q.complete(b, wc(1)));
            q.abandon(b);
            assert_eq!(results(&q), 0, "a completed result abandoned is dropped");
        }
    }

    #[test]
    fn unknown_and_duplicate_completions_are_rejected() {
        for mut q in [send(8), Book::Recv(WorkQueue::new(8))] {
            assert!(!q.complete(5, wc(1)));
            let a = q.push(true);
            assert!(q.complete(a, wc(1)));
            assert!(!q.complete(a, wc(1)));
        }
    }

    #[test]
    fn uncovered_tail_and_forced_flush() {
        let mut q = send(8);
        let a = q.push(true);
        let b = q.push(false);
        assert!(q.has_uncovered());
        // Only the tail itself is uncovered: `a`'s own completion will come.
        assert!(!q.is_uncovered(a) && q.is_uncovered(b));
        q.force_flush(7);
        assert!(!q.is_uncovered(b), "complete");
        assert_eq!(q.outstanding(), 0);
        assert!(!q.has_uncovered());
        for s in [a, b] {
            match q.try_take(s) {
                Take::Done(c) => {
                    assert_eq!(c.status(), WcStatus::WrFlushErr);
                    assert_eq!(c.source(), CompletionSource::ForcedReset);
                }
                other => panic!("{other:?}"),
            }
        }
        // A late flush of a request the reset completed changes nothing.
        assert!(!q.complete(b, wc(1)));
    }

    /// Counts its drops.
    #[cfg(not(loom))]
    struct Sentinel(std::sync::Arc<std::sync::atomic::AtomicUsize>);
    #[cfg(not(loom))]
    impl Drop for Sentinel {
        fn drop(&mut self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    // Not under `--cfg loom`: `TrackedQueue`'s locks are loom's there, usable only in a model.
    #[cfg(not(loom))]
    #[test]
    fn release_keeps_memory_until_the_completion_the_reset_or_a_failed_destroy() {
        let drops = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let dropped = || drops.load(std::sync::atomic::Ordering::SeqCst);
        let q = TrackedQueue::new(8, Some(1));
        // Outstanding: kept until its completion is polled.
        let a = q.lock().push(true);
        q.release(a, Box::new(Sentinel(drops.clone())));
        assert_eq!((q.parked(), dropped()), (1, 0));
        q.complete(a, wc(1));
        assert_eq!((q.parked(), dropped()), (0, 1), "released by the completion");
        // Already complete: released at once.
        q.release(a, Box::new(Sentinel(drops.clone())));
        assert_eq!((q.parked(), dropped()), (0, 2));
        // A reset releases what is kept.
        let b = q.lock().push(true);
        q.release(b, Box::new(Sentinel(drops.clone())));
        q.force_flush(1);
        assert_eq!((q.parked(), dropped()), (0, 3), "released by the reset");
        // A failed destroy leaks it: never dropped.
        let c = q.lock().push(true);
        q.release(c, Box::new(Sentinel(drops.clone())));
        q.leak_graves();
        drop(q);
        assert_eq!(dropped(), 3, "leaked, not freed");
    }

    /// A parked buffer of a completed request is seen (`holds_settled_grave`) until its drop has
    /// finished, also when another thread's poll completes the request: a scope's drain waits on
    /// it before returning, so that a parked window is deallocated before the program may
    /// deregister its region. While its request is pending, it is parked but not settled.
    #[cfg(not(loom))]
    #[test]
    fn a_parked_buffer_is_held_until_its_drop_on_another_thread_is_done() {
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        use std::sync::Arc;
        struct Slow(Arc<AtomicBool>);
        impl Drop for Slow {
            fn drop(&mut self) {
                std::thread::sleep(std::time::Duration::from_millis(100));
                self.0.store(true, SeqCst);
            }
        }
        let q = Arc::new(TrackedQueue::new(8, Some(1)));
        let a = q.lock().push(true);
        let dropped = Arc::new(AtomicBool::new(false));
        q.release(a, Box::new(Slow(Arc::clone(&dropped))));
        assert!(q.parked() == 1 && !q.holds_settled_grave(), "parked, its request pending");
        let poller = std::thread::spawn({
            let q = Arc::clone(&q);
            move || q.complete(a, wc(1))
        });
        while q.is_pending(a) {
            std::thread::yield_now();
        }
        // Complete now; its buffer's drop may still be running on the poller.
        while q.holds_settled_grave() {
            std::thread::yield_now();
        }
        assert!(dropped.load(SeqCst), "no longer held only once dropped");
        poller.join().unwrap();
    }

    /// Wakes (and counts) a future's task.
    #[cfg(not(loom))]
    struct CountWake(std::sync::atomic::AtomicUsize);
    #[cfg(not(loom))]
    impl std::task::Wake for CountWake {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A waker that runs its task inline: the task looks at its request (the book's lock),
    /// then reports.
    #[cfg(not(loom))]
    struct InlineTask {
        q: std::sync::Arc<TrackedQueue>,
        seq: u64,
        tx: std::sync::mpsc::Sender<&'static str>,
    }
    #[cfg(not(loom))]
    impl std::task::Wake for InlineTask {
        fn wake(self: std::sync::Arc<Self>) {
            let _ = self.q.is_pending(self.seq);
            let _ = self.tx.send("the inline task ran");
        }
    }

    /// Completes request 1 of `q` when its thread's locals are destroyed (a per-thread
    /// connection whose drop waits for its last requests).
    #[cfg(not(loom))]
    struct OnThreadExit {
        q: std::sync::Arc<TrackedQueue>,
        tx: std::sync::mpsc::Sender<&'static str>,
    }
    #[cfg(not(loom))]
    impl Drop for OnThreadExit {
        fn drop(&mut self) {
            let gone = DEFERRED.try_with(|_| ()).is_err();
            let _ = self.tx.send(if gone { "the thread's list of wakers is gone" } else { "the list is still there" });
            self.q.complete(1, wc(1));
            let _ = self.tx.send("complete returned");
        }
    }

    #[cfg(not(loom))]
    std::thread_local! {
        static ON_EXIT: std::cell::RefCell<Option<OnThreadExit>> = const { std::cell::RefCell::new(None) };
    }

    /// A completion recorded while its thread's locals are destroyed (its list of kept wakers
    /// already gone) wakes a waker that runs its task inline after the book's and the wakers'
    /// locks are released: woken under them, the task spun forever on the book's lock.
    #[cfg(not(loom))]
    #[test]
    fn a_completion_recorded_while_thread_locals_are_destroyed_wakes_outside_the_locks() {
        use std::sync::Arc;
        let q = Arc::new(TrackedQueue::new(8, Some(1)));
        let (tx, rx) = std::sync::mpsc::channel();
        let (q2, tx2) = (Arc::clone(&q), tx.clone());
        std::thread::spawn(move || {
            // Registered first: destroyed after DEFERRED (thread-local destructors run last
            // registered first).
            ON_EXIT.with(|e| *e.borrow_mut() = Some(OnThreadExit { q: Arc::clone(&q2), tx: tx2.clone() }));
            let a = q2.lock().push(true);
            let b = q2.lock().push(true);
            assert_eq!((a, b), (0, 1));
            // A first wake on this thread sets up its DEFERRED (destructor registered now).
            let w = Arc::new(CountWake(std::sync::atomic::AtomicUsize::new(0)));
            q2.register_waker(a, &std::task::Waker::from(Arc::clone(&w)));
            q2.complete(a, wc(1));
            assert_eq!(w.0.load(std::sync::atomic::Ordering::SeqCst), 1);
            let inline = Arc::new(InlineTask { q: Arc::clone(&q2), seq: b, tx: tx2.clone() });
            q2.register_waker(b, &std::task::Waker::from(inline));
        });
        let mut seen = Vec::new();
        while let Ok(m) = rx.recv_timeout(std::time::Duration::from_secs(10)) {
            seen.push(m);
            if m == "complete returned" {
                break;
            }
        }
        assert!(seen.contains(&"the thread's list of wakers is gone"), "{seen:?}");
        assert!(
            seen.contains(&"complete returned") && seen.contains(&"the inline task ran"),
            "the exiting thread never returned from TrackedQueue::complete: {seen:?}"
        );
    }

    /// The wakers of awaited requests: woken once when their request completes (on a send
    /// queue, also by a later request's completion), or by a reset; a forgotten one never.
    #[cfg(not(loom))]
    #[test]
    fn a_registered_waker_is_woken_once_by_its_completion_a_later_one_or_a_reset() {
        use std::sync::Arc;
        let woken = |w: &Arc<CountWake>| w.0.load(std::sync::atomic::Ordering::SeqCst);
        let new = || Arc::new(CountWake(std::sync::atomic::AtomicUsize::new(0)));
        let q = TrackedQueue::new(8, Some(1));
        let a = q.lock().push(false);
        let b = q.lock().push(true);
        let c = q.lock().push(true);
        let (wa, wb, wc_) = (new(), new(), new());
        q.register_waker(a, &std::task::Waker::from(Arc::clone(&wa)));
        q.register_waker(b, &std::task::Waker::from(Arc::clone(&wb)));
        // Registered again (a future polled again): replaced, not added.
        q.register_waker(b, &std::task::Waker::from(Arc::clone(&wb)));
        q.register_waker(c, &std::task::Waker::from(Arc::clone(&wc_)));
        q.forget_waker(c);
        q.complete(b, wc(1));
        assert_eq!((woken(&wa), woken(&wb)), (1, 1), "b's completion completes the unsignaled a too");
        q.complete(c, wc(1));
        assert_eq!(woken(&wc_), 0, "a forgotten waker is not woken");
        assert_eq!((woken(&wa), woken(&wb)), (1, 1), "each woken once");
        // A receive queue: only the request that completed; a reset wakes the rest.
        let r = TrackedQueue::new(8, None);
        let x = r.lock().push(true);
        let y = r.lock().push(true);
        let (wx, wy) = (new(), new());
        r.register_waker(x, &std::task::Waker::from(Arc::clone(&wx)));
        r.register_waker(y, &std::task::Waker::from(Arc::clone(&wy)));
        r.complete(y, wc(1));
        assert_eq!((woken(&wx), woken(&wy)), (0, 1));
        r.force_flush(1);
        assert_eq!((woken(&wx), woken(&wy)), (1, 1), "the reset completed x");
    }

    /// A completion taken by its own token's wait (`complete_taken`) releases the graves and
    /// wakes the futures of the requests it completes, as a recorded one does: here an awaited
    /// unsignaled request before it, and a dropped token's parked buffer.
    #[cfg(not(loom))]
    #[test]
    fn a_completion_taken_by_its_wait_releases_the_graves_and_wakes_what_it_completes() {
        use std::sync::Arc;
        let drops = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let q = TrackedQueue::new(8, Some(1));
        let a = q.lock().push(false);
        let b = q.lock().push(false);
        let c = q.lock().push(true);
        let wa = Arc::new(CountWake(std::sync::atomic::AtomicUsize::new(0)));
        q.register_waker(a, &std::task::Waker::from(Arc::clone(&wa)));
        q.abandon(b);
        q.release(b, Box::new(Sentinel(drops.clone())));
        assert_eq!(q.parked(), 1);
        assert!(q.complete_taken(c));
        assert_eq!(wa.0.load(std::sync::atomic::Ordering::SeqCst), 1, "a's future woken");
        assert_eq!((q.parked(), drops.load(std::sync::atomic::Ordering::SeqCst)), (0, 1), "b's buffer released");
        assert!(!q.complete_taken(c), "taken once");
    }

    /// While a `DeferWakes` is alive on the thread (a poll holding a CQ's routing lock), the
    /// futures a completion completes are not woken: the outermost one wakes them, once, when
    /// it is dropped. With none alive they are woken at once.
    #[cfg(not(loom))]
    #[test]
    fn completions_recorded_under_a_defer_wakes_wake_when_the_outermost_is_dropped() {
        use std::sync::Arc;
        let woken = |w: &Arc<CountWake>| w.0.load(std::sync::atomic::Ordering::SeqCst);
        let new = || Arc::new(CountWake(std::sync::atomic::AtomicUsize::new(0)));
        let q = TrackedQueue::new(8, Some(1));
        let a = q.lock().push(true);
        let b = q.lock().push(true);
        let (wa, wb) = (new(), new());
        q.register_waker(a, &std::task::Waker::from(Arc::clone(&wa)));
        q.register_waker(b, &std::task::Waker::from(Arc::clone(&wb)));
        let outer = DeferWakes::new();
        let inner = DeferWakes::new();
        q.complete(a, wc(1));
        drop(inner);
        assert_eq!(woken(&wa), 0, "not while the outer one is alive");
        drop(outer);
        assert_eq!(woken(&wa), 1, "woken by the outermost");
        q.complete(b, wc(1));
        assert_eq!(woken(&wb), 1, "none alive: at once");
        drop(DeferWakes::new());
        assert_eq!((woken(&wa), woken(&wb)), (1, 1), "each once");
    }

    /// Wakers that run their task inline, each task dropping a `DeferWakes` of its own (as a
    /// poll does): every one is woken once, in the order kept, and no task runs inside another
    /// (a nested wake would pop the next waker and go one level deeper per waker).
    #[cfg(not(loom))]
    #[test]
    fn inline_tasks_woken_from_one_list_never_nest() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use std::sync::{Arc, Mutex};
        struct Inline {
            id: usize,
            depth: Arc<AtomicUsize>,
            deepest: Arc<AtomicUsize>,
            order: Arc<Mutex<Vec<usize>>>,
        }
        impl std::task::Wake for Inline {
            fn wake(self: Arc<Self>) {
                let d = self.depth.fetch_add(1, SeqCst) + 1;
                self.deepest.fetch_max(d, SeqCst);
                self.order.lock().unwrap().push(self.id);
                // The task's poll: a guard of its own, dropped with nothing routed.
                drop(DeferWakes::new());
                self.depth.fetch_sub(1, SeqCst);
            }
        }
        let (depth, deepest) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let order = Arc::new(Mutex::new(Vec::new()));
        let q = TrackedQueue::new(16, Some(1));
        let seqs: Vec<u64> = (0..8).map(|_| q.lock().push(false)).collect();
        let last = q.lock().push(true);
        for (id, &seq) in seqs.iter().enumerate() {
            let w = Inline { id, depth: depth.clone(), deepest: deepest.clone(), order: order.clone() };
            q.register_waker(seq, &std::task::Waker::from(Arc::new(w)));
        }
        q.complete(last, wc(1));
        assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>(), "each once, in the order kept");
        assert_eq!(deepest.load(SeqCst), 1, "no task ran inside another");
    }

    /// A waker that panics (here: at its wake) unwinds out of the wake, once every other
    /// waker kept was woken, each once (left kept on the thread, they would wait for its next
    /// wake, which may never come: on a multi-threaded runtime the retry can run elsewhere).
    #[cfg(not(loom))]
    #[test]
    fn a_panicking_waker_panics_out_of_the_wake_after_the_others_were_woken() {
        use std::sync::Arc;
        struct PanicWake;
        impl std::task::Wake for PanicWake {
            fn wake(self: Arc<Self>) {
                panic!("a hostile waker");
            }
        }
        let woken = |w: &Arc<CountWake>| w.0.load(std::sync::atomic::Ordering::SeqCst);
        let new = || Arc::new(CountWake(std::sync::atomic::AtomicUsize::new(0)));
        let q = TrackedQueue::new(8, Some(1));
        let a = q.lock().push(false);
        let b = q.lock().push(false);
        let c = q.lock().push(true);
        let d = q.lock().push(true);
        let (wa, wc_, wd) = (new(), new(), new());
        q.register_waker(a, &std::task::Waker::from(Arc::clone(&wa)));
        q.register_waker(b, &std::task::Waker::from(Arc::new(PanicWake)));
        q.register_waker(c, &std::task::Waker::from(Arc::clone(&wc_)));
        q.register_waker(d, &std::task::Waker::from(Arc::clone(&wd)));
        // c's completion completes a and b too: three wakers kept, one of them panics.
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| q.complete(c, wc(1))));
        assert!(unwound.is_err(), "the waker's panic reaches the caller");
        assert_eq!((woken(&wa), woken(&wc_)), (1, 1), "the others were woken all the same");
        assert!(!PENDING.with(std::cell::Cell::get), "nothing left kept");
        q.complete(d, wc(1));
        assert_eq!((woken(&wa), woken(&wc_), woken(&wd)), (1, 1, 1), "each once");
    }

    /// Wakers kept while the thread unwinds (a `DeferWakes` dropped by a panic): one that
    /// panics too is leaked, not resumed (a panic while unwinding aborts the process), and the
    /// others are woken.
    #[cfg(not(loom))]
    #[test]
    fn a_waker_that_panics_while_the_thread_unwinds_does_not_abort() {
        use std::sync::Arc;
        struct PanicWake;
        impl std::task::Wake for PanicWake {
            fn wake(self: Arc<Self>) {
                panic!("a hostile waker");
            }
        }
        let other = Arc::new(CountWake(std::sync::atomic::AtomicUsize::new(0)));
        let o = Arc::clone(&other);
        let unwound = std::panic::catch_unwind(move || {
            let _wakes = DeferWakes::new();
            keep(std::task::Waker::from(Arc::new(PanicWake)));
            keep(std::task::Waker::from(o));
            panic!("the poll's own panic");
        });
        let payload = unwound.expect_err("the poll's panic comes out");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"the poll's own panic"));
        assert_eq!(other.0.load(std::sync::atomic::Ordering::SeqCst), 1, "the other waker was woken");
        assert!(!PENDING.with(std::cell::Cell::get));
    }

    /// Futures forgotten after they registered (nothing forgets their wakers): the registry
    /// holds at most one waker per outstanding request however often each is polled, and
    /// empties (dropping the wakers) as the requests complete; `wake_all` (an SRQ attach) wakes
    /// and forgets every one.
    #[cfg(not(loom))]
    #[test]
    fn wakers_of_forgotten_futures_are_bounded_by_the_outstanding_requests_and_dropped_on_completion() {
        use std::sync::Arc;
        let w = Arc::new(CountWake(std::sync::atomic::AtomicUsize::new(0)));
        let q = TrackedQueue::new(8, None);
        let seqs: Vec<u64> = (0..8).map(|_| q.lock().push(true)).collect();
        for _ in 0..100 {
            for &s in &seqs {
                q.register_waker(s, &std::task::Waker::from(Arc::clone(&w)));
            }
        }
        assert_eq!(q.waker_count.load(Ordering::SeqCst), 8);
        assert_eq!(lock(&q.wakers).len(), 8);
        assert_eq!(Arc::strong_count(&w), 9, "one clone per registered request");
        for &s in &seqs[..6] {
            q.complete(s, wc(1));
        }
        assert_eq!((q.waker_count.load(Ordering::SeqCst), Arc::strong_count(&w)), (2, 3));
        q.wake_all();
        assert_eq!((q.waker_count.load(Ordering::SeqCst), Arc::strong_count(&w)), (0, 1));
        assert_eq!(w.0.load(Ordering::SeqCst), 8, "each woken once");
    }

    /// Threads share one send queue's book through its lock (a spin lock): two post (signaled
    /// or not, under the library's signaling rule) and take their own results in any order,
    /// giving some tokens up; a device thread completes the requests in posting order (the
    /// signaled ones, and a few unsignaled ones that fail: an error has a completion of its
    /// own). Every result taken is its request's own completion, or, for an unsignaled request
    /// that did not fail, an implied success; nothing is kept once all were taken or given up.
    #[cfg(not(loom))]
    #[test]
    fn threads_sharing_a_send_queue_book_each_get_their_own_results() {
        use std::collections::VecDeque;
        const PER_THREAD: u64 = 3000;
        let q = TrackedQueue::new(16, Some(1));
        // The device's queue, in posting order: (request, whether it completes on its own).
        let device: Mutex<VecDeque<(u64, bool)>> = Mutex::new(VecDeque::new());
        let finished = std::sync::atomic::AtomicUsize::new(0);
        // Counts a poster as finished posting even if it panics, so the device thread ends.
        struct Finished<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Finished<'_> {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::AcqRel);
            }
        }
        let own = |seq: u64| {
            let mut c = Completion::implied(1, typed_verbs_sys::IBV_WC_RDMA_WRITE);
            c.byte_len = seq as u32;
            c.source = CompletionSource::Own;
            c
        };
        let check = |seq: u64, has_own: bool, got: Take| match got {
            Take::Done(c) if has_own => {
                assert_eq!((c.source(), c.byte_len()), (CompletionSource::Own, seq as u32), "request {seq}: {c:?}")
            }
            Take::Done(c) => assert_eq!(c.source(), CompletionSource::ImpliedByLater, "request {seq}: {c:?}"),
            other => panic!("request {seq}: {other:?}"),
        };
        std::thread::scope(|t| {
            for owner in 1..=2u64 {
                let (q, device, finished) = (&q, &device, &finished);
                t.spawn(move || {
                    let mut rng = Rng(owner.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                    let mut mine: Vec<(u64, bool)> = Vec::new();
                    let posting = Finished(finished);
                    for k in 0..PER_THREAD {
                        let wants_signal = k + 1 == PER_THREAD || rng.below(4) == 0;
                        let fails = !wants_signal && rng.below(8) == 0;
                        loop {
                            let mut book = q.lock();
                            if book.next_seq().is_none() {
                                drop(book);
                                std::thread::yield_now();
                                continue;
                            }
                            let signaled = wants_signal || book.must_signal(0);
                            let seq = book.push_owned(signaled, owner);
                            lock(device).push_back((seq, signaled || fails));
                            mine.push((seq, signaled || fails));
                            break;
                        }
                        if rng.below(2) == 0 {
                            let i = rng.below(mine.len() as u64) as usize;
                            let (seq, has_own) = mine[i];
                            match q.try_take(seq) {
                                Take::Pending => {}
                                got => {
                                    check(seq, has_own, got);
                                    mine.swap_remove(i);
                                }
                            }
                        }
                        if rng.below(16) == 0 {
                            let (seq, _) = mine.swap_remove(rng.below(mine.len() as u64) as usize);
                            q.abandon(seq);
                        }
                    }
                    drop(posting);
                    while let Some((seq, has_own)) = mine.pop() {
                        let got = loop {
                            match q.try_take(seq) {
                                Take::Pending => std::thread::yield_now(),
                                got => break got,
                            }
                        };
                        check(seq, has_own, got);
                    }
                });
            }
            t.spawn(|| loop {
                let next = lock(&device).pop_front();
                match next {
                    Some((seq, true)) => q.complete(seq, own(seq)),
                    Some((_, false)) => {}
                    None if finished.load(Ordering::Acquire) == 2 => break,
                    None => std::thread::yield_now(),
                }
            });
        });
        assert_eq!(q.outstanding(), 0);
        assert_eq!(results(&q.lock()), 0, "results kept that nobody will take");
    }

    #[test]
    fn a_refused_request_that_may_be_queued_is_uncovered() {
        // Send queue: a refused request recorded unsignaled is an uncovered tail, settled by a
        // later signaled completion.
        let mut sq = send(8);
        let refused = sq.push(false);
        assert!(sq.has_uncovered());
        let later = sq.push(true);
        assert!(!sq.has_uncovered());
        assert!(sq.complete(later, wc(1)));
        assert!(matches!(sq.try_take(refused), Take::Done(_)));
        // Receive queue: any refused receive is uncovered; nothing else settles it but a reset.
        let mut rq = WorkQueue::new(8);
        let ok = rq.push_owned(true, 0);
        let refused = rq.push_owned(false, 0);
        let after = rq.push_owned(true, 0);
        assert!(rq.has_uncovered());
        assert!(!rq.is_uncovered(ok) && rq.is_uncovered(refused) && !rq.is_uncovered(after));
        assert!(rq.complete(ok, wc(1)));
        assert!(rq.complete(after, wc(1)));
        assert!(rq.has_uncovered() && rq.is_pending(refused));
        rq.force_flush(1);
        assert!(!rq.has_uncovered());
    }

    use crate::test_util::Rng;

    /// Model-based property test: random posts (signaled or not), in-order completions of
    /// signaled requests (as a send queue delivers them), takes and abandons. Invariants: the
    /// queue never holds more than its depth; every request's result is handed over at most
    /// once; once the device is quiet, every request not abandoned is complete.
    #[test]
    fn send_queue_book_keeping_matches_a_model() {
        for seed in 1..200u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let depth = 1 + rng.below(16) as u32;
            let mut q = send(depth);
            let mut posted: Vec<(u64, bool)> = Vec::new(); // (seq, signaled)
            let mut device_done = 0usize; // requests the device has finished, in order
            let mut taken = std::collections::HashSet::new();
            let mut abandoned = std::collections::HashSet::new();
            for _ in 0..400 {
                match rng.below(4) {
                    0 => {
                        if let Some(seq) = q.next_seq() {
                            let signaled = q.must_signal(0) || rng.below(3) == 0;
                            assert_eq!(q.push(signaled), seq);
                            posted.push((seq, signaled));
                        } else {
                            assert_eq!(q.outstanding(), depth, "full only at depth");
                        }
                    }
                    1 => {
                        // The device finishes the next request; it reports it if signaled.
                        if device_done < posted.len() {
                            let (seq, signaled) = posted[device_done];
                            device_done += 1;
                            if signaled {
                                assert!(q.complete(seq, wc(1)));
                            }
                        }
                    }
                    2 => {
                        if !posted.is_empty() {
                            // As a token: at most once, and never after it was given up.
                            let (seq, _) = posted[rng.below(posted.len() as u64) as usize];
                            if !taken.contains(&seq) && !abandoned.contains(&seq) {
                                if let Take::Done(_) = q.try_take(seq) {
                                    taken.insert(seq);
                                }
                            }
                        }
                    }
                    _ => {
                        if !posted.is_empty() {
                            let (seq, _) = posted[rng.below(posted.len() as u64) as usize];
                            if !taken.contains(&seq) {
                                q.abandon(seq);
                                abandoned.insert(seq);
                            }
                        }
                    }
                }
                assert!(q.outstanding() <= depth);
            }
            // Quiesce: the device finishes everything; a signaled request ends each run (the
            // library forces one at least every depth/2), except possibly an unsignaled tail.
            while device_done < posted.len() {
                let (seq, signaled) = posted[device_done];
                device_done += 1;
                if signaled {
                    q.complete(seq, wc(1));
                }
            }
            let last_signaled = posted.iter().rposition(|&(_, s)| s);
            for (i, &(seq, _)) in posted.iter().enumerate() {
                let covered = last_signaled.is_some_and(|l| i <= l);
                if covered && !taken.contains(&seq) && !abandoned.contains(&seq) {
                    assert!(matches!(q.try_take(seq), Take::Done(_)), "seed {seed}: request {seq} lost");
                }
            }
            // Everything is complete or uncovered, and only results nobody took are kept.
            assert!(results(&q) <= posted.len() - taken.len() - abandoned.len());
        }
    }
}
