//! Posting and reaping: sends (injected, or from a copy the operation
//! owns), the generic receives, payload receives into the engine's memory,
//! and the completion queue, whose entries go to the connection state.
//! Everything here runs inside `try_send`, `poll`, `disconnect` or the RMA
//! calls; nothing runs on its own.
//!
//! # Stopping a receive into the engine's memory
//! `disconnect` and a peer's failure must leave the engine's placement
//! memory alone once they return. A payload receive into it is cancelled
//! (`fi_cancel`) and its completion awaited, progressing the queue and
//! keeping every other completion for the next `poll`. A receive the
//! provider had already matched finishes first (it needs the sender's
//! progress for some protocols); if that takes longer than the timeout it
//! is counted in `describe` ("placements not stopped in time").

use std::mem::MaybeUninit;
use std::ptr;
use std::time::{Duration, Instant};

use libc::c_void;

use crate::{NetmodError, PeerId, Sink};

use super::card;
use super::fid::{strerror, FiError, Mr};
use super::ops::{Dest, OpKind};
use super::order::Arrival;
use super::pool::PageBuf;
use super::state::{Handshake, HelloOutcome, Tx};
use super::sys::*;
use super::wire::{self, *};
use super::OfiNetmod;

/// A peer takes more messages only while its queued and in-flight bytes
/// (sends posted from our copies, not completed) are below this; with
/// neither, it always takes one, whatever its size. Bounds what a
/// provider that accepts sends without limit (rendezvous) makes us copy.
const QUEUE_CAP: usize = 4 << 20;
/// Completions read per `fi_cq_read`, and at most per `poll`.
const BATCH: usize = 16;
const MAX_PER_POLL: usize = 256;
/// Spare send buffers kept.
const POOL_MAX: usize = 64;

/// A completion read from the queue.
pub(crate) enum Completion {
    Done(fi_cq_tagged_entry),
    Failed {
        ctx: *mut c_void,
        err: i32,
        why: String,
    },
}

impl Completion {
    fn ctx(&self) -> *mut c_void {
        match self {
            Completion::Done(e) => e.op_context,
            Completion::Failed { ctx, .. } => *ctx,
        }
    }
}

/// A VERDICT refusing a HELLO, to post when the provider takes it.
pub(crate) struct Refusal {
    addr: fi_addr_t,
    tag: u64,
    body: [u8; VERDICT_LEN],
    since: Instant,
}

enum PostErr {
    /// The provider is full for now; the bytes come back.
    Again(Vec<u8>),
    Failed(FiError),
}

/// What became of a message handed to the provider.
enum Step {
    Done,
    /// Nothing (more) was posted: `Tx::Payload` if its LARGE went out.
    Again(Tx),
    Failed(String),
}

fn again(r: isize) -> bool {
    r == -(FI_EAGAIN as isize)
}

impl OfiNetmod {
    fn buf(&mut self, len: usize) -> Vec<u8> {
        if len <= self.slot {
            if let Some(b) = self.pool.pop() {
                return b;
            }
            return Vec::with_capacity(self.slot);
        }
        Vec::with_capacity(len)
    }

    fn recycle(&mut self, mut b: Vec<u8>) {
        if b.capacity() >= self.slot && b.capacity() <= 2 * self.slot && self.pool.len() < POOL_MAX
        {
            b.clear();
            self.pool.push(b);
        }
    }

    pub(super) fn take_key(&mut self) -> u64 {
        let k = self.next_key;
        self.next_key += 1;
        k
    }

    /// A registration of `p..p+len` for a local operation where the
    /// provider requires one (`FI_MR_LOCAL`), else `None`.
    pub(super) fn local_mr(
        &mut self,
        p: *const u8,
        len: usize,
        access: u64,
    ) -> Result<Option<Mr>, FiError> {
        if !self.chosen.mr_local || len == 0 {
            return Ok(None);
        }
        let key = self.take_key();
        // SAFETY: the memory belongs to the operation the region is made
        // for (or is the engine's, valid until that operation completes);
        // the region is stored in the operation and closes with it.
        let mr = unsafe { self.base.domain.register(p, len, access, key)? };
        if self.chosen.mr_mode & FI_MR_ENDPOINT != 0 {
            mr.bind_enable(&self.ep)?;
        }
        Ok(Some(mr))
    }

    /// Adds and posts one generic receive buffer.
    pub(super) fn add_generic_recv(&mut self) -> Result<(), FiError> {
        let buf = PageBuf::new(self.slot).map_err(|e| FiError {
            code: e.raw_os_error().unwrap_or(libc::ENOMEM),
            what: "mmap of a receive buffer",
        })?;
        let mr = self.local_mr(buf.as_ptr(), buf.len(), FI_RECV)?;
        let ctx = self.ops.add(OpKind::Recv { buf }, mr);
        self.generic += 1;
        self.post_rx(ctx)
    }

    /// Posts the receive operation `ctx`; if the provider says "again" it
    /// is kept for the next poll. On an error the operation is dropped.
    fn post_rx(&mut self, ctx: *mut c_void) -> Result<(), FiError> {
        let Some(op) = self.ops.get_mut(ctx) else {
            return Ok(());
        };
        let desc = op.mr.as_ref().map_or(ptr::null_mut(), |m| m.desc());
        let (p, len, tag, ignore) = match &mut op.kind {
            OpKind::Recv { buf } => (buf.as_mut_ptr(), buf.len(), ANY_TAG, ANY_IGNORE),
            OpKind::Payload { dst, len, tag, .. } => {
                let p = match dst {
                    Dest::Engine(p) => p.as_ptr(),
                    Dest::Own(v) => v.as_mut_ptr(),
                };
                (p, *len, *tag, 0)
            }
            OpKind::Drain { buf, tag } => (buf.as_mut_ptr(), buf.len(), *tag, 0),
            _ => return Ok(()),
        };
        // SAFETY: the buffer is the operation's own, or the engine's
        // placement memory, which stays valid until this receive completes
        // (delivery, or `quiesce` stops it first); the context lives until
        // its completion is read.
        let r = unsafe {
            fi_trecv(
                self.ep.raw(),
                p.cast(),
                len,
                desc,
                FI_ADDR_UNSPEC,
                tag,
                ignore,
                ctx,
            )
        };
        self.posted(r, ctx, "fi_trecv")
    }

