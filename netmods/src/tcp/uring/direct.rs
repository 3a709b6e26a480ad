//! Direct receives: in `Defer` mode the ring watches a connection and a
//! plain nonblocking `recv(2)` takes its bytes.
//!
//! When data reaches a connection whose multishot RECV is armed, the
//! kernel queues task work and raises `IORING_SQ_TASKRUN`; under
//! DEFER_TASKRUN that work (the RECV into a provided buffer) runs only
//! when this thread enters with GETEVENTS. So a poll that sees the flag
//! may instead `recv` straight into the parser's target (the engine's
//! memory for a placed payload) on the socket the data most likely came
//! to: one call, as the poll backend's, without the task-work run, the
//! completion and the copy out of a provided buffer. The work still queued
//! runs at the next poll's enter (off the critical path: by then the
//! engine has answered), finds the socket empty, or takes bytes that came
//! after ours. While a large frame is coming in (`DIRECT_RECV_MIN` or
//! more left) the polls keep reading directly and enter only once the
//! socket is empty (or every `DIRECT_RUN_MAX`-th poll, so other sockets'
//! work still runs), so bulk data goes kernel to target in one copy.
//!
//! A connection that carried bulk data is watched by a readiness poll
//! instead (`WATCH_FRAMES`): it raises the same flag and takes no bytes,
//! so all of a large frame, the first bytes of the next window of them
//! included, comes this way (or by the read its completion starts,
//! `watch_fired`), none through provided buffers.
//!
//! Bytes stay in order because the multishot RECV moves data only during
//! our enters, and a direct read happens only with every completion of
//! those enters handled (the CQ and `deferred` empty), and only on a
//! socket with no single-shot RECV in flight (which would write into the
//! same target later).

use std::os::fd::AsRawFd;

use super::super::state::{Phase, Sock, State};
use super::super::sys;
use super::ring::Mode;
use super::*;

/// Frames delivered from one connection per direct read, so one busy peer
/// cannot starve the others (as the poll backend's budget).
const FRAME_BUDGET: usize = 64;

/// Polls in a row that may read directly before one enters: a stream of
/// large frames on one connection keeps polls reading it, and the work
/// queued for other sockets (their data, accepts) must still run.
const DIRECT_RUN_MAX: u32 = 16;

impl UringIo {
    /// Whether this ring can read directly: `Defer` mode (task work waits
    /// for our enters) with multishot RECVs on the buffer ring.
    pub(super) fn direct_mode(&self) -> bool {
        self.ring.mode == Mode::Defer && self.bufs.is_some()
    }

    /// The open socket a flagged poll reads directly, if one qualifies:
    /// the only open connection, else the one that last received; and
    /// whether a large frame is in progress on it.
    fn direct_candidate(&mut self, st: &mut State) -> Option<(u32, bool)> {
        let slot = match st.open.as_slice() {
            [only] => *only,
            _ => {
                let (slot, gen) = self.hot?;
                st.sock(slot).filter(|s| s.gen == gen)?;
                slot
            }
        };
        let s = st.sock(slot)?;
        if s.phase != Phase::Open
            || s.detached
            || s.io & (IO_MULTI | IO_WATCH) == 0
            || s.io & (IO_RECV | IO_STOP) != 0
        {
            return None;
        }
        let rx = s.rx.as_ref()?;
        let bulk = rx.frame_left().max(rx.exact_left()) >= DIRECT_RECV_MIN;
        Some((slot, bulk))
    }

    /// Called by a poll that saw the task-work flag with `queued` SQEs
    /// pending: reads a candidate socket directly when that is safe and
    /// due; true if it got bytes and the enter may wait for the next poll.
    pub(super) fn try_direct(&mut self, st: &mut State, sink: &mut dyn Sink, queued: u32) -> bool {
        if !self.direct_mode()
            || !self.deferred.is_empty()
            || !self.ring.ring.completion().is_empty()
        {
            return false;
        }
        let Some((slot, bulk)) = self.direct_candidate(st) else {
            return false;
        };
        // The poll after a direct read enters (the work left behind runs
        // and the flag drops), unless a large frame is still arriving,
        // and at least every DIRECT_RUN_MAX-th.
        if self.owed > 0 && (!bulk || self.owed >= DIRECT_RUN_MAX) {
            return false;
        }
        let got = self.read_direct(st, slot, sink);
        self.owed = if got > 0 { self.owed + 1 } else { 0 };
        if got > 0 {
            // Spin on it from now on, if none does (`spin.rs`).
            self.maybe_spin(st, slot);
        }
        got > 0 && queued == 0
    }

