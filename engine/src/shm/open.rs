//! Opening a node's segment: the lowest rank creates and initialises it,
//! the others attach (`join` checks what they find), and a segment with
//! several lanes is cut into one `ShmNode` per worker (`take_lanes`).

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use memmap2::MmapMut;

use super::config::*;
use super::fastbox::{Inbound, RxRing, TxRing};
use super::layout::*;
use super::queue::{enqueue, BadLink, CellRegion, Consumer};
use super::{cma, segment, term, Assembly, Seg, ShmNode, ShmStats, TxPeer};

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
        let mut armed = None;
        if n == local_size as u64 {
            segment::unlink(name)?;
        } else if n > local_size as u64 {
            return Err(ShmError::BadHeader {
                name: name.into(),
                why: format!("{n} ranks attached to a segment for {local_size}"),
            });
        } else {
            armed = term::arm(name);
        }
        let mut node = ShmNode::view(name, std::sync::Arc::new(map), seg, layout, config, me);
        node._term = armed;
        Ok(node)
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
        // All cells of a message are taken at once: leave a rank at least
        // as many again for everything else.
        let cells_per_message = MAX_MESSAGE_CELLS.min(config.cells_per_rank / 2).max(1);
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
            max_message: max_payload * cells_per_message,
            asm: (0..local_size).map(|_| Assembly::default()).collect(),
            active: Vec::with_capacity(local_size),
            seen_gen: 0,
            gen_off: layout.ctl(me) + C_GEN,
            rr: 0,
            pending: 0,
            queue_first: false,
            stats: ShmStats::default(),
            layout,
            config,
            name: name.into(),
            primary: true,
            lanes_taken: false,
            _term: None,
            _map: map,
        }
    }
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
