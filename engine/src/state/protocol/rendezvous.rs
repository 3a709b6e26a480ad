//! Rendezvous (see `protocol.rs`): a matched `Rts` is read with the
//! transport's one-sided read or streamed after a `Cts` as `Data` pieces,
//! which a netmod may write in place (`placement`); and who may still be
//! writing into a receive's buffer (`remote_writer`).

use std::ptr::NonNull;

use super::truncation;
use crate::matching::Envelope;
use crate::pg::{Outgoing, VcId};
use crate::route::{CmaState, Route};
use crate::state::{ReadWant, State, Unexpected};
use crate::status::Status;
use crate::table::{Op, RecvOp, RecvPhase, Req};
use crate::wire::{control, MsgKind, WireHeader, FLAG_RMA_KEY};

impl State {
    pub(super) fn on_rts(&mut self, from: VcId, h: &WireHeader, payload: &[u8]) {
        // The sender's pid (unused, see `pid_bytes`), then maybe a key.
        if payload.len() < 4 {
            return self.fail(format!(
                "rank {from} sent a rendezvous request without its pid"
            ));
        }
        let key = if h.flags & FLAG_RMA_KEY != 0 {
            match payload.get(4..12) {
                Some(k) => Some(u64::from_le_bytes(k.try_into().expect("8 bytes"))),
                None => {
                    return self.fail(format!(
                        "rank {from} sent a rendezvous request flagged with a key but without one"
                    ))
                }
            }
        } else {
            None
        };
        let env = Envelope {
            context: h.context,
            source: h.src,
            tag: h.tag,
        };
        let rts = Unexpected::Rts {
            len: h.len,
            addr: h.aux,
            key,
            sreq: h.sreq,
            vc: from,
        };
        match self.matcher.match_posted(env) {
            Some(rreq) => self.start_rendezvous_recv(rreq, env, rts),
            None => self.matcher.push_unexpected(env, rts),
        }
    }

    pub(crate) fn start_rendezvous_recv(&mut self, rreq: u64, env: Envelope, rts: Unexpected) {
        let Unexpected::Rts {
            len,
            addr,
            key,
            sreq,
            vc: from,
        } = rts
        else {
            return;
        };
        let Some(req) = self.requests.get_mut(rreq) else {
            return;
        };
        let Op::Recv(r) = &mut req.op else {
            return;
        };
        let want = (len as usize).min(r.cap);
        let buf = r.buf;
        req.status = Status {
            source: env.source as i32,
            tag: env.tag,
            count: want,
            cancelled: false,
            error: truncation(len, r.cap),
        };
        if self.pgs.vc(from).is_ok_and(|vc| vc.failed) {
            return self.fail_request(rreq, from);
        }
        // The transport's one-sided read: shared memory's single copy
        // (where allowed and not refused by that peer before), a netmod's
        // read with the key the `Rts` carries.
        let (route, cma) = match self.pgs.vc(from) {
            Ok(vc) => (vc.route, vc.cma),
            Err(_) => (Route::Loopback, CmaState::Refused),
        };
        let key = match route {
            _ if want == 0 => None,
            Route::Shm(peer) if self.cma_allowed && cma != CmaState::Refused => {
                // Copies go to the process at that shm slot (the shm
                // transport's pid for it), never one the peer names.
                if cma == CmaState::Works && self.split_min != 0 && want >= self.split_min {
                    return self.start_split_copy(
                        rreq,
                        from,
                        peer,
                        addr,
                        buf,
                        want,
                        env.context,
                        sreq,
                    );
                }
                Some(0)
            }
            Route::Netmod(_) => key,
            _ => None,
        };
        let Some(key) = key else {
            return self.ask_to_stream(rreq, from, env.context, sreq, want);
        };
        // Read by `Transports::run_reads` after the poll, outside the
        // transport that delivered the `Rts`.
        self.set_recv_phase(rreq, RecvPhase::Reading { from });
        self.rma.wanted.push(ReadWant {
            rreq,
            from,
            addr,
            key,
            len: want,
            context: env.context,
            sreq,
        });
    }

    /// Answer a rendezvous request with `Cts`: the sender streams `want`
    /// bytes as `Data` pieces into receive `rreq`.
    pub(crate) fn ask_to_stream(
        &mut self,
        rreq: u64,
        from: VcId,
        context: u32,
        sreq: u64,
        want: usize,
    ) {
        let mut cts = control(MsgKind::Cts, context, sreq);
        cts.aux = rreq;
        cts.len = want as u64;
        if want == 0 {
            self.set_recv_phase(rreq, RecvPhase::Done);
            self.complete(rreq);
        } else {
            self.set_recv_phase(
                rreq,
                RecvPhase::Streaming {
                    total: want as u64,
                    received: 0,
                    from,
                },
            );
        }
        self.reply(from, cts);
    }

