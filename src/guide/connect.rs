//! From an opened device to a connected RC pair.
//!
//! # Objects
//!
//! [`devices`](crate::device::devices) lists what `ibv_get_device_list` sees;
//! [`Context::open`](crate::device::Context::open) opens one by name. From the context come
//! protection domains ([`Context::alloc_pd`](crate::device::Context::alloc_pd)) and completion
//! queues ([`Context::create_cq`](crate::device::Context::create_cq)); from the PD, memory
//! regions and queue pairs ([`Pd::create_qp`](crate::pd::Pd::create_qp)). Every object holds a
//! reference to its parents, so they can be dropped in any order (see [`teardown`](super::teardown)).
//!
//! A CQ must have room for every completion the queues completing on it can have outstanding:
//! [`Pd::create_qp`](crate::pd::Pd::create_qp) reserves the QP's send depth on its send CQ and
//! its receive depth on its receive CQ, and refuses the QP
//! ([`Error::InvalidArgument`](crate::Error::InvalidArgument)) when they do not fit. A CQ can
//! therefore never overrun. Size CQs as the sum of the depths
//! ([`QpCaps`](crate::qp::QpCaps), 64 and 64 by default) of the QPs that share them.
//!
//! A QP is [`Qp<T, S>`](crate::qp::Qp): transport `T` ([`RC`](crate::transport::RC),
//! [`UC`](crate::transport::UC), [`UD`](crate::transport::UD)) and state `S`, created in
//! [`RESET`](crate::transport::RESET). Transitions consume the QP and return it in the next
//! state; a send can only be posted in [`RTS`](crate::transport::RTS), a receive in INIT, RTR
//! or RTS, at compile time.
//!
//! # Connecting two RC QPs without the connection manager
//!
//! Each side needs the other's [`Endpoint`](crate::qp::Endpoint) (QP number, LID, GID, first
//! PSN): [`Qp::local_endpoint`](crate::qp::Qp::local_endpoint) gives this side's, with a random
//! initial PSN, on a [`Link`](crate::qp::Link) (port and GID index;
//! [`Link::default_for`](crate::qp::Link::default_for) picks the RoCE v2 GID of the port's IPv4
//! address, as rdma_cm does, or the port GID on InfiniBand). Exchange endpoints over any side
//! channel (`examples/common/pingpong.rs` speaks the wire format of rdma-core's pingpong tools),
//! then [`Qp::<RC, RESET>::connect`](crate::qp::Qp::connect) walks RESET → INIT → RTR → RTS
//! with the port's active MTU and the timers of rdma-core's examples.
//!
//! Two QPs of one device connected to each other (loopback), as `examples/rdma_read_write.rs`
//! does; across hosts each side does half of it:
//!
//! ```no_run
//! use typed_verbs::prelude::*;
//!
//! const PORT: u8 = 1;
//!
//! fn pair(device: &str) -> typed_verbs::Result<(Pd, Cq, Qp<RC, RTS>, Qp<RC, RTS>)> {
//!     let ctx = Context::open(device)?;
//!     let pd = ctx.alloc_pd()?;
//!     let caps = QpCaps { max_send_wr: 16, max_recv_wr: 16, ..QpCaps::default() };
//!     let cq = ctx.create_cq(64)?; // 2 QPs x (16 + 16)
//!     let a = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps))?;
//!     let b = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps))?;
//!     let link = Link::default_for(&ctx, PORT)?;
//!     let (ea, eb) = (a.local_endpoint(link)?, b.local_endpoint(link)?);
//!     // What the peer may do to this side's memory (each region's rights still apply): the
//!     // remote rights of an access set; LOCAL_WRITE and MW_BIND mean nothing to a QP.
//!     let a = a.connect(link, access::REMOTE_RW, &ea, &eb)?;
//!     let b = b.connect(link, access::REMOTE_RW, &eb, &ea)?;
//!     Ok((pd, cq, a, b))
//! }
//! ```
//!
//! Remote access is granted twice, both times as an [access set](crate::access): the QP's
//! (here; its REMOTE_* rights become `qp_access_flags`) says which remote operations it
//! executes at all, and each region's says what its rkey allows ([`memory`](super::memory)).
//!
//! # The transitions one by one
//!
//! [`connect`](crate::qp::Qp::connect) is the three transitions below. Write them out to post
//! receives in INIT, before the peer can send (the pingpong tools do), or to choose the
//! attributes: [`ConnectedInit`](crate::qp::ConnectedInit),
//! [`RcRtr`](crate::qp::RcRtr) (path MTU, destination QP, PSN, READ/atomic depth, RNR timer,
//! address vector), [`RcRts`](crate::qp::RcRts) (PSN, timeout, retries). UC takes
//! [`UcRtr`](crate::qp::UcRtr) and [`SqPsn`](crate::qp::SqPsn); UD
//! [`UdInit`](crate::qp::UdInit), [`UdRtr`](crate::qp::UdRtr), [`SqPsn`](crate::qp::SqPsn)
//! ([`ud`](super::ud)). Ranges (24-bit PSNs and QP numbers, 5-bit timers, 3-bit retry counts)
//! and the path MTU against the port's active MTU are checked before `ibv_modify_qp`.
//!
//! ```no_run
//! use typed_verbs::prelude::*;
//! use typed_verbs::qp::TransitionError;
//!
//! fn to_rts(qp: Qp<RC, RESET>, link: Link, me: &Endpoint, peer: &Endpoint) -> typed_verbs::Result<Qp<RC, RTS>> {
//!     let qp = qp.to_init(&ConnectedInit::new(link.port, Access::NONE.remote_write()))?;
//!     // Receives may be posted here (owned ones survive the transitions: see `posting`).
//!     let path = qp.path_to(link, peer)?; // address vector from `link`'s GID, active MTU
//!     let rtr = RcRtr { path_mtu: path.mtu, min_rnr_timer: 12, ..RcRtr::new(path.av, peer.qp_num, peer.psn) };
//!     let qp = match qp.to_rtr(&rtr) {
//!         Ok(qp) => qp,
//!         // A failed transition hands the QP back in its old state, with the error.
//!         Err(TransitionError { error, qp }) => {
//!             // `qp` is a `Qp<RC, INIT>` again: retry, reset or drop it.
//!             let _back_in_reset: Qp<RC, RESET> = qp.reset()?;
//!             return Err(error);
//!         }
//!     };
//!     Ok(qp.to_rts(&RcRts { timeout: 14, retry_cnt: 7, ..RcRts::new(me.psn) })?)
//! }
//! ```
//!
//! `?` on a [`TransitionError`](crate::qp::TransitionError) converts it into the crate's
//! [`Error`](crate::Error) and drops the QP. Skipping a state does not compile:
//!
//! ```compile_fail,E0277
//! use typed_verbs::prelude::*;
//! fn skip(qp: Qp<RC, RESET>, rtr: &RcRtr) {
//!     let _ = qp.to_rtr(rtr); // `to_rtr` moves a queue pair from INIT to RTR; this one is in RESET
//! }
//! ```
//!
//! The type is the last state the library moved the QP to. An error completion moves an RC QP
//! to ERR behind it: [`Qp::query_state`](crate::qp::Qp::query_state) observes the real state,
//! and [`Qp::reset`](crate::qp::Qp::reset) (from any state) starts over
//! ([`completions`](super::completions)).
//!
//! # With the connection manager
//!
//! [`crate::cm`] connects by IP address through librdmacm: each step consumes the identifier
//! of the state before, the QP is the program's own `Qp<RC, RESET>`, and the CM's attributes
//! move it to RTS. The active side:
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use std::time::Duration;
//! use typed_verbs::cm::{CmId, ConnParam, Connection};
//! use typed_verbs::prelude::*;
//!
//! fn dial(server: SocketAddr) -> typed_verbs::Result<(Pd, Cq, Connection)> {
//!     let t = Duration::from_secs(5);
//!     let id = CmId::new()?.resolve_addr(None, server, t)?.resolve_route(t)?;
//!     // The QP must live on the device the address resolved to.
//!     let ctx = Context::open(&id.device_name().expect("a resolved identifier has a device"))?;
//!     let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(128)?);
//!     let qp = pd.create_qp::<RC>(&QpConfig::new(&cq))?;
//!     let conn = id.connect(qp, Access::NONE.remote_write(), &ConnParam::default(), t)?;
//!     let _qp: &Qp<RC, RTS> = conn.qp(); // post on it as on any RC QP in RTS
//!     Ok((pd, cq, conn))
//! }
//! ```
//!
//! The passive side listens, takes a request and accepts it with its own QP:
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use std::time::Duration;
//! use typed_verbs::cm::{CmListener, ConnParam, Connection};
//! use typed_verbs::prelude::*;
//!
//! fn serve(addr: SocketAddr) -> typed_verbs::Result<(Pd, Cq, Connection)> {
//!     let t = Duration::from_secs(30);
//!     let listener = CmListener::bind(addr, 8)?;
//!     let request = listener.next_request(t)?;
//!     let ctx = Context::open(&request.device_name().expect("a request names its device"))?;
//!     let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(128)?);
//!     let qp = pd.create_qp::<RC>(&QpConfig::new(&cq))?;
//!     let conn = request.accept(qp, Access::NONE.remote_write(), &ConnParam::default(), t)?;
//!     Ok((pd, cq, conn))
//! }
//! ```
//!
//! To post receives before the peer can send, split the last step:
//! [`CmId::prepare`](crate::cm::CmId::prepare) then
//! [`Connecting::connect`](crate::cm::Connecting::connect), or
//! [`ConnRequest::prepare`](crate::cm::ConnRequest::prepare) then
//! [`Accepting::accept`](crate::cm::Accepting::accept); `Connecting::qp` and `Accepting::qp`
//! lend the QP meanwhile (post owned receives there). A step that fails or is never taken
//! moves the QP to ERR, so those receives come back flushed. The README's examples and
//! `examples/rdma_server.rs` / `rdma_client.rs` show more, UD through the CM included.
