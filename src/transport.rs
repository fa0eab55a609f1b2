//! Queue-pair transports and states as types, and the ibv_post_send(3) opcode table as traits.
//!
//! A queue pair is [`Qp<T, S>`](crate::qp::Qp): `T` is one of the zero-sized transport markers
//! [`RC`], [`UC`], [`UD`], [`XRC_SEND`], [`RAW_PACKET`]; `S` one of the state markers [`RESET`],
//! [`INIT`], [`RTR`], [`RTS`], [`ERR`].
//!
//! The markers are spelled as ibv_post_send(3) and ibv_modify_qp(3) spell them (`IBV_QPT_UD`,
//! `IBV_QPS_RTS`), against Rust's naming convention on purpose: the compiler prints them in its
//! messages, which then read like the man page ("RDMA READ is not valid on a UD queue pair").
//!
//! Every cell of the opcode table of ibv_post_send(3) is one impl of a capability trait on a
//! transport marker:
//!
//! | opcode                       | UD | UC | RC | XRC_SEND | RAW_PACKET | trait                  |
//! |------------------------------|----|----|----|----------|------------|------------------------|
//! | `IBV_WR_SEND`                | X  | X  | X  | X        | X          | [`SupportsSend`]       |
//! | `IBV_WR_SEND_WITH_IMM`       | X  | X  | X  | X        |            | [`SupportsSendImm`]    |
//! | `IBV_WR_RDMA_WRITE`          |    | X  | X  | X        |            | [`SupportsRdmaWrite`]  |
//! | `IBV_WR_RDMA_WRITE_WITH_IMM` |    | X  | X  | X        |            | [`SupportsRdmaWrite`]  |
//! | `IBV_WR_RDMA_READ`           |    |    | X  | X        |            | [`SupportsRdmaRead`]   |
//! | `IBV_WR_ATOMIC_CMP_AND_SWP`  |    |    | X  | X        |            | [`SupportsAtomics`]    |
//! | `IBV_WR_ATOMIC_FETCH_AND_ADD`|    |    | X  | X        |            | [`SupportsAtomics`]    |
//! | `IBV_WR_LOCAL_INV`           |    | X  | X  | X        |            | [`SupportsLocalInv`]   |
//! | `IBV_WR_BIND_MW`             |    | X  | X  | X        |            | [`SupportsBindMw`]     |
//! | `IBV_WR_SEND_WITH_INV`       |    | X  | X  | X        |            | [`SupportsSendInv`]    |
//! | `IBV_WR_TSO`                 | X  |    |    |          | X          | [`SupportsTso`]        |
//!
//! and the send flag restricted by transport: `IBV_SEND_FENCE` "valid only for QPs with
//! Transport Service Type IBV_QPT_RC" is [`SupportsFence`].
//!
//! The state rules are [`CanPostSend`] (RTS only) and [`CanPostRecv`] (INIT, RTR, RTS).
//!
//! # What exists for each transport
//!
//! [`RC`], [`UC`] and [`UD`] are complete: typed transitions
//! ([`Transitions`](crate::qp::Transitions)) and posting; [`Qp::connect`](crate::qp::Qp::connect)
//! for RC and UC, the connection manager ([`crate::cm`]) for RC and UD.
//!
//! [`XRC_SEND`] and [`RAW_PACKET`] are markers with their column of the opcode table (the
//! traits above, checked by the compile-fail tests) and nothing more:
//!
//! - they have no [`Transitions`](crate::qp::Transitions), so a `Qp<XRC_SEND, _>` or
//!   `Qp<RAW_PACKET, _>` never leaves RESET (only [`Qp::reset`](crate::qp::Qp::reset) and
//!   [`Qp::to_error`](crate::qp::Qp::to_error) apply) and nothing can be posted on it;
//! - [`Pd::create_qp`](crate::pd::Pd::create_qp) refuses XRC_SEND with
//!   [`Error::Unsupported`](crate::Error::Unsupported) on a device without `IBV_DEVICE_XRC`,
//!   and otherwise passes either type to the provider; Soft-RoCE refuses both (device test
//!   `opcodes::transports_the_device_lacks_are_typed_errors`), and no test runs on a device
//!   that has them;
//! - there is no XRC domain (`ibv_open_xrcd`), XRC SRQ or XRC_RECV QP, and no work request
//!   carries the remote SRQ number an XRC_SEND request needs; there is no flow steering
//!   (`ibv_create_flow`) for RAW_PACKET.
//!
//! The device capabilities typed for them are values like the others:
//! [`Context::tso`](crate::device::Context::tso) and
//! [`DeviceAttr::ip_csum`](crate::device::DeviceAttr::ip_csum) for RAW_PACKET,
//! [`OdpCaps::ops`](crate::odp::OdpCaps::ops) for XRC.

