//! The message protocols: eager, rendezvous (single-copy read or piecewise
//! copy), synchronous-send acknowledgement, and send cancellation.
//!
//! Receive side (`State::deliver`), by header kind:
//! - `Eager`: match or store as unexpected; `FLAG_SYNC` asks for an `Ack`
//!   once matched.
//! - `Rts`: match or store. Once matched the receiver reads the sender's
//!   buffer with `process_vm_readv` and answers `Ack`, or, where single copy
//!   is off or refused, answers `Cts` and the sender streams `Data` pieces.
//! - `CancelReq`: withdraw the message if it is still unexpected; answer
//!   `CancelAck` either way.
//!
//! Peers name requests by the handles they were sent (`sreq`, `aux`); a
//! handle that no longer names a live request of the right kind is ignored,
//! and a malformed message fails the engine with a message, never a panic.

use crate::core::{bytes, Core, State, Unexpected};
use crate::error::Result;
use crate::matching::Envelope;
use crate::pg::{CmaState, Outgoing, Route};
use crate::shm::cma;
use crate::status::{MsgError, Status};
use crate::table::{Op, RecvOp, RecvPhase, Req, SendOp};
use crate::wire::{MsgKind, WireHeader, FLAG_CANCELLED, FLAG_SYNC};

fn control(kind: MsgKind, context: u32, sreq: u64) -> WireHeader {
    WireHeader {
        kind: kind as u8,
        context,
        sreq,
        ..WireHeader::default()
    }
}

/// The rendezvous request carries the sender's pid (for the single-copy
/// read); it lives in a static so a queued request can point at it.
fn pid_bytes() -> &'static [u8; 4] {
    static PID: std::sync::OnceLock<[u8; 4]> = std::sync::OnceLock::new();
    PID.get_or_init(|| std::process::id().to_le_bytes())
}

fn truncation(sent: u64, capacity: usize) -> Option<MsgError> {
    (sent > capacity as u64).then_some(MsgError::Truncated {
        sent: sent as usize,
        capacity,
    })
}

impl State {
    /// Record the first failure; every later wait reports it.
    #[cold]
    pub fn fail(&mut self, why: String) {
        if self.fatal.is_none() {
            self.fatal = Some(why);
        }
    }

    /// Append to the VC's send queue (behind anything already queued).
    pub fn queue(&mut self, rank: u32, item: Outgoing) -> Result<()> {
        let vc = self.pg.vc(rank)?;
        vc.pending.push_back(item);
        if !vc.listed {
            vc.listed = true;
            self.pending_vcs.push(rank);
        }
        Ok(())
    }

    fn reply(&mut self, rank: u32, header: WireHeader) {
        let item = Outgoing::Msg {
            header,
            buf: std::ptr::null(),
            len: 0,
            done: 0,
        };
        if let Err(e) = self.queue(rank, item) {
            self.fail(format!("answering rank {rank}: {e}"));
        }
    }

    /// A request reached its end: mark it, and free it if nobody waits.
    pub fn complete(&mut self, id: u64) {
        if let Some(req) = self.requests.get_mut(id) {
            req.complete = true;
            if req.detached {
                self.requests.remove(id);
            }
        }
    }

    /// A send's bytes have all left (taken by a transport or read).
    pub fn transmitted(&mut self, id: u64) {
        if let Some(Req {
            op: Op::Send(s), ..
        }) = self.requests.get_mut(id)
        {
            s.transmitted = true;
            self.maybe_complete_send(id);
        }
    }

    fn maybe_complete_send(&mut self, id: u64) {
        if let Some(Req {
            op: Op::Send(s),
            complete: false,
            ..
        }) = self.requests.get(id)
        {
            if !s.cancel_pending && s.transmitted && (!s.needs_ack || s.acked) {
                self.complete(id);
            }
        }
    }

    /// One arrival from rank `from` (its VC), in that peer's send order.
    pub fn deliver(&mut self, from: u32, h: &WireHeader, payload: &[u8]) {
        match h.kind() {
            Some(MsgKind::Eager) => self.on_eager(from, h, payload),
            Some(MsgKind::Rts) => self.on_rts(from, h, payload),
            Some(MsgKind::Cts) => self.on_cts(from, h),
            Some(MsgKind::Data) => self.on_data(from, h, payload),
            Some(MsgKind::Ack) => {
                if let Some(Req {
                    op: Op::Send(s), ..
                }) = self.requests.get_mut(h.sreq)
                {
                    s.acked = true;
                    s.transmitted = true;
                    self.maybe_complete_send(h.sreq);
                }
            }
            Some(MsgKind::CancelReq) => {
                let found = self
                    .matcher
                    .remove_unexpected(h.context, |_, m| m.origin() == (from, h.sreq))
                    .is_some();
                let mut answer = control(MsgKind::CancelAck, h.context, h.sreq);
                if found {
                    answer.flags = FLAG_CANCELLED;
                }
                self.reply(from, answer);
            }
            Some(MsgKind::CancelAck) => self.on_cancel_ack(h),
            None => self.fail(format!(
                "rank {from} sent a message of unknown kind {}",
                h.kind
            )),
        }
    }

