//! Memory windows on the device, mirroring rdma-core's MR/MW tests; the expected outcomes are
//! those of ../shared/notes/softroce.md.

use typed_verbs::access::{self, window};
use typed_verbs::mw::{Type1, Type2, WindowAdvert};
use typed_verbs::prelude::*;
use typed_verbs::wr::{BindMw, InlineSendInv, LocalInv, SendInv};

use crate::common::*;

/// Posts an RDMA WRITE of `len` bytes from the client (QP a) to `remote` and returns its status.
fn write_status<R: typed_verbs::access::HasRemoteWrite>(r: &WindowRig, remote: RemoteSlice<R>, len: usize) -> WcStatus {
    scope(|s| {
        let t = s.post_send(&r.p.a, wr::Write::new(r.src.slice(..len).unwrap(), remote)).unwrap();
        s.wait(t, WAIT).unwrap().0.status()
    })
    .unwrap()
}

fn target_bytes(r: &WindowRig, offset: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    r.target.read_volatile_into(offset, &mut v).unwrap();
    v
}

#[test]
fn type1_bind_then_remote_write_through_the_window() {
    let r = window_rig();
    let mw = r.pd.alloc_mw::<Type1>().unwrap();
    let stale = mw.raw_rkey();
    let bound = scope(|s| {
        let t = s.bind_mw(&r.p.b, mw, &r.target, 1024, 2048, window::WRITE).unwrap();
        let (c, bound) = s.wait(t, WAIT).unwrap();
        assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::BindMw), "{c:?}");
        bound.expect("bind succeeded")
    })
    .unwrap();
    assert_ne!(bound.rkey(), stale, "a bind gives a new rkey");
    assert_eq!(write_status(&r, bound.remote(0..512).unwrap(), 512), WcStatus::Success);
    assert_eq!(target_bytes(&r, 1024, 512), &r.src.as_slice()[..512]);
    assert_eq!(target_bytes(&r, 0, 1024), vec![0; 1024], "nothing outside the window was written");
}

/// A fenced type 1 bind (`IBV_SEND_FENCE`, RC) posted right behind an RDMA READ on the same
/// QP: both complete successfully, in order, the READ's bytes land, and the window works.
#[test]
fn a_fenced_type1_bind_behind_an_rdma_read_completes_after_it() {
    let r = window_rig();
    let mut source = r.pd.alloc_mr(4096, access::REMOTE_READ_ONLY).unwrap();
    source.as_mut_slice().fill(0x5A);
    let mut dst = r.pd.alloc_mr(4096, access::LOCAL_RW).unwrap();
    let mw = r.pd.alloc_mw::<Type1>().unwrap();
    let bound = scope(|s| {
        let read = s.post_send(&r.p.b, wr::Read::new(dst.slice_mut(..).unwrap(), source.remote(..).unwrap())).unwrap();
        let bind = s.bind_mw_fenced(&r.p.b, mw, &r.target, 0, 4096, window::WRITE).unwrap();
        let (rc, _) = s.wait(read, WAIT).unwrap();
        let (bc, bound) = s.wait(bind, WAIT).unwrap();
        assert_eq!((rc.status(), rc.opcode()), (WcStatus::Success, WcOpcode::RdmaRead), "{rc:?}");
        assert_eq!((bc.status(), bc.opcode()), (WcStatus::Success, WcOpcode::BindMw), "{bc:?}");
        bound.expect("the fenced bind succeeded")
    })
    .unwrap();
    assert!(dst.as_slice().iter().all(|&b| b == 0x5A), "the READ's bytes");
    assert_eq!(write_status(&r, bound.remote(0..64).unwrap(), 64), WcStatus::Success);
    assert_eq!(target_bytes(&r, 0, 64), &r.src.as_slice()[..64]);
}

