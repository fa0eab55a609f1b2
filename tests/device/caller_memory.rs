//! Memory the caller owns (`typed_verbs::caller`): owned buffers moved into a region
//! (`Vec<u8>`, `Box<[u8]>`, `memmap2::MmapMut` anonymous and in huge pages), borrowed local
//! registrations, the closure form, and raw memory. Each carries traffic with every byte
//! checked; `deregister` gives the same buffer back; a leaked registration of each kind is
//! followed by traffic checked with sentinels; a panic in the closure deregisters; a
//! deregistration the closure form cannot make aborts the process. Hostile buffers: one that
//! answers other memory on every call is asked once, and one whose drop panics is dropped only
//! after its deregistration.

use std::os::unix::process::ExitStatusExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use typed_verbs::access::{self, window, HasRemoteWrite};
use typed_verbs::caller::StableBuffer;
use typed_verbs::mw::{Type1, Type2, WindowAdvert};
use typed_verbs::prelude::*;
use typed_verbs::wr::BindMw;

use crate::common::*;

/// A recognisable pattern of `len` bytes.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8).collect()
}

/// A rig and an RC pair whose QPs allow remote writes and reads.
fn pair() -> (Rig, RcPair) {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write().remote_read(), QpCaps::default());
    (r, p)
}

/// An RDMA WRITE of `src` into `to`, posted by QP a (the peer of the memory's owner, QP b):
/// its completion status.
fn peer_write<R: HasRemoteWrite>(p: &RcPair, src: LocalBuf<'_>, to: RemoteSlice<R>) -> WcStatus {
    scope(|s| {
        let t = s.post_send(&p.a, wr::Write::new(src, to)).expect("post the RDMA WRITE");
        s.wait(t, WAIT).expect("the RDMA WRITE completes").0.status()
    })
    .expect("scope")
}

