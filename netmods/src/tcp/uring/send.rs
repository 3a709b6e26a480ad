//! Sending: straight from the caller's buffers when a peer has nothing
//! queued (`TcpNetmod::try_send` decides), else through its queue (see the
//! module docs).

use std::os::fd::AsRawFd;

use super::super::state::{Phase, State};
use super::super::sys;
use super::ring::ENTER_GETEVENTS;
use super::*;

impl UringIo {
    /// Writes `prefix + header + payload` on `slot` with one nonblocking
    /// call (`sys::send_frame`: a small frame written into one `send(2)`, else
    /// `sendmsg(2)` straight from the caller's buffers); `None` if the
    /// socket cannot take a direct send now, else the bytes written (on
    /// error the socket has failed). A plain call, not an SQE: a socket
    /// with room takes the bytes in the call either way, and the call
    /// needs no SQE, no completion to reap and no second enter to wait
    /// for it; what does not fit goes to the queue and an io_uring SEND.
    pub(crate) fn send_direct(
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
        let fd = s.fd.as_raw_fd();
        self.wrote_since_poll = true;
        st.calls += 1;
        match sys::send_frame(fd, header, payload) {
            Ok(n) => Some(n),
            Err(e) if sys::would_block(&e) => Some(0),
            Err(e) => {
                st.sock_failed(slot, format!("send: {e}"));
                Some(0)
            }
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