    #[inline]
    fn on_eager(&mut self, from: u32, h: &WireHeader, payload: &[u8]) {
        let env = Envelope {
            context: h.context,
            source: h.src,
            tag: h.tag,
        };
        let sync = h.flags & FLAG_SYNC != 0;
        match self.matcher.match_posted(env) {
            Some(rreq) => {
                self.finish_eager_recv(rreq, env, payload);
                if sync {
                    self.reply(from, control(MsgKind::Ack, h.context, h.sreq));
                }
            }
            None => self.matcher.push_unexpected(
                env,
                Unexpected::Eager {
                    data: payload.to_vec(),
                    sreq: h.sreq,
                    sync,
                    vc: from,
                },
            ),
        }
    }

    #[inline]
    fn finish_eager_recv(&mut self, rreq: u64, env: Envelope, data: &[u8]) {
        let Some(req) = self.requests.get_mut(rreq) else {
            return;
        };
        let Op::Recv(r) = &mut req.op else {
            return;
        };
        let n = data.len().min(r.cap);
        if n > 0 {
            // SAFETY: the receive owns `buf..buf+cap` until it completes
            // (API contract), `n <= cap`, and shared memory or a heap copy
            // cannot overlap a user buffer.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), r.buf, n) };
        }
        r.phase = RecvPhase::Done;
        req.status = Status {
            source: env.source as i32,
            tag: env.tag,
            count: n,
            cancelled: false,
            error: truncation(data.len() as u64, r.cap),
        };
        self.complete(rreq);
    }

    fn on_rts(&mut self, from: u32, h: &WireHeader, payload: &[u8]) {
        let Some(pid) = payload
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        else {
            return self.fail(format!(
                "rank {from} sent a rendezvous request without its pid"
            ));
        };
        let env = Envelope {
            context: h.context,
            source: h.src,
            tag: h.tag,
        };
        let rts = Unexpected::Rts {
            len: h.len,
            addr: h.aux,
            pid,
            sreq: h.sreq,
            vc: from,
        };
        match self.matcher.match_posted(env) {
            Some(rreq) => self.start_rendezvous_recv(rreq, env, rts),
            None => self.matcher.push_unexpected(env, rts),
        }
    }

    /// A receive matched a rendezvous request: pull the data.
    fn start_rendezvous_recv(&mut self, rreq: u64, env: Envelope, rts: Unexpected) {
        let Unexpected::Rts {
            len,
            addr,
            pid,
            sreq,
            vc: from,
        } = rts
        else {
            return;
        };
        let Some(req) = self.requests.get_mut(rreq) else {
            return;
        };
        let Op::Recv(r) = &mut req.op else {
            return;
        };
        let want = (len as usize).min(r.cap);
        let buf = r.buf;
        req.status = Status {
            source: env.source as i32,
            tag: env.tag,
            count: want,
            cancelled: false,
            error: truncation(len, r.cap),
        };
        if self.cma_allowed && want > 0 {
            if let Ok(vc) = self.pg.vc(from) {
                if vc.cma != CmaState::Refused && matches!(vc.route, Route::Shm(_)) {
                    // SAFETY: the receive owns `buf..buf+cap`, want <= cap.
                    let dst = unsafe { std::slice::from_raw_parts_mut(buf, want) };
                    match cma::read(pid, addr, dst) {
                        Ok(()) => {
                            vc.cma = CmaState::Works;
                            self.set_recv_phase(rreq, RecvPhase::Done);
                            self.complete(rreq);
                            self.reply(from, control(MsgKind::Ack, env.context, sreq));
                            return;
                        }
                        // Refused (ptrace rules, seccomp): copy from now on.
                        Err(_) => vc.cma = CmaState::Refused,
                    }
                }
            }
        }
        let mut cts = control(MsgKind::Cts, env.context, sreq);
        cts.aux = rreq;
        cts.len = want as u64;
        if want == 0 {
            self.set_recv_phase(rreq, RecvPhase::Done);
            self.complete(rreq);
        } else {
            self.set_recv_phase(
                rreq,
                RecvPhase::Streaming {
                    total: want as u64,
                    received: 0,
                },
            );
        }
        self.reply(from, cts);
    }

