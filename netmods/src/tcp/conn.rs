//! The receiving half of a connection, shared by both backends so framing
//! behaves identically: [`Rx`] turns received bytes into frames (and steers
//! large payloads straight into the engine's memory); the sending half is
//! `outq.rs`.
//!
//! Backends only ask where to receive next ([`Rx::target`]) and report how
//! many bytes landed ([`Rx::received`]). For io_uring the memory behind a
//! target must not move while an operation uses it: `Rx` only moves bytes
//! inside `target` and `parse`, which a backend calls when no receive is in
//! flight.

use std::ptr::NonNull;

use crate::{PeerId, Sink};

use super::wire::{self, MAX_HEADER, PREFIX};

/// Input buffer per connection, allocated once: room for many small frames
/// per receive call, and for every frame the engine sends eagerly.
pub(crate) const RX_BUF: usize = 256 * 1024;
/// Payloads above this are offered to `Sink::place` once their header is
/// in: below it the copy out of the input buffer is cheaper than the extra
/// receive call into the engine's memory.
pub(crate) const PLACE_MIN: usize = 16 * 1024;

/// Where the engine asked a payload to be written (`Sink::place`).
struct Dst(NonNull<u8>);

// SAFETY: the pointer is only used by the netmod that holds it, from
// whichever thread drives that netmod (the engine serialises them); the
// engine keeps the memory valid until `deliver` or `peer_failed`.
unsafe impl Send for Dst {}

enum RxState {
    /// Frames are parsed out of the input buffer. `declined`: the frame at
    /// `start` was offered to `place` and refused, so it is not offered again.
    Frames { declined: bool },
    /// The payload of the current frame goes to `dst`.
    Placed {
        hdr: [u8; MAX_HEADER],
        hlen: usize,
        dst: Dst,
        len: usize,
        got: usize,
    },
    /// The payload of the current frame is larger than the input buffer and
    /// goes to the overflow buffer.
    Overflow {
        hdr: [u8; MAX_HEADER],
        hlen: usize,
        len: usize,
        got: usize,
    },
}

/// Receive side of an accepted connection.
pub(crate) struct Rx {
    buf: Box<[u8]>,
    /// Unparsed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    state: RxState,
    /// For frames that do not fit `buf` and were not placed; kept (and only
    /// ever grown) for reuse, up to `max_unplaced`.
    overflow: Vec<u8>,
    /// Largest payload buffered without a place for it (the largest piece
    /// a peer may send unasked): a longer frame that `Sink::place` declines
    /// is a protocol violation, so no peer makes us allocate more than this.
    max_unplaced: usize,
}

/// What `Rx::step` did.
enum Step {
    /// A placed or overflowing frame, now whole, went to the sink.
    Delivered,
    /// The frame at `start` now goes to a place of its own.
    Moved,
    /// Nothing more until more bytes come.
    Wait,
}

impl Rx {
    /// `max_unplaced`: see the field; at least the input buffer.
    pub(crate) fn new(max_unplaced: usize) -> Rx {
        Rx {
            buf: vec![0u8; RX_BUF].into_boxed_slice(),
            start: 0,
            end: 0,
            state: RxState::Frames { declined: false },
            overflow: Vec::new(),
            max_unplaced: max_unplaced.max(RX_BUF),
        }
    }

    /// Bytes this connection holds for framing (the bound a peer can make
    /// it allocate: `RX_BUF` + `max_unplaced`).
    pub(crate) fn footprint(&self) -> usize {
        self.buf.len() + self.overflow.capacity()
    }

    /// Where the next receive should write, and at most how many bytes.
    /// Never empty. May move buffered bytes, so it must not be called while
    /// a receive into the previous target is in flight. The case of every
    /// empty read of a busy wait (nothing buffered between frames) is
    /// inline; the rest is a call (`target_rest`, some 20 instructions).
    #[inline(always)]
    pub(crate) fn target(&mut self) -> (*mut u8, usize) {
        if matches!(self.state, RxState::Frames { .. }) && self.start == self.end {
            self.start = 0;
            self.end = 0;
            return (self.buf.as_mut_ptr(), self.buf.len());
        }
        self.target_rest()
    }

