//! Receiving: read into the channel's buffer (or straight into the
//! engine's memory), cut packets in place, act on each (3.7's protocol
//! actions: deliver, answer, stream, acknowledge).

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsRawFd;

use super::super::packet::{Kind, Packet, HEADER_LEN};
use super::super::protocol::{Action, Incoming};
use super::rx::PEEK;
use super::{
    protocol, split_message, Arrivals, Arriving, Channel, Placing, Rx, Streaming, LEN_PREFIX,
    PLACE_MIN, READS_PER_POLL,
};
use crate::tcp::sys;

impl Channel {
    /// Read what arrived and act on it, handing each whole engine message
    /// (header, payload) to `deliver`; `Ok(false)` once the peer closed.
    /// Protocol ACKs this makes due, and other packets it makes possible,
    /// are written (what the socket does not take waits in `out`).
    pub fn read(&mut self, deliver: &mut dyn Arrivals) -> io::Result<bool> {
        let mut rx = std::mem::take(&mut self.rx);
        let r = self.read_with(&mut rx, deliver);
        self.rx = rx;
        r
    }

    fn read_with(&mut self, rx: &mut Rx, deliver: &mut dyn Arrivals) -> io::Result<bool> {
        let Some(fd) = self.sock.as_ref().map(|s| s.as_raw_fd()) else {
            return Ok(true);
        };
        let pending_before = self.out.len() - self.out_at;
        for _ in 0..READS_PER_POLL {
            if self.skip > 0 {
                let room = rx.room();
                let want = room.len().min(self.skip);
                self.syscalls += 1;
                // SAFETY: `room` has at least `want` writable bytes.
                let n = match unsafe { sys::recv(fd, room.as_mut_ptr(), want) } {
                    Ok(0) => return Ok(false),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                };
                self.skip -= n;
                continue;
            }
            if let Some(pl) = self.placing.as_mut() {
                let want = pl.len - pl.got;
                self.syscalls += 1;
                // SAFETY: `dst..dst+len` is the engine's writable memory
                // until we deliver it (Sink::place), and `got < len`.
                let n = match unsafe { sys::recv(fd, pl.dst.as_ptr().add(pl.got), want) } {
                    Ok(0) => return Ok(false),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                };
                pl.got += n;
                if pl.got == pl.len {
                    let pl = self.placing.take().expect("placing");
                    // SAFETY: all `len` bytes at `dst` were written above.
                    let payload = unsafe { std::slice::from_raw_parts(pl.dst.as_ptr(), pl.len) };
                    deliver.deliver(&self.placed_header, payload);
                    rx.peek = true;
                }
                if n < want {
                    break;
                }
                continue;
            }
            let peek = std::mem::take(&mut rx.peek);
            let room = rx.room();
            let want = if peek {
                room.len().min(PEEK)
            } else {
                room.len()
            };
            self.syscalls += 1;
            // SAFETY: `room` is `want` writable bytes of our buffer.
            let n = match unsafe { sys::recv(fd, room.as_mut_ptr(), want) } {
                Ok(0) => return Ok(false),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    rx.peek = peek;
                    break;
                }
                Err(e) => return Err(e),
            };
            rx.end += n;
            let start = rx.start;
            self.parse(rx, deliver)?;
            // Peek on while no packet's header is in yet.
            rx.peek = peek && self.placing.is_none() && rx.start == start && rx.need == 0;
            if n < want {
                break;
            }
        }
        let before = self.out.len();
        if !(self.queue.is_empty() && self.ctl.is_empty() && self.streaming.is_empty()) {
            self.pump();
        }
        if pending_before > 0 || self.out.len() > before || self.ack_due {
            self.ack_due = false;
            self.flush()?;
        }
        Ok(true)
    }

    /// Act on every whole packet in `rx`.
    fn parse(&mut self, rx: &mut Rx, deliver: &mut dyn Arrivals) -> io::Result<()> {
        while rx.end - rx.start >= HEADER_LEN {
            let at = rx.start;
            let p =
                Packet::decode(&rx.buf[at..at + HEADER_LEN], self.maxdatalen).map_err(protocol)?;
            let dlen = if p.kind.carries_data() {
                p.len as usize
            } else {
                0
            };
            if rx.end - at < HEADER_LEN + dlen {
                if dlen >= PLACE_MIN && !rx.declined && self.try_place(&p, rx, deliver)? {
                    return Ok(());
                }
                rx.need = HEADER_LEN + dlen;
                break;
            }
            rx.need = 0;
            rx.declined = false;
            rx.start = at + HEADER_LEN + dlen;
            self.on_packet(&p, &rx.buf[at + HEADER_LEN..rx.start], deliver)?;
        }
        Ok(())
    }

    /// A large whole short message whose engine header is in but not all
    /// its payload: offered to the engine, and if it gives memory, the
    /// payload's first bytes are copied there and the rest is received
    /// straight into it (`placing`). `false`: keep buffering.
    fn try_place(
        &mut self,
        p: &Packet,
        rx: &mut Rx,
        deliver: &mut dyn Arrivals,
    ) -> io::Result<bool> {
        if !Incoming::is_short_data(p)
            || !self.order.is_empty()
            || p.src != self.them
            || p.dest != self.me
        {
            return Ok(false);
        }
        let d = rx.start + HEADER_LEN;
        let Some(hlen) = rx.buf[d..rx.end]
            .get(..LEN_PREFIX)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
        else {
            return Ok(false);
        };
        let dlen = p.len as usize;
        let body = d + LEN_PREFIX + hlen;
        if LEN_PREFIX + hlen > dlen || rx.end < body {
            return Ok(false);
        }
        let len = dlen - LEN_PREFIX - hlen;
        let Some(dst) = deliver.place(&rx.buf[d + LEN_PREFIX..body], len) else {
            rx.declined = true;
            return Ok(false);
        };
        self.check_len(p.msglen)?;
        if let Some(ack) = self.incoming.take_short(p).map_err(protocol)? {
            self.put_ack(&ack);
        }
        let have = rx.end - body;
        self.copied += have as u64;
        // SAFETY: `dst` has `len` writable bytes (Sink::place) and `have <
        // len`, since the packet is not all in; the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(rx.buf[body..].as_ptr(), dst.as_ptr(), have);
        }
        self.placed_header.clear();
        self.placed_header
            .extend_from_slice(&rx.buf[d + LEN_PREFIX..body]);
        self.placing = Some(Placing {
            dst,
            len,
            got: have,
        });
        rx.start = rx.end;
        rx.need = 0;
        rx.declined = false;
        Ok(true)
    }

    fn on_packet(&mut self, p: &Packet, data: &[u8], deliver: &mut dyn Arrivals) -> io::Result<()> {
        if p.kind != Kind::Fini && (p.src != self.them || p.dest != self.me) {
            return Err(protocol(format!(
                "a {:?} packet from {:?} to {:?} on the channel between {:?} and {:?}",
                p.kind, p.src, p.dest, self.them, self.me
            )));
        }
        // The fast path: a whole short message, nothing before it pending.
        if Incoming::is_short_data(p) && self.order.is_empty() {
            self.check_len(p.msglen)?;
            if let Some(ack) = self.incoming.take_short(p).map_err(protocol)? {
                self.put_ack(&ack);
            }
            let (h, payload) = split_message(data)
                .ok_or_else(|| protocol("a message without its engine header"))?;
            deliver.deliver(h, payload);
            return Ok(());
        }
        let mut actions: VecDeque<Action> = self.incoming.on_packet(p).map_err(protocol)?.into();
        let mut data = Some(data);
        while let Some(a) = actions.pop_front() {
            match a {
                Action::Send(reply) if reply.kind == Kind::ProtoAck => self.put_ack(&reply),
                Action::Send(reply) => {
                    if !self.fini_sent {
                        self.ctl.push_back(reply);
                    }
                }
                Action::Message { id, first } => {
                    self.check_len(first.msglen)?;
                    let mut buf = Vec::with_capacity(first.msglen as usize);
                    buf.extend_from_slice(data.take().unwrap_or_default());
                    self.arriving.insert(
                        id,
                        Arriving {
                            buf,
                            complete: false,
                        },
                    );
                    self.order.push_back(id);
                    // The funnel: the engine takes every message at once.
                    actions.extend(self.incoming.matched(id).map_err(protocol)?);
                }
                Action::Continue { id, offset, .. } => {
                    let a = self
                        .arriving
                        .get_mut(&id)
                        .ok_or_else(|| protocol("data for a message not arriving"))?;
                    if a.buf.len() as u64 != offset {
                        return Err(protocol("continuation out of order"));
                    }
                    a.buf.extend_from_slice(data.take().unwrap_or_default());
                }
                Action::Complete { id } => {
                    if let Some(a) = self.arriving.get_mut(&id) {
                        a.complete = true;
                    }
                }
                Action::Destroy { id } => {
                    self.arriving.remove(&id);
                    self.order.retain(|&x| x != id);
                }
                Action::ForSender(reply) => match reply.kind {
                    Kind::SyncAck => {
                        let mut m = self.awaiting.remove(&reply.srqid).ok_or_else(|| {
                            protocol(format!(
                                "SYNCACK for request {} not awaiting one",
                                reply.srqid
                            ))
                        })?;
                        let packets: VecDeque<_> =
                            m.out.on_syncack(&reply).map_err(protocol)?.into();
                        if !packets.is_empty() {
                            self.streaming.push_back(Streaming {
                                data: m.data,
                                packets,
                            });
                        }
                    }
                    other => {
                        return Err(protocol(format!(
                            "{other:?} for a cancel this side never asked"
                        )))
                    }
                },
                Action::ProtoAck { .. } => self.credit.acked().map_err(protocol)?,
                Action::Fini => self.fini_got = true,
            }
        }
        while let Some(&id) = self.order.front() {
            if !self.arriving.get(&id).is_some_and(|a| a.complete) {
                break;
            }
            self.order.pop_front();
            let a = self.arriving.remove(&id).expect("checked");
            let (h, payload) = split_message(&a.buf)
                .ok_or_else(|| protocol("a message without its engine header"))?;
            deliver.deliver(h, payload);
        }
        Ok(())
    }

    fn check_len(&self, msglen: u64) -> io::Result<()> {
        if msglen > self.max_msg || msglen < LEN_PREFIX as u64 {
            return Err(protocol(format!(
                "a message of {} bytes (this side takes {}..={})",
                msglen, LEN_PREFIX, self.max_msg
            )));
        }
        Ok(())
    }
}
