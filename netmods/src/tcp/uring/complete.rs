//! Reaping completions and acting on them.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use io_uring::{cqueue, opcode};

use super::super::state::{Phase, State};
use super::super::sys;
use super::*;

impl UringIo {
    /// Handles every completion there is. Inline for an idle poll's
    /// check, which then costs no call (callgrind: the call and its frame
    /// were some 35 instructions a poll).
    #[inline]
    pub(super) fn reap(&mut self, st: &mut State, sink: &mut dyn Sink) {
        if self.deferred.is_empty()
            && self.ring.ring.completion().is_empty()
            && !self.bufs.as_ref().is_some_and(|b| b.pending)
        {
            return;
        }
        self.reap_some(st, sink);
    }

    #[inline(never)]
    fn reap_some(&mut self, st: &mut State, sink: &mut dyn Sink) {
        if !self.deferred.is_empty() {
            let deferred = std::mem::take(&mut self.deferred);
            for &(ud, res, flags) in &deferred {
                self.complete(st, sink, ud, res, flags);
            }
        }
        // An idle poll ends here: zeroing the batch below on every call
        // was a tenth of a busy-polling sender's instructions (callgrind).
        if self.ring.ring.completion().is_empty() {
            if let Some(b) = &mut self.bufs {
                b.publish();
            }
            return;
        }
        let mut batch = [(0u64, 0i32, 0u32); 32];
        loop {
            let mut k = 0;
            for e in self.ring.ring.completion() {
                batch[k] = (e.user_data(), e.result(), e.flags());
                k += 1;
                if k == batch.len() {
                    break;
                }
            }
            for &(ud, res, flags) in &batch[..k] {
                self.complete(st, sink, ud, res, flags);
            }
            if k < batch.len() {
                break;
            }
        }
        if let Some(b) = &mut self.bufs {
            b.publish();
        }
    }

    fn complete(&mut self, st: &mut State, sink: &mut dyn Sink, ud: u64, res: i32, flags: u32) {
        let kind = ud & 0xFF;
        let slot = (ud >> 32) as u32;
        let gen = ((ud >> 8) & 0xFF_FFFF) as u32;
        match kind {
            K_CANCEL => return,
            K_ACCEPT => {
                if !cqueue::more(flags) {
                    self.accept_armed = false;
                }
                if res >= 0 {
                    // SAFETY: the kernel gave us this new descriptor.
                    let fd = unsafe { OwnedFd::from_raw_fd(res) };
                    let _ = sys::set_nodelay(fd.as_raw_fd());
                    st.add_acceptor(fd);
                } else if res == -libc::EINVAL && self.ring.multishot_accept {
                    self.ring.multishot_accept = false;
                }
                // Other errors (out of descriptors, cancelled): re-armed
                // by the next poll.
                return;
            }
            _ => {}
        }
        // A provided buffer goes back to the kernel whatever happens here.
        let buf = cqueue::buffer_select(flags);
        let live = st.sock(slot).is_some_and(|s| s.gen & 0xFF_FFFF == gen);
        if !live {
            if let (Some(bid), Some(b)) = (buf, &mut self.bufs) {
                b.give(bid);
            }
            return;
        }
        let Some((s, peers)) = st.sock_and_peers(slot) else {
            return;
        };
        let closing = s.phase == Phase::Closing;
        match kind {
            K_MULTI => {
                if !cqueue::more(flags) {
                    s.io &= !(IO_MULTI | IO_STOP);
                }
                let (more, stopping) = (s.io & IO_MULTI != 0, s.io & IO_STOP != 0);
                if let (Some(bid), Some(b)) = (buf, &mut self.bufs) {
                    // One buffer, or a bundle of them (`BufRing::bundle`).
                    let len = res.max(0) as usize;
                    let (start, n) = b.bundle(bid, len);
                    self.bundles += (n > 1) as u64;
                    for k in 0..n {
                        let (bid, len) = b.part(start, k, len);
                        if !closing
                            && len > 0
                            && st.sock(slot).is_some_and(|s| s.phase != Phase::Closing)
                        {
                            self.rx.ring += len as u64;
                            st.rx_feed(slot, b.data(bid, len), sink);
                        }
                        b.give(bid);
                    }
                }
                if res > 0 {
                    self.hot = st.sock(slot).map(|s| (slot, s.gen));
                }
                // Bulk data: the rest without the copy, by single-shot
                // RECVs, or in `Defer` mode by direct reads under a
                // readiness watch (`WATCH_FRAMES`).
                if !closing {
                    self.stop_for_bulk(st, slot, gen, res.max(0) as usize, more && !stopping);
                }
                if closing {
                } else if res > 0 || res == -libc::ENOBUFS {
                    // Out of buffers: re-armed once the poll gave them back.
                    if !more {
                        st.mark_dirty(slot);
                    }
                } else if res == 0 {
                    st.sock_failed(slot, "connection closed by the peer".into());
                } else if res == -libc::EINVAL && self.bufs.is_some() {
                    // The kernel has no multishot RECV (before 6.0):
                    // single-shot from now on.
                    self.bufs = None;
                    self.no_bufs = Some("multishot recv refused".into());
                    st.mark_dirty(slot);
                } else {
                    op_error(st, slot, "recv", res);
                }
            }
            K_RECV => {
                s.io &= !IO_RECV;
                let hs = matches!(s.phase, Phase::Hello { .. } | Phase::AwaitHello);
                if closing {
                } else if res > 0 {
                    if hs {
                        st.hs_received(slot, res as usize);
                    } else {
                        self.rx.single += res as u64;
                        let k = st.rx_data(slot, res as usize, sink) as u32;
                        if let Some(s) = st.sock(slot) {
                            s.single_rx = s.single_rx.saturating_sub(k);
                            let left = s.rx.as_ref().map_or(0, |rx| rx.frame_left());
                            if left.max(res as usize) >= DIRECT_RECV_MIN {
                                s.single_rx = SINGLE_RX_FRAMES;
                            }
                        }
                        // Busy (a large frame's single-shot RECVs take this
                        // path, not direct reads): spin (`spin.rs`).
                        self.maybe_spin(st, slot);
                    }
                    st.mark_dirty(slot);
                } else if res == 0 {
                    st.sock_failed(slot, "connection closed by the peer".into());
                } else {
                    op_error(st, slot, "recv", res);
                }
            }
            K_SEND => {
                // A zero-copy SEND completes twice: its result (with
                // F_MORE), then a notification once the kernel let go of
                // the buffer, which only then may change.
                let res = if cqueue::notif(flags) {
                    s.zc_res.take().unwrap_or(0)
                } else if cqueue::more(flags) {
                    s.zc_res = Some(res);
                    return;
                } else {
                    res
                };
                s.io &= !IO_SEND;
                let (hs, sent) = (s.send_hs, res.max(0) as usize);
                if !hs {
                    s.out_flight = false;
                    if s.detached {
                        s.drain.end_flight(sent);
                    } else if let Some(p) = s.peer.and_then(|q| peers.get_mut(&q)) {
                        p.out.end_flight(sent);
                    }
                }
                if closing {
                } else if res < 0 {
                    op_error(st, slot, "send", res);
                } else if hs {
                    st.hs_sent(slot, sent);
                } else {
                    st.mark_dirty(slot);
                }
            }
            K_WATCH => {
                s.io &= !IO_WATCH;
                if closing {
                } else if res >= 0 {
                    self.watch_fired(st, slot, sink);
                } else {
                    op_error(st, slot, "poll", res);
                }
            }
            K_CONNECT => {
                s.io &= !IO_CONNECT;
                if closing {
                } else if res == 0 {
                    st.connected(slot);
                } else if res == -libc::EINTR || res == -libc::EAGAIN {
                    st.mark_dirty(slot);
                } else {
                    st.connect_failed(slot, &io::Error::from_raw_os_error(-res), false);
                }
            }
            _ => {}
        }
    }