/// Memory leaked with a registration (`leaked`, reached by the peer through `remote`) stays
/// registered and is never handed back to the allocator: 16 buffers allocated now, filled with
/// `fill`, lie outside it and keep their bytes while the peer writes `src` through `remote` and
/// reads it back into `back`.
fn leaked_memory_still_serves_the_peer<R: HasRemoteWrite + typed_verbs::access::HasRemoteRead>(
    p: &RcPair,
    src: &Mr<access::LocalRw>,
    back: &mut Mr<access::LocalRw>,
    remote: RemoteSlice<R>,
    leaked: std::ops::Range<u64>,
    fill: u8,
) {
    let len = src.len();
    let fresh: Vec<Vec<u8>> = (0..16).map(|_| vec![fill; len]).collect();
    for v in &fresh {
        let at = v.as_ptr() as u64;
        assert!(!leaked.contains(&at) && !leaked.contains(&(at + len as u64 - 1)), "the leaked memory was reused");
    }
    assert_eq!(peer_write(p, src.slice(..).unwrap(), remote), WcStatus::Success, "the leaked memory is reachable");
    scope(|s| {
        let t = s.post_send(&p.a, wr::Read::new(back.slice_mut(..).unwrap(), remote)).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    assert!(back.as_slice() == src.as_slice(), "the write landed in the leaked memory, read back");
    assert!(fresh.iter().all(|v| v.iter().all(|&b| b == fill)), "no other memory was written");
}

/// Registers three buffers made by `make` (a source, a target peers write and read, a
/// destination), carries an RDMA WRITE of the whole source into the target and an RDMA READ of
/// the target into the destination, checks every byte, and deregisters the target and the
/// destination: each is the same buffer (same address) with the bytes the device wrote.
fn owned_buffers_carry_traffic<B: StableBuffer>(kind: &str, len: usize, mut make: impl FnMut(usize) -> B) {
    let (r, p) = pair();
    let want = pattern(len, 7);
    let mut src = make(len);
    src.stable_bytes().copy_from_slice(&want);
    let mut target = make(len);
    target.stable_bytes().fill(0xEE);
    let target_at = target.stable_bytes().as_ptr() as u64;
    let mut back = make(len);
    let back_at = back.stable_bytes().as_ptr() as u64;
    let src = r.pd.register(src, access::LOCAL_READ).unwrap_or_else(|e| panic!("register a {kind}: {e}"));
    let target = r.pd.register(target, access::REMOTE_RW).expect("register the target");
    let mut back = r.pd.register(back, access::LOCAL_RW).expect("register the destination");
    assert_eq!((target.addr(), target.len()), (target_at, len), "{kind}: the region is the buffer itself");
    assert_eq!((back.addr(), back.len()), (back_at, len), "{kind}");
    assert_eq!(src.as_slice(), &want[..], "{kind}: the region reads the buffer's bytes");
    scope(|s| {
        let t = s.post_send(&p.a, wr::Write::new(src.slice(..).unwrap(), target.remote(..).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success(), "{kind}: RDMA WRITE");
        let t = s.post_send(&p.b, wr::Read::new(back.slice_mut(..).unwrap(), target.remote(..).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success(), "{kind}: RDMA READ");
    })
    .unwrap();
    assert!(back.as_slice() == &want[..], "{kind}: every byte through the READ");
    let mut landed = vec![0u8; len];
    target.read_volatile_into(0, &mut landed).unwrap();
    assert!(landed == want, "{kind}: every byte of the WRITE");
    let mut target = target.deregister().map_err(|(e, _)| e).expect("deregister the target");
    assert_eq!(target.stable_bytes().as_ptr() as u64, target_at, "{kind}: the same buffer back");
    assert!(target.stable_bytes() == &want[..], "{kind}: with what the device wrote");
    let mut back = back.deregister().map_err(|(e, _)| e).expect("deregister the destination");
    assert_eq!(back.stable_bytes().as_ptr() as u64, back_at, "{kind}: the same buffer back");
    assert!(back.stable_bytes() == &want[..], "{kind}");
    drop(src);
}

#[test]
fn a_registered_vec_carries_traffic_and_comes_back_as_the_same_vec() {
    // Not a page multiple, and a capacity beyond the length: the region is the `len` bytes.
    owned_buffers_carry_traffic("Vec<u8>", 10_000, |len| {
        let mut v = Vec::with_capacity(3 * len);
        v.resize(len, 0u8);
        v
    });
    let r = rig();
    assert_refused(
        r.pd.register(Vec::new(), access::LOCAL_RW),
        "ibv_reg_mr",
        "a memory region needs at least one byte",
    );
    // An empty Vec with capacity is still empty: its length is what is registered.
    assert_refused(
        r.pd.register(Vec::with_capacity(4096), access::LOCAL_RW),
        "ibv_reg_mr",
        "a memory region needs at least one byte",
    );
}

#[test]
fn a_registered_boxed_slice_carries_traffic_and_comes_back() {
    owned_buffers_carry_traffic("Box<[u8]>", 5_001, |len| vec![0u8; len].into_boxed_slice());
    let r = rig();
    let empty: Box<[u8]> = Box::new([]);
    assert_refused(r.pd.register(empty, access::LOCAL_RW), "ibv_reg_mr", "a memory region needs at least one byte");
}

#[cfg(feature = "memmap2")]
#[test]
fn a_registered_anonymous_mapping_carries_traffic_and_comes_back() {
    owned_buffers_carry_traffic("MmapMut", 3 * 4096 + 100, |len| memmap2::MmapMut::map_anon(len).expect("map_anon"));
}

/// A huge-page `MmapMut` of the caller's (2 MiB pages, `MmapOptions::huge(Some(21))`): the
/// mapping is in huge pages, and an RDMA WRITE and READ through it carry every byte. The test
/// VMs reserve 16 huge pages; this takes 3.
#[cfg(feature = "memmap2")]
#[test]
fn a_registered_huge_page_mapping_carries_traffic_and_comes_back() {
    const LEN: usize = 2 << 20;
    owned_buffers_carry_traffic("MmapMut in huge pages", LEN, |len| {
        let mut map =
            memmap2::MmapOptions::new().len(len).huge(Some(21)).map_anon().unwrap_or_else(|e| {
                panic!("a {len}-byte mapping in 2 MiB huge pages (nr_hugepages in the guest): {e}")
            });
        map[0] = 0; // faulted in, so that smaps shows its page size
        assert_eq!(kernel_page_size(map.as_ptr() as u64), Some(LEN), "the caller's mapping is in 2 MiB pages");
        map
    });
}

/// A region swapped (through `DerefMut`) with one that owns other memory no longer holds a `B`:
/// `deregister` says so and deregisters nothing; the region still deregisters as an `Mr`.
#[test]
fn a_registered_region_swapped_for_another_reports_it_holds_no_such_buffer() {
    let r = rig();
    let mut vec = r.pd.register(vec![1u8; 4096], access::LOCAL_RW).unwrap();
    let mut boxed = r.pd.register(vec![2u8; 100].into_boxed_slice(), access::LOCAL_RW).unwrap();
    let mut heap = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    std::mem::swap(&mut *vec, &mut *boxed);
    assert_eq!((vec.as_slice()[0], vec.len()), (2, 100), "the regions moved with their buffers");
    let (err, vec) = vec.deregister().expect_err("this region holds a Box<[u8]>, not a Vec<u8>");
    assert_invalid(&err, "ibv_dereg_mr", "this region no longer owns a");
    vec.into_mr().deregister().map_err(|(e, _)| e).expect("still a region, deregistered as one");
    std::mem::swap(&mut heap, &mut *boxed);
    let (err, boxed) = boxed.deregister().expect_err("this region holds library memory");
    assert_invalid(&err, "ibv_dereg_mr", "this region no longer owns a");
    drop(boxed);
    assert_eq!(heap.as_slice(), &[1u8; 4096][..], "the plain region now owns the Vec and reads it");
    heap.deregister().map_err(|(e, _)| e).expect("deregister the plain region owning the Vec");
}

/// A buffer breaking `StableBuffer`'s promise: every call of `stable_bytes` answers a shorter
/// tail of its memory, and counts the calls.
struct Shifty {
    mem: Box<[u8]>,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

// SAFETY: deliberately not upheld ("the same memory every time"), to show that the library asks
// once and keeps to that answer; every answer lies inside the buffer's own allocation, which
// only its drop frees.
#[allow(unsafe_code)]
unsafe impl StableBuffer for Shifty {
    fn stable_bytes(&mut self) -> &mut [u8] {
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let off = n.min(self.mem.len() - 1);
        &mut self.mem[off..]
    }
}

/// A buffer whose `stable_bytes` would answer other memory on a second call is asked once, at
/// registration: the region is that first answer, whole, a peer's RDMA WRITE lands there, and
/// neither views, volatile reads nor `deregister` ask again.
#[test]
fn a_buffer_answering_other_memory_each_call_is_registered_once_as_it_first_answered() {
    const LEN: usize = 4096;
    let (r, p) = pair();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mem = vec![0u8; LEN].into_boxed_slice();
    let at = mem.as_ptr() as u64;
    let reg = r.pd.register(Shifty { mem, calls: calls.clone() }, access::REMOTE_RW).expect("registered");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1, "asked once, at registration");
    assert_eq!((reg.addr(), reg.len()), (at, LEN), "the region is the first answer, whole");
    let mut src = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(LEN, 11));
    assert_eq!(peer_write(&p, src.slice(..).unwrap(), reg.remote(..).unwrap()), WcStatus::Success);
    let mut landed = vec![0u8; LEN];
    reg.read_volatile_into(0, &mut landed).unwrap();
    assert!(landed == src.as_slice(), "every byte of the WRITE, from the region's start");
    let back = reg.deregister().map_err(|(e, _)| e).expect("deregistered");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1, "never asked again");
    assert_eq!(back.mem.as_ptr() as u64, at, "the same buffer back");
    assert!(back.mem[..] == src.as_slice()[..], "holding what the device wrote");
}

/// A buffer whose drop panics.
struct PanicsOnDrop(Vec<u8>);

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("the buffer's own drop panics");
    }
}

