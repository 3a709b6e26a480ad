//! Posting operations: sends (eager at once where the transport takes
//! them, else a request: eager queued, or a rendezvous request), receives
//! (matched against what already arrived), cancel and abandon. What
//! arrives afterwards is `state/protocol.rs`'s.

use crate::core::Core;
use crate::error::Result;
use crate::pg::{Outgoing, VcId};
use crate::route::Route;
use crate::state::bytes;
use crate::status::Status;
use crate::table::{Op, RecvOp, RecvPhase, Req, SendOp};
use crate::wire::{control, MsgKind, WireHeader, FLAG_RMA_KEY, FLAG_SYNC};

/// The rendezvous request carries the sender's pid (the wire format has
/// it); it lives in a static so a queued request can point at it. The
/// receiver does not use it: a single-copy read takes the pid the sender's
/// slot in the node segment has (`ShmLink::pids`), which a peer cannot
/// forge to make us read a third process's memory.
fn pid_bytes() -> &'static [u8; 4] {
    static PID: std::sync::OnceLock<[u8; 4]> = std::sync::OnceLock::new();
    PID.get_or_init(|| std::process::id().to_le_bytes())
}

/// A send that fits the eager path, as the API hands it to `Core`.
pub struct SendArgs {
    pub context: u32,
    /// The sender's rank in the communicator.
    pub src: u32,
    pub buf: *const u8,
    pub len: usize,
    /// The receiver's VC.
    pub dest: VcId,
    pub tag: i32,
    pub sync: bool,
}

impl Core {
    /// Fast path of every standard send: an eager message that goes out
    /// right now needs no request at all. `Ok(false)`: take `start_send`.
    #[inline]
    pub fn try_send_now(&mut self, a: &SendArgs) -> Result<bool> {
        let (route, limit, queued) = self.st.send_route(a.dest)?;
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
        let sent = self.transmit(route, a.dest, &header, payload)?;
        if sent {
            self.st.spend_credit(route, a.dest, a.len);
        }
        Ok(sent)
    }

    /// Start a send; the handle of its request.
    pub fn start_send(&mut self, a: &SendArgs) -> Result<u64> {
        let (route, limit, _) = self.st.send_route(a.dest)?;
        let eager = a.len <= limit;
        if eager {
            self.st.spend_credit(route, a.dest, a.len);
        }
        let id = self.st.requests.insert(Req {
            op: Op::Send(SendOp::new(
                a.dest, a.buf, a.len, a.context, a.tag, eager, a.sync,
            )),
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
            let key = match (route, self.tx.net.as_mut()) {
                (Route::Netmod(_), Some(net)) => net.register(a.buf, a.len),
                _ => None,
            };
            match key {
                Some(key) => {
                    if let Some(Req {
                        op: Op::Send(s), ..
                    }) = self.st.requests.get_mut(id)
                    {
                        s.rma_key = Some(key);
                    }
                    header.flags |= FLAG_RMA_KEY;
                    let mut data = Vec::with_capacity(12);
                    data.extend_from_slice(pid_bytes());
                    data.extend_from_slice(&key.to_le_bytes());
                    Outgoing::Owned { header, data }
                }
                None => Outgoing::Msg {
                    header,
                    buf: pid_bytes().as_ptr(),
                    len: 4,
                    done: 0,
                },
            }
        };
        let sent = self.send_or_queue(a.dest, item);
        match sent {
            Ok(true) if eager => self.st.transmitted(id),
            Ok(_) => {}
            Err(e) => {
                if let Some(Req {
                    op: Op::Send(s), ..
                }) = self.st.requests.remove(id)
                {
                    if let Some(key) = s.rma_key {
                        self.st.release_key(key);
                    }
                }
                return Err(e);
            }
        }
        Ok(id)
    }

    /// Post a receive; the handle of its request. Inline into
    /// `Inner::start_recv`, its one caller on the hot path: a call with
    /// seven arguments costs more than its body's branches.
    #[inline]
    pub fn start_recv(
        &mut self,
        context: u32,
        buf: *mut u8,
        cap: usize,
        source: i32,
        source_vc: Option<VcId>,
        tag: i32,
    ) -> u64 {
        let id = self.st.requests.insert(Req {
            op: Op::Recv(RecvOp {
                buf,
                cap,
                source,
                source_vc,
                phase: RecvPhase::Posted,
            }),
            status: Status::default(),
            complete: false,
            detached: false,
        });
        if let Some((env, msg)) = self.st.matcher.post(context, source, tag, id) {
            self.st.receive_matched(id, env, msg);
        }
        // Nothing more comes from a failed peer: fail now rather than wait.
        if let Some(vc) = source_vc {
            if self.st.has_failed(vc) && self.st.requests.get(id).is_some_and(|r| !r.complete) {
                self.st.fail_request(id, vc);
            }
        }
        id
    }

    /// Take the earliest message matching the pattern out of matching
    /// (a matched probe): its handle and envelope, with its length.
    pub fn take_matching(&mut self, context: u32, source: i32, tag: i32) -> Option<(u64, Status)> {
        let (env, msg) = self.st.matcher.take(context, source, tag)?;
        let status = Status {
            source: env.source as i32,
            tag: env.tag,
            count: msg.len(),
            cancelled: false,
            error: None,
        };
        Some((self.st.hold(env, msg), status))
    }

    /// Receive the message a matched probe took (`key`) into `buf`: the
    /// receive's handle. An unknown key gives a receive that completes at
    /// once with nothing.
    pub fn receive_held(&mut self, key: u64, buf: *mut u8, cap: usize) -> u64 {
        let held = self.st.take_held(key);
        let (source, vc) = match &held {
            Some((env, msg)) => (env.source as i32, Some(msg.origin().0)),
            None => (crate::ANY_SOURCE, None),
        };
        let id = self.st.requests.insert(Req {
            op: Op::Recv(RecvOp {
                buf,
                cap,
                source,
                source_vc: vc,
                phase: RecvPhase::Posted,
            }),
            status: Status::default(),
            complete: false,
            detached: false,
        });
        match held {
            Some((env, msg)) => self.st.receive_matched(id, env, msg),
            None => {
                self.st.set_recv_phase(id, RecvPhase::Done);
                self.st.complete(id);
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
                if !s.start_cancel() {
                    return Ok(());
                }
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
                    // Now, not at the next progress: the buffer is released
                    // next, and the netmod's poll may serve a peer's read
                    // of it before `rma_progress` would deregister it.
                    if let Some(key) = s.rma_key.take() {
                        if !self.tx.net.as_mut().is_some_and(|n| n.deregister(key)) {
                            self.st.release_key(key);
                        }
                    }
                    if let Ok(vc) = self.st.pgs.vc(vc) {
                        vc.pending.retain(|item| item.request() != id);
                    }
                }
            }
            self.st.requests.remove(id);
        }
    }
}
