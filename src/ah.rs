//! Address vectors (`struct ibv_ah_attr`) and address handles (`ibv_create_ah`,
//! `ibv_destroy_ah`): how to reach a remote port. Connected QPs take an address vector at RTR;
//! UD sends name an address handle.
#![allow(unsafe_code)]

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use typed_verbs_sys as sys;

use crate::device::{Gid, GidType};
use crate::error::{Error, Result, Verb};
use crate::pd::{Pd, PdInner};
use crate::wc::{Completion, WcOpcode};

/// The global route header of an address (`struct ibv_global_route`). Required on RoCE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grh {
    /// The destination GID.
    pub dgid: Gid,
    /// The flow label (20 bits: at most `0xfffff`; checked).
    pub flow_label: u32,
    /// The index of the local GID to send from (`uint8_t` in C; the type of every GID index of
    /// this library, as [`Link::gid_index`](crate::qp::Link::gid_index)).
    pub sgid_index: u8,
    /// The hop limit (at least 1 to leave the subnet; rxe accepts any value >= 1).
    pub hop_limit: u8,
    /// The traffic class.
    pub traffic_class: u8,
}

impl Grh {
    /// A GRH towards `dgid` from local GID `sgid_index`, hop limit 64.
    pub fn new(dgid: Gid, sgid_index: u8) -> Self {
        Grh { dgid, flow_label: 0, sgid_index, hop_limit: 64, traffic_class: 0 }
    }
}

/// An address vector (`struct ibv_ah_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressVector {
    /// The destination LID (0 on RoCE).
    pub dlid: u16,
    /// The service level (4 bits: 0 to 15; checked).
    pub sl: u8,
    /// The source path bits (7 bits: at most `0x7f`; checked).
    pub src_path_bits: u8,
    /// The static rate, a value of `enum ibv_rate` (checked): `IBV_RATE_MAX` (0) for the
    /// port's rate, or one of the other `IBV_RATE_*`, 2 (`IBV_RATE_2_5_GBPS`) to 24
    /// (`IBV_RATE_1200_GBPS`).
    pub static_rate: u8,
    /// The local port (from 1).
    pub port: u8,
    /// The global route header, needed on RoCE (Ethernet link layer).
    pub grh: Option<Grh>,
}

impl AddressVector {
    /// An address over `port` to the remote `dgid` (RoCE, or InfiniBand with a GRH).
    pub fn global(port: u8, dgid: Gid, sgid_index: u8) -> Self {
        AddressVector { dlid: 0, sl: 0, src_path_bits: 0, static_rate: 0, port, grh: Some(Grh::new(dgid, sgid_index)) }
    }

    /// An address over `port` to the remote LID `dlid` (InfiniBand, same subnet).
    pub fn local(port: u8, dlid: u16) -> Self {
        AddressVector { dlid, sl: 0, src_path_bits: 0, static_rate: 0, port, grh: None }
    }

    /// The address vector `ah` describes (e.g. one the connection manager computed).
    pub(crate) fn from_raw(ah: &sys::ibv_ah_attr) -> Self {
        // SAFETY: `raw` is the byte view of the GID union; every bit pattern is valid.
        let dgid = Gid(unsafe { ah.grh.dgid.raw });
        let grh = (ah.is_global != 0).then_some(Grh {
            dgid,
            flow_label: ah.grh.flow_label,
            sgid_index: ah.grh.sgid_index,
            hop_limit: ah.grh.hop_limit,
            traffic_class: ah.grh.traffic_class,
        });
        AddressVector {
            dlid: ah.dlid,
            sl: ah.sl,
            src_path_bits: ah.src_path_bits,
            static_rate: ah.static_rate,
            port: ah.port_num,
            grh,
        }
    }

    pub(crate) fn to_raw(self) -> sys::ibv_ah_attr {
        let mut ah = sys::ibv_ah_attr {
            dlid: self.dlid,
            sl: self.sl,
            src_path_bits: self.src_path_bits,
            static_rate: self.static_rate,
            port_num: self.port,
            ..Default::default()
        };
        if let Some(g) = self.grh {
            ah.is_global = 1;
            ah.grh = sys::ibv_global_route {
                dgid: g.dgid.to_raw(),
                flow_label: g.flow_label,
                sgid_index: g.sgid_index,
                hop_limit: g.hop_limit,
                traffic_class: g.traffic_class,
            };
        }
        ah
    }
}

/// An address handle: `struct ibv_ah`. Cheap to clone (shared).
///
/// ibv_post_send(3): "The user should not alter or destroy AHs associated with WRs until
/// request is fully executed and a work completion has been retrieved". A UD send keeps a clone
/// until its completion is known, so the handle is destroyed only after the last request using
/// it is done (and after the last clone is dropped).
#[derive(Clone)]
pub struct Ah {
    inner: Arc<AhInner>,
}