// SAFETY: the `Vec`'s heap memory, whole, every time (as `Vec<u8>`'s own impl); the panic comes
// after nothing more than the `Vec`'s drop would do (its memory is freed as the panic unwinds).
#[allow(unsafe_code)]
unsafe impl StableBuffer for PanicsOnDrop {
    fn stable_bytes(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

/// A registered buffer whose drop panics. Handed back by `deregister` (after a peer's WRITE
/// into it) and dropped by the caller, it panics once. Dropped with its region, the region's
/// drop deregisters first (the old rkey no longer reaches the memory: a peer's WRITE through it
/// fails), then drops the buffer, whose panic comes out of the region's drop; the PD still
/// registers and deregisters afterwards.
#[test]
fn a_buffer_whose_drop_panics_is_dropped_after_its_deregistration_and_the_panic_comes_out() {
    const LEN: usize = 4096;
    let (r, p) = pair();
    let mut src = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(LEN, 5));
    let reg = r.pd.register(PanicsOnDrop(vec![0u8; LEN]), access::REMOTE_RW).expect("registered");
    assert_eq!(peer_write(&p, src.slice(..).unwrap(), reg.remote(..).unwrap()), WcStatus::Success);
    let back = reg.deregister().map_err(|(e, _)| e).expect("deregistered");
    assert!(back.0 == src.as_slice(), "every byte of the WRITE");
    assert!(catch_unwind(AssertUnwindSafe(move || drop(back))).is_err(), "the caller's drop panics, once");

    let reg = r.pd.register(PanicsOnDrop(vec![0u8; LEN]), access::REMOTE_RW).expect("the PD registers again");
    let old = reg.remote(..).unwrap();
    let panicked = catch_unwind(AssertUnwindSafe(move || drop(reg)));
    assert!(panicked.is_err(), "the buffer's panic comes out of the region's drop");
    assert_ne!(peer_write(&p, src.slice(..).unwrap(), old), WcStatus::Success, "deregistered before the panic");
    let again = r.pd.register(vec![0u8; 64], access::LOCAL_RW).expect("the PD registers after the panic");
    again.deregister().map_err(|(e, _)| e).expect("and deregisters");
}

/// A leaked `Registered` leaks its buffer: the memory stays registered and is never handed back
/// to the allocator (buffers allocated afterwards keep their sentinels while a peer writes the
/// old rkey's memory).
#[test]
fn a_forgotten_registered_buffer_is_leaked_and_stays_registered() {
    const LEN: usize = 8192;
    let (r, p) = pair();
    let mut src = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(LEN, 3));
    let mut back = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    let registered = r.pd.register(vec![0u8; LEN], access::REMOTE_RW).unwrap();
    let remote = registered.remote(..).unwrap();
    let leaked = registered.addr()..registered.addr() + LEN as u64;
    std::mem::forget(registered);
    leaked_memory_still_serves_the_peer(&p, &src, &mut back, remote, leaked, 0x5A);
}

