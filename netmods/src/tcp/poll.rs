//! The poll backend: nonblocking sockets and plain system calls, for when
//! io_uring is unavailable or not wanted.
//!
//! A poll costs the same whatever the number of connections: with one open
//! connection it receives on it directly (the receive is the readiness
//! check: one system call when idle, none extra when data is there); with
//! two or more, one level-triggered `epoll_wait` (zero timeout) finds the
//! readable sockets and only those are received on. The listener is in the
//! epoll set too, so a connection arriving is accepted at once. Otherwise
//! the listener and connects in progress are looked at only while some
//! socket of ours is not yet open, or every 64th call. One system call
//! when nothing is ready is the floor here: readiness lives in the kernel,
//! and only io_uring's shared rings let a process see it without a call.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::{NetmodError, PeerId, Sink};

use super::state::{Phase, SockId, State};
use super::sys::{self, Epoll};

/// The listener's epoll token (sockets' carry slot and generation).
const LISTENER: u64 = u64::MAX;
/// Frames taken from one connection per `poll`, so one busy peer cannot
/// starve the others.
const FRAME_BUDGET: usize = 64;
/// Look at the listener and pending connects every this many polls once
/// every socket is open.
const SLOW_EVERY: u64 = 64;

pub(crate) struct PollIo {
    listener: OwnedFd,
    epoll: Epoll,
    tick: u64,
    /// Accepted sockets still waiting for their HELLO, as counted at the
    /// last slow tick: they are served on slow ticks only, so a client that
    /// connects and never speaks (a port scanner) costs nothing per poll,
    /// and closed there once the handshake deadline has passed.
    awaiting_hello: usize,
    /// A message was written straight to a socket since the last poll:
    /// further small ones are queued and leave together at the next poll
    /// (one send for a window of them), see `send`.
    pub(crate) wrote_since_poll: bool,
    /// Reused lists, so a poll allocates nothing.
    work: Vec<u32>,
    ready: Vec<u64>,
    pollfds: Vec<libc::pollfd>,
    pollslots: Vec<u32>,
    /// Waits made by `park`, and those that ended by their timeout.
    pub(crate) parks: u64,
    pub(crate) park_timeouts: u64,
}

/// Queued bytes of small messages that are written at once rather than
/// at the next poll (`TcpNetmod::try_send`).
pub(crate) const COALESCE_FLUSH: usize = 64 * 1024;

fn token(slot: u32, gen: u32) -> u64 {
    (slot as u64) << 32 | gen as u64
}

fn io_err(what: &str, source: io::Error) -> NetmodError {
    NetmodError::Io {
        what: what.into(),
        source,
    }
}

impl PollIo {
    pub(crate) fn new(bind: SocketAddr) -> Result<(PollIo, SocketAddr), NetmodError> {
        let (listener, local) =
            sys::listen(bind, true).map_err(|e| io_err(&format!("listen on {bind}"), e))?;
        let epoll = Epoll::new().map_err(|e| io_err("epoll_create1", e))?;
        epoll
            .add(listener.as_raw_fd(), LISTENER)
            .map_err(|e| io_err("epoll_ctl", e))?;
        Ok((
            PollIo {
                listener,
                epoll,
                tick: 0,
                awaiting_hello: 0,
                wrote_since_poll: false,
                work: Vec::new(),
                ready: Vec::new(),
                pollfds: Vec::new(),
                pollslots: Vec::new(),
                parks: 0,
                park_timeouts: 0,
            },
            local,
        ))
    }

    fn watch(&self, st: &mut State, slot: u32) {
        if let Some(s) = st.sock(slot) {
            // An unwatched socket is only missed with two or more open.
            let _ = self.epoll.add(s.fd.as_raw_fd(), token(slot, s.gen));
            st.calls += 1;
        }
    }

    /// Starts `peer`'s connect (its first message is queued).
    pub(crate) fn start(&mut self, st: &mut State, peer: PeerId) {
        if let Some(slot) = st.add_connector(peer, 0, true, None) {
            self.connect(st, slot);
        }
    }

    /// Issues the connect of `slot`, moving on to the next address on an
    /// immediate failure.
    fn connect(&mut self, st: &mut State, mut slot: u32) {
        loop {
            let Some(s) = st.sock(slot) else { return };
            let r = sys::connect(s.fd.as_raw_fd(), &s.addr);
            st.calls += 1;
            match r {
                Ok(true) => {
                    self.watch(st, slot);
                    return st.connected(slot);
                }
                Ok(false) => return self.watch(st, slot),
                Err(e) => match st.connect_failed(slot, &e, true) {
                    Some(next) => slot = next,
                    None => return,
                },
            }
        }
    }

