//! Owned buffers: work requests that own their memory, for long-lived pipelines.
//!
//! [`Qp::post_send_owned`] and [`Qp::post_recv_owned`] take requests whose memory is owned
//! ([`Chunk`](crate::mr::Chunk)s, inline bytes, `'static` views) and return an
//! [`OwnedToken`], which owns the buffers and a reference to the QP instead of borrowing them.
//! The token hands the buffers back with the completion, on success, on error and on flush
//! alike ([`OwnedToken::wait`]). Because nothing is borrowed, the QP can change state while
//! requests are outstanding: receives can be posted in INIT and collected in RTS, as the C
//! pingpong examples do.
//!
//! Leak safety follows ownership, not borrows (tokio-uring's model):
//! - a forgotten token (`mem::forget`) leaks its buffers; the memory is never freed;
//! - a token dropped while its request is outstanding hands its buffers to the QP, which keeps
//!   them until the request completes (they are released by a later poll) or until the device
//!   is done with the QP (reset or destroy);
//! - the QP itself is destroyed only when the `Qp` and every token are gone.
#![allow(unsafe_code)]

use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::time::Duration;

use crate::ah::Ah;
use crate::error::Error;
use crate::qp::{Qp, QueueArc, Refused};
use crate::queue::Take;
use crate::scope::{post_raw, Completes, Idle, PostError, Waiting};
use crate::sgl::Scatter;
use crate::transport::{CanPostRecv, CanPostSend, QpState, Transport};
use crate::wc::Completion;
use crate::wr::{AddressedFor, Recv, SendWr};

/// A posted work request that owns its buffers (see the [module documentation](self)).
#[must_use = "the token is how the buffers come back; dropping it parks them until the request completes"]
pub struct OwnedToken<B: Send + 'static> {
    q: QueueArc,
    seq: u64,
    /// The buffers and the address handle; taken exactly once, by `finish` or by `drop`.
    held: ManuallyDrop<(B, Option<Ah>)>,
    taken: bool,
}

impl<B: Send + 'static> fmt::Debug for OwnedToken<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedToken").field("request", &self.q.as_ref().describe(self.seq)).finish()
    }
}

/// A wait on an [`OwnedToken`] that ran out: the error, and the token to wait on again.
#[derive(Debug)]
pub struct OwnedWaitError<B: Send + 'static> {
    /// The timeout (or poll failure).
    pub error: Error,
    /// The token, still valid.
    pub token: OwnedToken<B>,
}

impl<B: Send + 'static> From<OwnedWaitError<B>> for Error {
    fn from(e: OwnedWaitError<B>) -> Self {
        e.error
    }
}

impl<B: Send + 'static> OwnedToken<B> {
    /// True once the request's completion has been routed to this token (by any poll, e.g.
    /// [`Cq::progress`](crate::cq::Cq::progress) or another token's wait). Does not poll.
    pub fn is_complete(&self) -> bool {
        !self.q.as_ref().tracked().is_pending(self.seq)
    }
}

impl<B: Completes + Send + 'static> OwnedToken<B> {
    /// The completion and the buffers, if the request has completed (polls the CQ once).
    ///
    /// # Errors
    /// `Err(self)` while the request is outstanding (or if polling failed).
    pub fn try_complete(self) -> std::result::Result<(Completion, B::Output), Self> {
        let q = self.q.as_ref();
        if let Take::Done(c) = q.tracked().try_take(self.seq) {
            return Ok(self.finish(c));
        }
        let _ = q.poll();
        match q.tracked().try_take(self.seq) {
            Take::Done(c) => Ok(self.finish(c)),
            _ => Err(self),
        }
    }

    /// Waits at most `timeout` for the completion, polling the QP's CQ, and hands back the
    /// completion (whatever its status) with the buffers.
    ///
    /// # Errors
    /// [`OwnedWaitError`] with [`Error::Timeout`] (or a poll failure) and the token.
    #[inline(always)]
    pub fn wait(self, timeout: Duration) -> std::result::Result<(Completion, B::Output), OwnedWaitError<B>> {
        // What is already complete comes back at once; the polling loop is out of line.
        if let Take::Done(c) = self.q.as_ref().tracked().try_take(self.seq) {
            return Ok(self.finish(c));
        }
        self.poll_until_done(timeout)
    }

    #[inline(never)]
    fn poll_until_done(self, timeout: Duration) -> std::result::Result<(Completion, B::Output), OwnedWaitError<B>> {
        // The clock is read only once a poll came back empty (`Idle`).
        let mut idle = Idle::new(Waiting::Yield, timeout);
        loop {
            let q = self.q.as_ref();
            match q.poll() {
                Ok(0) if idle.expired() => {
                    let what = format!("the completion of owned {}", q.describe(self.seq));
                    return Err(OwnedWaitError { error: Error::Timeout { what, after: timeout }, token: self });
                }
                Ok(_) => {}
                Err(error) => return Err(OwnedWaitError { error, token: self }),
            }
            if let Take::Done(c) = q.tracked().try_take(self.seq) {
                return Ok(self.finish(c));
            }
        }
    }

    #[inline(always)]
    fn finish(mut self, c: Completion) -> (Completion, B::Output) {
        self.taken = true;
        // SAFETY: `taken` was false (set only here and in `drop`, and `finish` consumes the
        // token), so `held` has not been taken; it is never used again (`drop` sees `taken`).
        let (buffers, _ah) = unsafe { ManuallyDrop::take(&mut self.held) };
        (c, buffers.complete(&c))
    }
}

