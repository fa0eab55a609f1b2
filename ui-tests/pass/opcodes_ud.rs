// ibv_post_send(3) opcode table: UD allows SEND and SEND_WITH_IMM, each with a destination (AH, remote QPN, Q_Key).
use typed_verbs::access;
use typed_verbs::ah::Ah;
use typed_verbs::device::DeviceAttr;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};
use typed_verbs::wr::{self, SendRequest};

fn check(qp: &Qp<UD, RTS>, src: &Mr<access::LocalRead>, ah: &Ah, attr: &DeviceAttr) -> typed_verbs::Result<()> {
    scope(|s| -> typed_verbs::Result<()> {
        let _t = s.post_send(qp, wr::Send::new(src.slice(..)?).solicited().to(ah, 7, 0x1111_1111))?;
        let _t = s.post_send(qp, wr::SendImm::new(src.slice(..)?, 1).unsignaled().to(ah, 7, 0x1111_1111))?;
        let _t = s.post_inline(qp, wr::InlineSend::new(b"abc").to(ah, 7, 0x1111_1111))?;
        let _t = s.post_inline(qp, wr::InlineSendImm::new(b"abc", 9).to(ah, 7, 0x1111_1111))?;
        if let Some(cap) = attr.ip_csum::<UD>() {
            let _t = s.post_send(qp, wr::Send::new(src.slice(..)?).ip_csum(cap).to(ah, 7, 0x1111_1111))?;
        }
        Ok(())
    })?
}

fn main() {
    let _ = check;
}
