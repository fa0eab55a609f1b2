//! Objects that meet (DESIGN.md §5, "Objects that meet: same context, same PD") over the fake
//! device of `async_races`: every verb that combines two verbs objects refuses a pair of two
//! device contexts, or of two PDs, with a typed error before the (fake) provider is called.
//!
//! Two fake contexts are two `World`s (`World::with_device`: their own context number and
//! device tag); two PDs of one context are the world's PD and [`second_pd`]. The provider's
//! posts are `async_races`' recording `fake_send` / `fake_recv` (and the window verbs of
//! `mw_attack_tests`, which record a type 1 bind as a send): a refused request leaves its QP's
//! record empty. Where a same-PD control can run on the fake, it does, and reaches the
//! provider (or the step just before the provider's verb).
#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use typed_verbs_sys as sys;

use super::{fake_recv, fake_send, invalid, recvs, remote, sends, wc_of, FakeCq, World};
use crate::access::{self, window, LocalRw, WindowBindable};
use crate::ah::Ah;
use crate::caller::Registered;
use crate::cq::{Cq, CqShared};
use crate::device::{Context, DeviceAttr, IpCsum, TsoCap};
use crate::dmabuf::{DeviceBuf, DeviceBufMut};
use crate::mr::{Chunk, LocalBuf, LocalBufMut, Mr, Odp, OdpTag};
use crate::mw::{Type1, Type2};
use crate::odp::{ImplicitMr, OdpCaps, OdpOps};
use crate::owned::OwnedToken;
use crate::pd::{Pd, PdInner};
use crate::qp::{Qp, QpConfig, QpShared, QueueArc};
use crate::queue::RECV_BIT;
use crate::scope::{scope, PostError};
use crate::srq::{Srq, SrqShared};
use crate::transport::{Transport, RAW_PACKET, RC, RTS, UD};
use crate::wc::Completion;
use crate::wr::{
    BindMw, FetchAdd, InlineSend, InlineSendInv, LocalInv, PostedOn, Read, Recv, Send as WrSend, SendInv, SendRequest,
    Tso, Write,
};
use crate::Error;

const T: Duration = Duration::from_secs(5);

/// A fake device context numbered `id` of the device tagged `tag`, with room for queues.
fn device(id: u64, tag: u16) -> &'static World {
    World::with_device(id, tag, DeviceAttr::fake(id, true).with_fake_queue_limits())
}

/// A second PD of `w`'s context (leaked).
fn second_pd(w: &'static World) -> Arc<PdInner> {
    // SAFETY: all-zero is a valid `ibv_pd`; leaked.
    let rawpd: &'static mut sys::ibv_pd = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
    rawpd.context = w.ctxp;
    let pd = Arc::new(PdInner { pd: NonNull::from(rawpd), ctx: Arc::clone(&w.ctx) });
    std::mem::forget(Arc::clone(&pd));
    pd
}

/// A QP of `pd` (of `w`'s context) in RTS, whose posts `fake_send` / `fake_recv` record;
/// never destroyed.
fn qp_in<T: Transport>(
    w: &'static World,
    pd: &Arc<PdInner>,
    qp_num: u32,
    cq: &Arc<CqShared>,
) -> (Qp<T, RTS>, Arc<QpShared>) {
    let shared =
        QpShared::try_fake_with_posts(w.raw_qp(qp_num), qp_num, 16, cq, Arc::clone(pd), None, fake_send, fake_recv)
            .expect("fake QP");
    std::mem::forget(Arc::clone(&shared));
    (Qp::from_fake(Arc::clone(&shared)), shared)
}

/// The provider saw no request of `qp`, send or receive (a type 1 bind counts as a send).
#[track_caller]
fn untouched(qp: &QpShared) {
    assert!(
        sends(qp).is_empty() && recvs(qp).is_empty(),
        "the provider saw requests of QP {:#x}: {:?} {:?}",
        qp.qp_num(),
        sends(qp),
        recvs(qp)
    );
}

/// `r` is a refusal `InvalidArgument` of `verb` naming `what`, the request handed back.
#[track_caller]
fn refused<K, W>(r: std::result::Result<K, PostError<W>>, verb: &str, what: &str) -> W {
    match r {
        Ok(_) => panic!("accepted: expected InvalidArgument of {verb} ({what})"),
        Err(e) => {
            invalid(&e.error, verb, what);
            e.wr.expect("refused by a check: handed back")
        }
    }
}

/// A region of `len` bytes in `pd`, leaked (its views live for the test).
fn region<A: access::AccessSet>(w: &'static World, pd: &Arc<PdInner>, len: usize) -> &'static Mr<A> {
    Box::leak(Box::new(Mr::fake(pd, w.raw_mr(pd), len)))
}

/// An address handle of `pd`, leaked: never destroyed (its destroy would reach libibverbs).
fn ah_of(w: &'static World, pd: &Arc<PdInner>) -> &'static Ah {
    // SAFETY: all-zero is a valid `ibv_ah`; leaked.
    let raw: &'static mut sys::ibv_ah = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
    raw.context = w.ctxp;
    raw.pd = pd.pd.as_ptr();
    Box::leak(Box::new(Ah::fake(NonNull::from(raw), Arc::clone(pd))))
}

/// A device view of a dma-buf region of `pd` (iova `addr`).
fn dev_buf(pd: &Arc<PdInner>, addr: u64) -> DeviceBuf<'static> {
    DeviceBuf::fake(addr, 64, 0x79, pd.id())
}

fn dev_buf_mut(pd: &Arc<PdInner>, addr: u64) -> DeviceBufMut<'static> {
    DeviceBufMut::fake(addr, 64, 0x79, pd.id())
}

/// A writable view of 64 bytes of `pd`'s memory (the 8 first at an 8-byte boundary).
fn sink(pd: &Arc<PdInner>, odp: OdpTag) -> LocalBufMut<'static> {
    let mem: &'static mut [u64; 8] = Box::leak(Box::new([0u64; 8]));
    LocalBufMut::from_parts(mem.as_mut_ptr() as u64, 64, 0x77, odp, pd.id())
}

/// An atomic's result: 8 bytes of `pd`'s memory at an 8-byte boundary.
fn sink8(pd: &Arc<PdInner>, odp: OdpTag) -> LocalBufMut<'static> {
    let mem: &'static mut u64 = Box::leak(Box::new(0u64));
    LocalBufMut::from_parts(mem as *mut u64 as u64, 8, 0x77, odp, pd.id())
}

