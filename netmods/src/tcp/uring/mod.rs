//! The io_uring backend: one ring per process (`ring.rs`), every socket
//! operation an SQE.
//!
//! - Receive: an open connection has one multishot RECV armed on the
//!   shared provided-buffer ring (`bufs.rs`), taking bundles of buffers
//!   where the kernel can (6.10+); each completion's bytes are copied into
//!   the connection's frame parser and the buffers are given back at once.
//!   Armed once, it needs no SQE per message. In `Defer` mode it is
//!   mostly a watch: a poll that sees the kernel's task-work flag reads
//!   the socket by a plain `recv(2)` into the parser's target and enters
//!   at the next poll (`direct.rs`), large frames included. That
//!   connection then spins (one at a time): its multishot RECV is
//!   cancelled and every poll reads it by plain `recv`, so the peer's
//!   sends meet no io_uring waiter, until it is quiet for a while
//!   (`spin.rs`). A connection that carried bulk data (a frame with
//!   `DIRECT_RECV_MIN` or more to come) is watched by a readiness poll
//!   (POLL_ADD) instead of its multishot RECV for its next `WATCH_FRAMES`
//!   frames, so every byte of a large frame goes by plain `recv` straight
//!   into the target, the first bytes of a window included; a multishot
//!   completion that shows bulk data cancels it for the watch at once.
//!   In the other
//!   modes a frame with
//!   `DIRECT_RECV_MIN` or more still to come skips that copy: the
//!   multishot RECV is cancelled and, once it has ended, single-shot RECVs
//!   take the rest into the parser's target (a placed payload's rest by
//!   one MSG_WAITALL RECV into the engine's memory); then multishot is
//!   armed again. A connection that carried such a frame keeps to
//!   single-shot RECVs into the parser for its next `SINGLE_RX_FRAMES`
//!   frames (see there). Handshakes use
//!   single-shot RECVs into the socket's handshake buffer (they must not
//!   read past the verdict). Without a buffer ring (kernels before 5.19)
//!   open connections use single-shot RECVs into the parser's target.
//! - Send: a message to a peer with nothing queued, the first small one
//!   since the last poll or any large one, goes out from the caller's
//!   buffers at once by a plain nonblocking `sendmsg(2)` (a small frame
//!   gathered into one `send(2)`, `sys::send`): with room in the
//!   socket that is one call, as an SQE would be, without the SQE, the
//!   completion or a second enter to reap it. The rest is copied into the
//!   peer's queue, which the next poll writes the same way; only what the
//!   socket cannot take then leaves by one SEND (MSG_WAITALL), which the
//!   kernel continues as room appears (a spinning connection's instead
//!   waits for the next poll's `sendmsg`, `spin.rs`). A large such flight to a peer on
//!   another host goes by SEND_ZC (`ZC_MIN`, `TcpConfig::send_zc`), its
//!   buffer frozen until the kernel's notification.
//! - Poll: arms what dirty sockets need, then enters the kernel once,
//!   `io_uring_enter(n, 0, GETEVENTS)`, only if SQEs are queued or the
//!   kernel flagged task work or CQ overflow (in `Defer` mode a flagged
//!   poll reads directly first and leaves the enter to the next poll, see
//!   `direct.rs`); then reaps. An idle poll makes no system call (see
//!   `ring.rs` for the modes).
//! - Park (`park.rs`): a waiting engine may block in one
//!   `io_uring_enter(n, 1, GETEVENTS | EXT_ARG)` with a timeout, once
//!   every socket has an operation in flight that would wake it.
//! - Sockets are in the ring's fixed-file table when their slot fits.
//!
//! # Safety invariant
//! An SQE carries pointers into memory we own: a socket's handshake
//! buffers (`Sock::hs`) and connect address (`Sock::addr`), both boxed; a
//! single-shot receive target (the `Rx` input or overflow buffer, or the
//! engine's placement destination); a peer's frozen `Outq` sending buffer;
//! the provided buffers. That
//! memory must stay allocated, unmoved and unreused until the operation's
//! completion is reaped. This holds because:
//! 1. a socket has at most one RECV (single or multishot) or readiness
//!    watch (which holds no pointer), one SEND (a
//!    zero-copy one until its notification) and one CONNECT in flight,
//!    recorded in `Sock::io`, and is never released
//!    while any is: closing only shuts it down and cancels them;
//! 2. `Rx` moves bytes only in `target` and `parse`, which run only when
//!    no single-shot RECV is in flight (a multishot RECV writes only into
//!    provided buffers); `Outq` freezes its sending buffer between
//!    `start_flight` and `end_flight`, and a peer entry is removed only by
//!    `disconnect`, which moves its queue into the socket whose SEND reads
//!    it (`Sock::out_flight`), so the buffer lives until then;
//! 3. a peer failure reaches the engine, which may then free a placement
//!    destination, only once the socket is released; a disconnect first
//!    cancels a single-shot RECV into a placement destination and waits
//!    for its completion (`quiesce`);
//! 4. a direct send or read is a plain system call, done when it returns;
//! 5. on drop we wait (up to 2 s) for every operation; the memory of any
//!    still in flight then is leaked, never freed.
//!
//! Sockets are blocking (direct sends pass MSG_DONTWAIT): io_uring retries
//! socket operations through its internal poll. Not used: SQPOLL (a
//! polling kernel thread per ring costs a core, and machines may have
//! two); incremental buffers; SEND_ZC to a peer on this host (loopback
//! copies anyway, research notes) or from the caller's buffer (it is lent
//! only for the call, and the notification comes after the peer's ACK).