struct AhInner {
    ah: NonNull<sys::ibv_ah>,
    av: AddressVector,
    _pd: Arc<PdInner>,
}

// SAFETY: address handles may be used from any thread (libibverbs is thread-safe); the pointer
// is not mutated after creation.
unsafe impl Send for AhInner {}
// SAFETY: as above.
unsafe impl Sync for AhInner {}

impl Drop for AhInner {
    fn drop(&mut self) {
        // SAFETY: the handle is valid and destroyed once; every outstanding work request using
        // it holds a clone of the `Arc`, so none is left. A failure cannot be acted on; ignored.
        let _ = unsafe { sys::ibv_destroy_ah(self.ah.as_ptr()) };
    }
}

impl Ah {
    /// The PD the handle was created in.
    pub(crate) fn pd_id(&self) -> crate::pd::PdId {
        self.inner._pd.id()
    }
}

impl fmt::Debug for Ah {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ah").field("av", &self.inner.av).finish()
    }
}

impl Pd {
    /// `ibv_create_ah`: an address handle for UD sends to the port described by `av`.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for a port the device does not have, a global route's
    ///   source GID index outside that port's GID table, a service level above 15, source path
    ///   bits above `0x7f`, a flow label above `0xfffff` or a static rate that is not an
    ///   `IBV_RATE_*` value (checked before the provider sees them, as for a QP's address
    ///   vector);
    /// - [`Error::Verb`] with `ibv_create_ah` and its errno (e.g. `EINVAL` for an unused entry
    ///   of the GID table, `ENETUNREACH` when no route exists on RoCE).
    ///
    /// See ibv_create_ah(3).
    #[doc(alias = "ibv_create_ah")]
    pub fn create_ah(&self, av: &AddressVector) -> Result<Ah> {
        let mut attr = av.to_raw();
        crate::qp::check_address_vector(&self.inner.ctx, &attr, &|what| Error::invalid("ibv_create_ah", what))?;
        // SAFETY: the PD is alive; `attr` is a fully initialised attribute struct.
        let ah = unsafe { sys::ibv_create_ah(self.as_ptr(), &mut attr) };
        let ah = NonNull::new(ah).ok_or_else(|| Error::last_os(Verb::CreateAh, format!("{av:?}")))?;
        Ok(Ah { inner: Arc::new(AhInner { ah, av: *av, _pd: Arc::clone(&self.inner) }) })
    }
}

/// The 40 bytes a UD receive buffer starts with (`struct ibv_grh`): the global route header
/// of a datagram that carried one ([`Completion::has_grh`]), where the device wrote it. On
/// RoCE v2 over IPv4 its last 20 bytes are the packet's IPv4 header.
pub type GrhBytes = [u8; 40];

// `create_ah_from_wc` reads an `ibv_grh` out of a `GrhBytes`: exactly its bytes, no more.
static_assertions::const_assert_eq!(std::mem::size_of::<sys::ibv_grh>(), std::mem::size_of::<GrhBytes>());

