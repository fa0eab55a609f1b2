// ibv_post_send(3): a UD send carries its destination (AH, remote QPN, Q_Key) and its flags (SIGNALED cleared, SOLICITED, IP_CSUM) independently, so every order of `.to(...)` and the flag methods builds the same request, for every request UD accepts, whether posted in a scope, prepared on a lane or posted owned.
use typed_verbs::access;
use typed_verbs::ah::Ah;
use typed_verbs::device::{IpCsum, TsoCap};
use typed_verbs::mr::{Chunk, Mr};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};
use typed_verbs::wr::{self, SendRequest, Tso};

const QPN: u32 = 7;
const QKEY: u32 = 0x1111_1111;

#[allow(clippy::too_many_arguments)]
fn check(
    qp: &mut Qp<UD, RTS>,
    src: &Mr<access::LocalRead>,
    ah: &Ah,
    csum: IpCsum<UD>,
    tso: TsoCap<UD>,
    chunk: Chunk<access::LocalRead>,
) -> typed_verbs::Result<()> {
    let hdr = [0u8; 54];
    scope(|s| -> typed_verbs::Result<()> {
        let b = || src.slice(..64);
        // Send: each flag before and after the destination, alone and combined.
        let _t = s.post_send(qp, wr::Send::new(b()?).to(ah, QPN, QKEY).unsignaled())?;
        let _t = s.post_send(qp, wr::Send::new(b()?).unsignaled().to(ah, QPN, QKEY))?;
        let _t = s.post_send(qp, wr::Send::new(b()?).to(ah, QPN, QKEY).solicited())?;
        let _t = s.post_send(qp, wr::Send::new(b()?).solicited().to(ah, QPN, QKEY))?;
        let _t = s.post_send(qp, wr::Send::new(b()?).to(ah, QPN, QKEY).ip_csum(csum))?;
        let _t = s.post_send(qp, wr::Send::new(b()?).ip_csum(csum).to(ah, QPN, QKEY))?;
        let _t = s.post_send(qp, wr::Send::new(b()?).solicited().to(ah, QPN, QKEY).unsignaled().ip_csum(csum))?;
        let _t = s.post_send(qp, wr::Send::new(b()?).ip_csum(csum).unsignaled().solicited().to(ah, QPN, QKEY))?;
        let _t = s.post_send(qp, wr::Send::new(b()?).to(ah, QPN, QKEY).ip_csum(csum).solicited().unsignaled())?;
        // SEND with immediate.
        let _t = s.post_send(qp, wr::SendImm::new(b()?, 1).to(ah, QPN, QKEY).unsignaled())?;
        let _t = s.post_send(qp, wr::SendImm::new(b()?, 1).unsignaled().to(ah, QPN, QKEY))?;
        let _t = s.post_send(qp, wr::SendImm::new(b()?, 1).to(ah, QPN, QKEY).solicited())?;
        let _t = s.post_send(qp, wr::SendImm::new(b()?, 1).solicited().to(ah, QPN, QKEY))?;
        let _t = s.post_send(qp, wr::SendImm::new(b()?, 1).to(ah, QPN, QKEY).ip_csum(csum))?;
        let _t = s.post_send(qp, wr::SendImm::new(b()?, 1).ip_csum(csum).to(ah, QPN, QKEY))?;
        // Inline SEND and SEND with immediate.
        let _t = s.post_inline(qp, wr::InlineSend::new(b"abc").to(ah, QPN, QKEY).unsignaled())?;
        let _t = s.post_inline(qp, wr::InlineSend::new(b"abc").unsignaled().to(ah, QPN, QKEY))?;
        let _t = s.post_inline(qp, wr::InlineSend::new(b"abc").to(ah, QPN, QKEY).solicited())?;
        let _t = s.post_inline(qp, wr::InlineSend::new(b"abc").solicited().to(ah, QPN, QKEY))?;
        let _t = s.post_inline(qp, wr::InlineSend::new(b"abc").to(ah, QPN, QKEY).ip_csum(csum))?;
        let _t = s.post_inline(qp, wr::InlineSend::new(b"abc").ip_csum(csum).to(ah, QPN, QKEY))?;
        let _t = s.post_inline(qp, wr::InlineSendImm::new(b"abc", 9).to(ah, QPN, QKEY).unsignaled())?;
        let _t = s.post_inline(qp, wr::InlineSendImm::new(b"abc", 9).unsignaled().to(ah, QPN, QKEY))?;
        let _t = s.post_inline(qp, wr::InlineSendImm::new(b"abc", 9).to(ah, QPN, QKEY).solicited())?;
        let _t = s.post_inline(qp, wr::InlineSendImm::new(b"abc", 9).solicited().to(ah, QPN, QKEY))?;
        let _t = s.post_inline(qp, wr::InlineSendImm::new(b"abc", 9).to(ah, QPN, QKEY).ip_csum(csum))?;
        let _t = s.post_inline(qp, wr::InlineSendImm::new(b"abc", 9).ip_csum(csum).to(ah, QPN, QKEY))?;
        // TSO (no SOLICITED: not a Send).
        let _t = s.post_send(qp, Tso::new(b()?, &hdr, 1460, tso).to(ah, QPN, QKEY).unsignaled())?;
        let _t = s.post_send(qp, Tso::new(b()?, &hdr, 1460, tso).unsignaled().to(ah, QPN, QKEY))?;
        let _t = s.post_send(qp, Tso::new(b()?, &hdr, 1460, tso).to(ah, QPN, QKEY).ip_csum(csum))?;
        let _t = s.post_send(qp, Tso::new(b()?, &hdr, 1460, tso).ip_csum(csum).to(ah, QPN, QKEY))?;
        Ok(())
    })??;
    scope(|s| -> typed_verbs::Result<()> {
        // A send lane takes the same requests, in either order.
        let lane = s.send_lane(qp)?;
        let _p = lane.prepare(wr::Send::new(src.slice(..64)?).to(ah, QPN, QKEY).unsignaled())?;
        let _p = lane.prepare(wr::Send::new(src.slice(..64)?).unsignaled().to(ah, QPN, QKEY))?;
        let _p = lane.prepare(wr::SendImm::new(src.slice(..64)?, 1).to(ah, QPN, QKEY).solicited().ip_csum(csum))?;
        Ok(())
    })??;
    // So does an owned post.
    let _t = qp.post_send_owned(wr::Send::new(chunk).to(ah, QPN, QKEY).solicited().unsignaled())?;
    Ok(())
}

fn main() {
    let _ = check;
}