mod bufs;
mod ring;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types};

use crate::{NetmodError, PeerId, Sink};

use super::state::State;
use super::sys;
use bufs::BufRing;
use ring::{Ring, ENTER_GETEVENTS};

pub(crate) use ring::setup;

/// Largest length one SQE asks for (the field is 32 bits).
const MAX_IO: usize = 1 << 30;

/// Bits of `Sock::io`.
const IO_RECV: u8 = 1;
const IO_SEND: u8 = 2;
const IO_CONNECT: u8 = 4;
const IO_MULTI: u8 = 8;
/// The multishot RECV was asked to stop (a large payload is being placed).
const IO_STOP: u8 = 16;
/// A readiness watch (single-shot POLL_ADD for POLLIN) is armed: it takes
/// no bytes, so direct reads may run at any time (`direct.rs`).
const IO_WATCH: u8 = 32;

/// Operation kinds, the low byte of `user_data`.
const K_RECV: u64 = 1;
const K_SEND: u64 = 2;
const K_CONNECT: u64 = 3;
const K_ACCEPT: u64 = 4;
const K_CANCEL: u64 = 5;
const K_MULTI: u64 = 6;
const K_WATCH: u64 = 7;
const LISTENER: u32 = u32::MAX;

/// A frame with at least this much still to come is received straight
/// into the parser's target by single-shot RECVs (the engine's memory when
/// placed, by one MSG_WAITALL RECV; else the parser's buffer) instead of
/// through provided buffers and a copy. As low as what the parser places
/// at all (`conn::PLACE_MIN`). Before, only placed payloads with 64 KiB
/// left qualified: a stream of 64 KiB eager messages (never placed) went
/// kernel to provided buffer to parser to the receive buffer, one copy
/// more than poll, at half of poll's bandwidth.
const DIRECT_RECV_MIN: usize = super::conn::PLACE_MIN;

/// After a large frame or completion (`DIRECT_RECV_MIN`: bulk data), the
/// connection's next frames come
/// through single-shot RECVs into the parser (as the poll backend reads):
/// by the time the first provided buffer of a large frame is reaped, one
/// task-work run has drained most of it into more provided buffers, which
/// then cost a copy each. Multishot is armed again after this many frames
/// without bulk data.
const SINGLE_RX_FRAMES: u32 = 64;

