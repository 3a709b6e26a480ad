//! One direct channel between two procs of different clients: a TCP
//! connection carrying chapter 3's packets, driven without blocking.
//!
//! Each engine message is one IMPI message whose user data is the engine's
//! header (after a 4-byte big-endian length) and payload: the agent acts
//! as a funnel (3.5's advice), the engine matching on top. So a first
//! packet "matches" as soon as it has arrived, and a receiver answers a
//! long message's `DATASYNC` at once; `CANCEL` is answered (`CANCELNO`,
//! the message having been taken) but never sent, since the engine cancels
//! with messages of its own. Messages are delivered in the order of their
//! first packets, so a short one sent behind a long one waits for it.
//!
//! Sending obeys the pair's flow control (the destination host's
//! ackmark/hiwater): a counted packet goes only with credit. What is
//! encoded waits in `out` until the socket takes it.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::ops::Range;

use super::flow::Credit;
use super::framer::Framer;
use super::packet::{Kind, Packet, Proc};
use super::protocol::{Action, Envelope, Incoming, Outgoing};

/// Encoded bytes a channel holds before it stops encoding more.
const OUT_HIGH: usize = 1 << 20;
/// Messages a channel queues before `try_send` says "full".
const QUEUE_MAX: usize = 64;
/// Bytes read per `read` call, and reads per poll.
const READ_CHUNK: usize = 256 * 1024;
const READS_PER_POLL: usize = 8;

/// A message not yet started: its user data (length, header, payload).
struct Pending {
    data: Vec<u8>,
    out: Outgoing,
}

/// A long message whose `SYNCACK` came: its remaining packets.
struct Streaming {
    data: Vec<u8>,
    packets: VecDeque<(Packet, Range<u64>)>,
}

/// A message arriving: its bytes so far, and whether all came.
struct Arriving {
    buf: Vec<u8>,
    complete: bool,
}

/// What a poll of the channel found.
pub enum Event {
    /// A whole engine message (header, payload).
    Message(Vec<u8>),
    /// The peer's `IMPI_PK_FINI` came.
    Fini,
}

pub struct Channel {
    pub sock: Option<TcpStream>,
    me: Proc,
    them: Proc,
    maxdatalen: u32,
    /// Largest message this side accepts (`msglen`).
    max_msg: u64,
    out: Vec<u8>,
    out_at: usize,
    /// Read buffer, kept (zeroing 256 KiB per read would cost more than the read).
    rbuf: Vec<u8>,
    framer: Framer,
    incoming: Incoming,
    credit: Credit,
    next_srqid: u64,
    queue: VecDeque<Pending>,
    /// Counted header-only packets (SYNCACK, cancel replies) awaiting credit.
    ctl: VecDeque<Packet>,
    streaming: VecDeque<Streaming>,
    awaiting: HashMap<u64, Pending>,
    arriving: HashMap<u64, Arriving>,
    order: VecDeque<u64>,
    pub fini_sent: bool,
    pub fini_got: bool,
    /// Packets and bytes written and read, for `describe`.
    pub packets_out: u64,
    pub syscalls: u64,
}

