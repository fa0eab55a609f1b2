// IBV_SEND_IP_CSUM capability values come only from the device query; they cannot be made up.
use typed_verbs::device::IpCsum;
use typed_verbs::transport::UD;

fn main() {
    let _cap: IpCsum<UD> = IpCsum(std::marker::PhantomData);
}
