//! Scatter/gather lists: the `sg_list` / `num_sge` of ibv_post_send(3) and ibv_post_recv(3).
//!
//! A work request that names local memory takes one view or several:
//!
//! - [`Gather`]: memory the device reads (a send or RDMA WRITE source): one
//!   [`LocalSource`] ([`LocalBuf`](crate::mr::LocalBuf), [`LocalBufMut`](crate::mr::LocalBufMut),
//!   [`Chunk`](crate::mr::Chunk)), an array `[L; N]` of them, or a tuple of up to four of
//!   different kinds (views of several regions, borrowed and owned mixed);
//! - [`Scatter`]: memory the device writes (a receive buffer, an RDMA READ destination): the
//!   same shapes, where **every** entry is a [`LocalSink`] (LOCAL_WRITE), checked at compile
//!   time.
//!
//! The list's length is part of its type, so a request's entries live in the request itself:
//! posting a list allocates nothing. Its entries are checked when posting, before the provider
//! sees them: every entry's region in the QP's protection domain, at most the QP's
//! `max_send_sge` / `max_recv_sge` entries ([`Error::TooManySges`]),
//! and for ODP memory the operation verified for the transport. Entries of zero bytes are left
//! out of the list (some devices read a zero length as 2 GiB). Atomics take exactly one
//! 8-byte entry: their result buffer is a single [`LocalSink`], never a list.
//!
//! ```no_run
//! # use std::time::Duration;
//! # use typed_verbs::prelude::*;
//! # fn f(qp: &Qp<RC, RTS>, head: &Mr<access::LocalRw>, body: &Mr<access::LocalRw>) -> typed_verbs::Result<()> {
//! scope(|s| -> typed_verbs::Result<()> {
//!     // One SEND gathered from two regions.
//!     let t = s.post_send(qp, wr::Send::new((head.slice(..64)?, body.slice(..)?)))?;
//!     let (c, (_head, _body)) = s.wait(t, Duration::from_secs(5))?;
//!     c.ok()?;
//!     Ok(())
//! })??;
//! # Ok(()) }
//! ```
//!
//! See ibv_post_send(3), ibv_post_recv(3).

use typed_verbs_sys as sys;

use crate::error::{Error, Result};
use crate::mr::{LocalSink, LocalSource, OdpTag};
use crate::pd::PdId;

mod sealed {
    sealed_trait!();
}

/// The storage of a request's scatter/gather entries: `[ibv_sge; N]`, sized by the request's
/// type. Sealed; only the library uses it.
#[doc(hidden)]
pub trait SgeStore: sealed::Sealed + Copy + Send + Sync + 'static {
    /// The number of entries it holds.
    const CAPACITY: usize;
    /// All entries zero.
    fn empty() -> Self;
    /// The entries.
    fn entries(&self) -> &[sys::ibv_sge];
    /// The entries, mutably.
    fn entries_mut(&mut self) -> &mut [sys::ibv_sge];
}

impl<const N: usize> sealed::Sealed for [sys::ibv_sge; N] {}
impl<const N: usize> SgeStore for [sys::ibv_sge; N] {
    const CAPACITY: usize = N;
    #[inline(always)]
    fn empty() -> Self {
        [sys::ibv_sge { addr: 0, length: 0, lkey: 0 }; N]
    }
    #[inline(always)]
    fn entries(&self) -> &[sys::ibv_sge] {
        self
    }
    #[inline(always)]
    fn entries_mut(&mut self) -> &mut [sys::ibv_sge] {
        self
    }
}