/// A peer that writes with a window's rkey outside the window's bounds, inside its region: the
/// verbs refuse it (REM_ACCESS_ERR); rxe checks the address against the region only
/// (`rxe_lookup_mw` compares neither), and the bytes land in the region. Either way nothing
/// is unsound here: a bound window borrows its whole region, whose bytes safe code cannot read
/// or write while the window lives, and a write beyond the region is refused by the region's
/// own range check.
#[test]
fn a_write_outside_a_windows_bounds_is_refused_or_on_rxe_stays_in_its_region() {
    let r = window_rig();
    let rxe = is_soft_roce(&r.ctx);
    let mw = r.pd.alloc_mw::<Type1>().unwrap();
    let bound = scope(|s| {
        let t = s.bind_mw(&r.p.b, mw, &r.target, 1024, 2048, window::WRITE).unwrap();
        s.wait(t, WAIT).unwrap().1.expect("bind")
    })
    .unwrap();
    let rkey = bound.rkey();
    let base = r.target.addr();
    // Just past the window's end, and just before its start: inside the region both.
    for offset in [3072u64, 512] {
        let forged = RemoteSlice::<window::Write>::from_wire(base + offset, 512, rkey);
        let status = write_status(&r, forged, 512);
        let landed = target_bytes(&r, offset as usize, 512) == r.src.as_slice()[..512];
        if rxe {
            assert_eq!(
                (status, landed),
                (WcStatus::Success, true),
                "rxe checks the region's bounds only (offset {offset})"
            );
        } else {
            // The refusal breaks the writer's connection: the one write is the test.
            assert_eq!((status, landed), (WcStatus::RemAccessErr, false), "outside the window (offset {offset})");
            return;
        }
    }
    // Past the region's end: refused by rxe too.
    let forged = RemoteSlice::<window::Write>::from_wire(base + 8192 - 256, 512, rkey);
    assert_eq!(write_status(&r, forged, 512), WcStatus::RemAccessErr, "beyond the region");
    drop(bound);
}

#[test]
fn a_stale_pre_bind_rkey_is_rejected() {
    let r = window_rig();
    let mw = r.pd.alloc_mw::<Type2>().unwrap();
    let stale = mw.raw_rkey();
    let bound = scope(|s| {
        let t = s.post_send(&r.p.b, BindMw::new(mw, &r.target, 0, 4096, window::WRITE)).unwrap();
        s.wait(t, WAIT).unwrap().1.expect("bind")
    })
    .unwrap();
    assert_ne!(stale, bound.rkey());
    let forged = RemoteSlice::<window::Write>::from_wire(r.target.addr(), 4096, stale);
    assert_eq!(write_status(&r, forged, 64), WcStatus::RemAccessErr);
}

#[test]
fn type2_bind_by_work_request_then_write_then_local_inv_revokes() {
    let r = window_rig();
    let mw = r.pd.alloc_mw::<Type2>().unwrap();
    let bound = scope(|s| {
        let t = s.post_send(&r.p.b, BindMw::new(mw, &r.target, 4096, 4096, window::READ_WRITE)).unwrap();
        let (c, bound) = s.wait(t, WAIT).unwrap();
        assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::BindMw), "{c:?}");
        bound.expect("bind succeeded")
    })
    .unwrap();
    let remote = bound.remote(..).unwrap();
    assert_eq!(write_status(&r, remote.slice(8, 1000).unwrap(), 1000), WcStatus::Success);
    assert_eq!(target_bytes(&r, 4096 + 8, 1000), &r.src.as_slice()[..1000]);

    let mw = scope(|s| {
        let t = s.post_send(&r.p.b, LocalInv::new(bound)).unwrap();
        let (c, unbound) = s.wait(t, WAIT).unwrap();
        assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::LocalInv), "{c:?}");
        unbound.expect("invalidated")
    })
    .unwrap();
    assert_eq!(write_status(&r, remote, 64), WcStatus::RemAccessErr);
    drop(mw);
}

/// A type 2 window of `r`'s QP b bound to the first 4096 bytes of the target, writable.
fn bound_type2_window(r: &WindowRig) -> typed_verbs::mw::BoundMw<'_, Type2, window::Write> {
    let mw = r.pd.alloc_mw::<Type2>().unwrap();
    scope(|s| {
        let t = s.post_send(&r.p.b, BindMw::new(mw, &r.target, 0, 4096, window::WRITE)).unwrap();
        s.wait(t, WAIT).unwrap().1.expect("bind")
    })
    .unwrap()
}

#[test]
fn send_with_invalidate_revokes_the_receivers_window() {
    let r = window_rig();
    let bound = bound_type2_window(&r);
    let mut rbuf = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let remote = bound.remote(..).unwrap();
    let rkey = bound.rkey();
    let (completion, _) = scope(|s| {
        let rt = s.post_recv(&r.p.b, wr::Recv::new(rbuf.slice_mut(..).unwrap())).unwrap();
        let t = s.post_send(&r.p.a, SendInv::new(r.src.slice(..16).unwrap(), rkey)).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        s.wait(rt, WAIT).unwrap()
    })
    .unwrap();
    assert!(completion.is_success(), "{completion:?}");
    assert_eq!(completion.invalidated_rkey(), Some(rkey), "{completion:?}");
    assert_eq!(completion.byte_len(), 16);
    let mw = bound.invalidated_by(&completion).expect("the receive completion invalidated the window");
    assert_eq!(write_status(&r, remote, 64), WcStatus::RemAccessErr);
    drop(mw);
}

