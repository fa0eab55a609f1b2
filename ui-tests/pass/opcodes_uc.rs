// ibv_post_send(3) opcode table: UC allows SEND, SEND_WITH_IMM, RDMA_WRITE and RDMA_WRITE_WITH_IMM (SOLICITED on Send and Write with immediate).
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UC};
use typed_verbs::wr::{self, SendRequest};

fn check(qp: &Qp<UC, RTS>, src: &Mr<access::LocalRead>, remote: RemoteSlice<access::LocalRemoteWrite>) -> typed_verbs::Result<()> {
    scope(|s| -> typed_verbs::Result<()> {
        let _t = s.post_send(qp, wr::Send::new(src.slice(..)?).solicited())?;
        let _t = s.post_send(qp, wr::SendImm::new(src.slice(..)?, 1).unsignaled())?;
        let _t = s.post_send(qp, wr::Write::new(src.slice(..)?, remote).unsignaled())?;
        let _t = s.post_send(qp, wr::WriteImm::new(src.slice(..)?, remote, 2).solicited())?;
        Ok(())
    })?
}

fn main() {
    let _ = check;
}