    /// Writes `prefix + header + payload` on connection `id` with one
    /// nonblocking call (`sys::send_frame`: a small frame written into one `send(2)`,
    /// else `sendmsg(2)` straight from the caller's buffers; see
    /// `TcpNetmod::try_send` for when); `None` if the socket is gone, else
    /// the bytes written (0 if it is full; on error the socket has failed).
    pub(crate) fn send_direct(
        &mut self,
        st: &mut State,
        id: SockId,
        header: &[u8],
        payload: &[u8],
    ) -> Option<usize> {
        let fd = st.sock_at(id)?.fd.as_raw_fd();
        self.wrote_since_poll = true;
        st.calls += 1;
        match sys::send_frame(fd, header, payload) {
            Ok(n) => Some(n),
            Err(e) if sys::would_block(&e) => Some(0),
            Err(e) => {
                st.sock_failed(id.slot, format!("send: {e}"));
                Some(0)
            }
        }
    }

    // Out of line, as `UringIo::poll` is: `TcpNetmod::poll` is then a
    // jump to the backend's poll. Inlined there, this function's register
    // saves were paid by every io_uring poll too (callgrind: 25
    // instructions a poll), against a jump for this backend.
    #[inline(never)]
    pub(crate) fn poll(
        &mut self,
        st: &mut State,
        sink: &mut dyn Sink,
    ) -> Result<usize, NetmodError> {
        self.tick += 1;
        self.wrote_since_poll = false;
        while let Some(slot) = st.redial.pop() {
            self.connect(st, slot);
        }
        // With two or more open connections one epoll_wait says which are
        // readable (and whether the listener is); with one, its receive
        // below is the check.
        let mut listener_ready = false;
        self.ready.clear();
        if st.open.len() > 1 {
            st.calls += 1;
            let ready = self.epoll.ready().map_err(|e| io_err("epoll_wait", e))?;
            for t in ready {
                if t == LISTENER {
                    listener_ready = true;
                } else {
                    self.ready.push(t);
                }
            }
        }
        // Every poll while a connection of ours is being made; else
        // every SLOW_EVERY-th, or when the listener has one waiting.
        let ours_pending = st.live > st.open.len() + self.awaiting_hello;
        if st.open.is_empty() || ours_pending || listener_ready || self.tick % SLOW_EVERY == 0 {
            self.accept_all(st);
            self.check_connects(st)?;
            self.awaiting_hello = st.wake_awaiting_hello();
        }
        std::mem::swap(&mut st.dirty, &mut self.work);
        for i in 0..self.work.len() {
            let slot = self.work[i];
            self.drive(st, slot);
        }
        self.work.clear();
        if st.open.len() == 1 && self.ready.is_empty() {
            let slot = st.open[0];
            read(st, slot, sink);
        }
        for i in 0..self.ready.len() {
            let t = self.ready[i];
            let (slot, gen) = ((t >> 32) as u32, t as u32);
            match st.sock(slot).filter(|s| s.gen == gen).map(|s| s.phase) {
                Some(Phase::Open) => read(st, slot, sink),
                // A handshake's bytes arrived: served now, not at the
                // next slow tick.
                Some(Phase::AwaitHello | Phase::Hello { .. }) => self.drive(st, slot),
                _ => {}
            }
        }
        std::mem::swap(&mut st.closing, &mut self.work);
        for i in 0..self.work.len() {
            if let Some(s) = st.release(self.work[i]) {
                self.epoll.del(s.fd.as_raw_fd());
                st.calls += 1;
                st.finish(s);
            }
        }
        self.work.clear();
        let n = std::mem::take(&mut st.events);
        Ok(n + st.report(sink))
    }

    /// Blocks in `epoll_wait` until a socket or the listener is readable,
    /// or `timeout` passes (`Netmod::park`); false at once if a poll has
    /// work an epoll wait would not announce: queued writes or handshake
    /// bytes (dirty sockets), a connect of ours in progress (its end is
    /// writability, which the set does not watch), a redial, a socket
    /// closing, something to report. Every socket is in the set from its
    /// connect or accept on.
    pub(crate) fn park(&mut self, st: &mut State, timeout: std::time::Duration) -> bool {
        let ours_pending = st.live > st.open.len() + self.awaiting_hello;
        if ours_pending
            || !st.dirty.is_empty()
            || !st.redial.is_empty()
            || !st.closing.is_empty()
            || !st.failures.is_empty()
            || st.events > 0
        {
            return false;
        }
        st.calls += 1;
        self.parks += 1;
        self.park_timeouts += self.epoll.wait(timeout) as u64;
        true
    }

    fn accept_all(&mut self, st: &mut State) {
        loop {
            st.calls += 1;
            match sys::accept(self.listener.as_raw_fd()) {
                Ok(fd) => {
                    let _ = sys::set_nodelay(fd.as_raw_fd());
                    let slot = st.add_acceptor(fd);
                    self.watch(st, slot);
                }
                Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => continue,
                // WouldBlock, or out of descriptors: try again later.
                Err(_) => return,
            }
        }
    }

