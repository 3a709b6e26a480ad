//! Shared memory between the ranks of one node.
//!
//! One segment per node and job (`segment`), created by the node's lowest
//! rank, attached by the others and unlinked by the last to attach, so a
//! crash after start-up leaks nothing; a SIGTERM before that unlinks it
//! too (`term`). Inside it (`layout`):
//! - per ordered pair, a fastbox ring (`fastbox`) of cache-line slots for
//!   small messages: the receiver polls memory only it and one writer touch;
//! - per rank, a Nemesis-style lock-free MPSC receive queue and a free queue
//!   of cells (`queue`) for everything bigger and for fan-in;
//! - per-pair sequence numbers that merge the two back into send order.
//!
//! Opening the segment (create, attach, lanes) is `open.rs`'s, sending
//! `send.rs`'s, receiving and the merge `recv.rs`'s; sizes (`RIVET_SHM_*`)
//! and errors are in `config.rs`.
//!
//! All of that is one lane; a segment has one lane per worker
//! (`thread.rs`), each a separate copy, so two workers' traffic shares no
//! lock and no cache line (`ShmNode::take_lanes`).
//!
//! A message longer than one cell's payload and up to `max_message` (four
//! cells) takes several cells in a row, each with its own sequence number,
//! all but the last flagged `CELL_MORE`. The receiver hands its pieces
//! straight on when the engine claims the message at its first cell (a
//! posted receive matched it: one copy, into the user's buffer), else puts
//! it together and delivers it whole (`recv.rs`, `Deliver`). The engine
//! sends messages that long eagerly only if `RIVET_SHM_EAGER_MAX` says
//! so: eager through cells costs two copies, a rendezvous one
//! `process_vm_readv`, whose fixed cost is high on some machines (about
//! 1.5 us on an AMD EPYC KVM guest).
//! Larger messages do not pass through here whole: the engine's rendezvous
//! protocol reads them with `cma` (process_vm_readv) or streams them as cell
//! sized pieces through `ShmNode::try_send`.
//!
//! # Ordering
//! Every message from `s` to `r` takes the next per-pair sequence number,
//! whichever path it takes. The receiver delivers only the number it expects
//! next: a ring record with a later number waits in place; a cell with a later
//! number means the records before it are already visible in the ring (the
//! sender published them before enqueueing the cell: release/acquire through
//! the queue), so they are delivered first. These decisions are
//! [`fastbox::Inbound`]'s; `lockfree/tests/loom_ring.rs` model-checks them with the
//! real ring and queue code (and `loom_queue.rs` the queue alone).
//!
//! # Fan-in
//! A receiver polls only the rings of senders that announced themselves (a
//! bit in its active-senders bitmap plus a generation counter it rereads each
//! poll), then its receive queue.
//!
//! # Safety model
//! The segment is `MAP_SHARED` and written by other processes. It is only
//! accessed through `AtomicU64` words (queue links, markers, counters, header)
//! or, for cell and record contents, by raw copies made while the protocol
//! gives this process exclusive use of those bytes (a cell between dequeue
//! and enqueue, a ring record between its marker's acquire and the
//! consumption store). Offsets and lengths read from the segment are checked
//! before use; a bad one is a [`ShmError::Corrupt`], never an out-of-range
//! access.

pub mod cma;
mod config;
pub mod layout;
mod open;
mod recv;
mod segment;
mod send;
mod term;

/// In `rivet-lockfree` (its loom models build it alone), used from here.
pub use rivet_lockfree::{fastbox, queue};
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use memmap2::MmapMut;

pub use config::*;
use fastbox::{Inbound, TxRing};
use layout::*;
use queue::{CellRegion, Consumer, Ends};
pub use recv::Deliver;

/// How long a consumer waits for a producer that is between its tail swap and
/// its link store before it gives up for this poll.
const SPINS: u32 = 64;

/// Counters of the slower paths (process-private, for `--info` and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShmStats {
    /// Messages sent through cells.
    pub cell_sends: u64,
    /// Ring-sized messages that found the ring full and took a cell.
    pub ring_full: u64,
    /// `try_send` calls answered `Ok(false)` (no ring room, no free cell).
    pub no_room: u64,
    /// Messages longer than one cell received piece by piece, claimed at
    /// their first cell (the others were put together first).
    pub direct: u64,
}