    pub(crate) fn set_recv_phase(&mut self, rreq: u64, phase: RecvPhase) {
        if let Some(Req {
            op: Op::Recv(r), ..
        }) = self.requests.get_mut(rreq)
        {
            r.phase = phase;
        }
    }

    /// The receiver matched our rendezvous request and wants `h.len` bytes
    /// streamed as `Data` pieces for its request `h.aux`.
    pub(super) fn on_cts(&mut self, from: VcId, h: &WireHeader) {
        let piece = match self.pgs.vc(from) {
            Ok(vc) => self.limits.of(vc.route).piece,
            Err(_) => self.limits.shm.piece,
        };
        if !self.names_send_to(from, h.sreq, "a Cts") {
            return;
        }
        let Some(Req {
            op: Op::Send(s), ..
        }) = self.requests.get_mut(h.sreq)
        else {
            return;
        };
        if let Err(why) = s.on_cts() {
            return self.misbehaved(from, why);
        }
        let want = (h.len as usize).min(s.len);
        if want == 0 {
            return self.streamed(h.sreq);
        }
        let header = WireHeader {
            kind: MsgKind::Data as u8,
            context: s.context,
            tag: s.tag,
            sreq: h.sreq,
            aux: h.aux,
            ..WireHeader::default()
        };
        let stream = Outgoing::Stream {
            header,
            buf: s.buf,
            len: want,
            offset: 0,
            piece,
            sreq: h.sreq,
        };
        if let Err(e) = self.queue(from, stream) {
            self.fail(format!("streaming to rank {from}: {e}"));
        }
    }

    pub(super) fn on_data(&mut self, from: VcId, h: &WireHeader, payload: &[u8]) {
        let rreq = h.aux;
        let Some(Req {
            op: Op::Recv(r), ..
        }) = self.requests.get_mut(rreq)
        else {
            return;
        };
        let RecvPhase::Streaming {
            total,
            received,
            from: sender,
        } = r.phase
        else {
            return;
        };
        if sender != from {
            return self.fail(format!(
                "rank {from} sent data for a message rank {sender} is sending"
            ));
        }
        let offset = h.len;
        let end = offset.checked_add(payload.len() as u64);
        if end.is_none_or(|end| end > total) {
            return self.fail(format!(
                "rank {from} sent {} bytes at offset {offset} of a {total}-byte message",
                payload.len()
            ));
        }
        // SAFETY: offset + len <= total <= cap, checked above; the receive
        // owns its buffer until it completes.
        let dst = unsafe { r.buf.add(offset as usize) };
        // A netmod that was given this spot (`placement`) wrote the bytes
        // there already.
        if !std::ptr::eq(payload.as_ptr(), dst) {
            // SAFETY: as above; transport buffers never overlap user ones.
            unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), dst, payload.len()) };
        }
        let received = received + payload.len() as u64;
        if received >= total {
            r.phase = RecvPhase::Done;
            self.complete(rreq);
        } else {
            r.phase = RecvPhase::Streaming {
                total,
                received,
                from,
            };
        }
    }

    /// Where a netmod may write the payload of an arriving `Data` piece
    /// directly: its spot in the matched receive buffer.
    pub fn placement(&mut self, from: VcId, h: &WireHeader, len: usize) -> Option<NonNull<u8>> {
        if h.kind() != Some(MsgKind::Data) {
            return None;
        }
        let Some(Req {
            op: Op::Recv(r), ..
        }) = self.requests.get(h.aux)
        else {
            return None;
        };
        let RecvPhase::Streaming {
            total,
            from: sender,
            ..
        } = r.phase
        else {
            return None;
        };
        let end = h.len.checked_add(len as u64)?;
        if sender != from || end > total {
            return None;
        }
        // SAFETY: offset + len <= total <= cap: inside the receive buffer,
        // which the receive owns until it completes (and a streaming
        // receive completes only when its last piece is delivered, or when
        // the peer fails, after the netmod has dropped this pointer).
        NonNull::new(unsafe { r.buf.add(h.len as usize) })
    }

    /// The peer that may be writing into receive `id`'s buffer now from
    /// outside the engine lock: a netmod peer that streams to it (and may
    /// have been given the buffer, `placement`) or that we read from into
    /// it (`rma.rs`), or a shared-memory peer writing its part of a shared
    /// copy (`copy.rs`).
    pub fn remote_writer(&mut self, id: u64) -> Option<VcId> {
        let from = match self.requests.get(id)?.op {
            Op::Recv(RecvOp {
                phase: RecvPhase::Copying { from, .. },
                ..
            }) => return Some(from),
            Op::Recv(RecvOp {
                phase: RecvPhase::Streaming { from, .. } | RecvPhase::Reading { from },
                ..
            }) => from,
            _ => return None,
        };
        let vc = self.pgs.vc(from).ok()?;
        matches!(vc.route, Route::Netmod(_)).then_some(from)
    }
}
