//! Reaping the completion queue: completions read and handed to what
//! posted them (local sends, generic receives, payload receives), and
//! stopping a receive into the engine's memory.
//!
//! # Stopping a receive into the engine's memory
//! `disconnect` and a peer's failure must leave the engine's placement
//! memory alone once they return. A payload receive into it is cancelled
//! (`fi_cancel`) and its completion awaited, progressing the queue;
//! every other completion read meanwhile waits in `deferred` for the next
//! `poll`, which handles it as if just read (sends and reads included). A receive the
//! provider had already matched finishes first (it needs the sender's
//! progress for some protocols); if that takes longer than the timeout it
//! is counted in `describe` ("placements not stopped in time").

use std::mem::MaybeUninit;
use std::ptr;
use std::time::{Duration, Instant};

use libc::c_void;

use crate::Sink;

use super::fid::strerror;
use super::ops::OpKind;
use super::sys::*;
use super::OfiNetmod;

/// Completions read per `fi_cq_read`, and at most per `poll`.
pub(super) const BATCH: usize = 16;
pub(super) const MAX_PER_POLL: usize = 256;

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

impl OfiNetmod {
    /// Reads the error entry the queue holds.
    pub(super) fn read_err(&mut self) -> Option<Completion> {
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
    pub(super) fn read_cq(&mut self, out: &mut Vec<Completion>, max: usize) {
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
    /// (`poll_reads`), receive completions wait in `deferred`. With one,
    /// `deferred` goes first, through `complete_local` too: `quiesce` sets
    /// aside whatever it reads, sends and reads included.
    pub(super) fn reap(&mut self, mut sink: Option<&mut dyn Sink>) {
        if let Some(s) = sink.as_deref_mut() {
            while let Some(c) = self.deferred.pop_front() {
                if let Some(c) = self.complete_local(c) {
                    self.complete_rx(c, s);
                }
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
    pub(super) fn complete_local(&mut self, c: Completion) -> Option<Completion> {
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
    pub(super) fn complete_rx(&mut self, c: Completion, sink: &mut dyn Sink) {
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
    pub(super) fn drain(&mut self, tag: u64, len: usize) {
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
                    // Handled at the next `reap` with a sink, not here: a
                    // failed send fails its connection, which stops that
                    // one's receive in a nested loop that could set this
                    // one's completion aside.
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::ops::OpKind;
    use super::*;
    use crate::OfiConfig;

    fn done(ctx: *mut c_void) -> Completion {
        Completion::Done(fi_cq_tagged_entry {
            op_context: ctx,
            flags: 0,
            len: 0,
            buf: ptr::null_mut(),
            data: 0,
            tag: 0,
        })
    }

    struct NoSink;
    impl Sink for NoSink {
        fn deliver(&mut self, _: crate::PeerId, _: &[u8], _: &[u8]) {
            panic!("nothing to deliver");
        }
        fn peer_failed(&mut self, _: crate::PeerId, _: &str) {
            panic!("no peer to fail");
        }
    }

    /// What `quiesce` reads besides the receive it stops waits in
    /// `deferred` and keeps its bookkeeping: the next `poll` frees a
    /// send's count and records a read's completion for `poll_reads` (they
    /// used to reach only the receive handler, which dropped them: a read
    /// never reported, a send's bytes never freed).
    #[test]
    fn completions_set_aside_keep_their_bookkeeping() {
        let cfg = OfiConfig {
            provider: Some("tcp;ofi_rxm".into()),
            domain: Some("lo".into()),
            timeout: Duration::from_secs(5),
            ..OfiConfig::default()
        };
        let mut n = OfiNetmod::new(cfg, "aside", 0).expect("tcp;ofi_rxm on lo");
        let read = n.ops.add(
            OpKind::Read {
                token: 7,
                peer: 1,
                local: ptr::null_mut(),
                len: 0,
                src: 0,
                remote: 0,
                key: 0,
            },
            None,
        );
        let send = n.ops.add(
            OpKind::Send {
                conn: None,
                buf: vec![0; 8],
                optional: false,
            },
            None,
        );
        assert_eq!((n.ops.sends(), n.reads_in_flight()), (1, 1));
        n.deferred.push_back(done(read));
        n.deferred.push_back(done(send));
        n.reap(Some(&mut NoSink));
        assert_eq!((n.ops.sends(), n.reads_in_flight()), (0, 0));
        assert!(n.deferred.is_empty());
        assert_eq!(n.regions.done, [7], "the read is recorded");
    }
}
