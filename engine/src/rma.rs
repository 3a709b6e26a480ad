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

use rivet_netmods::Netmod;

use crate::pg::Route;
use crate::state::{ReadWant, State};
use crate::table::{Op, RecvPhase, Req};
use crate::wire::MsgKind;

/// Register a rendezvous send's buffer with the netmod for remote reads,
/// if the route is a netmod that offers them; `None`: stream.
pub(crate) fn register(
    netmod: Option<&mut Box<dyn Netmod>>,
    route: Route,
    buf: *const u8,
    len: usize,
) -> Option<u64> {
    if !matches!(route, Route::Netmod(_)) || len == 0 {
        return None;
    }
    let rma = netmod?.rma()?;
    rma.register(buf as usize, len).ok()
}

impl State {
    /// Post wanted reads, report ended ones, release registrations.
    pub(crate) fn rma_progress(&mut self, netmod: Option<&mut Box<dyn Netmod>>) -> usize {
        if !self.rma.busy() {
            return 0;
        }
        let Some(rma) = netmod.and_then(|n| n.rma()) else {
            // No netmod (or no RMA) any more: stream everything wanted.
            let wanted = std::mem::take(&mut self.rma.wanted);
            for w in wanted {
                self.read_refused(w);
            }
            self.rma.release.clear();
            return 0;
        };
        let mut events = 0;
        for key in self.rma.release.drain(..) {
            // A region the netmod lost with its peer is gone already.
            let _ = rma.deregister(key);
        }
        let mut refused = Vec::new();
        for w in std::mem::take(&mut self.rma.wanted) {
            let buf = match self.requests.get(w.rreq) {
                Some(Req {
                    op: Op::Recv(r), ..
                }) if r.phase == (RecvPhase::Reading { from: w.from }) => r.buf,
                // Failed with its peer meanwhile: nothing to read.
                _ => continue,
            };
            let Route::Netmod(peer) = self.pgs.vc(w.from).map_or(Route::Loopback, |v| v.route)
            else {
                refused.push(w);
                continue;
            };
            // SAFETY: the receive owns `buf..buf+cap`, `len <= cap`, and it
            // stays in the Reading phase (so `abandon` waits and nothing
            // else writes there) until the read ends below.
            match unsafe { rma.read(peer, buf, w.len, w.addr, w.key) } {
                Ok(token) => {
                    self.rma.in_flight.insert(token, w);
                }
                Err(_) => refused.push(w),
            }
        }
        let mut ended = Vec::new();
        if !self.rma.in_flight.is_empty() {
            rma.poll_reads(&mut |token, result| ended.push((token, result)));
        }
        for w in refused {
            self.read_refused(w);
        }
        for (token, result) in ended {
            let Some(w) = self.rma.in_flight.remove(&token) else {
                continue;
            };
            events += 1;
            match result {
                Ok(()) => self.read_done(w),
                Err(_) => self.read_refused(w),
            }
        }
        events
    }
}

impl State {
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
            crate::wire::control(MsgKind::Ack, w.context, w.sreq),
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
