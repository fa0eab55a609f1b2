// ibv_post_send(3): a UD send carries wr.ud.ah, remote_qpn and remote_qkey; a TSO request on UD without them does not compile.
use typed_verbs::access;
use typed_verbs::device::TsoCap;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};
use typed_verbs::wr;

fn f(qp: &Qp<UD, RTS>, payload: &Mr<access::LocalRead>, header: &[u8], cap: TsoCap<UD>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::Tso::new(payload.slice(..).unwrap(), header, 1460, cap));
    });
}

fn main() {}