/// A borrowed registration for local work requests: a READ into it, a SEND from it, every byte
/// checked; `deregister` gives the slice back (same memory), and the slice holds what the
/// device wrote.
#[test]
fn a_borrowed_local_registration_carries_traffic_and_gives_the_slice_back() {
    const LEN: usize = 6000;
    let (r, p) = pair();
    let want = pattern(LEN, 11);
    let mut source = r.pd.alloc_mr(LEN, access::REMOTE_RW).unwrap();
    source.write_volatile_from(0, &want).unwrap();
    let mut received = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    let mut storage = vec![0u8; LEN];
    let at = storage.as_ptr() as u64;
    let mut mr = r.pd.register_borrowed(&mut storage, access::LOCAL_RW).unwrap();
    assert_eq!((mr.addr(), mr.len()), (at, LEN));
    scope(|s| {
        let t = s.post_send(&p.b, wr::Read::new(mr.slice_mut(..).unwrap(), source.remote(..).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success(), "RDMA READ into borrowed memory");
    })
    .unwrap();
    assert!(mr.as_slice() == &want[..], "every byte of the READ");
    mr.as_mut_slice()[0] ^= 0xFF;
    scope(|s| {
        let rt = s.post_recv(&p.a, wr::Recv::new(received.slice_mut(..).unwrap())).unwrap();
        let t = s.post_send(&p.b, wr::Send::new(mr.slice(..).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success(), "SEND from borrowed memory");
        let (c, _) = s.wait(rt, WAIT).unwrap();
        assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, LEN as u32));
    })
    .unwrap();
    assert_eq!(received.as_slice()[0], want[0] ^ 0xFF);
    assert!(received.as_slice()[1..] == want[1..], "every byte of the SEND");
    let slice = mr.deregister().map_err(|(e, _)| e).expect("deregister");
    assert_eq!(slice.as_ptr() as u64, at, "the same memory back");
    slice[0] ^= 0xFF;
    assert!(storage == want);
    // A read-only borrowed registration is a SEND / WRITE source too.
    let ro = r.pd.register_borrowed(&mut storage, access::LOCAL_READ).unwrap();
    let target = r.pd.alloc_mr(LEN, access::REMOTE_RW).unwrap();
    assert_eq!(peer_write(&p, ro.slice(..).unwrap(), target.remote(..).unwrap()), WcStatus::Success);
    drop(ro);
    let mut landed = vec![0u8; LEN];
    target.read_volatile_into(0, &mut landed).unwrap();
    assert!(landed == want, "every byte of the WRITE from a borrowed source");
    let mut empty: [u8; 0] = [];
    assert_refused(
        r.pd.register_borrowed(&mut empty, access::LOCAL_RW),
        "ibv_reg_mr",
        "a memory region needs at least one byte",
    );
}

/// A leaked `BorrowedMr` ends the borrow with the registration still alive, but nothing can
/// reach the memory through it: it has no remote rights, so a peer's RDMA WRITE with its rkey
/// fails with a remote access error, and the slice, used again, keeps its sentinel bytes.
#[test]
fn a_forgotten_borrowed_registration_lets_no_peer_write_the_slice() {
    const LEN: usize = 4096;
    let (r, p) = pair();
    let mut src = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(LEN, 5));
    let mut storage = vec![0u8; LEN];
    let mr = r.pd.register_borrowed(&mut storage, access::LOCAL_RW).unwrap();
    let (addr, rkey) = (mr.addr(), mr.remote(..).unwrap().rkey());
    std::mem::forget(mr);
    storage.fill(0xA5);
    let forged = RemoteSlice::<access::RemoteRw>::from_wire(addr, LEN as u64, rkey);
    assert_eq!(peer_write(&p, src.slice(..).unwrap(), forged), WcStatus::RemAccessErr);
    assert!(storage.iter().all(|&b| b == 0xA5), "the slice keeps its sentinel");
}