/// SEND_WITH_INV with INLINE (a Send operation): the bytes are copied at the post, so the
/// buffer is free again at once (overwritten here before the completion); the receiver gets
/// them, the completion names the rkey, the window is revoked, and a second inline
/// SEND_WITH_INV of the same rkey is refused before the provider (invalidated already).
#[test]
fn inline_send_with_invalidate_revokes_the_receivers_window() {
    let r = window_rig();
    let bound = bound_type2_window(&r);
    let mut rbuf = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let remote = bound.remote(..).unwrap();
    let rkey = bound.rkey();
    let mut payload = *b"inline+invalidat";
    let (completion, _) = scope(|s| {
        let rt = s.post_recv(&r.p.b, wr::Recv::new(rbuf.slice_mut(..).unwrap())).unwrap();
        let t = s.post_inline(&r.p.a, InlineSendInv::new(&payload, rkey)).unwrap();
        // Borrowed only for the call: reusable before the completion.
        payload.fill(0);
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        s.wait(rt, WAIT).unwrap()
    })
    .unwrap();
    assert!(completion.is_success(), "{completion:?}");
    assert_eq!(completion.invalidated_rkey(), Some(rkey), "{completion:?}");
    assert_eq!(completion.byte_len(), 16);
    assert_eq!(&rbuf.as_slice()[..16], b"inline+invalidat");
    assert_eq!(payload, [0; 16]);
    let mw = bound.invalidated_by(&completion).expect("the receive completion invalidated the window");
    assert_eq!(write_status(&r, remote, 64), WcStatus::RemAccessErr);
    scope(|s| match s.post_inline(&r.p.a, InlineSendInv::new(b"again", rkey)) {
        Err(e) => assert!(
            matches!(&e.error, Error::InvalidArgument { verb, .. } if verb.contains("SEND_WITH_INV")),
            "{:?}",
            e.error
        ),
        Ok(_) => panic!("a second SEND_WITH_INV of an invalidated window was posted"),
    })
    .unwrap();
    drop(mw);
}

#[test]
fn zero_length_rebind_of_a_type1_window_revokes_it() {
    let r = window_rig();
    let mw = r.pd.alloc_mw::<Type1>().unwrap();
    let (remote, mw) = scope(|s| {
        let t = s.bind_mw(&r.p.b, mw, &r.target, 0, 4096, window::WRITE).unwrap();
        let bound = s.wait(t, WAIT).unwrap().1.expect("bind");
        let remote = bound.remote(..).unwrap();
        let t = s.unbind_mw(&r.p.b, bound).unwrap();
        let (c, unbound) = s.wait(t, WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
        (remote, unbound.expect("unbound"))
    })
    .unwrap();
    assert_ne!(mw.raw_rkey(), remote.rkey());
    assert_eq!(write_status(&r, remote, 64), WcStatus::RemAccessErr);
}

/// A bound type 1 window bound again (`rebind_mw`, no unbind first) to another region with
/// other rights, advertised to the peer before the rebind's completion (a send after it on the
/// same QP): the advertised rkey is the new one, reaches the new range only, and the old rkey
/// stops working.
#[test]
fn rebinding_a_bound_type1_window_moves_it_and_revokes_the_old_rkey() {
    let r = window_rig();
    let other = r.pd.alloc_mr(4096, access::WINDOW_BINDABLE).unwrap();
    let mw = r.pd.alloc_mw::<Type1>().unwrap();
    let mut rbuf = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let (old, advert, new) = scope(|s| {
        let t = s.bind_mw(&r.p.b, mw, &r.target, 0, 1024, window::WRITE).unwrap();
        let bound = s.wait(t, WAIT).unwrap().1.expect("bind");
        let old = bound.remote(..).unwrap();
        assert_eq!(write_status(&r, old, 64), WcStatus::Success, "the first binding works");
        let rt = s.post_recv(&r.p.a, wr::Recv::new(rbuf.slice_mut(..).unwrap())).unwrap();
        let t = s.rebind_mw(&r.p.b, bound, &other, 2048, 1024, window::READ_WRITE).unwrap();
        let adv = s.advertise_window(&r.p.b, &t).unwrap();
        let (c, rebound) = s.wait(t, WAIT).unwrap();
        assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::BindMw), "{c:?}");
        let rebound = rebound.expect("rebind succeeded");
        assert_eq!(rebound.len(), 1024);
        assert!(s.wait(adv, WAIT).unwrap().0.is_success());
        let (c, buf) = s.wait(rt, WAIT).unwrap();
        assert!(c.is_success() && c.byte_len() as usize == WindowAdvert::LEN, "{c:?}");
        let mut bytes = [0u8; WindowAdvert::LEN];
        buf.read_volatile_into(&mut bytes);
        (old, WindowAdvert::decode(&bytes).unwrap(), rebound)
    })
    .unwrap();
    assert_ne!(new.rkey(), old.rkey(), "a rebind gives a new rkey");
    assert_eq!((advert.rkey, advert.len), (new.rkey(), 1024), "the advert names the new binding");
    let remote = advert.remote::<window::ReadWrite>().unwrap();
    assert_eq!(write_status(&r, remote.slice(0, 256).unwrap(), 256), WcStatus::Success);
    let mut landed = vec![0u8; 256];
    other.read_volatile_into(2048, &mut landed).unwrap();
    assert_eq!(landed, &r.src.as_slice()[..256], "the new binding's range received the bytes");
    assert_eq!(target_bytes(&r, 64, 1024 - 64), vec![0; 1024 - 64], "the old range got nothing more");
    assert_eq!(write_status(&r, old, 64), WcStatus::RemAccessErr, "the old rkey is revoked");
    drop(new);
}