    /// The outcome of posting `ctx`: done, kept in `unposted` for the next
    /// poll on "again", or dropped with the error.
    fn posted(&mut self, r: isize, ctx: *mut c_void, what: &'static str) -> Result<(), FiError> {
        if r == 0 {
            return Ok(());
        }
        if again(r) {
            self.unposted.push(ctx as usize);
            return Ok(());
        }
        self.ops.take(ctx);
        Err(FiError {
            code: (-r) as i32,
            what,
        })
    }

    /// Posts the RMA read `ctx` (kept for later on "again").
    pub(super) fn post_read(&mut self, ctx: *mut c_void) -> Result<(), FiError> {
        let Some(op) = self.ops.get_mut(ctx) else {
            return Ok(());
        };
        let desc = op.mr.as_ref().map_or(ptr::null_mut(), |m| m.desc());
        let OpKind::Read {
            local,
            len,
            src,
            remote,
            key,
            ..
        } = op.kind
        else {
            return Ok(());
        };
        // SAFETY: `local..local+len` stays writable until the read
        // completes (`Rma::read` contract); the context lives until then.
        let r = unsafe {
            fi_read(
                self.ep.raw(),
                local.cast(),
                len,
                desc,
                src,
                remote,
                key,
                ctx,
            )
        };
        self.posted(r, ctx, "fi_read")
    }

    /// Sends `body[off..]` to `addr` with `tag`: injected if small, else
    /// from `body`, which the operation keeps until its completion.
    fn post_send(
        &mut self,
        conn: Option<u32>,
        addr: fi_addr_t,
        tag: u64,
        body: Vec<u8>,
        off: usize,
    ) -> Result<(), PostErr> {
        self.post_send_op(conn, addr, tag, body, off, false)
    }

    /// `post_send`; an `optional` operation is not counted by `idle`.
    fn post_send_op(
        &mut self,
        conn: Option<u32>,
        addr: fi_addr_t,
        tag: u64,
        body: Vec<u8>,
        off: usize,
        optional: bool,
    ) -> Result<(), PostErr> {
        let len = body.len() - off;
        if self.chosen.inject > 0 && len <= self.chosen.inject {
            // SAFETY: the bytes are readable; inject copies them before
            // returning.
            let r =
                unsafe { fi_tinject(self.ep.raw(), body[off..].as_ptr().cast(), len, addr, tag) };
            return match r {
                0 => {
                    self.recycle(body);
                    Ok(())
                }
                r if again(r) => Err(PostErr::Again(body)),
                r => Err(PostErr::Failed(FiError {
                    code: (-r) as i32,
                    what: "fi_tinject",
                })),
            };
        }
        let mr = self
            .local_mr(body.as_ptr(), body.len(), FI_SEND)
            .map_err(PostErr::Failed)?;
        let desc = mr.as_ref().map_or(ptr::null_mut(), |m| m.desc());
        // The heap bytes do not move when the vector moves into the op.
        // SAFETY: `off <= body.len()`.
        let p = unsafe { body.as_ptr().add(off) };
        let ctx = self.ops.add(
            OpKind::Send {
                conn,
                buf: body,
                optional,
            },
            mr,
        );
        // SAFETY: the bytes belong to the operation just added, which
        // lives until its completion is read.
        let r = unsafe { fi_tsend(self.ep.raw(), p.cast(), len, desc, addr, tag, ctx) };
        if r == 0 {
            if let Some(c) = conn.and_then(|id| self.st.conns.get_mut(&id)) {
                c.inflight += len + off;
            }
            return Ok(());
        }
        let body = match self.ops.take(ctx).map(|op| op.kind) {
            Some(OpKind::Send { buf, .. }) => buf,
            _ => Vec::new(),
        };
        if again(r) {
            Err(PostErr::Again(body))
        } else {
            Err(PostErr::Failed(FiError {
                code: (-r) as i32,
                what: "fi_tsend",
            }))
        }
    }