/// The closure form with remote rights: a peer's RDMA WRITE lands in the borrowed slice while
/// the closure runs; the `RemoteSlice` that left the closure names nothing afterwards (remote
/// access error), and the slice keeps its sentinel.
#[test]
fn a_closure_registration_takes_a_peer_write_then_refuses_its_old_rkey() {
    const LEN: usize = 8192 + 17;
    let (r, p) = pair();
    let want = pattern(LEN, 9);
    let mut src = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    src.as_mut_slice().copy_from_slice(&want);
    let mut storage = vec![0u8; LEN];
    let remote =
        r.pd.with_registered(&mut storage, access::REMOTE_RW, |mr| {
            let remote = mr.remote(..).unwrap();
            assert_eq!(peer_write(&p, src.slice(..).unwrap(), remote), WcStatus::Success);
            let mut landed = vec![0u8; LEN];
            mr.read_volatile_into(0, &mut landed).unwrap();
            assert!(landed == want, "every byte, seen through the region");
            remote
        })
        .expect("register");
    assert!(storage == want, "every byte, in the slice after the call");
    storage.fill(0xC3);
    assert_eq!(peer_write(&p, src.slice(..).unwrap(), remote), WcStatus::RemAccessErr, "deregistered on exit");
    assert!(storage.iter().all(|&b| b == 0xC3), "the slice keeps its sentinel");
    let mut empty: [u8; 0] = [];
    assert_refused(
        r.pd.with_registered(&mut empty, access::REMOTE_RW, |_| ()),
        "ibv_reg_mr",
        "a memory region needs at least one byte",
    );
}

/// A panic inside the closure deregisters before the panic goes on: afterwards a peer's RDMA
/// WRITE with the rkey the closure saw fails, and the slice keeps its sentinel.
#[test]
fn a_panic_inside_the_closure_deregisters_the_region() {
    const LEN: usize = 4096;
    let (r, p) = pair();
    let mut src = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(LEN, 1));
    let mut storage = vec![0u8; LEN];
    let mut seen = None;
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        r.pd.with_registered(&mut storage, access::REMOTE_RW, |mr| {
            let remote = mr.remote(..).unwrap();
            seen = Some(remote);
            assert_eq!(peer_write(&p, src.slice(..).unwrap(), remote), WcStatus::Success);
            panic!("a panic inside the closure");
        })
    }));
    let payload = unwound.expect_err("the panic goes on after the deregistration");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"a panic inside the closure"));
    assert!(storage == pattern(LEN, 1), "the write made before the panic landed");
    storage.fill(0x3C);
    let remote = seen.expect("the closure ran");
    assert_eq!(peer_write(&p, src.slice(..).unwrap(), remote), WcStatus::RemAccessErr, "deregistered on unwind");
    assert!(storage.iter().all(|&b| b == 0x3C), "the slice keeps its sentinel");
}

/// A type 1 window bound to borrowed memory inside the closure: a peer writes through it; the
/// window (dropped, so deallocated) and the region are gone after the call, and the window's
/// rkey fails.
#[test]
fn a_window_on_closure_registered_memory_carries_a_peer_write() {
    const LEN: usize = 4096;
    let (r, p) = pair();
    let want = pattern(LEN, 13);
    let mut src = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    src.as_mut_slice().copy_from_slice(&want);
    let mut storage = vec![0u8; 2 * LEN];
    let mw = r.pd.alloc_mw::<Type1>().unwrap();
    let through_window =
        r.pd.with_registered(&mut storage, access::WINDOW_BINDABLE, |mr| {
            let bound = scope(|s| {
                let t = s.bind_mw(&p.b, mw, mr, LEN as u64, LEN as u64, window::WRITE).unwrap();
                s.wait(t, WAIT).unwrap().1.expect("bind")
            })
            .unwrap();
            let remote = bound.remote(..).unwrap();
            assert_eq!(peer_write(&p, src.slice(..).unwrap(), remote), WcStatus::Success);
            drop(bound);
            remote
        })
        .expect("register");
    assert!(storage[..LEN].iter().all(|&b| b == 0), "nothing outside the window was written");
    assert!(storage[LEN..] == want[..], "every byte through the window");
    assert_eq!(peer_write(&p, src.slice(..).unwrap(), through_window), WcStatus::RemAccessErr);
    assert!(storage[LEN..] == want[..], "unchanged");
}