/// Every operation verified for RC, at page starts or not.
fn rc_odp() -> OdpTag {
    OdpTag::verified(sys::IBV_QPT_RC, OdpOps::all().bits(), false)
}

/// The kinds of memory a send names, each of `pd` (of `w`'s context): a view of a region
/// the library allocated, of caller memory moved in, of an ODP region, of the implicit ODP
/// region, of a dma-buf region, and an owned chunk.
struct Sources {
    mr: &'static Mr<LocalRw>,
    caller: &'static Registered<LocalRw, Vec<u8>>,
    odp: &'static Mr<LocalRw, Odp>,
    implicit: &'static ImplicitMr<LocalRw>,
    data: &'static [u8],
    pd: Arc<PdInner>,
}

impl Sources {
    fn of(w: &'static World, pd: &Arc<PdInner>) -> Sources {
        let caller = Registered::fake(pd, w.raw_mr(pd), vec![0u8; 256]).expect("fake registration");
        let odp = Mr::fake_odp(pd, w.raw_mr(pd), 4096, rc_odp());
        let implicit = ImplicitMr::fake(pd, w.raw_mr(pd), sys::IBV_QPT_RC, OdpOps::all());
        Sources {
            mr: region(w, pd, 4096),
            caller: Box::leak(Box::new(caller)),
            odp: Box::leak(Box::new(odp)),
            implicit: Box::leak(Box::new(implicit)),
            data: Box::leak(vec![0u8; 256].into_boxed_slice()),
            pd: Arc::clone(pd),
        }
    }

    /// One view of each kind but the chunk.
    fn views(&self) -> Vec<LocalBufView> {
        vec![
            LocalBufView::Host(self.mr.slice(0..64).unwrap()),
            LocalBufView::Host(self.caller.slice(0..64).unwrap()),
            LocalBufView::Host(self.odp.slice(0..64).unwrap()),
            LocalBufView::Host(self.implicit.buf(&self.data[..64]).unwrap()),
            LocalBufView::Device(dev_buf(&self.pd, 0x10_0000_0000)),
        ]
    }

    fn chunk(&self, w: &'static World) -> Chunk<LocalRw> {
        Mr::<LocalRw>::fake(&self.pd, w.raw_mr(&self.pd), 64).into_chunks(64).unwrap().pop().unwrap()
    }
}

