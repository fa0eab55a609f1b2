//! Work completions: `struct ibv_wc` as a typed value.

use typed_verbs_sys as sys;

use crate::cq::WcFlagsQuirk;
use crate::error::Error;

macro_rules! c_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $c:path,)* }) => {
        $(#[$doc])*
        #[non_exhaustive]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
            /// A value this library does not know, preserved as reported.
            Unknown(u32),
        }
        impl $name {
            /// Decodes the C value; unknown values are preserved in `Unknown`.
            #[inline]
            pub fn from_raw(v: u32) -> Self {
                #[allow(unreachable_patterns)]
                match v {
                    $($c => $name::$variant,)*
                    other => $name::Unknown(other),
                }
            }
            /// The C value.
            pub fn to_raw(self) -> u32 {
                match self {
                    $($name::$variant => $c,)*
                    $name::Unknown(v) => v,
                }
            }

            /// The C name, e.g. `"IBV_WC_REM_ACCESS_ERR"`; `"unknown"` for an unknown value.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => stringify!($c).trim_start_matches("sys::").trim_start(),)*
                    $name::Unknown(_) => "unknown",
                }
            }
        }

        impl std::fmt::Display for $name {
            /// The C name, like `ibv_wc_status_str` but with the constant's spelling; unknown
            /// values are shown with their number.
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self {
                    $name::Unknown(v) => write!(f, "unknown ({v})"),
                    known => f.write_str(known.name()),
                }
            }
        }
    };
}

c_enum! {
    /// The status of a work completion (`enum ibv_wc_status`), see ibv_poll_cq(3).
    WcStatus {
        /// `IBV_WC_SUCCESS`.
        Success = sys::IBV_WC_SUCCESS,
        /// `IBV_WC_LOC_LEN_ERR`: local length error (e.g. a receive buffer too small).
        LocLenErr = sys::IBV_WC_LOC_LEN_ERR,
        /// `IBV_WC_LOC_QP_OP_ERR`: local QP operation error.
        LocQpOpErr = sys::IBV_WC_LOC_QP_OP_ERR,
        /// `IBV_WC_LOC_EEC_OP_ERR`.
        LocEecOpErr = sys::IBV_WC_LOC_EEC_OP_ERR,
        /// `IBV_WC_LOC_PROT_ERR`: local protection error (bad lkey).
        LocProtErr = sys::IBV_WC_LOC_PROT_ERR,
        /// `IBV_WC_WR_FLUSH_ERR`: flushed because the QP is in the error state.
        WrFlushErr = sys::IBV_WC_WR_FLUSH_ERR,
        /// `IBV_WC_MW_BIND_ERR`: memory window bind failed.
        MwBindErr = sys::IBV_WC_MW_BIND_ERR,
        /// `IBV_WC_BAD_RESP_ERR`.
        BadRespErr = sys::IBV_WC_BAD_RESP_ERR,
        /// `IBV_WC_LOC_ACCESS_ERR`.
        LocAccessErr = sys::IBV_WC_LOC_ACCESS_ERR,
        /// `IBV_WC_REM_INV_REQ_ERR`: remote invalid request.
        RemInvReqErr = sys::IBV_WC_REM_INV_REQ_ERR,
        /// `IBV_WC_REM_ACCESS_ERR`: remote access error (bad rkey, rights, range).
        RemAccessErr = sys::IBV_WC_REM_ACCESS_ERR,
        /// `IBV_WC_REM_OP_ERR`: remote operation error.
        RemOpErr = sys::IBV_WC_REM_OP_ERR,
        /// `IBV_WC_RETRY_EXC_ERR`: transport retry counter exceeded (dead peer).
        RetryExcErr = sys::IBV_WC_RETRY_EXC_ERR,
        /// `IBV_WC_RNR_RETRY_EXC_ERR`: receiver-not-ready retry counter exceeded.
        RnrRetryExcErr = sys::IBV_WC_RNR_RETRY_EXC_ERR,
        /// `IBV_WC_LOC_RDD_VIOL_ERR`.
        LocRddViolErr = sys::IBV_WC_LOC_RDD_VIOL_ERR,
        /// `IBV_WC_REM_INV_RD_REQ_ERR`.
        RemInvRdReqErr = sys::IBV_WC_REM_INV_RD_REQ_ERR,
        /// `IBV_WC_REM_ABORT_ERR`.
        RemAbortErr = sys::IBV_WC_REM_ABORT_ERR,
        /// `IBV_WC_INV_EECN_ERR`.
        InvEecnErr = sys::IBV_WC_INV_EECN_ERR,
        /// `IBV_WC_INV_EEC_STATE_ERR`.
        InvEecStateErr = sys::IBV_WC_INV_EEC_STATE_ERR,
        /// `IBV_WC_FATAL_ERR`.
        FatalErr = sys::IBV_WC_FATAL_ERR,
        /// `IBV_WC_RESP_TIMEOUT_ERR`.
        RespTimeoutErr = sys::IBV_WC_RESP_TIMEOUT_ERR,
        /// `IBV_WC_GENERAL_ERR`.
        GeneralErr = sys::IBV_WC_GENERAL_ERR,
        /// `IBV_WC_TM_ERR`.
        TmErr = sys::IBV_WC_TM_ERR,
        /// `IBV_WC_TM_RNDV_INCOMPLETE`.
        TmRndvIncomplete = sys::IBV_WC_TM_RNDV_INCOMPLETE,
    }
}

