//! What arrives: a generic receive's message routed by kind (HELLO,
//! VERDICT, CTS, keepalive, CREDIT, or a message in its connection's
//! sequence), messages handled in turn (delivered, a LARGE's payload
//! received, credits returned), and the keepalive round.

use std::time::Instant;

use libc::c_void;

use crate::{PeerId, Sink};

use super::conn::Tx;
use super::handshake::HelloOutcome;
use super::ops::{Dest, OpKind};
use super::order::Arrival;
use super::send::{process_exists, Refusal};
use super::sys::*;
use super::wire::*;
use super::OfiNetmod;

impl OfiNetmod {
    /// A message from a generic receive.
    pub(super) fn on_message(&mut self, t: u64, body: &[u8], sink: &mut dyn Sink) {
        let (kind, aux, id) = split_tag(t);
        // After the handshake, every message opens with its connection's
        // token: a forged one goes no further.
        if kind != KIND_HELLO && kind != KIND_VERDICT && !self.st.genuine(id, kind, body) {
            return;
        }
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
    pub(super) fn handle(&mut self, id: u32, kind: u8, seq: u32, body: &[u8], sink: &mut dyn Sink) {
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
    pub(super) fn start_payload(
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
    pub(super) fn payload_done(
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
    pub(super) fn release(&mut self, id: u32, sink: &mut dyn Sink) {
        while let Some((seq, h)) = self.st.take_next(id) {
            self.handle(id, h.kind, seq, &h.body, sink);
            self.handled(id);
        }
    }

    /// One more message of `id` handled: return credits every half window;
    /// the peer counts as busy for the receive pool.
    pub(super) fn handled(&mut self, id: u32) {
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
    pub(super) fn on_keepalive(&mut self, id: u32, aux: u32) {
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
    pub(super) fn on_cts(&mut self, id: u32, seq: u32) {
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

    pub(super) fn on_hello(&mut self, body: &[u8], sink: &mut dyn Sink) {
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
                body: encode_verdict(v, 0, 0, [0; 8]),
                since: Instant::now(),
            }),
        }
    }

    pub(super) fn on_verdict(&mut self, id: u32, body: &[u8]) {
        let v = match parse_verdict(body) {
            Ok(v) => v,
            Err(why) => return self.st.drop_msg(why.into()),
        };
        match self.st.verdict(id, &v) {
            Ok(()) => self.events += 1,
            Err(why) => self.fail_conn(id, why),
        }
    }
}
