//! Load: more than 10,000 work requests of mixed opcodes (SEND, SEND_WITH_IMM, RDMA_WRITE,
//! RDMA_WRITE_WITH_IMM, RDMA_READ, FETCH_AND_ADD) over 4 RC QP pairs that share one CQ, the
//! receivers sharing one SRQ. Every payload is unique and checked where it lands; every
//! completion is recorded under its request's id, on both queues (the send queue: the id each
//! token was posted with; the receive queue: the id carried in the payload or the immediate
//! data), and at the end each id must have completed exactly once where it should, with the
//! expected source (signaled requests their own completion, unsignaled ones implied): a lost
//! completion times out, a duplicated or misrouted one fails the per-id check.

use std::collections::HashMap;
use std::time::Instant;

use typed_verbs::prelude::*;
use typed_verbs::wc::CompletionSource;

use crate::common::*;

const PAIRS: usize = 4;
/// Requests of each opcode, per pair and round.
const M: usize = 8;
const KINDS: usize = 6;
/// 53 rounds * 4 pairs * 6 opcodes * 8 = 10,176 send-queue requests (and 5,088 receives).
const ROUNDS: usize = 53;
/// Bytes per payload slot; payloads are 8..=248 bytes.
const SLOT: usize = 256;
/// Receives kept posted on the SRQ: two rounds' worth.
const RECV_POOL: usize = 2 * PAIRS * 3 * M;
/// The region READs fetch from, at each receiver.
const READ_SRC: usize = 16 * 1024;
/// Outstanding READ/atomic requests per QP (both directions).
const RD_ATOMIC: u8 = 16;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    Faa,
}

impl Kind {
    /// The source slot of the four opcodes that carry a payload from the sender.
    fn src_slot(self, j: usize) -> usize {
        let k = match self {
            Kind::Send => 0,
            Kind::SendImm => 1,
            Kind::Write => 2,
            Kind::WriteImm => 3,
            Kind::Read | Kind::Faa => unreachable!("no source payload"),
        };
        (k * M + j) * SLOT
    }
    /// The target slot of the RDMA writes at the receiver.
    fn target_slot(self, j: usize) -> usize {
        match self {
            Kind::Write => j * SLOT,
            Kind::WriteImm => (M + j) * SLOT,
            _ => unreachable!("not a write"),
        }
    }
}

fn len_of(id: u64) -> usize {
    8 + (id % 241) as usize
}

/// The unique payload of request `id`: its id, then bytes derived from it.
fn payload(id: u64) -> Vec<u8> {
    let mut v = id.to_le_bytes().to_vec();
    v.extend((8..len_of(id)).map(|i| (id.wrapping_mul(131).wrapping_add(i as u64 * 7) % 251) as u8));
    v
}

/// What READ `id` fetches: a range of the round's read source.
fn read_range(id: u64) -> std::ops::Range<usize> {
    let off = (id as usize * 97) % (READ_SRC - SLOT);
    off..off + len_of(id)
}

fn read_src_byte(round: usize, pair: usize, i: usize) -> u8 {
    ((i * 13 + round * 7 + pair * 61) % 256) as u8
}

/// Splits a view into `n` consecutive views of `len` bytes.
fn split(mut rest: LocalBufMut<'_>, len: usize, n: usize) -> Vec<LocalBufMut<'_>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let (head, tail) = rest.split_at(len).unwrap();
        out.push(head);
        rest = tail;
    }
    out
}

/// What one request's completions were, by request id.
#[derive(Default, Debug, Clone)]
struct Seen {
    /// The sources of the send-queue completions handed to the request's token.
    send: Vec<CompletionSource>,
    /// The receive completions that carried the request's id.
    recv: usize,
}