c_enum! {
    /// The operation a completion reports (`enum ibv_wc_opcode`). Only meaningful when the
    /// status is [`WcStatus::Success`].
    WcOpcode {
        /// `IBV_WC_SEND`.
        Send = sys::IBV_WC_SEND,
        /// `IBV_WC_RDMA_WRITE`.
        RdmaWrite = sys::IBV_WC_RDMA_WRITE,
        /// `IBV_WC_RDMA_READ`.
        RdmaRead = sys::IBV_WC_RDMA_READ,
        /// `IBV_WC_COMP_SWAP`.
        CompSwap = sys::IBV_WC_COMP_SWAP,
        /// `IBV_WC_FETCH_ADD`.
        FetchAdd = sys::IBV_WC_FETCH_ADD,
        /// `IBV_WC_BIND_MW`.
        BindMw = sys::IBV_WC_BIND_MW,
        /// `IBV_WC_LOCAL_INV`.
        LocalInv = sys::IBV_WC_LOCAL_INV,
        /// `IBV_WC_TSO`.
        Tso = sys::IBV_WC_TSO,
        /// `IBV_WC_ATOMIC_WRITE`.
        AtomicWrite = sys::IBV_WC_ATOMIC_WRITE,
        /// `IBV_WC_RECV`.
        Recv = sys::IBV_WC_RECV,
        /// `IBV_WC_RECV_RDMA_WITH_IMM`.
        RecvRdmaWithImm = sys::IBV_WC_RECV_RDMA_WITH_IMM,
        /// `IBV_WC_TM_ADD`.
        TmAdd = sys::IBV_WC_TM_ADD,
        /// `IBV_WC_TM_DEL`.
        TmDel = sys::IBV_WC_TM_DEL,
        /// `IBV_WC_TM_SYNC`.
        TmSync = sys::IBV_WC_TM_SYNC,
        /// `IBV_WC_TM_RECV`.
        TmRecv = sys::IBV_WC_TM_RECV,
        /// `IBV_WC_TM_NO_TAG`.
        TmNoTag = sys::IBV_WC_TM_NO_TAG,
        /// `IBV_WC_DRIVER1`.
        Driver1 = sys::IBV_WC_DRIVER1,
        /// `IBV_WC_DRIVER2`.
        Driver2 = sys::IBV_WC_DRIVER2,
        /// `IBV_WC_DRIVER3`.
        Driver3 = sys::IBV_WC_DRIVER3,
    }
}

/// Where a completion's status came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionSource {
    /// The work request was signaled and produced this completion itself.
    Own,
    /// The work request was unsignaled: it is known complete because a later work request of
    /// the same send queue completed (completions of a send queue are ordered).
    ImpliedByLater,
    /// The library moved the QP to RESET while draining a scope; the request never completed
    /// and the device no longer accesses its buffers.
    ForcedReset,
}

