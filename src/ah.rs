//! Address vectors (`struct ibv_ah_attr`) and address handles (`ibv_create_ah`,
//! `ibv_destroy_ah`): how to reach a remote port. Connected QPs take an address vector at RTR;
//! UD sends name an address handle.
#![allow(unsafe_code)]

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use typed_verbs_sys as sys;

use crate::device::Gid;
use crate::error::{Error, Result, Verb};
use crate::pd::{Pd, PdInner};

/// The global route header of an address (`struct ibv_global_route`). Required on RoCE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grh {
    /// The destination GID.
    pub dgid: Gid,
    /// The flow label (20 bits).
    pub flow_label: u32,
    /// The index of the local GID to send from.
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
    /// The service level.
    pub sl: u8,
    /// The source path bits.
    pub src_path_bits: u8,
    /// The static rate (`IBV_RATE_*`, 0 for the port's rate).
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
    /// [`Error::Verb`] with `ibv_create_ah` and its errno (e.g. `EINVAL` for a GID index that
    /// does not exist, `ENETUNREACH` when no route exists on RoCE).
    ///
    /// See ibv_create_ah(3).
    #[doc(alias = "ibv_create_ah")]
    pub fn create_ah(&self, av: &AddressVector) -> Result<Ah> {
        let mut attr = av.to_raw();
        // SAFETY: the PD is alive; `attr` is a fully initialised attribute struct.
        let ah = unsafe { sys::ibv_create_ah(self.as_ptr(), &mut attr) };
        let ah = NonNull::new(ah).ok_or_else(|| Error::last_os(Verb::CreateAh, format!("{av:?}")))?;
        Ok(Ah { inner: Arc::new(AhInner { ah, av: *av, _pd: Arc::clone(&self.inner) }) })
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
