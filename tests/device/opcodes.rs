//! Every opcode rxe supports, on each transport that allows it (ibv_post_send(3) opcode
//! table), with both sides' data checked; and the typed errors for what the device lacks.

use typed_verbs::prelude::*;

use crate::common::*;

fn inline_caps() -> QpCaps {
    QpCaps { max_inline_data: 64, ..QpCaps::default() }
}

#[test]
fn rc_send_and_send_with_immediate() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, QpCaps::default());
    let mut src = r.pd.alloc_mr(256, access::LOCAL_READ).unwrap();
    fill(&mut src, 3);
    let mut dst = r.pd.alloc_mr(512, access::LOCAL_RW).unwrap();
    scope(|s| {
        let (d1, d2) = dst.slice_mut(..).unwrap().split_at(256).unwrap();
        let r1 = s.post_recv(&p.b, wr::Recv::new(d1)).unwrap();
        let r2 = s.post_recv(&p.b, wr::Recv::new(d2)).unwrap();
        let t1 = s.post_send(&p.a, wr::Send::new(src.slice(..100).unwrap())).unwrap();
        let t2 = s.post_send(&p.a, wr::SendImm::new(src.slice(100..256).unwrap(), 0x0102_0304)).unwrap();
        for t in [t1, t2] {
            let (c, _) = s.wait(t, WAIT).unwrap();
            assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::Send), "{c:?}");
        }
        let (c1, _) = s.wait(r1, WAIT).unwrap();
        assert_eq!((c1.status(), c1.opcode(), c1.byte_len(), c1.imm()), (WcStatus::Success, WcOpcode::Recv, 100, None));
        let (c2, _) = s.wait(r2, WAIT).unwrap();
        assert_eq!(
            (c2.status(), c2.opcode(), c2.byte_len(), c2.imm()),
            (WcStatus::Success, WcOpcode::Recv, 156, Some(0x0102_0304))
        );
    })
    .unwrap();
    assert_eq!(&dst.as_slice()[..100], &src.as_slice()[..100]);
    assert_eq!(&dst.as_slice()[256..256 + 156], &src.as_slice()[100..256]);
}

#[test]
fn rc_write_with_immediate_consumes_a_receive() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write(), QpCaps::default());
    let mut src = r.pd.alloc_mr(4096, access::LOCAL_READ).unwrap();
    fill(&mut src, 9);
    let target = r.pd.alloc_mr(4096, access::LOCAL_REMOTE_WRITE).unwrap();
    let mut rbuf = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    scope(|s| {
        let rt = s.post_recv(&p.b, wr::Recv::new(rbuf.slice_mut(..).unwrap())).unwrap();
        let remote = target.remote(1024..).unwrap();
        let t = s.post_send(&p.a, wr::WriteImm::new(src.slice(..2048).unwrap(), remote, 77)).unwrap();
        let (c, _) = s.wait(t, WAIT).unwrap();
        assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::RdmaWrite), "{c:?}");
        let (rc, _) = s.wait(rt, WAIT).unwrap();
        assert_eq!((rc.status(), rc.opcode(), rc.imm()), (WcStatus::Success, WcOpcode::RecvRdmaWithImm, Some(77)));
        assert_eq!(rc.byte_len(), 2048);
    })
    .unwrap();
    let mut got = vec![0u8; 2048];
    target.read_volatile_into(1024, &mut got).unwrap();
    assert_eq!(got, &src.as_slice()[..2048]);
}

#[test]
fn rc_read_fetches_remote_memory() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_read(), QpCaps::default());
    let mut remote = r.pd.alloc_mr(8192, access::REMOTE_READ_ONLY).unwrap();
    fill(&mut remote, 5);
    let mut local = r.pd.alloc_mr(8192, access::LOCAL_RW).unwrap();
    scope(|s| {
        let t =
            s.post_send(&p.a, wr::Read::new(local.slice_mut(..5000).unwrap(), remote.remote(100..).unwrap())).unwrap();
        let (c, _) = s.wait(t, WAIT).unwrap();
        assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::RdmaRead), "{c:?}");
    })
    .unwrap();
    assert_eq!(&local.as_slice()[..5000], &remote.as_slice()[100..5100]);
}