/// A work completion: the `struct ibv_wc` of one work request, decoded by its accessors.
/// `Default` is an all-zero placeholder (for arrays that
/// [`Cq::poll_into`](crate::cq::Cq::poll_into) fills).
//
// Laid out as `struct ibv_wc`: `serial_and_device` where it has `wr_id`, then its fields from
// `status` to `dlid_path_bits` in its order and as the provider wrote them (`raw_flags` is its
// `wc_flags`), then two bytes of what was its padding. The compiler then takes a completion
// off the CQ as one block copy rather than a load and a store per field, and the typed values
// (and the flags in libibverbs' numbering) are built only when asked for. Small (48 bytes),
// so that it moves cheaply through the waits' return values. `serial_and_device` orders the
// invalidations the library decoded (see `Completion::invalidation_serial`) and names the
// device that decoded it (`Completion::device_tag`).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Completion {
    /// `serial << 16 | tag`: for a receive that invalidated an rkey (`IBV_WC_WITH_INV`), its
    /// place among every such completion the process decoded (from 1), 0 for any other; above
    /// the tag of the device whose CQ decoded it (`ContextInner::tag`), 0 for a completion the
    /// library made (implied, a forced reset's).
    serial_and_device: u64,
    status: u32,
    opcode: u32,
    vendor_err: u32,
    pub(crate) byte_len: u32,
    /// `imm_data` (network order) or `invalidated_rkey`, as `wc_flags` says.
    imm_or_inv: u32,
    qp_num: u32,
    src_qp: u32,
    /// As the provider wrote them: see `flags_quirk`.
    raw_flags: u32,
    pkey_index: u16,
    slid: u16,
    sl: u8,
    /// The destination LID's path bits (UD receives; what an address handle back takes).
    dlid_path_bits: u8,
    pub(crate) source: CompletionSource,
    /// The numbering of `raw_flags`: [`WcFlagsQuirk::fix`] gives libibverbs'.
    flags_quirk: WcFlagsQuirk,
}

/// How many invalidating receive completions the process has decoded: the last one's
/// [`Completion::invalidation_serial`].
static INVALIDATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The serials an invalidating completion keeps: 48 bits (beside the 16 of its device's
/// tag). From there on, every later invalidation has that serial: no window bound after it is
/// unbound by an invalidation any more (its `invalidated_by` refuses; the window stays typed
/// bound, which is safe), at about a million invalidations a second after nine years.
const INV_SERIAL_MAX: u64 = (1 << 48) - 1;

/// `serial_and_device` of a completion being decoded now by a CQ of the device tagged `dev_tag`,
/// which says `rkey` was invalidated: its serial above the tag. A window bound under that rkey
/// notes it.
#[cold]
#[inline(never)]
fn next_invalidation(dev_tag: u16, rkey: u32) -> u64 {
    let serial = (INVALIDATIONS.fetch_add(1, std::sync::atomic::Ordering::AcqRel) + 1).min(INV_SERIAL_MAX);
    crate::mw::note_remote_invalidation(dev_tag, rkey, serial);
    (serial << 16) | u64::from(dev_tag)
}

/// The serial of the last invalidating completion decoded so far: every completion decoded
/// later has a greater one ([`Completion::invalidation_serial`]).
pub(crate) fn invalidations_so_far() -> u64 {
    INVALIDATIONS.load(std::sync::atomic::Ordering::Acquire).min(INV_SERIAL_MAX)
}

// A copy of the `ibv_wc` fields it keeps, moved by value through the waits: keep it small.
static_assertions::const_assert!(std::mem::size_of::<Completion>() <= 48);
// The layout decoding relies on (see above): the same offsets as `ibv_wc`.
static_assertions::const_assert!(std::mem::size_of::<Completion>() == std::mem::size_of::<sys::ibv_wc>());
static_assertions::const_assert!(std::mem::offset_of!(Completion, status) == std::mem::offset_of!(sys::ibv_wc, status));
static_assertions::const_assert!(
    std::mem::offset_of!(Completion, dlid_path_bits) == std::mem::offset_of!(sys::ibv_wc, dlid_path_bits)
);

impl Default for Completion {
    fn default() -> Self {
        Completion::from_raw(&sys::ibv_wc::default(), WcFlagsQuirk::None, 0)
    }
}

impl PartialEq for Completion {
    /// Equal when every accessor answers the same (the union of `imm_data` and
    /// `invalidated_rkey` is compared only where a flag gives it a meaning).
    fn eq(&self, other: &Self) -> bool {
        (self.status, self.opcode, self.vendor_err, self.byte_len, self.qp_num, self.src_qp, self.wc_flags())
            == (
                other.status,
                other.opcode,
                other.vendor_err,
                other.byte_len,
                other.qp_num,
                other.src_qp,
                other.wc_flags(),
            )
            && (self.pkey_index, self.slid, self.sl, self.dlid_path_bits, self.source)
                == (other.pkey_index, other.slid, other.sl, other.dlid_path_bits, other.source)
            && self.imm() == other.imm()
            && self.invalidated_rkey() == other.invalidated_rkey()
    }
}

impl Eq for Completion {}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion")
            .field("status", &self.status())
            .field("opcode", &self.opcode())
            .field("vendor_err", &self.vendor_err)
            .field("byte_len", &self.byte_len)
            .field("imm", &self.imm())
            .field("invalidated_rkey", &self.invalidated_rkey())
            .field("qp_num", &self.qp_num)
            .field("src_qp", &self.src_qp)
            .field("wc_flags", &self.wc_flags())
            .field("pkey_index", &self.pkey_index)
            .field("slid", &self.slid)
            .field("sl", &self.sl)
            .field("dlid_path_bits", &self.dlid_path_bits)
            .field("source", &self.source)
            .finish()
    }
}

