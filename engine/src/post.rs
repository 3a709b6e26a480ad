//! Posting operations: sends (eager at once where the transport takes
//! them, else a request: eager queued, or a rendezvous request), receives
//! (matched against what already arrived), cancel and abandon. What
//! arrives afterwards is `state/protocol.rs`'s.

use crate::core::Core;
use crate::error::Result;
use crate::pg::{Outgoing, VcId};
use crate::route::Route;
use crate::state::bytes;
use crate::table::SendOp;
use crate::transport::Transport;
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
    /// One VC lookup (`State::spend_now`, which spends the credit first and
    /// gives it back if the message does not go), and a netmod peer's send
    /// made here rather than through `transmit`'s out-of-line call (its
    /// refusals still go `transmit`'s way, `Core::net_refused`).
    #[inline]
    pub fn try_send_now(&mut self, a: &SendArgs) -> Result<bool> {
        if a.sync {
            // Still fails on a failed VC, as `start_send` will.
            self.st.send_route(a.dest)?;
            return Ok(false);
        }
        let Some((route, before)) = self.st.spend_now(a.dest, a.len)? else {
            return Ok(false);
        };
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
        // Shared memory first, as `transmit` does: it spends no credit.
        if let (Route::Shm(peer), Some(shm)) = (route, self.tx.shm.as_mut()) {
            return shm.try_send(peer, &header, payload);
        }
        let sent = match (route, self.tx.net.as_mut()) {
            (Route::Netmod(peer), Some(net)) => match net.send(peer, &header, payload) {
                Ok(true) => return Ok(true),
                Ok(false) => Ok(false),
                Err(e) => self.net_refused(a.dest, peer, &header, payload, e),
            },
            _ => self.transmit(route, a.dest, &header, payload),
        };
        if !matches!(sent, Ok(true)) {
            self.st.restore_credit(route, a.dest, before);
        }
        sent
    }

    /// Start a send; the handle of its request.
    pub fn start_send(&mut self, a: &SendArgs) -> Result<u64> {
        let (route, limit, _) = self.st.send_route(a.dest)?;
        let eager = a.len <= limit;
        if eager {
            self.st.spend_credit(route, a.dest, a.len);
        }
        let id = self.st.post_send(SendOp::new(
            a.dest, a.buf, a.len, a.context, a.tag, eager, a.sync,
        ));
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
                    self.st.send_registered(id, key);
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
                self.st.unpost_send(id);
                return Err(e);
            }
        }
        Ok(id)
    }

    /// Post a receive; the handle of its request (`State::post_recv`).
    /// Inline into `Inner::start_recv`, its one caller on the hot path: a
    /// call with seven arguments costs more than its body's branches.
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
        self.st.post_recv(context, buf, cap, source, source_vc, tag)
    }

    /// Ask to cancel request `id` (see `Request::cancel`): a send's
    /// `CancelReq` goes to its receiver.
    pub fn cancel(&mut self, id: u64) -> Result<()> {
        let Some((vc, context)) = self.st.start_cancel(id) else {
            return Ok(());
        };
        let item = Outgoing::Msg {
            header: control(MsgKind::CancelReq, context, id),
            buf: std::ptr::null(),
            len: 0,
            done: 0,
        };
        self.send_or_queue(vc, item)?;
        Ok(())
    }

    /// Stop touching the buffers of these requests and free them (a scope
    /// unwinding from a panic): receives are withdrawn, queued sends dropped.
    pub fn abandon(&mut self, ids: &[u64]) {
        for &id in ids {
            // A send's registration goes now, not at the next progress: the
            // buffer is released next, and the netmod's poll may serve a
            // peer's read of it before `rma_progress` would deregister it.
            if let Some(key) = self.st.withdraw(id) {
                if !self.tx.net.as_mut().is_some_and(|n| n.deregister(key)) {
                    self.st.release_key(key);
                }
            }
        }
    }
}