    /// Posts one queued message of the ready connection `id`.
    fn post_tx(&mut self, id: u32, tx: Tx) -> Step {
        let Some(c) = self.st.conns.get_mut(&id) else {
            return Step::Failed("connection gone".into());
        };
        // For the keepalive round: the peer was sent something.
        c.active |= !tx.keepalive();
        let (addr, to, inline, seq) = (c.addr, c.tx_id, c.remote_inline, c.seq);
        let failed = |e: FiError| Step::Failed(format!("send failed: {e}"));
        let next = |st: &mut super::state::State| {
            if let Some(c) = st.conns.get_mut(&id) {
                c.seq = next_seq(seq);
                c.credits = c.credits.saturating_sub(1);
            }
        };
        match tx {
            Tx::Verdict(v) => {
                let mut b = self.buf(v.len());
                b.extend_from_slice(&v);
                match self.post_send(Some(id), addr, tag(KIND_VERDICT, 0, to), b, 0) {
                    Ok(()) => Step::Done,
                    Err(PostErr::Again(b)) => {
                        self.recycle(b);
                        Step::Again(Tx::Verdict(v))
                    }
                    Err(PostErr::Failed(e)) => failed(e),
                }
            }
            Tx::Msg { hlen, body } if body.len() - PREFIX - hlen <= inline => {
                match self.post_send(Some(id), addr, tag(KIND_MSG, seq, to), body, 0) {
                    Ok(()) => {
                        next(&mut self.st);
                        Step::Done
                    }
                    Err(PostErr::Again(body)) => Step::Again(Tx::Msg { hlen, body }),
                    Err(PostErr::Failed(e)) => failed(e),
                }
            }
            Tx::Msg { hlen, body } => {
                let mut h = self.buf(PREFIX + hlen + LARGE_SUFFIX);
                h.extend_from_slice(&body[..PREFIX + hlen]);
                h.extend_from_slice(&encode_large_suffix(body.len() - PREFIX - hlen));
                match self.post_send(Some(id), addr, tag(KIND_LARGE, seq, to), h, 0) {
                    Ok(()) => {
                        next(&mut self.st);
                        // The payload waits for the receiver's CTS.
                        if let Some(c) = self.st.conns.get_mut(&id) {
                            c.inflight += body.len();
                            c.cts_since.get_or_insert_with(Instant::now);
                            c.awaiting.insert(seq, (hlen, body));
                        }
                        self.st.mark(id);
                        Step::Done
                    }
                    Err(PostErr::Again(h)) => {
                        self.recycle(h);
                        Step::Again(Tx::Msg { hlen, body })
                    }
                    Err(PostErr::Failed(e)) => failed(e),
                }
            }
            Tx::Cts(n) | Tx::Credit(n) => {
                let kind = if matches!(tx, Tx::Cts(_)) {
                    KIND_CTS
                } else {
                    KIND_CREDIT
                };
                let optional = kind == KIND_CREDIT;
                let t = tag(kind, n, to);
                match self.post_send_op(Some(id), addr, t, Vec::new(), 0, optional) {
                    Ok(()) => Step::Done,
                    Err(PostErr::Again(_)) => Step::Again(tx),
                    Err(PostErr::Failed(e)) => failed(e),
                }
            }
            Tx::Ping | Tx::Pong => {
                let aux = if matches!(tx, Tx::Ping) { PING } else { PONG };
                let t = tag(KIND_KEEPALIVE, aux, to);
                match self.post_send_op(Some(id), addr, t, Vec::new(), 0, true) {
                    Ok(()) => Step::Done,
                    Err(PostErr::Again(_)) => Step::Again(tx),
                    Err(PostErr::Failed(e)) => failed(e),
                }
            }
            Tx::Payload { seq, hlen, body } => {
                let off = PREFIX + hlen;
                match self.post_send(Some(id), addr, payload_tag(seq, to), body, off) {
                    Ok(()) => Step::Done,
                    Err(PostErr::Again(body)) => Step::Again(Tx::Payload { seq, hlen, body }),
                    Err(PostErr::Failed(e)) => failed(e),
                }
            }
        }
    }

    /// `try_send`.
    pub(super) fn send(
        &mut self,
        peer: PeerId,
        header: &[u8],
        payload: &[u8],
    ) -> Result<bool, NetmodError> {
        let err = |what: String| NetmodError::Peer { peer, what };
        if header.len() > MAX_HEADER || payload.len() > self.cfg.piece {
            return Err(err(format!(
                "message too large for ofi: header {} (max {MAX_HEADER}), payload {} (max {})",
                header.len(),
                payload.len(),
                self.cfg.piece
            )));
        }
        let Some(&id) = self.st.peers.get(&peer) else {
            return Err(err("not connected (no connect call)".into()));
        };
        let Some(c) = self.st.conns.get(&id) else {
            return Err(err("not connected".into()));
        };
        if let Some(why) = &c.failed {
            return Err(err(why.clone()));
        }
        let queue = !c.ready() || !c.out.is_empty() || c.credits == 0;
        if (c.inflight > 0 || !c.out.is_empty()) && c.out_bytes + c.inflight >= QUEUE_CAP {
            return self.refuse(id).map_err(err);
        }
        let lazy = c.hs == Handshake::Lazy;
        let mut body = self.buf(PREFIX + header.len() + payload.len());
        body.extend_from_slice(&prefix(header.len()));
        body.extend_from_slice(header);
        body.extend_from_slice(payload);
        let tx = Tx::Msg {
            hlen: header.len(),
            body,
        };
        if queue {
            if let Some(c) = self.st.conns.get_mut(&id) {
                c.push(tx);
            }
            self.st.mark(id);
            if lazy {
                self.start(id);
            }
            return Ok(true);
        }
        match self.post_tx(id, tx) {
            Step::Done => {
                if let Some(c) = self.st.conns.get_mut(&id) {
                    c.stalled = None;
                }
                Ok(true)
            }
            Step::Again(
                rest @ (Tx::Payload { .. } | Tx::Cts(_) | Tx::Credit(_) | Tx::Ping | Tx::Pong),
            ) => {
                if let Some(c) = self.st.conns.get_mut(&id) {
                    c.push(rest);
                }
                self.st.mark(id);
                Ok(true)
            }
            Step::Again(Tx::Msg { body, .. }) => {
                self.recycle(body);
                self.refuse(id).map_err(err)
            }
            Step::Again(Tx::Verdict(_)) => Ok(false),
            Step::Failed(why) => {
                self.fail_conn(id, why.clone());
                Err(err(why))
            }
        }
    }

    /// `try_send` cannot take a message for `id` now: `Ok(false)`, unless
    /// the peer has left us without progress for the timeout.
    fn refuse(&mut self, id: u32) -> Result<bool, String> {
        let now = Instant::now();
        let since = self
            .st
            .conns
            .get_mut(&id)
            .map_or(now, |c| *c.stalled.get_or_insert(now));
        if now - since > self.cfg.timeout {
            let why = stalled(self.cfg.timeout);
            self.fail_conn(id, why.clone());
            return Err(why);
        }
        Ok(false)
    }