/// In `Defer` mode, after bulk data (`DIRECT_RECV_MIN`) the connection is
/// watched by a readiness poll instead of its multishot RECV for its next
/// this many frames, so that every byte of a large frame is read by plain
/// `recv` into the parser's target (`direct.rs`). The multishot RECV, when
/// re-armed as the watch between two windows of large messages (the
/// connection stops spinning while the peer waits for its ack), took the
/// next window's first bytes into provided buffers, one copy more: 23-27 %
/// of 1 MiB bandwidth's receive copies (perf). More than a window's small
/// frames (64 RTS between windows of 64 large messages) so the watch
/// holds from one window to the next.
const WATCH_FRAMES: u32 = 1024;

/// A queue flight of at least this many bytes leaves by SEND_ZC where
/// zero copy is wanted (`TcpConfig::send_zc`): below it the notification
/// costs more than the copy (research notes: ~10 KB on loopback's
/// MSG_ZEROCOPY, ~3 KB on NICs since 6.10).
const ZC_MIN: usize = 16 * 1024;

/// slot (32 bits) | generation (24 bits) | kind (8 bits): a completion for a
/// slot since reused is recognised and ignored.
fn user_data(slot: u32, gen: u32, kind: u64) -> u64 {
    (slot as u64) << 32 | ((gen as u64) & 0xFF_FFFF) << 8 | kind
}

/// Completions of sockets being torn down carry nothing to deliver.
struct NoSink;

impl Sink for NoSink {
    fn deliver(&mut self, _: PeerId, _: &[u8], _: &[u8]) {}
    fn peer_failed(&mut self, _: PeerId, _: &str) {}
}

/// Look for overdue handshakes every this many polls.
const EXPIRE_EVERY: u64 = 64;

/// Where an SQE finds its socket.
#[derive(Clone, Copy)]
enum Target {
    Fixed(u32),
    Fd(i32),
}

/// Builds an opcode on `$t` as a fixed file or a descriptor.
macro_rules! on {
    ($t:expr, |$fd:ident| $build:expr) => {
        match $t {
            Target::Fixed(i) => {
                let $fd = types::Fixed(i);
                $build
            }
            Target::Fd(f) => {
                let $fd = types::Fd(f);
                $build
            }
        }
    };
}

// After `on!`: macros are in scope from their definition on.
mod arm;
mod complete;
mod direct;
mod park;
mod send;
mod spin;

pub(crate) struct UringIo {
    ring: Ring,
    listener: OwnedFd,
    /// The shared receive buffers; `None`: single-shot RECVs instead.
    bufs: Option<BufRing>,
    accept_armed: bool,
    /// Polls so far (handshake deadlines are checked every `EXPIRE_EVERY`).
    tick: u64,
    /// A message went out directly since the last poll: further small ones
    /// wait for the poll (one SEND for a window of them).
    pub(crate) wrote_since_poll: bool,
    /// Reused list, so a poll allocates nothing.
    work: Vec<u32>,
    /// Completions reaped outside a poll (`send`, `quiesce`), handled
    /// first by the next one.
    deferred: Vec<(u64, i32, u32)>,
    /// Why the buffer ring is missing, for `describe`.
    no_bufs: Option<String>,
    /// Queue flights sent by SEND_ZC, and receive completions that filled
    /// more than one provided buffer (a bundle), for tests and `describe`.
    pub(crate) zc_sends: u64,
    pub(crate) bundles: u64,
    /// Direct reads that got bytes (`direct.rs`), for tests and `describe`.
    pub(crate) direct_reads: u64,
    /// The socket that last received (slot, generation): the one a direct
    /// read tries when several are open (`direct.rs`).
    hot: Option<(u32, u32)>,
    /// Polls in a row that read directly and left task work queued since
    /// the last enter (`direct.rs`): the next one enters, unless a large
    /// frame is arriving.
    owed: u32,
    /// The busy connection read by plain `recv` on every poll, with
    /// no RECV armed (slot, generation), and its empty polls in a row
    /// (`spin.rs`).
    spin: Option<(u32, u32)>,
    spin_idle: u32,
    /// Times a connection started spinning, for tests and `describe`.
    pub(crate) spins: u64,
    /// Waits made by `park`, and those that ended by their timeout.
    pub(crate) parks: u64,
    pub(crate) park_timeouts: u64,
    /// Bytes of open connections received by each path: through provided
    /// buffers (copied once more into the parser's target), by direct
    /// `recv` and by single-shot RECVs (both straight into the target).
    pub(crate) rx: RxBytes,
}