/// Memory the local device reads for one work request, as one scatter/gather entry or
/// several: a [`LocalSource`], an array `[L; N]` of them, or a tuple of two to four (each its
/// own kind). Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not registered memory the device can read",
    label = "needs a view of registered memory: `LocalBuf`, `LocalBufMut`, a `Chunk`, or an array or tuple of them",
    note = "ibv_post_send(3): the gather list (sg_list, num_sge) names registered memory; a tuple takes two to four entries"
)]
pub trait Gather: sealed::Sealed + crate::scope::Completes {
    /// The storage of its entries.
    #[doc(hidden)]
    type Sges: SgeStore;
    /// Calls `f` with each entry, its region's ODP verification and its PD, in order.
    #[doc(hidden)]
    fn each(&self, f: &mut impl FnMut(sys::ibv_sge, OdpTag, PdId));
    /// The total length in bytes.
    fn total_len(&self) -> u64 {
        let mut n = 0u64;
        self.each(&mut |sge, _, _| n += u64::from(sge.length));
        n
    }
    /// The entries, checked (`Collected::of`); a single entry takes a shorter path.
    #[doc(hidden)]
    #[inline(always)]
    fn collect(&self, verb: &'static str) -> Result<Collected<Self::Sges>> {
        Collected::of(self, verb)
    }
}

/// Memory the local device writes for one work request (a receive buffer, an RDMA READ
/// destination): a [`Gather`] list whose every entry is a [`LocalSink`]. Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not memory the device may write: every entry of a scatter list needs LOCAL_WRITE",
    label = "every entry must be a `LocalBufMut` (from `Mr::slice_mut`) or a `Chunk` of a region with LOCAL_WRITE",
    note = "a receive buffer and an RDMA READ destination are written by the local device, entry by entry (ibv_reg_mr(3): IBV_ACCESS_LOCAL_WRITE; ibv_post_recv(3): sg_list)"
)]
pub trait Scatter: Gather {}

impl<L: LocalSource> sealed::Sealed for L {}
impl<L: LocalSource> Gather for L {
    type Sges = [sys::ibv_sge; 1];
    #[inline(always)]
    fn each(&self, f: &mut impl FnMut(sys::ibv_sge, OdpTag, PdId)) {
        f(self.sge(), self.odp_tag(), self.pd_id());
    }
    #[inline(always)]
    fn total_len(&self) -> u64 {
        u64::from(self.sge().length)
    }
    /// One entry: one PD, one ODP tag, at most `u32::MAX` bytes; `Collected::of`'s checks
    /// reduce to the ODP write placement.
    #[inline(always)]
    fn collect(&self, verb: &'static str) -> Result<Collected<[sys::ibv_sge; 1]>> {
        let (sge, odp) = (self.sge(), self.odp_tag());
        odp.check_device_access(sge.addr, verb)?;
        // Some devices read a zero byte count as 2 GiB: an empty view is no entry. Its memory's
        // verification is the request's all the same (a test of the length more on the data
        // path, for a request that moves nothing, is not spent).
        let num_sge = i32::from(sge.length != 0);
        Ok(Collected { sges: [sge], num_sge, odp, pd: Some(self.pd_id()) })
    }
}
impl<L: LocalSink> Scatter for L {}

impl<L: LocalSource, const N: usize> sealed::Sealed for [L; N] {}
impl<L: LocalSource, const N: usize> Gather for [L; N] {
    type Sges = [sys::ibv_sge; N];
    #[inline(always)]
    fn each(&self, f: &mut impl FnMut(sys::ibv_sge, OdpTag, PdId)) {
        for l in self {
            f(l.sge(), l.odp_tag(), l.pd_id());
        }
    }
}
impl<L: LocalSink, const N: usize> Scatter for [L; N] {}

macro_rules! tuple_list {
    ($n:literal: $($t:ident . $i:tt),*) => {
        impl<$($t: LocalSource),*> sealed::Sealed for ($($t,)*) {}
        impl<$($t: LocalSource),*> Gather for ($($t,)*) {
            type Sges = [sys::ibv_sge; $n];
            #[inline(always)]
            fn each(&self, f: &mut impl FnMut(sys::ibv_sge, OdpTag, PdId)) {
                $(f(self.$i.sge(), self.$i.odp_tag(), self.$i.pd_id());)*
            }
        }
        impl<$($t: LocalSink),*> Scatter for ($($t,)*) {}
    };
}
tuple_list!(2: A.0, B.1);
tuple_list!(3: A.0, B.1, C.2);
tuple_list!(4: A.0, B.1, C.2, D.3);

