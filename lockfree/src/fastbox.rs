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

/// Sending end (process-private state) of one ring.
#[derive(Debug)]
pub struct TxRing<M = Shared> {
    mem: M,
    /// Slots: a power of two.
    slots: u64,
    /// Slots written since the start (monotonic).
    head: u64,
    /// Last value read from `consumed`.
    cached: u64,
    /// Bit per slot: its first word holds payload bytes (a continuation
    /// slot), so it must be zeroed before it can be a next-record position.
    payload_slots: Vec<u64>,
}

impl TxRing {
    /// # Safety
    /// `data` points to `slots * SLOT` bytes of a shared ring that stay
    /// mapped while this value lives, 64-byte aligned; `consumed` to its
    /// consumption counter; this is the ring's only sender; `slots` is a power
    /// of two.
    pub unsafe fn new(data: *mut u8, consumed: *const AtomicU64, slots: u64) -> TxRing {
        // SAFETY: per this function's contract.
        unsafe { TxRing::with_memory(Shared { data, consumed }, slots) }
    }

    /// An unusable ring (for oneself, or when rings are off).
    pub fn none() -> TxRing {
        TxRing {
            mem: Shared {
                data: std::ptr::null_mut(),
                consumed: std::ptr::null(),
            },
            slots: 0,
            head: 0,
            cached: 0,
            payload_slots: Vec::new(),
        }
    }
}

impl<M: RingMemory> TxRing<M> {
    /// # Safety
    /// `mem` is a ring of `slots` slots (a power of two) that starts zeroed
    /// and stays live while this value lives, and its methods behave as
    /// [`RingMemory`] documents; this is its only sender.
    pub unsafe fn with_memory(mem: M, slots: u64) -> TxRing<M> {
        debug_assert!(slots.is_power_of_two());
        TxRing {
            mem,
            slots,
            head: 0,
            cached: 0,
            payload_slots: vec![0; (slots as usize).div_ceil(64)],
        }
    }

    #[inline(always)]
    fn holds_payload(&self, slot: u64) -> bool {
        self.payload_slots[(slot / 64) as usize] & (1 << (slot % 64)) != 0
    }

    #[inline(always)]
    fn mark(&mut self, slot: u64, payload: bool) {
        let word = &mut self.payload_slots[(slot / 64) as usize];
        if payload {
            *word |= 1 << (slot % 64);
        } else {
            *word &= !(1 << (slot % 64));
        }
    }

    /// Write one record with sequence number `seq`, or return false if the
    /// ring has no room now. `payload.len()` must be at most the ring's
    /// fastbox maximum (checked by the caller against the config, which
    /// guarantees a record plus a wrap fits in a quarter ring).
    #[inline(always)]
    pub fn try_push(&mut self, seq: u64, header: &WireHeader, payload: &[u8]) -> bool {
        if payload.len() <= SLOT - RECORD_HEADER {
            return self.push_one_slot(seq, header, payload);
        }
        self.push_record(seq, header, payload)
    }

    /// [`TxRing::try_push`] of a record that fits one slot (payload up to
    /// 16 bytes, the message-rate case): it never needs a wrap record, it
    /// covers no continuation slot, and its own slot is never marked as
    /// holding payload (every push leaves the next record position
    /// unmarked), so only the next position's mark is looked at.
    #[inline(always)]
    fn push_one_slot(&mut self, seq: u64, header: &WireHeader, payload: &[u8]) -> bool {
        let n = self.slots;
        // The record's slot and the next record's marker slot.
        if self.head + 2 - self.cached > n && !self.refresh(2) {
            return false;
        }
        let pos = self.head & (n - 1);
        debug_assert!(
            !self.holds_payload(pos),
            "a record position marked as payload"
        );
        let next = (pos + 1) & (n - 1);
        let zero_next = self.holds_payload(next);
        if zero_next {
            self.mark(next, false);
        }
        // SAFETY: slot `pos` and the next record's first slot are owned by
        // the sender (space check) and inside the ring; the receiver reads
        // them only after the release store of the marker below.
        unsafe {
            self.mem.write_record(pos, header, payload);
            if zero_next {
                self.mem.marker(next).store(0, Ordering::Relaxed);
            }
            self.mem.marker(pos).store(
                (seq & SEQ_MASK) | ((payload.len() as u64) << LEN_SHIFT),
                Ordering::Release,
            );
        }
        self.head += 1;
        // As in `push_record`.
        if self.head + WRITE_AHEAD < self.cached + n {
            self.mem.prefetch_write((self.head + WRITE_AHEAD) & (n - 1));
        }
        true
    }

