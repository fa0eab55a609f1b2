// ibv_post_send(3) opcode table: IBV_WR_TSO is valid on UD and RAW_PACKET only; a TSO request cannot even be built for RC.
use typed_verbs::access;
use typed_verbs::device::TsoCap;
use typed_verbs::mr::Mr;
use typed_verbs::transport::RC;
use typed_verbs::wr::Tso;

fn f(src: &Mr<access::LocalRead>, cap: TsoCap<RC>) {
    let _ = Tso::new(src.slice(..).unwrap(), b"hdr", 1460, cap);
}

fn main() {}
