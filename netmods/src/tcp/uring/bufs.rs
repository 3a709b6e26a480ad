//! One provided-buffer ring (5.19+) shared by every connection's multishot
//! RECV: the kernel picks a buffer when data arrives, so an idle
//! connection holds none, and the poll copies each completion's bytes into
//! that connection's frame parser and gives the buffer straight back.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

/// Buffers in the ring (a power of two) and the size of each: 4 MiB in
/// all, room for a few socket buffers' worth between two polls.
pub(crate) const COUNT: u16 = 64;
pub(crate) const SIZE: usize = 64 * 1024;
/// The buffer group id the RECVs name.
pub(crate) const GROUP: u16 = 0;

pub(crate) struct BufRing {
    entries: NonNull<BufRingEntry>,
    layout: Layout,
    mem: Box<[u8]>,
    /// Our tail: entries below it were handed to the kernel.
    tail: u16,
    /// Entries added since the tail was last published.
    pub(super) pending: bool,
    /// The ring position (tail value) each buffer was last given at, and
    /// the buffer given at each position (modulo `COUNT`): a bundle
    /// completion names only its first buffer, the rest are the buffers
    /// given right after it, in ring order.
    pos_of: [u16; COUNT as usize],
    bid_at: [u16; COUNT as usize],
}

impl BufRing {
    /// Allocates the ring and its buffers and registers them with `ring`.
    pub(crate) fn new(ring: &IoUring) -> Result<BufRing, String> {
        let layout =
            Layout::from_size_align(COUNT as usize * std::mem::size_of::<BufRingEntry>(), 4096)
                .map_err(|e| e.to_string())?;
        // SAFETY: the layout's size is not zero.
        let entries = NonNull::new(unsafe { alloc::alloc_zeroed(layout) } as *mut BufRingEntry)
            .ok_or("out of memory for the buffer ring")?;
        let mut b = BufRing {
            entries,
            layout,
            mem: vec![0u8; COUNT as usize * SIZE].into_boxed_slice(),
            tail: 0,
            pending: false,
            pos_of: [0; COUNT as usize],
            bid_at: [0; COUNT as usize],
        };
        // SAFETY: `entries` holds COUNT entries, page-aligned, and lives
        // until the ring is unregistered or destroyed (see `Drop`, and
        // `UringIo::teardown`, which leaks it if operations outlive it).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                b.entries.as_ptr() as u64,
                COUNT,
                GROUP,
                0,
            )
        }
        .map_err(|e| format!("provided buffer ring: {e}"))?;
        for bid in 0..COUNT {
            b.give(bid);
        }
        b.publish();
        Ok(b)
    }

    /// The first `len` bytes of buffer `bid` (filled by a completion).
    pub(crate) fn data(&self, bid: u16, len: usize) -> &[u8] {
        let start = (bid % COUNT) as usize * SIZE;
        &self.mem[start..start + len.min(SIZE)]
    }

    /// The buffers a bundle completion of `len` bytes starting at buffer
    /// `first` filled, in order, each with its byte count. The kernel
    /// takes a bundle's buffers in ring order, each filled whole but the
    /// last; they are still at their positions, because completions are
    /// handled in the order the kernel took buffers and each one's buffers
    /// are given back before the next is looked at, so the tail never laps
    /// an unhandled position.
    /// Returns the ring position of the first and how many there are;
    /// `part` gives each in turn.
    pub(crate) fn bundle(&self, first: u16, len: usize) -> (u16, usize) {
        let start = self.pos_of[(first % COUNT) as usize];
        (start, len.div_ceil(SIZE).clamp(1, COUNT as usize))
    }

    /// The `k`th buffer of the bundle at ring position `start` of `len`
    /// bytes, and its byte count.
    pub(crate) fn part(&self, start: u16, k: usize, len: usize) -> (u16, usize) {
        let pos = start.wrapping_add(k as u16) & (COUNT - 1);
        (
            self.bid_at[pos as usize],
            len.saturating_sub(k * SIZE).min(SIZE),
        )
    }

    /// Hands buffer `bid` back to the kernel (seen once published).
    pub(crate) fn give(&mut self, bid: u16) {
        let bid = bid % COUNT;
        let i = (self.tail & (COUNT - 1)) as usize;
        // SAFETY: `i < COUNT`; the kernel reads entries only below the
        // published tail, and this one is past it until `publish`.
        let e = unsafe { &mut *self.entries.as_ptr().add(i) };
        // SAFETY: `bid < COUNT`, so the buffer is inside `mem`.
        e.set_addr(unsafe { self.mem.as_mut_ptr().add(bid as usize * SIZE) } as u64);
        e.set_len(SIZE as u32);
        e.set_bid(bid);
        self.pos_of[bid as usize] = self.tail;
        self.bid_at[i] = bid;
        self.tail = self.tail.wrapping_add(1);
        self.pending = true;
    }

    /// Makes the buffers given since the last call visible to the kernel.
    pub(crate) fn publish(&mut self) {
        if !self.pending {
            return;
        }
        self.pending = false;
        // SAFETY: the tail field overlays the first entry's `resv`, a
        // 16-bit word the kernel reads atomically; `entries` is valid.
        let tail = unsafe { &*(BufRingEntry::tail(self.entries.as_ptr()) as *const AtomicU16) };
        tail.store(self.tail, Ordering::Release);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout. The owner drops us
        // only after the ring (which unregisters the group), or leaks us.
        unsafe { alloc::dealloc(self.entries.as_ptr() as *mut u8, self.layout) };
    }
}

// SAFETY: the ring's memory is ours alone (the kernel's use aside); it
// moves with the netmod, which one thread at a time drives.
unsafe impl Send for BufRing {}