    /// Starts the handshake of `id` (its first message, or `connect_port`).
    pub(super) fn start(&mut self, id: u32) {
        if let Some(c) = self.st.conns.get_mut(&id) {
            if c.hs == Handshake::Lazy {
                c.hs = Handshake::Pending {
                    since: Instant::now(),
                };
            }
        }
        self.try_hello(id);
        self.st.mark(id);
    }

    fn try_hello(&mut self, id: u32) {
        let Some(c) = self.st.conns.get(&id) else {
            return;
        };
        let Handshake::Pending { since } = c.hs else {
            return;
        };
        let (ident, who) = match c.port {
            Some(t) => (IDENT_PORT, t),
            None => (IDENT_RANK, self.st.me as u64),
        };
        // A rank of our own job is told the secret's proof.
        let target = match (c.port, c.peer.map(crate::split_peer)) {
            (None, Some((0, rank))) => Some(rank),
            _ => None,
        };
        let addr = c.addr;
        let mut body = self.buf(HELLO_MAX);
        let mut h = wire::Hello {
            ident,
            who,
            conn: id,
            inline: self.eager_max() as u32,
            job: &self.st.jobs.own,
            name: &self.name,
            nonce: crate::auth::nonce(),
            mac: [0; 8],
        };
        if let (Some(key), Some(t)) = (self.st.key.as_ref(), target) {
            h.mac = wire::hello_mac(key, &h, t);
        }
        wire::encode_hello(&mut body, &h);
        match self.post_send(Some(id), addr, tag(KIND_HELLO, 0, 0), body, 0) {
            Ok(()) => {
                if let Some(c) = self.st.conns.get_mut(&id) {
                    if c.hs == (Handshake::Pending { since }) {
                        c.hs = Handshake::Sent { since };
                    }
                }
            }
            Err(PostErr::Again(b)) => self.recycle(b),
            Err(PostErr::Failed(e)) => {
                self.fail_conn(id, format!("cannot send the handshake: {e}"))
            }
        }
    }

    /// Posts what `id` has queued; whether it still needs attention.
    fn flush(&mut self, id: u32) -> bool {
        let now = Instant::now();
        let timeout = self.cfg.timeout;
        let Some(c) = self.st.conns.get(&id) else {
            return false;
        };
        if c.failed.is_some() {
            return false;
        }
        match c.hs {
            Handshake::Lazy => return false,
            Handshake::Pending { since } | Handshake::Sent { since } => {
                if now - since > timeout {
                    self.fail_conn(id, format!("no answer to the handshake within {timeout:?}"));
                    return false;
                }
                self.try_hello(id);
                return true;
            }
            Handshake::Done => {}
        }
        loop {
            let Some(c) = self.st.conns.get_mut(&id) else {
                return false;
            };
            // Engine messages wait for credits; control messages do not.
            let needs_credit = matches!(c.out.front(), Some(Tx::Msg { .. }));
            if needs_credit && c.credits == 0 {
                let since = *c.stalled.get_or_insert(now);
                if now - since > timeout {
                    self.fail_conn(id, stalled(timeout));
                    return false;
                }
                return true;
            }
            let Some(tx) = c.pop() else { break };
            match self.post_tx(id, tx) {
                Step::Done => {}
                Step::Again(tx) => {
                    let Some(c) = self.st.conns.get_mut(&id) else {
                        return false;
                    };
                    c.push_front(tx);
                    let since = *c.stalled.get_or_insert(now);
                    if now - since > timeout {
                        self.fail_conn(id, stalled(timeout));
                        return false;
                    }
                    return true;
                }
                Step::Failed(why) => {
                    self.fail_conn(id, why);
                    return false;
                }
            }
        }
        let Some(c) = self.st.conns.get_mut(&id) else {
            return false;
        };
        c.stalled = None;
        if let Some(since) = c.cts_since.filter(|_| !c.awaiting.is_empty()) {
            if now - since > timeout {
                self.fail_conn(id, format!("no CTS from the peer within {timeout:?}"));
                return false;
            }
            // Payloads to go once the peer asks; the BYE follows them.
            return true;
        }
        if !c.bye {
            return false;
        }
        if c.credits == 0 {
            let since = *c.stalled.get_or_insert(now);
            return now - since <= timeout || {
                self.st.conns.remove(&id);
                false
            };
        }
        // Detached: everything is posted; say BYE and forget it.
        let (addr, to, seq) = (c.addr, c.tx_id, c.seq);
        match self.post_send(None, addr, tag(KIND_BYE, seq, to), Vec::new(), 0) {
            Err(PostErr::Again(_)) => {
                let Some(c) = self.st.conns.get_mut(&id) else {
                    return false;
                };
                let since = *c.stalled.get_or_insert(now);
                if now - since <= timeout {
                    return true;
                }
                self.st.conns.remove(&id);
            }
            Ok(()) | Err(PostErr::Failed(_)) => {
                self.st.conns.remove(&id);
            }
        }
        false
    }

    /// Per-poll upkeep: receives and reads the provider refused before,
    /// queued messages, handshake deadlines, refusals.
    pub(super) fn work(&mut self) {
        while self.generic < self.rx_pool.target(self.st.conns.len()) {
            if let Err(e) = self.add_generic_recv() {
                self.st
                    .drop_msg(format!("could not post a receive buffer: {e}"));
                break;
            }
        }
        for ctx in std::mem::take(&mut self.unposted) {
            let ctx = ctx as *mut c_void;
            let read = self
                .ops
                .get_mut(ctx)
                .is_some_and(|op| matches!(op.kind, OpKind::Read { .. }));
            let r = if read {
                self.post_read(ctx)
            } else {
                self.post_rx(ctx)
            };
            if let Err(e) = r {
                self.st
                    .drop_msg(format!("could not post an operation: {e}"));
            }
        }
        for id in std::mem::take(&mut self.st.work) {
            if let Some(c) = self.st.conns.get_mut(&id) {
                c.in_work = false;
            }
            if self.flush(id) {
                self.st.mark(id);
            }
        }
        if self.refusals.is_empty() {
            return;
        }
        let now = Instant::now();
        for _ in 0..self.refusals.len() {
            let Some(r) = self.refusals.pop_front() else {
                break;
            };
            let b = r.body.to_vec();
            if let Err(PostErr::Again(_)) = self.post_send(None, r.addr, r.tag, b, 0) {
                if now - r.since <= self.cfg.timeout {
                    self.refusals.push_back(r);
                }
            }
        }
    }

