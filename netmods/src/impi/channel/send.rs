//! Sending: an engine message becomes one IMPI message, written at once
//! when credit allows and nothing waits before it, else left with the
//! engine (a short one) or encoded in `out` as credit comes (replies
//! first, then long messages' continuations, then new long messages).
//! Protocol ACKs cut in at the next packet boundary of `out`.

use std::io;
use std::os::fd::AsRawFd;

use super::super::packet::{Packet, HEADER_LEN};
use super::super::protocol::{Envelope, Outgoing};
use super::{
    engine_envelope, Channel, Pending, COALESCE_BELOW, COALESCE_FLUSH, HOLD_FROM, LEN_PREFIX,
    OUT_HIGH, QUEUE_MAX,
};
use crate::tcp::sys;

impl Channel {
    /// Take one engine message; `false`: full for now (the engine keeps
    /// the message and offers it again after a poll).
    ///
    /// A short message goes only when it can be written at once: credit,
    /// nothing queued before it, and, if it is large, nothing left in
    /// `out` (behind which it would be copied whole). Otherwise it stays
    /// with the engine, which holds its buffer anyway, so a sender that
    /// waits for the pair's flow control or a full socket copies nothing;
    /// once it goes, only what the socket does not take is copied.
    pub fn take(&mut self, header: &[u8], payload: &[u8]) -> io::Result<bool> {
        let len = LEN_PREFIX + header.len() + payload.len();
        if len as u64 > u64::from(self.maxdatalen) || self.fini_sent {
            return self.take_long(header, payload);
        }
        if !(self.ctl.is_empty() && self.streaming.is_empty() && self.queue.is_empty()) {
            self.pump();
        }
        let waiting = self.out.len() - self.out_at;
        if (waiting >= 4 * OUT_HIGH || (waiting > 0 && len >= HOLD_FROM)) && !self.socket_full {
            self.flush()?;
        }
        let waiting = self.out.len() - self.out_at;
        if !(self.queue.is_empty()
            && self.ctl.is_empty()
            && self.streaming.is_empty()
            && self.credit.can_send())
            || waiting >= 4 * OUT_HIGH
            || (waiting > 0 && len >= HOLD_FROM)
        {
            if !self.socket_full {
                self.flush()?;
            }
            self.refused += 1;
            return Ok(false);
        }
        let mut out = self.outgoing(header, len);
        let (p, _) = out.first();
        let mut head = [0u8; HEADER_LEN + LEN_PREFIX];
        head[..HEADER_LEN].copy_from_slice(&p.encode());
        head[HEADER_LEN..].copy_from_slice(&(header.len() as u32).to_be_bytes());
        self.packets_out += 1;
        self.credit.sent();
        let coalesce = len < COALESCE_BELOW && self.wrote_since_poll;
        match self.sock.as_ref() {
            Some(s) if !coalesce => {
                // Straight from the caller's buffers, behind what `out`
                // still holds, in one vectored write; only what the socket
                // does not take is copied into `out`.
                self.wrote_since_poll = true;
                self.syscalls += 1;
                let parts = [&self.out[self.out_at..], &head[..], header, payload];
                let n = match sys::send(s.as_raw_fd(), &parts) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                    Err(e) => return Err(e),
                };
                self.socket_full = n < waiting + HEADER_LEN + len;
                if n <= waiting {
                    self.advance(n);
                    self.append(&[&head, header, payload]);
                } else {
                    self.out.clear();
                    self.out_at = 0;
                    self.bounds.clear();
                    let mut skip = n - waiting;
                    for part in [&head[..], header, payload] {
                        let k = skip.min(part.len());
                        self.out.extend_from_slice(&part[k..]);
                        self.copied_out += (part.len() - k) as u64;
                        skip -= k;
                    }
                    if !self.out.is_empty() {
                        self.bounds.push_back(self.out.len());
                    }
                }
            }
            _ => {
                self.append(&[&head, header, payload]);
                if !coalesce || self.out.len() - self.out_at >= COALESCE_FLUSH {
                    self.flush()?;
                }
            }
        }
        Ok(true)
    }

    /// A new IMPI message of `len` bytes from this pair, addressed as the
    /// engine `header` says, with the next send request id.
    fn outgoing(&mut self, header: &[u8], len: usize) -> Outgoing {
        let (lsrank, tag, cid) = engine_envelope(header);
        let env = Envelope {
            src: self.me,
            dest: self.them,
            lsrank,
            tag,
            cid,
        };
        let srqid = self.next_srqid;
        self.next_srqid += 1;
        Outgoing::new(env, srqid, len as u64, false, self.maxdatalen)
    }

    /// A message of several packets (3.7's long protocol, with a peer of
    /// smaller `maxdatalen`), or one after our FINI (never sent): copied,
    /// since its later packets go only after the receiver's SYNCACK.
    fn take_long(&mut self, header: &[u8], payload: &[u8]) -> io::Result<bool> {
        if self.queue.len() >= QUEUE_MAX || self.out.len() - self.out_at >= 4 * OUT_HIGH {
            self.pump();
            self.flush()?;
            self.refused += 1;
            return Ok(false);
        }
        let len = LEN_PREFIX + header.len() + payload.len();
        let out = self.outgoing(header, len);
        let mut data = Vec::with_capacity(len);
        data.extend_from_slice(&(header.len() as u32).to_be_bytes());
        data.extend_from_slice(header);
        data.extend_from_slice(payload);
        self.queue.push_back(Pending { data, out });
        self.pump();
        self.flush()?;
        Ok(true)
    }

    /// `n` more bytes of `out` were written.
    fn advance(&mut self, n: usize) {
        self.out_at += n;
        while self.bounds.front().is_some_and(|&b| b < self.out_at) {
            self.bounds.pop_front();
        }
    }

    /// Queue a protocol ACK where it leaves soonest: at the end of the
    /// packet being written (the stream cannot be cut inside one), ahead
    /// of whatever else waits in `out`, so a peer stalled on our ACK does
    /// not wait for the data queued before it (3.6: "expedite").
    pub(super) fn put_ack(&mut self, p: &Packet) {
        let ack = p.encode();
        self.packets_out += 1;
        self.ack_due = true;
        match self.bounds.front().copied() {
            Some(at) if at >= self.out_at && at < self.out.len() => {
                self.out.splice(at..at, ack);
                for b in self.bounds.iter_mut().skip(1) {
                    *b += HEADER_LEN;
                }
                self.bounds.insert(1, at + HEADER_LEN);
            }
            _ => self.append(&[&ack]),
        }
    }

    /// Append bytes to `out`: reset first when everything was written, and
    /// the written front dropped once it is half of `out`, so a socket that
    /// never drains completely (a stream of large messages) keeps `out` at
    /// about twice what waits rather than growing with all that went.
    /// `parts` make one packet (its end is recorded in `bounds`).
    fn append(&mut self, parts: &[&[u8]]) {
        if self.out_at == self.out.len() {
            self.out.clear();
            self.out_at = 0;
            self.bounds.clear();
        } else if self.out_at > 0 && self.out_at >= self.out.len() / 2 {
            self.out.drain(..self.out_at);
            for b in self.bounds.iter_mut() {
                *b -= self.out_at;
            }
            self.out_at = 0;
        }
        for p in parts {
            self.out.extend_from_slice(p);
            self.copied_out += p.len() as u64;
        }
        self.bounds.push_back(self.out.len());
    }

    pub(super) fn put(&mut self, p: &Packet, data: &[u8]) {
        self.append(&[&p.encode(), data]);
        self.packets_out += 1;
    }

    /// Encode what credit allows: replies first, then streams, then new messages.
    pub fn pump(&mut self) {
        while self.out.len() - self.out_at < OUT_HIGH && self.credit.can_send() && !self.fini_sent {
            if let Some(p) = self.ctl.pop_front() {
                self.put(&p, &[]);
            } else if let Some(s) = self.streaming.front_mut() {
                let (p, r) = s.packets.pop_front().expect("streams are never empty");
                let data = std::mem::take(&mut s.data);
                self.put(&p, &data[r.start as usize..r.end as usize]);
                let s = self.streaming.front_mut().expect("still there");
                s.data = data;
                if s.packets.is_empty() {
                    self.streaming.pop_front();
                }
            } else if let Some(mut m) = self.queue.pop_front() {
                let (p, r) = m.out.first();
                self.put(&p, &m.data[r.start as usize..r.end as usize]);
                if !m.out.complete() {
                    self.awaiting.insert(p.srqid, m);
                }
            } else {
                break;
            }
            self.credit.sent();
        }
    }

    /// Write what the socket takes.
    pub fn flush(&mut self) -> io::Result<()> {
        let Some(sock) = self.sock.as_ref() else {
            return Ok(());
        };
        let fd = sock.as_raw_fd();
        while self.out_at < self.out.len() {
            self.syscalls += 1;
            let left = self.out.len() - self.out_at;
            match sys::send(fd, &[&self.out[self.out_at..]]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                // A short write: the socket is full, and trying again now
                // would only return EAGAIN.
                Ok(n) if n < left => {
                    self.advance(n);
                    self.socket_full = true;
                    break;
                }
                Ok(n) => self.advance(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.socket_full = true;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if self.out_at == self.out.len() {
            self.out.clear();
            self.out_at = 0;
            self.bounds.clear();
        }
        Ok(())
    }

    /// Send `IMPI_PK_FINI` (3.8): after it only protocol ACKs go.
    pub fn send_fini(&mut self) {
        if !self.fini_sent {
            self.put(&Packet::fini(), &[]);
            self.fini_sent = true;
        }
    }
}
