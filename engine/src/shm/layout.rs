//! Where everything sits in the node segment. All offsets are from the
//! segment base; every region starts on a 64-byte line.
//!
//! ```text
//! 0      header line: magic, version, local_size, the four config sizes, total
//! 64     attach counter, then the number of lanes (read once, at attach)
//! 128    rank slots, 64 B each: pid, CMA probe address, CMA probe value
//! ...    lanes, one per worker (`thread.rs`), each `lane_bytes` of:
//! ...    rank control blocks, one per local rank:
//!          +0   receive queue {head, tail}
//!          +64  free queue {head, tail}
//!          +128 active-senders generation
//!          +192 active-senders bitmap (one bit per local rank)
//! ...    fastbox rings, one per ordered pair s != r (index s*(n-1) + r'):
//!          +0   consumed counter (written by the receiver only)
//!          +64  fastbox_bytes of 64-byte slots
//! ...    cells: local_size * cells_per_rank cells of cell_bytes, rank-major
//! ```
//!
//! A lane is a whole shared-memory transport of its own (queues, rings,
//! cells, sequence numbers): two workers' traffic shares no word and no
//! cache line of the segment.

use super::{ShmConfig, ShmError};

pub const LINE: usize = 64;
/// "RIVETSHM" in little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"RIVETSHM");
/// Bump on any change of this layout, the cell header or the record format.
pub const VERSION: u64 = 3;

pub const H_MAGIC: usize = 0;
pub const H_VERSION: usize = 8;
pub const H_LOCAL_SIZE: usize = 16;
pub const H_FASTBOX_BYTES: usize = 24;
pub const H_FASTBOX_MAX: usize = 32;
pub const H_CELLS: usize = 40;
pub const H_CELL_BYTES: usize = 48;
pub const H_TOTAL: usize = 56;
pub const H_ATTACHED: usize = 64;
pub const H_LANES: usize = 72;
pub const SLOTS_BASE: usize = 128;
/// Header bytes an attacher needs before it can read the sizes.
pub const HEADER_MIN: usize = SLOTS_BASE;

/// Offsets inside a rank slot.
pub const S_PID: usize = 0;
pub const S_CMA_ADDR: usize = 8;
pub const S_CMA_VALUE: usize = 16;
/// Nonzero once the rank finalized (so its process ending is no failure).
pub const S_DONE: usize = 24;

/// Offsets inside a rank control block. Each queue's head (the
/// consumer's) and tail (swapped by every producer) have a line each, so
/// producers enqueueing do not take the line the consumer dequeues from.
pub const C_RECV_HEAD: usize = 0;
pub const C_RECV_TAIL: usize = 64;
pub const C_FREE_HEAD: usize = 128;
pub const C_FREE_TAIL: usize = 192;
pub const C_GEN: usize = 256;
pub const C_BITMAP: usize = 320;

/// Cell header: `next | seq | src u32, len u32 | WireHeader`, payload at 64.
pub const CELL_NEXT: usize = 0;
pub const CELL_SEQ: usize = 8;
pub const CELL_SRC: usize = 16;
pub const CELL_LEN: usize = 20;
pub const CELL_HEADER: usize = 24;
pub const CELL_PAYLOAD: usize = 64;
/// Set in a cell's `len` word: the message goes on in the sender's next
/// cell (a message longer than one cell's payload, `send.rs`).
pub const CELL_MORE: u32 = 1 << 31;
/// Most cells one message may span (fewer if a rank has few cells:
/// `ShmNode::max_message`).
pub const MAX_MESSAGE_CELLS: usize = 4;

/// Most local ranks a segment supports (sanity bound on header values).
pub const MAX_LOCAL_SIZE: usize = 1 << 16;
/// Most lanes a segment supports (sanity bound on the header value;
/// worker numbers stay below 32 in request handles, `table.rs`).
pub const MAX_LANES: usize = 32;