    /// Bulk data is arriving (a frame with `DIRECT_RECV_MIN` or more still
    /// to come, or a completion that large): the multishot RECV is
    /// cancelled so that, once it ends, single-shot RECVs take the data
    /// straight into the parser's target (see `arm`), without the copy out
    /// of provided buffers.
    /// `armed`: the multishot RECV goes on (else it has ended, and only
    /// the frame count is set for its re-arm).
    fn stop_for_bulk(&mut self, st: &mut State, slot: u32, gen: u32, got: usize, armed: bool) {
        let frames = if self.direct_mode() {
            WATCH_FRAMES
        } else {
            SINGLE_RX_FRAMES
        };
        let Some(s) = st.sock(slot) else { return };
        let left = s.rx.as_ref().map_or(0, |rx| rx.frame_left());
        if left < DIRECT_RECV_MIN && got < DIRECT_RECV_MIN {
            return;
        }
        s.single_rx = frames;
        if !armed {
            return;
        }
        s.io |= IO_STOP;
        let e = opcode::AsyncCancel::new(user_data(slot, gen, K_MULTI))
            .build()
            .user_data(user_data(slot, gen, K_CANCEL));
        // SAFETY: a cancel carries no pointers.
        unsafe { self.push(&e) };
    }
}

impl UringIo {
    /// `slot`'s readiness watch saw data (the poll did not read it
    /// directly first): read it now, then spin on it or watch it again.
    fn watch_fired(&mut self, st: &mut State, slot: u32, sink: &mut dyn Sink) {
        if self.read_direct(st, slot, sink) > 0 {
            self.maybe_spin(st, slot);
        }
        // Re-armed (a level check: data left by the frame budget fires it
        // at once), unless it spins now.
        st.mark_dirty(slot);
    }
}

fn op_error(st: &mut State, slot: u32, what: &str, res: i32) {
    match -res {
        // Not closing, so not our cancel: the thread that submitted the
        // operation exited (io_uring cancels a task's requests when it
        // does), and nothing was transferred. Submit it again.
        libc::EAGAIN | libc::EINTR | libc::ECANCELED => st.mark_dirty(slot),
        e => st.sock_failed(slot, format!("{what}: {}", io::Error::from_raw_os_error(e))),
    }
}
