// IBV_SEND_IP_CSUM capability values come only from the device query; they cannot be made up
// (nor claim another device context than the one that reported them).
use typed_verbs::device::IpCsum;
use typed_verbs::transport::UD;

fn main() {
    let _cap: IpCsum<UD> = IpCsum { ctx: 1, _t: std::marker::PhantomData };
}
