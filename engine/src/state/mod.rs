//! The protocol state: everything `deliver` and the posting calls work
//! on (requests, matching, VCs, flow control, the reads and copies under
//! way), and the protocol code that changes several parts of it together:
//! `protocol.rs` (arrivals), `posting.rs` (posting, cancelling, withdrawing
//! and finishing requests), `failure.rs` (peer failure), `rma.rs` and
//! `copy.rs` (single-copy paths), `ports.rs` (ports and temporary VCs),
//! `vcs.rs` (VCs, process groups, send queues). All fields are private to
//! this module: code above (`post.rs`: sends and receives; `core.rs`:
//! transports and progress; `inner.rs`, `engine.rs`, `groups.rs`,
//! `dynamic/`) goes through methods that say what it does (`post_recv`,
//! `withdraw`, `has_failed`, the VC of an id, ...).

mod copies;
mod copy;
pub(crate) mod failure;
mod ports;
mod posting;
pub(crate) mod protocol;
mod reads;
mod rma;
mod spare;
mod vcs;

pub use copies::Copies;
pub(crate) use copies::{Job, Split};
pub use ports::Ports;
pub use reads::{ReadWant, RmaState};
pub use spare::SpareBuffers;

use crate::matching::Matcher;
use crate::pg::{Pgs, VcId};
use crate::route::RouteLimits;
use crate::table::RequestTable;

/// An unexpected message: arrived before its receive was posted.
pub enum Unexpected {
    /// Eager data, copied out of the transport.
    Eager {
        data: Vec<u8>,
        sreq: u64,
        sync: bool,
        vc: VcId,
    },
    /// A rendezvous request; the data stays with the sender until matched.
    Rts {
        len: u64,
        addr: u64,
        /// Region key for a netmod read (`FLAG_RMA_KEY`).
        key: Option<u64>,
        sreq: u64,
        vc: VcId,
    },
}

impl Unexpected {
    pub fn len(&self) -> usize {
        match self {
            Unexpected::Eager { data, .. } => data.len(),
            Unexpected::Rts { len, .. } => *len as usize,
        }
    }

    pub fn origin(&self) -> (VcId, u64) {
        match self {
            Unexpected::Eager { vc, sreq, .. } | Unexpected::Rts { vc, sreq, .. } => (*vc, *sreq),
        }
    }
}

/// Protocol state: what `deliver` and the API calls work on.
pub struct State {
    pgs: Pgs,
    requests: RequestTable,
    matcher: Matcher<u64, Unexpected>,
    /// Ranks whose VC has pending messages.
    pending_vcs: Vec<VcId>,
    /// Eager size and rendezvous piece of each transport, by route (the
    /// netmod's set when it opens, `Core::open_netmod`).
    limits: RouteLimits,
    /// Single-copy reads may be tried (mode and init probe allow it).
    cma_allowed: bool,
    /// Single-copy messages from this size on are copied by both sides
    /// (0: never); the copies under way (`copy.rs`).
    split_min: usize,
    copies: Copies,
    /// A transport or peer failed; every wait reports it.
    fatal: Option<String>,
    /// Peers whose connection failed, and why (see `peer_failed`).
    failed_peers: Vec<(VcId, String)>,
    /// Open ports and the connections waiting on them (dynamic processes).
    ports: Ports,
    /// Rendezvous reads over the netmod (`rma.rs`).
    rma: RmaState,
    /// Requests completed so far: `wait_any` rescans its requests only
    /// when this moved.
    completions: u64,
    /// Buffers of unexpected eager messages already received, kept for
    /// the next ones so that steady state allocates nothing.
    spare: SpareBuffers,
    /// Messages taken by a matched probe (`mprobe`), by handle, until
    /// they are received; and the next handle.
    held: std::collections::HashMap<u64, (crate::matching::Envelope, Unexpected)>,
    next_held: u64,
}

/// A byte slice from a raw pointer that may be null when empty.
///
/// # Safety
/// Unless `len` is 0, `ptr..ptr+len` must be valid for reads for the
/// returned lifetime.
#[inline]
pub unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

/// What the protocols are set up with at init: the transports' limits and
/// the single-copy choices.
#[derive(Clone, Copy)]
pub struct Setup {
    pub limits: RouteLimits,
    pub cma_allowed: bool,
    pub split_min: usize,
}