/// Bytes received by each receive path (`UringIo::rx`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxBytes {
    pub ring: u64,
    pub direct: u64,
    pub single: u64,
}

fn io_err(what: &str, source: io::Error) -> NetmodError {
    NetmodError::Io {
        what: what.into(),
        source,
    }
}

impl UringIo {
    /// `listener` must be a blocking listening socket.
    pub(crate) fn new(ring: Ring, listener: OwnedFd) -> UringIo {
        let (bufs, no_bufs) = match BufRing::new(&ring.ring) {
            Ok(b) => (Some(b), None),
            Err(e) => (None, Some(e)),
        };
        UringIo {
            ring,
            listener,
            bufs,
            accept_armed: false,
            tick: 0,
            wrote_since_poll: false,
            work: Vec::new(),
            deferred: Vec::new(),
            no_bufs,
            zc_sends: 0,
            bundles: 0,
            direct_reads: 0,
            hot: None,
            owed: 0,
            spin: None,
            spin_idle: 0,
            spins: 0,
            parks: 0,
            park_timeouts: 0,
            rx: RxBytes::default(),
        }
    }

    /// `io_uring_enter`/`register` calls so far.
    pub(crate) fn calls(&self) -> u64 {
        self.ring.calls
    }

    /// For `describe`: the mode and optional features in use.
    pub(crate) fn features(&self) -> String {
        let mut f = self.ring.features();
        f.push(if self.bufs.is_some() {
            "multishot recv on a provided buffer ring"
        } else {
            "single-shot recv"
        });
        if self.direct_mode() {
            f.push("direct recv when the kernel flags task work");
            if self.ring.spin {
                f.push("the busy connection spins on recv");
            }
        }
        let mut s = f.join(", ");
        if let Some(why) = &self.no_bufs {
            s.push_str(&format!(" ({why})"));
        }
        s
    }

    pub(crate) fn start(&mut self, st: &mut State, peer: PeerId) {
        // Dirty: its CONNECT is pushed by the next poll.
        st.add_connector(peer, 0, false, None);
    }

    /// Where SQEs find `slot`'s socket: its fixed-file entry, registered
    /// on first use when the slot fits the table.
    fn target(&mut self, st: &mut State, slot: u32) -> Option<Target> {
        let s = st.sock(slot)?;
        let fd = s.fd.as_raw_fd();
        if !s.fixed && slot < self.ring.fixed && self.ring.set_file(slot, fd) {
            s.fixed = true;
        }
        Some(if s.fixed {
            Target::Fixed(slot)
        } else {
            Target::Fd(fd)
        })
    }

    /// Queues one SQE, submitting first if the queue is full.
    ///
    /// # Safety
    /// Every pointer in `e` must stay valid until its completion is reaped
    /// (the module's invariant).
    unsafe fn push(&mut self, e: &squeue::Entry) -> bool {
        // SAFETY: the caller keeps the memory `e` points to valid.
        if unsafe { self.ring.ring.submission().push(e) }.is_ok() {
            return true;
        }
        let n = self.ring.queued();
        let _ = self.ring.enter(n, 0, 0);
        // SAFETY: as above.
        unsafe { self.ring.ring.submission().push(e) }.is_ok()
    }

    /// A poll: a quiet one inline (`spin.rs`), everything else out of
    /// line.
    #[inline(always)]
    pub(crate) fn poll(
        &mut self,
        st: &mut State,
        sink: &mut dyn Sink,
    ) -> Result<usize, NetmodError> {
        match self.quiet_poll(st, sink) {
            Some(n) => Ok(n),
            None => self.poll_full(st, sink),
        }
    }

