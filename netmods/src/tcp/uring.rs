//! The io_uring backend: one ring per process; every socket operation is
//! an SQE, and `poll` pushes what is needed, enters the kernel at most once
//! (only when something was pushed or the kernel has task work or
//! overflowed completions for us), then reaps completions without waiting.
//!
//! # Safety invariant
//! An SQE carries pointers into memory we own: a socket's handshake
//! buffers (`Sock::hs`) and connect address (`Sock::addr`), both boxed; its
//! receive target (the `Rx` input or overflow buffer, or the engine's
//! placement destination); a peer's frozen `Outq` sending buffer. That
//! memory must stay allocated, unmoved and unreused until the operation's
//! completion is reaped. This holds because:
//! 1. a socket has at most one RECV, one SEND and one CONNECT in flight,
//!    recorded in `Sock::io`, and is never released (dropped) while any is:
//!    closing only shuts it down and cancels its operations;
//! 2. `Rx` moves bytes only in `target` and `parse`, which run only when
//!    no RECV is in flight; `Outq` freezes its sending buffer between
//!    `start_flight` and `end_flight`, and a peer entry is removed only by
//!    `disconnect`, which moves its queue into the socket whose SEND reads
//!    it (`Sock::out_flight`; moving an `Outq` does not move a `Vec`'s heap
//!    buffer), so the buffer lives until that socket is released;
//! 3. a peer failure reaches the engine, which may then free a placement
//!    destination, only once the socket is released; a disconnect, after
//!    which the engine may free it at once, first cancels a RECV into a
//!    placement destination and waits for its completion (`quiesce`);
//! 4. on drop we wait (up to 2 s) for every operation; memory of any still
//!    in flight then is leaked, never freed.
//!
//! Sockets are blocking: io_uring retries socket operations through its
//! internal poll, whereas on nonblocking sockets some kernels complete them
//! with -EAGAIN. Not used: SQPOLL (a polling kernel thread per ring costs a
//! core, and machines may have two); multishot RECV with provided buffers,
//! which receives into kernel-chosen buffers and so cannot receive a large
//! payload straight into the placement destination; SEND_ZC.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};

use crate::{NetmodError, PeerId, Sink};

use super::state::{Phase, State};
use super::sys;

const ENTRIES: u32 = 256;
/// Largest length one SQE asks for (the field is 32 bits).
const MAX_IO: usize = 1 << 30;

/// Bits of `Sock::io`.
const IO_RECV: u8 = 1;
const IO_SEND: u8 = 2;
const IO_CONNECT: u8 = 4;

/// Operation kinds, the low byte of `user_data`.
const K_RECV: u64 = 1;
const K_SEND: u64 = 2;
const K_CONNECT: u64 = 3;
const K_ACCEPT: u64 = 4;
const K_CANCEL: u64 = 5;
const LISTENER: u32 = u32::MAX;

/// slot (32 bits) | generation (24 bits) | kind (8 bits): a completion for a
/// slot since reused is recognised and ignored.
fn user_data(slot: u32, gen: u32, kind: u64) -> u64 {
    (slot as u64) << 32 | ((gen as u64) & 0xFF_FFFF) << 8 | kind
}

/// A ring that passed the probe.
pub(crate) struct Setup {
    ring: IoUring,
    coop: bool,
    multishot: bool,
}

/// Creates and probes the ring; `Err` says why io_uring cannot be used.
pub(crate) fn setup(inject_failure: bool) -> Result<Setup, String> {
    if inject_failure {
        return Err("failure injected (RIVET_TCP_URING_INJECT_FAILURE=1)".into());
    }
    let built = IoUring::builder()
        .setup_coop_taskrun()
        .setup_taskrun_flag()
        .build(ENTRIES);
    let (ring, coop) = match built {
        Ok(r) => (r, true),
        // Kernels before 5.19 refuse the task-run flags.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
            IoUring::new(ENTRIES).map_err(|e| format!("io_uring_setup: {e}"))?,
            false,
        ),
        Err(e) => return Err(format!("io_uring_setup: {e}")),
    };
    let mut probe = Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| format!("io_uring probe: {e}"))?;
    for (code, name) in [
        (opcode::Recv::CODE, "RECV"),
        (opcode::Send::CODE, "SEND"),
        (opcode::Accept::CODE, "ACCEPT"),
        (opcode::Connect::CODE, "CONNECT"),
        (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
    ] {
        if !probe.is_supported(code) {
            return Err(format!("the kernel lacks IORING_OP_{name}"));
        }
    }
    // Multishot accept has no probe bit; it came in 5.19 with
    // IORING_OP_SOCKET. A refusal (-EINVAL) also falls back to single-shot.
    let multishot = probe.is_supported(opcode::Socket::CODE);
    Ok(Setup {
        ring,
        coop,
        multishot,
    })
}