    /// [`target`](Self::target) with bytes buffered, or while placing.
    #[inline(never)]
    fn target_rest(&mut self) -> (*mut u8, usize) {
        match &mut self.state {
            RxState::Placed { dst, len, got, .. } => {
                // SAFETY: `got < len` while placed and `dst..dst+len` is the
                // engine's writable memory (Sink::place contract).
                (unsafe { dst.0.as_ptr().add(*got) }, *len - *got)
            }
            RxState::Overflow { len, got, .. } => {
                // SAFETY: `overflow.len() >= len > got` (set on entering).
                (unsafe { self.overflow.as_mut_ptr().add(*got) }, *len - *got)
            }
            RxState::Frames { .. } => {
                if self.buf.len() - self.end < RX_BUF / 4 {
                    // Whatever is left is one partial frame that fits the
                    // buffer (parse guarantees it): slide it to the front.
                    self.buf.copy_within(self.start..self.end, 0);
                    self.end -= self.start;
                    self.start = 0;
                }
                let free = self.buf.len() - self.end;
                // SAFETY: end <= buf.len().
                (unsafe { self.buf.as_mut_ptr().add(self.end) }, free)
            }
        }
    }

    /// `n` bytes were written at the last target.
    #[inline]
    pub(crate) fn received(&mut self, n: usize) {
        match &mut self.state {
            RxState::Placed { got, .. } | RxState::Overflow { got, .. } => *got += n,
            RxState::Frames { .. } => self.end += n,
        }
    }