/// The mapped segment, as a base pointer and length.
#[derive(Clone, Copy)]
struct Seg {
    base: *mut u8,
    len: usize,
}

impl Seg {
    /// The word at `off`, an offset computed from the layout (never read from
    /// the segment).
    #[inline(always)]
    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: `off` comes from `Layout`, which places every word inside
        // the mapping (`len` is the layout's total, at most the mapped size)
        // at a multiple of 8 from the page-aligned base; the mapping lives as
        // long as the `ShmNode` holding this `Seg`; these words are only ever
        // accessed atomically.
        unsafe { AtomicU64::from_ptr(self.base.add(off).cast::<u64>()) }
    }

    #[inline(always)]
    fn recv_ends(&self, l: &Layout, rank: usize) -> Ends<'_, AtomicU64> {
        let c = l.ctl(rank);
        Ends {
            head: self.word(c + C_RECV_HEAD),
            tail: self.word(c + C_RECV_TAIL),
        }
    }

    #[inline(always)]
    fn free_ends(&self, l: &Layout, rank: usize) -> Ends<'_, AtomicU64> {
        let c = l.ctl(rank);
        Ends {
            head: self.word(c + C_FREE_HEAD),
            tail: self.word(c + C_FREE_TAIL),
        }
    }
}

/// Sending side of one peer (process-private).
struct TxPeer {
    ring: TxRing,
    /// Sequence number of the next message to this peer (either path).
    next_seq: u64,
    /// Whether this rank set its bit in the peer's active-senders bitmap.
    announced: bool,
}

/// A message longer than one cell, arriving in its sender's cells
/// (`recv.rs`): the header of its first cell and either the payload so
/// far (held, delivered whole after the last cell) or, once the receiver
/// claimed it at the first cell (`Deliver::first_piece`), its token and
/// how many bytes it has taken.
#[derive(Default)]
struct Assembly {
    active: bool,
    header: crate::wire::WireHeader,
    buf: Vec<u8>,
    direct: Option<u64>,
    got: usize,
}

/// This process's view of one lane of the node segment: the sending and
/// receiving ends of every local channel in it. The node itself is lane 0;
/// [`ShmNode::take_lanes`] hands out the others, one handle per lane, each
/// for one worker (`thread.rs`).
pub struct ShmNode {
    tx: Box<[CachePadded<TxPeer>]>,
    /// Receiving side of each peer (process-private).
    rx: Box<[CachePadded<Inbound>]>,
    recv: CachePadded<Consumer>,
    free: CachePadded<Consumer>,
    seg: Seg,
    cells: CellRegion,
    layout: Layout,
    me: usize,
    local_size: usize,
    /// Payloads shorter than this go to the ring (0 when rings are off).
    fb_cut: usize,
    max_payload: usize,
    /// Largest message: up to `MAX_MESSAGE_CELLS` cells' payloads.
    max_message: usize,
    /// Per sender, the message its cells are spelling out (process-private).
    asm: Box<[Assembly]>,
    /// Senders whose rings this rank polls, and the generation they reflect.
    active: Vec<u32>,
    seen_gen: u64,
    /// Offset of our generation word (`C_GEN` of our control block).
    gen_off: usize,
    rr: usize,
    /// A dequeued cell whose delivery waits for budget (0 = none).
    pending: u64,
    /// Whether the next poll starts with the receive queue (the last one ran
    /// out of budget in the rings).
    queue_first: bool,
    stats: ShmStats,
    config: ShmConfig,
    name: String,
    /// Lane 0: this handle leaves the segment (`Drop`) and has not yet
    /// handed out the other lanes (`take_lanes`).
    primary: bool,
    lanes_taken: bool,
    /// While the name may still be in /dev/shm (not every local rank had
    /// attached when we did), SIGTERM unlinks it (`term.rs`).
    _term: Option<term::Armed>,
    _map: std::sync::Arc<MmapMut>,
}

// SAFETY: the raw pointers in `ShmNode` point into its own mapping (kept
// alive by `_map`), which is process-shared anyway; nothing is tied to the
// creating thread.
unsafe impl Send for ShmNode {}
// SAFETY: `&self` methods only read header words atomically; all mutation of
// private state needs `&mut self`.
unsafe impl Sync for ShmNode {}

