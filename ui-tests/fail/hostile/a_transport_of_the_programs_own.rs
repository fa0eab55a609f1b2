// The transports are sealed: a program's own "transport" that claimed every capability would
// let it post atomics on a UD QP, or anything anywhere. Implementing `Transport` needs the
// library's private supertrait, and the message says so.
use typed_verbs::transport::{SupportsAtomics, Transport};

#[derive(Debug, Clone, Copy, Default)]
struct ANY;
impl Transport for ANY {
    const QP_TYPE: typed_verbs::sys::ibv_qp_type = typed_verbs::sys::IBV_QPT_UD;
    const NAME: &'static str = "ANY";
}
impl SupportsAtomics for ANY {}

fn main() {}