#[derive(Debug, Clone)]
pub struct Layout {
    pub local_size: usize,
    pub bitmap_words: usize,
    pub ctl_base: usize,
    pub ctl_stride: usize,
    pub rings_base: usize,
    /// 0 when rings are off.
    pub ring_stride: usize,
    pub ring_slots: u64,
    pub cells_base: usize,
    pub cell_bytes: usize,
    pub cells_per_rank: usize,
    /// Lanes in the segment, and the bytes of each; the offsets above are
    /// lane 0's until `for_lane` moves them.
    pub lanes: usize,
    pub lane_bytes: usize,
    pub total: usize,
}

fn round_up(v: usize, to: usize) -> Option<usize> {
    v.checked_add(to - 1).map(|x| x / to * to)
}

impl Layout {
    /// Compute the layout for a validated config; errors on overflow.
    pub fn compute(local_size: usize, cfg: &ShmConfig, lanes: usize) -> Result<Layout, ShmError> {
        let too_big = || ShmError::TooBig {
            local_size,
            config: cfg.clone(),
        };
        let bitmap_words = local_size.div_ceil(64);
        let ctl_base = SLOTS_BASE + LINE * local_size;
        let ctl_stride = C_BITMAP + round_up(bitmap_words * 8, LINE).ok_or_else(too_big)?;
        let rings_base = ctl_stride
            .checked_mul(local_size)
            .and_then(|v| v.checked_add(ctl_base))
            .ok_or_else(too_big)?;
        let ring_stride = if cfg.fastbox_bytes == 0 {
            0
        } else {
            LINE + cfg.fastbox_bytes
        };
        let rings = local_size * (local_size - 1);
        let cells_base = ring_stride
            .checked_mul(rings)
            .and_then(|v| v.checked_add(rings_base))
            .ok_or_else(too_big)?;
        let lane_end = cfg
            .cell_bytes
            .checked_mul(cfg.cells_per_rank)
            .and_then(|v| v.checked_mul(local_size))
            .and_then(|v| v.checked_add(cells_base))
            .ok_or_else(too_big)?;
        // Every region is a whole number of lines, so lanes stay line-aligned.
        let lane_bytes = lane_end - ctl_base;
        if lanes == 0 || lanes > MAX_LANES {
            return Err(ShmError::BadLanes(lanes));
        }
        let total = lane_bytes
            .checked_mul(lanes)
            .and_then(|v| v.checked_add(ctl_base))
            .and_then(|v| round_up(v, 4096))
            .filter(|&v| v <= isize::MAX as usize / 2)
            .ok_or_else(too_big)?;
        Ok(Layout {
            local_size,
            bitmap_words,
            ctl_base,
            ctl_stride,
            rings_base,
            ring_stride,
            ring_slots: (cfg.fastbox_bytes / LINE) as u64,
            cells_base,
            cell_bytes: cfg.cell_bytes,
            cells_per_rank: cfg.cells_per_rank,
            lanes,
            lane_bytes,
            total,
        })
    }

    /// The same layout with lane `lane`'s control blocks, rings and cells
    /// (`lane < lanes`); the header and rank slots are shared.
    pub fn for_lane(&self, lane: usize) -> Layout {
        debug_assert!(lane < self.lanes);
        let shift = lane * self.lane_bytes;
        Layout {
            ctl_base: self.ctl_base + shift,
            rings_base: self.rings_base + shift,
            cells_base: self.cells_base + shift,
            ..self.clone()
        }
    }

    pub fn slot(&self, rank: usize) -> usize {
        SLOTS_BASE + rank * LINE
    }

    pub fn ctl(&self, rank: usize) -> usize {
        self.ctl_base + rank * self.ctl_stride
    }

    /// Ring from `s` to `r` (`s != r`): offset of its control line; its data
    /// follows one line later.
    pub fn ring(&self, s: usize, r: usize) -> usize {
        debug_assert!(s != r && self.ring_stride != 0);
        let r2 = if r > s { r - 1 } else { r };
        self.rings_base + (s * (self.local_size - 1) + r2) * self.ring_stride
    }
}