    /// Receives what `slot` has into its parser's target and delivers
    /// whole frames, until the socket is empty or the budget is spent;
    /// returns the bytes received.
    ///
    /// The first receive is inline: while a spinning connection waits,
    /// nearly every call finds the socket empty, and that answer costs no
    /// call of ours (the rest, `read_more`, runs only when bytes came).
    #[inline(always)]
    pub(super) fn read_direct(&mut self, st: &mut State, slot: u32, sink: &mut dyn Sink) -> usize {
        match recv_open(st, slot) {
            None | Some((_, _, Err(libc::EAGAIN))) => 0,
            Some((gen, len, r)) => self.read_more(st, (slot, gen), sink, r, len),
        }
    }

    /// `read_direct` past its first receive (`first`, into `len` bytes,
    /// of socket `(slot, gen)`): delivers, and receives on while the
    /// budget lasts.
    #[inline(never)]
    pub(super) fn read_more(
        &mut self,
        st: &mut State,
        (slot, mut gen): (u32, u32),
        sink: &mut dyn Sink,
        first: Result<usize, i32>,
        mut len: usize,
    ) -> usize {
        let (mut got, mut frames) = (0, 0);
        let mut r = first;
        loop {
            match r {
                Ok(0) => {
                    st.sock_failed(slot, "connection closed by the peer".into());
                    break;
                }
                Ok(n) => {
                    got += n;
                    self.direct_reads += 1;
                    self.rx.direct += n as u64;
                    self.hot = Some((slot, gen));
                    let k = st.rx_data(slot, n, sink);
                    frames += k;
                    // Bulk data (a read that large, or a frame with that
                    // much to come, as `stop_for_bulk` judges) keeps the
                    // connection watched rather than received on by the
                    // ring (`WATCH_FRAMES`).
                    if let Some(s) = st.sock(slot) {
                        s.single_rx = if n >= DIRECT_RECV_MIN || bulk_left(s) >= DIRECT_RECV_MIN {
                            WATCH_FRAMES
                        } else {
                            s.single_rx.saturating_sub(k as u32)
                        };
                    }
                    // A short read means the socket is drained.
                    if n < len || frames >= FRAME_BUDGET {
                        break;
                    }
                }
                Err(libc::EAGAIN) => break,
                Err(e) => {
                    let e = std::io::Error::from_raw_os_error(e);
                    st.sock_failed(slot, format!("recv: {e}"));
                    break;
                }
            }
            let Some(next) = recv_open(st, slot) else {
                break;
            };
            (gen, len, r) = next;
        }
        got
    }
}

/// One nonblocking receive on socket `slot`, if it is open, into its
/// parser's target (`recv_into_target`): the socket's generation, the
/// bytes asked for, and the answer.
#[inline(always)]
fn recv_open(st: &mut State, slot: u32) -> Option<(u32, usize, Result<usize, i32>)> {
    let s = st.sock(slot).filter(|s| s.phase == Phase::Open)?;
    let gen = s.gen;
    let (len, r) = recv_into_target(s)?;
    st.calls += 1;
    Some((gen, len, r))
}

/// One nonblocking receive on socket `s` into its parser's target (an
/// open socket's, `Sock::recv_target`): the bytes asked for, and the
/// answer; `None` if it has no parser. The caller counts the call.
#[inline(always)]
pub(super) fn recv_into_target(s: &mut Sock) -> Option<(usize, Result<usize, i32>)> {
    let fd = s.fd.as_raw_fd();
    let (ptr, len) = s.rx.as_mut()?.target();
    // SAFETY: target gives `len` writable bytes: the parser's input or
    // overflow buffer, or the engine's placement memory; no RECV of the
    // ring writes there (the caller's check: `direct.rs`'s top doc).
    let r = unsafe { sys::recv_nb(fd, ptr, len) };
    Some((len, r))
}

/// Bytes of the socket's frame in progress still to come, 0 between frames.
fn bulk_left(s: &Sock) -> usize {
    s.rx.as_ref()
        .map_or(0, |rx| rx.frame_left().max(rx.exact_left()))
}