use core::fmt;

use typed_verbs_sys as sys;

mod sealed {
    sealed_trait!();
}

/// A queue-pair transport service type. Sealed; implemented by the five markers.
pub trait Transport: sealed::Sealed + Copy + Default + fmt::Debug + Send + Sync + Unpin + 'static {
    /// The `IBV_QPT_*` value.
    const QP_TYPE: sys::ibv_qp_type;
    /// The name used in messages, as the man page spells it.
    const NAME: &'static str;
}

macro_rules! markers {
    ($trait:ident; $($(#[$doc:meta])* $name:ident = $cname:literal $(, $value:path)?;)*) => {$(
        $(#[$doc])*
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name;
        impl sealed::Sealed for $name {}
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str($cname)
            }
        }
        markers!(@impl $trait $name $cname $(, $value)?);
    )*};
    (@impl Transport $name:ident $cname:literal, $value:path) => {
        impl Transport for $name {
            const QP_TYPE: sys::ibv_qp_type = $value;
            const NAME: &'static str = $cname;
        }
    };
    (@impl QpState $name:ident $cname:literal, $value:path) => {
        impl QpState for $name {
            const STATE: sys::ibv_qp_state = $value;
            const NAME: &'static str = $cname;
        }
    };
}

markers! { Transport;
    /// Reliable Connected (`IBV_QPT_RC`).
    RC = "RC", sys::IBV_QPT_RC;
    /// Unreliable Connected (`IBV_QPT_UC`).
    UC = "UC", sys::IBV_QPT_UC;
    /// Unreliable Datagram (`IBV_QPT_UD`).
    UD = "UD", sys::IBV_QPT_UD;
    /// The sending side of eXtended Reliable Connected (`IBV_QPT_XRC_SEND`): the opcode table
    /// only, no transitions (see [the module documentation](crate::transport)).
    XRC_SEND = "XRC_SEND", sys::IBV_QPT_XRC_SEND;
    /// Raw Ethernet packets (`IBV_QPT_RAW_PACKET`): the opcode table only, no transitions (see
    /// [the module documentation](crate::transport)).
    RAW_PACKET = "RAW_PACKET", sys::IBV_QPT_RAW_PACKET;
}

/// A queue-pair state. Sealed; implemented by the state markers.
pub trait QpState: sealed::Sealed + Copy + Default + fmt::Debug + Send + Sync + Unpin + 'static {
    /// The `IBV_QPS_*` value.
    const STATE: sys::ibv_qp_state;
    /// The name used in messages.
    const NAME: &'static str;
}

markers! { QpState;
    /// RESET: the state a QP is created in, and the state every QP can return to.
    RESET = "RESET", sys::IBV_QPS_RESET;
    /// INIT: receives may be posted; nothing is sent.
    INIT = "INIT", sys::IBV_QPS_INIT;
    /// RTR (ready to receive): receives are processed.
    RTR = "RTR", sys::IBV_QPS_RTR;
    /// RTS (ready to send): both queues are processed.
    RTS = "RTS", sys::IBV_QPS_RTS;
    /// ERR: every outstanding work request completes with `IBV_WC_WR_FLUSH_ERR`.
    ERR = "ERR", sys::IBV_QPS_ERR;
}

/// States in which work requests may be posted to the send queue.
#[diagnostic::on_unimplemented(
    message = "send work requests can only be posted to a queue pair in RTS, not in {Self}",
    label = "this queue pair is in {Self}, not in RTS",
    note = "an RC, UC or UD queue pair reaches RTS from RESET through `to_init`, `to_rtr` and `to_rts`; one in ERR goes back to RESET with `reset` first",
    note = "the IBTA makes a send posted in RESET, INIT or RTR an immediate error, and one posted in ERR only completes flushed"
)]
pub trait CanPostSend: QpState {}
impl CanPostSend for RTS {}

/// States in which work requests may be posted to the receive queue.
#[diagnostic::on_unimplemented(
    message = "receive work requests can only be posted to a queue pair in INIT, RTR or RTS, not in {Self}",
    label = "this queue pair is in {Self}",
    note = "an RC, UC or UD queue pair reaches INIT from RESET with `to_init`; one in ERR goes back to RESET with `reset` first",
    note = "the IBTA makes a receive posted in RESET an immediate error, and one posted in ERR only completes flushed"
)]
pub trait CanPostRecv: QpState {}
impl CanPostRecv for INIT {}
impl CanPostRecv for RTR {}
impl CanPostRecv for RTS {}

