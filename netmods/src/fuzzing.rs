//! Entry points for the fuzz targets (`fuzz/`): the decoders a peer's
//! bytes reach, driven from outside the crate without making them public.
//! Each takes arbitrary bytes, must not panic, and asserts what must hold
//! whatever a peer sends.

use std::ptr::NonNull;

use crate::tcp::conn::{Rx, RX_BUF};
use crate::tcp::wire::{self, Hello, HELLO_MAX};
use crate::{PeerId, Sink};

/// Records what the `Rx` hands over; places big payloads when asked to.
struct Rec {
    place: bool,
    dst: Vec<Box<[u8]>>,
    frames: usize,
    /// The largest placed buffer given out: bounded by what a "receive"
    /// could be (the fuzz input decides nothing about real memory).
    placed_bytes: usize,
}

/// Largest receive the fuzz sink pretends to have posted.
const FUZZ_PLACE_MAX: usize = 4 << 20;

impl Sink for Rec {
    fn deliver(&mut self, _: PeerId, h: &[u8], _: &[u8]) {
        assert!(h.len() <= wire::MAX_HEADER);
        self.frames += 1;
    }
    fn place(&mut self, _: PeerId, _: &[u8], len: usize) -> Option<NonNull<u8>> {
        if !self.place || len > FUZZ_PLACE_MAX || self.placed_bytes + len > 4 * FUZZ_PLACE_MAX {
            return None;
        }
        self.placed_bytes += len;
        let mut b = vec![0u8; len].into_boxed_slice();
        let p = NonNull::new(b.as_mut_ptr());
        self.dst.push(b);
        p
    }
    fn peer_failed(&mut self, _: PeerId, _: &str) {}
}

/// The tcp netmod's frame parser over one connection's bytes.
///
/// `data[0]`: bit 0 = the sink places large payloads; the next two bytes
/// the receive chunk size (0 = as much as fits). The rest is the stream.
/// Asserts that the connection never holds more than its receive budget
/// (input buffer plus the largest unplaced piece), whatever lengths the
/// frames announce.
pub fn tcp_frames(data: &[u8]) {
    const BUDGET: usize = 1 << 20;
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (step, stream) = match rest {
        [a, b, s @ ..] => (u16::from_le_bytes([*a, *b]) as usize, s),
        _ => (0, rest),
    };
    let step = if step == 0 { usize::MAX } else { step };
    let mut rx = Rx::new(BUDGET);
    let mut sink = Rec {
        place: flags & 1 != 0,
        dst: Vec::new(),
        frames: 0,
        placed_bytes: 0,
    };
    let mut off = 0;
    while off < stream.len() {
        let (ptr, room) = rx.target();
        assert!(room > 0, "Rx::target offered no room");
        let k = room.min(step).min(stream.len() - off);
        // SAFETY: `target` gives `room` writable bytes, `k <= room`.
        unsafe { std::ptr::copy_nonoverlapping(stream[off..].as_ptr(), ptr, k) };
        rx.received(k);
        off += k;
        let parsed = rx.parse(7, &mut sink);
        assert!(
            rx.footprint() <= RX_BUF + BUDGET,
            "a peer made one connection hold {} bytes",
            rx.footprint()
        );
        if parsed.is_err() {
            break;
        }
    }
    // The frames delivered never outnumber what the bytes could hold.
    assert!(sink.frames <= stream.len() / wire::PREFIX + 1);
}

/// The tcp HELLO and VERDICT parsers over every prefix of `data`, and a
/// round trip of any HELLO that parses.
pub fn tcp_handshake(data: &[u8]) {
    let data = &data[..data.len().min(HELLO_MAX + 8)];
    let _ = wire::parse_verdict(data);
    if data.is_empty() {
        return;
    }
    for end in 1..=data.len() {
        match wire::parse_hello(&data[..end]) {
            Hello::Done {
                kind,
                id,
                job,
                nonce,
                mac,
            } => {
                assert_eq!(end, data.len().min(end), "Done only for whole HELLOs");
                let mut auth = [0u8; wire::HELLO_AUTH];
                auth[..8].copy_from_slice(&nonce);
                auth[8..].copy_from_slice(&mac);
                let mut buf = [0u8; HELLO_MAX];
                let n = wire::encode_hello(&mut buf, kind, id, job, &auth);
                assert_eq!(&buf[..n], &data[..end], "HELLO round trip");
                // Anything after a whole HELLO is refused.
                if end < data.len() {
                    assert!(matches!(wire::parse_hello(&data[..end + 1]), Hello::Bad(_)));
                }
                break;
            }
            Hello::Bad(_) | Hello::LongJob => break,
            Hello::Partial => {}
        }
    }
    let _ = crate::tcp::card::parse(&String::from_utf8_lossy(data));
    #[cfg(feature = "ofi")]
    {
        let _ = crate::ofi::wire::parse_hello(data);
        let _ = crate::ofi::wire::parse_verdict(data);
        if let Ok((h, rest)) = crate::ofi::wire::split_body(data) {
            assert!(
                h.len() <= 256 && h.len() + rest.len() + crate::ofi::wire::PREFIX == data.len()
            );
            let _ = crate::ofi::wire::parse_large_suffix(rest);
        }
    }
}

/// The ofi netmod's connection table and receive order over sequences of
/// HELLOs (forged ones among them), VERDICTs and messages in sequence
/// (`ofi/fuzz.rs` has the steps and what is asserted). Without the `ofi`
/// feature: nothing.
pub fn ofi_sequences(data: &[u8]) {
    #[cfg(feature = "ofi")]
    crate::ofi::fuzz::sequences(data);
    #[cfg(not(feature = "ofi"))]
    let _ = data;
}
