//! The request side of the protocol state: posting receives and sends,
//! matched probes, cancel and withdrawal, and what waits take of a
//! finished request. The transports' part of posting (sending now or
//! queueing, registering a buffer) is `post.rs`'s.

use crate::pg::VcId;
use crate::state::{State, Unexpected};
use crate::status::Status;
use crate::table::{Op, RecvOp, RecvPhase, Req, SendOp};

/// A receive of `cap` bytes into `buf`, not matched yet.
#[inline(always)]
fn posted_recv(buf: *mut u8, cap: usize, source: i32, source_vc: Option<VcId>) -> Req {
    Req {
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
    }
}

/// The status a probe reports for message `msg` under `env`.
fn probed(env: &crate::matching::Envelope, msg: &Unexpected) -> Status {
    Status {
        source: env.source as i32,
        tag: env.tag,
        count: msg.len(),
        cancelled: false,
        error: None,
    }
}

impl State {
    /// Post a receive: match it against what already arrived (finishing it
    /// or starting its rendezvous), else queue it; its handle. Inline: the
    /// hot path of every receive (`Core::start_recv`).
    #[inline]
    pub fn post_recv(
        &mut self,
        context: u32,
        buf: *mut u8,
        cap: usize,
        source: i32,
        source_vc: Option<VcId>,
        tag: i32,
    ) -> u64 {
        let id = self
            .requests
            .insert(posted_recv(buf, cap, source, source_vc));
        if let Some((env, msg)) = self.matcher.post(context, source, tag, id) {
            self.receive_matched(id, env, msg);
        }
        // Nothing more comes from a failed peer: fail now rather than wait.
        if let Some(vc) = source_vc {
            if self.has_failed(vc) && self.requests.get(id).is_some_and(|r| !r.complete) {
                self.fail_request(id, vc);
            }
        }
        id
    }

    /// A send request for `op`, before anything of it goes out; its handle.
    #[inline]
    pub fn post_send(&mut self, op: SendOp) -> u64 {
        self.requests.insert(Req {
            op: Op::Send(op),
            status: Status::default(),
            complete: false,
            detached: false,
        })
    }

    /// Send `id`'s buffer is registered with the netmod under `key` for
    /// the receiver's read; released when the send completes.
    pub fn send_registered(&mut self, id: u64, key: u64) {
        if let Some(Req {
            op: Op::Send(s), ..
        }) = self.requests.get_mut(id)
        {
            s.rma_key = Some(key);
        }
    }

    /// Send `id` could not start (nothing of it went out): forget it, and
    /// release its registration.
    pub fn unpost_send(&mut self, id: u64) {
        if let Some(Req {
            op: Op::Send(s), ..
        }) = self.requests.remove(id)
        {
            if let Some(key) = s.rma_key {
                self.release_key(key);
            }
        }
    }

    /// The earliest arrived message matching the pattern, if any, and its
    /// envelope (a probe; the message stays).
    pub fn probe(&self, context: u32, source: i32, tag: i32) -> Option<Status> {
        self.matcher
            .probe(context, source, tag)
            .map(|(env, m)| probed(&env, m))
    }

    /// Take the earliest message matching the pattern out of matching
    /// (a matched probe): its handle and envelope, with its length.
    pub fn take_matching(&mut self, context: u32, source: i32, tag: i32) -> Option<(u64, Status)> {
        let (env, msg) = self.matcher.take(context, source, tag)?;
        let status = probed(&env, &msg);
        Some((self.hold(env, msg), status))
    }

    /// Receive the message a matched probe took (`key`) into `buf`: the
    /// receive's handle. An unknown key gives a receive that completes at
    /// once with nothing.
    pub fn receive_held(&mut self, key: u64, buf: *mut u8, cap: usize) -> u64 {
        let held = self.take_held(key);
        let (source, vc) = match &held {
            Some((env, msg)) => (env.source as i32, Some(msg.origin().0)),
            None => (crate::ANY_SOURCE, None),
        };
        let id = self.requests.insert(posted_recv(buf, cap, source, vc));
        match held {
            Some((env, msg)) => self.receive_matched(id, env, msg),
            None => {
                self.set_recv_phase(id, RecvPhase::Done);
                self.complete(id);
            }
        }
        id
    }

    /// Cancel request `id` (see `Request::cancel`): a receive not matched
    /// yet is withdrawn and completes cancelled; a send that may still be
    /// withdrawn at its receiver waits for the answer to a `CancelReq`,
    /// whose VC and context are returned for the caller to send it.
    pub fn start_cancel(&mut self, id: u64) -> Option<(VcId, u32)> {
        let req = self.requests.get_mut(id)?;
        match &mut req.op {
            Op::Recv(r) => {
                if r.phase == RecvPhase::Posted && self.matcher.cancel_posted(id) {
                    r.phase = RecvPhase::Done;
                    req.status.cancelled = true;
                    self.complete(id);
                }
                None
            }
            Op::Send(s) => {
                if !s.start_cancel() {
                    return None;
                }
                req.complete = false;
                Some((s.vc, s.context))
            }
        }
    }

    /// Forget request `id`, whose buffer is about to be released (see
    /// `Core::abandon`): a receive leaves matching, a send's queued
    /// messages leave its VC's queue. A send's registration key is handed
    /// back, for the caller to deregister now.
    pub fn withdraw(&mut self, id: u64) -> Option<u64> {
        let req = self.requests.get_mut(id)?;
        let mut key = None;
        match &mut req.op {
            Op::Recv(r) => {
                if r.phase == RecvPhase::Posted {
                    self.matcher.cancel_posted(id);
                }
                r.phase = RecvPhase::Done;
            }
            Op::Send(s) => {
                key = s.rma_key.take();
                let vc = s.vc;
                if let Ok(vc) = self.pgs.vc(vc) {
                    vc.pending.retain(|item| item.request() != id);
                }
            }
        }
        self.requests.remove(id);
        key
    }

    /// The status if `id` is complete (freeing it); a freed handle counts
    /// as complete with an empty status. The hot path of every wait.
    #[inline]
    pub fn take_if_complete(&mut self, id: u64) -> Option<Status> {
        self.requests.take_if_complete(id)
    }

    /// Nobody will wait for `id`: free it now if complete, else on
    /// completion.
    pub fn detach(&mut self, id: u64) {
        if let Some(req) = self.requests.get_mut(id) {
            if req.complete {
                self.requests.remove(id);
            } else {
                req.detached = true;
            }
        }
    }

    /// Whether a send has not finished yet (finalize waits for none).
    pub fn sends_in_flight(&self) -> bool {
        self.requests
            .any(|r| !r.complete && matches!(r.op, Op::Send(_)))
    }

    /// Requests in flight (for diagnostics).
    pub fn requests_live(&self) -> usize {
        self.requests.live()
    }
}
