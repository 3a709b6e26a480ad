//! Shared memory between the ranks of one node.
//!
//! One segment per node and job (`segment`), created by the node's lowest
//! rank, attached by the others and unlinked by the last to attach, so a
//! crash after start-up leaks nothing. Inside it (`layout`):
//! - per ordered pair, a fastbox ring (`fastbox`) of cache-line slots for
//!   small messages: the receiver polls memory only it and one writer touch;
//! - per rank, a Nemesis-style lock-free MPSC receive queue and a free queue
//!   of cells (`queue`) for everything bigger and for fan-in;
//! - per-pair sequence numbers that merge the two back into send order.
//!
//! All of that is one lane; a segment has one lane per worker
//! (`thread.rs`), each a separate copy, so two workers' traffic shares no
//! lock and no cache line (`ShmNode::take_lanes`).
//!
//! Large messages do not pass through here whole: the engine's rendezvous
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
pub mod layout;
mod segment;

/// In `rivet-lockfree` (its loom models build it alone), used from here.
pub use rivet_lockfree::{fastbox, queue};
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use memmap2::MmapMut;

use crate::wire::WireHeader;
use fastbox::{next_seq, BeforeCell, Inbound, MergeError, RxRing, TxRing};
use layout::*;
use queue::{enqueue, BadLink, CellRegion, Consumer, Dequeued, Ends};

/// Default bytes per fastbox ring: 512 slots, i.e. 512 messages of up to 16
/// bytes or 30 of 1 KiB in flight per pair before falling back to cells,
/// enough for a message-rate window of 64-256 small messages. Memory is
/// O(ranks^2): 64 ranks on a node take 64*63*32 KiB = 126 MiB of /dev/shm.
pub const DEFAULT_FASTBOX_BYTES: usize = 32 * 1024;
/// Default largest payload sent through a ring: the engine's small-message
/// path (<= 1 KiB); bigger payloads take cells (one copy each way either way,
/// a ring slot saves the free-queue round trip).
pub const DEFAULT_FASTBOX_MAX: usize = 1024;
/// Default cells per rank (as MPICH Nemesis and CH4 iqueue).
pub const DEFAULT_CELLS: usize = 64;
/// Default bytes per cell including its 64-byte header: between CH4 iqueue's
/// 8 KiB and Nemesis' 64 KiB; 64 cells cost 1 MiB per rank.
pub const DEFAULT_CELL_BYTES: usize = 16 * 1024;

/// How long a consumer waits for a producer that is between its tail swap and
/// its link store before it gives up for this poll.
const SPINS: u32 = 64;

/// Sizes of the node segment; read from `RIVET_SHM_*` by the leader and
/// recorded in the segment so every rank agrees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmConfig {
    /// Bytes of each per-pair fastbox ring (`RIVET_SHM_FASTBOX_SIZE`): a power
    /// of two, or 0 to send everything through cells.
    pub fastbox_bytes: usize,
    /// Largest payload sent through a fastbox ring (`RIVET_SHM_FASTBOX_MAX`).
    pub fastbox_max: usize,
    /// Cells per rank (`RIVET_SHM_CELLS`).
    pub cells_per_rank: usize,
    /// Bytes per cell, header included (`RIVET_SHM_CELL_SIZE`): a power of
    /// two, at least 128.
    pub cell_bytes: usize,
}

impl Default for ShmConfig {
    fn default() -> ShmConfig {
        ShmConfig {
            fastbox_bytes: DEFAULT_FASTBOX_BYTES,
            fastbox_max: DEFAULT_FASTBOX_MAX,
            cells_per_rank: DEFAULT_CELLS,
            cell_bytes: DEFAULT_CELL_BYTES,
        }
    }
}

impl ShmConfig {
    /// Defaults overridden by `RIVET_SHM_FASTBOX_SIZE`, `RIVET_SHM_FASTBOX_MAX`,
    /// `RIVET_SHM_CELLS` and `RIVET_SHM_CELL_SIZE`, validated.
    pub fn from_env() -> Result<ShmConfig, ShmError> {
        ShmConfig::from_lookup(rivet_settings::var)
    }