macro_rules! capability {
    ($(#[$doc:meta])* $trait:ident, $msg:literal, $note:literal: $($t:ident),*) => {
        $(#[$doc])*
        #[diagnostic::on_unimplemented(message = $msg, label = "not allowed on this transport", note = $note)]
        pub trait $trait: Transport {}
        $(impl $trait for $t {})*
    };
}

capability!(
    /// A receive queue of its own, for `ibv_post_recv`: UD, UC, RC, RAW_PACKET. An XRC_SEND
    /// queue pair is the initiator side of XRC and only sends: the messages it sends are
    /// received from the shared receive queue the XRC target names.
    HasRecvQueue,
    "{Self} queue pairs have no receive queue to post receives to",
    "an XRC_SEND queue pair (IBV_QPT_XRC_SEND) is the sending side of XRC only: receives are posted to the shared receive queue of the XRC target":
    UD, UC, RC, RAW_PACKET
);
capability!(
    /// `IBV_WR_SEND`: UD, UC, RC, XRC_SEND, RAW_PACKET.
    SupportsSend,
    "SEND is not valid on a {Self} queue pair (ibv_post_send(3) opcode table)",
    "ibv_post_send(3): IBV_WR_SEND is valid on UD, UC, RC, XRC_SEND and RAW_PACKET":
    UD, UC, RC, XRC_SEND, RAW_PACKET
);
capability!(
    /// `IBV_WR_SEND_WITH_IMM`: UD, UC, RC, XRC_SEND.
    SupportsSendImm,
    "SEND with immediate is not valid on a {Self} queue pair (ibv_post_send(3) opcode table)",
    "ibv_post_send(3): IBV_WR_SEND_WITH_IMM is valid on UD, UC, RC and XRC_SEND only":
    UD, UC, RC, XRC_SEND
);
capability!(
    /// `IBV_WR_RDMA_WRITE` and `IBV_WR_RDMA_WRITE_WITH_IMM`: UC, RC, XRC_SEND.
    SupportsRdmaWrite,
    "RDMA WRITE is not valid on a {Self} queue pair (ibv_post_send(3) opcode table)",
    "ibv_post_send(3): IBV_WR_RDMA_WRITE and IBV_WR_RDMA_WRITE_WITH_IMM are valid on UC, RC and XRC_SEND only":
    UC, RC, XRC_SEND
);
capability!(
    /// `IBV_WR_RDMA_READ`: RC, XRC_SEND.
    SupportsRdmaRead,
    "RDMA READ is not valid on a {Self} queue pair (ibv_post_send(3) opcode table)",
    "ibv_post_send(3): IBV_WR_RDMA_READ is valid on RC and XRC_SEND only":
    RC, XRC_SEND
);
capability!(
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` and `IBV_WR_ATOMIC_FETCH_AND_ADD`: RC, XRC_SEND.
    SupportsAtomics,
    "atomic operations are not valid on a {Self} queue pair (ibv_post_send(3) opcode table)",
    "ibv_post_send(3): IBV_WR_ATOMIC_CMP_AND_SWP and IBV_WR_ATOMIC_FETCH_AND_ADD are valid on RC and XRC_SEND only":
    RC, XRC_SEND
);
capability!(
    /// `IBV_WR_LOCAL_INV`: UC, RC, XRC_SEND.
    SupportsLocalInv,
    "LOCAL_INV is not valid on a {Self} queue pair (ibv_post_send(3) opcode table)",
    "ibv_post_send(3): IBV_WR_LOCAL_INV is valid on UC, RC and XRC_SEND only":
    UC, RC, XRC_SEND
);
capability!(
    /// `IBV_WR_BIND_MW`: UC, RC, XRC_SEND ("The QP Transport Service Type must be either UC,
    /// RC or XRC_SEND for bind operations", ibv_bind_mw(3)).
    SupportsBindMw,
    "binding a memory window is not valid on a {Self} queue pair (ibv_post_send(3) opcode table)",
    "ibv_bind_mw(3): \"The QP Transport Service Type must be either UC, RC or XRC_SEND for bind operations.\"":
    UC, RC, XRC_SEND
);
capability!(
    /// `IBV_WR_SEND_WITH_INV`: UC, RC, XRC_SEND.
    SupportsSendInv,
    "SEND with invalidate is not valid on a {Self} queue pair (ibv_post_send(3) opcode table)",
    "ibv_post_send(3): IBV_WR_SEND_WITH_INV is valid on UC, RC and XRC_SEND only":
    UC, RC, XRC_SEND
);
capability!(
    /// `IBV_WR_TSO`: UD, RAW_PACKET.
    SupportsTso,
    "TSO is not valid on a {Self} queue pair (ibv_post_send(3) opcode table)",
    "ibv_post_send(3): IBV_WR_TSO is valid on UD and RAW_PACKET only":
    UD, RAW_PACKET
);
capability!(
    /// The `IBV_SEND_FENCE` flag: RC only.
    SupportsFence,
    "IBV_SEND_FENCE is not valid on a {Self} queue pair",
    "ibv_post_send(3): \"IBV_SEND_FENCE Set the fence indicator. Valid only for QPs with Transport Service Type IBV_QPT_RC\"":
    RC
);

/// A QP in RESET, the state `to_init` starts from.
#[diagnostic::on_unimplemented(
    message = "`to_init` moves a queue pair from RESET to INIT; this one is in {Self}",
    label = "not in RESET",
    note = "ibv_modify_qp(3): RESET -> INIT -> RTR -> RTS, one step at a time; `reset()` returns to RESET from any state"
)]
pub trait IsReset: QpState {}
impl IsReset for RESET {}

/// A QP in INIT, the state `to_rtr` starts from.
#[diagnostic::on_unimplemented(
    message = "`to_rtr` moves a queue pair from INIT to RTR; this one is in {Self}",
    label = "not in INIT",
    note = "ibv_modify_qp(3): RESET -> INIT -> RTR -> RTS, one step at a time; `reset()` returns to RESET from any state"
)]
pub trait IsInit: QpState {}
impl IsInit for INIT {}

/// A QP in RTR, the state `to_rts` starts from.
#[diagnostic::on_unimplemented(
    message = "`to_rts` moves a queue pair from RTR to RTS; this one is in {Self}",
    label = "not in RTR",
    note = "ibv_modify_qp(3): RESET -> INIT -> RTR -> RTS, one step at a time; `reset()` returns to RESET from any state"
)]
pub trait IsRtr: QpState {}
impl IsRtr for RTR {}

/// Transports whose QPs are connected to exactly one remote QP (RC, UC, XRC_SEND); the others
/// address each send (UD with an address handle, RAW_PACKET with the packet itself).
pub trait Connected: Transport {}
impl Connected for RC {}
impl Connected for UC {}
impl Connected for XRC_SEND {}

/// Transports whose sends name no destination: the connected ones (the QP has exactly one peer)
/// and RAW_PACKET (the packet carries its own headers). UD sends carry an address handle, remote
/// QPN and Q_Key instead ([`crate::wr::To`]). Useful as a bound in code generic over
/// transports.
#[diagnostic::on_unimplemented(
    message = "a send on a {Self} queue pair needs a destination: an address handle, the remote QPN and its Q_Key",
    label = "add `.to(&ah, remote_qpn, remote_qkey)` to the work request",
    note = "ibv_post_send(3): UD work requests carry wr.ud.ah, wr.ud.remote_qpn and wr.ud.remote_qkey"
)]
pub trait Unaddressed: Transport {}
impl Unaddressed for RC {}
impl Unaddressed for UC {}
impl Unaddressed for XRC_SEND {}
impl Unaddressed for RAW_PACKET {}

/// Transports on which a window's rkey can be advertised before its bind completed
/// ([`Scope::advertise_window`](crate::scope::Scope::advertise_window)): the send goes on the
/// bind's own QP, so the transport binds windows (UC, RC, XRC_SEND), and the send needs no
/// destination.
#[diagnostic::on_unimplemented(
    message = "a window is advertised on the queue pair its bind went through, and binding a memory window is not valid on a {Self} queue pair",
    label = "not a QP a window can be bound through",
    note = "ibv_bind_mw(3): \"The QP Transport Service Type must be either UC, RC or XRC_SEND for bind operations\"; the NOTES allow the new rkey to travel before the bind's completion only in a send on the bind's QP"
)]
pub trait AdvertisesWindows: SupportsBindMw + SupportsSend + Unaddressed {}
impl AdvertisesWindows for RC {}
impl AdvertisesWindows for UC {}
impl AdvertisesWindows for XRC_SEND {}
