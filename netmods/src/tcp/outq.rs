//! A peer's unsent bytes ([`Outq`]), shared by both backends. For io_uring
//! the memory a SEND reads must not move while it is in flight: `Outq`
//! freezes its `sending` buffer between `start_flight` and `end_flight`.

use super::frame;
use super::wire::{self, PREFIX};

/// A peer's queue takes more messages only while below this; an empty
/// queue always takes one, whatever its size.
pub(crate) const QUEUE_CAP: usize = 4 << 20;

/// Whether a queue of `queued` bytes (its `len()`) takes a message of
/// `bytes` (prefix included) now.
#[inline(always)]
pub(crate) fn room(queued: usize, bytes: usize) -> bool {
    queued == 0 || queued + bytes <= QUEUE_CAP
}

/// A peer's bytes not yet handed to the kernel. Appends go to `queued`;
/// sends come from `sending`, which is frozen while an io_uring SEND reads
/// it and swapped with `queued` once drained. Both keep their capacity.
#[derive(Default)]
pub(crate) struct Outq {
    sending: Vec<u8>,
    sent: usize,
    queued: Vec<u8>,
    in_flight: bool,
    /// Cleared while in flight: forget `sending` when the flight ends.
    discard: bool,
}

impl Outq {
    /// Bytes waiting (in flight included).
    pub(crate) fn len(&self) -> usize {
        if self.discard {
            return self.queued.len();
        }
        self.sending.len() - self.sent + self.queued.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a message of `bytes` (prefix included) may be queued now.
    #[cfg(test)]
    pub(crate) fn has_room(&self, bytes: usize) -> bool {
        room(self.len(), bytes)
    }

    /// Appends the frame `prefix + header + payload`, less its first `skip`
    /// bytes (already written by the caller).
    /// Inline: every queued message comes here (callgrind: left out of
    /// line, its call cost `try_send` some 30 instructions a message).
    #[inline(always)]
    pub(crate) fn push(&mut self, header: &[u8], payload: &[u8], skip: usize) {
        if skip == 0 {
            // The usual case, in one reservation (three `extend`s with
            // their growth checks cost a window's 8 B messages a hundred
            // instructions each, callgrind), written in place without
            // `memcpy` calls (`frame.rs`).
            let q = &mut self.queued;
            let total = frame::len(header, payload);
            q.reserve(total);
            let at = q.len();
            // SAFETY: `reserve` made room for `total` bytes past `at`, which
            // `frame::write` fills exactly, from buffers that are not the
            // queue's.
            unsafe {
                frame::write(q.as_mut_ptr().add(at), header, payload);
                q.set_len(at + total);
            }
            return;
        }
        let prefix = wire::encode_prefix(header.len(), payload.len());
        self.push_rest(prefix, header, payload, skip);
    }

    /// What a direct send left of a frame (its first `skip` bytes written).
    #[inline(never)]
    fn push_rest(&mut self, prefix: [u8; PREFIX], header: &[u8], payload: &[u8], skip: usize) {
        let mut skip = skip;
        for part in [&prefix[..], header, payload] {
            let k = skip.min(part.len());
            self.queued.extend_from_slice(&part[k..]);
            skip -= k;
        }
    }

    /// The bytes to send next (empty if none). Not while in flight.
    pub(crate) fn front(&mut self) -> &[u8] {
        debug_assert!(!self.in_flight);
        if self.sent == self.sending.len() && !self.queued.is_empty() {
            self.sending.clear();
            self.sent = 0;
            std::mem::swap(&mut self.sending, &mut self.queued);
        }
        &self.sending[self.sent..]
    }

    /// `n` bytes of `front()` were written.
    pub(crate) fn advance(&mut self, n: usize) {
        self.sent += n;
    }

    /// `front()` as a pointer that stays valid (the buffer frozen) until
    /// `end_flight`.
    pub(crate) fn start_flight(&mut self) -> (*const u8, usize) {
        let f = self.front();
        let r = (f.as_ptr(), f.len());
        self.in_flight = true;
        r
    }

    pub(crate) fn end_flight(&mut self, n: usize) {
        self.in_flight = false;
        if self.discard {
            self.discard = false;
            self.sending.clear();
            self.sent = 0;
        } else {
            self.sent += n;
        }
    }

    pub(crate) fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// Drops every unsent byte (the peer failed). A buffer in flight is
    /// only forgotten when its flight ends.
    pub(crate) fn clear(&mut self) {
        self.queued.clear();
        if self.in_flight {
            self.discard = true;
        } else {
            self.sending.clear();
            self.sent = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outq_flight_cap_and_clear() {
        let mut q = Outq::default();
        assert!(q.has_room(QUEUE_CAP * 2), "an empty queue takes anything");
        q.push(b"h", &[1; 10], 3);
        assert_eq!(q.len(), PREFIX + 1 + 10 - 3);
        assert!(!q.has_room(QUEUE_CAP));
        let (_, n) = q.start_flight();
        q.push(b"", &[2; 4], 0);
        assert_eq!(q.len(), n + PREFIX + 4);
        q.clear();
        assert!(q.in_flight());
        assert!(q.is_empty());
        q.end_flight(2);
        assert!(q.is_empty());
        assert!(q.front().is_empty());
        q.push(b"x", b"y", 0);
        let f = q.front().to_vec();
        assert_eq!(f.len(), PREFIX + 2);
        q.advance(f.len());
        assert!(q.is_empty());
    }
}