    /// As [`ShmConfig::from_env`] with variables looked up by `get`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<ShmConfig, ShmError> {
        let mut c = ShmConfig::default();
        let fields: [(&'static str, &mut usize); 4] = [
            ("RIVET_SHM_FASTBOX_SIZE", &mut c.fastbox_bytes),
            ("RIVET_SHM_FASTBOX_MAX", &mut c.fastbox_max),
            ("RIVET_SHM_CELLS", &mut c.cells_per_rank),
            ("RIVET_SHM_CELL_SIZE", &mut c.cell_bytes),
        ];
        for (name, field) in fields {
            if let Some(v) = get(name) {
                *field = rivet_netmods::parse_size(&v).map_err(|why| ShmError::Config {
                    name,
                    value: v.clone(),
                    why,
                })?;
            }
        }
        c.validate()?;
        Ok(c)
    }

    /// Check the sizes against what the segment format supports.
    pub fn validate(&self) -> Result<(), ShmError> {
        let bad = |name: &'static str, value: usize, why: String| ShmError::Config {
            name,
            value: value.to_string(),
            why,
        };
        if self.cell_bytes < 128 || !self.cell_bytes.is_power_of_two() || self.cell_bytes > 1 << 30
        {
            return Err(bad(
                "RIVET_SHM_CELL_SIZE",
                self.cell_bytes,
                "must be a power of two between 128 and 1GiB".into(),
            ));
        }
        if self.cells_per_rank == 0 || self.cells_per_rank > 1 << 20 {
            return Err(bad(
                "RIVET_SHM_CELLS",
                self.cells_per_rank,
                "must be between 1 and 1048576".into(),
            ));
        }
        if self.fastbox_max > fastbox::MAX_RECORD_PAYLOAD {
            return Err(bad(
                "RIVET_SHM_FASTBOX_MAX",
                self.fastbox_max,
                format!("must be at most {}", fastbox::MAX_RECORD_PAYLOAD),
            ));
        }
        if self.fastbox_bytes != 0 {
            // A record, a wrap filler and the next marker must fit in a
            // quarter ring (the receiver publishes consumption every quarter).
            let min = (4 * (fastbox::record_slots(self.fastbox_max) as usize + 1) * fastbox::SLOT)
                .next_power_of_two();
            if !self.fastbox_bytes.is_power_of_two()
                || self.fastbox_bytes < min
                || self.fastbox_bytes > 1 << 30
            {
                return Err(bad(
                    "RIVET_SHM_FASTBOX_SIZE",
                    self.fastbox_bytes,
                    format!(
                        "must be 0 (no rings) or a power of two between {min} (for \
                         RIVET_SHM_FASTBOX_MAX={}) and 1GiB",
                        self.fastbox_max
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    #[error("bad setting {name}={value:?}: {why}")]
    Config {
        name: &'static str,
        value: String,
        why: String,
    },
    #[error(
        "shared memory segment name {name:?} is invalid: {why}; use a plain name such as \
         \"rivet-<job>-<pid>\""
    )]
    Name { name: String, why: String },
    #[error("local_size {0} is invalid: a node has between 1 and 65536 local ranks")]
    BadLocalSize(usize),
    #[error("{0} shared-memory lanes is invalid: a node segment has 1 to 32 (RIVET_WORKERS)")]
    BadLanes(usize),
    #[error("local rank {my_local} is out of range for a node of {local_size} local ranks")]
    BadRank { my_local: usize, local_size: usize },
    #[error(
        "shared memory segment /dev/shm/{name} already exists: another job uses this name or a \
         crashed run left it behind; pick another name or remove the file"
    )]
    Exists { name: String },
    #[error(
        "cannot reserve {size} bytes for shared memory segment /dev/shm/{name}: {source}; \
         /dev/shm is too small (in a container raise --shm-size) or lower RIVET_SHM_CELLS, \
         RIVET_SHM_CELL_SIZE or RIVET_SHM_FASTBOX_SIZE"
    )]
    NoSpace {
        name: String,
        size: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The segment is not one our job made: another user owns it, or
    /// others may read or write it (ours are created 0600).
    #[error(
        "shared memory segment /dev/shm/{name} is not safe to attach: {why}; it was not made \
         by this job (rivet creates its segments mode 0600, owned by the job's user)"
    )]
    Untrusted { name: String, why: String },
    #[error(
        "a segment for {local_size} local ranks with {config:?} would not fit in memory; lower \
         the RIVET_SHM_* sizes"
    )]
    TooBig {
        local_size: usize,
        config: ShmConfig,
    },
    #[error(
        "/dev/shm/{name} is {size} bytes but needs at least {need}: it is not a Rivet node \
         segment or was truncated; check the segment name"
    )]
    TooSmall {
        name: String,
        size: u64,
        need: usize,
    },
    #[error(
        "/dev/shm/{name} is not a Rivet node segment (bad magic number), or its creator has not \
         finished initialising it; check the segment name"
    )]
    NotASegment { name: String },
    #[error(
        "/dev/shm/{name} has layout version {found}, this build expects {expected}: all ranks \
         of a job must run the same Rivet build"
    )]
    Version {
        name: String,
        found: u64,
        expected: u64,
    },
    #[error(
        "/dev/shm/{name} was created for {found} local ranks but this rank expects {expected}: \
         the ranks disagree on the node's size; check the process mapping"
    )]
    LocalSizeMismatch {
        name: String,
        found: u64,
        expected: usize,
    },
    #[error("/dev/shm/{name} has an invalid header ({why}): the segment is corrupt")]
    BadHeader { name: String, why: String },
    #[error(
        "local rank {rank} is already attached to /dev/shm/{name} (pid {pid}): two ranks claim \
         the same local index"
    )]
    AlreadyAttached { name: String, rank: usize, pid: u64 },
    #[error(
        "local rank {peer} is not a shared-memory peer of local rank {me} (node of \
         {local_size} ranks; a rank's messages to itself do not go through shared memory)"
    )]
    BadPeer {
        peer: usize,
        me: usize,
        local_size: usize,
    },
    #[error(
        "payload of {len} bytes exceeds the shared-memory maximum of {max} bytes: send it in \
         pieces (rendezvous) or raise RIVET_SHM_CELL_SIZE"
    )]
    TooLarge { len: usize, max: usize },
    #[error(
        "shared memory segment corrupted ({what}; local rank {peer} involved): a process wrote \
         outside the protocol; abort the job"
    )]
    Corrupt { peer: usize, what: String },
}

