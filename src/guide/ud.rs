//! Unreliable Datagram: one QP talks to many, each send addressed.
//!
//! A UD QP is connected to nobody. Its transitions take a Q_Key and a port
//! ([`UdInit`](crate::qp::UdInit)), nothing ([`UdRtr`](crate::qp::UdRtr)) and a PSN
//! ([`SqPsn`](crate::qp::SqPsn)). Each send names its destination: an address handle
//! ([`Ah`](crate::ah::Ah), `ibv_create_ah`), the remote QP number and the remote Q_Key,
//! attached with [`SendRequest::to`](crate::wr::SendRequest::to). A send on UD without a
//! destination does not compile, nor does `.to(...)` on another transport, nor an opcode the
//! table does not allow on UD (only SEND and SEND_WITH_IMM, and TSO with a capability):
//!
//! ```compile_fail,E0277
//! # use typed_verbs::prelude::*;
//! # use typed_verbs::wr;
//! # fn f(qp: &Qp<UD, RTS>, back: &mut Mr<access::LocalRw>, peer: RemoteSlice<access::RemoteRw>) -> typed_verbs::Result<()> {
//! scope(|s| -> typed_verbs::Result<()> {
//!     // RDMA READ is not valid on a UD queue pair (ibv_post_send(3) opcode table)
//!     let _t = s.post_send(qp, wr::Read::new(back.slice_mut(..)?, peer))?;
//!     Ok(())
//! })??;
//! # Ok(()) }
//! ```
//!
//! A message is at most one path MTU. A receive buffer starts with 40 bytes reserved for the
//! GRH (written when the datagram carries one: on RoCE, always); a completion's
//! [`byte_len`](crate::wc::Completion::byte_len) counts them.
//!
//! ```no_run
//! use std::time::Duration;
//! use typed_verbs::prelude::*;
//! use typed_verbs::qp::random_psn;
//! use typed_verbs::wr;
//!
//! const QKEY: u32 = 0x1111_1111;
//!
//! fn ready(qp: Qp<UD, RESET>, port: u8) -> typed_verbs::Result<Qp<UD, RTS>> {
//!     let qp = qp.to_init(&UdInit { port, pkey_index: 0, qkey: QKEY })?;
//!     Ok(qp.to_rtr(&UdRtr)?.to_rts(&SqPsn { sq_psn: random_psn() })?)
//! }
//!
//! /// One datagram to `peer` (its endpoint: QP number and GID), and the answer.
//! fn ask(pd: &Pd, qp: &Qp<UD, RTS>, link: Link, peer: &Endpoint, out: &Mr<access::LocalRead>, inbox: &mut Mr<access::LocalRw>) -> typed_verbs::Result<()> {
//!     let t = Duration::from_secs(5);
//!     let ah = pd.create_ah(&qp.path_to(link, peer)?.av)?;
//!     scope(|s| -> typed_verbs::Result<()> {
//!         let answer = s.post_recv(qp, wr::Recv::new(inbox.slice_mut(..)?))?;
//!         // The address handle stays borrowed until the send completes.
//!         let sent = s.post_send(qp, wr::Send::new(out.slice(..100)?).to(&ah, peer.qp_num, QKEY))?;
//!         s.wait(sent, t)?.0.ok()?;
//!         let (c, buf) = s.wait(answer, t)?;
//!         // After the GRH; the length is the device's word, so checked.
//!         let payload_len = (c.ok()?.byte_len() as usize).saturating_sub(40);
//!         let mut grh = [0u8; 40];
//!         buf.read_volatile_into(&mut grh);
//!         // The sender's address, from the completion and the GRH: how a service answers.
//!         let _reply_to = pd.create_ah_from_wc(link.port, &c, &grh)?;
//!         let _ = (payload_len, c.src_qp());
//!         Ok(())
//!     })??;
//!     Ok(())
//! }
//! ```
//!
//! [`random_psn`](crate::qp::random_psn) is what [`Qp::local_endpoint`](crate::qp::Qp::local_endpoint)
//! uses; [`Qp::path_to`](crate::qp::Qp::path_to) builds the address vector from the
//! [`Link`](crate::qp::Link)'s GID, and [`AddressVector::global`](crate::ah::AddressVector::global)
//! / [`AddressVector::local`](crate::ah::AddressVector::local) build one by hand. An
//! [`Ah`](crate::ah::Ah) is reference-counted: a posted send keeps it alive until its
//! completion, and a non-inline send borrows it for the scope.
//!
//! # UD through the connection manager
//!
//! [`CmId::new_ud`](crate::cm::CmId::new_ud) resolves a UD service by IP address and port:
//! [`CmId::ready_qp`](crate::cm::CmId::ready_qp) readies the program's QP with the CM's Q_Key,
//! and [`CmId::resolve_peer`](crate::cm::CmId::resolve_peer) (a SIDR exchange) returns a
//! [`UdPeer`](crate::cm::UdPeer): address handle, QP number and Q_Key, the three arguments of
//! `.to(...)`. [`CmListener::bind_ud`](crate::cm::CmListener::bind_ud) answers such requests;
//! [`CmId::join_multicast`](crate::cm::CmId::join_multicast) attaches a UD QP to a multicast
//! group for as long as the membership lives. The README has an example;
//! `examples/udaddy.rs` is librdmacm's `udaddy`.