/// A segment some local rank never attached to keeps its name in
/// /dev/shm (the last to attach unlinks it): the first rank to leave takes
/// it away, so a job whose peer died before attaching, or an externally
/// bootstrapped job that no launcher sweeps up, leaves nothing behind.
/// How long a rank leaving the node segment waits for local ranks that
/// have not attached yet (a rank may finish before a slow peer starts).
#[cfg(not(test))]
const LEAVE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
#[cfg(test)]
const LEAVE_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

impl Drop for ShmNode {
    /// The last rank to attach unlinks the name. A rank that leaves before
    /// every local rank attached waits for them a while ([`LEAVE_WAIT`]):
    /// one that is merely slow still finds the segment. If they never come
    /// (died before attaching), it unlinks the name itself, so it does not
    /// outlive the job where no launcher sweeps.
    fn drop(&mut self) {
        if !self.primary {
            return;
        }
        let all = self.local_size as u64;
        let attached = || self.seg.word(H_ATTACHED).load(Ordering::Acquire);
        let start = std::time::Instant::now();
        while attached() < all && start.elapsed() < LEAVE_WAIT {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        if attached() < all {
            let _ = segment::unlink(&self.name);
        }
    }
}

impl std::fmt::Debug for ShmNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmNode")
            .field("name", &self.name)
            .field("local_rank", &self.me)
            .field("local_size", &self.local_size)
            .field("config", &self.config)
            .field("bytes", &self.layout.total)
            .finish_non_exhaustive()
    }
}

impl ShmNode {
    /// Largest payload of one cell: a message up to this long takes one.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Largest payload `try_send` accepts: longer than `max_payload`, it
    /// spans several cells, taken and queued in one call.
    pub fn max_message(&self) -> usize {
        self.max_message
    }

    /// Largest payload that may travel through a fastbox ring (0 if rings
    /// are off; `try_send` picks the path itself).
    pub fn fastbox_max(&self) -> usize {
        self.fb_cut.saturating_sub(1)
    }

    /// This rank's local index.
    pub fn local_rank(&self) -> usize {
        self.me
    }

    pub fn local_size(&self) -> usize {
        self.local_size
    }

    /// Counters of the slower paths.
    pub fn stats(&self) -> ShmStats {
        self.stats
    }

    /// This process's local rank.
    pub fn me(&self) -> usize {
        self.me
    }

    /// Record in the segment that this rank finalized: a peer that later
    /// sees its process gone knows it left on purpose.
    pub fn mark_finalized(&self) {
        self.seg
            .word(self.layout.slot(self.me) + S_DONE)
            .store(1, Ordering::Release);
    }

    /// Whether local rank `peer` finalized ([`Self::mark_finalized`]).
    pub fn peer_finalized(&self, peer: usize) -> bool {
        peer < self.local_size
            && self
                .seg
                .word(self.layout.slot(peer) + S_DONE)
                .load(Ordering::Acquire)
                != 0
    }

    /// Process id of local rank `peer` (for single-copy reads); 0 if `peer`
    /// has not attached yet or is out of range.
    pub fn peer_pid(&self, peer: usize) -> u32 {
        if peer >= self.local_size {
            return 0;
        }
        self.seg
            .word(self.layout.slot(peer) + S_PID)
            .load(Ordering::Acquire) as u32
    }

    /// Whether this process can read local rank `peer`'s memory with
    /// `process_vm_readv` (reads the probe word the peer published at
    /// attach). False when the peer has not attached yet or the kernel
    /// refuses (see `cma`); the engine then uses the copy path.
    pub fn cma_probe(&self, peer: usize) -> bool {
        let pid = self.peer_pid(peer);
        if pid == 0 {
            return false;
        }
        let slot = self.layout.slot(peer);
        let addr = self.seg.word(slot + S_CMA_ADDR).load(Ordering::Relaxed);
        let value = self.seg.word(slot + S_CMA_VALUE).load(Ordering::Relaxed);
        cma::probe_peer(pid, addr, &value.to_ne_bytes())
    }

    pub fn config(&self) -> &ShmConfig {
        &self.config
    }
}
