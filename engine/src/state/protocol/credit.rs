//! Flow control over a netmod (see `protocol.rs`): a sender spends credit
//! per eager message and sends by rendezvous once its window is spent; the
//! receiver returns credit once it has consumed a quarter window.

use crate::error::Result;
use crate::pg::VcId;
use crate::route::Route;
use crate::state::State;
use crate::wire::{control, MsgKind};

/// Credit charged per eager message on top of its bytes: what the
/// receiver's unexpected queue spends on an entry, so that a flood of empty
/// messages is bounded too.
pub(crate) const CREDIT_PER_MESSAGE: usize = 64;

impl State {
    /// The route to `dest`, its eager limit (the transport's, within the
    /// credit a netmod peer left us), and whether sends to it queue.
    #[inline]
    pub fn send_route(&mut self, dest: VcId) -> Result<(Route, usize, bool)> {
        let vc = self.pgs.vc(dest)?;
        if vc.failed {
            return Err(self.failure_of(dest));
        }
        let mut limit = self.limits.of(vc.route).eager_max;
        if let Route::Netmod(_) = vc.route {
            limit = limit.min(vc.credit.saturating_sub(CREDIT_PER_MESSAGE));
        }
        Ok((vc.route, limit, !vc.pending.is_empty()))
    }

    /// `send_route` and `spend_credit` in one VC lookup, for a standard
    /// send that may go out now (`Core::try_send_now`): `None` if it may
    /// not (sends to `dest` queue, or `len` is over the eager limit), else
    /// its route, with the credit already spent; a netmod route also gives
    /// the credit before, for `restore_credit` if the message does not go.
    #[inline]
    pub fn spend_now(&mut self, dest: VcId, len: usize) -> Result<Option<(Route, usize)>> {
        let vc = self.pgs.vc(dest)?;
        if vc.failed {
            return Err(self.failure_of(dest));
        }
        let route = vc.route;
        if !vc.pending.is_empty() || len > self.limits.of(route).eager_max {
            return Ok(None);
        }
        let before = vc.credit;
        if let Route::Netmod(_) = route {
            if len > before.saturating_sub(CREDIT_PER_MESSAGE) {
                return Ok(None);
            }
            vc.credit = before.saturating_sub(len + CREDIT_PER_MESSAGE);
        }
        Ok(Some((route, before)))
    }

    /// Undo `spend_now` for a message that did not go out: `dest`'s credit
    /// back to `before` (a netmod route; nothing else spends any).
    #[cold]
    pub fn restore_credit(&mut self, route: Route, dest: VcId, before: usize) {
        if let (Route::Netmod(_), Ok(vc)) = (route, self.pgs.vc(dest)) {
            vc.credit = before;
        }
    }

    /// An eager message to a netmod peer spends its credit.
    #[inline]
    pub fn spend_credit(&mut self, route: Route, dest: VcId, len: usize) {
        if let Route::Netmod(_) = route {
            if let Ok(vc) = self.pgs.vc(dest) {
                vc.credit = vc.credit.saturating_sub(len + CREDIT_PER_MESSAGE);
            }
        }
    }

    /// Eager bytes from `from` reached their receive: owe the sender that
    /// much credit, and return it once a quarter window has piled up.
    /// Always inline: every netmod eager arrival asks.
    #[inline(always)]
    pub fn consumed(&mut self, from: VcId, len: usize) {
        let window = self.pgs.world.window;
        // A match, not `let .. else`: that dropped the `Result` by a call
        // on every message, its `Ok` too (callgrind).
        let vc = match self.pgs.vc(from) {
            Ok(vc) => vc,
            Err(e) => return drop(e),
        };
        if !matches!(vc.route, Route::Netmod(_)) {
            return;
        }
        vc.owed += len + CREDIT_PER_MESSAGE;
        if vc.owed >= window / 4 {
            let mut credit = control(MsgKind::Credit, 0, 0);
            credit.aux = vc.owed as u64;
            vc.owed = 0;
            self.reply(from, credit);
        }
    }
}