/// A window bound to a `Registered` and leaked keeps the region busy: `deregister` fails and
/// hands the region back (it frees nothing); the `Mr` swapped out through `DerefMut` into a
/// plain region carries the buffer and the bound window with it, and neither handle frees the
/// buffer: the swapped-in library region deregisters, and the region holding the buffer, whose
/// deregistration fails again, leaks it on drop. A peer still writes and reads the buffer
/// through the leaked window, and memory allocated afterwards keeps its sentinels.
#[test]
fn a_registered_region_with_a_leaked_bound_window_is_handed_back_swapped_and_leaked() {
    const LEN: usize = 8192;
    let (r, p) = pair();
    let mut src = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(LEN, 5));
    let mut back = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    let registered = r.pd.register(vec![0u8; LEN], access::WINDOW_BINDABLE).unwrap();
    let leaked = registered.addr()..registered.addr() + LEN as u64;
    let mw = r.pd.alloc_mw::<Type1>().unwrap();
    let through_window = scope(|s| {
        let t = s.bind_mw(&p.b, mw, &registered, 0, LEN as u64, window::READ_WRITE).unwrap();
        let bound = s.wait(t, WAIT).unwrap().1.expect("bind");
        let remote = bound.remote(..).unwrap();
        std::mem::forget(bound);
        remote
    })
    .unwrap();
    let (err, mut registered) = registered.deregister().expect_err("a window is still bound: ibv_dereg_mr fails");
    assert!(matches!(err, Error::Verb { verb: Verb::DeregMr, .. }), "{err:?}");
    let mut plain = r.pd.alloc_mr(64, access::WINDOW_BINDABLE).unwrap();
    std::mem::swap(&mut plain, &mut *registered);
    assert_eq!((plain.addr(), plain.len()), (leaked.start, LEN), "the buffer moved with its region");
    let (err, registered) = registered.deregister().expect_err("it holds the library's memory now, not a Vec");
    assert_invalid(&err, "ibv_dereg_mr", "this region no longer owns a");
    drop(registered);
    let (err, plain) = plain.deregister().expect_err("the window still keeps the buffer's region busy");
    assert!(matches!(err, Error::Verb { verb: Verb::DeregMr, .. }), "{err:?}");
    drop(plain);
    leaked_memory_still_serves_the_peer(&p, &src, &mut back, through_window, leaked, 0x6B);
}

/// Bind tokens dropped inside the closure, before their completions (a type 1 bind, and a type
/// 2 BIND_MW whose rkey was advertised to the peer on the binding QP first): the windows are
/// parked with the send queue and deallocated once their binds complete, within the closure's
/// scope, so the region is not busy when the closure returns (the exit does not abort), and the
/// advertised rkey names nothing afterwards (the peer's RDMA WRITE fails, the slice keeps its
/// sentinel).
#[test]
fn bind_tokens_dropped_inside_the_closure_leave_no_window_behind() {
    const LEN: usize = 4096;
    let r = rig();
    let caps = QpCaps { max_inline_data: 64, ..QpCaps::default() };
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write().remote_read(), caps);
    let mut src = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(LEN, 17));
    let mut advert_buf = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let mut storage = vec![0u8; 2 * LEN];
    let mw1 = r.pd.alloc_mw::<Type1>().unwrap();
    let mw2 = r.pd.alloc_mw::<Type2>().unwrap();
    let advert =
        r.pd.with_registered(&mut storage, access::WINDOW_BINDABLE, |mr| {
            scope(|s| {
                let rt = s.post_recv(&p.a, wr::Recv::new(advert_buf.slice_mut(..).unwrap())).unwrap();
                let t1 = s.bind_mw(&p.b, mw1, mr, 0, LEN as u64, window::WRITE).unwrap();
                drop(t1);
                let t2 = s.post_send(&p.b, BindMw::new(mw2, mr, LEN as u64, LEN as u64, window::WRITE)).unwrap();
                let adv = s.advertise_window(&p.b, &t2).unwrap();
                drop(t2);
                let (c, buf) = s.wait(rt, WAIT).unwrap();
                assert!(c.is_success(), "{c:?}");
                let mut bytes = [0u8; WindowAdvert::LEN];
                buf.read_volatile_into(&mut bytes);
                assert!(s.wait(adv, WAIT).unwrap().0.is_success());
                WindowAdvert::decode(&bytes).unwrap()
            })
            .unwrap()
        })
        .expect("register");
    storage.fill(0xA5);
    let remote = advert.remote::<window::Write>().unwrap();
    assert_eq!(peer_write(&p, src.slice(..).unwrap(), remote), WcStatus::RemAccessErr, "the window is gone");
    assert!(storage.iter().all(|&b| b == 0xA5), "the slice keeps its sentinel");
}