/// Counters of the slower paths (process-private, for `--info` and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShmStats {
    /// Messages sent through cells.
    pub cell_sends: u64,
    /// Ring-sized messages that found the ring full and took a cell.
    pub ring_full: u64,
    /// `try_send` calls answered `Ok(false)` (no ring room, no free cell).
    pub no_room: u64,
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
    /// Senders whose rings this rank polls, and the generation they reflect.
    active: Vec<u32>,
    seen_gen: u64,
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

fn check_ranks(local_size: usize, my_local: usize) -> Result<(), ShmError> {
    if local_size == 0 || local_size > MAX_LOCAL_SIZE {
        return Err(ShmError::BadLocalSize(local_size));
    }
    if my_local >= local_size {
        return Err(ShmError::BadRank {
            my_local,
            local_size,
        });
    }
    Ok(())
}

impl ShmNode {
    /// Create, size (mode 0600) and initialise the segment `name` for
    /// `local_size` ranks, then attach as local rank `my_local`.
    pub fn create(
        name: &str,
        local_size: usize,
        my_local: usize,
        config: &ShmConfig,
    ) -> Result<ShmNode, ShmError> {
        ShmNode::create_lanes(name, local_size, my_local, config, 1)
    }

    /// As [`ShmNode::create`], with `lanes` independent lanes (one per
    /// worker; every rank that attaches gets the same number).
    pub fn create_lanes(
        name: &str,
        local_size: usize,
        my_local: usize,
        config: &ShmConfig,
        lanes: usize,
    ) -> Result<ShmNode, ShmError> {
        config.validate()?;
        check_ranks(local_size, my_local)?;
        let layout = Layout::compute(local_size, config, lanes)?;
        let file = segment::create(name, layout.total)?;
        let mut guard = segment::UnlinkGuard { name, armed: true };
        let mut map = segment::map(name, &file, layout.total)?;
        let seg = Seg {
            base: map.as_mut_ptr(),
            len: layout.total,
        };
        // The file is new and zero-filled: queues are empty, rings hold no
        // marker, counters are 0. Fill the header and the free queues.
        let header = [
            (H_VERSION, VERSION),
            (H_LOCAL_SIZE, local_size as u64),
            (H_FASTBOX_BYTES, config.fastbox_bytes as u64),
            (H_FASTBOX_MAX, config.fastbox_max as u64),
            (H_CELLS, config.cells_per_rank as u64),
            (H_CELL_BYTES, config.cell_bytes as u64),
            (H_TOTAL, layout.total as u64),
            (H_LANES, lanes as u64),
        ];
        for (off, v) in header {
            seg.word(off).store(v, Ordering::Relaxed);
        }
        let cpr = layout.cells_per_rank as u64;
        for lane in 0..lanes {
            let l = layout.for_lane(lane);
            let cells = cell_region(seg, &l);
            for r in 0..local_size {
                for i in 0..cpr {
                    let off = cells.offset(r as u64 * cpr + i);
                    enqueue(&cells, seg.free_ends(&l, r), off).map_err(|BadLink(x)| {
                        ShmError::Corrupt {
                            peer: r,
                            what: format!("free queue broken during initialisation at {x:#x}"),
                        }
                    })?;
                }
            }
        }
        // Last: attachers that see the magic (acquire) see everything above.
        seg.word(H_MAGIC).store(MAGIC, Ordering::Release);
        let node = ShmNode::join(name, map, layout, config.clone(), my_local)?;
        guard.armed = false;
        Ok(node)
    }