/// The entries of a list, checked: what a work request carries. Opaque: only the library
/// reads it.
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct Collected<S> {
    pub(crate) sges: S,
    /// The entries in use (those of zero bytes are left out).
    pub(crate) num_sge: i32,
    /// The ODP verification that holds for every entry (see [`OdpTag::meet`]).
    pub(crate) odp: OdpTag,
    /// The PD of the entries (all the same), if there is any.
    pub(crate) pd: Option<PdId>,
}

impl<S: SgeStore> Collected<S> {
    /// No entry.
    pub(crate) fn none() -> Self {
        Collected { sges: S::empty(), num_sge: 0, odp: OdpTag::default(), pd: None }
    }

    /// The entries of `list`, for `verb`; each ODP entry must suit the device's ODP path
    /// ([`OdpTag::check_device_access`]), whether the device reads or writes it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if two entries belong to different protection domains, an
    /// ODP entry is misplaced, or the entries total more than `u32::MAX` bytes (one message's
    /// length, which the provider sums in 32 bits).
    #[inline(always)]
    pub(crate) fn of<G: Gather<Sges = S> + ?Sized>(list: &G, verb: &'static str) -> Result<Self> {
        let mut out = Self::none();
        let mut result = Ok(());
        let mut n = 0usize;
        let mut total = 0u64;
        list.each(&mut |sge, odp, pd| {
            if result.is_err() {
                return;
            }
            match out.pd {
                Some(first) if first != pd => {
                    result = Err(Error::invalid(
                        verb,
                        "the scatter/gather entries belong to different protection domains (every lkey must be of the QP's PD)",
                    ));
                    return;
                }
                _ => out.pd = Some(pd),
            }
            if let Err(e) = odp.check_device_access(sge.addr, verb) {
                result = Err(e);
                return;
            }
            // Some devices read a zero byte count as 2 GiB: an empty view is no entry, and its
            // memory's verification does not count either (the device touches none of it).
            if sge.length != 0 {
                out.odp = if n == 0 { odp } else { out.odp.meet(odp) };
                out.sges.entries_mut()[n] = sge;
                n += 1;
                total += u64::from(sge.length);
            }
        });
        result?;
        // Both length limits are above IMPLICIT_MAX_OP: a list within it has nothing more to
        // check (no instruction more for the lists of the data path).
        if total > crate::odp::IMPLICIT_MAX_OP as u64 {
            Self::check_long(list, total, verb)?;
        }
        out.num_sge = n as i32;
        Ok(out)
    }

    /// The limits of a list of more than `IMPLICIT_MAX_OP` bytes (`total`).
    #[cold]
    #[inline(never)]
    fn check_long<G: Gather<Sges = S> + ?Sized>(list: &G, total: u64, verb: &'static str) -> Result<()> {
        // One message's byte count is a u32 everywhere below (the provider's sum of the
        // entries, `ibv_wc.byte_len`, the port's `max_msg_sz`): a longer list would reach the
        // device as the sum modulo 2^32.
        if total > u64::from(u32::MAX) {
            return Err(Error::invalid(
                verb,
                format!("the scatter/gather entries total {total} bytes; one work request moves at most u32::MAX"),
            ));
        }
        // "The size of operations that can use this lkey is limited to 128MB" (the ODP
        // manual): an operation with any entry through the implicit ODP lkey moves at most
        // IMPLICIT_MAX_OP bytes in all, its other entries' included (this is called only for
        // lists above it).
        let mut implicit = false;
        list.each(&mut |_, odp, _| implicit |= odp.is_implicit());
        if implicit {
            return Err(Error::invalid(
                verb,
                format!(
                    "the entries total {total} bytes, some through the implicit ODP lkey: an operation that uses it \
                     moves at most {} (\"The size of operations that can use this lkey is limited to 128MB\")",
                    crate::odp::IMPLICIT_MAX_OP
                ),
            ));
        }
        Ok(())
    }

