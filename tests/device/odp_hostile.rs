//! Hostile programs against the On-Demand Paging regions, in safe code only. Each test asserts
//! what the promise "if it compiles, it is sound" needs; on a device without ODP it asserts the
//! typed refusal instead.
//!
//! - The kernel's shared zero page. An untouched page of an anonymous private mapping that is
//!   *read* (by the program, or by the device for a SEND or a peer's READ) is mapped to the
//!   kernel's one shared zero page, and the 6.18 backport's rxe then places a device *write*
//!   into that page in the zero page itself, so untouched pages of every later mapping read the
//!   written bytes: zeroed allocations (`vec![None::<&T>; n]` is `alloc_zeroed`) would hold
//!   garbage in safe code, in every process. These tests write the pattern in safe code: a
//!   buffer read, then received into (or read by the device, then written); afterwards the zero
//!   page (read through a new private anonymous mapping) and a new ODP region must read as
//!   zeros, and ODP memory must be a memfd's shared mapping, which has no zero page behind it.
//!
//! Observed on the 6.18.15 backport's rxe while ODP memory was anonymous and private: A
//! (program read, then a RECV) was clean; B (the device reads an untouched page for a SEND,
//! then a RECV writes it) and C (a peer's RDMA READ of an untouched page of a REMOTE_RW
//! region, then its RDMA WRITE, with no action of the region's owner at all) both wrote the
//! kernel's zero page. With the memfd, all three leave fresh memory zero.
//!
//! - A capability queried on another device context: refused by the region's registration
//!   (it may promise what this device lacks, or miss that its ODP writes land at page starts).
//!
//! - Remote rights a capability did not verify: a region open to a peer's WRITE, READ or
//!   atomic on ODP memory needs that operation verified for its transport (the ODP manual's
//!   per-transport capability bits); otherwise the registration refuses it.

use typed_verbs::odp::{OdpCap, OdpOps};
use typed_verbs::prelude::*;

use crate::common::*;
use crate::odp::odp_cap;

const PAGE: usize = 4096;
const LEN: usize = 64;

/// A SEND on `p.a` from `from`, received on `p.b` into `into`; both complete successfully.
fn send_recv(p: &RcPair, from: LocalBuf<'_>, into: LocalBufMut<'_>) {
    scope(|s| {
        let r = s.post_recv(&p.b, wr::Recv::new(into)).unwrap();
        let t = s.post_send(&p.a, wr::Send::new(from)).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        assert!(s.wait(r, WAIT).unwrap().0.is_success());
    })
    .unwrap();
}

/// Where a sentinel byte shows up in memory that must read as zeros: the kernel's shared zero
/// page itself, read through the untouched pages of a new private anonymous mapping (each read
/// fault of such a page maps the zero page; huge pages are refused before the first fault, so
/// that no huge zero page stands in for it), and the untouched pages of a new ODP region (read
/// through `as_slice`).
fn zero_page_probe(pd: &Pd, cap: &OdpCap<RC>) -> Vec<(String, usize, u8)> {
    let mut seen = Vec::new();
    if let Some((i, b)) = zero_page_bytes(4) {
        seen.push(("the zero page (a new private anonymous mapping)".to_string(), i, b));
    }
    let fresh = pd.alloc_mr_odp(4 * PAGE, access::LOCAL_RW, cap).unwrap();
    if let Some((i, &b)) = fresh.as_slice().iter().enumerate().find(|(_, &b)| b != 0) {
        seen.push(("a new ODP region".to_string(), i, b));
    }
    seen
}