    /// [`TxRing::try_push`] of any record.
    #[inline(always)]
    fn push_record(&mut self, seq: u64, header: &WireHeader, payload: &[u8]) -> bool {
        let len = payload.len();
        let n = self.slots;
        let rs = record_slots(len);
        let mut pos = self.head & (n - 1);
        let skip = if pos + rs > n { n - pos } else { 0 };
        // The record, the wrap filler and the next record's marker slot.
        let need = skip + rs + 1;
        if self.head + need - self.cached > n && !self.refresh(need) {
            return false;
        }
        let seq48 = seq & SEQ_MASK;
        if skip != 0 {
            // SAFETY: slots 0 and `pos` are ours (space check) and inside the ring.
            unsafe {
                self.mem.marker(0).store(0, Ordering::Relaxed);
                self.mem.marker(pos).store(WRAP | seq48, Ordering::Release);
            }
            self.mark(0, false);
            self.mark(pos, false);
            self.head += skip;
            pos = 0;
        }
        let next = (pos + rs) & (n - 1);
        let zero_next = self.holds_payload(next);
        self.mark(pos, false);
        for slot in pos + 1..pos + rs {
            self.mark(slot, true);
        }
        if zero_next {
            self.mark(next, false);
        }
        // Ask for every further line of the record before writing it: the
        // receiver last read them a lap ago, and fetched together their
        // transfers between cores overlap instead of queueing one by one.
        for slot in pos + 1..pos + rs {
            self.mem.prefetch_write(slot);
        }
        // SAFETY: slots `pos .. pos + rs` and the next record's first slot
        // are owned by the sender (space check against the receiver's
        // published consumption) and inside the ring (no record crosses its
        // end, `pos + rs <= n`); the receiver reads them only after the
        // release store of the marker below.
        unsafe {
            self.mem.write_record(pos, header, payload);
            if zero_next {
                self.mem.marker(next).store(0, Ordering::Relaxed);
            }
            self.mem
                .marker(pos)
                .store(seq48 | ((len as u64) << LEN_SHIFT), Ordering::Release);
        }
        self.head += rs;
        // Ask for the line a few slots on, for the messages to come: the
        // receiver read it a lap ago (or just now, reading ahead). Only
        // within the space the receiver is known to have left: a slot of
        // a full ring may still be being read.
        if self.head + WRITE_AHEAD < self.cached + n {
            self.mem.prefetch_write((self.head + WRITE_AHEAD) & (n - 1));
        }
        true
    }

    /// Reload the receiver's consumption counter; true if `need` slots fit.
    #[cold]
    #[inline(never)]
    fn refresh(&mut self, need: u64) -> bool {
        // SAFETY: the memory is live (`new` / `with_memory`).
        let c = unsafe { self.mem.consumed() }.load(Ordering::Acquire);
        // A counter that runs ahead of what was written is garbage; treat the
        // ring as full rather than overwrite unread records.
        if c > self.head {
            return false;
        }
        self.cached = c;
        self.head + need - c <= self.slots
    }

    /// Whether this end is usable.
    pub fn is_some(&self) -> bool {
        self.slots != 0
    }
}

/// One record the receiver may deliver.
pub struct Record {
    pub header: WireHeader,
    pub payload: *const u8,
    pub len: usize,
    slots: u64,
}

/// Receiving end (process-private state) of one ring.
#[derive(Debug)]
pub struct RxRing<M = Shared> {
    mem: M,
    slots: u64,
    /// Slots consumed since the start (monotonic).
    read: u64,
    /// Last value stored into `consumed`.
    published: u64,
    /// Largest valid payload length.
    max_len: u64,
}

impl RxRing {
    /// # Safety
    /// As for [`TxRing::new`], for the ring's only receiver; `max_len` is the
    /// configured fastbox maximum.
    pub unsafe fn new(
        data: *mut u8,
        consumed: *const AtomicU64,
        slots: u64,
        max_len: usize,
    ) -> RxRing {
        // SAFETY: per this function's contract.
        unsafe { RxRing::with_memory(Shared { data, consumed }, slots, max_len) }
    }