    /// Completes nonblocking connects: writable means done, SO_ERROR says how.
    fn check_connects(&mut self, st: &mut State) -> Result<(), NetmodError> {
        self.pollfds.clear();
        self.pollslots.clear();
        for slot in 0..st.slot_count() {
            if let Some(s) = st
                .sock(slot)
                .filter(|s| matches!(s.phase, Phase::Connecting { .. }))
            {
                self.pollfds.push(libc::pollfd {
                    fd: s.fd.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                });
                self.pollslots.push(slot);
            }
        }
        st.calls += !self.pollfds.is_empty() as u64;
        if self.pollfds.is_empty()
            || sys::poll_now(&mut self.pollfds).map_err(|e| io_err("poll", e))? == 0
        {
            return Ok(());
        }
        for i in 0..self.pollfds.len() {
            if self.pollfds[i].revents == 0 {
                continue;
            }
            let slot = self.pollslots[i];
            st.calls += 1;
            match sys::take_error(self.pollfds[i].fd) {
                Ok(None) => st.connected(slot),
                Ok(Some(e)) | Err(e) => {
                    if let Some(next) = st.connect_failed(slot, &e, true) {
                        self.connect(st, next);
                    }
                }
            }
        }
        Ok(())
    }

    /// Handshake I/O, and writes of queued frames, for a dirty socket. It
    /// stays dirty while it waits for anything but a connect or a read of
    /// an open connection.
    pub(crate) fn drive(&mut self, st: &mut State, slot: u32) {
        let Some(s) = st.sock(slot) else { return };
        s.dirty = false;
        let fd = s.fd.as_raw_fd();
        let phase = s.phase;
        if matches!(phase, Phase::Connecting { .. } | Phase::Closing) {
            return;
        }
        // Handshake bytes first: they precede any frame.
        if !s.hs_pending().is_empty() {
            let r = sys::send(fd, &[s.hs_pending()]);
            st.calls += 1;
            match r {
                Ok(n) => st.hs_sent(slot, n),
                Err(e) if sys::would_block(&e) => return st.mark_dirty(slot),
                Err(e) => return st.sock_failed(slot, format!("send: {e}")),
            }
        }
        let Some(s) = st.sock(slot) else { return };
        match s.phase {
            Phase::Hello { .. } | Phase::AwaitHello => {
                let Some((ptr, len)) = s.recv_target() else {
                    return;
                };
                // SAFETY: recv_target gives `len` writable bytes of the
                // socket's handshake buffer.
                let r = unsafe { sys::recv(fd, ptr, len) };
                st.calls += 1;
                match r {
                    Ok(0) => st.sock_failed(slot, "connection closed during the handshake".into()),
                    Ok(n) => st.hs_received(slot, n),
                    // An acceptor waits for the next slow tick (see
                    // `awaiting_hello`); a connector keeps trying.
                    // An acceptor past its deadline closes (`hello_overdue`).
                    Err(e) if sys::would_block(&e) => {
                        if !matches!(phase, Phase::AwaitHello) {
                            st.mark_dirty(slot)
                        } else {
                            st.hello_overdue(slot);
                        }
                    }
                    Err(e) => st.sock_failed(slot, format!("recv: {e}")),
                }
            }
            Phase::Open => write_queue(st, slot, fd),
            _ => {}
        }
    }
}

/// Writes `slot`'s peer queue until empty or the socket is full; a
/// detached socket's own queue, then shuts its sending side down.
fn write_queue(st: &mut State, slot: u32, fd: i32) {
    let Some((s, peers)) = st.sock_and_peers(slot) else {
        return;
    };
    let out = if s.detached {
        &mut s.drain
    } else {
        match s.peer.and_then(|q| peers.get_mut(&q)) {
            Some(p) => &mut p.out,
            None => return,
        }
    };
    let mut calls = 0;
    let err = loop {
        let chunk = out.front();
        if chunk.is_empty() {
            break None;
        }
        calls += 1;
        match sys::send(fd, &[chunk]) {
            Ok(n) => out.advance(n),
            Err(e) => break Some(e),
        }
    };
    if err.is_none() && s.detached && !s.wr_shut {
        s.wr_shut = true;
        sys::shutdown_write(fd);
        calls += 1;
    }
    st.calls += calls;
    match err {
        Some(e) if sys::would_block(&e) => st.mark_dirty(slot),
        Some(e) => st.sock_failed(slot, format!("send: {e}")),
        None => {}
    }
}

/// Receives and delivers what an open connection has, within the budget.
fn read(st: &mut State, slot: u32, sink: &mut dyn Sink) {
    let mut frames = 0;
    loop {
        let Some(s) = st.sock(slot).filter(|s| s.phase == Phase::Open) else {
            return;
        };
        let fd = s.fd.as_raw_fd();
        let Some((ptr, len)) = s.recv_target() else {
            return;
        };
        // SAFETY: recv_target gives `len` writable bytes: the input buffer,
        // the overflow buffer, or the engine's placement memory.
        let r = unsafe { sys::recv_nb(fd, ptr, len) };
        st.calls += 1;
        match r {
            Ok(0) => return st.sock_failed(slot, "connection closed by the peer".into()),
            Ok(n) => {
                frames += st.rx_data(slot, n, sink);
                // A short read means the socket is drained: skip the EAGAIN call.
                if n < len || frames >= FRAME_BUDGET {
                    return;
                }
            }
            Err(libc::EAGAIN) => return,
            Err(e) => {
                let e = std::io::Error::from_raw_os_error(e);
                return st.sock_failed(slot, format!("recv: {e}"));
            }
        }
    }
}
