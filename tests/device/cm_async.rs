//! The connection manager's async waits (`tokio` feature) on the device: an RC connection made,
//! used and ended with them on a multi-threaded runtime; a UD service resolved with them; a
//! listener's wait dropped with a request queued on its channel loses no request; a connect
//! abandoned while it waits (its future dropped) hands the receive posted before it back,
//! flushed. Every wait bounded by the runtime's timer.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::time::timeout;
use typed_verbs::cm::{CmId, CmListener, ConnParam, PeerEnded};
use typed_verbs::prelude::*;

use crate::cm::{local_ip, recv_chunk, Side};
use crate::common::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_io().enable_time().build().unwrap()
}

/// A listener on the device's address, on a port the system chose, and that address.
fn listen() -> (CmListener, SocketAddr) {
    let listener = CmListener::bind(SocketAddr::new(IpAddr::V4(local_ip()), 0), 4).expect("listen");
    let addr = SocketAddr::new(IpAddr::V4(local_ip()), listener.port());
    (listener, addr)
}

/// A new RC identifier whose address and route to `to` are resolved, with the async waits.
async fn resolve(to: SocketAddr) -> CmId<typed_verbs::cm::RouteResolved> {
    let id = CmId::new().unwrap().resolve_addr_async(None, to, WAIT).await.expect("address resolution");
    let id = id.resolve_route_async(WAIT).await.expect("route resolution");
    assert_eq!(id.device_name().as_deref(), Some(device_name().as_str()));
    id
}

