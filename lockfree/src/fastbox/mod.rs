//! Per ordered pair fastbox ring: a single-producer single-consumer ring of
//! 64-byte slots holding variable-length records.
//!
//! A record starts on a slot: `marker: u64 | WireHeader (40 B) | payload`; the
//! payload's first 16 bytes fill the first slot and the rest runs on through
//! the following slots, so the receiver sees it as one contiguous slice.
//! Records never wrap: when one does not fit before the ring's end, the sender
//! writes a *wrap* record (marker only) and starts again at slot 0.
//!
//! The marker is written last (release) and read first (acquire). It packs
//! `seq48 | len << 48 | WRAP` where `seq48` is the low 48 bits of the per-pair
//! sequence number (never 0, see [`next_seq`]), `len` the payload length (15
//! bits) and `WRAP` bit 63. The receiver accepts a marker only if its
//! `seq48` equals the sequence number it expects next from this sender, so a
//! record sent after a cell that has not been delivered yet waits in place.
//!
//! Stale bytes: a marker word may have held payload on the previous lap.
//! Before publishing a record at slot `p` the sender zeroes the marker word of
//! the next record position (it owns that slot: the space check counts it), so
//! the word at the receiver's read position is always 0 or a real marker.
//! The sender remembers which slots hold payload (it wrote them), and zeroes
//! only those: a stale *marker* is harmless (its sequence number is old), and
//! skipping the store spares a cache-line transfer per small message.
//!
//! A record of one slot (payload up to 16 bytes, the message-rate case) is
//! pushed by a short path of the same protocol: it never needs a wrap record
//! and covers no continuation slot. A receiver with nothing to do answers its
//! poll with [`RxRing::holds`]: one relaxed load of the marker at its read
//! position, before any bookkeeping.
//!
//! Flow control: the receiver publishes how many slots it consumed (a counter
//! on its own cache line, written lazily every quarter ring); the sender keeps
//! a cached copy and reloads it only when the ring looks full.
//!
//! Merge with cells: [`Inbound`] holds a sender's ring and the sequence
//! number expected next from it, and makes the receiver's decisions: a ring
//! record is delivered only if it carries that number; a cell with a later
//! number is preceded by the ring records before it (see `shm`'s
//! "Ordering").
//!
//! Model checking: the ring code is generic over its memory ([`RingMemory`];
//! the engine uses [`Shared`], monomorphised, so the segment path is plain
//! `AtomicU64` accesses and copies). `tests/loom_ring.rs` runs the very same
//! [`TxRing`], [`RxRing`] and [`Inbound`] with loom's atomics and race-checked
//! record bytes: one sender and one receiver over laps of mixed sizes with a
//! wrap record, next-marker zeroing, a full ring and lazily published
//! consumption; and ring plus cell traffic merged by sequence number.

use std::sync::atomic::{AtomicU64, Ordering};

use super::queue::Word;
use crate::wire::{WireHeader, HEADER_SIZE};

/// Bytes per slot (one cache line).
pub const SLOT: usize = 64;
/// Marker + header: where the payload starts in a record.
pub const RECORD_HEADER: usize = 8 + HEADER_SIZE;
/// Largest payload a record can describe (15-bit length field).
pub const MAX_RECORD_PAYLOAD: usize = 0x7fff;

const SEQ_MASK: u64 = (1 << 48) - 1;
const LEN_SHIFT: u32 = 48;
const LEN_MASK: u64 = 0x7fff;
const WRAP: u64 = 1 << 63;

/// The sequence number after `s`, skipping values whose low 48 bits are 0
/// (a zero marker means "nothing here").
#[inline(always)]
pub fn next_seq(s: u64) -> u64 {
    let n = s.wrapping_add(1);
    if n & SEQ_MASK == 0 {
        n + 1
    } else {
        n
    }
}

/// Slots taken by a record with `len` payload bytes.
#[inline(always)]
pub fn record_slots(len: usize) -> u64 {
    (RECORD_HEADER + len).div_ceil(SLOT) as u64
}

/// Slots past the write position the sender asks for (`prefetchw`) after
/// each record: with the receiver's read-ahead, lines then move between
/// the cores ahead of need in both directions (4-16 measured alike).
const WRITE_AHEAD: u64 = 8;

/// Slots past a record the receiver asks for as it reads it: in a burst
/// the sender has written them already, so the next markers' transfers
/// overlap the work on this one instead of each waiting in turn. (Early
/// for a slot not yet written costs the sender one more transfer; 2-8
/// measured alike, BENCHMARKS.md.)
const AHEAD_READ: u64 = 4;