impl State {
    /// A state with nothing in flight.
    pub fn new(pgs: Pgs, l: Setup) -> State {
        State::for_worker(pgs, l, 0)
    }

    /// The state of worker `worker` (`thread.rs`): its request handles and
    /// held-message keys carry the number (`table::worker_of`).
    pub fn for_worker(pgs: Pgs, l: Setup, worker: usize) -> State {
        State {
            pgs,
            requests: RequestTable::for_worker(worker),
            matcher: Matcher::new(),
            pending_vcs: Vec::new(),
            limits: l.limits,
            cma_allowed: l.cma_allowed,
            split_min: l.split_min,
            copies: Copies::default(),
            fatal: None,
            failed_peers: Vec::new(),
            ports: Ports::default(),
            rma: RmaState::default(),
            completions: 0,
            spare: SpareBuffers::default(),
            held: Default::default(),
            next_held: ((worker as u64) << crate::table::WORKER_SHIFT) | 1,
        }
    }
}

/// What code outside `state/` may ask or record; each says what its caller
/// does, so the fields that go together change together here.
impl State {
    /// The transports' limits, by route.
    #[inline]
    pub fn limits(&self) -> &RouteLimits {
        &self.limits
    }

    /// The netmod opened (at init, or later for dynamic processes): netmod
    /// routes take its limits from now on.
    pub fn netmod_opened(&mut self, limits: crate::route::Limits) {
        self.limits.net = limits;
    }

    /// The first failure (a transport's, or a read that could not be
    /// stopped), which every wait reports; `None` while all is well.
    #[inline]
    pub fn fatal(&self) -> Option<&str> {
        self.fatal.as_deref()
    }

    /// Whether peer `vc` failed (`peer_failed`).
    #[inline]
    pub fn has_failed(&self, vc: VcId) -> bool {
        // The emptiness test first: every receive from a rank asks.
        !self.failed_peers.is_empty() && self.failed_peers.iter().any(|(v, _)| *v == vc)
    }

    /// Why peer `vc` failed, if it did.
    pub fn why_failed(&self, vc: VcId) -> Option<&str> {
        self.failed_peers
            .iter()
            .find(|(v, _)| *v == vc)
            .map(|(_, why)| why.as_str())
    }

    /// The first failed peer with rank `rank` in its group.
    pub fn failed_with_rank(&self, rank: u32) -> Option<VcId> {
        self.failed_peers
            .iter()
            .map(|(vc, _)| *vc)
            .find(|vc| vc.rank() == rank)
    }

    /// Every failed peer and why, in the order they failed (for `info`).
    pub fn failed_peers(&self) -> impl Iterator<Item = (VcId, &str)> {
        self.failed_peers
            .iter()
            .map(|(vc, why)| (*vc, why.as_str()))
    }

    /// Process group `slot` is gone (`Core::retire_group`): its VCs leave
    /// the send queue list, and its failures go with it (slots are never
    /// reused, so no later peer is taken for failed).
    pub fn group_retired(&mut self, slot: u32) {
        self.pending_vcs.retain(|v| v.group() != slot);
        self.failed_peers.retain(|(v, _)| v.group() != slot);
    }

    /// Requests completed so far: a `wait_any` rescans only when it moved.
    #[inline]
    pub fn completions(&self) -> u64 {
        self.completions
    }

    /// Keep a message a matched probe took out of matching until it is
    /// received (`take_held`); its key.
    pub fn hold(&mut self, env: crate::matching::Envelope, msg: Unexpected) -> u64 {
        let key = self.next_held;
        self.next_held += 1;
        self.held.insert(key, (env, msg));
        key
    }

    /// The message held under `key`, taken back (`None`: no such key).
    pub fn take_held(&mut self, key: u64) -> Option<(crate::matching::Envelope, Unexpected)> {
        self.held.remove(&key)
    }

    /// Shared single copies wait to run (`run_copies`, after the poll).
    #[inline]
    pub fn copies_busy(&self) -> bool {
        self.copies.busy()
    }

    /// Single-copy receives so far: read whole, and shared with the sender.
    pub fn single_copies(&self) -> (u64, u64) {
        (self.copies.whole, self.copies.shared)
    }
}