impl Completion {
    /// Takes `wc`, whose flags are numbered as `quirk` says, polled from a CQ of the device
    /// tagged `dev_tag`.
    #[inline(always)]
    pub(crate) fn from_raw(wc: &sys::ibv_wc, quirk: WcFlagsQuirk, dev_tag: u16) -> Self {
        Completion {
            status: wc.status,
            opcode: wc.opcode,
            vendor_err: wc.vendor_err,
            byte_len: wc.byte_len,
            imm_or_inv: crate::cq::wc_imm_bits(wc),
            qp_num: wc.qp_num,
            src_qp: wc.src_qp,
            raw_flags: wc.wc_flags,
            pkey_index: wc.pkey_index,
            slid: wc.slid,
            sl: wc.sl,
            dlid_path_bits: wc.dlid_path_bits,
            source: CompletionSource::Own,
            flags_quirk: quirk,
            // Only a successful completion's flags are defined (ibv_poll_cq(3)).
            serial_and_device: if wc.status == sys::IBV_WC_SUCCESS && quirk.fix(wc.wc_flags) & sys::IBV_WC_WITH_INV != 0
            {
                next_invalidation(dev_tag, crate::cq::wc_imm_bits(wc))
            } else {
                u64::from(dev_tag)
            },
        }
    }

    /// A successful completion deduced rather than polled (`opcode`: an `IBV_WC_*` value).
    #[inline(always)]
    pub(crate) fn implied(qp_num: u32, opcode: u32) -> Self {
        Completion {
            status: sys::IBV_WC_SUCCESS,
            opcode,
            vendor_err: 0,
            byte_len: 0,
            imm_or_inv: 0,
            qp_num,
            src_qp: 0,
            raw_flags: 0,
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
            source: CompletionSource::ImpliedByLater,
            flags_quirk: WcFlagsQuirk::None,
            serial_and_device: 0,
        }
    }

    pub(crate) fn forced_reset(qp_num: u32) -> Self {
        Completion {
            status: sys::IBV_WC_WR_FLUSH_ERR,
            source: CompletionSource::ForcedReset,
            ..Self::implied(qp_num, u32::MAX)
        }
    }

