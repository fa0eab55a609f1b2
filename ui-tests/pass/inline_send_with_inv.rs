// ibv_post_send(3): IBV_SEND_INLINE is "valid only for Send and RDMA Write"; SEND_WITH_INV is a Send (as for IBV_SEND_SOLICITED), so an inline SEND_WITH_INV posts on UC and RC, solicited or unsignaled, with a payload borrowed only for the call.
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS, UC};
use typed_verbs::wr::{InlineSendInv, SendRequest};

fn check(rc: &Qp<RC, RTS>, uc: &Qp<UC, RTS>) -> typed_verbs::Result<()> {
    scope(|s| -> typed_verbs::Result<()> {
        let mut payload = [1u8; 8];
        let _t = s.post_inline(rc, InlineSendInv::new(&payload, 7).solicited())?;
        let _t = s.post_inline(uc, InlineSendInv::gather([&payload[..4], &payload[4..]], 8).unsignaled())?;
        // Free again once the post returned.
        payload[0] = 2;
        Ok(())
    })?
}

fn main() {
    let _ = check;
}
