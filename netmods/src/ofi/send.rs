//! The send path: a connection's queued messages posted in order, `send`
//! and its back-pressure (`QUEUE_CAP`, `refuse`), the HELLO that opens a
//! connection, `work` (flushing connections and refusals each poll), peer
//! addresses, and the shm endpoint names that give a process id.

use std::time::{Duration, Instant};

use libc::c_void;

use crate::{NetmodError, PeerId};

use super::card;
use super::conn::{Handshake, Tx};
use super::fid::FiError;
use super::ops::OpKind;
use super::sys::*;
use super::wire::{self, *};
use super::xfer::PostErr;
use super::OfiNetmod;

/// A peer takes more messages only while its queued and in-flight bytes
/// (sends posted from our copies, not completed) are below this; with
/// neither, it always takes one, whatever its size. Bounds what a
/// provider that accepts sends without limit (rendezvous) makes us copy.
pub(super) const QUEUE_CAP: usize = 4 << 20;

/// A VERDICT refusing a HELLO, to post when the provider takes it.
pub(crate) struct Refusal {
    pub(super) addr: fi_addr_t,
    pub(super) tag: u64,
    pub(super) body: [u8; VERDICT_LEN],
    pub(super) since: Instant,
}

/// What became of a message handed to the provider.
pub(super) enum Step {
    Done,
    /// Nothing (more) was posted: `Tx::Payload` if its LARGE went out.
    Again(Tx),
    Failed(String),
}

impl OfiNetmod {
    /// Posts one queued message of the ready connection `id`.
    pub(super) fn post_tx(&mut self, id: u32, tx: Tx) -> Step {
        let Some(c) = self.st.conns.get_mut(&id) else {
            return Step::Failed("connection gone".into());
        };
        // For the keepalive round: the peer was sent something.
        c.active |= !tx.keepalive();
        let (addr, to, inline, seq, token) = (c.addr, c.tx_id, c.remote_inline, c.seq, c.tx_token);
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
            Tx::Msg { hlen, mut body } if body.len() - PREFIX - hlen <= inline => {
                set_token(&mut body, &token);
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
                set_token(&mut h, &token);
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
                let mut b = self.buf(TOKEN);
                b.extend_from_slice(&token);
                match self.post_send_op(Some(id), addr, t, b, 0, optional) {
                    Ok(()) => Step::Done,
                    Err(PostErr::Again(b)) => {
                        self.recycle(b);
                        Step::Again(tx)
                    }
                    Err(PostErr::Failed(e)) => failed(e),
                }
            }
            Tx::Ping | Tx::Pong => {
                let aux = if matches!(tx, Tx::Ping) { PING } else { PONG };
                let t = tag(KIND_KEEPALIVE, aux, to);
                let mut b = self.buf(TOKEN);
                b.extend_from_slice(&token);
                match self.post_send_op(Some(id), addr, t, b, 0, true) {
                    Ok(()) => Step::Done,
                    Err(PostErr::Again(b)) => {
                        self.recycle(b);
                        Step::Again(tx)
                    }
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
    pub(super) fn refuse(&mut self, id: u32) -> Result<bool, String> {
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

    pub(super) fn try_hello(&mut self, id: u32) {
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
        // A rank of our own job is told the secret's proof, a rank of an
        // added job our group key's.
        let target = match (c.port, c.peer.map(crate::split_peer)) {
            (None, Some((0, rank))) => self
                .st
                .key
                .map(|k| (k, rank, self.st.jobs.own.clone().into_boxed_slice())),
            (None, Some((g, rank))) => match (self.st.key, self.st.jobs.added(g)) {
                (Some(k), Some((job, _))) => Some((k.group_key(), rank, job.into())),
                _ => None,
            },
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
        if let Some((key, rank, job)) = &target {
            h.mac = wire::hello_mac(key, &h, *rank, job);
        }
        wire::encode_hello(&mut body, &h);
        let nonce = h.nonce;
        match self.post_send(Some(id), addr, tag(KIND_HELLO, 0, 0), body, 0) {
            Ok(()) => {
                if let Some(c) = self.st.conns.get_mut(&id) {
                    if c.hs == (Handshake::Pending { since }) {
                        c.hs = Handshake::Sent { since };
                        // What the peer's VERDICT must prove.
                        c.nonce = nonce;
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
    pub(super) fn flush(&mut self, id: u32) -> bool {
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
        let (addr, to, seq, token) = (c.addr, c.tx_id, c.seq, c.tx_token);
        let mut b = self.buf(TOKEN);
        b.extend_from_slice(&token);
        match self.post_send(None, addr, tag(KIND_BYE, seq, to), b, 0) {
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
    pub(super) fn name_addr(&mut self, name: &[u8]) -> Result<fi_addr_t, String> {
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
}

pub(super) fn stalled(timeout: Duration) -> String {
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
pub(super) fn process_exists(pid: i32) -> bool {
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