    /// Hands every whole frame to `sink`; returns how many. `Err` is a
    /// protocol violation: the connection must be dropped.
    ///
    /// Inline, the frames already whole in the input buffer (every small
    /// message); the rest (a partial frame, placement, overflow) out of
    /// line in `step`, whose set-up cost some 30 instructions a message
    /// (callgrind).
    #[inline]
    pub(crate) fn parse(
        &mut self,
        peer: PeerId,
        sink: &mut dyn Sink,
    ) -> Result<usize, &'static str> {
        let mut count = 0;
        loop {
            if let RxState::Frames { declined } = &mut self.state {
                loop {
                    let avail = self.end - self.start;
                    if avail < PREFIX {
                        return Ok(count);
                    }
                    let s = self.start;
                    let mut p = [0u8; PREFIX];
                    p.copy_from_slice(&self.buf[s..s + PREFIX]);
                    let (hlen, plen) = wire::parse_prefix(&p)?;
                    let total = PREFIX + hlen + plen;
                    if avail < total {
                        break;
                    }
                    let h = s + PREFIX;
                    let body = h + hlen;
                    sink.deliver(peer, &self.buf[h..body], &self.buf[body..s + total]);
                    self.start += total;
                    *declined = false;
                    count += 1;
                }
            }
            match self.step(peer, sink)? {
                Step::Delivered => count += 1,
                Step::Moved => {}
                Step::Wait => return Ok(count),
            }
        }
    }

    /// One move `parse`'s loop cannot make inline: a placed or overflowing
    /// frame delivered once whole, or the partial frame at `start` given a
    /// place (the engine's memory, else the overflow buffer) for the rest
    /// of its payload.
    #[inline(never)]
    fn step(&mut self, peer: PeerId, sink: &mut dyn Sink) -> Result<Step, &'static str> {
        match &mut self.state {
            RxState::Placed {
                hdr,
                hlen,
                dst,
                len,
                got,
            } => {
                if got < len {
                    return Ok(Step::Wait);
                }
                // SAFETY: the engine gave `dst..dst+len` for this payload
                // and we wrote all `len` bytes of it.
                let payload = unsafe { std::slice::from_raw_parts(dst.0.as_ptr(), *len) };
                sink.deliver(peer, &hdr[..*hlen], payload);
            }
            RxState::Overflow {
                hdr,
                hlen,
                len,
                got,
            } => {
                if got < len {
                    return Ok(Step::Wait);
                }
                sink.deliver(peer, &hdr[..*hlen], &self.overflow[..*len]);
            }
            RxState::Frames { declined } => {
                // `parse` saw this frame's prefix and that it is not whole.
                let s = self.start;
                let avail = self.end - s;
                let mut p = [0u8; PREFIX];
                p.copy_from_slice(&self.buf[s..s + PREFIX]);
                let (hlen, plen) = wire::parse_prefix(&p)?;
                let total = PREFIX + hlen + plen;
                if avail < PREFIX + hlen || plen <= PLACE_MIN || *declined {
                    return Ok(Step::Wait);
                }
                let h = s + PREFIX;
                let body = h + hlen;
                let have = self.end - body;
                let mut hdr = [0u8; MAX_HEADER];
                hdr[..hlen].copy_from_slice(&self.buf[h..body]);
                match sink.place(peer, &hdr[..hlen], plen) {
                    Some(dst) => {
                        // SAFETY: `dst` has room for `plen > have` bytes
                        // (Sink::place contract) and cannot overlap our
                        // private buffer.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                self.buf.as_ptr().add(body),
                                dst.as_ptr(),
                                have,
                            )
                        };
                        self.state = RxState::Placed {
                            hdr,
                            hlen,
                            dst: Dst(dst),
                            len: plen,
                            got: have,
                        };
                    }
                    None if total <= self.buf.len() => {
                        *declined = true;
                        return Ok(Step::Wait);
                    }
                    None if plen > self.max_unplaced => {
                        return Err("protocol error: a frame larger than the largest \
                                    piece with no receive posted for it");
                    }
                    None => {
                        if self.overflow.len() < plen {
                            self.overflow.resize(plen, 0);
                        }
                        self.overflow[..have].copy_from_slice(&self.buf[body..self.end]);
                        self.state = RxState::Overflow {
                            hdr,
                            hlen,
                            len: plen,
                            got: have,
                        };
                    }
                }
                self.start = 0;
                self.end = 0;
                return Ok(Step::Moved);
            }
        }
        // A placed or overflowed frame was delivered.
        self.state = RxState::Frames { declined: false };
        Ok(Step::Delivered)
    }

    /// Payload bytes still to come into the placement destination or the
    /// overflow buffer: `target` is exactly the rest of the frame, so a
    /// receive may wait for all of it (0 otherwise).
    pub(crate) fn exact_left(&self) -> usize {
        match &self.state {
            RxState::Placed { len, got, .. } | RxState::Overflow { len, got, .. } => len - got,
            RxState::Frames { .. } => 0,
        }
    }

    /// Bytes of the frame in progress still to come (0 between frames, or
    /// while its prefix is incomplete): a backend with buffers of its own
    /// receives a long remainder straight into `target` instead.
    pub(crate) fn frame_left(&self) -> usize {
        match &self.state {
            RxState::Frames { .. } => {
                let avail = self.end - self.start;
                if avail < PREFIX {
                    return 0;
                }
                let mut p = [0u8; PREFIX];
                p.copy_from_slice(&self.buf[self.start..self.start + PREFIX]);
                wire::parse_prefix(&p).map_or(0, |(hlen, plen)| {
                    (PREFIX + hlen + plen).saturating_sub(avail)
                })
            }
            _ => self.exact_left(),
        }
    }

    /// Whether a placement pointer is held (dropped with the `Rx`).
    pub(crate) fn placed(&self) -> bool {
        matches!(self.state, RxState::Placed { .. })
    }

    /// Forgets the frame in progress and every buffered byte, and with them
    /// any placement pointer: the connection's input is discarded from now
    /// on (its peer was disconnected). Keeps the buffers, which a receive
    /// in flight may still be writing into; not while one writes into a
    /// placement destination.
    pub(crate) fn discard(&mut self) {
        self.state = RxState::Frames { declined: false };
        self.start = 0;
        self.end = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::super::outq::Outq;
    use super::*;

    #[derive(Default)]
    struct Rec {
        got: Vec<(Vec<u8>, Vec<u8>, bool)>,
        dst: Vec<Box<[u8]>>,
        place: bool,
    }

    impl Sink for Rec {
        fn deliver(&mut self, _: PeerId, h: &[u8], p: &[u8]) {
            let placed = self.dst.iter().any(|d| d.as_ptr() == p.as_ptr());
            self.got.push((h.to_vec(), p.to_vec(), placed));
        }
        fn place(&mut self, _: PeerId, _: &[u8], len: usize) -> Option<NonNull<u8>> {
            if !self.place {
                return None;
            }
            let mut b = vec![0u8; len].into_boxed_slice();
            let p = NonNull::new(b.as_mut_ptr());
            self.dst.push(b);
            p
        }
        fn peer_failed(&mut self, _: PeerId, _: &str) {}
    }

    /// Feeds `bytes` to `rx` in chunks of at most `step`.
    fn feed(rx: &mut Rx, sink: &mut Rec, bytes: &[u8], step: usize) -> Result<usize, &'static str> {
        let mut n = 0;
        let mut off = 0;
        while off < bytes.len() {
            let (ptr, room) = rx.target();
            let k = room.min(step).min(bytes.len() - off);
            assert!(k > 0);
            // SAFETY: target() gives `room` writable bytes.
            unsafe { std::ptr::copy_nonoverlapping(bytes[off..].as_ptr(), ptr, k) };
            rx.received(k);
            off += k;
            n += rx.parse(3, sink)?;
        }
        Ok(n)
    }

    fn frames(sizes: &[usize]) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut q = Outq::default();
        let mut want = Vec::new();
        for (i, &s) in sizes.iter().enumerate() {
            let p: Vec<u8> = (0..s).map(|j| (i * 31 + j) as u8).collect();
            q.push(&[i as u8; 5], &p, 0);
            want.push(p);
        }
        (q.front().to_vec(), want)
    }

    #[test]
    fn frames_in_any_chunking() {
        let sizes = [0, 1, 100, PLACE_MIN + 1, RX_BUF + 5, 3, 2 * RX_BUF];
        let (bytes, want) = frames(&sizes);
        for place in [false, true] {
            for step in [1usize, 7, 4096, usize::MAX] {
                if step == 1 && !place {
                    continue; // slow; covered by step 7
                }
                let mut rx = Rx::new(1 << 20);
                let mut sink = Rec {
                    place,
                    ..Rec::default()
                };
                let n = feed(&mut rx, &mut sink, &bytes, step).unwrap();
                assert_eq!(n, sizes.len());
                for (i, (h, p, placed)) in sink.got.iter().enumerate() {
                    assert_eq!(h, &[i as u8; 5]);
                    assert_eq!(p, &want[i], "frame {i} step {step}");
                    // Placed unless it was already whole in the buffer.
                    let big = place && sizes[i] > PLACE_MIN;
                    assert_eq!(
                        *placed,
                        big && (step < RX_BUF || sizes[i] > RX_BUF),
                        "frame {i}"
                    );
                }
                assert!(!rx.placed());
            }
        }
    }

    #[test]
    fn bad_prefix_is_an_error() {
        let mut rx = Rx::new(1 << 20);
        let mut sink = Rec::default();
        let mut b = wire::encode_prefix(300, 0).to_vec();
        b.extend_from_slice(&[0; 300]);
        assert!(feed(&mut rx, &mut sink, &b, 64).is_err());
        let mut rx = Rx::new(1 << 20);
        let b = wire::encode_prefix(0, (1 << 30) + 1);
        assert!(feed(&mut rx, &mut sink, &b, 64).is_err());
    }

    /// A peer announcing a frame larger than the receive budget that the
    /// engine has no receive for fails its connection instead of making us
    /// allocate it; one within the budget still arrives.
    #[test]
    fn an_unplaced_frame_over_the_budget_fails_the_connection() {
        let budget = 1 << 20;
        let mut sink = Rec::default();
        let mut rx = Rx::new(budget);
        let mut b = wire::encode_prefix(40, 1 << 30).to_vec();
        b.extend_from_slice(&[7; 40 + 4096]);
        assert!(feed(&mut rx, &mut sink, &b, 1 << 16).is_err());
        assert!(rx.footprint() <= RX_BUF, "{} bytes held", rx.footprint());
        let (bytes, want) = frames(&[budget]);
        let mut rx = Rx::new(budget);
        assert_eq!(feed(&mut rx, &mut sink, &bytes, 1 << 16), Ok(1));
        assert_eq!(sink.got.last().map(|g| &g.1), Some(&want[0]));
        // Placed (a posted receive), the same frame needs no budget.
        let (bytes, _) = frames(&[budget + 1]);
        let mut rx = Rx::new(budget);
        assert!(feed(&mut rx, &mut sink, &bytes, 1 << 16).is_err());
        let mut placing = Rec {
            place: true,
            ..Rec::default()
        };
        let mut rx = Rx::new(budget);
        assert_eq!(feed(&mut rx, &mut placing, &bytes, 1 << 16), Ok(1));
        assert!(rx.footprint() <= RX_BUF);
    }

    /// `frame_left` counts what the frame in progress still needs, in the
    /// input buffer and once placed or overflowing; `exact_left` only the
    /// latter (where a receive may wait for all of it).
    #[test]
    fn frame_left_counts_the_rest_of_the_frame() {
        let (bytes, _) = frames(&[50_000, 10]);
        let whole = PREFIX + 5 + 50_000;
        for place in [false, true] {
            let mut rx = Rx::new(1 << 20);
            let mut sink = Rec {
                place,
                ..Rec::default()
            };
            assert_eq!((rx.frame_left(), rx.exact_left()), (0, 0));
            feed(&mut rx, &mut sink, &bytes[..PREFIX - 1], usize::MAX).unwrap();
            assert_eq!(rx.frame_left(), 0, "prefix incomplete");
            feed(&mut rx, &mut sink, &bytes[PREFIX - 1..1000], usize::MAX).unwrap();
            assert_eq!(rx.frame_left(), whole - 1000);
            // Placed once the header is in: the rest goes to the engine.
            let exact = if place { whole - 1000 } else { 0 };
            assert_eq!(rx.exact_left(), exact);
            feed(&mut rx, &mut sink, &bytes[1000..whole], usize::MAX).unwrap();
            assert_eq!((rx.frame_left(), rx.exact_left()), (0, 0));
            assert_eq!(sink.got.len(), 1);
        }
    }
}
