//! Parking: a waiting process blocks in `io_uring_enter` until a
//! completion or a timeout (`Netmod::park`), instead of polling.
//!
//! A wait may block only if whatever a poll would find is sure to post a
//! completion, or (`Defer` mode) queue task work, which wakes the waiter:
//! - every live socket has an operation in flight: an open connection
//!   its RECV (multishot, or single-shot into the parser) or its readiness
//!   watch (a connection carrying bulk data, `arm.rs`), a handshake
//!   its CONNECT, SEND or RECV; and the listener its ACCEPT. A spinning
//!   connection (`spin.rs`) has none, so it stops spinning first and gets
//!   its multishot RECV back, submitted by the wait's own enter (bytes it
//!   left in the socket complete that RECV at once). While its cancel is
//!   still in flight there is no parking: the cancel's completion ends
//!   the multishot RECV, and nothing would watch the socket after it;
//! - nothing is owed to the next poll: no deferred or unreaped completion,
//!   no task work flagged (data came; a direct read may have left it), no
//!   socket still dirty after arming (a queue the socket did not take
//!   waits for the next poll when its connection spins), nothing closing
//!   or to report.
//!
//! Kernel state is level-like (the flag, the CQ tail, a readable socket
//! completing a RECV armed late), so bytes that arrive between the last
//! poll and the wait end it at once: nothing is lost in that gap.

use std::time::Duration;

use super::super::state::{Phase, State};
use super::*;

impl UringIo {
    /// See the module doc; true if it waited.
    pub(crate) fn park(&mut self, st: &mut State, timeout: Duration) -> bool {
        if !self.ring.ext_arg || !self.deferred.is_empty() || !st.closing.is_empty() {
            return false;
        }
        if let Some((slot, gen)) = self.spin {
            match st.sock(slot).filter(|s| s.gen == gen) {
                // Its cancel (or a single-shot RECV) is in flight.
                Some(s) if s.io & (IO_RECV | IO_MULTI) != 0 => return false,
                Some(_) => self.stop_spin(st, slot),
                None => self.spin = None,
            }
        }
        self.arm_dirty(st);
        // (A send that failed while arming has a failure to report.)
        if !st.dirty.is_empty()
            || !st.closing.is_empty()
            || !st.failures.is_empty()
            || st.events > 0
            || !self.accept_armed
            || !self.all_watched(st)
        {
            return false;
        }
        let (n, taskrun, overflow) = {
            let sq = self.ring.ring.submission();
            (sq.len() as u32, sq.taskrun(), sq.cq_overflow())
        };
        // What was just armed is submitted by the next poll's enter.
        if taskrun || overflow || !self.ring.ring.completion().is_empty() {
            return false;
        }
        self.owed = 0;
        // An error (the ring driven from another thread, say) is the next
        // poll's to report: its enter meets it too.
        self.parks += 1;
        self.park_timeouts += matches!(self.ring.wait(n, timeout), Ok(true)) as u64;
        true
    }

    /// Every live socket has an operation in flight whose completion
    /// wakes a wait (see the module doc).
    fn all_watched(&mut self, st: &mut State) -> bool {
        (0..st.slot_count()).all(|slot| match st.sock(slot) {
            None => true,
            Some(s) if s.phase == Phase::Closing => true,
            Some(s) if s.phase == Phase::Open => s.io & (IO_RECV | IO_MULTI | IO_WATCH) != 0,
            Some(s) => s.io != 0,
        })
    }
}
