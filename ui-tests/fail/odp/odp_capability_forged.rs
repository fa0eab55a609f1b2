// ODP capability values come only from `OdpCaps::check` (MLNX_OFED ODP: "the capabilities field need to be masked" per transport); a program cannot make one up that claims every operation.
use typed_verbs::odp::{OdpCap, OdpOps};
use typed_verbs::transport::RC;

fn main() {
    let _cap: OdpCap<RC> = OdpCap { ops: OdpOps::all(), page_starts: false, ctx: 1, _t: std::marker::PhantomData };
}
