// ibv_post_send(3) opcode table: UD allows SEND and SEND_WITH_IMM (compile-level only: no address handle yet).
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};
use typed_verbs::wr::{Send, SendImm, SendRequest};

fn check(qp: &Qp<UD, RTS>, src: &Mr<access::LocalRead>) -> typed_verbs::Result<()> {
    scope(|s| -> typed_verbs::Result<()> {
        let _t = s.post_send(qp, Send::new(src.slice(..)?).solicited())?;
        let _t = s.post_send(qp, SendImm::new(src.slice(..)?, 1).unsignaled())?;
        Ok(())
    })?
}

fn main() {
    let _ = check;
}