    #[inline(never)]
    fn poll_full(&mut self, st: &mut State, sink: &mut dyn Sink) -> Result<usize, NetmodError> {
        self.wrote_since_poll = false;
        if !st.closing.is_empty() {
            self.closing(st);
        }
        self.arm_dirty(st);
        let (n, taskrun, overflow) = {
            let sq = self.ring.ring.submission();
            (sq.len() as u32, sq.taskrun(), sq.cq_overflow())
        };
        // The busy connection is read every poll (`spin.rs`); else,
        // data came: read it directly where that is safe (`direct.rs`),
        // and enter at the next poll instead of now.
        let spun = self.spin.is_some() && self.spin_poll(st, sink);
        let direct = !spun && taskrun && !overflow && self.try_direct(st, sink, n);
        // Spinning may have re-armed a RECV: submit it now.
        let n = if spun { self.ring.queued() } else { n };
        if !direct && (n > 0 || taskrun || overflow) {
            self.owed = 0;
            match self.ring.enter(n, 0, ENTER_GETEVENTS) {
                Ok(()) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) => {}
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    return Err(io_err(
                        "io_uring_enter: the ring is driven from a thread other than the one \
                         that made it (thread level FUNNELED or lower promises one thread)",
                        e,
                    ))
                }
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
        if !st.closing.is_empty() {
            self.closing(st);
        }
        let n = std::mem::take(&mut st.events);
        Ok(n + st.report(sink))
    }

    /// Pushes what dirty sockets and the listener need.
    #[inline]
    fn arm_dirty(&mut self, st: &mut State) {
        // Redialed sockets are dirty: their CONNECT is pushed here.
        st.redial.clear();
        if !st.dirty.is_empty() {
            std::mem::swap(&mut st.dirty, &mut self.work);
            for i in 0..self.work.len() {
                let slot = self.work[i];
                self.arm(st, slot);
            }
            self.work.clear();
        }
        if !self.accept_armed {
            self.arm_accept();
        }
    }

    fn arm_accept(&mut self) {
        let fd = types::Fd(self.listener.as_raw_fd());
        let e = if self.ring.multishot_accept {
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

    /// Shuts down closing sockets and cancels their operations; releases
    /// those with none left in flight.
    fn closing(&mut self, st: &mut State) {
        std::mem::swap(&mut st.closing, &mut self.work);
        for i in 0..self.work.len() {
            let slot = self.work[i];
            let Some(s) = st.sock(slot) else { continue };
            if s.io == 0 {
                if s.fixed {
                    // The table holds the socket open: empty the entry
                    // before the descriptor closes.
                    s.fixed = false;
                    self.ring.set_file(slot, -1);
                }
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
                    (IO_MULTI, K_MULTI),
                    (IO_WATCH, K_WATCH),
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

    /// Before `peer` is disconnected: a single-shot RECV of one of its
    /// sockets that writes into a placement destination (the engine's
    /// memory, which it may free once the peer is forgotten) is cancelled,
    /// and its completion waited for. Other completions reaped meanwhile
    /// are handled by the next poll. A multishot RECV never writes into
    /// the engine's memory.
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
        if let Some(i) = self.deferred.iter().position(|d| d.0 == target) {
            self.deferred.remove(i);
            return;
        }
        let cancel = opcode::AsyncCancel::new(target)
            .build()
            .user_data((target & !0xFF) | K_CANCEL);
        // SAFETY: a cancel carries no pointers.
        unsafe { self.push(&cancel) };
        // The kernel completes every request, a cancelled one at once.
        self.wait_for(target);
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
                if let Some(b) = self.bufs.take() {
                    let _ = self.ring.ring.submitter().unregister_buf_ring(bufs::GROUP);
                    drop(b);
                }
                return;
            }
            if Instant::now() > deadline {
                break;
            }
            let n = self.ring.queued();
            let _ = self.ring.enter(n, 0, ENTER_GETEVENTS);
            self.reap(st, &mut NoSink);
            std::thread::sleep(Duration::from_millis(1));
        }
        st.leak();
        std::mem::forget(self.bufs.take());
    }
}