#[test]
fn deallocating_a_bound_window_revokes_it() {
    let r = window_rig();
    let mw = r.pd.alloc_mw::<Type1>().unwrap();
    let bound = scope(|s| {
        let t = s.bind_mw(&r.p.b, mw, &r.target, 0, 4096, window::WRITE).unwrap();
        s.wait(t, WAIT).unwrap().1.expect("bind")
    })
    .unwrap();
    let remote = bound.remote(..).unwrap();
    assert_eq!(write_status(&r, remote, 64), WcStatus::Success);
    drop(bound); // ibv_dealloc_mw
    let r2 = rig_with(&r);
    assert_eq!(write_status(&r2, remote, 64), WcStatus::RemAccessErr);
}

/// A fresh client/server QP pair on the same PD and target (the previous pair's client QP went
/// to ERR after a remote access error).
fn rig_with(r: &WindowRig) -> WindowRig {
    let caps = QpCaps { max_inline_data: 64, ..QpCaps::default() };
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write().remote_read(), caps);
    let target = r.pd.alloc_mr(8192, access::WINDOW_BINDABLE).unwrap();
    let mut src = r.pd.alloc_mr(4096, access::LOCAL_READ).unwrap();
    fill(&mut src, 7);
    WindowRig { ctx: r.ctx.clone(), pd: r.pd.clone(), cq: r.cq.clone(), p, target, src }
}