    /// Attach to a segment the leader created; the last rank to attach
    /// unlinks its name.
    pub fn attach(name: &str, local_size: usize, my_local: usize) -> Result<ShmNode, ShmError> {
        check_ranks(local_size, my_local)?;
        let file = segment::open(name)?;
        let size = file
            .metadata()
            .map_err(|source| ShmError::Io {
                what: format!("reading the size of /dev/shm/{name}"),
                source,
            })?
            .len();
        if size < HEADER_MIN as u64 {
            return Err(ShmError::TooSmall {
                name: name.into(),
                size,
                need: HEADER_MIN,
            });
        }
        let bad = |why: String| ShmError::BadHeader {
            name: name.into(),
            why,
        };
        let mapped = usize::try_from(size)
            .ok()
            .filter(|&s| s <= isize::MAX as usize / 2)
            .ok_or_else(|| bad(format!("file size {size}")))?;
        let mut map = segment::map(name, &file, mapped)?;
        let seg = Seg {
            base: map.as_mut_ptr(),
            len: HEADER_MIN,
        };
        if seg.word(H_MAGIC).load(Ordering::Acquire) != MAGIC {
            return Err(ShmError::NotASegment { name: name.into() });
        }
        let version = seg.word(H_VERSION).load(Ordering::Relaxed);
        if version != VERSION {
            return Err(ShmError::Version {
                name: name.into(),
                found: version,
                expected: VERSION,
            });
        }
        let found = seg.word(H_LOCAL_SIZE).load(Ordering::Relaxed);
        if found != local_size as u64 {
            return Err(ShmError::LocalSizeMismatch {
                name: name.into(),
                found,
                expected: local_size,
            });
        }
        let field = |off: usize| {
            let v = seg.word(off).load(Ordering::Relaxed);
            usize::try_from(v).map_err(|_| bad(format!("size {v} at offset {off}")))
        };
        let config = ShmConfig {
            fastbox_bytes: field(H_FASTBOX_BYTES)?,
            fastbox_max: field(H_FASTBOX_MAX)?,
            cells_per_rank: field(H_CELLS)?,
            cell_bytes: field(H_CELL_BYTES)?,
        };
        config.validate().map_err(|e| bad(e.to_string()))?;
        let lanes = field(H_LANES)?;
        let layout = Layout::compute(local_size, &config, lanes).map_err(|e| bad(e.to_string()))?;
        if field(H_TOTAL)? != layout.total {
            return Err(bad(format!(
                "recorded size {} differs from the computed {}",
                field(H_TOTAL)?,
                layout.total
            )));
        }
        if mapped < layout.total {
            return Err(ShmError::TooSmall {
                name: name.into(),
                size,
                need: layout.total,
            });
        }
        ShmNode::join(name, map, layout, config, my_local)
    }

    /// Remove the segment's name (`Ok(false)` if already gone): for a leader
    /// whose start-up fails before every rank attached.
    pub fn remove(name: &str) -> Result<bool, ShmError> {
        segment::unlink(name)
    }

