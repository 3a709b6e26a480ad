//! The protocol state: everything `deliver` and the posting calls work
//! on (requests, matching, VCs, flow control, the reads and copies under
//! way), as data. The behaviour lives above it: `protocol.rs` (arrivals),
//! `post.rs` (sends and receives), `rma.rs` and `copy.rs` (single-copy
//! paths), `core.rs` (transports and progress).

mod copies;
mod reads;
mod spare;

pub use copies::Copies;
pub(crate) use copies::{Job, Split};
pub use reads::{ReadWant, RmaState};
pub use spare::SpareBuffers;

use crate::dynamic::Ports;
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
    pub pgs: Pgs,
    pub requests: RequestTable,
    pub matcher: Matcher<u64, Unexpected>,
    /// Ranks whose VC has pending messages.
    pub pending_vcs: Vec<VcId>,
    /// Eager size and rendezvous piece of each transport, by route (the
    /// netmod's set when it opens, `Core::open_netmod`).
    pub limits: RouteLimits,
    /// Single-copy reads may be tried (mode and init probe allow it).
    pub cma_allowed: bool,
    /// Single-copy messages from this size on are copied by both sides
    /// (0: never); the copies under way (`copy.rs`).
    pub split_min: usize,
    pub copies: Copies,
    /// A transport or peer failed; every wait reports it.
    pub fatal: Option<String>,
    /// Peers whose connection failed, and why (see `peer_failed`).
    pub failed_peers: Vec<(VcId, String)>,
    /// Open ports and the connections waiting on them (dynamic processes).
    pub ports: Ports,
    /// Rendezvous reads over the netmod (`rma.rs`).
    pub rma: RmaState,
    /// Requests completed so far: `wait_any` rescans its requests only
    /// when this moved.
    pub completions: u64,
    /// Buffers of unexpected eager messages already received, kept for
    /// the next ones so that steady state allocates nothing.
    pub spare: SpareBuffers,
    /// Messages taken by a matched probe (`mprobe`), by handle, until
    /// they are received; and the next handle.
    pub held: std::collections::HashMap<u64, (crate::matching::Envelope, Unexpected)>,
    pub next_held: u64,
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