/// Completions of sockets being torn down carry nothing to deliver.
struct NoSink;

impl Sink for NoSink {
    fn deliver(&mut self, _: PeerId, _: &[u8], _: &[u8]) {}
    fn peer_failed(&mut self, _: PeerId, _: &str) {}
}

/// Look for overdue handshakes every this many polls.
const EXPIRE_EVERY: u64 = 64;

pub(crate) struct UringIo {
    ring: IoUring,
    listener: OwnedFd,
    coop: bool,
    multishot: bool,
    accept_armed: bool,
    /// Polls so far (handshake deadlines are checked every `EXPIRE_EVERY`).
    tick: u64,
    /// Reused list, so a poll allocates nothing.
    work: Vec<u32>,
    /// Completions reaped by `quiesce`, handled first by the next reap.
    deferred: Vec<(u64, i32, u32)>,
    /// `io_uring_enter` calls so far (`TcpNetmod::syscalls`).
    pub(crate) calls: u64,
}

fn io_err(what: &str, source: io::Error) -> NetmodError {
    NetmodError::Io {
        what: what.into(),
        source,
    }
}

impl UringIo {
    /// `listener` must be a blocking listening socket.
    pub(crate) fn new(setup: Setup, listener: OwnedFd) -> UringIo {
        UringIo {
            ring: setup.ring,
            listener,
            coop: setup.coop,
            multishot: setup.multishot,
            accept_armed: false,
            tick: 0,
            work: Vec::new(),
            deferred: Vec::new(),
            calls: 0,
        }
    }

    /// For `describe`: the optional features in use.
    pub(crate) fn features(&self) -> String {
        let mut f = Vec::new();
        if self.coop {
            f.push("coop taskrun");
        }
        f.push(if self.multishot {
            "multishot accept"
        } else {
            "single-shot accept"
        });
        f.join(", ")
    }

    pub(crate) fn start(&mut self, st: &mut State, peer: PeerId) {
        // Dirty: its CONNECT is pushed by the next poll.
        st.add_connector(peer, 0, false, None);
    }

    pub(crate) fn send(&mut self, st: &mut State, peer: PeerId, header: &[u8], payload: &[u8]) {
        if let Some(p) = st.peers.get_mut(&peer) {
            p.out.push(header, payload, 0);
        }
        if let Some(id) = st.open_conn(peer) {
            st.mark_dirty(id.slot);
        }
    }

    /// Queues one SQE, submitting first if the queue is full.
    ///
    /// # Safety
    /// Every pointer in `e` must stay valid until its completion is reaped
    /// (the module's invariant).
    unsafe fn push(&mut self, e: &squeue::Entry) -> bool {
        // SAFETY: the caller keeps the memory `e` points to valid.
        if unsafe { self.ring.submission().push(e) }.is_ok() {
            return true;
        }
        let _ = self.ring.submit();
        self.calls += 1;
        // SAFETY: as above.
        unsafe { self.ring.submission().push(e) }.is_ok()
    }

