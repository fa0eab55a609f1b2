// ibv_post_send(3) opcode table: code generic over the transport posts an RDMA READ only with
// the bound `SupportsRdmaRead` (RC, XRC_SEND).
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{Transport, Unaddressed, RTS};
use typed_verbs::wr;

fn read<T: Transport + Unaddressed>(
    qp: &Qp<T, RTS>,
    dst: &mut Mr<access::LocalRw>,
    remote: RemoteSlice<access::RemoteRw>,
) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::Read::new(dst.slice_mut(..).unwrap(), remote));
    });
}

fn main() {
    let _ = read::<typed_verbs::transport::RC>;
}