/// Whether `count`'s waker ([`count_waker`]) was woken within `d` (looked at every 5 ms, on the
/// runtime's timer). A CM wait polled once with it (`poll_with`, in a runtime's context) has
/// registered a duplicate of its channel's descriptor with the runtime's reactor, which wakes
/// it when epoll reports the descriptor readable: an event is queued on the channel. Nothing
/// else wakes it in these tests (the runtime is not shut down, the wait stays registered, and
/// its one poll is far within tokio's cooperative budget). The wait reads an event only in a
/// poll, so after the wake the event stays queued until the wait is polled again or another
/// wait reads it.
pub(crate) async fn woken_within(count: &CountWake, d: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + d;
    while count.wakes() == 0 {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

#[test]
fn an_rc_connection_is_made_used_and_ended_with_the_async_waits() {
    runtime().block_on(async {
        let (listener, addr) = listen();
        let server = tokio::spawn(async move {
            let req = timeout(WAIT, listener.next_request_async()).await.expect("bounded").expect("a request");
            assert_eq!(req.private_data().get(..5), Some(&b"hello"[..]));
            let side = Side::on(&req.device_name().unwrap());
            let accepting = req.prepare(side.qp(), Access::NONE, ConnParam::default()).unwrap();
            let recv = accepting.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
            let conn = timeout(WAIT, accepting.accept_async()).await.expect("bounded").expect("rdma_accept");
            let (c, chunk) = recv.wait(WAIT).map_err(|e| e.error).expect("the client's message");
            assert_eq!((c.status(), chunk.as_slice()), (WcStatus::Success, &b"sixteen bytes ok"[..]));
            let ended = timeout(WAIT, conn.wait_disconnected_async()).await.expect("bounded").expect("the end");
            assert_eq!(ended, PeerEnded::Disconnected);
            conn.disconnect().expect("our side of the disconnect");
        });
        let side = Side::on(&device_name());
        let param = ConnParam { private_data: b"hello".to_vec(), ..ConnParam::default() };
        let conn = timeout(WAIT, resolve(addr).await.connect_async(side.qp(), Access::NONE, &param))
            .await
            .expect("bounded")
            .expect("rdma_connect");
        let mut src = side.pd.alloc_mr(16, access::LOCAL_RW).unwrap();
        src.as_mut_slice().copy_from_slice(b"sixteen bytes ok");
        scope(|s| {
            let t = s.post_send(conn.qp(), wr::Send::new(src.slice(..).unwrap())).unwrap();
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
        })
        .unwrap();
        let qp = conn.disconnect().expect("rdma_disconnect");
        assert_eq!(qp.query_state().unwrap(), typed_verbs::qp::ObservedState::Err);
        server.await.expect("the server task");
    });
}

/// A listener's wait polled once (registered with the reactor), a client's request then queued
/// on the listener's channel (the reactor wakes the wait: its descriptor is readable), and the
/// wait dropped without another poll, as the losing branch of a `select!` is: it read nothing,
/// and the next wait gets that request, which is answered (the client sees the reject).
#[test]
fn a_listeners_async_wait_dropped_with_a_request_pending_loses_no_request() {
    runtime().block_on(async {
        let (listener, addr) = listen();
        let (woken, waker) = count_waker();
        let mut wait = Box::pin(listener.next_request_async());
        assert!(poll_with(&mut wait, &waker).is_pending(), "a request from nobody");
        let client = std::thread::spawn(move || {
            let id = CmId::new().unwrap().resolve_addr(None, addr, WAIT).unwrap().resolve_route(WAIT).unwrap();
            let side = Side::on(&device_name());
            let param = ConnParam { private_data: b"pending".to_vec(), ..ConnParam::default() };
            id.connect(side.qp(), Access::NONE, &param, WAIT).map(|_| ())
        });
        assert!(woken_within(&woken, WAIT).await, "the request never reached the listener's channel");
        drop(wait);
        let req =
            timeout(WAIT, listener.next_request_async()).await.expect("the request was lost").expect("the request");
        assert_eq!(req.private_data().get(..7), Some(&b"pending"[..]));
        req.reject(b"seen").unwrap();
        match client.join().expect("the client thread") {
            Err(Error::Rejected { private_data, .. }) => assert_eq!(private_data.get(..4), Some(&b"seen"[..])),
            other => panic!("expected the reject: {other:?}"),
        }
    });
}

#[test]
fn a_connect_future_dropped_while_it_waits_hands_the_posted_receive_back_flushed() {
    let rt = runtime();
    // The listener never answers: the request stays pending in its channel.
    let (_listener, addr) = listen();
    let side = Side::on(&device_name());
    let recv = rt.block_on(async {
        let connecting = resolve(addr).await.prepare(side.qp(), Access::NONE).unwrap();
        let recv = connecting.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
        let r = timeout(Duration::from_millis(500), connecting.connect_async(&ConnParam::default())).await;
        assert!(r.is_err(), "no answer within 500 ms: the future is dropped while it waits");
        recv
    });
    let (c, chunk) = recv.wait(WAIT).map_err(|e| e.error).expect("the receive comes back");
    assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");
    assert_eq!(chunk.len(), 16, "the buffer itself is handed back");
}

#[test]
fn a_ud_service_is_resolved_with_the_async_waits() {
    let listener = CmListener::bind_ud(SocketAddr::new(IpAddr::V4(local_ip()), 0), 4).expect("listen (UD)");
    let addr = SocketAddr::new(IpAddr::V4(local_ip()), listener.port());
    let server = std::thread::spawn(move || {
        let req = listener.next_request(WAIT).expect("a UD request");
        let ctx = Context::open(&req.device_name().unwrap()).unwrap();
        let (pd, cq) = (ctx.alloc_pd().unwrap(), ctx.create_cq(256).unwrap());
        let qp = req.ready_qp(pd.create_qp::<UD>(&QpConfig::new(&cq)).unwrap()).unwrap();
        let qpn = qp.qp_num();
        req.accept(&qp, b"async").expect("rdma_accept");
        qpn
    });
    let peer = runtime().block_on(async {
        let id = CmId::new_ud().unwrap().resolve_addr_async(None, addr, WAIT).await.unwrap();
        let id = id.resolve_route_async(WAIT).await.unwrap();
        let ctx = open();
        let pd = ctx.alloc_pd().unwrap();
        timeout(WAIT, id.resolve_peer_async(&pd, &[])).await.expect("bounded").expect("the service")
    });
    assert_eq!((peer.qp_num(), peer.private_data().get(..5)), (server.join().unwrap(), Some(&b"async"[..])));
}