    fn join(
        name: &str,
        mut map: MmapMut,
        layout: Layout,
        config: ShmConfig,
        me: usize,
    ) -> Result<ShmNode, ShmError> {
        let local_size = layout.local_size;
        let seg = Seg {
            base: map.as_mut_ptr(),
            len: layout.total,
        };
        let slot = layout.slot(me);
        let (addr, value) = cma::probe_word();
        seg.word(slot + S_CMA_ADDR).store(addr, Ordering::Relaxed);
        seg.word(slot + S_CMA_VALUE)
            .store(u64::from_ne_bytes(value), Ordering::Relaxed);
        let pid = u64::from(std::process::id());
        if let Err(old) =
            seg.word(slot + S_PID)
                .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire)
        {
            return Err(ShmError::AlreadyAttached {
                name: name.into(),
                rank: me,
                pid: old,
            });
        }
        let n = seg.word(H_ATTACHED).fetch_add(1, Ordering::AcqRel) + 1;
        if n == local_size as u64 {
            segment::unlink(name)?;
        } else if n > local_size as u64 {
            return Err(ShmError::BadHeader {
                name: name.into(),
                why: format!("{n} ranks attached to a segment for {local_size}"),
            });
        }
        Ok(ShmNode::view(
            name,
            std::sync::Arc::new(map),
            seg,
            layout,
            config,
            me,
        ))
    }

    /// The other lanes' handles (1..lanes), once: a second call, or a call
    /// on a lane's handle, gets none (each lane has one sender and one
    /// receiver per pair, so one handle per process).
    pub fn take_lanes(&mut self) -> Vec<ShmNode> {
        if !self.primary || self.lanes_taken {
            return Vec::new();
        }
        self.lanes_taken = true;
        (1..self.layout.lanes)
            .map(|lane| {
                let mut node = ShmNode::view(
                    &self.name,
                    self._map.clone(),
                    self.seg,
                    self.layout.for_lane(lane),
                    self.config.clone(),
                    self.me,
                );
                node.primary = false;
                node
            })
            .collect()
    }

    /// Lanes in the segment (the node leader chose: `thread.rs`).
    pub fn lanes(&self) -> usize {
        self.layout.lanes
    }

    /// The private ends of the lane `layout` places, for local rank `me`.
    fn view(
        name: &str,
        map: std::sync::Arc<MmapMut>,
        seg: Seg,
        layout: Layout,
        config: ShmConfig,
        me: usize,
    ) -> ShmNode {
        let local_size = layout.local_size;
        let slots = layout.ring_slots;
        let rings = layout.ring_stride != 0;
        let mut tx = Vec::with_capacity(local_size);
        let mut rx = Vec::with_capacity(local_size);
        for peer in 0..local_size {
            let (t, r) = if peer == me || !rings {
                (TxRing::none(), RxRing::none())
            } else {
                let out = layout.ring(me, peer);
                let inc = layout.ring(peer, me);
                // SAFETY: both rings lie inside the mapping (layout), their
                // data is 64-byte aligned after a one-line control block;
                // this process is the only sender on `out` and the only
                // receiver on `inc` (one handle per local rank, enforced by
                // the pid slot in `join`, and per lane, by `take_lanes`);
                // the mapping outlives the node (the `Arc` each lane holds).
                unsafe {
                    (
                        TxRing::new(
                            seg.base.add(out + LINE),
                            seg.word(out) as *const AtomicU64,
                            slots,
                        ),
                        RxRing::new(
                            seg.base.add(inc + LINE),
                            seg.word(inc) as *const AtomicU64,
                            slots,
                            config.fastbox_max,
                        ),
                    )
                }
            };
            tx.push(CachePadded::new(TxPeer {
                ring: t,
                next_seq: 1,
                announced: false,
            }));
            rx.push(CachePadded::new(Inbound::new(r)));
        }
        let max_payload = config.cell_bytes - CELL_PAYLOAD;
        let fb_cut = if rings {
            config.fastbox_max.min(max_payload) + 1
        } else {
            0
        };
        ShmNode {
            tx: tx.into_boxed_slice(),
            rx: rx.into_boxed_slice(),
            recv: CachePadded::new(Consumer::new()),
            free: CachePadded::new(Consumer::new()),
            seg,
            cells: cell_region(seg, &layout),
            me,
            local_size,
            fb_cut,
            max_payload,
            active: Vec::with_capacity(local_size),
            seen_gen: 0,
            rr: 0,
            pending: 0,
            queue_first: false,
            stats: ShmStats::default(),
            layout,
            config,
            name: name.into(),
            primary: true,
            lanes_taken: false,
            _map: map,
        }
    }

    /// Largest payload `try_send` accepts.
    pub fn max_payload(&self) -> usize {
        self.max_payload
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

    /// Queue one message for local rank `peer`. `Ok(false)`: no room now;
    /// try again after polling (the caller keeps its own order).
    #[inline(always)]
    pub fn try_send(
        &mut self,
        peer: usize,
        header: &WireHeader,
        payload: &[u8],
    ) -> Result<bool, ShmError> {
        if peer >= self.local_size || peer == self.me {
            return Err(self.bad_peer(peer));
        }
        if payload.len() < self.fb_cut {
            if !self.tx[peer].announced {
                self.announce(peer);
            }
            let tx = &mut *self.tx[peer];
            if tx.ring.try_push(tx.next_seq, header, payload) {
                tx.next_seq = next_seq(tx.next_seq);
                return Ok(true);
            }
            self.stats.ring_full += 1;
        }
        self.send_cell(peer, header, payload)
    }

    #[cold]
    #[inline(never)]
    fn bad_peer(&self, peer: usize) -> ShmError {
        ShmError::BadPeer {
            peer,
            me: self.me,
            local_size: self.local_size,
        }
    }

    /// First ring message to `peer`: set our bit in its active-senders
    /// bitmap, then bump its generation so its next poll rereads the bitmap.
    #[cold]
    #[inline(never)]
    fn announce(&mut self, peer: usize) {
        let c = self.layout.ctl(peer);
        self.seg
            .word(c + C_BITMAP + (self.me / 64) * 8)
            .fetch_or(1 << (self.me % 64), Ordering::Release);
        self.seg.word(c + C_GEN).fetch_add(1, Ordering::Release);
        self.tx[peer].announced = true;
    }

    #[inline(never)]
    fn send_cell(
        &mut self,
        peer: usize,
        header: &WireHeader,
        payload: &[u8],
    ) -> Result<bool, ShmError> {
        if payload.len() > self.max_payload {
            return Err(ShmError::TooLarge {
                len: payload.len(),
                max: self.max_payload,
            });
        }
        let me = self.me;
        let off = match self
            .free
            .dequeue(&self.cells, self.seg.free_ends(&self.layout, me), SPINS)
        {
            Ok(Dequeued::Item(off)) => off,
            Ok(Dequeued::Empty | Dequeued::Busy) => {
                self.stats.no_room += 1;
                return Ok(false);
            }
            Err(BadLink(x)) => {
                return Err(ShmError::Corrupt {
                    peer: me,
                    what: format!("free-cell queue of local rank {me} links to {x:#x}, not a cell"),
                })
            }
        };
        let owner = (self.cells.index(off) / self.layout.cells_per_rank as u64) as usize;
        if owner != me {
            return Err(ShmError::Corrupt {
                peer: owner,
                what: format!("free-cell queue of local rank {me} holds a cell of rank {owner}"),
            });
        }
        let tx = &mut *self.tx[peer];
        let p = self.cells.ptr(off);
        // SAFETY: the cell is inside the region (`contains` checked by the
        // dequeue) and ours alone between dequeue and enqueue; its header and
        // `max_payload` bytes of payload fit in `cell_bytes`; offsets are
        // aligned for each field (cells are 64-byte aligned).
        unsafe {
            p.add(CELL_SEQ).cast::<u64>().write(tx.next_seq);
            p.add(CELL_SRC).cast::<u32>().write(me as u32);
            p.add(CELL_LEN).cast::<u32>().write(payload.len() as u32);
            p.add(CELL_HEADER).cast::<WireHeader>().write(*header);
            std::ptr::copy_nonoverlapping(payload.as_ptr(), p.add(CELL_PAYLOAD), payload.len());
        }
        enqueue(&self.cells, self.seg.recv_ends(&self.layout, peer), off).map_err(
            |BadLink(x)| ShmError::Corrupt {
                peer,
                what: format!("receive queue of local rank {peer} links to {x:#x}, not a cell"),
            },
        )?;
        tx.next_seq = next_seq(tx.next_seq);
        self.stats.cell_sends += 1;
        Ok(true)
    }

    /// Hand up to `budget` arrived messages to `deliver(peer, header,
    /// payload)`, in each sender's send order. The payload borrows shared
    /// memory and is valid only during the call.
    pub fn poll(
        &mut self,
        budget: usize,
        mut deliver: impl FnMut(usize, &WireHeader, &[u8]),
    ) -> Result<usize, ShmError> {
        if budget == 0 {
            return Ok(0);
        }
        let mut done = 0;
        if self.pending != 0 {
            let off = std::mem::replace(&mut self.pending, 0);
            done += self.take_cell(off, budget, &mut deliver)?;
            if self.pending != 0 {
                return Ok(done);
            }
        }
        let g = self
            .seg
            .word(self.layout.ctl(self.me) + C_GEN)
            .load(Ordering::Acquire);
        if g != self.seen_gen {
            self.refresh_active(g);
        }
        let queue_first = self.queue_first;
        if queue_first && done < budget {
            done += self.poll_queue(budget - done, &mut deliver)?;
        }
        let k = self.active.len();
        if k != 0 {
            let start = self.rr;
            self.rr = if start + 1 >= k { 0 } else { start + 1 };
            let mut i = start;
            for _ in 0..k {
                if done >= budget {
                    break;
                }
                let s = self.active[i] as usize;
                done += self.poll_ring(s, budget - done, &mut deliver)?;
                i = if i + 1 == k { 0 } else { i + 1 };
            }
        }
        if !queue_first && done < budget {
            done += self.poll_queue(budget - done, &mut deliver)?;
        }
        self.queue_first = !queue_first && done >= budget;
        Ok(done)
    }

    /// Reread the active-senders bitmap (it changed since the last poll).
    #[cold]
    #[inline(never)]
    fn refresh_active(&mut self, g: u64) {
        self.seen_gen = g;
        self.active.clear();
        let c = self.layout.ctl(self.me);
        for w in 0..self.layout.bitmap_words {
            let mut bits = self.seg.word(c + C_BITMAP + 8 * w).load(Ordering::Acquire);
            while bits != 0 {
                let s = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                // Bits for nonexistent ranks or ourselves are ignored.
                if s < self.local_size && s != self.me && self.rx[s].ring.is_some() {
                    self.active.push(s as u32);
                }
            }
        }
        if self.rr >= self.active.len() {
            self.rr = 0;
        }
    }

    /// Deliver up to `max` records from `s`'s ring, in sequence.
    #[inline]
    fn poll_ring<F: FnMut(usize, &WireHeader, &[u8])>(
        &mut self,
        s: usize,
        max: usize,
        deliver: &mut F,
    ) -> Result<usize, ShmError> {
        let rx = &mut *self.rx[s];
        let mut k = 0;
        while k < max {
            match rx.next_record() {
                Ok(Some(rec)) => {
                    // SAFETY: `peek` checked the record lies inside the ring;
                    // the sender leaves it alone until `consume` publishes it.
                    let payload = unsafe { std::slice::from_raw_parts(rec.payload, rec.len) };
                    deliver(s, &rec.header, payload);
                    rx.record_done(&rec);
                    k += 1;
                }
                Ok(None) => break,
                Err(what) => {
                    return Err(ShmError::Corrupt {
                        peer: s,
                        what: what.into(),
                    })
                }
            }
        }
        Ok(k)
    }

    /// Deliver up to `max` messages from the receive queue.
    #[inline]
    fn poll_queue<F: FnMut(usize, &WireHeader, &[u8])>(
        &mut self,
        max: usize,
        deliver: &mut F,
    ) -> Result<usize, ShmError> {
        let mut k = 0;
        while k < max {
            let me = self.me;
            match self
                .recv
                .dequeue(&self.cells, self.seg.recv_ends(&self.layout, me), SPINS)
            {
                Ok(Dequeued::Item(off)) => {
                    k += self.take_cell(off, max - k, deliver)?;
                    if self.pending != 0 {
                        break;
                    }
                }
                Ok(Dequeued::Empty | Dequeued::Busy) => break,
                Err(BadLink(x)) => {
                    return Err(ShmError::Corrupt {
                        peer: me,
                        what: format!(
                            "receive queue of local rank {me} links to {x:#x}, not a cell"
                        ),
                    })
                }
            }
        }
        Ok(k)
    }

    /// Deliver cell `off` (dequeued from our receive queue) after any ring
    /// records of its sender that precede it, up to `max` messages in all;
    /// stash it in `pending` if the budget runs out first. Then return the
    /// cell to its owner's free queue.
    fn take_cell<F: FnMut(usize, &WireHeader, &[u8])>(
        &mut self,
        off: u64,
        max: usize,
        deliver: &mut F,
    ) -> Result<usize, ShmError> {
        let owner = (self.cells.index(off) / self.layout.cells_per_rank as u64) as usize;
        let p = self.cells.ptr(off);
        // SAFETY: `off` is a cell of the region (the dequeue checked it); it
        // is ours until we enqueue it on its owner's free queue, and its
        // producer's writes are visible (acquire in the dequeue).
        let (seq, src, len) = unsafe {
            (
                p.add(CELL_SEQ).cast::<u64>().read(),
                p.add(CELL_SRC).cast::<u32>().read() as usize,
                p.add(CELL_LEN).cast::<u32>().read() as usize,
            )
        };
        let corrupt = |what: String| ShmError::Corrupt { peer: owner, what };
        if src != owner || owner == self.me {
            return Err(corrupt(format!(
                "cell {off:#x} of local rank {owner} claims source {src} and reached rank {}",
                self.me
            )));
        }
        if len > self.max_payload {
            return Err(corrupt(format!("cell {off:#x} claims {len} payload bytes")));
        }
        let mut k = 0;
        let rx = &mut *self.rx[owner];
        loop {
            if k >= max {
                self.pending = off;
                return Ok(k);
            }
            let rec = match rx.before_cell(seq) {
                Ok(BeforeCell::Record(rec)) => rec,
                Ok(BeforeCell::Cell) => break,
                Err(e) => return Err(merge_error(owner, seq, e)),
            };
            // SAFETY: as in `poll_ring`.
            let payload = unsafe { std::slice::from_raw_parts(rec.payload, rec.len) };
            deliver(owner, &rec.header, payload);
            rx.record_done(&rec);
            k += 1;
        }
        // SAFETY: see above; `len <= max_payload` keeps the payload inside
        // the cell.
        let (header, payload) = unsafe {
            (
                p.add(CELL_HEADER).cast::<WireHeader>().read(),
                std::slice::from_raw_parts(p.add(CELL_PAYLOAD), len),
            )
        };
        deliver(owner, &header, payload);
        rx.cell_done();
        enqueue(&self.cells, self.seg.free_ends(&self.layout, owner), off).map_err(
            |BadLink(x)| {
                corrupt(format!(
                    "free-cell queue of local rank {owner} links to {x:#x}, not a cell"
                ))
            },
        )?;
        Ok(k + 1)
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

/// A cell from `peer` with sequence number `seq` that does not fit its order.
#[cold]
#[inline(never)]
fn merge_error(peer: usize, seq: u64, e: MergeError) -> ShmError {
    let what = match e {
        MergeError::Ring(w) => w.into(),
        MergeError::Missing { expected } => format!(
            "cell with sequence number {seq} arrived but message {expected} is neither in the \
             ring nor queued before it"
        ),
        MergeError::Late { expected } => {
            format!("cell with sequence number {seq} arrived after {expected} was delivered")
        }
    };
    ShmError::Corrupt { peer, what }
}

fn cell_region(seg: Seg, l: &Layout) -> CellRegion {
    let count = (l.local_size * l.cells_per_rank) as u64;
    // SAFETY: the cells region lies inside the mapping (layout total), which
    // outlives every `CellRegion` copy (held by the `ShmNode` with the map, or
    // used during `create` while `map` is alive); `cells_base` is 64-aligned
    // and nonzero, `cell_bytes` a power of two >= 128 (validated config); cell
    // `next` words are only accessed atomically.
    unsafe { CellRegion::new(seg.base, l.cells_base as u64, l.cell_bytes as u64, count) }
}