/// The next key of a type 1 window's rkey: rxe's `ibv_bind_mw` posts `ibv_inc_rkey` of the
/// window's current rkey (its low "key" byte incremented), and the kernel takes that key.
fn next_key(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// A bind, a rebind and an unbind flushed because their QP went to ERR (a WRITE through a key
/// no region has, the peer's access error): each hands back a window the device cannot hold
/// otherwise. The failed bind may have run, so its window was deallocated and a new unbound
/// one of the PD takes its place; the failed rebind's and unbind's windows are still bound,
/// with their rkeys, and reach their ranges from a fresh QP pair. The next binds and unbinds,
/// on the fresh pair, take the key after each window's own.
#[test]
fn binds_flushed_by_a_qp_in_error_give_the_window_back_as_the_device_has_it() {
    let r = window_rig();
    let fresh = r.pd.alloc_mw::<Type1>().unwrap();
    let [rebound, unbound] = [0, 1].map(|i| {
        scope(|s| {
            let mw = r.pd.alloc_mw::<Type1>().unwrap();
            let t = s.bind_mw(&r.p.b, mw, &r.target, i * 1024, 1024, window::WRITE).unwrap();
            s.wait(t, WAIT).unwrap().1.expect("bind")
        })
        .unwrap()
    });
    let rkeys = [rebound.rkey(), unbound.rkey()];
    let nowhere = RemoteSlice::<access::RemoteRw>::from_wire(0x1000, 64, rkeys[0] ^ 0x00ff_ff00);
    let (fresh, bound) = scope(|s| {
        let w = s.post_send(&r.p.b, wr::Write::new(r.src.slice(..64).unwrap(), nowhere)).unwrap();
        let (c, _) = s.wait(w, WAIT).unwrap();
        assert_eq!(c.status(), WcStatus::RemAccessErr, "{c:?}");
        // The binding QP is in ERR: everything posted on it now is flushed.
        let t = s.bind_mw(&r.p.b, fresh, &r.target, 4096, 1024, window::WRITE).unwrap();
        let (c, back) = s.wait(t, WAIT).unwrap();
        assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");
        let fresh = back.expect_err("a flushed bind hands back an unbound window");
        let t = s.rebind_mw(&r.p.b, rebound, &r.target, 2048, 1024, window::READ_WRITE).unwrap();
        let (c, back) = s.wait(t, WAIT).unwrap();
        assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");
        let rebound = back.expect_err("a flushed rebind gives the window back as it was");
        let t = s.unbind_mw(&r.p.b, unbound).unwrap();
        let (c, back) = s.wait(t, WAIT).unwrap();
        assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");
        let unbound = back.expect_err("a flushed unbind gives the window back bound");
        (fresh, [rebound, unbound])
    })
    .unwrap();
    let r2 = rig_with(&r);
    let remotes = [0, 1].map(|i| bound[i].remote(0..64).unwrap());
    for (i, remote) in remotes.into_iter().enumerate() {
        assert_eq!((remote.rkey(), bound[i].len()), (rkeys[i], 1024));
        assert_eq!(write_status(&r2, remote, 64), WcStatus::Success, "window {i}: the old binding still works");
        assert_eq!(target_bytes(&r, i * 1024, 64), &r2.src.as_slice()[..64], "window {i}");
    }
    let stale = fresh.raw_rkey();
    let (fresh, unbound) = scope(|s| {
        let t = s.bind_mw(&r2.p.b, fresh, &r.target, 4096, 1024, window::WRITE).unwrap();
        let (c, fresh) = s.wait(t, WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
        let unbound = bound.map(|b| {
            let t = s.unbind_mw(&r2.p.b, b).unwrap();
            let (c, unbound) = s.wait(t, WAIT).unwrap();
            assert!(c.is_success(), "{c:?}");
            unbound.expect("unbind")
        });
        (fresh.expect("bind"), unbound)
    })
    .unwrap();
    assert_eq!(fresh.rkey(), next_key(stale), "the bind after the flushed one takes the next key");
    assert_eq!(write_status(&r2, fresh.remote(0..64).unwrap(), 64), WcStatus::Success);
    for i in 0..2 {
        assert_eq!(unbound[i].raw_rkey(), next_key(rkeys[i]), "window {i}: the unbind takes the next key");
        // A pair each: the access error puts the writing QP in ERR.
        assert_eq!(write_status(&rig_with(&r), remotes[i], 64), WcStatus::RemAccessErr, "window {i}: unbound");
    }
}

#[test]
fn zero_based_type2_window_addresses_by_offset() {
    let r = window_rig();
    let mw = r.pd.alloc_mw::<Type2>().unwrap();
    let bound = scope(|s| {
        let t = s.post_send(&r.p.b, BindMw::new(mw, &r.target, 2048, 1024, window::WRITE.zero_based())).unwrap();
        s.wait(t, WAIT).unwrap().1.expect("zero-based bind")
    })
    .unwrap();
    let remote = bound.remote(100..300).unwrap();
    assert_eq!(remote.addr(), 100, "zero-based: the remote address is an offset");
    assert_eq!(write_status(&r, remote, 200), WcStatus::Success);
    assert_eq!(target_bytes(&r, 2048 + 100, 200), &r.src.as_slice()[..200]);
}

/// A zero-based window granting remote atomics must start on an 8-byte boundary: the library
/// checks an atomic's target aligned as the peer addresses it, an offset from the window's
/// start. At offset 4 the bind is refused before the provider sees it (the window handed
/// back); at offset 8 it binds, and the peer's FETCH_AND_ADD at window offset 8 lands on the
/// aligned word 16 bytes into the region.
#[test]
fn a_zero_based_window_granting_atomics_must_start_aligned() {
    let r = window_rig();
    let target = r.pd.alloc_mr(4096, access::FULL).unwrap();
    let qp_rights = Access::NONE.remote_write().remote_read().remote_atomic();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, qp_rights, QpCaps::default());
    let mw = r.pd.alloc_mw::<Type2>().unwrap();
    let mw = scope(|s| {
        let e = s.post_send(&p.b, BindMw::new(mw, &target, 4, 64, window::ALL.zero_based())).unwrap_err();
        assert!(
            matches!(&e.error, Error::InvalidArgument { reason, .. } if reason.contains("8-byte")),
            "{:?}",
            e.error
        );
        e.wr.expect("handed back").into_window()
    })
    .unwrap();
    let bound = scope(|s| {
        let t = s.post_send(&p.b, BindMw::new(mw, &target, 8, 64, window::ALL.zero_based())).unwrap();
        s.wait(t, WAIT).unwrap().1.expect("an aligned zero-based bind")
    })
    .unwrap();
    let mut old = r.pd.alloc_mr(8, access::LOCAL_RW).unwrap();
    scope(|s| {
        let t =
            s.post_send(&p.a, wr::FetchAdd::new(old.slice_mut(..).unwrap(), bound.remote(8..16).unwrap(), 5)).unwrap();
        let (c, _) = s.wait(t, WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
    })
    .unwrap();
    let mut word = [0u8; 8];
    target.read_volatile_into(16, &mut word).unwrap();
    assert_eq!(u64::from_ne_bytes(word), 5);
    assert_eq!(old.as_slice(), &0u64.to_ne_bytes());
}

#[test]
fn a_window_advertised_on_the_binding_qp_is_usable_by_the_peer() {
    let r = window_rig();
    let mw = r.pd.alloc_mw::<Type2>().unwrap();
    let mut rbuf = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let (advert, bound) = scope(|s| {
        let rt = s.post_recv(&r.p.a, wr::Recv::new(rbuf.slice_mut(..).unwrap())).unwrap();
        let bind = s.post_send(&r.p.b, BindMw::new(mw, &r.target, 0, 4096, window::WRITE)).unwrap();
        // Before the bind's completion: only a send on the same QP may carry the rkey.
        let adv = s.advertise_window(&r.p.b, &bind).unwrap();
        let (c, buf) = s.wait(rt, WAIT).unwrap();
        assert!(c.is_success() && c.byte_len() as usize == WindowAdvert::LEN, "{c:?}");
        let mut bytes = [0u8; WindowAdvert::LEN];
        buf.read_volatile_into(&mut bytes);
        assert!(s.wait(adv, WAIT).unwrap().0.is_success());
        let bound = s.wait(bind, WAIT).unwrap().1.expect("bind");
        (WindowAdvert::decode(&bytes).unwrap(), bound)
    })
    .unwrap();
    assert_eq!(advert.rkey, bound.rkey());
    let remote = advert.remote::<window::Write>().unwrap();
    assert_eq!(write_status(&r, remote, 256), WcStatus::Success);
    assert_eq!(target_bytes(&r, 0, 256), &r.src.as_slice()[..256]);
}

#[test]
fn advertising_on_another_qp_is_refused() {
    let r = window_rig();
    let mw = r.pd.alloc_mw::<Type2>().unwrap();
    scope(|s| {
        let bind = s.post_send(&r.p.b, BindMw::new(mw, &r.target, 0, 4096, window::WRITE)).unwrap();
        let e = s.advertise_window(&r.p.a, &bind).expect_err("other QP");
        assert_invalid(&e, "ibv_post_send", "only on the QP that posted the bind");
        assert!(s.wait(bind, WAIT).unwrap().1.is_ok());
    })
    .unwrap();
}

#[test]
fn a_bind_through_a_qp_of_another_pd_is_refused_before_the_provider() {
    // The window and region are in one PD, the QP in another. rxe would refuse the bind only
    // at execution (C10-72: IBV_WC_MW_BIND_ERR, the QP to ERR); the library refuses it before
    // posting (DESIGN.md §5, objects that meet), hands the window back with its rkey unchanged,
    // and the QP stays usable.
    let r = window_rig();
    let other_pd = r.ctx.alloc_pd().unwrap();
    let p = rc_pair(&other_pd, &r.cq, &r.cq, Access::NONE.remote_write(), QpCaps::default());
    let mw = r.pd.alloc_mw::<Type2>().unwrap();
    let old = mw.raw_rkey();
    let mw = scope(|s| {
        let e = s.post_send(&p.b, BindMw::new(mw, &r.target, 0, 4096, window::WRITE)).expect_err("QP of another PD");
        assert_invalid(
            &e.error,
            "ibv_post_send",
            "the request's memory (or window) belongs to another protection domain",
        );
        assert_eq!(p.b.outstanding(), (0, 0), "nothing was posted");
        e.wr.expect("refused before the provider: handed back").into_window()
    })
    .unwrap();
    assert_eq!(mw.raw_rkey(), old, "the rkey is unchanged");
    let mw1 = r.pd.alloc_mw::<Type1>().unwrap();
    scope(|s| {
        let e = s.bind_mw(&p.b, mw1, &r.target, 0, 64, window::READ).expect_err("type 1, QP of another PD");
        assert_invalid(&e.error, "ibv_bind_mw", "the window belongs to another protection domain");
        assert!(e.wr.is_some());
    })
    .unwrap();

    // The QP is still in RTS: traffic flows.
    let mut src = other_pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(9);
    let mut dst = other_pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    scope(|s| {
        let rt = s.post_recv(&p.a, wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
        let t = s.post_send(&p.b, wr::Send::new(src.slice(..).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        assert!(s.wait(rt, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    assert_eq!(dst.as_slice(), src.as_slice());
}

#[test]
fn deregistering_a_region_with_a_leaked_bound_window_fails_and_is_reported() {
    let r = window_rig();
    let target = r.pd.alloc_mr(4096, access::WINDOW_BINDABLE).unwrap();
    let mw = r.pd.alloc_mw::<Type1>().unwrap();
    scope(|s| {
        let t = s.bind_mw(&r.p.b, mw, &target, 0, 4096, window::WRITE).unwrap();
        let bound = s.wait(t, WAIT).unwrap().1.expect("bind");
        // Leaking the bound window ends its borrow of the region without unbinding it.
        std::mem::forget(bound);
    })
    .unwrap();
    let (err, target) = target.deregister().expect_err("ibv_dereg_mr fails while a window is bound");
    assert!(matches!(err, Error::Verb { verb: Verb::DeregMr, .. }), "{err:?}");
    // Dropping it again leaks the memory instead of freeing it under the device.
    drop(target);
}

/// Registers a region with `access` where the type rules allow it (autoref specialisation:
/// `Legal` applies exactly when `A: LegalAccess`, otherwise the call falls through to
/// `Illegal`). Gives the `IBV_ACCESS_*` bits the type carries and whether it registered.
struct Probe<A>(A);
trait Legal {
    fn register(&self, pd: &Pd) -> (u32, bool);
}
impl<A: typed_verbs::access::LegalAccess> Legal for Probe<A> {
    fn register(&self, pd: &Pd) -> (u32, bool) {
        let mr =
            pd.alloc_mr(64, self.0).unwrap_or_else(|e| panic!("{:#x} is legal but did not register: {e}", A::BITS));
        drop(mr);
        (A::BITS, true)
    }
}
trait Illegal {
    fn register(&self, pd: &Pd) -> (u32, bool);
}
impl<A: typed_verbs::access::AccessSet> Illegal for &Probe<A> {
    fn register(&self, _: &Pd) -> (u32, bool) {
        (A::BITS, false)
    }
}

/// Every one of the 32 combinations of the five flag builders is tried; which ones the types
/// accept is compared with ibv_reg_mr(3)'s rule, computed here from the raw bits ("if
/// IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then IBV_ACCESS_LOCAL_WRITE
/// must be set too"), and each accepted one must register on the device. The list is made by
/// the macro from the builders, not written out, so a legal set cannot be forgotten.
#[test]
fn every_legal_access_set_registers() {
    use typed_verbs_sys as sys;
    let r = window_rig();
    let mut results: Vec<(u32, u32, bool)> = Vec::new(); // (bits by name, bits by type, registered)
                                                         // Each flag builder applied or not: 2^5 combinations, with the bits their names promise.
    macro_rules! each {
        ($e:expr, $bits:expr; ) => {
            results.push({ let (by_type, ok) = (&Probe($e)).register(&r.pd); ($bits, by_type, ok) });
        };
        ($e:expr, $bits:expr; $m:ident $flag:ident $(, $rest_m:ident $rest_f:ident)*) => {
            each!($e, $bits; $($rest_m $rest_f),*);
            each!($e.$m(), $bits | sys::$flag; $($rest_m $rest_f),*);
        };
    }
    each!(Access::NONE, 0;
        local_write IBV_ACCESS_LOCAL_WRITE, remote_write IBV_ACCESS_REMOTE_WRITE,
        remote_read IBV_ACCESS_REMOTE_READ, remote_atomic IBV_ACCESS_REMOTE_ATOMIC, mw_bind IBV_ACCESS_MW_BIND);
    assert_eq!(results.len(), 32);
    let mut legal = 0;
    for &(bits, by_type, registered) in &results {
        assert_eq!(by_type, bits, "the builders' bits");
        let needs_local_write = bits & (sys::IBV_ACCESS_REMOTE_WRITE | sys::IBV_ACCESS_REMOTE_ATOMIC) != 0;
        let man_page_legal = !needs_local_write || bits & sys::IBV_ACCESS_LOCAL_WRITE != 0;
        assert_eq!(registered, man_page_legal, "access bits {bits:#x}: the types and ibv_reg_mr(3) disagree");
        legal += usize::from(registered);
    }
    // 16 sets with LOCAL_WRITE, and without it the 4 that have neither REMOTE_WRITE nor
    // REMOTE_ATOMIC.
    assert_eq!(legal, 20);
}

#[test]
fn bind_arguments_the_device_would_refuse_are_typed_errors_before_posting() {
    let r = window_rig();
    let other_pd = r.ctx.alloc_pd().unwrap();
    let foreign = other_pd.alloc_mr(4096, access::WINDOW_BINDABLE).unwrap();
    scope(|s| {
        // Range outside the region (type 2, BIND_MW work request).
        let mw = r.pd.alloc_mw::<Type2>().unwrap();
        let e = s.post_send(&r.p.b, BindMw::new(mw, &r.target, 8000, 4096, window::WRITE)).expect_err("outside");
        assert_invalid(&e.error, "ibv_post_send (BIND_MW)", "is outside the region of");
        // Zero-length bind of a type 2 window (o10-37.2.40): refused, not sent.
        let mw = e.wr.expect("refused before the provider").into_window();
        let e = s.post_send(&r.p.b, BindMw::new(mw, &r.target, 0, 0, window::WRITE)).expect_err("zero length");
        assert_invalid(&e.error, "ibv_post_send (BIND_MW)", "a window binding needs at least one byte");
        // Window and region of different protection domains: the region in another PD than
        // the window and the QP, or the window in another PD than the region and the QP.
        let pds = |e: &Error| matches!(e, Error::InvalidArgument { reason, .. } if reason.contains("different protection domains"));
        let mw = e.wr.expect("refused before the provider").into_window();
        let e = s.post_send(&r.p.b, BindMw::new(mw, &foreign, 0, 64, window::WRITE)).expect_err("other PD");
        assert!(pds(&e.error), "{:?}", e.error);
        let mw = other_pd.alloc_mw::<Type2>().unwrap();
        let e = s.post_send(&r.p.b, BindMw::new(mw, &r.target, 0, 64, window::WRITE)).expect_err("window of another PD");
        assert!(pds(&e.error), "{:?}", e.error);
        // Type 1 through ibv_bind_mw: the same checks.
        let mw1 = r.pd.alloc_mw::<Type1>().unwrap();
        let e = s.bind_mw(&r.p.b, mw1, &r.target, 0, 9000, window::READ).expect_err("outside");
        assert_invalid(&e.error, "ibv_bind_mw", "is outside the region of");
        let e = s
            .bind_mw(&r.p.b, e.wr.expect("refused before the provider"), &foreign, 0, 64, window::READ)
            .expect_err("other PD");
        assert!(pds(&e.error), "{:?}", e.error);
        let mw1 = other_pd.alloc_mw::<Type1>().unwrap();
        let e = s.bind_mw(&r.p.b, mw1, &r.target, 0, 64, window::READ).expect_err("window of another PD");
        assert!(pds(&e.error), "{:?}", e.error);
    })
    .unwrap();
    // Nothing reached the device: the QP is still usable.
    assert_eq!(r.p.b.outstanding(), (0, 0));
    let mw = r.pd.alloc_mw::<Type2>().unwrap();
    let bound = scope(|s| {
        let t = s.post_send(&r.p.b, BindMw::new(mw, &r.target, 0, 64, window::WRITE)).unwrap();
        s.wait(t, WAIT).unwrap().1.expect("a valid bind still works")
    })
    .unwrap();
    assert_eq!(write_status(&r, bound.remote(..).unwrap(), 64), WcStatus::Success);
}