    fn set_recv_phase(&mut self, rreq: u64, phase: RecvPhase) {
        if let Some(Req {
            op: Op::Recv(r), ..
        }) = self.requests.get_mut(rreq)
        {
            r.phase = phase;
        }
    }

    /// The receiver matched our rendezvous request and wants `h.len` bytes
    /// streamed as `Data` pieces for its request `h.aux`.
    fn on_cts(&mut self, from: u32, h: &WireHeader) {
        let piece = self.shm_piece;
        let Some(Req {
            op: Op::Send(s), ..
        }) = self.requests.get_mut(h.sreq)
        else {
            return;
        };
        s.acked = true;
        let want = (h.len as usize).min(s.len);
        if want == 0 {
            return self.transmitted(h.sreq);
        }
        let header = WireHeader {
            kind: MsgKind::Data as u8,
            context: s.context,
            tag: s.tag,
            sreq: h.sreq,
            aux: h.aux,
            ..WireHeader::default()
        };
        let stream = Outgoing::Stream {
            header,
            buf: s.buf,
            len: want,
            offset: 0,
            piece,
            sreq: h.sreq,
        };
        if let Err(e) = self.queue(from, stream) {
            self.fail(format!("streaming to rank {from}: {e}"));
        }
    }

    fn on_data(&mut self, from: u32, h: &WireHeader, payload: &[u8]) {
        let rreq = h.aux;
        let Some(Req {
            op: Op::Recv(r), ..
        }) = self.requests.get_mut(rreq)
        else {
            return;
        };
        let RecvPhase::Streaming { total, received } = r.phase else {
            return;
        };
        let offset = h.len;
        let end = offset.checked_add(payload.len() as u64);
        if end.is_none_or(|end| end > total) {
            return self.fail(format!(
                "rank {from} sent {} bytes at offset {offset} of a {total}-byte message",
                payload.len()
            ));
        }
        // SAFETY: offset + len <= total <= cap, checked above; the receive
        // owns its buffer until it completes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                r.buf.add(offset as usize),
                payload.len(),
            )
        };
        let received = received + payload.len() as u64;
        if received >= total {
            r.phase = RecvPhase::Done;
            self.complete(rreq);
        } else {
            r.phase = RecvPhase::Streaming { total, received };
        }
    }

    fn on_cancel_ack(&mut self, h: &WireHeader) {
        let Some(req) = self.requests.get_mut(h.sreq) else {
            return;
        };
        let Op::Send(s) = &mut req.op else {
            return;
        };
        s.cancel_pending = false;
        if h.flags & FLAG_CANCELLED != 0 {
            req.status.cancelled = true;
            self.complete(h.sreq);
        } else {
            self.maybe_complete_send(h.sreq);
        }
    }
}

/// A send that fits the eager path, as the API hands it to `Core`.
pub struct SendArgs {
    pub context: u32,
    /// The sender's rank in the communicator.
    pub src: u32,
    pub buf: *const u8,
    pub len: usize,
    pub dest: u32,
    pub tag: i32,
    pub sync: bool,
}

impl Core {
    /// The route to `dest`, its eager limit, and whether sends to it queue.
    #[inline]
    fn route_of(&mut self, dest: u32) -> Result<(Route, usize, bool)> {
        let vc = self.st.pg.vc(dest)?;
        let limit = match vc.route {
            Route::Loopback => usize::MAX,
            Route::Shm(_) => self.st.shm_eager_max,
            Route::Netmod(_) => 0,
        };
        Ok((vc.route, limit, !vc.pending.is_empty()))
    }

    /// Fast path of every standard send: an eager message that goes out
    /// right now needs no request at all. `Ok(false)`: take `start_send`.
    #[inline]
    pub fn try_send_now(&mut self, a: &SendArgs) -> Result<bool> {
        let (route, limit, queued) = self.route_of(a.dest)?;
        if a.sync || a.len > limit || queued {
            return Ok(false);
        }
        let header = WireHeader {
            kind: MsgKind::Eager as u8,
            context: a.context,
            tag: a.tag,
            src: a.src,
            len: a.len as u64,
            ..WireHeader::default()
        };
        // SAFETY: the blocking caller's buffer, valid for this call.
        let payload = unsafe { bytes(a.buf, a.len) };
        self.transmit(route, a.dest, &header, payload)
    }

