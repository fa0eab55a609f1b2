//! What `peer_memory` (both roles) and the two-host tests share: the bytes exchanged after the
//! QP addresses of the pingpong exchange (`client_exchange_with` / `Listener::accept_with`),
//! the path MTU rule, and the pattern the server's region starts with.
//!
//! - client → server, after its address: its port's active MTU in bytes (`u32`, little endian);
//! - server → client, after its address: the [`WindowAdvert`] of what the client may use (a
//!   memory window, or the whole region), then the server's port's active MTU (`u32`, LE).

#![allow(dead_code)]

use typed_verbs::device::Mtu;
use typed_verbs::mw::WindowAdvert;

/// The client's extra bytes.
pub const CLIENT_EXTRA: usize = 4;
/// The server's extra bytes.
pub const SERVER_EXTRA: usize = WindowAdvert::LEN + 4;

/// The region's byte at `offset` before anyone wrote to it.
pub fn pattern(offset: usize) -> u8 {
    (offset as u8).wrapping_mul(7).wrapping_add(3)
}

/// The little-endian `u64` the pattern holds at `offset` (what an atomic there finds first).
pub fn pattern_word(offset: usize) -> u64 {
    let mut b = [0u8; 8];
    for (i, x) in b.iter_mut().enumerate() {
        *x = pattern(offset + i);
    }
    u64::from_le_bytes(b)
}

/// The server's extra bytes.
pub fn encode_server(advert: &WindowAdvert, mtu: Mtu) -> Vec<u8> {
    let mut v = advert.encode().to_vec();
    v.extend_from_slice(&mtu.bytes().to_le_bytes());
    v
}

/// Decodes the server's extra bytes: what the client may use, and the server's port MTU.
///
/// # Errors
/// A wrong length, a bad advertisement or an MTU that is not an IB MTU.
pub fn decode_server(bytes: &[u8]) -> Result<(WindowAdvert, Mtu), String> {
    if bytes.len() != SERVER_EXTRA {
        return Err(format!("server sent {} extra bytes, expected {SERVER_EXTRA}", bytes.len()));
    }
    let advert = WindowAdvert::decode(&bytes[..WindowAdvert::LEN]).map_err(|e| e.to_string())?;
    let mtu = u32::from_le_bytes(bytes[WindowAdvert::LEN..].try_into().expect("4 bytes"));
    Ok((advert, mtu_from_bytes(mtu)?))
}

/// Decodes the client's extra bytes: its port MTU.
///
/// # Errors
/// A wrong length or an MTU that is not an IB MTU.
pub fn decode_client(bytes: &[u8]) -> Result<Mtu, String> {
    let b: [u8; CLIENT_EXTRA] =
        bytes.try_into().map_err(|_| format!("client sent {} extra bytes, expected {CLIENT_EXTRA}", bytes.len()))?;
    mtu_from_bytes(u32::from_le_bytes(b))
}

/// The IB MTU of `bytes` (256, 512, 1024, 2048 or 4096).
///
/// # Errors
/// Any other value.
pub fn mtu_from_bytes(bytes: u32) -> Result<Mtu, String> {
    [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096]
        .into_iter()
        .find(|m| m.bytes() == bytes)
        .ok_or_else(|| format!("{bytes} is not an IB MTU (256, 512, 1024, 2048, 4096)"))
}

/// The path MTU two ports can both carry: the smaller of their active MTUs.
pub fn negotiate(mine: Mtu, theirs: Mtu) -> Mtu {
    mine.min(theirs)
}
