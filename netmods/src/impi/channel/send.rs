//! Sending: an engine message becomes one IMPI message, written at once
//! when credit allows and nothing waits before it, else encoded in `out`
//! as credit comes (replies first, then long messages' continuations,
//! then new messages).

use std::io;
use std::os::fd::AsRawFd;

use super::super::packet::{Packet, HEADER_LEN};
use super::super::protocol::{Envelope, Outgoing};
use super::{
    engine_envelope, Channel, Pending, COALESCE_BELOW, COALESCE_FLUSH, LEN_PREFIX, OUT_HIGH,
    QUEUE_MAX,
};
use crate::tcp::sys;

impl Channel {
    /// Take one engine message; `false`: full for now.
    pub fn take(&mut self, header: &[u8], payload: &[u8]) -> io::Result<bool> {
        if self.queue.len() >= QUEUE_MAX || self.out.len() - self.out_at >= 4 * OUT_HIGH {
            self.pump();
            self.flush()?;
            return Ok(false);
        }
        let len = LEN_PREFIX + header.len() + payload.len();
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
        let mut out = Outgoing::new(env, srqid, len as u64, false, self.maxdatalen);
        // Fast path: a short message with credit and nothing queued before it.
        if !out.is_long()
            && self.queue.is_empty()
            && self.ctl.is_empty()
            && self.streaming.is_empty()
            && self.credit.can_send()
            && !self.fini_sent
        {
            let (p, _) = out.first();
            let mut head = [0u8; HEADER_LEN + LEN_PREFIX];
            head[..HEADER_LEN].copy_from_slice(&p.encode());
            head[HEADER_LEN..].copy_from_slice(&(header.len() as u32).to_be_bytes());
            self.packets_out += 1;
            self.credit.sent();
            let coalesce = len < COALESCE_BELOW && self.wrote_since_poll;
            match self.sock.as_ref() {
                Some(s) if !coalesce => {
                    // Straight from the caller's buffers, behind what
                    // `out` still holds, in one vectored write; only what
                    // the socket does not take is copied into `out`.
                    self.wrote_since_poll = true;
                    self.syscalls += 1;
                    let queued = self.out.len() - self.out_at;
                    let parts = [&self.out[self.out_at..], &head[..], header, payload];
                    let n = match sys::send(s.as_raw_fd(), &parts) {
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                        Err(e) => return Err(e),
                    };
                    if n <= queued {
                        self.out_at += n;
                        self.append(&[&head, header, payload]);
                    } else {
                        self.out.clear();
                        self.out_at = 0;
                        let mut skip = n - queued;
                        for part in [&head[..], header, payload] {
                            let k = skip.min(part.len());
                            self.out.extend_from_slice(&part[k..]);
                            skip -= k;
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
            return Ok(true);
        }
        let mut data = Vec::with_capacity(len);
        data.extend_from_slice(&(header.len() as u32).to_be_bytes());
        data.extend_from_slice(header);
        data.extend_from_slice(payload);
        self.queue.push_back(Pending { data, out });
        self.pump();
        self.flush()?;
        Ok(true)
    }

    /// Append bytes to `out`: reset first when everything was written, and
    /// the written front dropped once it is half of `out`, so a socket that
    /// never drains completely (a stream of large messages) keeps `out` at
    /// about twice what waits rather than growing with all that went.
    fn append(&mut self, parts: &[&[u8]]) {
        if self.out_at == self.out.len() {
            self.out.clear();
            self.out_at = 0;
        } else if self.out_at > 0 && self.out_at >= self.out.len() / 2 {
            self.out.drain(..self.out_at);
            self.out_at = 0;
        }
        for p in parts {
            self.out.extend_from_slice(p);
        }
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
                    self.out_at += n;
                    break;
                }
                Ok(n) => self.out_at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        if self.out_at == self.out.len() {
            self.out.clear();
            self.out_at = 0;
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