    /// The status.
    #[inline]
    pub fn status(&self) -> WcStatus {
        WcStatus::from_raw(self.status)
    }
    /// True if the status is [`WcStatus::Success`].
    #[inline]
    pub fn is_success(&self) -> bool {
        self.status == sys::IBV_WC_SUCCESS
    }
    /// `Ok(self)` on success.
    ///
    /// # Errors
    /// [`CompletionError`] (convertible into [`Error::Completion`]) carrying this completion
    /// when its status is not [`WcStatus::Success`].
    #[inline]
    pub fn ok(self) -> std::result::Result<Self, CompletionError> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(CompletionError { completion: self })
        }
    }
    /// The operation (valid only on success).
    #[inline]
    pub fn opcode(&self) -> WcOpcode {
        WcOpcode::from_raw(self.opcode)
    }
    /// The vendor error syndrome.
    #[inline]
    pub fn vendor_err(&self) -> u32 {
        self.vendor_err
    }
    /// The number of bytes received (receive completions).
    #[inline]
    pub fn byte_len(&self) -> u32 {
        self.byte_len
    }
    /// The immediate data, in host byte order, when the completion carries one
    /// (`IBV_WC_WITH_IMM`).
    #[inline]
    pub fn imm(&self) -> Option<u32> {
        (self.wc_flags() & sys::IBV_WC_WITH_IMM != 0).then(|| u32::from_be(self.imm_or_inv))
    }
    /// The rkey invalidated by a SEND_WITH_INV (`IBV_WC_WITH_INV`).
    #[inline]
    pub fn invalidated_rkey(&self) -> Option<u32> {
        (self.wc_flags() & sys::IBV_WC_WITH_INV != 0).then_some(self.imm_or_inv)
    }
    /// For a receive that invalidated an rkey, its place among the invalidating completions
    /// the library decoded, in order (from 1); 0 for any other completion. A window bound
    /// after an invalidation was decoded is not unbound by it, even when a later binding
    /// reuses the rkey ([`BoundMw::invalidated_by`](crate::mw::BoundMw::invalidated_by)).
    #[inline]
    pub(crate) fn invalidation_serial(&self) -> u64 {
        self.serial_and_device >> 16
    }
    /// The tag of the device whose CQ the completion was polled from
    /// ([`ContextInner::tag`](crate::device::ContextInner): its contexts share it); 0 for a
    /// completion the library made (an implied success, a forced reset's flush).
    #[inline]
    pub(crate) fn device_tag(&self) -> u16 {
        (self.serial_and_device & 0xffff) as u16
    }
    /// The local QP number.
    #[inline]
    pub fn qp_num(&self) -> u32 {
        self.qp_num
    }
    /// The source QP number (UD receives).
    #[inline]
    pub fn src_qp(&self) -> u32 {
        self.src_qp
    }
    /// The raw `IBV_WC_*` flags.
    #[inline]
    pub fn wc_flags(&self) -> u32 {
        self.flags_quirk.fix(self.raw_flags)
    }
    /// True if a GRH is present in the receive buffer (UD, `IBV_WC_GRH`).
    #[inline]
    pub fn has_grh(&self) -> bool {
        self.wc_flags() & sys::IBV_WC_GRH != 0
    }
    /// The P_Key index (UD/GSI receives).
    #[inline]
    pub fn pkey_index(&self) -> u16 {
        self.pkey_index
    }
    /// The source LID (UD receives).
    #[inline]
    pub fn slid(&self) -> u16 {
        self.slid
    }
    /// The service level (UD receives).
    #[inline]
    pub fn sl(&self) -> u8 {
        self.sl
    }
    /// The path bits of the destination LID (UD receives).
    #[inline]
    pub fn dlid_path_bits(&self) -> u8 {
        self.dlid_path_bits
    }
    /// The fields of an `ibv_wc` that describe where a receive came from, flags in
    /// libibverbs' numbering: what `ibv_init_ah_from_wc` reads.
    pub(crate) fn to_raw_source(self) -> sys::ibv_wc {
        sys::ibv_wc {
            status: self.status,
            opcode: self.opcode,
            byte_len: self.byte_len,
            qp_num: self.qp_num,
            src_qp: self.src_qp,
            wc_flags: self.wc_flags(),
            pkey_index: self.pkey_index,
            slid: self.slid,
            sl: self.sl,
            dlid_path_bits: self.dlid_path_bits,
            ..Default::default()
        }
    }
    /// Whether this completion was reported by the device or deduced.
    #[inline]
    pub fn source(&self) -> CompletionSource {
        self.source
    }
}

/// A completion with an error status, as an error value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletionError {
    /// The completion.
    pub completion: Completion,
}

impl std::fmt::Display for CompletionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "work request on QP {:#x} completed with {} (vendor error {:#x})",
            self.completion.qp_num,
            self.completion.status(),
            self.completion.vendor_err
        )
    }
}

impl std::error::Error for CompletionError {}

impl From<CompletionError> for Error {
    fn from(e: CompletionError) -> Self {
        Error::Completion(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decoding never panics, whatever the provider wrote, and unknown values are preserved.
    #[test]
    fn decoding_arbitrary_completions_is_total() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let wc = sys::ibv_wc {
                wr_id: x,
                status: (x >> 8) as u32 % 40,
                opcode: (x >> 16) as u32 % 300,
                vendor_err: (x >> 24) as u32,
                byte_len: (x >> 32) as u32,
                qp_num: (x >> 40) as u32,
                src_qp: x as u32,
                wc_flags: (x >> 48) as u32,
                pkey_index: (x >> 4) as u16,
                slid: (x >> 12) as u16,
                sl: (x >> 20) as u8,
                dlid_path_bits: (x >> 28) as u8,
                ..Default::default()
            };
            let c = Completion::from_raw(&wc, WcFlagsQuirk::None, 0);
            assert_eq!(c.status().to_raw(), wc.status);
            assert_eq!(c.opcode().to_raw(), wc.opcode);
            assert_eq!(c.imm().is_some(), wc.wc_flags & sys::IBV_WC_WITH_IMM != 0);
            assert_eq!(c.invalidated_rkey().is_some(), wc.wc_flags & sys::IBV_WC_WITH_INV != 0);
            assert_eq!(c.is_success(), wc.status == sys::IBV_WC_SUCCESS);
            assert_eq!(c.ok().is_ok(), c.is_success());
        }
    }

