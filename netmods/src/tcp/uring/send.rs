//! Sending: straight from the caller's buffers when a peer has nothing
//! queued, else through its queue (see the module docs).

use std::io;

use io_uring::opcode;

use super::super::state::{Phase, State};
use super::super::wire;
use super::ring::ENTER_GETEVENTS;
use super::*;

impl UringIo {
    /// Takes a message for `peer` (room checked by the caller): sent from
    /// the caller's buffers when nothing is queued for the peer and it is
    /// large or the first small one since the last poll; else queued.
    pub(crate) fn send(&mut self, st: &mut State, peer: PeerId, header: &[u8], payload: &[u8]) {
        let total = wire::PREFIX + header.len() + payload.len();
        let queued = st.peers.get(&peer).map_or(0, |p| p.out.len());
        let conn = st.open_conn(peer);
        let mut skip = 0;
        if let Some(id) = conn {
            if queued == 0 && (total >= COALESCE_BELOW || !self.wrote_since_poll) {
                match self.send_direct(st, id.slot, header, payload) {
                    Some(n) if n == total => return,
                    Some(n) => skip = n,
                    None => {}
                }
            }
        }
        if let Some(p) = st.peers.get_mut(&peer) {
            if p.failed.is_none() {
                p.out.push(header, payload, skip);
            }
        }
        if let Some(id) = conn {
            st.mark_dirty(id.slot);
        }
    }

    /// Sends `prefix + header + payload` on `slot` without copying them and
    /// waits for the (inline) completion; `None` if the socket cannot take
    /// a direct send now, else the bytes written (on error the socket has
    /// failed).
    fn send_direct(
        &mut self,
        st: &mut State,
        slot: u32,
        header: &[u8],
        payload: &[u8],
    ) -> Option<usize> {
        let s = st.sock(slot)?;
        if s.phase != Phase::Open || s.detached || s.io & IO_SEND != 0 {
            return None;
        }
        let gen = s.gen;
        let target = self.target(st, slot)?;
        self.wrote_since_poll = true;
        let prefix = wire::encode_prefix(header.len(), payload.len());
        let iov = [
            libc::iovec {
                iov_base: prefix.as_ptr() as *mut _,
                iov_len: prefix.len(),
            },
            libc::iovec {
                iov_base: header.as_ptr() as *mut _,
                iov_len: header.len(),
            },
            libc::iovec {
                iov_base: payload.as_ptr() as *mut _,
                iov_len: payload.len(),
            },
        ];
        // SAFETY: a msghdr of zeros is valid (no name, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_ptr() as *mut _;
        msg.msg_iovlen = iov.len();
        let ud = user_data(slot, gen, K_DIRECT);
        let e = on!(target, |fd| opcode::SendMsg::new(fd, &msg)
            .flags((libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) as u32)
            .build()
            .user_data(ud));
        // SAFETY: `msg`, `iov` and the buffers they name outlive the
        // operation: `wait_for` returns only after its completion.
        if !unsafe { self.push(&e) } {
            return None;
        }
        let res = self.wait_for(ud);
        if res >= 0 {
            Some(res as usize)
        } else if res == -libc::EAGAIN {
            Some(0)
        } else {
            st.sock_failed(
                slot,
                format!("send: {}", io::Error::from_raw_os_error(-res)),
            );
            Some(0)
        }
    }

    /// Submits what is queued and returns the result of operation `ud`,
    /// entering the kernel until its completion is there; other
    /// completions are kept for the next poll.
    pub(super) fn wait_for(&mut self, ud: u64) -> i32 {
        let mut first = true;
        loop {
            let n = self.ring.queued();
            let r = if first {
                // Submission only: a send on a socket with room (or
                // MSG_DONTWAIT) completes inline.
                self.ring.enter(n, 0, 0)
            } else {
                self.ring.enter(n, 1, ENTER_GETEVENTS)
            };
            first = false;
            if let Err(e) = r {
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) {
                    // The SQE may be unsubmitted, pointing at memory about
                    // to go: going on would be unsound.
                    eprintln!("rivet tcp: io_uring_enter failed while a send was in flight: {e}");
                    std::process::abort();
                }
                std::thread::yield_now();
            }
            let mut found = None;
            for e in self.ring.ring.completion() {
                if e.user_data() == ud {
                    found = Some(e.result());
                } else {
                    self.deferred.push((e.user_data(), e.result(), e.flags()));
                }
            }
            if let Some(res) = found {
                return res;
            }
        }
    }
}