    /// The address of endpoint `name`, inserting it on first use.
    fn name_addr(&mut self, name: &[u8]) -> Result<fi_addr_t, String> {
        if let Some(&a) = self.st.names.get(name) {
            return Ok(a);
        }
        if self.chosen.addr_format == FI_ADDR_STR {
            if name.len() < 2 || name.last() != Some(&0) || name[..name.len() - 1].contains(&0) {
                return Err("endpoint name is not a NUL-terminated string".into());
            }
        } else if name.len() != self.name.len() {
            return Err(format!(
                "endpoint name of {} bytes; this provider's have {}",
                name.len(),
                self.name.len()
            ));
        }
        // SAFETY: the provider reads one address of its format: a
        // NUL-terminated string, or as many bytes as our own name has.
        let a = unsafe { self.base.av.insert(name) }.map_err(|e| e.to_string())?;
        self.st.names.insert(name.to_vec(), a);
        if let Some(pid) = shm_pid(name) {
            self.st.pids.insert(a, pid);
        }
        Ok(a)
    }

    /// The address of the endpoint `card` names.
    pub(super) fn card_addr(&mut self, card: &str) -> Result<fi_addr_t, NetmodError> {
        let name = card::parse(card, &self.chosen.provider)?;
        self.name_addr(&name).map_err(|why| NetmodError::BadCard {
            card: card.to_string(),
            why,
        })
    }

    /// Fails connection `id`, first stopping any receive into engine memory.
    pub(super) fn fail_conn(&mut self, id: u32, why: String) {
        self.quiesce(id);
        self.st.fail(id, why);
    }

    /// Reads the error entry the queue holds.
    fn read_err(&mut self) -> Option<Completion> {
        let mut e = fi_cq_err_entry {
            op_context: ptr::null_mut(),
            flags: 0,
            len: 0,
            buf: ptr::null_mut(),
            data: 0,
            tag: 0,
            olen: 0,
            err: 0,
            prov_errno: 0,
            err_data: ptr::null_mut(),
            err_data_size: 0,
        };
        // SAFETY: `e` is writable; err_data stays valid until the next read.
        let r = unsafe { fi_cq_readerr(self.base.cq.raw(), &mut e, 0) };
        if r < 1 {
            return None;
        }
        let mut why = strerror(e.err);
        let mut buf = [0 as libc::c_char; 128];
        // SAFETY: err_data from the entry just read; `buf` is writable.
        let prov = unsafe {
            let p = fi_cq_strerror(
                self.base.cq.raw(),
                e.prov_errno,
                e.err_data,
                buf.as_mut_ptr(),
                buf.len(),
            );
            super::fid::c_str(p)
        };
        if !prov.is_empty() && prov != why {
            why = format!("{why} ({prov})");
        }
        Some(Completion::Failed {
            ctx: e.op_context,
            err: e.err,
            why,
        })
    }

    /// Reads up to `max` completions into `out`.
    fn read_cq(&mut self, out: &mut Vec<Completion>, max: usize) {
        // Not zeroed: this runs on every poll, and the provider writes the
        // entries it returns.
        let mut entries = [const { MaybeUninit::<fi_cq_tagged_entry>::uninit() }; BATCH];
        while out.len() < max {
            // SAFETY: `entries` has room for BATCH tagged-format entries.
            let r = unsafe { fi_cq_read(self.base.cq.raw(), entries.as_mut_ptr().cast(), BATCH) };
            if r > 0 {
                out.extend(entries[..r as usize].iter().map(|e| {
                    // SAFETY: fi_cq_read wrote the first `r` entries.
                    Completion::Done(unsafe { e.assume_init() })
                }));
                if (r as usize) < BATCH {
                    return;
                }
            } else if r == -(FI_EAVAIL as isize) {
                match self.read_err() {
                    Some(c) => out.push(c),
                    None => return,
                }
            } else {
                return;
            }
        }
    }

    /// Progresses the queue and handles what completed. Without a sink
    /// (`poll_reads`), receive completions wait in `deferred`.
    pub(super) fn reap(&mut self, mut sink: Option<&mut dyn Sink>) {
        if let Some(s) = sink.as_deref_mut() {
            while let Some(c) = self.deferred.pop_front() {
                self.complete_rx(c, s);
            }
        }
        let mut got = Vec::new();
        self.read_cq(&mut got, MAX_PER_POLL);
        for c in got {
            let Some(c) = self.complete_local(c) else {
                continue;
            };
            match sink.as_deref_mut() {
                Some(s) => self.complete_rx(c, s),
                None => self.deferred.push_back(c),
            }
        }
    }