    pub fn none() -> RxRing {
        RxRing {
            mem: Shared {
                data: std::ptr::null_mut(),
                consumed: std::ptr::null(),
            },
            slots: 0,
            read: 0,
            published: 0,
            max_len: 0,
        }
    }
}

impl<M: RingMemory> RxRing<M> {
    /// # Safety
    /// As for [`TxRing::with_memory`], for the ring's only receiver;
    /// `max_len` is the configured fastbox maximum.
    pub unsafe fn with_memory(mem: M, slots: u64, max_len: usize) -> RxRing<M> {
        RxRing {
            mem,
            slots,
            read: 0,
            published: 0,
            max_len: max_len as u64,
        }
    }

    pub fn is_some(&self) -> bool {
        self.slots != 0
    }

    /// Whether the read position holds a marker for sequence number `seq`
    /// (its record, or the wrap record before it): one relaxed load, for
    /// an idle poll; [`RxRing::peek`] then reads it properly.
    #[inline(always)]
    pub fn holds(&self, seq: u64) -> bool {
        if self.slots == 0 {
            return false;
        }
        let pos = self.read & (self.slots - 1);
        // SAFETY: `pos < slots`; the ring is live (`new`), not `none`.
        let m = unsafe { self.mem.marker(pos) }.load(Ordering::Relaxed);
        m & SEQ_MASK == seq & SEQ_MASK
    }