/// A panic inside the closure while a window is bound (its `BoundMw` a local of the closure):
/// unwinding drops the window (deallocated, so unbound) before the region is deregistered, so
/// the exit does not abort; the window's rkey fails afterwards and the slice keeps its
/// sentinel.
#[test]
fn a_panic_with_a_bound_window_inside_the_closure_unbinds_then_deregisters() {
    const LEN: usize = 4096;
    let (r, p) = pair();
    let mut src = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(LEN, 23));
    let mut storage = vec![0u8; LEN];
    let mw = r.pd.alloc_mw::<Type1>().unwrap();
    let mut seen = None;
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        r.pd.with_registered(&mut storage, access::WINDOW_BINDABLE, |mr| {
            let bound = scope(|s| {
                let t = s.bind_mw(&p.b, mw, mr, 0, LEN as u64, window::WRITE).unwrap();
                s.wait(t, WAIT).unwrap().1.expect("bind")
            })
            .unwrap();
            let remote = bound.remote(..).unwrap();
            seen = Some(remote);
            assert_eq!(peer_write(&p, src.slice(..).unwrap(), remote), WcStatus::Success);
            panic!("a panic with a window bound");
        })
    }));
    let payload = unwound.expect_err("the panic goes on");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"a panic with a window bound"));
    assert!(storage == pattern(LEN, 23), "the write through the window landed before the panic");
    storage.fill(0x5C);
    let remote = seen.expect("the closure ran");
    assert_eq!(peer_write(&p, src.slice(..).unwrap(), remote), WcStatus::RemAccessErr, "the window is gone");
    assert!(storage.iter().all(|&b| b == 0x5C), "the slice keeps its sentinel");
}

/// The name of the child test below, as the test harness knows it, and the variable that makes
/// it the child.
const ABORT_CHILD: &str = "caller_memory::a_leaked_bound_window_makes_the_closure_exit_abort";
const ABORT_CHILD_VAR: &str = "TYPED_VERBS_CALLER_ABORT_CHILD";

/// A window bound inside the closure and leaked (`mem::forget`) keeps the region busy: rxe
/// refuses `ibv_dereg_mr` (`windows::deregistering_a_region_with_a_leaked_bound_window_fails_and_is_reported`),
/// so the borrow cannot end safely and the process aborts, after printing the error. Run in a
/// child process (this test binary, filtered to this test): it must die of SIGABRT with the
/// message, and not before the closure returned.
#[test]
fn a_leaked_bound_window_makes_the_closure_exit_abort() {
    if let Some(mode) = std::env::var_os(ABORT_CHILD_VAR) {
        // "full": stderr cannot be written (the parent points it at /dev/full), so the child
        // prints nothing itself, and catches an unwind out of the closure's exit: the abort
        // must come all the same.
        let quiet = mode == "full";
        let (r, p) = pair();
        let mut storage = vec![0u8; 4096];
        let mw = r.pd.alloc_mw::<Type1>().unwrap();
        let exit = catch_unwind(AssertUnwindSafe(|| {
            r.pd.with_registered(&mut storage, access::WINDOW_BINDABLE, |mr| {
                let bound = scope(|s| {
                    let t = s.bind_mw(&p.b, mw, mr, 0, 4096, window::WRITE).unwrap();
                    s.wait(t, WAIT).unwrap().1.expect("bind")
                })
                .unwrap();
                std::mem::forget(bound);
                if !quiet {
                    eprintln!("child: the closure returns with a bound window leaked");
                }
            })
        }));
        if quiet {
            // Exit codes tell the parent what happened instead of an abort.
            std::process::exit(if exit.is_err() { 3 } else { 4 });
        }
        panic!("the closure's exit returned ({exit:?}) with a window still bound to borrowed memory");
    }
    let (status, stderr) = run_abort_child("1", std::process::Stdio::piped());
    assert_eq!(status.signal(), Some(6), "SIGABRT: {status:?}\n{stderr}");
    let returned_at = stderr.find("child: the closure returns").unwrap_or_else(|| panic!("{stderr}"));
    let abort_at = stderr.find("typed-verbs: ibv_dereg_mr").unwrap_or_else(|| panic!("the error first: {stderr}"));
    assert!(returned_at < abort_at, "{stderr}");
    assert!(stderr.contains("aborting"), "{stderr}");
}

/// The same child with its stderr on `/dev/full`: the error message cannot be written, and the
/// process must still abort (a message printed with `eprintln!` would panic there and unwind
/// out of the closure's exit, with the window still bound to memory its owner then frees).
#[test]
fn the_abort_comes_even_when_stderr_cannot_be_written() {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("open /dev/full");
    let (status, _) = run_abort_child("full", std::process::Stdio::from(full));
    assert_eq!(status.signal(), Some(6), "SIGABRT (exit code 3: the closure's exit unwound): {status:?}");
}

