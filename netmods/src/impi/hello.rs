//! The hello that opens a direct channel: proof that the connecting
//! process is a proc of this run, and which one.

use crate::auth::{self, JobKey};

/// The hello a connecting proc sends (see [`hello`]).
const HELLO_MAGIC: &[u8; 4] = b"RIVI";
/// Its size: magic, two ranks, nonce, MAC.
pub const HELLO_LEN: usize = 28;

/// The hello global rank `from` sends when it connects to `to`: magic,
/// `from`, `to` (big-endian u32s), a fresh nonce, and the MAC of all that
/// keyed by the channel key every client of the run derived alike (from
/// the nonces their launchers exchanged, and the AUTH key when KEY was
/// negotiated). `to` in the MAC keeps a hello seen by one proc from being
/// replayed to another; each proc accepts one channel per peer.
pub fn hello(key: &JobKey, from: u32, to: u32, nonce: [u8; 8]) -> [u8; HELLO_LEN] {
    let mut h = [0u8; HELLO_LEN];
    h[..4].copy_from_slice(HELLO_MAGIC);
    h[4..8].copy_from_slice(&from.to_be_bytes());
    h[8..12].copy_from_slice(&to.to_be_bytes());
    h[12..20].copy_from_slice(&nonce);
    let mac = key.mac(&[b"rivet impi hello", &h[..20]]);
    h[20..].copy_from_slice(&mac);
    h
}

/// The sender of a hello addressed to `me`, if it proves `key`.
pub fn check_hello(key: &JobKey, me: u32, h: &[u8; HELLO_LEN]) -> Option<u32> {
    let from = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
    let to = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
    let mac = key.mac(&[b"rivet impi hello", &h[..20]]);
    (&h[..4] == HELLO_MAGIC && to == me && auth::same(&mac, &h[20..])).then_some(from)
}
