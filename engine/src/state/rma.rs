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
