// TSO capability values come only from the device query (`Context::tso`, ibv_query_device_ex tso_caps); a program cannot make one up with a larger max_tso or another context.
use typed_verbs::device::TsoCap;
use typed_verbs::transport::UD;

fn main() {
    let _cap: TsoCap<UD> = TsoCap { max_tso: u32::MAX, ctx: 1, _t: std::marker::PhantomData };
}
