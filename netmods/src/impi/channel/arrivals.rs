//! What crosses between a channel and the engine: the `Arrivals` a
//! channel delivers to, a payload placed in the engine's memory, and the
//! engine header's envelope fields and framing inside an IMPI message.

use std::ptr::NonNull;

/// Where a channel hands what arrives (the netmod's `Sink`, for one peer).
pub trait Arrivals {
    /// A whole engine message.
    fn deliver(&mut self, header: &[u8], payload: &[u8]);

    /// A message with this engine header and a `len`-byte payload is
    /// arriving: `Some(dst)` to have the payload written there, then
    /// `deliver`ed with exactly that memory (`Sink::place`'s contract).
    fn place(&mut self, header: &[u8], len: usize) -> Option<NonNull<u8>> {
        let _ = (header, len);
        None
    }
}

impl<F: FnMut(&[u8], &[u8])> Arrivals for F {
    fn deliver(&mut self, header: &[u8], payload: &[u8]) {
        self(header, payload)
    }
}

/// A payload being received straight into the engine's memory.
pub(super) struct Placing {
    pub(super) dst: NonNull<u8>,
    pub(super) len: usize,
    pub(super) got: usize,
}

// SAFETY: the pointer is used only by the channel holding it, from the
// thread driving the netmod (the engine serialises them); the engine keeps
// the memory valid until `deliver` or the peer's failure (Sink::place).
unsafe impl Send for Placing {}

/// `(pk_lsrank, pk_tag, pk_cid)` from an engine header: its sender's rank
/// in the communicator (`src`, bytes 12..16), tag (8..12) and context id
/// (4..8), in the engine's native byte order. The engine checks these
/// offsets against its `WireHeader` in a test; a header too short for
/// them (never sent by the engine) gives zeros.
pub fn engine_envelope(header: &[u8]) -> (i32, i32, u64) {
    if header.len() < 16 {
        return (0, 0, 0);
    }
    let word = |at: usize| {
        u32::from_ne_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    (word(12) as i32, word(8) as i32, word(4) as u64)
}

/// An engine message's (header, payload) from its IMPI user data.
pub fn split_message(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_be_bytes(buf.get(..4)?.try_into().ok()?) as usize;
    let rest = &buf[4..];
    (len <= rest.len()).then(|| rest.split_at(len))
}
