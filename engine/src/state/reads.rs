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
    /// Failed peers with reads in flight: the netmod is to stop those
    /// (`Rma::stop_reads`) before their receives fail.
    pub(crate) stopping: Vec<VcId>,
    /// Keys of sends that no longer need their region.
    pub release: Vec<u64>,
    /// Counters for `info`: reads done, and fallbacks to streaming.
    pub reads: u64,
    pub fallbacks: u64,
}

impl RmaState {
    /// Peer `vc` failed. Its reads not yet posted are dropped (nothing
    /// writes for them; their receives fail now). Its reads in flight stay,
    /// their receives in the Reading phase, until the netmod has stopped
    /// them (`Transports::run_reads` asks it, `Rma::stop_reads`; a read
    /// from a dead process never ends on some providers, e.g. ofi's `shm`):
    /// only then do they fail (`reads_stopped`), so no receive buffer is
    /// given back while the netmod may still write into it. Returns the
    /// receives left waiting for that.
    pub fn peer_failed(&mut self, vc: VcId) -> Vec<u64> {
        self.wanted.retain(|w| w.from != vc);
        let waiting: Vec<u64> = self
            .in_flight
            .values()
            .filter(|w| w.from == vc)
            .map(|w| w.rreq)
            .collect();
        if !waiting.is_empty() && !self.stopping.contains(&vc) {
            self.stopping.push(vc);
        }
        waiting
    }

    /// The netmod stopped `vc`'s reads: take them out of the reads in
    /// flight (a late end reported for one is ignored).
    pub(crate) fn take_reads_from(&mut self, vc: VcId) -> Vec<ReadWant> {
        let tokens: Vec<u64> = self
            .in_flight
            .iter()
            .filter(|(_, w)| w.from == vc)
            .map(|(&t, _)| t)
            .collect();
        tokens
            .into_iter()
            .filter_map(|t| self.in_flight.remove(&t))
            .collect()
    }

    /// Something for `Transports::run_reads` to do.
    #[inline]
    pub fn busy(&self) -> bool {
        !self.wanted.is_empty()
            || !self.in_flight.is_empty()
            || !self.release.is_empty()
            || !self.stopping.is_empty()
    }
}
