//! Arming a dirty socket: the CONNECT, RECV (multishot or single-shot)
//! and SEND it needs and has not in flight.

use std::io;
use std::os::fd::AsRawFd;

use io_uring::opcode;

use super::super::config::ZeroCopy;
use super::super::state::{Phase, State};
use super::super::sys;
use super::*;

impl UringIo {
    /// Pushes the operations a dirty socket needs and has not in flight.
    pub(super) fn arm(&mut self, st: &mut State, slot: u32) {
        let Some(s) = st.sock(slot) else { return };
        s.dirty = false;
        if s.phase == Phase::Closing {
            return;
        }
        let Some(t) = self.target(st, slot) else {
            return;
        };
        let multi = self.bufs.is_some();
        // Bulk connections in `Defer` mode are watched, not received on.
        let watch = self.direct_mode();
        let bundle = self.ring.bundle;
        let Some((s, peers)) = st.sock_and_peers(slot) else {
            return;
        };
        let gen = s.gen;
        // A spinning connection is read by plain calls (`spin.rs`).
        let spinning = self.spinning(slot, gen);
        let mut retry = false;
        // Plain sends made, and the error one met.
        let mut direct = 0;
        let mut failed: Option<io::Error> = None;
        match s.phase {
            Phase::Closing => return,
            Phase::Connecting { .. } => {
                if s.io & IO_CONNECT == 0 {
                    let e = on!(t, |fd| opcode::Connect::new(
                        fd,
                        s.addr.as_ptr(),
                        s.addr.len()
                    )
                    .build()
                    .user_data(user_data(slot, gen, K_CONNECT)));
                    // SAFETY: `s.addr` is boxed in the socket, which is not
                    // released while IO_CONNECT is set.
                    if unsafe { self.push(&e) } {
                        s.io |= IO_CONNECT;
                    } else {
                        retry = true;
                    }
                }
            }
            phase => {
                let parsed = matches!(phase, Phase::Open | Phase::Verdict { accept: true });
                let (left, exact) =
                    s.rx.as_ref()
                        .map_or((0, 0), |rx| (rx.frame_left(), rx.exact_left()));
                let big = left >= DIRECT_RECV_MIN;
                if s.io & (IO_RECV | IO_MULTI | IO_WATCH) == 0 && !spinning {
                    if parsed && watch && (big || s.single_rx > 0) {
                        // Bulk data: a readiness watch, and direct reads
                        // into the target (`WATCH_FRAMES`).
                        let e = on!(t, |fd| opcode::PollAdd::new(fd, libc::POLLIN as u32)
                            .build()
                            .user_data(user_data(slot, gen, K_WATCH)));
                        // SAFETY: a poll carries no pointers.
                        if unsafe { self.push(&e) } {
                            s.io |= IO_WATCH;
                        } else {
                            retry = true;
                        }
                    } else if parsed && multi && !big && s.single_rx == 0 {
                        let ud = user_data(slot, gen, K_MULTI);
                        let e = if bundle {
                            on!(t, |fd| opcode::RecvMultiBundle::new(fd, bufs::GROUP)
                                .build()
                                .user_data(ud))
                        } else {
                            on!(t, |fd| opcode::RecvMulti::new(fd, bufs::GROUP)
                                .build()
                                .user_data(ud))
                        };
                        // SAFETY: it writes only into provided buffers,
                        // which live as long as the ring.
                        if unsafe { self.push(&e) } {
                            s.io |= IO_MULTI;
                        } else {
                            retry = true;
                        }
                    } else if let Some((ptr, len)) = s.recv_target() {
                        // Wait for all of it only when the target is
                        // exactly the rest of the frame (not the parser's
                        // buffer, which may take more than is coming).
                        let wait = if exact >= DIRECT_RECV_MIN {
                            libc::MSG_WAITALL
                        } else {
                            0
                        };
                        let e = on!(t, |fd| opcode::Recv::new(fd, ptr, len.min(MAX_IO) as u32)
                            .flags(wait)
                            .build()
                            .user_data(user_data(slot, gen, K_RECV)));
                        // SAFETY: the target is the socket's handshake or
                        // input buffer (not moved or freed while IO_RECV is
                        // set), or the engine's placement memory, valid until
                        // deliver or peer_failed, which wait for this RECV.
                        if unsafe { self.push(&e) } {
                            s.io |= IO_RECV;
                        } else {
                            retry = true;
                        }
                    }
                }
                if s.io & IO_SEND == 0 {
                    let hs = s.hs_pending();
                    if !hs.is_empty() {
                        let e = on!(t, |fd| opcode::Send::new(fd, hs.as_ptr(), hs.len() as u32)
                            .flags(libc::MSG_NOSIGNAL)
                            .build()
                            .user_data(user_data(slot, gen, K_SEND)));
                        // SAFETY: `s.hs` is boxed in the socket, which is not
                        // released while IO_SEND is set.
                        if unsafe { self.push(&e) } {
                            s.io |= IO_SEND;
                            s.send_hs = true;
                        } else {
                            retry = true;
                        }
                    } else if s.phase == Phase::Open {
                        // A detached socket writes its own queue.
                        let out = if s.detached {
                            Some(&mut s.drain)
                        } else {
                            s.peer
                                .and_then(|q| peers.get_mut(&q))
                                .filter(|p| p.open)
                                .map(|p| &mut p.out)
                        };
                        match out {
                            Some(out) if out.in_flight() => {}
                            Some(out) if !out.is_empty() => {
                                // The socket first, by plain nonblocking
                                // calls: with room it takes the bytes at
                                // once (no SQE, no completion, no task
                                // work); only the rest waits in a SEND.
                                let fd = s.fd.as_raw_fd();
                                loop {
                                    let front = out.front();
                                    if front.is_empty() {
                                        break;
                                    }
                                    direct += 1;
                                    match sys::send(fd, &[front]) {
                                        Ok(n) if n == front.len() => out.advance(n),
                                        Ok(n) => {
                                            out.advance(n);
                                            break;
                                        }
                                        Err(e) if sys::would_block(&e) => break,
                                        Err(e) => {
                                            failed = Some(e);
                                            break;
                                        }
                                    }
                                }
                                if failed.is_some() {
                                } else if out.is_empty() {
                                    // A detached socket shuts down next.
                                    retry |= s.detached;
                                } else if spinning {
                                    // Polled by plain calls anyway: the
                                    // next poll writes on, as the poll
                                    // backend does, where a SEND would
                                    // wait for task work at our enters.
                                    retry = true;
                                } else {
                                    let (ptr, len) = out.start_flight();
                                    let len = len.min(MAX_IO) as u32;
                                    let flags = libc::MSG_NOSIGNAL | libc::MSG_WAITALL;
                                    let ud = user_data(slot, gen, K_SEND);
                                    let zc = len as usize >= ZC_MIN
                                        && match self.ring.send_zc {
                                            Some(ZeroCopy::Always) => true,
                                            Some(ZeroCopy::Remote) => *s
                                                .remote
                                                .get_or_insert_with(|| sys::peer_on_other_host(fd)),
                                            _ => false,
                                        };
                                    self.zc_sends += zc as u64;
                                    let e = if zc {
                                        on!(t, |fd| opcode::SendZc::new(fd, ptr, len)
                                            .flags(flags)
                                            .build()
                                            .user_data(ud))
                                    } else {
                                        on!(t, |fd| opcode::Send::new(fd, ptr, len)
                                            .flags(flags)
                                            .build()
                                            .user_data(ud))
                                    };
                                    // SAFETY: the queue's sending buffer is frozen
                                    // until `end_flight`, called on this
                                    // completion (a zero-copy one's
                                    // notification), and lives until then
                                    // (moved into this socket if the peer goes).
                                    if unsafe { self.push(&e) } {
                                        s.io |= IO_SEND;
                                        s.send_hs = false;
                                        s.out_flight = true;
                                    } else {
                                        out.end_flight(0);
                                        retry = true;
                                    }
                                }
                            }
                            Some(_) if s.detached && !s.wr_shut => {
                                // Drained (nothing in flight or left):
                                // the other side reads end of stream.
                                s.wr_shut = true;
                                sys::shutdown_write(s.fd.as_raw_fd());
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        st.calls += direct;
        if let Some(e) = failed {
            st.sock_failed(slot, format!("send: {e}"));
        } else if retry {
            st.mark_dirty(slot);
        }
    }
}