    pub(crate) fn poll(
        &mut self,
        st: &mut State,
        sink: &mut dyn Sink,
    ) -> Result<usize, NetmodError> {
        self.closing(st);
        // Redialed sockets are dirty: their CONNECT is pushed below.
        st.redial.clear();
        std::mem::swap(&mut st.dirty, &mut self.work);
        for i in 0..self.work.len() {
            let slot = self.work[i];
            self.arm(st, slot);
        }
        self.work.clear();
        if !self.accept_armed {
            self.arm_accept();
        }
        let enter = {
            let sq = self.ring.submission();
            !sq.is_empty() || sq.taskrun() || sq.cq_overflow()
        };
        if enter {
            self.calls += 1;
            match self.ring.submit() {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) => {}
                Err(e) => return Err(io_err("io_uring_enter", e)),
            }
        }
        self.reap(st, sink);
        // Now and then, while some socket is not open: close acceptors
        // whose HELLO is overdue (what had arrived was just reaped).
        self.tick = self.tick.wrapping_add(1);
        if self.tick % EXPIRE_EVERY == 0 && st.live > st.open.len() {
            st.expire_handshakes();
        }
        self.closing(st);
        let n = std::mem::take(&mut st.events);
        Ok(n + st.report(sink))
    }

    fn arm_accept(&mut self) {
        let fd = types::Fd(self.listener.as_raw_fd());
        let e = if self.multishot {
            opcode::AcceptMulti::new(fd)
                .flags(libc::SOCK_CLOEXEC)
                .build()
        } else {
            opcode::Accept::new(fd, std::ptr::null_mut(), std::ptr::null_mut())
                .flags(libc::SOCK_CLOEXEC)
                .build()
        };
        let e = e.user_data(user_data(LISTENER, 0, K_ACCEPT));
        // SAFETY: no pointers (the peer address is not asked for).
        if unsafe { self.push(&e) } {
            self.accept_armed = true;
        }
    }

    /// Pushes the operations a dirty socket needs and has not in flight.
    fn arm(&mut self, st: &mut State, slot: u32) {
        let Some((s, peers)) = st.sock_and_peers(slot) else {
            return;
        };
        s.dirty = false;
        let fd = types::Fd(s.fd.as_raw_fd());
        let gen = s.gen;
        let mut retry = false;
        match s.phase {
            Phase::Closing => return,
            Phase::Connecting { .. } => {
                if s.io & IO_CONNECT == 0 {
                    let e = opcode::Connect::new(fd, s.addr.as_ptr(), s.addr.len())
                        .build()
                        .user_data(user_data(slot, gen, K_CONNECT));
                    // SAFETY: `s.addr` is boxed in the socket, which is not
                    // released while IO_CONNECT is set.
                    if unsafe { self.push(&e) } {
                        s.io |= IO_CONNECT;
                    } else {
                        retry = true;
                    }
                }
            }
            _ => {
                if s.io & IO_RECV == 0 {
                    if let Some((ptr, len)) = s.recv_target() {
                        let e = opcode::Recv::new(fd, ptr, len.min(MAX_IO) as u32)
                            .build()
                            .user_data(user_data(slot, gen, K_RECV));
                        // SAFETY: the target is the socket's handshake or
                        // input buffer (not moved or freed while IO_RECV is
                        // set), or the engine's placement memory, valid until
                        // deliver or peer_failed, which wait for this RECV.
                        if unsafe { self.push(&e) } {
                            s.io |= IO_RECV;
                        } else {
                            retry = true;
                        }
                    }
                }
                if s.io & IO_SEND == 0 {
                    let hs = s.hs_pending();
                    if !hs.is_empty() {
                        let e = opcode::Send::new(fd, hs.as_ptr(), hs.len() as u32)
                            .flags(libc::MSG_NOSIGNAL)
                            .build()
                            .user_data(user_data(slot, gen, K_SEND));
                        // SAFETY: `s.hs` is boxed in the socket, which is not
                        // released while IO_SEND is set.
                        if unsafe { self.push(&e) } {
                            s.io |= IO_SEND;
                            s.send_hs = true;
                        } else {
                            retry = true;
                        }
                    } else if s.phase == Phase::Open {
                        // A detached socket writes its own queue.
                        let out = if s.detached {
                            Some(&mut s.drain)
                        } else {
                            s.peer
                                .and_then(|q| peers.get_mut(&q))
                                .filter(|p| p.open)
                                .map(|p| &mut p.out)
                        };
                        match out {
                            Some(out) if out.in_flight() => {}
                            Some(out) if !out.is_empty() => {
                                let (ptr, len) = out.start_flight();
                                let e = opcode::Send::new(fd, ptr, len.min(MAX_IO) as u32)
                                    .flags(libc::MSG_NOSIGNAL)
                                    .build()
                                    .user_data(user_data(slot, gen, K_SEND));
                                // SAFETY: the queue's sending buffer is frozen
                                // until `end_flight`, called on this
                                // completion, and lives until then (moved
                                // into this socket if the peer goes).
                                if unsafe { self.push(&e) } {
                                    s.io |= IO_SEND;
                                    s.send_hs = false;
                                    s.out_flight = true;
                                } else {
                                    out.end_flight(0);
                                    retry = true;
                                }
                            }
                            Some(_) if s.detached && !s.wr_shut => {
                                // Drained (nothing in flight or left):
                                // the other side reads end of stream.
                                s.wr_shut = true;
                                sys::shutdown_write(fd.0);
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        if retry {
            st.mark_dirty(slot);
        }
    }

    /// Shuts down closing sockets and cancels their operations; releases
    /// those with none left in flight.
    fn closing(&mut self, st: &mut State) {
        std::mem::swap(&mut st.closing, &mut self.work);
        for i in 0..self.work.len() {
            let slot = self.work[i];
            let Some(s) = st.sock(slot) else { continue };
            if s.io == 0 {
                if let Some(s) = st.release(slot) {
                    st.finish(s);
                }
                continue;
            }
            if !s.shut {
                s.shut = true;
                sys::shutdown(s.fd.as_raw_fd());
                let (io, gen) = (s.io, s.gen);
                for (bit, kind) in [
                    (IO_RECV, K_RECV),
                    (IO_SEND, K_SEND),
                    (IO_CONNECT, K_CONNECT),
                ] {
                    if io & bit != 0 {
                        let e = opcode::AsyncCancel::new(user_data(slot, gen, kind))
                            .build()
                            .user_data(user_data(slot, gen, K_CANCEL));
                        // SAFETY: a cancel carries no pointers.
                        unsafe { self.push(&e) };
                    }
                }
            }
            st.closing.push(slot);
        }
        self.work.clear();
    }

    fn reap(&mut self, st: &mut State, sink: &mut dyn Sink) {
        if !self.deferred.is_empty() {
            let deferred = std::mem::take(&mut self.deferred);
            for &(ud, res, flags) in &deferred {
                self.complete(st, sink, ud, res, flags);
            }
        }
        let mut batch = [(0u64, 0i32, 0u32); 32];
        loop {
            let mut k = 0;
            for e in self.ring.completion() {
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
                return;
            }
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
                } else if res == -libc::EINVAL && self.multishot {
                    self.multishot = false;
                }
                // Other errors (out of descriptors, cancelled): re-armed
                // by the next poll.
                return;
            }
            _ => {}
        }
        let Some((s, peers)) = st.sock_and_peers(slot) else {
            return;
        };
        if s.gen & 0xFF_FFFF != gen {
            return;
        }
        let closing = s.phase == Phase::Closing;
        match kind {
            K_RECV => {
                s.io &= !IO_RECV;
                let hs = matches!(s.phase, Phase::Hello { .. } | Phase::AwaitHello);
                if closing {
                } else if res > 0 {
                    if hs {
                        st.hs_received(slot, res as usize);
                    } else {
                        st.rx_data(slot, res as usize, sink);
                    }
                    st.mark_dirty(slot);
                } else if res == 0 {
                    st.sock_failed(slot, "connection closed by the peer".into());
                } else {
                    op_error(st, slot, "recv", res);
                }
            }
            K_SEND => {
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

    /// Before `peer` is disconnected: a RECV of one of its sockets that
    /// writes into a placement destination (the engine's memory, which it
    /// may free once the peer is forgotten) is cancelled, and its
    /// completion waited for. Other completions reaped meanwhile are
    /// handled by the next poll. Rare: the engine disconnects a peer once
    /// their traffic is done.
    pub(crate) fn quiesce(&mut self, st: &mut State, peer: PeerId) {
        for slot in 0..st.slot_count() {
            let Some(s) = st.sock(slot).filter(|s| s.peer == Some(peer)) else {
                continue;
            };
            if s.io & IO_RECV != 0 && s.rx.as_ref().is_some_and(|rx| rx.placed()) {
                let gen = s.gen;
                self.cancel_and_wait(user_data(slot, gen, K_RECV));
                if let Some(s) = st.sock(slot) {
                    // What it received is dropped with the peer's input.
                    s.io &= !IO_RECV;
                }
            }
        }
    }

    /// Cancels the operation `target` and waits for its completion.
    fn cancel_and_wait(&mut self, target: u64) {
        let cancel = opcode::AsyncCancel::new(target)
            .build()
            .user_data((target & !0xFF) | K_CANCEL);
        // SAFETY: a cancel carries no pointers.
        unsafe { self.push(&cancel) };
        if let Some(i) = self.deferred.iter().position(|d| d.0 == target) {
            self.deferred.remove(i);
            return;
        }
        loop {
            // The kernel completes every request, a cancelled one at once.
            self.calls += 1;
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
            let mut done = false;
            for e in self.ring.completion() {
                if e.user_data() == target {
                    done = true;
                } else {
                    self.deferred.push((e.user_data(), e.result(), e.flags()));
                }
            }
            if done {
                return;
            }
        }
    }

    /// Closes every socket and waits (up to 2 s) until no operation is in
    /// flight; leaks the memory of any that still is.
    pub(crate) fn teardown(&mut self, st: &mut State) {
        if self.accept_armed {
            let e = opcode::AsyncCancel::new(user_data(LISTENER, 0, K_ACCEPT))
                .build()
                .user_data(user_data(LISTENER, 0, K_CANCEL));
            // SAFETY: a cancel carries no pointers.
            unsafe { self.push(&e) };
        }
        sys::shutdown(self.listener.as_raw_fd());
        for slot in 0..st.slot_count() {
            st.close(slot, None);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            self.closing(st);
            if st.closing.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                break;
            }
            let _ = self.ring.submit();
            self.reap(st, &mut NoSink);
            std::thread::sleep(Duration::from_millis(1));
        }
        st.leak();
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