impl<B: Send + 'static> OwnedToken<B> {
    pub(crate) fn new(q: QueueArc, seq: u64, buffers: B, ah: Option<Ah>) -> Self {
        OwnedToken { q, seq, held: ManuallyDrop::new((buffers, ah)), taken: false }
    }
}

impl<B: Send + 'static> Drop for OwnedToken<B> {
    #[inline(always)]
    fn drop(&mut self) {
        if !self.taken {
            self.give_up();
        }
    }
}

impl<B: Send + 'static> OwnedToken<B> {
    /// A token dropped before its completion was taken: its buffers go to the queue's release
    /// rule.
    #[cold]
    #[inline(never)]
    fn give_up(&mut self) {
        self.taken = true;
        // SAFETY: not taken before (`taken` was false) and never used again.
        let held = unsafe { ManuallyDrop::take(&mut self.held) };
        let q = self.q.as_ref().tracked();
        // The device may still use the buffers: the queue's one release rule keeps them until
        // it is done.
        q.release(self.seq, Box::new(held));
        q.abandon(self.seq);
    }
}

impl<T: Transport, S: QpState> Qp<T, S> {
    /// `ibv_post_send` of a request that owns its memory (`W::Buffers: 'static`: chunks,
    /// inline bytes, `'static` views). The QP must be in RTS; the opcode must be valid for its
    /// transport (compile-time). The token hands the buffers back with the completion.
    ///
    /// # Errors
    /// Returns the request with a [`PostError`], as
    /// [`Scope::post_send`](crate::scope::Scope::post_send).
    ///
    /// See ibv_post_send(3).
    #[doc(alias = "ibv_post_send")]
    #[inline(always)]
    pub fn post_send_owned<W>(&self, wr: W) -> std::result::Result<OwnedToken<W::Buffers>, PostError<W>>
    where
        S: CanPostSend,
        W: SendWr<T> + AddressedFor<T>,
        W::Buffers: Send + 'static,
    {
        // SAFETY: the memory `wr` names is owned (`W::Buffers: 'static` holds no borrow) and
        // moves into the token, which never frees it while the request is outstanding: on drop
        // it hands it to the QP until the request completes or the QP is reset/destroyed; a
        // leaked token leaks it.
        let seq = match unsafe { post_raw(self, &wr, 0) } {
            Ok(seq) => seq,
            Err(Refused { error, kept: None }) => return Err(PostError { error, wr: Some(wr) }),
            Err(Refused { error, kept: Some(seq) }) => {
                // Possibly queued: kept with the queue, under the same rule as a dropped token.
                let held = (wr.address_handle().cloned(), wr.into_buffers());
                self.shared.sq.release(seq, Box::new(held));
                // No token will take its completion.
                self.shared.sq.abandon(seq);
                return Err(PostError { error, wr: None });
            }
        };
        let keep = wr.address_handle().cloned();
        Ok(OwnedToken::new(QueueArc::Send(Arc::clone(&self.shared)), seq, wr.into_buffers(), keep))
    }

    /// `ibv_post_recv` of a receive into owned memory (a [`Chunk`](crate::mr::Chunk) of a
    /// region with LOCAL_WRITE). The QP must be in INIT, RTR or RTS; the token survives later
    /// state transitions.
    ///
    /// # Errors
    /// Returns the request with a [`PostError`]: [`Error::QueueFull`], [`Error::QpBroken`],
    /// [`Error::Verb`] with `ibv_post_recv`.
    ///
    /// See ibv_post_recv(3).
    #[doc(alias = "ibv_post_recv")]
    pub fn post_recv_owned<L>(&self, wr: Recv<L>) -> std::result::Result<OwnedToken<L>, PostError<Recv<L>>>
    where
        S: CanPostRecv,
        L: Scatter + Send + 'static,
    {
        let mut sges = match self.shared.recv_sges::<T, L>(&wr.buf) {
            Ok(sges) => sges,
            Err(error) => return Err(PostError { error, wr: Some(wr) }),
        };
        let mut raw = sges.recv_wr();
        // SAFETY: as in `post_send_owned`: the buffer is owned and moves into the token.
        let seq = match unsafe { self.shared.post_recv(&mut raw, 0) } {
            Ok(seq) => seq,
            Err(Refused { error, kept: None }) => return Err(PostError { error, wr: Some(wr) }),
            Err(Refused { error, kept: Some(seq) }) => {
                self.shared.rq.release(seq, Box::new(wr.buf));
                // No token will take its completion.
                self.shared.rq.abandon(seq);
                return Err(PostError { error, wr: None });
            }
        };
        Ok(OwnedToken::new(QueueArc::Recv(Arc::clone(&self.shared)), seq, wr.buf, None))
    }
}

impl<T: Transport, S: QpState> Qp<T, S> {
    /// Buffers of owned tokens that were dropped while their request was outstanding, kept by
    /// the QP until the device is done with them (a diagnostic).
    pub fn parked_buffers(&self) -> usize {
        self.shared.sq.parked() + self.shared.rq.parked()
    }
}
