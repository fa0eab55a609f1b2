//! Host property tests of pure parts of the public API: window advertisements (a wire format
//! peers send) and remote slicing. Deterministic pseudo-random inputs, no dependency.

use typed_verbs::access::{self, window};
use typed_verbs::mr::RemoteSlice;
use typed_verbs::mw::WindowAdvert;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn window_adverts_round_trip_and_garbage_never_panics() {
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    for _ in 0..20_000 {
        let a = WindowAdvert {
            addr: rng.next(),
            len: rng.next(),
            rkey: rng.next() as u32,
            zero_based: rng.next() & 1 == 1,
            rights: rng.next() as u32
                & (typed_verbs::sys::IBV_ACCESS_REMOTE_WRITE
                    | typed_verbs::sys::IBV_ACCESS_REMOTE_READ
                    | typed_verbs::sys::IBV_ACCESS_REMOTE_ATOMIC),
        };
        assert_eq!(WindowAdvert::decode(&a.encode()).unwrap(), a);
        // Arbitrary bytes of arbitrary length: an error or a value, never a panic.
        let len = (rng.next() % 40) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        match WindowAdvert::decode(&bytes) {
            Ok(d) => {
                assert_eq!(bytes.len(), WindowAdvert::LEN);
                assert_eq!(d.encode().as_slice(), bytes.as_slice());
            }
            // The length is checked first, then the flags byte: which refusal is known.
            Err(e) => {
                let why = if bytes.len() != WindowAdvert::LEN { "bytes, expected" } else { "unknown flags" };
                assert!(
                    matches!(&e, typed_verbs::Error::InvalidArgument { verb: "WindowAdvert::decode", reason }
                        if reason.contains(why)),
                    "{} bytes: expected the refusal for {why:?}, got {e:?}",
                    bytes.len()
                );
            }
        }
        // The addressing mode must match the rights type, which asks no right not granted.
        let write = typed_verbs::sys::IBV_ACCESS_REMOTE_WRITE;
        assert_eq!(a.remote::<window::Write>().is_ok(), !a.zero_based && a.rights & write != 0);
    }
}

/// A slice is accepted exactly when it lies inside the remote region and its address is
/// representable: `off + n <= len` without overflow, and `addr + off` without overflow. The
/// address comes from the wire (a peer's advertisement), so it is drawn from the whole `u64`
/// range, a quarter of the time within `len` of `u64::MAX`, where `addr + off` overflows.
#[test]
fn remote_slicing_stays_inside_and_never_overflows() {
    let mut rng = Rng(42);
    let mut address_overflows = 0;
    for _ in 0..50_000 {
        let len = rng.next() % (1 << 40);
        let addr = if rng.next() % 4 == 0 { u64::MAX - rng.next() % (len + 1) } else { rng.next() };
        let base = RemoteSlice::<access::RemoteRw>::from_wire(addr, len, 7);
        let (off, n) = match rng.next() % 3 {
            0 => (rng.next(), rng.next()),
            1 => (rng.next() % (len + 1), rng.next() % (len + 1)),
            _ => (len, 0),
        };
        let inside = off.checked_add(n).is_some_and(|end| end <= len);
        let at = addr.checked_add(off);
        address_overflows += usize::from(inside && at.is_none());
        match base.slice(off, n) {
            Ok(s) => {
                assert!(inside, "{off}+{n} accepted in a region of {len}");
                assert_eq!((Some(s.addr()), s.len(), s.rkey()), (at, n, 7), "{addr:#x}+{off}");
            }
            Err(_) => assert!(!inside || at.is_none(), "{off}+{n} refused in a region of {len} at {addr:#x}"),
        }
    }
    // The draws reach the address overflow, not only the length overflow.
    assert!(address_overflows > 1000, "only {address_overflows} slices whose address overflows");
}
