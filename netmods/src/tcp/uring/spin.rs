//! Spinning: the busy connection is read by plain `recv(2)` on every
//! poll, with nothing of the ring armed on it.
//!
//! An armed RECV (multishot or not) is a waiter on the socket's wait
//! queue, so every segment the peer sends runs io_uring's wake callback
//! inside the peer's `sendmsg`, under the socket lock, and queues task
//! work before our `recv` can take the bytes: on a one-connection 8 B
//! ping-pong that is what io_uring paid over the poll backend (research
//! notes, BENCHMARKS.md). So once a direct read (`direct.rs`) finds data
//! on a connection (the only open one, or the one that last received),
//! its multishot RECV is cancelled and each poll reads the socket
//! directly, as the poll backend does; the peer's sends then find no
//! waiter. Its queue is written by plain `sendmsg` on every poll too (no
//! SEND, which would wait for task work at our enters: a 1 MiB message
//! took some eight such hops). Past `SPIN_EAGER` empty polls in a row
//! only every `SPIN_EVERY`-th poll reads (a window's wait for its ack
//! costs fewer calls; a ping-pong's answer comes sooner), and after
//! `SPIN_IDLE_MAX` a readiness watch is armed (until the next frame; after
//! bulk data for `WATCH_FRAMES`), and idle polls go back to being memory
//! loads with no system call. A watch, not the multishot RECV: the data
//! that ends the wait is read directly either way, but a multishot RECV
//! must be cancelled before the next read (below), which put an enter
//! between a bw sender's first and second read of its window's CTS
//! frames (perf trace); a watch's cancel goes with the next poll's enter,
//! after its read. A park (`park.rs`) re-arms the multishot RECV.
//!
//! Quiet polls: while nothing of the ring or the connection table needs
//! attention (no SQE queued, no task work or overflow flagged, no
//! completion to reap, no socket to arm or close, nothing to report, no
//! handshake check due, no stop of spinning due), a poll is just the
//! spinning connection's read (or, on a turn without one or with none
//! spinning, nothing), inline in the netmod's poll (`quiet_poll`):
//! the empty reads of a busy wait, most of its polls, skip the full
//! poll's call and its checks one by one. Anything else, or bytes read,
//! goes the full way (the bytes by `spin_read_rest`, the rest of a full
//! poll after its read).
//!
//! Order: while the cancel is in flight the multishot RECV may still take
//! bytes (during our enters) and nothing is read directly; spinning reads
//! start once its last completion is reaped (`IO_MULTI` clear), so bytes
//! are delivered in the order they came. A readiness watch takes no
//! bytes: reads start at once while its cancel is in flight. Only in `Defer` mode (direct
//! reads), and on one connection at a time: each spinning one costs a
//! call per poll, so the others stay watched by their multishot RECVs and
//! a poll's cost stays flat in the number of connections (64 idle peers
//! do not slow a ping-pong, a fan-in reads one sender directly and the
//! rest through the ring).

use super::super::state::{Phase, State};
use super::direct::recv_into_target;
use super::*;

/// Empty spinning polls in a row after which the connection is watched
/// again by the ring. A ping-pong's wait for the answer is a few
/// polls, a window's wait for its ack some tens; past 64 the connection
/// has gone quiet (or the process waits its turn on a crowded host, where
/// every call steals from the ranks that would answer), and the re-arm
/// (one SQE) and the next cancel are cheap against the wait.
pub(super) const SPIN_IDLE_MAX: u32 = 64;
/// Empty polls in a row that each read; after them, one poll in
/// `SPIN_EVERY` does (the others are memory loads).
const SPIN_EAGER: u32 = 16;
const SPIN_EVERY: u32 = 4;

/// Whether the spinning connection is read on a poll after `idle` empty
/// ones in a row (the schedule above).
#[inline(always)]
fn read_turn(idle: u32) -> bool {
    idle < SPIN_EAGER || idle % SPIN_EVERY == 0
}

impl UringIo {
    /// After a direct read or a single-shot RECV got bytes on `slot`:
    /// start spinning on it if none spins (its multishot RECV, if armed,
    /// is cancelled; the cancel is submitted by the next enter).
    pub(super) fn maybe_spin(&mut self, st: &mut State, slot: u32) {
        if !self.ring.spin || !self.direct_mode() || self.spin.is_some() {
            return;
        }
        let Some(s) = st.sock(slot) else { return };
        if s.phase != Phase::Open || s.detached || s.io & (IO_RECV | IO_STOP) != 0 {
            return;
        }
        let (gen, io) = (s.gen, s.io);
        self.spin = Some((slot, gen));
        self.spin_idle = 0;
        self.spins += 1;
        // A readiness watch takes no bytes: reads go on while its cancel
        // is in flight. A multishot RECV may, until its last completion.
        let kind = if io & IO_MULTI != 0 {
            s.io |= IO_STOP;
            K_MULTI
        } else if io & IO_WATCH != 0 {
            K_WATCH
        } else {
            return;
        };
        let e = opcode::AsyncCancel::new(user_data(slot, gen, kind))
            .build()
            .user_data(user_data(slot, gen, K_CANCEL));
        // SAFETY: a cancel carries no pointers.
        unsafe { self.push(&e) };
    }

