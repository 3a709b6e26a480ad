//! One sender's ring merged with its cell traffic by sequence number.

use super::*;

/// One sender's traffic as its receiver merges it: the sender's ring and the
/// sequence number of the next message to deliver from it, whichever path
/// (ring or cell) that message took. `ShmNode` and `tests/loom_ring.rs` both
/// make their delivery decisions through these methods.
#[derive(Debug)]
pub struct Inbound<M = Shared> {
    pub ring: RxRing<M>,
    /// Sequence number of the next message to deliver from this sender.
    pub expected: u64,
}

/// What must be delivered before a cell (see [`Inbound::before_cell`]).
pub enum BeforeCell {
    /// This ring record: deliver it, call [`Inbound::record_done`] and ask
    /// again.
    Record(Record),
    /// Nothing: deliver the cell, then call [`Inbound::cell_done`].
    Cell,
}

/// A cell that does not fit its sender's order: the segment is corrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeError {
    /// The ring is corrupt.
    Ring(&'static str),
    /// Message `expected` precedes the cell but is not in the ring (it was
    /// neither published there nor queued before the cell).
    Missing { expected: u64 },
    /// The cell's number was delivered already (`expected` is past it).
    Late { expected: u64 },
}

impl<M: RingMemory> Inbound<M> {
    pub fn new(ring: RxRing<M>) -> Inbound<M> {
        Inbound { ring, expected: 1 }
    }

    /// The next message, if it is in the ring. A record with a later number
    /// is not returned: it waits until the cells before it are delivered.
    #[inline(always)]
    pub fn next_record(&mut self) -> Result<Option<Record>, &'static str> {
        self.ring.peek(self.expected)
    }

    /// Whether the next message waits in the ring ([`RxRing::holds`]).
    #[inline(always)]
    pub fn ring_ready(&self) -> bool {
        self.ring.holds(self.expected)
    }

    /// The record just returned by [`Inbound::next_record`] or
    /// [`Inbound::before_cell`] was delivered: free its slots.
    #[inline(always)]
    pub fn record_done(&mut self, rec: &Record) {
        self.ring.consume(rec);
        self.expected = next_seq(self.expected);
    }

    /// A cell with sequence number `seq` was dequeued from the receive
    /// queue: what comes before it. Ring records with lower numbers are
    /// visible by now: the sender published them before it enqueued the cell
    /// (release), and the dequeue acquired the cell.
    #[inline]
    pub fn before_cell(&mut self, seq: u64) -> Result<BeforeCell, MergeError> {
        if self.expected < seq {
            let rec = if self.ring.is_some() {
                self.ring.peek(self.expected).map_err(MergeError::Ring)?
            } else {
                None
            };
            return rec.map(BeforeCell::Record).ok_or(MergeError::Missing {
                expected: self.expected,
            });
        }
        if seq != self.expected {
            return Err(MergeError::Late {
                expected: self.expected,
            });
        }
        Ok(BeforeCell::Cell)
    }

    /// The cell [`Inbound::before_cell`] answered [`BeforeCell::Cell`] for
    /// was delivered.
    #[inline(always)]
    pub fn cell_done(&mut self) {
        self.expected = next_seq(self.expected);
    }
}