/// Runs [`ABORT_CHILD`] in a child process with `ABORT_CHILD_VAR=mode`; its exit status and
/// what it wrote to stderr (if `stderr` is piped).
fn run_abort_child(mode: &str, stderr: std::process::Stdio) -> (std::process::ExitStatus, String) {
    let exe = std::env::current_exe().expect("the path of this test binary");
    let mut child = std::process::Command::new(exe)
        .args([ABORT_CHILD, "--exact", "--nocapture", "--test-threads=1"])
        .env(ABORT_CHILD_VAR, mode)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start the child");
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child did not exit within {WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("the child's output");
    (status, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Raw memory (`register_raw`): the caller's contract kept (the memory is touched only through
/// the region until it is dropped), a WRITE into it and a READ out of it carry every byte; the
/// library never frees it (the `Vec` is still the caller's afterwards).
#[test]
#[allow(unsafe_code)] // `register_raw` is the unsafe form, under its contract
fn raw_memory_carries_traffic() {
    const LEN: usize = 7000;
    let (r, p) = pair();
    let want = pattern(LEN, 21);
    let mut src = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    src.as_mut_slice().copy_from_slice(&want);
    let mut back = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    let mut storage = vec![0u8; LEN];
    let ptr = storage.as_mut_ptr();
    // SAFETY: `storage` is valid, initialised, readable and writable for `LEN` bytes; it is not
    // touched (nor moved, nor dropped) until `mr` is dropped below.
    let mr = unsafe { r.pd.register_raw(ptr, LEN, access::REMOTE_RW) }.expect("register raw memory");
    assert_eq!((mr.addr(), mr.len()), (ptr as u64, LEN));
    assert_eq!(peer_write(&p, src.slice(..).unwrap(), mr.remote(..).unwrap()), WcStatus::Success);
    scope(|s| {
        let t = s.post_send(&p.a, wr::Read::new(back.slice_mut(..).unwrap(), mr.remote(..).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success(), "RDMA READ out of raw memory");
    })
    .unwrap();
    assert!(back.as_slice() == &want[..], "every byte through the READ");
    let remote = mr.remote(..).unwrap();
    drop(mr);
    assert!(storage == want, "every byte of the WRITE, in the caller's memory");
    storage.fill(0x77);
    assert_eq!(peer_write(&p, src.slice(..).unwrap(), remote), WcStatus::RemAccessErr, "deregistered on drop");
    assert!(storage.iter().all(|&b| b == 0x77));
    // SAFETY: the call returns an error (a null address), for which the contract asks nothing.
    let refused = unsafe { r.pd.register_raw(std::ptr::null_mut(), LEN, access::LOCAL_RW) };
    assert_refused(refused, "ibv_reg_mr", "a null address");
    // SAFETY: as above (no bytes).
    let refused = unsafe { r.pd.register_raw(storage.as_mut_ptr(), 0, access::LOCAL_RW) };
    assert_refused(refused, "ibv_reg_mr", "a memory region needs at least one byte");
}

/// A leaked raw region stays registered (the caller's contract then keeps the memory valid
/// forever, here a leaked box), and the library frees nothing: a peer still writes and reads it
/// through the rkey, and memory allocated afterwards keeps its sentinels.
#[test]
#[allow(unsafe_code)] // `register_raw` is the unsafe form, under its contract
fn a_forgotten_raw_region_stays_registered_and_frees_nothing() {
    const LEN: usize = 4096;
    let (r, p) = pair();
    let want = pattern(LEN, 17);
    let mut src = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    src.as_mut_slice().copy_from_slice(&want);
    let mut back = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    let leaked: &'static mut [u8] = Box::leak(vec![0u8; LEN].into_boxed_slice());
    let ptr = leaked.as_mut_ptr();
    // SAFETY: a leaked allocation: valid, initialised, readable and writable for ever, and
    // never touched again except through the region (the reference is not used after this).
    let mr = unsafe { r.pd.register_raw(ptr, LEN, access::REMOTE_RW) }.expect("register raw memory");
    let remote = mr.remote(..).unwrap();
    std::mem::forget(mr);
    let fresh: Vec<Vec<u8>> = (0..16).map(|_| vec![0x5Au8; LEN]).collect();
    assert_eq!(peer_write(&p, src.slice(..).unwrap(), remote), WcStatus::Success, "still registered");
    scope(|s| {
        let t = s.post_send(&p.a, wr::Read::new(back.slice_mut(..).unwrap(), remote)).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    assert!(back.as_slice() == &want[..], "the write landed in the leaked memory");
    assert!(fresh.iter().all(|v| v.iter().all(|&b| b == 0x5A)), "no other memory was written");
}

/// The buffer pool example (`examples/buffer_pool.rs`): the program's own arena registered once,
/// SENDs and RDMA WRITEs from disjoint slots at once, a gathered SEND, the arena handed back
/// and registered again as owned chunks; it checks every byte and exits 0 only if all is right.
/// (Built without features here: its arena is heap memory; the demo builds it with huge pages.)
#[test]
fn the_buffer_pool_example_checks_every_byte() {
    let args = [device_name(), gid_index().to_string()];
    let mut p = Proc::spawn("buffer_pool", &example("buffer_pool"), &args);
    let out = p.expect_success(Duration::from_secs(120));
    assert!(out.contains("buffer pool: every byte checked, all correct"), "{out}");
    assert!(out.contains("8 SENDs and 8 RDMA WRITEs from disjoint slots"), "{out}");
    assert!(out.contains("4 chunks sent in owned work requests"), "{out}");
}
