//! What the one-sided reads of rendezvous data stand at (`rma.rs`;
//! `transport/` does them).

use std::collections::HashMap;

use rivet_netmods::FxBuildHasher;

use crate::pg::VcId;

/// A matched receive that is to read its data from the sender.
pub struct ReadWant {
    pub rreq: u64,
    pub from: VcId,
    /// The sender's buffer (its address in the `Rts`) and region key (a
    /// netmod's; 0 for a shared-memory read).
    pub addr: u64,
    pub key: u64,
    pub len: usize,
    pub context: u32,
    /// The sender's request, named in the `Ack` (or `Cts`).
    pub sreq: u64,
}

/// Reads wanted, reads in flight, and registrations to release.
#[derive(Default)]
pub struct RmaState {
    pub wanted: Vec<ReadWant>,
    /// Netmod read token → the read.
    pub(crate) in_flight: HashMap<u64, ReadWant, FxBuildHasher>,
    /// Keys of sends that no longer need their region.
    pub release: Vec<u64>,
    /// Counters for `info`: reads done, and fallbacks to streaming.
    pub reads: u64,
    pub fallbacks: u64,
}

impl RmaState {
    /// Peer `vc` failed: its reads are not waited for (a read from a dead
    /// process never ends on some providers, e.g. ofi's `shm`); a late end
    /// is ignored. Known gap: `Rma::read` lets the netmod write into the
    /// receive buffer until it reports the read's end, yet the receive
    /// fails (and its buffer may be freed) now. Closing it needs the netmod
    /// to stop a peer's reads when the peer fails, as it stops placed
    /// receives.
    pub fn forget(&mut self, vc: VcId) {
        self.wanted.retain(|w| w.from != vc);
        self.in_flight.retain(|_, w| w.from != vc);
    }

    /// Something for `Transports::run_reads` to do.
    #[inline]
    pub fn busy(&self) -> bool {
        !self.wanted.is_empty() || !self.in_flight.is_empty() || !self.release.is_empty()
    }
}