    /// The record at the read position if it carries sequence number `seq`
    /// (skipping a wrap record for `seq`). `Err` names what is corrupt.
    #[inline(always)]
    pub fn peek(&mut self, seq: u64) -> Result<Option<Record>, &'static str> {
        let n = self.slots;
        let seq48 = seq & SEQ_MASK;
        let mut pos = self.read & (n - 1);
        // SAFETY: `pos < n`; the ring is live (`new`).
        let mut m = unsafe { self.mem.marker(pos) }.load(Ordering::Acquire);
        if m & SEQ_MASK != seq48 {
            return Ok(None);
        }
        if m & WRAP != 0 {
            if m != WRAP | seq48 || pos == 0 {
                return Err("bad wrap record in fastbox ring");
            }
            self.read += n - pos;
            pos = 0;
            // SAFETY: as above, slot 0.
            m = unsafe { self.mem.marker(0) }.load(Ordering::Acquire);
            if m & SEQ_MASK != seq48 {
                return Ok(None);
            }
            if m & WRAP != 0 {
                return Err("two wrap records in a row in fastbox ring");
            }
        }
        let len = (m >> LEN_SHIFT) & LEN_MASK;
        let rs = record_slots(len as usize);
        if len > self.max_len || pos + rs > n {
            return Err("fastbox record longer than the configured maximum");
        }
        // SAFETY: the record lies inside the ring (checked above) and was
        // fully written before its marker's release store, which we acquired;
        // the sender does not touch it until we publish its consumption.
        let (header, payload) = unsafe { self.mem.read_record(pos, rs) };
        // Ask for the record's further lines and the next few slots at
        // once: the copy and the next markers then wait for their
        // transfers between cores side by side, not one after another.
        for slot in pos + 1..pos + rs + AHEAD_READ {
            self.mem.prefetch_read(slot & (n - 1));
        }
        Ok(Some(Record {
            header,
            payload,
            len: len as usize,
            slots: rs,
        }))
    }

    /// Mark the record returned by `peek` consumed (after its payload is no
    /// longer used). Publishes consumption every quarter ring.
    #[inline(always)]
    pub fn consume(&mut self, rec: &Record) {
        self.read += rec.slots;
        if self.read - self.published >= self.slots / 4 {
            self.publish();
        }
    }

    #[inline(never)]
    fn publish(&mut self) {
        self.published = self.read;
        // SAFETY: the memory is live (`new` / `with_memory`).
        unsafe { self.mem.consumed() }.store(self.read, Ordering::Release);
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    const N: u64 = 16;

    /// A 16-slot ring and its counter in ordinary memory.
    struct HeapRing {
        words: Vec<AtomicU64>,
        ctl: AtomicU64,
    }

    impl HeapRing {
        fn new() -> HeapRing {
            HeapRing {
                words: (0..(N as usize * SLOT / 8 + 8))
                    .map(|_| AtomicU64::new(0))
                    .collect(),
                ctl: AtomicU64::new(0),
            }
        }

        fn ends(&self, max_len: usize) -> (TxRing, RxRing) {
            let data = self.words.as_ptr() as *mut u8;
            // SAFETY: each test keeps the `HeapRing` alive longer than the
            // ends; the words are 8-aligned (the ring's atomics need 8, 64
            // only matters for speed).
            unsafe {
                (
                    TxRing::new(data, &self.ctl, N),
                    RxRing::new(data, &self.ctl, N, max_len),
                )
            }
        }
    }

    #[test]
    fn seq_skips_zero_low_bits() {
        assert_eq!(next_seq(1), 2);
        assert_eq!(next_seq(SEQ_MASK), SEQ_MASK + 2);
        assert_ne!(next_seq(SEQ_MASK) & SEQ_MASK, 0);
        assert_eq!(record_slots(0), 1);
        assert_eq!(record_slots(16), 1);
        assert_eq!(record_slots(17), 2);
        assert_eq!(record_slots(1024), 17);
    }

    /// Single thread: many laps with varied sizes, wraps and a full ring.
    #[test]
    fn laps_and_wraps() {
        let mem = HeapRing::new();
        let (mut tx, mut rx) = mem.ends(100);
        let mut sseq = 1;
        let mut rseq = 1;
        let mut pending = std::collections::VecDeque::new();
        for i in 0..5000usize {
            let len = (i * 37) % 101;
            let payload: Vec<u8> = (0..len).map(|k| (k + i) as u8).collect();
            let h = WireHeader {
                tag: i as i32,
                ..Default::default()
            };
            while !tx.try_push(sseq, &h, &payload) {
                // Full: drain everything; the idle check sees each record
                // (or the wrap before it) before `peek` takes it, and
                // nothing once all are taken.
                loop {
                    let ready = rx.holds(rseq);
                    let Some(rec) = rx.peek(rseq).unwrap() else {
                        assert!(!rx.holds(rseq), "idle check sees a record peek does not");
                        break;
                    };
                    assert!(ready, "idle check missed record {rseq}");
                    let (ei, ep): (usize, Vec<u8>) = pending.pop_front().unwrap();
                    assert_eq!(rec.header.tag as usize, ei);
                    // SAFETY: valid until `consume`.
                    let got = unsafe { std::slice::from_raw_parts(rec.payload, rec.len) };
                    assert_eq!(got, &ep[..]);
                    rx.consume(&rec);
                    rseq = next_seq(rseq);
                }
            }
            pending.push_back((i, payload));
            sseq = next_seq(sseq);
            // A record for a later seq is not accepted.
            assert!(rx.peek(rseq + 1000).unwrap().is_none());
        }
    }

    /// Payload words left from an earlier lap that look exactly like the
    /// next marker must never be taken for a record: the receiver, fully
    /// caught up, must see nothing until the sender publishes.
    #[test]
    fn stale_payload_forging_markers_is_never_read() {
        let mem = HeapRing::new();
        let (mut tx, mut rx) = mem.ends(200);
        let mut seq = 1;
        for i in 0..4000usize {
            // Sizes from 1 to 4 slots so record starts drift across laps.
            let len = [0usize, 40, 100, 150, 16, 70][i % 6] + i % 5;
            // Every payload word forges the marker of a record a lap or so
            // ahead, when this slot may be a record start again.
            let payload: Vec<u8> = (0..len.div_ceil(8))
                .flat_map(|j| {
                    let ahead = seq + 3 + ((i + j) % 14) as u64;
                    ((ahead & SEQ_MASK) | (8u64 << LEN_SHIFT)).to_ne_bytes()
                })
                .take(len)
                .collect();
            let h = WireHeader {
                tag: i as i32,
                ..Default::default()
            };
            assert!(tx.try_push(seq, &h, &payload), "drained ring is full");
            let rec = rx.peek(seq).unwrap().expect("published record");
            assert_eq!(rec.header.tag as usize, i);
            // SAFETY: valid until `consume`.
            let got = unsafe { std::slice::from_raw_parts(rec.payload, rec.len) };
            assert_eq!(got, &payload[..]);
            rx.consume(&rec);
            seq = next_seq(seq);
            assert!(
                rx.peek(seq).unwrap().is_none(),
                "record {i}: read a forged marker from stale payload"
            );
            assert!(
                !rx.holds(seq),
                "record {i}: the idle check took stale payload for a marker"
            );
        }
    }
}