impl Pd {
    /// `ibv_create_ah_from_wc`: an address handle back to where the UD receive `wc` came from,
    /// its global route header `grh` (the first 40 bytes of the receive's buffer) and the port
    /// it arrived on. How a UD server answers a client that it knows only from a datagram
    /// (rdma-core's `udaddy` server does this).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `wc` is not a successful receive, or was polled from a CQ
    /// of another device than the PD's (the GRH's destination is looked up in the PD's
    /// device's GID table), or if the local GID the datagram was sent to is at an index above
    /// 255 of the port's GID table (an address vector's `sgid_index` is a `u8`;
    /// `ibv_init_ah_from_wc` would name another entry); [`Error::Verb`] with
    /// `ibv_init_ah_from_wc` and its errno (e.g. no local GID matching the GRH's
    /// destination); then the errors of [`Pd::create_ah`] for the address vector the datagram's
    /// fields make (e.g. `InvalidArgument` naming `ibv_create_ah` for a service level above 15
    /// or source path bits above `0x7f` in the completion).
    ///
    /// See ibv_create_ah_from_wc(3).
    #[doc(alias = "ibv_create_ah_from_wc")]
    #[doc(alias = "ibv_init_ah_from_wc")]
    pub fn create_ah_from_wc(&self, port: u8, wc: &Completion, grh: &GrhBytes) -> Result<Ah> {
        if !wc.is_success() || !matches!(wc.opcode(), WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
            return Err(Error::invalid(
                "ibv_create_ah_from_wc",
                format!("a {:?} completion with status {:?}: not a received datagram", wc.opcode(), wc.status()),
            ));
        }
        if wc.device_tag() != self.inner.ctx.tag {
            return Err(Error::invalid(
                "ibv_create_ah_from_wc",
                format!(
                    "a completion of QP {:#x} polled from a CQ of another device than the PD's ({})",
                    wc.qp_num(),
                    self.inner.ctx.name
                ),
            ));
        }
        let mut raw = wc.to_raw_source();
        // SAFETY: `ibv_grh` is 40 bytes of integers and GIDs, for which every bit pattern is
        // valid; the read is unaligned, from 40 readable bytes, into an aligned copy.
        let mut g: sys::ibv_grh = unsafe { std::ptr::read_unaligned(grh.as_ptr().cast()) };
        let mut attr = sys::ibv_ah_attr::default();
        // SAFETY: the PD's context is alive (the PD holds it); `raw` is an initialised
        // `ibv_wc` (the receive's own fields), `g` an initialised `ibv_grh` and `attr` a valid
        // out-pointer, all three exclusively borrowed for the call and not kept by the verb.
        let ret = unsafe { sys::ibv_init_ah_from_wc(self.context_ptr(), port, &mut raw, &mut g, &mut attr) };
        if ret != 0 {
            let what = format!("a completion of QP {:#x}, port {port}", wc.qp_num());
            // Some of its failures return -1 with errno, others the errno value.
            return Err(if ret == -1 {
                Error::last_os(Verb::InitAhFromWc, what)
            } else {
                Error::from_ret(Verb::InitAhFromWc, what, ret)
            });
        }
        if attr.is_global != 0 {
            self.check_source_gid_index(port, grh, &attr)?;
        }
        self.create_ah(&AddressVector::from_raw(&attr))
    }

    /// `ibv_init_ah_from_wc` looks up the local GID the datagram was sent to (with the type its
    /// header implies: RoCE v2 for UDP/IP) and stores the entry's index in `sgid_index`, a
    /// `u8`: an entry at index 256 or above comes back truncated, naming another entry. On a
    /// port whose table is that long, the entry the index names must be the one looked up (the
    /// first match, so an entry below 256 that matches is the one found).
    fn check_source_gid_index(&self, port: u8, grh: &GrhBytes, attr: &sys::ibv_ah_attr) -> Result<()> {
        let ctx = self.context();
        if ctx.query_port(port)?.gid_tbl_len() <= 256 {
            return Ok(());
        }
        let mut wanted = [0u8; 16];
        let roce_v2 = match header_version(grh) {
            // The IPv4 header is the last 20 bytes; its destination address, IPv4-mapped.
            Some(4) => {
                wanted[10..12].copy_from_slice(&[0xff, 0xff]);
                wanted[12..].copy_from_slice(&grh[36..40]);
                true
            }
            // The GRH or IPv6 header's destination GID; UDP next: RoCE v2.
            Some(6) => {
                wanted.copy_from_slice(&grh[24..40]);
                grh[6] == IPPROTO_UDP
            }
            // `ibv_init_ah_from_wc` refuses the rest.
            _ => return Ok(()),
        };
        let (wanted, index) = (Gid(wanted), attr.grh.sgid_index);
        match ctx.gid_entry(port, u32::from(index))? {
            Some((gid, gid_type, _)) if gid == wanted && (gid_type == GidType::RoceV2) == roce_v2 => Ok(()),
            _ => Err(Error::invalid(
                "ibv_create_ah_from_wc",
                format!(
                    "the local GID {wanted} the datagram was sent to is at an index above 255 of {} port \
                     {port}'s GID table, which no address vector can name (sgid_index is a u8; \
                     ibv_init_ah_from_wc truncated the index to {index})",
                    self.device_name()
                ),
            )),
        }
    }
}

/// The IP protocol number of UDP: the next header of a RoCE v2 IPv6 header.
const IPPROTO_UDP: u8 = 17;