    /// Start a send; the handle of its request.
    pub fn start_send(&mut self, a: &SendArgs) -> Result<u64> {
        let (route, limit, _) = self.route_of(a.dest)?;
        if matches!(route, Route::Netmod(_)) {
            return Err(crate::error::Error::NoRoute(a.dest));
        }
        let eager = a.len <= limit;
        let id = self.st.requests.insert(Req {
            op: Op::Send(SendOp {
                vc: a.dest,
                buf: a.buf,
                len: a.len,
                context: a.context,
                tag: a.tag,
                needs_ack: a.sync || !eager,
                transmitted: false,
                acked: false,
                cancel_pending: false,
            }),
            status: Status::default(),
            complete: false,
            detached: false,
        });
        let mut header = WireHeader {
            kind: MsgKind::Eager as u8,
            flags: if a.sync { FLAG_SYNC } else { 0 },
            context: a.context,
            tag: a.tag,
            src: a.src,
            len: a.len as u64,
            sreq: id,
            aux: 0,
            reserved: 0,
        };
        let item = if eager {
            Outgoing::Msg {
                header,
                buf: a.buf,
                len: a.len,
                done: id,
            }
        } else {
            header.kind = MsgKind::Rts as u8;
            header.aux = a.buf as u64;
            Outgoing::Msg {
                header,
                buf: pid_bytes().as_ptr(),
                len: 4,
                done: 0,
            }
        };
        let sent = self.send_or_queue(a.dest, item);
        match sent {
            Ok(true) if eager => self.st.transmitted(id),
            Ok(_) => {}
            Err(e) => {
                self.st.requests.remove(id);
                return Err(e);
            }
        }
        Ok(id)
    }

    /// Post a receive; the handle of its request.
    pub fn start_recv(
        &mut self,
        context: u32,
        buf: *mut u8,
        cap: usize,
        source: i32,
        tag: i32,
    ) -> u64 {
        let id = self.st.requests.insert(Req {
            op: Op::Recv(RecvOp {
                buf,
                cap,
                phase: RecvPhase::Posted,
            }),
            status: Status::default(),
            complete: false,
            detached: false,
        });
        if let Some((env, msg)) = self.st.matcher.post(context, source, tag, id) {
            match msg {
                Unexpected::Eager {
                    data,
                    sreq,
                    sync,
                    vc,
                } => {
                    self.st.finish_eager_recv(id, env, &data);
                    if sync {
                        self.st.reply(vc, control(MsgKind::Ack, env.context, sreq));
                    }
                }
                rts @ Unexpected::Rts { .. } => self.st.start_rendezvous_recv(id, env, rts),
            }
        }
        id
    }

    /// Ask to cancel request `id` (see `Request::cancel`).
    pub fn cancel(&mut self, id: u64) -> Result<()> {
        let Some(req) = self.st.requests.get_mut(id) else {
            return Ok(());
        };
        match &mut req.op {
            Op::Recv(r) => {
                if r.phase == RecvPhase::Posted && self.st.matcher.cancel_posted(id) {
                    r.phase = RecvPhase::Done;
                    req.status.cancelled = true;
                    self.st.complete(id);
                }
            }
            Op::Send(s) => {
                if s.acked || s.cancel_pending || req.status.cancelled {
                    return Ok(());
                }
                s.cancel_pending = true;
                req.complete = false;
                let (vc, context) = (s.vc, s.context);
                let item = Outgoing::Msg {
                    header: control(MsgKind::CancelReq, context, id),
                    buf: std::ptr::null(),
                    len: 0,
                    done: 0,
                };
                self.send_or_queue(vc, item)?;
            }
        }
        Ok(())
    }

    /// Stop touching the buffers of these requests and free them (a scope
    /// unwinding from a panic): receives are withdrawn, queued sends dropped.
    pub fn abandon(&mut self, ids: &[u64]) {
        for &id in ids {
            let Some(req) = self.st.requests.get_mut(id) else {
                continue;
            };
            match &mut req.op {
                Op::Recv(r) => {
                    if r.phase == RecvPhase::Posted {
                        self.st.matcher.cancel_posted(id);
                    }
                    r.phase = RecvPhase::Done;
                }
                Op::Send(s) => {
                    let vc = s.vc;
                    if let Ok(vc) = self.st.pg.vc(vc) {
                        vc.pending.retain(|item| item.request() != id);
                    }
                }
            }
            self.st.requests.remove(id);
        }
    }
}