    /// A poll that is only the spinning connection's read, or nothing at
    /// all when none spins (see the module doc): the poll's events (it
    /// cannot fail), or `None` if it is not quiet (nothing done; the
    /// caller makes the full poll). Equal to what the full poll does in
    /// that state: no enter (nothing queued or flagged), nothing to reap,
    /// arm or close, and `spin_poll`'s read with its bookkeeping.
    #[inline(always)]
    pub(super) fn quiet_poll(&mut self, st: &mut State, sink: &mut dyn Sink) -> Option<usize> {
        let tick = self.tick.wrapping_add(1);
        if tick % EXPIRE_EVERY == 0
            || !self.accept_armed
            || !self.deferred.is_empty()
            || !st.quiet()
        {
            return None;
        }
        {
            let sq = self.ring.ring.submission();
            if !sq.is_empty() || sq.taskrun() || sq.cq_overflow() {
                return None;
            }
        }
        if !self.ring.ring.completion().is_empty() || self.bufs.as_ref().is_some_and(|b| b.pending)
        {
            return None;
        }
        let Some((slot, gen)) = self.spin else {
            // Nothing spins, nothing is queued, flagged or completed: the
            // full poll would only count it.
            self.tick = tick;
            self.wrote_since_poll = false;
            return Some(0);
        };
        let idle = self.spin_idle;
        if idle + 1 >= SPIN_IDLE_MAX {
            return None;
        }
        let s = st.sock(slot)?;
        if s.gen != gen || s.phase != Phase::Open || s.detached || s.io & (IO_RECV | IO_MULTI) != 0
        {
            return None;
        }
        if !read_turn(idle) {
            // Not a polling turn (`spin_poll`); no stop is due below
            // SPIN_IDLE_MAX.
            self.spin_idle = idle + 1;
            self.tick = tick;
            self.wrote_since_poll = false;
            return Some(0);
        }
        // No RECV of the ring writes the target: none is armed
        // (`IO_RECV | IO_MULTI` clear).
        let (len, r) = recv_into_target(s)?;
        st.calls += 1;
        self.tick = tick;
        self.wrote_since_poll = false;
        if r == Err(libc::EAGAIN) {
            // Below SPIN_IDLE_MAX: no stop is due.
            self.spin_idle = idle + 1;
            return Some(0);
        }
        Some(self.spin_read_rest(st, sink, (slot, gen), r, len))
    }

    /// A quiet poll's read that got bytes (or an error): delivered as
    /// `spin_poll`'s would be, then the rest of a full poll (whose enter
    /// is not due: nothing was queued or flagged before the read, and
    /// delivering queues no SQE).
    #[inline(never)]
    fn spin_read_rest(
        &mut self,
        st: &mut State,
        sink: &mut dyn Sink,
        sock: (u32, u32),
        r: Result<usize, i32>,
        len: usize,
    ) -> usize {
        if self.read_more(st, sock, sink, r, len) > 0 {
            self.spin_idle = 0;
        } else {
            self.spin_idle += 1;
        }
        self.reap(st, sink);
        if !st.closing.is_empty() {
            self.closing(st);
        }
        let n = std::mem::take(&mut st.events);
        n + st.report(sink)
    }

    /// Whether `slot` (generation `gen`) is the spinning connection: it
    /// gets no RECV armed (`arm`).
    pub(super) fn spinning(&self, slot: u32, gen: u32) -> bool {
        self.spin == Some((slot, gen))
    }

    /// A poll's read of the spinning connection, if any: true if it is
    /// spinning (armed with nothing), so the flagged direct read is not
    /// wanted. Stops spinning, arming the multishot RECV again, when the
    /// connection went quiet or is no longer an open one.
    pub(super) fn spin_poll(&mut self, st: &mut State, sink: &mut dyn Sink) -> bool {
        let Some((slot, gen)) = self.spin else {
            return false;
        };
        let Some(s) = st.sock(slot).filter(|s| s.gen == gen) else {
            self.spin = None;
            return false;
        };
        let (open, busy) = (
            s.phase == Phase::Open && !s.detached,
            s.io & (IO_RECV | IO_MULTI),
        );
        if !open {
            self.stop_spin(st, slot);
            return false;
        }
        if busy != 0 {
            // The cancel (or a single-shot RECV) is still in flight.
            return false;
        }
        let idle = self.spin_idle;
        if read_turn(idle) && self.read_direct(st, slot, sink) > 0 {
            self.spin_idle = 0;
        } else {
            self.spin_idle += 1;
            if self.spin_idle >= SPIN_IDLE_MAX {
                // Watched, not received on, until its next frame (see
                // the module doc).
                if let Some(s) = st.sock(slot) {
                    s.single_rx = s.single_rx.max(1);
                }
                self.stop_spin(st, slot);
            }
        }
        true
    }

    /// Stops spinning on `slot`; its RECV is armed again now (submitted by
    /// this poll's enter).
    pub(super) fn stop_spin(&mut self, st: &mut State, slot: u32) {
        self.spin = None;
        self.arm(st, slot);
    }
}
