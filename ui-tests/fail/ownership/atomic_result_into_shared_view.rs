// An atomic writes its 8-byte result into its local buffer (ibv_reg_mr(3): the device writes it, IBV_ACCESS_LOCAL_WRITE): a shared view (LocalBuf) cannot be its destination.
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::wr;

fn f(result: &Mr<access::LocalRw>, remote: RemoteSlice<access::RemoteAll>) {
    let _ = wr::FetchAdd::new(result.slice(..8).unwrap(), remote, 1);
}

fn main() {}