/// A view of either kind (host memory, or a dma-buf region's device memory).
#[derive(Clone, Copy)]
enum LocalBufView {
    Host(LocalBuf<'static>),
    Device(DeviceBuf<'static>),
}

/// Posts a send of `$view` (an expression, evaluated anew for each request) on every send path:
/// a scope's `post_send` (SEND, SEND under a flag, RDMA WRITE, SEND_WITH_INV, a list of two
/// entries of the same memory), `post_send_list`, `post_send_owned`, and a send lane's
/// `prepare` and `prepare_list`; each refused as `$what`.
macro_rules! every_send_path {
    ($s:expr, $qp:expr, $lane:expr, $what:expr, $view:expr) => {{
        let what: &str = $what;
        refused($s.post_send($qp, WrSend::new($view)), "ibv_post_send", what);
        refused($s.post_send($qp, WrSend::new($view).solicited()), "ibv_post_send", what);
        refused($s.post_send($qp, Write::new($view, remote())), "ibv_post_send", what);
        refused($s.post_send($qp, SendInv::new($view, 0x4d00)), "ibv_post_send", what);
        refused($s.post_send($qp, WrSend::new([$view, $view])), "ibv_post_send", what);
        let e = $s.post_send_list($qp, [WrSend::new($view), WrSend::new($view)]).map(drop).expect_err("a list");
        invalid(&e.error, "ibv_post_send", what);
        assert_eq!((e.posted.len(), e.rejected.len()), (0, 2));
        refused($qp.post_send_owned(WrSend::new($view)), "ibv_post_send", what);
        refused($lane.prepare(WrSend::new($view)), "ibv_post_send", what);
        let e = $lane.prepare_list(vec![WrSend::new($view), WrSend::new($view)], 1).map(drop).expect_err("a list");
        invalid(&e.error, "ibv_post_send", what);
    }};
}

/// Memory of another PD of the QP's context, or of another context, is refused on every path
/// that posts a send, whatever kind of memory the view names (a region the library
/// allocated, caller memory, an ODP region, the implicit ODP region, a dma-buf region, an owned
/// chunk), and as an RDMA READ destination or an atomic's result; a list mixing memory of the
/// QP's PD with memory of another is refused as such. The provider sees none of them; the same
/// requests over the QP's own PD's memory build.
#[test]
fn send_memory_of_another_pd_or_context_is_refused_on_every_send_path_before_the_provider() {
    let (a, b) = (device(0x4d11, 0x4d11), device(0x4d12, 0x4d12));
    let (cq, _) = a.cq();
    let (qp, shared) = qp_in::<RC>(a, &a.pd, 0x4d10, &cq);
    let (mut lane_qp, lane_shared) = qp_in::<RC>(a, &a.pd, 0x4d11, &cq);
    let own = Sources::of(a, &a.pd);
    let foreign = [(Sources::of(a, &second_pd(a)), "another PD"), (Sources::of(b, &b.pd), "another context")];
    let other = "belongs to another protection domain than QP";
    let mixed = "different protection domains";
    scope(|s| {
        let lane = s.send_lane(&mut lane_qp).expect("lane");
        for (f, _) in &foreign {
            for v in f.views() {
                let mine = own.mr.slice(0..64).unwrap();
                match v {
                    LocalBufView::Host(x) => {
                        every_send_path!(s, &qp, lane, other, x);
                        refused(s.post_send(&qp, WrSend::new((mine, x))), "ibv_post_send", mixed);
                        refused(s.post_send(&qp, WrSend::new([x, mine])), "ibv_post_send", mixed);
                        refused(qp.post_send_owned(WrSend::new((x, mine))), "ibv_post_send", mixed);
                        refused(lane.prepare(WrSend::new((mine, x))), "ibv_post_send", mixed);
                    }
                    LocalBufView::Device(x) => {
                        every_send_path!(s, &qp, lane, other, x);
                        refused(s.post_send(&qp, WrSend::new((mine, x))), "ibv_post_send", mixed);
                        refused(lane.prepare(WrSend::new((x, mine))), "ibv_post_send", mixed);
                    }
                }
            }
        }
        let _ = lane;
    })
    .expect("scope");
    // Owned chunks, RDMA READ destinations and atomic results.
    scope(|s| {
        for (f, _) in &foreign {
            let w = if Arc::ptr_eq(&f.pd.ctx, &a.ctx) { a } else { b };
            refused(s.post_send(&qp, WrSend::new(f.chunk(w))), "ibv_post_send", other);
            refused(qp.post_send_owned(WrSend::new(f.chunk(w))), "ibv_post_send", other);
            refused(qp.post_send_owned(WrSend::new((own.chunk(a), f.chunk(w)))), "ibv_post_send", mixed);
            refused(s.post_send(&qp, Read::new(sink(&f.pd, OdpTag::NONE), remote())), "ibv_post_send", other);
            refused(s.post_send(&qp, Read::new(dev_buf_mut(&f.pd, 0x20_0000_0000), remote())), "ibv_post_send", other);
            refused(
                s.post_send(&qp, Read::new((sink(&a.pd, OdpTag::NONE), sink(&f.pd, rc_odp())), remote())),
                "ibv_post_send",
                mixed,
            );
            refused(s.post_send(&qp, FetchAdd::new(sink8(&f.pd, OdpTag::NONE), remote(), 1)), "ibv_post_send", other);
            refused(qp.post_send_owned(FetchAdd::new(sink8(&f.pd, rc_odp()), remote(), 1)), "ibv_post_send", other);
        }
    })
    .expect("scope");
    untouched(&shared);
    untouched(&lane_shared);
    // The same requests over the QP's own PD's memory pass every check.
    for v in own.views() {
        match v {
            LocalBufView::Host(x) => {
                assert!(crate::scope::build_checked::<RC, _>(&shared, &WrSend::new([x, x])).is_ok());
            }
            LocalBufView::Device(x) => {
                assert!(crate::scope::build_checked::<RC, _>(&shared, &Write::new(x, remote())).is_ok());
            }
        }
    }
    let read = Read::new((sink(&a.pd, OdpTag::NONE), sink(&a.pd, rc_odp())), remote());
    assert!(crate::scope::build_checked::<RC, _>(&shared, &read).is_ok());
    assert!(crate::scope::build_checked::<RC, _>(&shared, &WrSend::new(own.chunk(a))).is_ok());
}

/// A receive into memory of another PD or context is refused on every path that posts one:
/// a scope's `post_recv` and `post_recv_lane`, `post_recv_owned`, a receive lane's and an
/// ordered receive lane's `prepare`; a scatter list mixing the QP's PD's memory with another
/// PD's as such. The provider sees none of them; the QP's own memory builds.
#[test]
fn receive_memory_of_another_pd_or_context_is_refused_on_every_receive_path_before_the_provider() {
    let (a, b) = (device(0x4d21, 0x4d21), device(0x4d22, 0x4d22));
    let (cq, _) = a.cq();
    let (qp, shared) = qp_in::<RC>(a, &a.pd, 0x4d20, &cq);
    let (mut send_lane_qp, send_lane_shared) = qp_in::<RC>(a, &a.pd, 0x4d21, &cq);
    let (mut recv_lane_qp, recv_lane_shared) = qp_in::<RC>(a, &a.pd, 0x4d22, &cq);
    let foreign = [second_pd(a), Arc::clone(&b.pd)];
    let msg = |n: u32| format!("belongs to another protection domain than QP {n:#x}");
    let mixed = "different protection domains";
    scope(|s| {
        let send_lane = s.send_lane(&mut send_lane_qp).expect("send lane");
        let recv_lane = s.recv_lane(&mut recv_lane_qp).expect("receive lane");
        for pd in &foreign {
            let chunk = || {
                let w = if Arc::ptr_eq(&pd.ctx, &a.ctx) { a } else { b };
                Mr::<LocalRw>::fake(pd, w.raw_mr(pd), 64).into_chunks(64).unwrap().pop().unwrap()
            };
            for odp in [OdpTag::NONE, rc_odp()] {
                refused(s.post_recv(&qp, Recv::new(sink(pd, odp))), "ibv_post_recv", &msg(0x4d20));
                refused(qp.post_recv_owned(Recv::new(sink(pd, odp))), "ibv_post_recv", &msg(0x4d20));
                refused(s.post_recv_lane(&send_lane, Recv::new(sink(pd, odp))), "ibv_post_recv", &msg(0x4d21));
                refused(recv_lane.prepare(Recv::new(sink(pd, odp))), "ibv_post_recv", &msg(0x4d22));
            }
            refused(s.post_recv(&qp, Recv::new(dev_buf_mut(pd, 0x20_0000_0000))), "ibv_post_recv", &msg(0x4d20));
            refused(s.post_recv(&qp, Recv::new(chunk())), "ibv_post_recv", &msg(0x4d20));
            refused(qp.post_recv_owned(Recv::new(chunk())), "ibv_post_recv", &msg(0x4d20));
            refused(
                s.post_recv(&qp, Recv::new([sink(pd, OdpTag::NONE), sink(pd, OdpTag::NONE)])),
                "ibv_post_recv",
                &msg(0x4d20),
            );
            refused(
                s.post_recv(&qp, Recv::new((sink(&a.pd, OdpTag::NONE), sink(pd, OdpTag::NONE)))),
                "ibv_post_recv",
                mixed,
            );
            refused(
                qp.post_recv_owned(Recv::new((dev_buf_mut(pd, 0x30_0000_0000), sink(&a.pd, OdpTag::NONE)))),
                "ibv_post_recv",
                mixed,
            );
            refused(
                recv_lane.prepare(Recv::new((sink(&a.pd, OdpTag::NONE), sink(pd, rc_odp())))),
                "ibv_post_recv",
                mixed,
            );
        }
        let ordered = recv_lane.ordered();
        for pd in &foreign {
            refused(ordered.prepare(Recv::new(sink(pd, OdpTag::NONE))), "ibv_post_recv", &msg(0x4d22));
        }
        let _ = send_lane;
    })
    .expect("scope");
    for q in [&shared, &send_lane_shared, &recv_lane_shared] {
        untouched(q);
    }
    let own = (sink(&a.pd, OdpTag::NONE), sink(&a.pd, rc_odp()));
    assert!(shared.recv_sges::<RC, _>(&own).is_ok(), "the QP's own memory passes the checks");
}

/// An SRQ receive into memory of another PD or context than the SRQ's (chunks, views of host
/// memory, ODP or dma-buf memory, a list mixing the SRQ's PD's memory with another's) is
/// refused before the provider sees it; the SRQ's own memory is posted.
#[test]
fn srq_receives_into_memory_of_another_pd_or_context_are_refused_before_the_provider() {
    let (a, b) = (device(0x4d31, 0x4d31), device(0x4d32, 0x4d32));
    a.record_srq_posts();
    let srq = Srq { shared: a.srq(8) };
    let other = "belongs to another protection domain than the shared receive queue";
    for (w, pd) in [(a, second_pd(a)), (b, Arc::clone(&b.pd))] {
        let chunk = || Mr::<LocalRw>::fake(&pd, w.raw_mr(&pd), 64).into_chunks(64).unwrap().pop().unwrap();
        refused(srq.post_recv_owned(Recv::new(chunk())), "ibv_post_srq_recv", other);
        refused(srq.post_recv_owned(Recv::new(sink(&pd, OdpTag::NONE))), "ibv_post_srq_recv", other);
        refused(srq.post_recv_owned(Recv::new(dev_buf_mut(&pd, 0x20_0000_0000))), "ibv_post_srq_recv", other);
        refused(srq.post_recv_owned(Recv::new([chunk(), chunk()])), "ibv_post_srq_recv", other);
        let mixed = (sink(&a.pd, OdpTag::NONE), chunk());
        refused(srq.post_recv_owned(Recv::new(mixed)), "ibv_post_srq_recv", "different protection domains");
    }
    assert_eq!(super::srq_posts(&srq.shared).len(), 0, "the provider saw none of them");
    let own = Mr::<LocalRw>::fake(&a.pd, a.raw_mr(&a.pd), 64).into_chunks(64).unwrap().pop().unwrap();
    let token = srq.post_recv_owned(Recv::new(own)).map_err(|e| e.error).expect("the SRQ's own memory");
    assert_eq!(super::srq_posts(&srq.shared).len(), 1, "posted");
    drop(token);
}

/// A UD send naming an address handle of another PD of the QP's context, or of another
/// context, is refused on every send path (scope post, inline, list, owned, lane prepare and
/// prepared list), bare or under a flag; the provider sees none of them, and the same
/// requests with the QP's own PD's handle build.
#[test]
fn ud_sends_to_an_address_handle_of_another_pd_or_context_are_refused_before_the_provider() {
    let (a, b) = (device(0x4d41, 0x4d41), device(0x4d42, 0x4d42));
    let (cq, _) = a.cq();
    let (qp, shared) = qp_in::<UD>(a, &a.pd, 0x4d40, &cq);
    let (mut lane_qp, lane_shared) = qp_in::<UD>(a, &a.pd, 0x4d41, &cq);
    let mr: &'static Mr<LocalRw> = region(a, &a.pd, 4096);
    let view = || mr.slice(0..64).unwrap();
    let foreign = [ah_of(a, &second_pd(a)), ah_of(b, &b.pd)];
    let what = |n: u32| format!("the address handle belongs to another protection domain than QP {n:#x}");
    scope(|s| {
        let lane = s.send_lane(&mut lane_qp).expect("lane");
        for ah in foreign {
            let w = &what(0x4d40);
            refused(s.post_send(&qp, WrSend::new(view()).to(ah, 0x11, 0x1111)), "ibv_post_send", w);
            refused(s.post_send(&qp, WrSend::new(view()).solicited().to(ah, 0x11, 0x1111)), "ibv_post_send", w);
            refused(s.post_inline(&qp, InlineSend::new(b"x").to(ah, 0x11, 0x1111)), "ibv_post_send", w);
            let e = s
                .post_send_list(
                    &qp,
                    [WrSend::new(view()).to(ah, 0x11, 0x1111), WrSend::new(view()).to(ah, 0x11, 0x1111)],
                )
                .map(drop)
                .expect_err("a list");
            invalid(&e.error, "ibv_post_send", w);
            refused(qp.post_send_owned(WrSend::new(view()).to(ah, 0x11, 0x1111)), "ibv_post_send", w);
            let w = &what(0x4d41);
            refused(lane.prepare(WrSend::new(view()).to(ah, 0x11, 0x1111)), "ibv_post_send", w);
            let e = lane.prepare_list(vec![WrSend::new(view()).to(ah, 0x11, 0x1111)], 1).map(drop).expect_err("a list");
            invalid(&e.error, "ibv_post_send", w);
        }
        let _ = lane;
    })
    .expect("scope");
    untouched(&shared);
    untouched(&lane_shared);
    let mine = ah_of(a, &a.pd);
    assert!(crate::scope::build_checked::<UD, _>(&shared, &WrSend::new(view()).to(mine, 0x11, 0x1111)).is_ok());
}

/// The `wr_id` of the last request the provider took from `qp`.
fn last_wr(qp: &QpShared) -> u64 {
    sends(qp).last().expect("a request taken").0
}

/// The device completes `qp`'s last request with `opcode`.
fn complete_last(fake: &FakeCq, qp: &QpShared, opcode: u32) {
    fake.complete(wc_of(qp.qp_num(), last_wr(qp), sys::IBV_WC_SUCCESS, opcode));
}

/// Type 1 windows (`ibv_bind_mw`: `Scope::bind_mw`, `bind_mw_fenced`, `rebind_mw`,
/// `unbind_mw`): a window and a region of two PDs, or a window (and its region) of another PD
/// or context than the QP's, are refused before the provider's `bind_mw`, the window handed
/// back; a bound window stays bound after each refusal, and is unbound on its own QP.
#[test]
fn type1_binds_of_a_window_region_or_qp_of_another_pd_or_context_are_refused_before_the_provider() {
    let (a, b) = (device(0x4d51, 0x4d51), device(0x4d52, 0x4d52));
    let pd2 = second_pd(a);
    let (cq, fake) = a.cq();
    let (home, home_shared) = qp_in::<RC>(a, &a.pd, 0x4d50, &cq);
    let (victim, victim_shared) = qp_in::<RC>(a, &a.pd, 0x4d51, &cq);
    let (qp2, qp2_shared) = qp_in::<RC>(a, &pd2, 0x4d52, &cq);
    let mr_a: &'static Mr<WindowBindable> = region(a, &a.pd, 4096);
    let mr_2: &'static Mr<WindowBindable> = region(a, &pd2, 4096);
    let mr_b: &'static Mr<WindowBindable> = region(b, &b.pd, 4096);
    let (pd_a, pd_2, pd_b) =
        (Pd { inner: Arc::clone(&a.pd) }, Pd { inner: Arc::clone(&pd2) }, Pd { inner: Arc::clone(&b.pd) });
    let split = "the window and the region belong to different protection domains";
    let foreign = "the window belongs to another protection domain than QP 0x4d51";
    scope(|s| {
        let mw = pd_2.alloc_mw::<Type1>().expect("window");
        let mw = refused(s.bind_mw(&victim, mw, mr_a, 0, 64, window::WRITE), "ibv_bind_mw", split);
        let mw = refused(s.bind_mw(&victim, mw, mr_2, 0, 64, window::WRITE), "ibv_bind_mw", foreign);
        let _ = refused(s.bind_mw_fenced(&victim, mw, mr_2, 0, 64, window::READ), "ibv_bind_mw", foreign);
        let mw = pd_b.alloc_mw::<Type1>().expect("window");
        let mw = refused(s.bind_mw(&victim, mw, mr_b, 0, 64, window::WRITE), "ibv_bind_mw", foreign);
        let _ = refused(s.bind_mw(&victim, mw, mr_a, 0, 64, window::WRITE), "ibv_bind_mw", split);
        let mw = pd_a.alloc_mw::<Type1>().expect("window");
        let mw = refused(s.bind_mw(&victim, mw, mr_2, 0, 64, window::WRITE), "ibv_bind_mw", split);
        let mw = refused(s.bind_mw(&victim, mw, mr_b, 0, 64, window::WRITE), "ibv_bind_mw", split);
        // Bound on its own PD's QP: rebinding it to another PD's region, or through a QP of
        // another PD, and unbinding it through one, are refused; it stays bound.
        let t = s.bind_mw(&home, mw, mr_a, 0, 64, window::WRITE).map_err(|e| e.error).expect("bound");
        complete_last(fake, &home_shared, sys::IBV_WC_BIND_MW);
        let bound = s.wait(t, T).map_err(|e| e.error).expect("done").1.map_err(drop).expect("bound");
        let rkey = bound.rkey();
        let bound = refused(s.rebind_mw(&home, bound, mr_2, 0, 64, window::WRITE), "ibv_bind_mw", split);
        let bound = refused(s.rebind_mw(&home, bound, mr_b, 64, 64, window::READ), "ibv_bind_mw", split);
        let bound = refused(s.rebind_mw(&qp2, bound, mr_a, 0, 64, window::WRITE), "ibv_bind_mw", "than QP 0x4d52");
        let bound = refused(s.unbind_mw(&qp2, bound), "ibv_bind_mw", "than QP 0x4d52");
        assert_eq!(bound.rkey(), rkey, "still bound, under the same rkey");
        let t = s.unbind_mw(&home, bound).map_err(|e| e.error).expect("unbind posted");
        complete_last(fake, &home_shared, sys::IBV_WC_BIND_MW);
        let _unbound = s.wait(t, T).map_err(|e| e.error).expect("done").1.map_err(drop).expect("unbound");
    })
    .expect("scope");
    untouched(&victim_shared);
    untouched(&qp2_shared);
    assert_eq!(sends(&home_shared).len(), 2, "the bind and the unbind on the window's own QP");
}

/// Binds the type 2 window `mw` over `mr` through `qp` (posting through `fake_send`), the
/// device completing the bind: the bound window.
macro_rules! bound_type2 {
    ($s:expr, $qp:expr, $shared:expr, $fake:expr, $mw:expr, $mr:expr) => {{
        let t = $s.post_send($qp, BindMw::new($mw, $mr, 0, 64, window::WRITE)).map_err(|e| e.error).expect("bind");
        complete_last($fake, $shared, sys::IBV_WC_BIND_MW);
        $s.wait(t, T).map_err(|e| e.error).expect("done").1.map_err(drop).expect("bound")
    }};
}

/// Type 2 windows (`IBV_WR_BIND_MW` through `BindMw`, `IBV_WR_LOCAL_INV` through `LocalInv`): a
/// window and a region of two PDs, a window and region of another PD or context than the QP's,
/// and the invalidation of a window of another PD or context, are refused on every path
/// before the provider, the request handed back; a window whose invalidation was refused is
/// invalidated through its own QP afterwards (the refusal claimed nothing).
#[test]
fn type2_binds_and_local_invalidations_of_another_pd_or_context_are_refused_before_the_provider() {
    let (a, b) = (device(0x4d61, 0x4d61), device(0x4d62, 0x4d62));
    let pd2 = second_pd(a);
    let (cq, fake) = a.cq();
    let (cq_b, fake_b) = b.cq();
    let (victim, victim_shared) = qp_in::<RC>(a, &a.pd, 0x4d60, &cq);
    let (qp2, qp2_shared) = qp_in::<RC>(a, &pd2, 0x4d61, &cq);
    let (qpb, qpb_shared) = qp_in::<RC>(b, &b.pd, 0x4d62, &cq_b);
    let mr_a: &'static Mr<WindowBindable> = region(a, &a.pd, 4096);
    let mr_2: &'static Mr<WindowBindable> = region(a, &pd2, 4096);
    let mr_b: &'static Mr<WindowBindable> = region(b, &b.pd, 4096);
    let (pd_2, pd_b) = (Pd { inner: Arc::clone(&pd2) }, Pd { inner: Arc::clone(&b.pd) });
    let split = "the window and the region belong to different protection domains";
    let foreign = "belongs to another protection domain than QP 0x4d60";
    scope(|s| {
        let mw = pd_2.alloc_mw::<Type2>().expect("window");
        let wr = refused(
            s.post_send(&victim, BindMw::new(mw, mr_a, 0, 64, window::WRITE)),
            "ibv_post_send (BIND_MW)",
            split,
        );
        let wr = refused(
            s.post_send(&victim, BindMw::new(wr.into_window(), mr_2, 0, 64, window::WRITE)),
            "ibv_post_send",
            foreign,
        );
        let e = s
            .post_send_list(&victim, [BindMw::new(wr.into_window(), mr_2, 0, 64, window::READ)])
            .map(drop)
            .expect_err("list");
        invalid(&e.error, "ibv_post_send", foreign);
        let mw = e.rejected.into_iter().next().expect("handed back").into_window();
        let wr = refused(victim.post_send_owned(BindMw::new(mw, mr_2, 0, 64, window::WRITE)), "ibv_post_send", foreign);
        let mw_b = pd_b.alloc_mw::<Type2>().expect("window");
        let wr_b =
            refused(s.post_send(&victim, BindMw::new(mw_b, mr_b, 0, 64, window::WRITE)), "ibv_post_send", foreign);
        // Bound through their own QPs, LOCAL_INV through the victim is refused.
        let bound_2 = bound_type2!(s, &qp2, &qp2_shared, fake, wr.into_window(), mr_2);
        let bound_b = bound_type2!(s, &qpb, &qpb_shared, fake_b, wr_b.into_window(), mr_b);
        let bound_2 = refused(s.post_send(&victim, LocalInv::new(bound_2)), "ibv_post_send", foreign).into_bound();
        let e = s.post_send_list(&victim, [LocalInv::new(bound_b)]).map(drop).expect_err("list");
        invalid(&e.error, "ibv_post_send", foreign);
        let bound_b = e.rejected.into_iter().next().expect("handed back").into_bound();
        let bound_b =
            refused(s.post_send(&qp2, LocalInv::new(bound_b)), "ibv_post_send", "than QP 0x4d61").into_bound();
        // Each is invalidated through its own QP.
        for (qp, shared, fake, bound) in [(&qp2, &qp2_shared, fake, bound_2), (&qpb, &qpb_shared, fake_b, bound_b)] {
            let t = s.post_send(qp, LocalInv::new(bound)).map_err(|e| e.error).expect("LOCAL_INV on the window's QP");
            complete_last(fake, shared, sys::IBV_WC_LOCAL_INV);
            let _unbound = s.wait(t, T).map_err(|e| e.error).expect("done").1.map_err(drop).expect("invalidated");
        }
    })
    .expect("scope");
    untouched(&victim_shared);
    assert_eq!(sends(&qp2_shared).len(), 2, "a bind and an invalidation");
    assert_eq!(sends(&qpb_shared).len(), 2, "a bind and an invalidation");
}

/// A receive completion of `qp` (a receive the book holds) polled from `cq`, in which a peer's
/// SEND_WITH_INV invalidated `rkey`.
fn invalidating_completion(fake: &FakeCq, cq: &CqShared, qp: &Arc<QpShared>, rkey: u32) -> Completion {
    let seq = qp.rq.lock().push(true);
    let token = OwnedToken::new(QueueArc::Recv(Arc::clone(qp)), seq, (), None);
    let mut wc = wc_of(qp.qp_num(), seq | RECV_BIT, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV);
    wc.wc_flags = sys::IBV_WC_WITH_INV;
    wc.__bindgen_anon_1.invalidated_rkey = rkey;
    fake.complete(wc);
    cq.poll_and_route().expect("poll");
    token.try_complete().map_err(drop).expect("the receive completed").0
}

/// Completions and rkeys are a device's: a SEND_WITH_INV to a peer on the QP's device naming
/// the rkey of a window bound on another device, a window taken back unbound by an
/// invalidating completion polled on another device, and an address handle made from a
/// completion of another device, are refused (the first before the provider); another context
/// of the window's own device shares its rkeys, and is let through.
#[test]
fn rkeys_and_completions_of_another_device_are_refused() {
    let (a, b) = (device(0x4d71, 0x4d71), device(0x4d72, 0x4d72));
    // Another context of b's device.
    let b2 = device(0x4d73, 0x4d72);
    let (cq_a, fake_a) = a.cq();
    let (cq_b, fake_b) = b.cq();
    let (cq_b2, _) = b2.cq();
    let (victim, victim_shared) = qp_in::<RC>(a, &a.pd, 0x4d70, &cq_a);
    let (qpb, qpb_shared) = qp_in::<RC>(b, &b.pd, 0x4d71, &cq_b);
    let (_qpb2, qpb2_shared) = qp_in::<RC>(b2, &b2.pd, 0x4d72, &cq_b2);
    let recv_a = a.qp(0x4d73, 8, &cq_a, None);
    let recv_b = b.qp(0x4d74, 8, &cq_b, None);
    victim_shared.set_peer_on_device_for_test(true);
    qpb2_shared.set_peer_on_device_for_test(true);
    let mr_b: &'static Mr<WindowBindable> = region(b, &b.pd, 4096);
    let pd_b = Pd { inner: Arc::clone(&b.pd) };
    scope(|s| {
        let bound = bound_type2!(s, &qpb, &qpb_shared, fake_b, pd_b.alloc_mw::<Type2>().expect("window"), mr_b);
        let rkey = bound.rkey();
        let msg = "must be the live binding of a window";
        refused(s.post_send(&victim, InlineSendInv::new(b"x", rkey)), "ibv_post_send (SEND_WITH_INV)", msg);
        let mr_a: &'static Mr<LocalRw> = region(a, &a.pd, 64);
        refused(
            s.post_send(&victim, SendInv::new(mr_a.slice(..).unwrap(), rkey)),
            "ibv_post_send (SEND_WITH_INV)",
            msg,
        );
        untouched(&victim_shared);
        // Another context of the window's device takes its rkey.
        let wr = InlineSendInv::new(b"x", rkey);
        assert!(crate::scope::build_checked::<RC, _>(&qpb2_shared, &wr).is_ok(), "the device's rkey");
        wr.not_posted(PostedOn(&qpb2_shared));
        // An invalidation of the rkey polled from a CQ of another device is not this window's.
        let other = invalidating_completion(fake_a, &cq_a, &recv_a, rkey);
        let bound = bound.invalidated_by(&other).map(drop).expect_err("another device's completion");
        // The address handle of a completion of another device (one of its own device passes
        // that check, and stops at the next: the fake device has no port).
        let pd_a = Pd { inner: Arc::clone(&a.pd) };
        let e = pd_a.create_ah_from_wc(1, &other, &[0; 40]).map(drop).expect_err("the fake has no port 1");
        invalid(&e, "ibv_create_ah", "port 1 does not exist");
        let from_b = invalidating_completion(fake_b, &cq_b, &recv_b, 0x4d00);
        let e = pd_a.create_ah_from_wc(1, &from_b, &[0; 40]).map(drop).expect_err("a completion of b");
        invalid(&e, "ibv_create_ah_from_wc", "another device than the PD's");
        // Its own device's invalidation unbinds it.
        let mine = invalidating_completion(fake_b, &cq_b, &recv_b, rkey);
        let _unbound = bound.invalidated_by(&mine).map_err(drop).expect("its device's completion");
    })
    .expect("scope");
}

/// Lanes: a request prepared on one QP's lane (one request, a list, a receive), posted on
/// another QP's lane, and a lane token waited for on another lane, are refused before the
/// provider; a window's advertisement on another QP than the bind's is refused likewise.
#[test]
fn lane_requests_tokens_and_advertisements_of_another_qp_are_refused_before_the_provider() {
    let a = device(0x4d81, 0x4d81);
    let (cq, fake) = a.cq();
    let (mut qa, sa) = qp_in::<RC>(a, &a.pd, 0x4d80, &cq);
    let (mut qb, sb) = qp_in::<RC>(a, &a.pd, 0x4d81, &cq);
    let (mut qc, sc) = qp_in::<RC>(a, &a.pd, 0x4d82, &cq);
    let (mut qd, sd) = qp_in::<RC>(a, &a.pd, 0x4d83, &cq);
    let (qe, se) = qp_in::<RC>(a, &a.pd, 0x4d84, &cq);
    let (qf, sf) = qp_in::<RC>(a, &a.pd, 0x4d85, &cq);
    let mr: &'static Mr<WindowBindable> = region(a, &a.pd, 4096);
    let view = || mr.slice(0..64).unwrap();
    let pd = Pd { inner: Arc::clone(&a.pd) };
    scope(|s| {
        let mut la = s.send_lane(&mut qa).expect("lane");
        let mut lb = s.send_lane(&mut qb).expect("lane");
        let mut p = lb.prepare(WrSend::new(view())).map_err(|e| e.error).expect("prepared");
        invalid(&la.post(&mut p).map(drop).expect_err("another lane's"), "send lane", "another lane");
        invalid(&la.post_unsignaled(&mut p).expect_err("another lane's"), "send lane", "another lane");
        let mut list =
            lb.prepare_list(vec![WrSend::new(view()), WrSend::new(view())], 1).map_err(|e| e.error).expect("list");
        invalid(&la.post_list(&mut list).map(drop).expect_err("another lane's"), "send lane", "another lane");
        untouched(&sa);
        untouched(&sb);
        // A token of lane b waited for on lane a.
        let token = lb.post(&mut p).expect("posted on its own lane");
        let e = la.wait(token, T).map(drop).expect_err("another lane's token");
        invalid(&e.error, "send lane", "another lane");
        complete_last(fake, &sb, sys::IBV_WC_SEND);
        lb.wait(e.token, T).expect("its own lane");
        // Receive lanes.
        let mut rc = s.recv_lane(&mut qc).expect("receive lane");
        let rd = s.recv_lane(&mut qd).expect("receive lane");
        let mut r = rd
            .prepare(Recv::new(LocalBufMut::from_parts(0x1000, 64, 7, OdpTag::NONE, a.pd.id())))
            .map_err(|e| e.error)
            .expect("prepared");
        invalid(&rc.post(&mut r).map(drop).expect_err("another lane's"), "receive lane", "another lane");
        let mut ordered = rc.ordered();
        invalid(&ordered.post(&mut r).expect_err("another lane's"), "receive lane", "another lane");
        untouched(&sc);
        untouched(&sd);
        // A bind on QP e advertised on QP f.
        let t = s.post_send(&qe, BindMw::new(pd.alloc_mw::<Type2>().expect("window"), mr, 0, 64, window::WRITE));
        let t = t.map_err(|e| e.error).expect("bind");
        invalid(
            &s.advertise_window(&qf, &t).map(drop).expect_err("another QP"),
            "ibv_post_send",
            "only on the QP that posted the bind",
        );
        complete_last(fake, &se, sys::IBV_WC_BIND_MW);
        let _bound = s.wait(t, T).map_err(|e| e.error).expect("done").1.map_err(drop).expect("bound");
        let _ = (la, ordered);
    })
    .expect("scope");
    untouched(&sf);
}

/// A completion channel of another context, at CQ creation.
#[test]
fn a_completion_channel_of_another_context_is_refused_at_cq_creation() {
    let (a, b) = (device(0x4d91, 0x4d91), device(0x4d92, 0x4d92));
    let ctx = Context { inner: Arc::clone(&a.ctx) };
    let e = ctx.create_cq_with_channel(16, &b.ch).map(drop).expect_err("b's channel");
    invalid(&e, "ibv_create_cq", "the completion channel belongs to another context");
}

/// QP creation: a send or receive CQ of another context, and an SRQ of another PD or
/// context, are refused before `ibv_create_qp`; the same configuration of the PD's own
/// objects passes every check and stops only where the fake lacks the provider's posts, the
/// last step before `ibv_create_qp`.
#[test]
fn qp_creation_refuses_cqs_of_another_context_and_an_srq_of_another_pd_or_context() {
    let (a, b) = (device(0x4da1, 0x4da1), device(0x4da2, 0x4da2));
    let pd = Pd { inner: Arc::clone(&a.pd) };
    let (cq_a, cq_b) = (Cq { inner: a.cq().0 }, Cq { inner: b.cq().0 });
    // SAFETY: all-zero is a valid `ibv_srq`; leaked.
    let raw: &'static mut sys::ibv_srq = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
    raw.context = a.ctxp;
    let srq_2 = Srq { shared: SrqShared::fake(NonNull::from(raw), 8, second_pd(a)) };
    std::mem::forget(Arc::clone(&srq_2.shared));
    let (srq_a, srq_b) = (Srq { shared: a.srq(8) }, Srq { shared: b.srq(8) });
    let create = |send: &Cq, recv: &Cq, srq: Option<&Srq>| {
        let mut config = QpConfig::new(send);
        config.recv_cq = recv;
        config.srq = srq;
        (pd.create_qp::<RC>(&config).map(drop).err(), pd.create_qp::<UD>(&config).map(drop).err())
    };
    let both = |(rc, ud): (Option<Error>, Option<Error>), what: &str| {
        invalid(&rc.expect("refused"), "ibv_create_qp", what);
        invalid(&ud.expect("refused"), "ibv_create_qp", what);
    };
    both(create(&cq_b, &cq_a, None), "send_cq belongs to another device context");
    both(create(&cq_a, &cq_b, None), "recv_cq belongs to another device context");
    both(create(&cq_b, &cq_b, Some(&srq_a)), "send_cq belongs to another device context");
    both(create(&cq_a, &cq_a, Some(&srq_2)), "the shared receive queue belongs to another protection domain");
    both(create(&cq_a, &cq_a, Some(&srq_b)), "the shared receive queue belongs to another protection domain");
    for srq in [None, Some(&srq_a)] {
        let (rc, ud) = create(&cq_a, &cq_a, srq);
        for e in [rc, ud] {
            match e {
                Some(Error::Unsupported { what, .. }) => assert!(what.contains("post_send or post_recv"), "{what}"),
                other => panic!("expected the fake's missing posts, after every check: {other:?}"),
            }
        }
    }
}

/// Device capabilities: a checksum offload or TSO capability reported by another context is
/// refused on the send paths before the provider; an ODP capability of another context is
/// refused at registration (explicit and implicit ODP) before `ibv_reg_mr`.
#[test]
fn capabilities_of_another_context_are_refused_before_the_provider() {
    let (a, b) = (device(0x4db1, 0x4db1), device(0x4db2, 0x4db2));
    let (cq, _) = a.cq();
    let (qp, shared) = qp_in::<RAW_PACKET>(a, &a.pd, 0x4db0, &cq);
    let mr: &'static Mr<LocalRw> = region(a, &a.pd, 4096);
    let view = || mr.slice(0..64).unwrap();
    let header = [0u8; 54];
    let what = "was reported by another device context than QP 0x4db0's";
    scope(|s| {
        let other = || IpCsum::<RAW_PACKET>::of_context(0x4db2);
        refused(s.post_send(&qp, WrSend::new(view()).ip_csum(other())), "ibv_post_send", what);
        refused(s.post_inline(&qp, InlineSend::new(b"x").ip_csum(other())), "ibv_post_send", what);
        refused(qp.post_send_owned(WrSend::new(view()).solicited().ip_csum(other())), "ibv_post_send", what);
        let tso = TsoCap::<RAW_PACKET>::reported(1 << 16, 0x4db2);
        refused(s.post_send(&qp, Tso::new(view(), &header, 1000, tso)), "ibv_post_send", what);
    })
    .expect("scope");
    untouched(&shared);
    let mine = Tso::new(view(), &header, 1000, TsoCap::<RAW_PACKET>::reported(1 << 16, 0x4db1));
    assert!(crate::scope::build_checked::<RAW_PACKET, _>(&shared, &mine).is_ok());

    let pd = Pd { inner: Arc::clone(&a.pd) };
    let caps_b = OdpCaps::fake(b.ctx.id, OdpOps::all().bits());
    let cap = caps_b.check::<RC>(OdpOps::SEND | OdpOps::RECV).expect("b's capability");
    let e = pd.alloc_mr_odp(4096, access::LOCAL_RW, &cap).map(drop).expect_err("b's capability");
    invalid(&e, "ibv_reg_mr", "the ODP capability was queried on another device context");
    let cap = caps_b.check_implicit::<RC>(OdpOps::SEND).expect("b's capability");
    let e = pd.register_implicit_odp(access::LOCAL_RW, &cap).map(drop).expect_err("b's capability");
    invalid(&e, "ibv_reg_mr", "the ODP capability was queried on another device context");
}

/// Asynchronous events are a context's: an `IBV_EVENT_CQ_ERR` read from one context breaks
/// the QPs of the CQ it names among that context's CQs only; a CQ of another context at the
/// address the event names (there, the address of no CQ of the reader's context) keeps its QPs
/// usable, while the same event read from the CQ's own context breaks them.
#[test]
fn a_cq_error_of_one_context_breaks_no_qp_of_another_context() {
    let (a, b) = (device(0x4dc1, 0x4dc1), device(0x4dc2, 0x4dc2));
    let mut writers = Vec::new();
    for w in [a, b] {
        let mut fds = [0i32; 2];
        // SAFETY: a valid out-array of two descriptors.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) }, 0);
        // SAFETY: the fake context is leaked, and this test's alone.
        unsafe { (*w.ctx.ctx.as_ptr()).async_fd = fds[0] };
        writers.push(fds[1]);
    }
    let (cq_a, _) = a.cq();
    let (cq_b, fake_b) = b.cq();
    // The fake CQs are not registered with their contexts (only `create_cq_on` does).
    a.ctx.cqs.lock().unwrap().push(Arc::downgrade(&cq_a));
    b.ctx.cqs.lock().unwrap().push(Arc::downgrade(&cq_b));
    let qp_a = a.qp(0x4dc0, 8, &cq_a, None);
    let qp_b = b.qp(0x4dc1, 8, &cq_b, None);
    let (ctx_a, ctx_b) = (Context { inner: Arc::clone(&a.ctx) }, Context { inner: Arc::clone(&b.ctx) });
    super::inject_event(writers[0], fake_b.raw as u64, sys::IBV_EVENT_CQ_ERR);
    let ev = ctx_a.next_async_event(T).expect("the event");
    assert_eq!(ev.name(), "IBV_EVENT_CQ_ERR");
    assert!(qp_b.check_usable().is_ok(), "a's event broke a QP of b");
    assert!(qp_a.check_usable().is_ok(), "a's event names no CQ of a");
    super::inject_event(writers[1], fake_b.raw as u64, sys::IBV_EVENT_CQ_ERR);
    ctx_b.next_async_event(T).expect("the event");
    assert!(qp_b.check_usable().is_err(), "b's own event breaks its QP");
}

/// The connection manager's verbs take a QP or PD of the device the identifier is bound to
/// (`cm::same_device`, what `prepare`, `connect`, `accept`, `ready_qp`, the UD accept,
/// `join_multicast` and `resolve_peer` check first): one of another device, or an identifier
/// bound to none yet, is refused with an `InvalidArgument` naming the verb that was called;
/// another context of the identifier's device is let through.
#[test]
fn the_cms_verbs_refuse_an_object_of_another_device_naming_the_verb() {
    use crate::device::DeviceIdentity;
    let a = device(0x4dd1, 0x4dd1);
    let name = |n: &str| (DeviceIdentity::Name(n.into()), n.to_owned());
    assert!(crate::cm::same_device("rdma_accept", Some(name("fake0")), &a.ctx).is_ok(), "the identifier's device");
    for verb in ["rdma_connect", "rdma_accept", "rdma_init_qp_attr", "rdma_join_multicast"] {
        let e = crate::cm::same_device(verb, Some(name("rxe1")), &a.ctx).expect_err("another device");
        invalid(&e, verb, "the QP or PD is of device fake0, the identifier's address is on rxe1");
        let e = crate::cm::same_device(verb, None, &a.ctx).expect_err("no device yet");
        invalid(&e, verb, "the identifier's address is on no device");
        let e = crate::cm::same_device(verb, Some((DeviceIdentity::Index(3), "fake0".into())), &a.ctx);
        invalid(&e.expect_err("a device of the same name, created anew"), verb, "is on fake0");
    }
}