#[test]
fn rc_atomics_compare_swap_and_fetch_add_on_both_sides() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_atomic(), QpCaps::default());
    let mut target = r.pd.alloc_mr(64, access::REMOTE_ALL).unwrap();
    target.write_volatile_from(8, &40u64.to_ne_bytes()).unwrap();
    let mut result = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let remote = target.remote(8..16).unwrap();
    let mut word = [0u8; 8];
    scope(|s| {
        let (r0, rest) = result.slice_mut(..).unwrap().split_at(8).unwrap();
        let (r1, rest) = rest.split_at(8).unwrap();
        let (r2, _) = rest.split_at(8).unwrap();
        // FAA: 40 + 2 = 42, returns 40.
        let t = s.post_send(&p.a, wr::FetchAdd::new(r0, remote, 2)).unwrap();
        let (c, _) = s.wait(t, WAIT).unwrap();
        assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::FetchAdd), "{c:?}");
        // CAS that fails: compare 7 != 42, returns 42, leaves 42.
        let t = s.post_send(&p.a, wr::CompareSwap::new(r1, remote, 7, 1000)).unwrap();
        let (c, _) = s.wait(t, WAIT).unwrap();
        assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::CompSwap), "{c:?}");
        // CAS that succeeds: 42 -> 99, returns 42.
        let t = s.post_send(&p.a, wr::CompareSwap::new(r2, remote, 42, 99)).unwrap();
        let (c, _) = s.wait(t, WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
    })
    .unwrap();
    let got = |i: usize| u64::from_ne_bytes(result.as_slice()[i * 8..i * 8 + 8].try_into().unwrap());
    assert_eq!((got(0), got(1), got(2)), (40, 42, 42));
    target.read_volatile_into(8, &mut word).unwrap();
    assert_eq!(u64::from_ne_bytes(word), 99);
}

#[test]
fn misaligned_atomics_are_refused_before_the_provider_sees_them() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_atomic(), QpCaps::default());
    let target = r.pd.alloc_mr(64, access::REMOTE_ALL).unwrap();
    let mut result = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let (bad_target, bad_result) = (
        "the target must be 8 bytes at an 8-byte aligned address",
        "the result buffer must be 8 bytes at an 8-byte aligned address",
    );
    scope(|s| {
        // A valid result word (8 bytes at the region's start): the misaligned target is what
        // is refused (the result buffer is checked first).
        let (word, tail) = result.slice_mut(..).unwrap().split_at(8).unwrap();
        let e = s.post_send(&p.a, wr::FetchAdd::new(word, target.remote(4..12).unwrap(), 1));
        let e = e.expect_err("misaligned remote");
        assert_invalid(&e.error, "ibv_post_send (atomic)", bad_target);
        // The request comes back with the error: its buffer is usable again.
        let word = e.wr.expect("refused before the provider: handed back").into_result();
        let (_, rest) = tail.split_at(1).unwrap();
        let (odd, _) = rest.split_at(8).unwrap();
        let e = s.post_send(&p.a, wr::FetchAdd::new(odd, target.remote(0..8).unwrap(), 1));
        let e = e.expect_err("misaligned result");
        assert_invalid(&e.error, "ibv_post_send (atomic)", bad_result);
        assert!(e.wr.is_some(), "refused before the provider: handed back");
        let (short, _) = word.split_at(4).unwrap();
        let e = s.post_send(&p.a, wr::CompareSwap::new(short, target.remote(0..8).unwrap(), 0, 1));
        assert_invalid(&e.expect_err("short result").error, "ibv_post_send (atomic)", bad_result);
    })
    .unwrap();
    assert_eq!(p.a.outstanding(), (0, 0));
}

#[test]
fn rc_inline_send_and_write_release_the_bytes_at_once() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write(), inline_caps());
    assert!(p.a.caps().max_inline_data >= 64);
    let target = r.pd.alloc_mr(4096, access::REMOTE_RW).unwrap();
    let mut rbuf = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    scope(|s| {
        let rt = s.post_recv(&p.b, wr::Recv::new(rbuf.slice_mut(..).unwrap())).unwrap();
        let mut bytes = *b"inline send, not registered";
        let t1 = s.post_inline(&p.a, wr::InlineSend::new(&bytes)).unwrap();
        bytes.fill(b'X'); // the call returned: the bytes may be reused at once
        let mut bytes2 = *b"inline write";
        let t2 = s.post_inline(&p.a, wr::InlineWrite::new(&bytes2, target.remote(..).unwrap())).unwrap();
        bytes2.fill(0);
        for t in [t1, t2] {
            let (c, ()) = s.wait(t, WAIT).unwrap();
            assert!(c.is_success(), "{c:?}");
        }
        let (rc, _) = s.wait(rt, WAIT).unwrap();
        assert_eq!(rc.byte_len(), 27);
        let too_big = [0u8; 65];
        let e = s.post_inline(&p.a, wr::InlineSend::new(&too_big)).expect_err("above max_inline_data");
        assert!(matches!(e.error, Error::InlineTooLarge { len: 65, .. }), "{:?}", e.error);
    })
    .unwrap();
    assert_eq!(&rbuf.as_slice()[..27], b"inline send, not registered");
    let mut got = [0u8; 12];
    target.read_volatile_into(0, &mut got).unwrap();
    assert_eq!(&got, b"inline write");
}

