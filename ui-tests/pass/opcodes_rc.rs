// ibv_post_send(3) opcode table: RC allows SEND, SEND_WITH_IMM, RDMA_WRITE(_WITH_IMM), RDMA_READ and both atomics, with FENCE, SOLICITED (Send, Write with immediate) and unsignaled.
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::{self, SendRequest};

fn check(
    qp: &Qp<RC, RTS>,
    src: &Mr<access::LocalRead>,
    dst: &mut Mr<access::LocalRw>,
    remote: RemoteSlice<access::RemoteAll>,
) -> typed_verbs::Result<()> {
    scope(|s| -> typed_verbs::Result<()> {
        let _t = s.post_send(qp, wr::Send::new(src.slice(..)?))?;
        let _t = s.post_send(qp, wr::Send::new(src.slice(..)?).solicited().fence())?;
        let _t = s.post_send(qp, wr::SendImm::new(src.slice(..)?, 1).unsignaled())?;
        let _t = s.post_send(qp, wr::SendImm::new(src.slice(..)?, 1).solicited())?;
        let _t = s.post_send(qp, wr::Write::new(src.slice(..)?, remote))?;
        let _t = s.post_send(qp, wr::Write::new(src.slice(..)?, remote).fence().unsignaled())?;
        let _t = s.post_send(qp, wr::WriteImm::new(src.slice(..)?, remote, 2).solicited())?;
        let _t = s.post_send(qp, wr::WriteImm::new(src.slice(..)?, remote, 2).unsignaled().fence())?;
        let (read, rest) = dst.slice_mut(..)?.split_at(64)?;
        let (cas, faa) = rest.split_at(8)?;
        let _t = s.post_send(qp, wr::Read::new(read, remote).fence())?;
        let _t = s.post_send(qp, wr::CompareSwap::new(cas, remote.slice(0, 8)?, 0, 1).fence())?;
        let _t = s.post_send(qp, wr::FetchAdd::new(faa.split_at(8)?.0, remote.slice(8, 8)?, 1).unsignaled())?;
        Ok(())
    })?
}

fn main() {
    let _ = check;
}