/// The first nonzero byte (offset, value) of `pages` untouched pages of a new private anonymous
/// read-only mapping, each read once: what the kernel's shared zero page holds.
#[allow(unsafe_code)] // mmap(2): the zero page is reached through a private anonymous mapping only
fn zero_page_bytes(pages: usize) -> Option<(usize, u8)> {
    let len = pages * PAGE;
    // SAFETY: a new private anonymous mapping of `len` bytes that nothing else knows of; it is
    // only read (each read stays inside it) and unmapped before returning.
    unsafe {
        let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
        assert_ne!(p, libc::MAP_FAILED, "mmap(2): {}", std::io::Error::last_os_error());
        let no_thp = libc::madvise(p, len, libc::MADV_NOHUGEPAGE);
        assert_eq!(no_thp, 0, "madvise(MADV_NOHUGEPAGE): {}", std::io::Error::last_os_error());
        let bytes = p.cast::<u8>();
        let found = (0..len).map(|i| (i, bytes.add(i).read_volatile())).find(|&(_, b)| b != 0);
        assert_eq!(libc::munmap(p, len), 0, "munmap(2): {}", std::io::Error::last_os_error());
        found
    }
}

/// Three ways, in safe code, to have the device write into an ODP page that was only read
/// since it was mapped; after each, the kernel's zero page and freshly zeroed memory of the
/// process must read as zeros.
/// ODP memory is a shared memory file's (`Pd::alloc_mr_odp`), whose read faults allocate
/// pages of its own: on the 6.18 backport's rxe, B and C wrote the kernel's zero page while
/// the memory was anonymous and private.
#[test]
fn device_writes_into_read_only_odp_pages_never_reach_the_zero_page() {
    let ctx = open();
    let ops = OdpOps::SEND | OdpOps::RECV | OdpOps::WRITE | OdpOps::READ;
    let Some(cap) = odp_cap::<RC>(&ctx, ops) else { return };
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(512).unwrap();
    let p = rc_pair(&pd, &cq, &cq, Access::NONE.remote_write().remote_read(), QpCaps::default());
    let mut src = pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    let mut sink = pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    assert!(zero_page_probe(&pd, &cap).is_empty(), "fresh memory reads as zeros before any attack");
    // ODP memory is a shared memory file's (no zero page behind it): its mapping is the memfd's.
    let probe = pd.alloc_mr_odp(PAGE, access::LOCAL_RW, &cap).unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    let line = maps
        .lines()
        .find(|l| {
            let range = l.split_whitespace().next().unwrap_or("");
            let (lo, hi) = range.split_once('-').unwrap_or(("0", "0"));
            let (lo, hi) = (u64::from_str_radix(lo, 16).unwrap_or(0), u64::from_str_radix(hi, 16).unwrap_or(0));
            (lo..hi).contains(&probe.addr())
        })
        .unwrap_or_else(|| panic!("no mapping holds {:#x}", probe.addr()));
    assert!(line.contains("memfd:typed-verbs-odp") && line.contains(" rw-s "), "{line}");
    drop(probe);
    let mut leaks = Vec::new();

    // A: the program reads a page of a LOCAL_RW ODP region (`as_slice`, safe: no peer can
    // write it), then receives into it.
    let mut victim = pd.alloc_mr_odp(PAGE, access::LOCAL_RW, &cap).unwrap();
    assert_eq!(victim.as_slice()[0], 0, "an untouched ODP page reads as zero");
    src.as_mut_slice().fill(0xa1);
    send_recv(&p, src.slice(..).unwrap(), victim.slice_mut(..LEN).unwrap());
    leaks.extend(zero_page_probe(&pd, &cap).into_iter().map(|l| ("A: program read, then RECV", l)));
    drop(victim);

    // B: no program access at all: the device reads an untouched page (a SEND from it), then
    // writes it (a RECV into it).
    let mut victim = pd.alloc_mr_odp(PAGE, access::LOCAL_RW, &cap).unwrap();
    src.as_mut_slice().fill(0xb2);
    send_recv(&p, victim.slice(..LEN).unwrap(), sink.slice_mut(..).unwrap());
    send_recv(&p, src.slice(..).unwrap(), victim.slice_mut(..LEN).unwrap());
    leaks.extend(
        zero_page_probe(&pd, &cap)
            .into_iter()
            .filter(|l| l.2 == 0xb2)
            .map(|l| ("B: device read (SEND), then device write (RECV)", l)),
    );
    drop(victim);

    // C: only a peer acts: an RDMA READ of an untouched page of a REMOTE_RW ODP region, then an
    // RDMA WRITE into it. The region's owner does nothing at all.
    let target = pd.alloc_mr_odp(PAGE, access::REMOTE_RW, &cap).unwrap();
    src.as_mut_slice().fill(0xc3);
    scope(|s| {
        let t = s.post_send(&p.a, wr::Read::new(sink.slice_mut(..).unwrap(), target.remote(..LEN).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        let t = s.post_send(&p.a, wr::Write::new(src.slice(..).unwrap(), target.remote(..LEN).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    leaks.extend(
        zero_page_probe(&pd, &cap)
            .into_iter()
            .filter(|l| l.2 == 0xc3)
            .map(|l| ("C: peer RDMA READ, then peer RDMA WRITE", l)),
    );
    drop(target);

    assert!(
        leaks.is_empty(),
        "device writes reached the kernel's shared zero page: freshly zeroed memory reads nonzero \
         (trigger, (where, offset, byte)): {leaks:?}"
    );
}

/// An ODP capability is its context's word: a PD of another context (here a second context of
/// the same device, which numbers its objects alike) refuses it before registering anything,
/// and takes the one its own context reports.
#[test]
fn an_odp_capability_of_another_context_is_refused() {
    let (a, b) = (open(), open());
    let Some(cap_a) = odp_cap::<RC>(&a, OdpOps::RECV) else { return };
    let pd_b = b.alloc_pd().unwrap();
    match pd_b.alloc_mr_odp(PAGE, access::LOCAL_RW, &cap_a) {
        Err(Error::InvalidArgument { verb, reason }) => {
            assert_eq!(verb, "ibv_reg_mr");
            assert!(reason.contains("another device context"), "{reason}");
        }
        other => panic!("a capability of another context must be refused: {:?}", other.map(|_| ())),
    }
    let cap_b = odp_cap::<RC>(&b, OdpOps::RECV).expect("the same device reports the same");
    assert_eq!(pd_b.alloc_mr_odp(PAGE, access::LOCAL_RW, &cap_b).unwrap().len(), PAGE);
}

/// A capability that verified SEND alone does not open an ODP region to a peer's WRITE or
/// READ (nor one of UD, a transport without RDMA); one that verified WRITE and READ does.
#[test]
fn remote_rights_an_odp_capability_did_not_verify_are_refused() {
    let ctx = open();
    let Some(send_only) = odp_cap::<RC>(&ctx, OdpOps::SEND) else { return };
    let pd = ctx.alloc_pd().unwrap();
    let refused = |r: Result<Mr<access::RemoteRw, typed_verbs::mr::Odp>>, what: &str| match r {
        Err(Error::InvalidArgument { verb, reason }) => {
            assert_eq!(verb, "ibv_reg_mr", "{what}");
            assert!(reason.contains("verified"), "{what}: {reason}");
        }
        other => panic!("{what}: must be refused, got {:?}", other.map(|m| m.len())),
    };
    refused(pd.alloc_mr_odp(PAGE, access::REMOTE_RW, &send_only), "REMOTE_RW with RC SEND verified");
    // The local side of the same capability still registers.
    assert_eq!(pd.alloc_mr_odp(PAGE, access::LOCAL_RW, &send_only).unwrap().len(), PAGE);
    if let Some(ud) = odp_cap::<UD>(&ctx, OdpOps::SEND) {
        refused(pd.alloc_mr_odp(PAGE, access::REMOTE_RW, &ud), "REMOTE_RW with UD SEND verified");
    }
    let rw = odp_cap::<RC>(&ctx, OdpOps::WRITE | OdpOps::READ).expect("rxe's RC ODP has WRITE and READ with SEND");
    assert_eq!(pd.alloc_mr_odp(PAGE, access::REMOTE_RW, &rw).unwrap().len(), PAGE);
}