    /// Handles completions that need no sink (sends, reads, drains); hands
    /// back those that do.
    fn complete_local(&mut self, c: Completion) -> Option<Completion> {
        let ctx = c.ctx();
        let rx = self
            .ops
            .get_mut(ctx)
            .map(|op| matches!(op.kind, OpKind::Recv { .. } | OpKind::Payload { .. }));
        match rx {
            None => {
                self.st
                    .drop_msg("completion for an unknown operation".into());
                return None;
            }
            Some(true) => return Some(c),
            Some(false) => {}
        }
        let op = self.ops.take(ctx)?;
        match (op.kind, c) {
            (OpKind::Send { conn, buf, .. }, Completion::Done(_)) => {
                if let Some(c) = conn.and_then(|id| self.st.conns.get_mut(&id)) {
                    c.stalled = None;
                    c.inflight = c.inflight.saturating_sub(buf.len());
                }
                self.recycle(buf);
            }
            (OpKind::Send { conn: Some(id), .. }, Completion::Failed { why, .. }) => {
                self.fail_conn(id, format!("send failed: {why}"));
            }
            (OpKind::Read { token, .. }, Completion::Done(_)) => self.regions.done.push(token),
            (OpKind::Read { token, peer, .. }, Completion::Failed { why, .. }) => {
                if let Some(&id) = self.st.peers.get(&peer) {
                    self.fail_conn(id, format!("rma read failed: {why}"));
                }
                self.regions.failed.push_back((token, peer, why));
            }
            _ => {}
        }
        None
    }

    /// Handles a receive completion.
    fn complete_rx(&mut self, c: Completion, sink: &mut dyn Sink) {
        let ctx = c.ctx();
        let Some(op) = self.ops.take(ctx) else {
            return;
        };
        let cancelled = op.cancelled;
        let super::ops::Op { kind, mr, .. } = *op;
        match kind {
            OpKind::Recv { buf } => {
                match c {
                    Completion::Done(e) => {
                        let n = e.len.min(buf.len());
                        self.on_message(e.tag, &buf[..n], sink);
                    }
                    Completion::Failed { why, .. } => {
                        self.st.drop_msg(format!("receive failed: {why}"));
                    }
                }
                if self.generic > self.rx_pool.target(self.st.conns.len()) {
                    // The pool shrinks: its pages go back.
                    self.generic -= 1;
                    return;
                }
                let ctx = self.ops.add(OpKind::Recv { buf }, mr);
                if let Err(e) = self.post_rx(ctx) {
                    self.st
                        .drop_msg(format!("could not repost a receive buffer: {e}"));
                }
            }
            OpKind::Payload {
                conn,
                hdr,
                dst,
                len,
                tag,
            } => match c {
                Completion::Done(e) if !cancelled => {
                    self.payload_done(conn, ctx, &hdr, &dst, len, e.len, sink);
                }
                Completion::Done(_) => {}
                Completion::Failed { err, .. } if cancelled && err == FI_ECANCELED => {
                    // Never matched: take the payload so its sender completes.
                    self.drain(tag, len);
                }
                Completion::Failed { why, .. } => {
                    if !cancelled {
                        if let Some(c) = self.st.conns.get_mut(&conn) {
                            if c.rx_payload == Some(ctx as usize) {
                                c.rx_payload = None;
                            }
                        }
                        self.fail_conn(conn, format!("payload receive failed: {why}"));
                    }
                }
            },
            _ => {}
        }
    }

    /// Receives and drops the payload with `tag`.
    fn drain(&mut self, tag: u64, len: usize) {
        if len > self.cfg.piece {
            // No sender that follows the rules sends it: not worth memory.
            return self
                .st
                .drop_msg(format!("a {len}-byte payload above the largest piece"));
        }
        let buf = vec![0u8; len];
        let mr = match self.local_mr(buf.as_ptr(), len, FI_RECV) {
            Ok(mr) => mr,
            Err(e) => return self.st.drop_msg(format!("cannot drain a payload: {e}")),
        };
        let ctx = self.ops.add(OpKind::Drain { buf, tag }, mr);
        if let Err(e) = self.post_rx(ctx) {
            self.st.drop_msg(format!("cannot drain a payload: {e}"));
        }
    }

    /// A message from a generic receive.
    fn on_message(&mut self, t: u64, body: &[u8], sink: &mut dyn Sink) {
        let (kind, aux, id) = split_tag(t);
        match kind {
            KIND_HELLO => self.on_hello(body, sink),
            KIND_VERDICT => self.on_verdict(id, body),
            KIND_CTS => self.on_cts(id, aux),
            KIND_KEEPALIVE => self.on_keepalive(id, aux),
            KIND_CREDIT => {
                match self.st.conns.get_mut(&id).filter(|c| c.failed.is_none()) {
                    Some(c) => c.credits = c.credits.saturating_add(aux).min(CREDITS),
                    None => {
                        return self
                            .st
                            .drop_msg(format!("CREDIT for unknown connection {id}"))
                    }
                }
                self.st.mark(id);
            }
            KIND_MSG | KIND_LARGE | KIND_BYE => {
                match self.st.arrive(id, kind, aux, body) {
                    Arrival::Now => {}
                    Arrival::Held | Arrival::Twice => return,
                    Arrival::Fail(why) => return self.fail_conn(id, why),
                    Arrival::Gone { .. } => {
                        // Dropped, but a payload is still taken so that
                        // its sender completes.
                        if kind == KIND_LARGE {
                            if let Ok(len) =
                                split_body(body).and_then(|(_, r)| parse_large_suffix(r))
                            {
                                self.drain(payload_tag(aux, id), len);
                            }
                        }
                        return;
                    }
                }
                self.handle(id, kind, aux, body, sink);
                self.handled(id);
                self.release(id, sink);
            }
            _ => self.st.drop_msg(format!("message of unknown kind {kind}")),
        }
    }

    /// Message `seq` of live connection `id`, in its turn.
    fn handle(&mut self, id: u32, kind: u8, seq: u32, body: &[u8], sink: &mut dyn Sink) {
        let Some(peer) = self.st.conns.get(&id).and_then(|c| c.peer) else {
            return;
        };
        let protocol = |why: &str| format!("protocol error: {why}");
        match kind {
            KIND_MSG => match split_body(body) {
                Ok((h, p)) => {
                    sink.deliver(peer, h, p);
                    self.events += 1;
                }
                Err(why) => self.fail_conn(id, protocol(why)),
            },
            KIND_LARGE => {
                match split_body(body).and_then(|(h, rest)| Ok((h, parse_large_suffix(rest)?))) {
                    Ok((h, len)) => self.start_payload(id, peer, h, len, seq, sink),
                    Err(why) => self.fail_conn(id, protocol(why)),
                }
            }
            _ => self.fail_conn(id, "disconnected by the peer".into()),
        }
    }