#[test]
fn ten_thousand_mixed_requests_over_four_pairs_one_cq_one_srq() {
    let started = Instant::now();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(2048).unwrap();
    let srq = pd.create_srq(RECV_POOL as u32 + 64).unwrap();
    let caps = QpCaps { max_send_wr: 128, max_recv_wr: 16, ..QpCaps::default() };
    let access = Access::NONE.remote_write().remote_read().remote_atomic();
    let mut qps = Vec::new();
    for p in 0..PAIRS {
        let s = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps)).unwrap();
        let r = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps).srq(&srq)).unwrap();
        let es = s.endpoint(PORT, gid_index(), 0x1000 * (p as u32 + 1)).unwrap();
        let er = r.endpoint(PORT, gid_index(), 0x1000 * (p as u32 + 1) + 0x800).unwrap();
        let rtr = |a: &mut RcRtr| a.max_dest_rd_atomic = RD_ATOMIC;
        let rts = |a: &mut RcRts| a.max_rd_atomic = RD_ATOMIC;
        let s = connect_rc_with(s, access, &es, &er, rtr, rts);
        let r = connect_rc_with(r, access, &er, &es, rtr, rts);
        qps.push((s, r));
    }
    // At the senders: payload sources, READ destinations, FAA results.
    let mut srcs: Vec<_> = (0..PAIRS).map(|_| pd.alloc_mr(4 * M * SLOT, access::LOCAL_READ).unwrap()).collect();
    let mut rdsts: Vec<_> = (0..PAIRS).map(|_| pd.alloc_mr(M * SLOT, access::LOCAL_RW).unwrap()).collect();
    let mut faas: Vec<_> = (0..PAIRS).map(|_| pd.alloc_mr(M * 8, access::LOCAL_RW).unwrap()).collect();
    // At the receivers: RDMA WRITE targets, READ sources, one FAA counter per pair.
    let targets: Vec<_> = (0..PAIRS).map(|_| pd.alloc_mr(2 * M * SLOT, access::REMOTE_RW).unwrap()).collect();
    let mut rsrcs: Vec<_> = (0..PAIRS).map(|_| pd.alloc_mr(READ_SRC, access::REMOTE_READ_ONLY).unwrap()).collect();
    let counters = pd.alloc_mr(PAIRS * 8, access::REMOTE_ALL).unwrap();
    let mut sums = [0u64; PAIRS];

    let mut pending: Vec<_> = pd
        .alloc_mr(RECV_POOL * SLOT, access::LOCAL_RW)
        .unwrap()
        .into_chunks(SLOT)
        .unwrap()
        .into_iter()
        .map(|c| srq.post_recv_owned(wr::Recv::new(c)).unwrap())
        .collect();
    assert_eq!(srq.outstanding() as usize, RECV_POOL);

    let receiver_of: HashMap<u32, usize> = qps.iter().enumerate().map(|(p, (_, r))| (r.qp_num(), p)).collect();
    // Every request id: its pair and opcode (from the plan), and what completed for it.
    let mut planned: HashMap<u64, (usize, Kind)> = HashMap::new();
    let mut seen: HashMap<u64, Seen> = HashMap::new();
    let mut next_id: u64 = 1;

    for round in 0..ROUNDS {
        // The round's plan: ids per pair, opcode, index; the opcode order rotates (FAA, which
        // is signaled, always last so that no unsignaled request ends a send queue).
        let mut ids = [[[0u64; M]; KINDS]; PAIRS];
        let mut expect_recv: HashMap<u64, (usize, Kind)> = HashMap::new();
        let order = |p: usize| -> Vec<Kind> {
            let mut o = vec![Kind::Send, Kind::SendImm, Kind::Write, Kind::WriteImm, Kind::Read];
            o.rotate_left((round + p) % 5);
            o.push(Kind::Faa);
            o
        };
        for p in 0..PAIRS {
            for (k, kind) in order(p).into_iter().enumerate() {
                for (j, slot) in ids[p][k].iter_mut().enumerate() {
                    let id = next_id;
                    next_id += 1;
                    *slot = id;
                    planned.insert(id, (p, kind));
                    match kind {
                        Kind::Send | Kind::SendImm | Kind::Write | Kind::WriteImm => {
                            let at = kind.src_slot(j);
                            let bytes = payload(id);
                            srcs[p].as_mut_slice()[at..at + bytes.len()].copy_from_slice(&bytes);
                            if kind != Kind::Write {
                                expect_recv.insert(id, (p, kind));
                            }
                        }
                        Kind::Read | Kind::Faa => {}
                    }
                }
            }
            for (i, b) in rsrcs[p].as_mut_slice().iter_mut().enumerate() {
                *b = read_src_byte(round, p, i);
            }
        }
        let expected_recvs = expect_recv.len();

        let mut rviews: Vec<_> = rdsts.iter_mut().map(|mr| split(mr.slice_mut(..).unwrap(), SLOT, M)).collect();
        let mut fviews: Vec<_> = faas.iter_mut().map(|mr| split(mr.slice_mut(..).unwrap(), 8, M)).collect();
        let (srcs, targets, rsrcs, counters, qps) = (&srcs, &targets, &rsrcs, &counters, &qps);
        let seen_send = &mut seen;
        scope(|s| {
            let mut shared_tokens = Vec::new();
            let mut mut_tokens = Vec::new();
            for p in 0..PAIRS {
                let qp = &qps[p].0;
                let src = |kind: Kind, j: usize| {
                    let at = kind.src_slot(j);
                    srcs[p]
                        .slice(at..at + len_of(ids[p][order(p).iter().position(|&k| k == kind).unwrap()][j]))
                        .unwrap()
                };
                let id_of = |kind: Kind, j: usize| ids[p][order(p).iter().position(|&k| k == kind).unwrap()][j];
                let target = |kind: Kind, j: usize| {
                    let at = kind.target_slot(j) as u64;
                    targets[p].remote(..).unwrap().slice(at, len_of(id_of(kind, j)) as u64).unwrap()
                };
                let mut rv = std::mem::take(&mut rviews[p]).into_iter();
                let mut fv = std::mem::take(&mut fviews[p]).into_iter();
                for kind in order(p) {
                    // Post lists where a request type repeats; SEND and WRITE unsignaled.
                    let toks: Vec<Token<'_, LocalBuf<'_>>> = match kind {
                        Kind::Send => s
                            .post_send_list(qp, (0..M).map(|j| wr::Send::new(src(kind, j)).unsignaled()))
                            .expect("post SENDs"),
                        Kind::SendImm => s
                            .post_send_list(qp, (0..M).map(|j| wr::SendImm::new(src(kind, j), id_of(kind, j) as u32)))
                            .expect("post SEND_WITH_IMMs"),
                        Kind::Write => s
                            .post_send_list(
                                qp,
                                (0..M).map(|j| wr::Write::new(src(kind, j), target(kind, j)).unsignaled()),
                            )
                            .expect("post WRITEs"),
                        Kind::WriteImm => s
                            .post_send_list(
                                qp,
                                (0..M).map(|j| wr::WriteImm::new(src(kind, j), target(kind, j), id_of(kind, j) as u32)),
                            )
                            .expect("post WRITE_WITH_IMMs"),
                        Kind::Read => {
                            let wrs: Vec<_> = (0..M)
                                .map(|j| {
                                    let range = read_range(id_of(kind, j));
                                    let (dst, _) = rv.next().unwrap().split_at(range.len()).unwrap();
                                    let remote = rsrcs[p].remote(range).unwrap();
                                    wr::Read::new(dst, remote)
                                })
                                .collect();
                            let toks = s.post_send_list(qp, wrs).expect("post READs");
                            mut_tokens.extend(toks.into_iter().enumerate().map(|(j, t)| (p, id_of(kind, j), t)));
                            Vec::new()
                        }
                        Kind::Faa => {
                            // One request at a time (not a list), each signaled.
                            for j in 0..M {
                                let remote = counters.remote(p * 8..p * 8 + 8).unwrap();
                                let t = s.post_send(qp, wr::FetchAdd::new(fv.next().unwrap(), remote, id_of(kind, j)));
                                mut_tokens.push((p, id_of(kind, j), t.expect("post FETCH_AND_ADD")));
                            }
                            Vec::new()
                        }
                    };
                    // A post list hands back one token per request, in order.
                    shared_tokens.extend(toks.into_iter().enumerate().map(|(j, t)| (p, id_of(kind, j), t)));
                }
            }
            for (p, id, t) in shared_tokens {
                let (c, _) = s.wait(t, WAIT).expect("send-queue completion");
                record_send(seen_send, id, &c, qps[p].0.qp_num());
            }
            for (p, id, t) in mut_tokens {
                let (c, _) = s.wait(t, WAIT).expect("READ/FAA completion");
                record_send(seen_send, id, &c, qps[p].0.qp_num());
            }
        })
        .unwrap();

        // The receives: exactly the round's SENDs, SEND_WITH_IMMs and WRITE_WITH_IMMs, each once.
        let deadline = Instant::now() + WAIT;
        let mut got = 0;
        let mut repost = Vec::new();
        while got < expected_recvs {
            assert!(Instant::now() < deadline, "round {round}: {got} of {expected_recvs} receives completed");
            let mut still = Vec::with_capacity(pending.len());
            for t in pending.drain(..) {
                match t.try_complete() {
                    Err(t) => still.push(t),
                    Ok((c, chunk)) => {
                        assert_eq!(c.status(), WcStatus::Success, "{c:?}");
                        let p = *receiver_of.get(&c.qp_num()).unwrap_or_else(|| panic!("stray receive {c:?}"));
                        let id = match c.opcode() {
                            WcOpcode::Recv => u64::from_le_bytes(chunk.as_slice()[..8].try_into().unwrap()),
                            WcOpcode::RecvRdmaWithImm => u64::from(c.imm().expect("immediate data")),
                            other => panic!("unexpected receive opcode {other:?}: {c:?}"),
                        };
                        seen.entry(id).or_default().recv += 1;
                        let (pair, kind) = expect_recv
                            .remove(&id)
                            .unwrap_or_else(|| panic!("receive of request {id} unexpected or duplicated: {c:?}"));
                        assert_eq!(pair, p, "request {id} arrived on the wrong QP");
                        assert_eq!(c.byte_len() as usize, len_of(id), "{c:?}");
                        match kind {
                            Kind::Send => assert_eq!(c.imm(), None),
                            Kind::SendImm => assert_eq!(c.imm(), Some(id as u32)),
                            Kind::WriteImm => assert_eq!(c.opcode(), WcOpcode::RecvRdmaWithImm),
                            _ => unreachable!(),
                        }
                        if c.opcode() == WcOpcode::Recv {
                            assert_eq!(&chunk.as_slice()[..len_of(id)], payload(id), "payload of request {id}");
                        }
                        got += 1;
                        repost.push(chunk);
                    }
                }
            }
            pending = still;
        }
        assert!(expect_recv.is_empty());
        for chunk in repost {
            pending.push(srq.post_recv_owned(wr::Recv::new(chunk)).unwrap());
        }

        // The data the RDMA operations moved.
        for p in 0..PAIRS {
            let o = order(p);
            for (k, kind) in o.iter().enumerate() {
                for (j, &id) in ids[p][k].iter().enumerate() {
                    match kind {
                        Kind::Write | Kind::WriteImm => {
                            let mut got = vec![0u8; len_of(id)];
                            targets[p].read_volatile_into(kind.target_slot(j), &mut got).unwrap();
                            assert_eq!(got, payload(id), "{kind:?} {id} of pair {p}");
                        }
                        Kind::Read => {
                            let range = read_range(id);
                            let got = &rdsts[p].as_slice()[j * SLOT..j * SLOT + range.len()];
                            let want: Vec<u8> = range.map(|i| read_src_byte(round, p, i)).collect();
                            assert_eq!(got, &want[..], "READ {id} of pair {p}");
                        }
                        Kind::Faa => {
                            let old = u64::from_ne_bytes(faas[p].as_slice()[j * 8..j * 8 + 8].try_into().unwrap());
                            assert_eq!(old, sums[p], "FAA {id} of pair {p} returns the running sum");
                            sums[p] += id;
                        }
                        Kind::Send | Kind::SendImm => {}
                    }
                }
            }
        }
    }

    // Every request id completed exactly once on each queue it uses, and nowhere else.
    let ids = next_id - 1;
    assert_eq!(planned.len() as u64, ids);
    let (mut sends, mut recvs, mut implied) = (0, 0, 0);
    for id in 1..=ids {
        let (p, kind) = planned[&id];
        let got = seen.remove(&id).unwrap_or_default();
        // SEND and WRITE are posted unsignaled in lists of M: runs far below half the send
        // queue (the library's forced-signal threshold), so none of them is signaled.
        let want = match kind {
            Kind::Send | Kind::Write => CompletionSource::ImpliedByLater,
            _ => CompletionSource::Own,
        };
        assert_eq!(got.send, [want], "send-queue completions of {kind:?} request {id} (pair {p})");
        let wants_recv = matches!(kind, Kind::Send | Kind::SendImm | Kind::WriteImm);
        assert_eq!(got.recv, usize::from(wants_recv), "receive completions of {kind:?} request {id} (pair {p})");
        sends += got.send.len();
        recvs += got.recv;
        implied += usize::from(want == CompletionSource::ImpliedByLater);
    }
    assert!(seen.is_empty(), "completions for ids never posted: {:?}", seen.keys().collect::<Vec<_>>());
    for (p, (s, r)) in qps.iter().enumerate() {
        assert_eq!(s.outstanding(), (0, 0), "pair {p}");
        assert_eq!(r.outstanding(), (0, 0), "pair {p}");
        let mut word = [0u8; 8];
        counters.read_volatile_into(p * 8, &mut word).unwrap();
        assert_eq!(u64::from_ne_bytes(word), sums[p], "pair {p}'s counter is the sum of its FAAs");
    }
    assert_eq!(srq.outstanding() as usize, RECV_POOL, "the pool is posted again, none consumed");
    assert_eq!(pending.len(), RECV_POOL);
    assert_eq!(cq.progress().unwrap(), 0, "no stray completion on the CQ");
    eprintln!(
        "load: {sends} send-queue requests completed ({implied} implicitly), {recvs} receives, {PAIRS} pairs, \
         one CQ, one SRQ, in {:?}",
        started.elapsed()
    );
    // What the header promises: more than 10,000 requests, each seen complete above.
    assert!(sends > 10_000, "{sends}");
    drop(pending);
}

/// Records the send-queue completion `c` handed to the token of request `id` (on QP `qp_num`).
fn record_send(seen: &mut HashMap<u64, Seen>, id: u64, c: &Completion, qp_num: u32) {
    assert_eq!(c.status(), WcStatus::Success, "request {id}: {c:?}");
    assert_eq!(c.qp_num(), qp_num, "request {id}: {c:?}");
    seen.entry(id).or_default().send.push(c.source());
}