fn protocol(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

impl Channel {
    /// `ackmark`/`hiwater`: the destination host's (it buffers and acks);
    /// `my_ackmark`: this host's, for what this side receives.
    pub fn new(
        me: Proc,
        them: Proc,
        maxdatalen: u32,
        max_msg: u64,
        their_flow: (u32, u32),
        my_ackmark: u32,
    ) -> Channel {
        Channel {
            sock: None,
            me,
            them,
            maxdatalen,
            max_msg,
            out: Vec::new(),
            out_at: 0,
            rbuf: Vec::new(),
            framer: Framer::new(maxdatalen),
            incoming: Incoming::new(maxdatalen, my_ackmark),
            credit: Credit::new(their_flow.0, their_flow.1),
            next_srqid: 1,
            queue: VecDeque::new(),
            ctl: VecDeque::new(),
            streaming: VecDeque::new(),
            awaiting: HashMap::new(),
            arriving: HashMap::new(),
            order: VecDeque::new(),
            fini_sent: false,
            fini_got: false,
            packets_out: 0,
            syscalls: 0,
        }
    }

    /// Nothing waits to be encoded or written.
    pub fn idle(&self) -> bool {
        self.out_at == self.out.len()
            && self.queue.is_empty()
            && self.ctl.is_empty()
            && self.streaming.is_empty()
            && self.awaiting.is_empty()
    }

    /// Encoded bytes not yet written.
    pub fn wants_write(&self) -> bool {
        self.out_at < self.out.len()
    }

    /// Take one engine message; `false`: full for now.
    pub fn take(&mut self, header: &[u8], payload: &[u8]) -> io::Result<bool> {
        if self.queue.len() >= QUEUE_MAX || self.out.len() - self.out_at >= 4 * OUT_HIGH {
            self.pump();
            self.flush()?;
            return Ok(false);
        }
        let len = 4 + header.len() + payload.len();
        let env = Envelope {
            src: self.me,
            dest: self.them,
            lsrank: 0,
            tag: 0,
            cid: 0,
        };
        let srqid = self.next_srqid;
        self.next_srqid += 1;
        let mut out = Outgoing::new(env, srqid, len as u64, false, self.maxdatalen);
        // Fast path: a short message with credit and nothing queued goes
        // straight into the output buffer (one copy).
        if !out.is_long()
            && self.queue.is_empty()
            && self.ctl.is_empty()
            && self.streaming.is_empty()
            && self.credit.can_send()
            && !self.fini_sent
        {
            let (p, _) = out.first();
            if self.out_at == self.out.len() {
                self.out.clear();
                self.out_at = 0;
            }
            self.out.extend_from_slice(&p.encode());
            self.out
                .extend_from_slice(&(header.len() as u32).to_be_bytes());
            self.out.extend_from_slice(header);
            self.out.extend_from_slice(payload);
            self.packets_out += 1;
            self.credit.sent();
            self.flush()?;
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

    fn put(&mut self, p: &Packet, data: &[u8]) {
        if self.out_at == self.out.len() {
            self.out.clear();
            self.out_at = 0;
        }
        self.out.extend_from_slice(&p.encode());
        self.out.extend_from_slice(data);
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
        let Some(sock) = self.sock.as_mut() else {
            return Ok(());
        };
        while self.out_at < self.out.len() {
            self.syscalls += 1;
            match sock.write(&self.out[self.out_at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
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

    /// Read what arrived and act on it; `Ok(false)` once the peer closed.
    pub fn read(&mut self, events: &mut Vec<Event>) -> io::Result<bool> {
        let mut buf = std::mem::take(&mut self.rbuf);
        buf.resize(READ_CHUNK, 0);
        let r = self.read_into(&mut buf, events);
        self.rbuf = buf;
        r
    }

    fn read_into(&mut self, buf: &mut [u8], events: &mut Vec<Event>) -> io::Result<bool> {
        for _ in 0..READS_PER_POLL {
            let Some(sock) = self.sock.as_mut() else {
                return Ok(true);
            };
            self.syscalls += 1;
            let n = match sock.read(buf) {
                Ok(0) => return Ok(false),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            for (p, data) in self.framer.push(&buf[..n]).map_err(protocol)? {
                self.on_packet(&p, data, events)?;
            }
            if n < buf.len() {
                break;
            }
        }
        self.pump();
        self.flush()?;
        Ok(true)
    }

    fn on_packet(&mut self, p: &Packet, data: Vec<u8>, events: &mut Vec<Event>) -> io::Result<()> {
        if p.kind != Kind::Fini && (p.src != self.them || p.dest != self.me) {
            return Err(protocol(format!(
                "a {:?} packet from {:?} to {:?} on the channel between {:?} and {:?}",
                p.kind, p.src, p.dest, self.them, self.me
            )));
        }
        let mut actions: VecDeque<Action> = self.incoming.on_packet(p).map_err(protocol)?.into();
        let mut data = Some(data);
        while let Some(a) = actions.pop_front() {
            match a {
                Action::Send(reply) if reply.kind == Kind::ProtoAck => self.put(&reply, &[]),
                Action::Send(reply) => {
                    if !self.fini_sent {
                        self.ctl.push_back(reply);
                    }
                }
                Action::Message { id, first } => {
                    if first.msglen > self.max_msg || first.msglen < 4 {
                        return Err(protocol(format!(
                            "a message of {} bytes (this side takes 4..={})",
                            first.msglen, self.max_msg
                        )));
                    }
                    let mut buf = Vec::with_capacity(first.msglen as usize);
                    buf.extend_from_slice(&data.take().unwrap_or_default());
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
                    a.buf.extend_from_slice(&data.take().unwrap_or_default());
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
                Action::Fini => {
                    self.fini_got = true;
                    events.push(Event::Fini);
                }
            }
        }
        while let Some(&id) = self.order.front() {
            if !self.arriving.get(&id).is_some_and(|a| a.complete) {
                break;
            }
            self.order.pop_front();
            let a = self.arriving.remove(&id).expect("checked");
            events.push(Event::Message(a.buf));
        }
        Ok(())
    }
}

/// An engine message's (header, payload) from its IMPI user data.
pub fn split_message(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_be_bytes(buf.get(..4)?.try_into().ok()?) as usize;
    let rest = &buf[4..];
    (len <= rest.len()).then(|| rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (Channel, Channel) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a_sock = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b_sock, _) = l.accept().unwrap();
        let pa = Proc {
            hostid: [1; 16],
            pid: 1,
        };
        let pb = Proc {
            hostid: [2; 16],
            pid: 2,
        };
        let mut a = Channel::new(pa, pb, 1000, 1 << 20, (2, 4), 2);
        let mut b = Channel::new(pb, pa, 1000, 1 << 20, (2, 4), 2);
        for (c, s) in [(&mut a, a_sock), (&mut b, b_sock)] {
            s.set_nonblocking(true).unwrap();
            c.sock = Some(s);
        }
        (a, b)
    }

    #[test]
    fn long_and_short_messages_arrive_whole_and_in_send_order_under_flow_control() {
        let (mut a, mut b) = pair();
        let msgs: Vec<(Vec<u8>, Vec<u8>)> = [5000usize, 10, 0, 2500, 996]
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let header = vec![i as u8; 3 + i];
                (header, (0..n).map(|x| (x * 7 + i) as u8).collect())
            })
            .collect();
        let mut next = 0;
        let mut got = Vec::new();
        for _ in 0..100_000 {
            if next < msgs.len() && a.take(&msgs[next].0, &msgs[next].1).unwrap() {
                next += 1;
            }
            let mut ev = Vec::new();
            assert!(b.read(&mut ev).unwrap());
            assert!(a.read(&mut Vec::new()).unwrap());
            for e in ev {
                if let Event::Message(buf) = e {
                    let (h, p) = split_message(&buf).unwrap();
                    got.push((h.to_vec(), p.to_vec()));
                }
            }
            if got.len() == msgs.len() {
                break;
            }
        }
        assert_eq!(got, msgs, "every message whole, in send order");
        assert!(a.packets_out > 12, "the long ones went as several packets");
        // FINI both ways, then both sides are idle.
        a.send_fini();
        b.send_fini();
        let (mut ea, mut eb) = (Vec::new(), Vec::new());
        for _ in 0..10_000 {
            a.flush().unwrap();
            b.flush().unwrap();
            a.read(&mut ea).unwrap();
            b.read(&mut eb).unwrap();
            if a.fini_got && b.fini_got {
                break;
            }
        }
        assert!(a.fini_got && b.fini_got);
        assert!(a.idle() && b.idle());
    }

    #[test]
    fn a_message_over_the_limit_breaks_the_channel() {
        let (mut a, mut b) = pair();
        b.max_msg = 100;
        assert!(a.take(b"h", &[0u8; 200]).unwrap());
        let mut err = None;
        for _ in 0..10_000 {
            match b.read(&mut Vec::new()) {
                Err(e) => {
                    err = Some(e);
                    break;
                }
                Ok(_) => a.flush().unwrap(),
            }
        }
        let e = err.expect("refused");
        assert!(e.to_string().contains("this side takes"), "{e}");
        assert_eq!(split_message(&[0, 0, 0, 9, 1]), None);
        assert_eq!(
            split_message(&[0, 0, 0, 1, 7, 8]),
            Some((&[7u8][..], &[8u8][..]))
        );
    }
}
