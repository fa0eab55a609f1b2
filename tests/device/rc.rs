//! RC loopback: two connected QPs on the device under test.

use typed_verbs::prelude::*;

use crate::common::*;

#[test]
fn rdma_write_moves_data_between_two_connected_qps() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq_a = ctx.create_cq(256).unwrap();
    let cq_b = ctx.create_cq(256).unwrap();
    let pair = rc_pair(&pd, &cq_a, &cq_b, Access::NONE.remote_write(), QpCaps::default());

    let mut src = pd.alloc_mr(4096, access::LOCAL_RW).unwrap();
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = (i * 7 % 251) as u8;
    }
    let dst = pd.alloc_mr(4096, access::REMOTE_RW).unwrap();

    scope(|s| {
        let t = s.post_send(&pair.a, wr::Write::new(src.slice(..).unwrap(), dst.remote(..).unwrap())).unwrap();
        let (c, _src) = s.wait(t, WAIT).unwrap();
        assert_eq!(c.status(), WcStatus::Success, "{c:?}");
        assert_eq!(c.opcode(), WcOpcode::RdmaWrite);
        assert_eq!(c.qp_num(), pair.a.qp_num());
    })
    .unwrap();

    let mut got = vec![0u8; 4096];
    dst.read_volatile_into(0, &mut got).unwrap();
    assert_eq!(got, src.as_slice());
    assert_eq!(pair.a.outstanding(), (0, 0));
}

#[test]
fn send_with_immediate_lands_in_the_posted_receive() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let pair = rc_pair(&pd, &cq, &cq, Access::NONE, QpCaps::default());
    let mut src = pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    src.as_mut_slice()[..11].copy_from_slice(b"typed-verbs");
    let mut dst = pd.alloc_mr(64, access::LOCAL_RW).unwrap();

    scope(|s| {
        let r = s.post_recv(&pair.b, wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
        let t = s.post_send(&pair.a, wr::SendImm::new(src.slice(..11).unwrap(), 0xdead_beef)).unwrap();
        let (sc, _) = s.wait(t, WAIT).unwrap();
        assert_eq!(sc.status(), WcStatus::Success, "{sc:?}");
        assert_eq!(sc.opcode(), WcOpcode::Send);
        let (rc, buf) = s.wait(r, WAIT).unwrap();
        assert_eq!(rc.status(), WcStatus::Success, "{rc:?}");
        assert_eq!(rc.opcode(), WcOpcode::Recv);
        assert_eq!(rc.byte_len(), 11);
        assert_eq!(rc.imm(), Some(0xdead_beef));
        assert_eq!(rc.qp_num(), pair.b.qp_num());
        assert_eq!(buf.len(), 64);
    })
    .unwrap();
    assert_eq!(&dst.as_slice()[..11], b"typed-verbs");
}