    /// A receive request over the entries in use: `sg_list` points into `self`, which must not
    /// move before the request is posted.
    pub(crate) fn recv_wr(&mut self) -> sys::ibv_recv_wr {
        sys::ibv_recv_wr { sg_list: self.sges.entries_mut().as_mut_ptr(), num_sge: self.num_sge, ..Default::default() }
    }

    /// The entries in use.
    pub(crate) fn used(&self) -> &[sys::ibv_sge] {
        &self.sges.entries()[..self.num_sge as usize]
    }

    /// The total length of the entries in use.
    #[cfg(test)]
    pub(crate) fn total_len(&self) -> u64 {
        self.used().iter().map(|s| u64::from(s.length)).sum()
    }
}

/// Refuses a list of `n` entries above a queue's `max` (`max_send_sge`, `max_recv_sge`, an
/// SRQ's `max_sge`) before the provider sees it.
pub(crate) fn check_count(queue: &'static str, qp_num: u32, n: i32, max: u32) -> Result<()> {
    if n as u32 > max {
        return Err(Error::TooManySges { queue, qp_num, n: n as u32, max });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mr::{LocalBuf, LocalBufMut};
    use crate::test_util::assert_refused;

    fn buf(addr: u64, len: u32, pd: PdId) -> LocalBuf<'static> {
        LocalBuf::from_parts(addr, len, 7, OdpTag::default(), pd)
    }

    /// A list keeps its entries in order, leaves out the empty ones, and sums the rest.
    #[test]
    fn lists_keep_order_and_leave_out_empty_entries() {
        let pd = PdId::dummy();
        let list =
            (buf(0x1000, 10, pd), buf(0x2000, 0, pd), LocalBufMut::from_parts(0x3000, 5, 9, OdpTag::default(), pd));
        let c = Collected::of(&list, "t").expect("one PD");
        assert_eq!(c.num_sge, 2);
        let got: Vec<_> = c.used().iter().map(|s| (s.addr, s.length, s.lkey)).collect();
        assert_eq!(got, [(0x1000, 10, 7), (0x3000, 5, 9)]);
        assert_eq!(c.total_len(), 15);
        assert_eq!(list.total_len(), 15);
        assert_eq!(c.pd, Some(pd));
        let arr = [buf(0x10, 1, pd), buf(0x20, 2, pd), buf(0x30, 3, pd)];
        let c = Collected::of(&arr, "t").expect("one PD");
        assert_eq!(c.used().iter().map(|s| s.addr).collect::<Vec<_>>(), [0x10, 0x20, 0x30]);
        let empty: Collected<[sys::ibv_sge; 2]> = Collected::of(&[buf(1, 0, pd), buf(2, 0, pd)], "t").unwrap();
        assert_eq!((empty.num_sge, empty.total_len()), (0, 0));
    }

    /// A list whose entries total more than `u32::MAX` bytes is refused: the provider sums the
    /// entries into a 32-bit length (and `ibv_wc.byte_len` is one), so it would move the sum
    /// modulo 2^32. `u32::MAX` bytes in all are still one list.
    #[test]
    fn lists_beyond_u32_max_bytes_in_all_are_refused() {
        let pd = PdId::dummy();
        let sink = |addr, len| LocalBufMut::from_parts(addr, len, 9, OdpTag::default(), pd);
        let r = Collected::of(&[sink(0x1000, u32::MAX), sink(0x2_0000_0000, 2)], "ibv_post_send");
        assert!(
            matches!(r, Err(Error::InvalidArgument { verb: "ibv_post_send", .. })),
            "accepted: {:?}",
            r.map(|c| (c.num_sge, c.total_len()))
        );
        // 32 copies of one shared 128 MiB + 1 view: 2^32 + 32 bytes, which wraps to 32.
        let v = buf(0x1000, (1 << 27) + 1, pd);
        let r = Collected::of(&[v; 32], "ibv_post_send");
        assert_refused(r.map(|c| c.total_len()), "ibv_post_send", "one work request moves at most u32::MAX");
        let c = Collected::of(&[sink(0x1000, u32::MAX - 1), sink(0x2_0000_0000, 1)], "t").expect("u32::MAX");
        assert_eq!((c.num_sge, c.total_len()), (2, u64::from(u32::MAX)));
    }

    /// ODP in lists: a pinned entry adds nothing to an ODP entry's verification; two ODP
    /// entries keep only the operations both verified, and none if their transports differ;
    /// every ODP entry is placed on its own (on a device whose ODP packets go to page
    /// starts), whatever entry comes first.
    #[test]
    fn odp_lists_keep_only_what_every_entry_verified() {
        use crate::mr::page_size;
        let pd = PdId::dummy();
        let (rc, ud) = (sys::IBV_QPT_RC, sys::IBV_QPT_UD);
        let (send, recv, write) = (sys::IBV_ODP_SUPPORT_SEND, sys::IBV_ODP_SUPPORT_RECV, sys::IBV_ODP_SUPPORT_WRITE);
        let page = page_size() as u64;
        let odp = |addr, len, t, ops| LocalBufMut::from_parts(addr, len, 5, OdpTag::verified(t, ops, true), pd);
        let pinned = |addr, len| LocalBufMut::from_parts(addr, len, 6, OdpTag::default(), pd);
        // Pinned + ODP(RC, SEND): a SEND on RC, not a WRITE, not on UD.
        let c = Collected::of(&(pinned(0x10, 8), odp(page, 8, rc, send)), "t").unwrap();
        assert!(c.odp.check(rc, "RC", send).is_ok());
        assert!(c.odp.check(rc, "RC", write).is_err());
        assert!(c.odp.check(ud, "UD", send).is_err());
        // The refusal names the verb the operation is posted with.
        for (op, verb) in
            [(write, "ibv_post_send"), (recv, "ibv_post_recv"), (sys::IBV_ODP_SUPPORT_SRQ_RECV, "ibv_post_recv")]
        {
            assert_refused(c.odp.check(rc, "RC", op), verb, "is used on a RC QP for operation");
        }
        // ODP(RC, SEND|WRITE) + ODP(RC, SEND): SEND only.
        let c = Collected::of(&[odp(page, 8, rc, send | write), odp(2 * page, 8, rc, send)], "t").unwrap();
        assert!(c.odp.check(rc, "RC", send).is_ok());
        assert!(c.odp.check(rc, "RC", write).is_err());
        // ODP(RC, SEND) + ODP(UD, SEND): nothing, on either transport.
        let c = Collected::of(&[odp(page, 8, rc, send), odp(2 * page, 8, ud, send)], "t").unwrap();
        assert!(c.odp.check(rc, "RC", send).is_err() && c.odp.check(ud, "UD", send).is_err());
        // An empty ODP entry of another transport first is no entry: the rest decides.
        let c = Collected::of(&[odp(page, 0, ud, send), odp(2 * page, 8, rc, send)], "t").unwrap();
        assert_eq!(c.num_sge, 1);
        assert!(c.odp.check(rc, "RC", send).is_ok() && c.odp.check(ud, "UD", send).is_err());
        // The second ODP entry starts mid-page, behind a pinned and an aligned one: refused
        // whether the device writes the list (a receive) or reads it (a SEND's source).
        for ops in [recv, send] {
            let r = Collected::of(&(pinned(0x10, 8), odp(page, 8, rc, ops), odp(2 * page + 8, 8, rc, ops)), "t");
            assert_refused(r.map(|c| c.num_sge), "t", "start on a page boundary");
        }
        // Pinned memory may start anywhere, and so may ODP memory of a device that places
        // packets where they are aimed.
        let aimed = LocalBufMut::from_parts(2 * page + 8, 8, 5, OdpTag::verified(rc, send, false), pd);
        assert!(Collected::of(&(pinned(0x10, 8), odp(page, 8, rc, send), aimed), "t").is_ok());
    }

    /// The entries through the implicit ODP lkey take at most `IMPLICIT_MAX_OP` bytes in all
    /// (each view is within it on its own: two of them were not); entries of explicit ODP or
    /// pinned memory beside them do not count.
    #[test]
    fn operations_through_the_implicit_lkey_total_at_most_its_operation_limit() {
        use crate::odp::IMPLICIT_MAX_OP;
        let pd = PdId::dummy();
        let (rc, send) = (sys::IBV_QPT_RC, sys::IBV_ODP_SUPPORT_SEND);
        let max = IMPLICIT_MAX_OP as u32;
        let implicit = |addr, len| LocalBuf::from_parts(addr, len, 7, OdpTag::verified(rc, send, false).implicit(), pd);
        let explicit = |addr, len| LocalBuf::from_parts(addr, len, 8, OdpTag::verified(rc, send, false), pd);
        let pinned = |addr, len| LocalBuf::from_parts(addr, len, 9, OdpTag::default(), pd);
        let r = Collected::of(&[implicit(0x1000, max), implicit(0x1000, max)], "ibv_post_send");
        assert!(matches!(r, Err(Error::InvalidArgument { verb: "ibv_post_send", .. })), "{:?}", r.map(|c| c.num_sge));
        let r = Collected::of(&(implicit(0x1000, max / 2), implicit(0x1000, max / 2), implicit(0x1000, 1)), "t");
        assert!(r.is_err(), "one byte over, in three entries");
        let c = Collected::of(&(implicit(0x1000, max / 2), implicit(0x1000, max / 2)), "t").expect("exactly the limit");
        assert_eq!(c.num_sge, 2);
        // The operation's whole size counts once one entry uses the implicit lkey.
        let r = Collected::of(&(implicit(0x1000, max), explicit(0x1000, max), pinned(0x1000, max)), "t");
        assert!(r.is_err(), "three times the limit, one entry through the implicit lkey");
        let r = Collected::of(&(implicit(0x1000, 1), pinned(0x1000, max)), "t");
        assert!(r.is_err(), "one byte through the implicit lkey, one over in all");
        let c = Collected::of(&(implicit(0x1000, max / 2), explicit(0x1000, max / 4), pinned(0x1000, max / 4)), "t")
            .expect("exactly the limit in all");
        assert_eq!(c.num_sge, 3);
        assert!(c.odp.check(rc, "RC", send).is_ok(), "the implicit mark is no operation");
        // Without an implicit entry, the limit is the message's, u32::MAX.
        Collected::of(&(explicit(0x1000, max), pinned(0x1000, max)), "t").expect("no implicit entry");
    }

    /// Entries of two protection domains are refused; so is a count above the queue's maximum.
    #[test]
    fn foreign_entries_and_long_lists_are_refused() {
        let (a, b) = (PdId::dummy(), PdId::other_dummy());
        let r = Collected::of(&[buf(0x1000, 8, a), buf(0x2000, 8, b)], "ibv_post_send");
        assert!(matches!(r, Err(Error::InvalidArgument { verb: "ibv_post_send", .. })), "{:?}", r.err());
        assert!(check_count("send", 1, 2, 2).is_ok());
        assert!(matches!(check_count("send", 1, 3, 2), Err(Error::TooManySges { n: 3, max: 2, .. })));
        assert!(check_count("receive", 1, 0, 0).is_ok());
    }
}
