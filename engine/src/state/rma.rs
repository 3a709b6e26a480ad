//! Rendezvous by one-sided read, whichever transport reads: the receiver,
//! once matched, reads the sender's buffer straight into its own and
//! answers `Ack`. Over shared memory the read is CMA (`process_vm_readv`
//! from the pid of the sender's segment slot); over a netmod that offers
//! reads (`Netmod::rma`, e.g. libfabric providers with `FI_RMA`) the sender
//! registers its buffer and puts the key in the `Rts` (`FLAG_RMA_KEY`). Any
//! step that fails (registration, posting the read, the read itself) falls
//! back to `Cts` and streamed pieces, so a refused read costs time, never
//! data.
//!
//! The protocol code runs inside a transport's `poll`, where that transport
//! cannot be borrowed again, so it only records the read it wants
//! (`State::rma.wanted`); `Transports::run_reads` then does or posts the
//! reads by route, collects their ends and releases the senders'
//! registrations, and reports each end here.
//!
//! A failed peer's reads in flight are stopped by the netmod before their
//! receives fail (`Rma::stop_reads`, asked by `run_reads`): until then the
//! receive stays in its Reading phase, so `Inner::abandon` keeps waiting
//! and no wait sees it complete while the netmod may still write. A netmod
//! that cannot stop them in time fails the engine instead (the buffers are
//! then never given back: `abandon` aborts).

use crate::pg::VcId;
use crate::state::{ReadWant, State};
use crate::table::{Op, RecvPhase, Req};
use crate::wire::MsgKind;

impl State {
    /// Reads to post, failed peers' reads to stop, registrations to
    /// release, or reads in flight: `Transports::run_reads` has work.
    #[inline]
    pub fn reads_busy(&self) -> bool {
        self.rma.busy()
    }

    /// Failed peers whose reads in flight the netmod is to stop now
    /// (then `reads_stopped`, or the engine fails).
    pub(crate) fn take_reads_to_stop(&mut self) -> Vec<VcId> {
        std::mem::take(&mut self.rma.stopping)
    }

    /// The reads the protocols asked for since the last call.
    pub(crate) fn take_wanted_reads(&mut self) -> Vec<ReadWant> {
        std::mem::take(&mut self.rma.wanted)
    }

    /// Netmod read `w` is posted under `token`: its end comes from
    /// `read_ended`.
    pub(crate) fn read_posted(&mut self, token: u64, w: ReadWant) {
        self.rma.in_flight.insert(token, w);
    }

    /// Reads posted and not ended.
    #[inline]
    pub(crate) fn reads_in_flight(&self) -> bool {
        !self.rma.in_flight.is_empty()
    }

    /// The netmod says read `token` ended; `None` if it is not ours (any
    /// more: stopped with its failed peer).
    pub(crate) fn read_ended(&mut self, token: u64) -> Option<ReadWant> {
        self.rma.in_flight.remove(&token)
    }

    /// No netmod can end the reads in flight any more: they are refused
    /// (the senders stream, or the receives fail with their peer), and
    /// no registration is left to release.
    pub(crate) fn reads_lost(&mut self) {
        let lost: Vec<_> = self.rma.in_flight.drain().map(|(_, w)| w).collect();
        for w in lost {
            self.read_refused(w);
        }
        self.rma.release.clear();
    }

    /// A send's region key whose deregistration waits for the netmod
    /// (`take_released_keys`, next progress).
    pub(crate) fn release_key(&mut self, key: u64) {
        self.rma.release.push(key);
    }

    /// The keys to deregister now.
    pub(crate) fn take_released_keys(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.rma.release)
    }

    /// A netmod read ended with every byte in place (counted for `info`).
    pub(crate) fn netmod_read_done(&mut self, w: ReadWant) {
        self.rma.reads += 1;
        self.read_done(w);
    }

    /// A netmod read was refused or failed: the sender streams instead
    /// (counted for `info`).
    pub(crate) fn netmod_read_refused(&mut self, w: ReadWant) {
        self.rma.fallbacks += 1;
        self.read_refused(w);
    }

    /// Netmod reads so far: done, and streamed instead.
    pub fn netmod_reads(&self) -> (u64, u64) {
        (self.rma.reads, self.rma.fallbacks)
    }

    /// A single-copy (CMA) read of the whole message is done: counted
    /// (`info`), then as any read done.
    pub(crate) fn single_copy_done(&mut self, w: ReadWant) {
        self.copies.whole += 1;
        self.read_done(w);
    }

    /// A read ended with every byte in place.
    pub(crate) fn read_done(&mut self, w: ReadWant) {
        if !self.reading(&w) {
            return;
        }
        self.set_recv_phase(w.rreq, RecvPhase::Done);
        self.complete(w.rreq);
        self.reply(
            w.from,
            crate::wire::control(MsgKind::Ack, w.context, w.sreq),
        );
    }

    /// The read could not be done: have the sender stream instead (or
    /// fail the receive if the sender is gone).
    pub(crate) fn read_refused(&mut self, w: ReadWant) {
        if !self.reading(&w) {
            return;
        }
        if self.pgs.vc(w.from).is_ok_and(|vc| vc.failed) {
            return self.fail_request_for(w.rreq, w.from);
        }
        self.ask_to_stream(w.rreq, w.from, w.context, w.sreq, w.len);
    }

    /// The netmod has stopped failed peer `vc`'s reads (`Rma::stop_reads`):
    /// nothing writes into their buffers any more, so their receives fail
    /// now.
    pub(crate) fn reads_stopped(&mut self, vc: VcId) {
        for w in self.rma.take_reads_from(vc) {
            if self.reading(&w) {
                self.fail_request_for(w.rreq, vc);
            }
        }
    }

    /// The buffer of the receive waiting for read `w`; `None` once it is
    /// not (failed with its peer, or abandoned, meanwhile).
    pub(crate) fn reading_buf(&self, w: &ReadWant) -> Option<*mut u8> {
        match self.requests.get(w.rreq) {
            Some(Req {
                op: Op::Recv(r), ..
            }) if r.phase == (RecvPhase::Reading { from: w.from }) => Some(r.buf),
            _ => None,
        }
    }

    /// The receive is still waiting for this read (not failed meanwhile).
    fn reading(&self, w: &ReadWant) -> bool {
        matches!(
            self.requests.get(w.rreq),
            Some(Req { op: Op::Recv(r), .. }) if r.phase == (RecvPhase::Reading { from: w.from })
        )
    }
}
