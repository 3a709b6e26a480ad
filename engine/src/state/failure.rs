//! When a peer fails, misbehaves, or says goodbye.
//!
//! Peer failure (`State::peer_failed`): every request that needs the dead
//! peer completes with `MsgError::PeerFailed`: sends to it, receives posted
//! for it or for `ANY_SOURCE`, and rendezvous receives streaming from,
//! reading from or copying with it (one a netmod reads into only once the
//! netmod has stopped that read, `rma.rs`). Messages that already arrived from it
//! stay receivable. A peer that breaks the protocol (`misbehaved`) is
//! treated as failed. A peer that finalized says `Bye` first; its
//! connection closing afterwards fails only what names it (not
//! `ANY_SOURCE` receives). A `Bye` is answered with ours at once, and
//! nothing else goes to that peer afterwards (`say_bye`, `byes_answered`:
//! the finalize handshake).

use crate::error::Error;
use crate::pg::VcId;
use crate::route::Route;
use crate::state::State;
use crate::status::MsgError;
use crate::table::{Op, RecvPhase};
use crate::wire::{control, MsgKind};

impl State {
    /// Record the first failure; every later wait reports it.
    #[cold]
    pub fn fail(&mut self, why: String) {
        if self.fatal.is_none() {
            self.fatal = Some(why);
        }
    }

    /// `from` sent something the protocol does not allow (a control
    /// message for another peer's send or in the wrong phase): the message
    /// was dropped; the peer is treated as failed (its requests fail with
    /// the reason) and its netmod connection is closed after this poll,
    /// so nothing more from it is acted on.
    #[cold]
    pub fn misbehaved(&mut self, from: VcId, why: &str) {
        let route = self.pgs.vc(from).map(|vc| vc.route);
        self.peer_failed(from, &format!("protocol violation: sent {why}"));
        if let Ok(Route::Netmod(peer)) = route {
            self.ports.refused.push(peer);
        }
    }

    /// At finalize: tell every live netmod peer we are done (`Bye`).
    pub fn say_bye(&mut self) {
        for id in self.pgs.live_netmod_vcs() {
            if let Ok(vc) = self.pgs.vc(id) {
                if !vc.bye_sent {
                    vc.bye_sent = true;
                    self.reply(id, control(MsgKind::Bye, 0, 0));
                }
            }
        }
    }

    /// Every live netmod peer we said `Bye` to has said it too (or failed):
    /// none of them sends us anything more, and each has seen ours.
    pub fn byes_answered(&mut self) -> bool {
        self.pgs.live_netmod_vcs().into_iter().all(|id| {
            self.pgs
                .vc(id)
                .map_or(true, |vc| !vc.bye_sent || vc.finalized || vc.failed)
        })
    }

    /// The error a send to failed `rank` gets.
    pub fn failure_of(&self, vc: VcId) -> Error {
        let why = self
            .failed_peers
            .iter()
            .find(|(v, _)| *v == vc)
            .map_or("connection lost", |(_, why)| why.as_str());
        Error::PeerFailed {
            rank: vc.rank(),
            why: why.to_string(),
        }
    }

    /// Complete request `id` (0: none) with the failure of `vc`.
    pub fn fail_request_for(&mut self, id: u64, vc: VcId) {
        self.fail_request(id, vc)
    }

    pub(crate) fn fail_request(&mut self, id: u64, vc: VcId) {
        let Some(req) = self.requests.get_mut(id) else {
            return;
        };
        match &mut req.op {
            Op::Recv(r) => {
                let copying = matches!(r.phase, RecvPhase::Copying { .. });
                if r.phase == RecvPhase::Posted {
                    self.matcher.cancel_posted(id);
                }
                r.phase = RecvPhase::Done;
                if copying {
                    self.forget_copy(id);
                }
            }
            Op::Send(s) => s.fail(),
        }
        if let Some(req) = self.requests.get_mut(id) {
            req.status.error = Some(MsgError::PeerFailed { rank: vc.rank() });
        }
        self.complete(id);
    }

    /// `rank` is gone (its netmod connection failed): nothing more comes
    /// from it. Fail everything that waits on it; once per peer.
    #[cold]
    pub fn peer_failed(&mut self, id: VcId, why: &str) {
        let Ok(vc) = self.pgs.vc(id) else { return };
        if vc.failed {
            return;
        }
        vc.failed = true;
        // After `Bye`, only what names this rank can no longer finish.
        let any_source_too = !vc.finalized;
        let dropped: Vec<u64> = vc.pending.drain(..).map(|item| item.request()).collect();
        let why = if vc.finalized {
            "it has finalized".to_string()
        } else {
            why.to_string()
        };
        self.failed_peers.push((id, why));
        // Receives a netmod is reading into fail once it stopped (`rma.rs`).
        let reading = self.rma.peer_failed(id);
        let mut waiting = self.requests.select(|req| {
            !req.complete
                && match &req.op {
                    Op::Send(s) => s.vc == id,
                    Op::Recv(r) => match r.phase {
                        RecvPhase::Posted => {
                            r.source_vc == Some(id)
                                || (any_source_too && r.source == crate::ANY_SOURCE)
                        }
                        RecvPhase::Streaming { from, .. }
                        | RecvPhase::Reading { from }
                        | RecvPhase::Copying { from, .. }
                        | RecvPhase::Cells { from } => from == id,
                        RecvPhase::Done => false,
                    },
                }
        });
        waiting.retain(|req| !reading.contains(req));
        for req in dropped.into_iter().chain(waiting) {
            self.fail_request(req, id);
        }
    }
}