/// The memory of one ring as the ring code touches it: the first word of
/// each slot (a marker, or payload bytes on a continuation slot) and the
/// consumption counter, accessed atomically; record headers and payloads,
/// copied plainly. [`Shared`] is the node segment; `tests/loom_ring.rs`
/// plugs in loom's atomics and checked cells to model-check the very same
/// [`TxRing`] / [`RxRing`] code.
pub trait RingMemory {
    type Word: Word;

    /// The first word of slot `slot`.
    ///
    /// # Safety
    /// `slot` is less than the ring's slot count and the memory is live.
    unsafe fn marker(&self, slot: u64) -> &Self::Word;

    /// The receiver's consumption counter.
    ///
    /// # Safety
    /// The memory is live (not a [`TxRing::none`] / [`RxRing::none`] ring).
    unsafe fn consumed(&self) -> &Self::Word;

    /// Copy `header` and `payload` into the record starting at slot `slot`
    /// (after its marker word; the payload runs on through the following
    /// slots, first words included).
    ///
    /// # Safety
    /// The record's `record_slots(payload.len())` slots are inside the ring
    /// and owned by the sender.
    unsafe fn write_record(&self, slot: u64, header: &WireHeader, payload: &[u8]);

    /// The header of the record of `slots` slots starting at slot `slot`, and
    /// where its payload starts (valid until the record is consumed).
    ///
    /// # Safety
    /// The record is inside the ring and published (its marker was read with
    /// acquire) and not yet consumed.
    unsafe fn read_record(&self, slot: u64, slots: u64) -> (WireHeader, *const u8);

    /// Ask for slot `slot`'s line in advance (a hint).
    #[inline(always)]
    fn prefetch_read(&self, _slot: u64) {}

    /// Ask for slot `slot`'s line in advance, to write it (a hint).
    #[inline(always)]
    fn prefetch_write(&self, _slot: u64) {}
}

/// A ring in the node segment: plain pointers, `AtomicU64` words.
#[derive(Debug, Clone, Copy)]
pub struct Shared {
    data: *mut u8,
    consumed: *const AtomicU64,
}

impl RingMemory for Shared {
    type Word = AtomicU64;

    #[inline(always)]
    unsafe fn marker(&self, slot: u64) -> &AtomicU64 {
        // SAFETY: `data` points to a live ring of more than `slot` slots
        // (caller), 8-byte aligned, whose slot-start words are accessed
        // atomically while shared (`TxRing::new` / `RxRing::new`).
        unsafe { AtomicU64::from_ptr(self.data.add(slot as usize * SLOT).cast::<u64>()) }
    }

    #[inline(always)]
    unsafe fn consumed(&self) -> &AtomicU64 {
        // SAFETY: `consumed` points into the mapped ring header (`new`), live
        // per the caller.
        unsafe { &*self.consumed }
    }

    #[inline(always)]
    unsafe fn write_record(&self, slot: u64, header: &WireHeader, payload: &[u8]) {
        // SAFETY: the record's slots are inside the ring and the sender's
        // (caller); the header is 8-aligned after the marker word.
        unsafe {
            let rec = self.data.add(slot as usize * SLOT);
            rec.add(8).cast::<WireHeader>().write(*header);
            crate::small_copy::copy_bytes(payload.as_ptr(), rec.add(RECORD_HEADER), payload.len());
        }
    }

    #[inline(always)]
    fn prefetch_write(&self, slot: u64) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `prefetchw` only hints the cache: it reads nothing and
        // never faults (CPUs before Broadwell run it as a no-op).
        unsafe {
            let p = self.data.wrapping_add(slot as usize * SLOT);
            std::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, readonly, preserves_flags));
        }
    }

    #[inline(always)]
    fn prefetch_read(&self, slot: u64) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch only hints the cache; it never faults.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(self.data.wrapping_add(slot as usize * SLOT).cast());
        }
    }

    #[inline(always)]
    unsafe fn read_record(&self, slot: u64, _slots: u64) -> (WireHeader, *const u8) {
        // SAFETY: the record is inside the ring and fully written (caller).
        unsafe {
            let rec = self.data.add(slot as usize * SLOT);
            (
                rec.add(8).cast::<WireHeader>().read(),
                rec.add(RECORD_HEADER),
            )
        }
    }
}

mod inbound;
mod rx;
#[cfg(test)]
mod tests;
mod tx;

pub use inbound::{BeforeCell, Inbound, MergeError};
pub use rx::{Record, RxRing};
pub use tx::TxRing;