/// The header version `ibv_init_ah_from_wc` reads in a receive's first 40 bytes: 6 (a GRH or
/// an IPv6 header) or 4 (an IPv4 header in the last 20 bytes), decided as libibverbs decides
/// it: without 6 in the first nibble, 4 if the IPv4 header says 4; with it, 4 only if the IPv4
/// header is 20 bytes long and its checksum is right as libibverbs computes it. `None`: neither
/// (the verb refuses it).
fn header_version(grh: &GrhBytes) -> Option<u8> {
    let ip4 = &grh[20..];
    if grh[0] >> 4 != 6 {
        return (ip4[0] >> 4 == 4).then_some(4);
    }
    if ip4[0] & 0xf != 5 {
        return Some(6);
    }
    // libibverbs' own arithmetic, which is not RFC 1071's: the ten 16-bit words in the host's
    // byte order (the checksum field taken as zero), summed, the carry folded in once,
    // complemented, truncated to 16 bits, compared with the field as the host reads it. Where
    // the folded sum still carries, the RFC's checksum reads as 6 here and another as 4.
    let word = |w: usize| u32::from(u16::from_ne_bytes([ip4[2 * w], ip4[2 * w + 1]]));
    let sum: u32 = (0..10).filter(|&w| w != 5).map(word).sum();
    let folded = (sum & 0xffff) + (sum >> 16);
    let checksum = !folded as u16;
    Some(if u32::from(checksum) == word(5) { 4 } else { 6 })
}

/// An `Ah` over a fake `ibv_ah` in `pd` (`async_races`, test only): its destroy calls
/// `ah->context`'s `destroy_ah`, which the test's fake context provides.
#[cfg(all(test, not(loom)))]
impl Ah {
    pub(crate) fn fake(ah: NonNull<sys::ibv_ah>, pd: Arc<PdInner>) -> Ah {
        Ah { inner: Arc::new(AhInner { ah, av: AddressVector::local(1, 1), _pd: pd }) }
    }
}

impl Ah {
    /// The address vector the handle was created from.
    pub fn address(&self) -> &AddressVector {
        &self.inner.av
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_ah {
        self.inner.ah.as_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 header of a UDP packet from 192.0.2.2 to 192.0.2.1 with its checksum, in the
    /// last 20 of 40 bytes, as a RoCE v2 receive over IPv4 starts.
    fn ipv4_in_grh() -> GrhBytes {
        let mut g = [0u8; 40];
        g[20..].copy_from_slice(&[
            0x45, 0x00, 0x00, 0x3c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 192, 0, 2, 2, 192, 0, 2, 1,
        ]);
        // RFC 1071: the checksum makes the header's one's complement sum 0xffff (no second
        // carry for this header, where libibverbs' single fold would differ).
        let sum: u32 = g[20..].chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
        let folded = (sum & 0xffff) + (sum >> 16);
        assert!(folded <= 0xffff);
        g[30..32].copy_from_slice(&(!(folded as u16)).to_be_bytes());
        g
    }

    #[test]
    fn the_header_version_is_read_as_libibverbs_reads_it() {
        let v4 = ipv4_in_grh();
        assert_eq!(header_version(&v4), Some(4));
        // A 6 in the first nibble: still IPv4 while the IPv4 header's checksum holds.
        let mut six = v4;
        six[0] = 0x60;
        assert_eq!(header_version(&six), Some(4));
        let mut bad_sum = six;
        bad_sum[31] ^= 1;
        assert_eq!(header_version(&bad_sum), Some(6));
        let mut long_header = six;
        long_header[20] = 0x46;
        assert_eq!(header_version(&long_header), Some(6));
        // A header whose folded sum still carries (192.168.1.2 to 192.168.1.1, id 0xb85d):
        // libibverbs' arithmetic takes the checksum 0xffff as right and the RFC's 0xfeff as
        // wrong.
        let mut carry = [0u8; 40];
        carry[0] = 0x60;
        carry[20..].copy_from_slice(&[
            0x45, 0x00, 0x00, 0x3c, 0xb8, 0x5d, 0x40, 0x00, 0x40, 0x11, 0xff, 0xff, 192, 168, 1, 2, 192, 168, 1, 1,
        ]);
        if cfg!(target_endian = "little") {
            assert_eq!(header_version(&carry), Some(4));
            carry[30] = 0xfe;
            assert_eq!(header_version(&carry), Some(6));
        }
        // Neither 6 first nor 4 at byte 20: refused.
        assert_eq!(header_version(&[0u8; 40]), None);
        assert_eq!(header_version(&[0xff; 40]), None);
    }

    #[test]
    fn an_address_vector_survives_the_round_trip_through_ibv_ah_attr() {
        let global = AddressVector { sl: 3, static_rate: 2, ..AddressVector::global(1, Gid([0xfe; 16]), 7) };
        let mut g = global;
        g.grh = Some(Grh { flow_label: 0x12345, traffic_class: 9, hop_limit: 1, ..global.grh.unwrap() });
        for av in [global, g, AddressVector::local(2, 0x17)] {
            assert_eq!(AddressVector::from_raw(&av.to_raw()), av);
        }
        // Without `is_global`, whatever the GRH fields hold is no GRH.
        let mut raw = g.to_raw();
        raw.is_global = 0;
        assert_eq!(AddressVector::from_raw(&raw).grh, None);
    }
}
