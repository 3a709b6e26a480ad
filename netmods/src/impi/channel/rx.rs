//! The receive buffer a channel reads into and cuts packets from.

use super::super::packet::HEADER_LEN;
use super::RX_BUF;

/// The receive buffer: unparsed bytes are `buf[start..end]`; `need` is
/// the size of the packet they begin, once its header is in (0 before).
/// It starts at `RX_BUF` and grows, once, for a channel that carries
/// packets larger than that (up to `HEADER_LEN + maxdatalen`, which the
/// header check bounds), so idle channels stay small.
#[derive(Default)]
pub(super) struct Rx {
    pub(super) buf: Box<[u8]>,
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) need: usize,
    /// The packet at `start` was offered to `place` and declined.
    pub(super) declined: bool,
    /// The next read takes at most [`PEEK`] bytes: a placed payload just
    /// ended, and a stream of large messages likely goes on, so read only
    /// the next packet's headers and let its payload go straight to the
    /// engine rather than through this buffer.
    pub(super) peek: bool,
}

/// A packet header, the length prefix and the engine's header, rounded up.
pub(super) const PEEK: usize = 256;

impl Rx {
    pub(super) fn new() -> Rx {
        Rx {
            buf: vec![0u8; RX_BUF].into_boxed_slice(),
            start: 0,
            end: 0,
            need: 0,
            declined: false,
            peek: false,
        }
    }

    /// Free room after the unparsed bytes, made large enough for the
    /// packet they begin.
    pub(super) fn room(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.buf.len() - self.start < self.need.max(HEADER_LEN)
            || self.buf.len() - self.end < self.buf.len() / 2
        {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.need > self.buf.len() {
            let mut grown = vec![0u8; self.need.max(2 * self.buf.len())].into_boxed_slice();
            grown[..self.end].copy_from_slice(&self.buf[..self.end]);
            self.buf = grown;
        }
        &mut self.buf[self.end..]
    }
}