/// A fenced WRITE and a solicited SEND are accepted by the device and complete, and the data
/// ends up as a fenced order would leave it.
///
/// What this cannot show: that the fence is what ordered them. rxe serves a QP's requests in
/// order anyway, so the READ would see the old bytes with `.fence()` removed too; and nothing
/// here waits on a solicited event. That the flags reach the work request is checked on the
/// host (src/wr.rs, `fence_and_solicited_reach_the_send_flags`: `IBV_SEND_FENCE` and
/// `IBV_SEND_SOLICITED` in `send_flags`); that a solicited SEND wakes a solicited-only CQ is
/// channels.rs' `solicited_only_arming_fires_for_a_solicited_send_and_not_for_an_unsolicited_one`.
#[test]
fn rc_fenced_write_and_solicited_send_are_accepted_and_complete() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write().remote_read(), QpCaps::default());
    let mut remote = r.pd.alloc_mr(4096, access::REMOTE_RW).unwrap();
    remote.write_volatile_from(0, &[0xAB; 4096]).unwrap();
    let mut local = r.pd.alloc_mr(4096, access::LOCAL_RW).unwrap();
    let mut src = r.pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(0xCD);
    let mut rbuf = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    scope(|s| {
        let rt = s.post_recv(&p.b, wr::Recv::new(rbuf.slice_mut(..).unwrap())).unwrap();
        // READ the remote, then a fenced WRITE over the same remote bytes: the READ must see
        // the old bytes (as it would on rxe without the fence: see the doc comment).
        let t1 = s.post_send(&p.a, wr::Read::new(local.slice_mut(..).unwrap(), remote.remote(..).unwrap())).unwrap();
        let t2 =
            s.post_send(&p.a, wr::Write::new(src.slice(..).unwrap(), remote.remote(..64).unwrap()).fence()).unwrap();
        let t3 = s.post_send(&p.a, wr::Send::new(src.slice(..8).unwrap()).solicited()).unwrap();
        assert!(s.wait(t1, WAIT).unwrap().0.is_success());
        for t in [t2, t3] {
            let (c, _) = s.wait(t, WAIT).unwrap();
            assert!(c.is_success(), "{c:?}");
        }
        let (rc, _) = s.wait(rt, WAIT).unwrap();
        assert!(rc.is_success() && rc.byte_len() == 8, "{rc:?}");
    })
    .unwrap();
    assert!(local.as_slice().iter().all(|&b| b == 0xAB), "the fenced WRITE overtook the READ");
    let mut head = [0u8; 64];
    remote.read_volatile_into(0, &mut head).unwrap();
    assert_eq!(head, [0xCD; 64]);
}

