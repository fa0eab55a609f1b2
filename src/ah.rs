//! Address vectors (`struct ibv_ah_attr`): how to reach a remote port. Used by the RTR
//! transition of connected QPs; address handles for UD build on it.

use typed_verbs_sys as sys;

use crate::device::Gid;

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
        Grh {
            dgid,
            flow_label: 0,
            sgid_index,
            hop_limit: 64,
            traffic_class: 0,
        }
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
        AddressVector {
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            port,
            grh: Some(Grh::new(dgid, sgid_index)),
        }
    }

    /// An address over `port` to the remote LID `dlid` (InfiniBand, same subnet).
    pub fn local(port: u8, dlid: u16) -> Self {
        AddressVector {
            dlid,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            port,
            grh: None,
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
