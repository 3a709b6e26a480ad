//! Rendezvous by one-sided read over a netmod that offers it
//! (`Netmod::rma`, e.g. libfabric providers with `FI_RMA`): the sender
//! registers its buffer and puts the key in the `Rts` (`FLAG_RMA_KEY`); the
//! receiver, once matched, reads the data straight into its buffer and
//! answers `Ack`, as the shared-memory single-copy path does. Any step that
//! fails (registration, posting the read, the read itself) falls back to
//! `Cts` and streamed pieces, so a refused read costs time, never data.
//!
//! The protocol code runs inside the netmod's `poll` (as its `Sink`), where
//! the netmod cannot be borrowed again, so it only records what it wants
//! here; `Core::progress` then posts the reads, collects their ends and
//! releases the senders' registrations.

use std::collections::HashMap;

use rivet_netmods::FxBuildHasher;

use crate::core::Core;
use crate::pg::{Route, VcId};
use crate::table::{Op, RecvPhase, Req};
use crate::wire::MsgKind;

/// A matched receive that is to read its data from the sender.
pub struct ReadWant {
    pub rreq: u64,
    pub from: VcId,
    /// The sender's buffer (its address in the `Rts`) and region key.
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
    in_flight: HashMap<u64, ReadWant, FxBuildHasher>,
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

    /// Something for `Core::rma_progress` to do.
    #[inline]
    pub fn busy(&self) -> bool {
        !self.wanted.is_empty() || !self.in_flight.is_empty() || !self.release.is_empty()
    }
}

impl Core {
    /// Register a rendezvous send's buffer with the netmod for remote
    /// reads, if the route is a netmod that offers them; `None`: stream.
    pub(crate) fn rma_register(&mut self, route: Route, buf: *const u8, len: usize) -> Option<u64> {
        if !matches!(route, Route::Netmod(_)) || len == 0 {
            return None;
        }
        let rma = self.netmod.as_mut()?.rma()?;
        rma.register(buf as usize, len).ok()
    }

    /// Post wanted reads, report ended ones, release registrations.
    pub(crate) fn rma_progress(&mut self) -> usize {
        if !self.st.rma.busy() {
            return 0;
        }
        let Some(rma) = self.netmod.as_mut().and_then(|n| n.rma()) else {
            // No netmod (or no RMA) any more: stream everything wanted.
            let wanted = std::mem::take(&mut self.st.rma.wanted);
            for w in wanted {
                self.st.read_refused(w);
            }
            self.st.rma.release.clear();
            return 0;
        };
        let mut events = 0;
        for key in self.st.rma.release.drain(..) {
            // A region the netmod lost with its peer is gone already.
            let _ = rma.deregister(key);
        }
        let mut refused = Vec::new();
        for w in std::mem::take(&mut self.st.rma.wanted) {
            let buf = match self.st.requests.get(w.rreq) {
                Some(Req {
                    op: Op::Recv(r), ..
                }) if r.phase == (RecvPhase::Reading { from: w.from }) => r.buf,
                // Failed with its peer meanwhile: nothing to read.
                _ => continue,
            };
            let Route::Netmod(peer) = self.st.pgs.vc(w.from).map_or(Route::Loopback, |v| v.route)
            else {
                refused.push(w);
                continue;
            };
            // SAFETY: the receive owns `buf..buf+cap`, `len <= cap`, and it
            // stays in the Reading phase (so `abandon` waits and nothing
            // else writes there) until the read ends below.
            match unsafe { rma.read(peer, buf, w.len, w.addr, w.key) } {
                Ok(token) => {
                    self.st.rma.in_flight.insert(token, w);
                }
                Err(_) => refused.push(w),
            }
        }
        let mut ended = Vec::new();
        if !self.st.rma.in_flight.is_empty() {
            rma.poll_reads(&mut |token, result| ended.push((token, result)));
        }
        for w in refused {
            self.st.read_refused(w);
        }
        for (token, result) in ended {
            let Some(w) = self.st.rma.in_flight.remove(&token) else {
                continue;
            };
            events += 1;
            match result {
                Ok(()) => self.st.read_done(w),
                Err(_) => self.st.read_refused(w),
            }
        }
        events
    }
}

impl crate::core::State {
    /// A read ended with every byte in place.
    fn read_done(&mut self, w: ReadWant) {
        if !self.reading(&w) {
            return;
        }
        self.rma.reads += 1;
        self.set_recv_phase(w.rreq, RecvPhase::Done);
        self.complete(w.rreq);
        self.reply(
            w.from,
            crate::protocol::control(MsgKind::Ack, w.context, w.sreq),
        );
    }

    /// The read could not be done: have the sender stream instead (or
    /// fail the receive if the sender is gone).
    fn read_refused(&mut self, w: ReadWant) {
        if !self.reading(&w) {
            return;
        }
        if self.pgs.vc(w.from).is_ok_and(|vc| vc.failed) {
            return self.fail_request_for(w.rreq, w.from);
        }
        self.rma.fallbacks += 1;
        self.ask_to_stream(w.rreq, w.from, w.context, w.sreq, w.len);
    }

    /// The receive is still waiting for this read (not failed meanwhile).
    fn reading(&self, w: &ReadWant) -> bool {
        matches!(
            self.requests.get(w.rreq),
            Some(Req { op: Op::Recv(r), .. }) if r.phase == (RecvPhase::Reading { from: w.from })
        )
    }
}