/// A UC pair given `REMOTE_ALL` (the preset a program may hand every QP): its INIT grants
/// REMOTE_WRITE alone (unit test `qp::tests::a_uc_init_grants_remote_write_alone`), the pair
/// reaches RTS and carries an RDMA WRITE.
#[test]
fn a_uc_pair_given_every_remote_right_carries_writes() {
    let r = rig();
    let (a, _b) = uc_pair(&r.pd, &r.cq, access::REMOTE_ALL, inline_caps());
    let mut src = r.pd.alloc_mr(256, access::LOCAL_READ).unwrap();
    fill(&mut src, 3);
    let target = r.pd.alloc_mr(256, access::LOCAL_REMOTE_WRITE).unwrap();
    scope(|s| {
        let t = s.post_send(&a, wr::Write::new(src.slice(..).unwrap(), target.remote(..).unwrap())).unwrap();
        let (c, _) = s.wait(t, WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
    })
    .unwrap();
    // UC is unacknowledged: the sender's completion may come before the bytes land.
    let deadline = std::time::Instant::now() + WAIT;
    let mut landed = [0u8; 256];
    loop {
        target.read_volatile_into(0, &mut landed).unwrap();
        if landed[..] == *src.as_slice() || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::yield_now();
    }
    assert_eq!(&landed[..], src.as_slice());
}

#[test]
fn uc_send_imm_write_and_write_imm() {
    let r = rig();
    let (a, b) = uc_pair(&r.pd, &r.cq, Access::NONE.remote_write(), inline_caps());
    let mut src = r.pd.alloc_mr(1024, access::LOCAL_READ).unwrap();
    fill(&mut src, 11);
    let target = r.pd.alloc_mr(1024, access::LOCAL_REMOTE_WRITE).unwrap();
    let mut rbuf = r.pd.alloc_mr(1024, access::LOCAL_RW).unwrap();
    scope(|s| {
        let (r1, rest) = rbuf.slice_mut(..).unwrap().split_at(512).unwrap();
        let (r2, r3) = rest.split_at(256).unwrap();
        let rts = [r1, r2, r3].map(|buf| s.post_recv(&b, wr::Recv::new(buf)).unwrap());
        let sends = [
            s.post_send(&a, wr::Send::new(src.slice(..300).unwrap())).unwrap(),
            s.post_send(&a, wr::SendImm::new(src.slice(300..400).unwrap(), 5)).unwrap(),
            s.post_send(&a, wr::Write::new(src.slice(..512).unwrap(), target.remote(..).unwrap())).unwrap(),
            s.post_send(&a, wr::WriteImm::new(src.slice(512..).unwrap(), target.remote(512..).unwrap(), 6)).unwrap(),
        ];
        for t in sends {
            let (c, _) = s.wait(t, WAIT).unwrap();
            assert!(c.is_success(), "{c:?}");
        }
        let got: Vec<_> = rts.into_iter().map(|t| s.wait(t, WAIT).unwrap().0).collect();
        assert_eq!((got[0].byte_len(), got[0].imm()), (300, None));
        assert_eq!((got[1].byte_len(), got[1].imm()), (100, Some(5)));
        assert_eq!((got[2].opcode(), got[2].imm(), got[2].byte_len()), (WcOpcode::RecvRdmaWithImm, Some(6), 512));
        let t = s.post_inline(&a, wr::InlineSend::new(b"uc inline")).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    assert_eq!(&rbuf.as_slice()[..300], &src.as_slice()[..300]);
    assert_eq!(&rbuf.as_slice()[512..612], &src.as_slice()[300..400]);
    let mut got = vec![0u8; 1024];
    target.read_volatile_into(0, &mut got).unwrap();
    assert_eq!(got, src.as_slice());
}

#[test]
fn ud_send_and_send_imm_through_an_address_handle() {
    let r = rig();
    let a = ud_qp(&r.pd, &r.cq, inline_caps());
    let b = ud_qp(&r.pd, &r.cq, QpCaps::default());
    let eb = b.endpoint(PORT, gid_index(), 0).unwrap();
    let ah = r.pd.create_ah(&AddressVector::global(PORT, eb.gid, gid_index())).unwrap();
    let mut src = r.pd.alloc_mr(256, access::LOCAL_READ).unwrap();
    fill(&mut src, 21);
    // UD receive buffers start with 40 bytes for the GRH.
    let mut rbuf = r.pd.alloc_mr(1024, access::LOCAL_RW).unwrap();
    scope(|s| {
        let (r1, r2) = rbuf.slice_mut(..).unwrap().split_at(512).unwrap();
        let rt1 = s.post_recv(&b, wr::Recv::new(r1)).unwrap();
        let rt2 = s.post_recv(&b, wr::Recv::new(r2)).unwrap();
        // A QP number beyond the wire's 24 bits (whose low 24 bits name `b`) is refused before
        // the provider sees it: rxe would deliver the datagram to `b`.
        let e =
            s.post_send(&a, wr::Send::new(src.slice(..200).unwrap()).to(&ah, eb.qp_num | 1 << 24, QKEY)).unwrap_err();
        assert!(
            matches!(&e.error, Error::InvalidArgument { reason, .. } if reason.contains("24 bits")),
            "{:?}",
            e.error
        );
        assert!(e.wr.is_some(), "handed back");
        let t1 = s.post_send(&a, wr::Send::new(src.slice(..200).unwrap()).to(&ah, eb.qp_num, QKEY)).unwrap();
        let t2 = s.post_send(&a, wr::SendImm::new(src.slice(200..).unwrap(), 0xfeed).to(&ah, eb.qp_num, QKEY)).unwrap();
        for t in [t1, t2] {
            let (c, _) = s.wait(t, WAIT).unwrap();
            assert!(c.is_success(), "{c:?}");
        }
        let (c1, _) = s.wait(rt1, WAIT).unwrap();
        assert!(c1.is_success(), "{c1:?}");
        assert_eq!((c1.byte_len(), c1.src_qp(), c1.imm()), (40 + 200, a.qp_num(), None));
        let (c2, _) = s.wait(rt2, WAIT).unwrap();
        assert_eq!((c2.byte_len(), c2.imm()), (40 + 56, Some(0xfeed)));
    })
    .unwrap();
    assert_eq!(&rbuf.as_slice()[40..240], &src.as_slice()[..200]);
    assert_eq!(&rbuf.as_slice()[512 + 40..512 + 96], &src.as_slice()[200..]);
}

#[test]
fn transports_the_device_lacks_are_typed_errors() {
    let r = rig();
    // XRC as the device reports it (IBV_DEVICE_XRC, bit 20): refused typed without it, a QP
    // (which stays in RESET) with it.
    let xrc = r._ctx.query_device().unwrap().device_cap_flags() & (1 << 20) != 0;
    match r.pd.create_qp::<XRC_SEND>(&QpConfig::new(&r.cq)).map(|_| ()) {
        Err(Error::Unsupported { what, .. }) if !xrc => assert!(what.contains("XRC_SEND"), "{what}"),
        Ok(()) if xrc => {}
        other => panic!("XRC_SEND on a device whose IBV_DEVICE_XRC is {xrc}: {other:?}"),
    }
    // Raw packet QPs: no device flag says whether the provider makes them; rxe makes none.
    let raw = r.pd.create_qp::<RAW_PACKET>(&QpConfig::new(&r.cq)).map(|_| ());
    match raw {
        Err(Error::Unsupported { what, .. }) => assert!(what.contains("RAW_PACKET"), "{what}"),
        Ok(()) if !is_soft_roce(&r._ctx) => {}
        other => panic!("RAW_PACKET: expected Error::Unsupported on Soft-RoCE, got {other:?}"),
    }
}

#[test]
fn ip_checksum_capability_matches_the_device_flags() {
    let r = rig();
    let attr = r._ctx.query_device().unwrap();
    let flags = attr.device_cap_flags();
    assert_eq!(attr.ip_csum::<UD>().is_some(), flags & (1 << 18) != 0);
    assert_eq!(attr.ip_csum::<RAW_PACKET>().is_some(), flags & (1 << 26) != 0);
    if is_soft_roce(&r._ctx) {
        // rxe reports no checksum offload (IBV_DEVICE_UD_IP_CSUM, IBV_DEVICE_RAW_IP_CSUM): no
        // `IpCsum` request can be built there.
        assert!(attr.ip_csum::<UD>().is_none() && attr.ip_csum::<RAW_PACKET>().is_none(), "flags {flags:#x}");
    }
}

#[test]
fn queue_sizes_above_the_device_limits_are_typed_errors() {
    let r = rig();
    let max = r._ctx.query_device().unwrap().max_qp_wr();
    let caps = QpCaps { max_send_wr: max + 1, ..QpCaps::default() };
    match r.pd.create_qp::<RC>(&QpConfig::new(&r.cq).caps(caps)) {
        Err(Error::InvalidArgument { verb: "ibv_create_qp", reason }) => {
            assert!(reason.contains("max_send_wr"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn tso_capability_is_what_the_device_reports() {
    let r = rig();
    let ud = r._ctx.tso::<UD>().expect("ibv_query_device_ex");
    let raw = r._ctx.tso::<RAW_PACKET>().expect("ibv_query_device_ex");
    if is_soft_roce(&r._ctx) {
        // rxe reports no TCP segmentation offload: no `Tso` request can be built there.
        assert!(ud.is_none() && raw.is_none(), "{ud:?} {raw:?}");
    }
    if let Some(cap) = ud {
        assert!(cap.max_tso() > 0);
    }
}