    /// Posts the receive of a LARGE's payload: into the engine's memory if
    /// it gives some, else into a buffer of ours.
    fn start_payload(
        &mut self,
        id: u32,
        peer: PeerId,
        hdr: &[u8],
        len: usize,
        seq: u32,
        sink: &mut dyn Sink,
    ) {
        let placed = if len > 0 {
            sink.place(peer, hdr, len)
        } else {
            None
        };
        let dst = match placed {
            Some(p) => Dest::Engine(p),
            // The receive budget: nothing larger than a piece is taken
            // without a receive posted for it.
            None if len > self.cfg.piece => {
                let why = format!(
                    "protocol error: a {len}-byte LARGE above the largest piece ({}) \
                     with no receive posted for it",
                    self.cfg.piece
                );
                return self.fail_conn(id, why);
            }
            None => Dest::Own(vec![0u8; len]),
        };
        let p = match &dst {
            Dest::Engine(p) => p.as_ptr() as *const u8,
            Dest::Own(v) => v.as_ptr(),
        };
        let mr = match self.local_mr(p, len, FI_RECV) {
            Ok(mr) => mr,
            Err(e) => return self.fail_conn(id, format!("cannot register a payload buffer: {e}")),
        };
        let op = OpKind::Payload {
            conn: id,
            hdr: hdr.to_vec(),
            dst,
            len,
            tag: payload_tag(seq, id),
        };
        let ctx = self.ops.add(op, mr);
        if let Some(c) = self.st.conns.get_mut(&id) {
            c.rx_payload = Some(ctx as usize);
            c.rx_placed = placed.is_some();
        }
        if let Err(e) = self.post_rx(ctx) {
            if let Some(c) = self.st.conns.get_mut(&id) {
                c.rx_payload = None;
            }
            return self.fail_conn(id, format!("cannot receive a payload: {e}"));
        }
        if let Some(c) = self.st.conns.get_mut(&id) {
            c.push_front(Tx::Cts(seq));
        }
        self.st.mark(id);
    }

    #[allow(clippy::too_many_arguments)]
    fn payload_done(
        &mut self,
        id: u32,
        ctx: *mut c_void,
        hdr: &[u8],
        dst: &Dest,
        len: usize,
        got: usize,
        sink: &mut dyn Sink,
    ) {
        let Some(c) = self.st.conns.get_mut(&id) else {
            return;
        };
        if c.rx_payload != Some(ctx as usize) || c.failed.is_some() {
            return;
        }
        c.rx_payload = None;
        c.rx_placed = false;
        let Some(peer) = c.peer else { return };
        if got != len {
            return self.fail_conn(
                id,
                format!("protocol error: payload of {got} bytes, {len} announced"),
            );
        }
        let payload = match dst {
            // SAFETY: the engine gave `p..p+len` for this payload and the
            // receive wrote all `len` bytes of it.
            Dest::Engine(p) => unsafe { std::slice::from_raw_parts(p.as_ptr(), len) },
            Dest::Own(v) => &v[..len],
        };
        sink.deliver(peer, hdr, payload);
        self.events += 1;
        self.release(id, sink);
    }

    /// Handles the held messages whose turn has come, until a payload.
    fn release(&mut self, id: u32, sink: &mut dyn Sink) {
        while let Some((seq, h)) = self.st.take_next(id) {
            self.handle(id, h.kind, seq, &h.body, sink);
            self.handled(id);
        }
    }

    /// One more message of `id` handled: return credits every half window;
    /// the peer counts as busy for the receive pool.
    fn handled(&mut self, id: u32) {
        let Some(c) = self.st.conns.get_mut(&id).filter(|c| c.failed.is_none()) else {
            return;
        };
        if !c.busy {
            c.busy = true;
            self.rx_pool.busy();
        }
        c.consumed += 1;
        if c.consumed >= CREDITS / 2 {
            let n = std::mem::take(&mut c.consumed);
            c.push_front(Tx::Credit(n));
            self.st.mark(id);
        }
    }

    /// A PING is answered and a PONG counted, on a live connection with a
    /// peer; anything else (a detached, failed or forgotten connection, as
    /// after a disconnect) is dropped without a word: keepalives are
    /// nobody's business but the netmod's.
    fn on_keepalive(&mut self, id: u32, aux: u32) {
        let live = self
            .st
            .conns
            .get_mut(&id)
            .filter(|c| c.peer.is_some() && c.failed.is_none());
        let Some(c) = live else {
            return;
        };
        match aux {
            PING => {
                c.push_front(Tx::Pong);
                self.st.mark(id);
            }
            PONG => {
                c.pings = c.pings.saturating_sub(1);
                self.pongs += 1;
            }
            _ => self
                .st
                .drop_msg(format!("keepalive of unknown kind {aux} from {id}")),
        }
    }