    #[test]
    fn statuses_and_opcodes_print_their_c_names() {
        assert_eq!(WcStatus::RemAccessErr.to_string(), "IBV_WC_REM_ACCESS_ERR");
        assert_eq!(WcStatus::Success.name(), "IBV_WC_SUCCESS");
        assert_eq!(WcOpcode::RecvRdmaWithImm.to_string(), "IBV_WC_RECV_RDMA_WITH_IMM");
        assert_eq!(WcStatus::Unknown(99).to_string(), "unknown (99)");
    }

    #[test]
    fn completions_compare_and_print_by_their_decoded_values() {
        let mut a = sys::ibv_wc { status: sys::IBV_WC_REM_ACCESS_ERR, qp_num: 7, ..Default::default() };
        let mut b = a;
        // The union of imm_data and invalidated_rkey means nothing without a flag.
        a.__bindgen_anon_1.imm_data = 1;
        b.__bindgen_anon_1.imm_data = 2;
        let (ca, cb) =
            (Completion::from_raw(&a, WcFlagsQuirk::None, 0), Completion::from_raw(&b, WcFlagsQuirk::None, 0));
        assert_eq!(ca, cb);
        (a.wc_flags, b.wc_flags) = (sys::IBV_WC_WITH_INV, sys::IBV_WC_WITH_INV);
        let (ia, ib) =
            (Completion::from_raw(&a, WcFlagsQuirk::None, 0), Completion::from_raw(&b, WcFlagsQuirk::None, 0));
        assert_ne!(ia, ib);
        assert_eq!((ia.invalidated_rkey(), ib.invalidated_rkey()), (Some(1), Some(2)));
        // rxe numbers the flags as the kernel does: its bit 2 is IBV_WC_WITH_INV (bit 3).
        a.wc_flags = 1 << 2;
        let k = Completion::from_raw(&a, WcFlagsQuirk::KernelNumbering, 0);
        assert_eq!((k.wc_flags(), k.invalidated_rkey()), (sys::IBV_WC_WITH_INV, Some(1)));
        assert_eq!(k, ia);
        let shown = format!("{ca:?}");
        assert!(shown.contains("status: RemAccessErr") && shown.contains("imm: None"), "{shown}");
        assert_eq!(ca.status(), WcStatus::RemAccessErr);
        assert!(!ca.is_success());
    }

    #[test]
    fn a_completion_names_the_device_that_decoded_it_and_an_invalidating_one_comes_after_the_last() {
        let mut wc = sys::ibv_wc { wc_flags: sys::IBV_WC_WITH_INV, ..Default::default() };
        wc.__bindgen_anon_1.invalidated_rkey = 0x1234;
        let before = invalidations_so_far();
        let a = Completion::from_raw(&wc, WcFlagsQuirk::None, 7);
        let b = Completion::from_raw(&wc, WcFlagsQuirk::None, u16::MAX);
        assert_eq!((a.device_tag(), b.device_tag()), (7, u16::MAX));
        assert!(a.invalidation_serial() > before && b.invalidation_serial() > a.invalidation_serial());
        assert!(invalidations_so_far() >= b.invalidation_serial());
        assert_eq!(a.invalidated_rkey(), Some(0x1234));
        // Any other completion has no serial, and names its device too; one the library made
        // names none.
        let plain = Completion::from_raw(&sys::ibv_wc::default(), WcFlagsQuirk::None, 7);
        assert_eq!((plain.invalidation_serial(), plain.device_tag()), (0, 7));
        assert_eq!(Completion::implied(1, 0).device_tag(), 0);
    }

    #[test]
    fn immediate_data_is_converted_from_network_order() {
        let mut wc = sys::ibv_wc { wc_flags: sys::IBV_WC_WITH_IMM, ..Default::default() };
        wc.__bindgen_anon_1.imm_data = 0x0102_0304u32.to_be();
        assert_eq!(Completion::from_raw(&wc, WcFlagsQuirk::None, 0).imm(), Some(0x0102_0304));
    }
}