    /// A keepalive round if the interval has passed since the last one
    /// (`State::keepalive` says who gets a PING; `work` posts them).
    pub(super) fn keepalive(&mut self) {
        let now = Instant::now();
        if now < self.ka_next {
            return;
        }
        self.ka_next = now + self.cfg.keepalive_interval();
        self.pings_sent += self.st.keepalive() as u64;
        self.rx_pool.round();
        // Same-node providers deliver into a dead process's queue without
        // complaint (shm: its mapping outlives it), so PINGs to it succeed;
        // its process id tells.
        if self.st.pids.is_empty() {
            return;
        }
        let gone: Vec<(u32, i32)> = self
            .st
            .conns
            .iter()
            .filter(|(_, c)| c.peer.is_some() && c.failed.is_none())
            .filter_map(|(&id, c)| self.st.pids.get(&c.addr).map(|&pid| (id, pid)))
            .filter(|&(_, pid)| !process_exists(pid))
            .collect();
        for (id, pid) in gone {
            self.fail_conn(id, format!("its process ({pid}) has exited"));
        }
    }

    /// The peer posted the receive for our LARGE `seq`: its payload goes.
    fn on_cts(&mut self, id: u32, seq: u32) {
        let Some(c) = self.st.conns.get_mut(&id).filter(|c| c.failed.is_none()) else {
            return self.st.drop_msg(format!("CTS for unknown connection {id}"));
        };
        let Some((hlen, body)) = c.awaiting.remove(&seq) else {
            return self.st.drop_msg(format!("CTS for no payload ({seq})"));
        };
        c.inflight = c.inflight.saturating_sub(body.len());
        c.cts_since = (!c.awaiting.is_empty()).then(Instant::now);
        c.push_front(Tx::Payload { seq, hlen, body });
        self.st.mark(id);
    }

    fn on_hello(&mut self, body: &[u8], sink: &mut dyn Sink) {
        let h = match parse_hello(body) {
            Ok(h) => h,
            Err(why) => return self.st.drop_msg(format!("malformed HELLO: {why}")),
        };
        let addr = match self.name_addr(h.name) {
            Ok(a) => a,
            Err(why) => {
                return self
                    .st
                    .drop_msg(format!("HELLO from an unusable address: {why}"))
            }
        };
        match self.st.hello(&h, addr) {
            HelloOutcome::Accept { port, .. } => {
                if let Some((peer, tag)) = port {
                    sink.port_connection(peer, tag);
                }
                self.events += 1;
            }
            HelloOutcome::Refuse(v) => self.refusals.push_back(Refusal {
                addr,
                tag: tag(KIND_VERDICT, 0, h.conn),
                body: encode_verdict(v, 0, 0),
                since: Instant::now(),
            }),
        }
    }

    fn on_verdict(&mut self, id: u32, body: &[u8]) {
        let (v, theirs, inline) = match parse_verdict(body) {
            Ok(v) => v,
            Err(why) => return self.st.drop_msg(why.into()),
        };
        match self.st.verdict(id, v, theirs, inline) {
            Ok(()) => self.events += 1,
            Err(why) => self.fail_conn(id, why),
        }
    }

    /// Stops a receive into the engine's memory on `id` (see the module
    /// docs); other receives of `id` are left to complete and be dropped.
    pub(super) fn quiesce(&mut self, id: u32) {
        let Some(c) = self.st.conns.get_mut(&id) else {
            return;
        };
        let placed = std::mem::take(&mut c.rx_placed);
        let Some(ctx) = c.rx_payload.take() else {
            return;
        };
        if let Some(i) = self.unposted.iter().position(|&u| u == ctx) {
            // Never posted: nothing to stop.
            self.unposted.swap_remove(i);
            self.ops.take(ctx as *mut c_void);
            return;
        }
        let ctx = ctx as *mut c_void;
        let Some(op) = self.ops.get_mut(ctx) else {
            return;
        };
        op.cancelled = true;
        if !placed {
            return;
        }
        // SAFETY: a live endpoint; `ctx` is a posted operation of ours.
        unsafe { fi_cancel(self.ep.raw(), ctx) };
        let deadline = Instant::now() + self.cfg.timeout;
        loop {
            let mut got = Vec::new();
            self.read_cq(&mut got, BATCH);
            let empty = got.is_empty();
            for c in got {
                if c.ctx() != ctx {
                    self.deferred.push_back(c);
                    continue;
                }
                let Some(op) = self.ops.take(ctx) else {
                    continue;
                };
                if let (Completion::Failed { err, .. }, OpKind::Payload { tag, len, .. }) =
                    (&c, &op.kind)
                {
                    if *err == FI_ECANCELED {
                        let (tag, len) = (*tag, *len);
                        self.drain(tag, len);
                    }
                }
            }
            if self.ops.get_mut(ctx).is_none() {
                return;
            }
            if empty {
                if Instant::now() > deadline {
                    self.stuck += 1;
                    return;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
}

fn stalled(timeout: Duration) -> String {
    format!("sends to the peer made no progress for {timeout:?}")
}

/// The process id in an shm provider endpoint name (`fi_shm://PID:...`,
/// NUL-terminated), if `name` is one.
pub(super) fn shm_pid(name: &[u8]) -> Option<i32> {
    let rest = name.strip_prefix(b"fi_shm://")?;
    let end = rest.iter().position(|&b| b == b':')?;
    let pid: i32 = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    (pid > 0).then_some(pid)
}

/// `kill(pid, 0)`: false only when no such process exists (`ESRCH`); a
/// process we may not signal (`EPERM`) exists.
fn process_exists(pid: i32) -> bool {
    // SAFETY: signal 0 sends nothing; it only checks the target.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shm_names_give_their_pid() {
        assert_eq!(shm_pid(b"fi_shm://4242:0:1\0"), Some(4242));
        assert_eq!(shm_pid(b"fi_shm://0:0:1\0"), None);
        assert_eq!(shm_pid(b"fi_shm://x:0:1\0"), None);
        assert_eq!(shm_pid(b"fi_sockets://1.2.3.4:5\0"), None);
        assert_eq!(shm_pid(&[2, 0, 0x93, 0x21]), None);
        assert!(process_exists(std::process::id() as i32));
        // Beyond pid_max (at most 2^22): no such process.
        assert!(!process_exists(1 << 30));
    }
}
