//! One channel between two procs of different clients: a socket carrying
//! chapter 3's packets, driven without blocking. Usually a direct TCP
//! connection; for a pair without one, the socket to the agent (rivetrun),
//! which moves the packets over its host link (`IMPI_FUNNEL_FDS`).
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
//! The envelope fields of 3.5 (`pk_lsrank`, `pk_tag`, `pk_cid`) are read
//! from the engine's header ([`Envelope`] fields at fixed offsets, see
//! [`engine_envelope`]); the engine keeps the contexts of 3.3 (the world
//! is 0, a communicator `c` and its collectives `c + 1`).
//!
//! Sending obeys the pair's flow control (the destination host's
//! ackmark/hiwater): a counted packet goes only with credit. A short
//! message with credit and nothing queued is written straight from the
//! caller's buffers (one `sendmsg`); what the socket does not take, and
//! everything else, waits encoded in `out`.
//!
//! Receiving reads straight into a buffer the channel keeps and cuts
//! packets in place: a whole short message is handed to the engine from
//! that buffer (no allocation, no copy); only long messages are assembled
//! in memory of their own. Protocol ACKs are queued, not written at once:
//! they leave with the next write (usually the reply) or at the next poll.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::ops::Range;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;

use super::flow::Credit;
use super::packet::{Kind, Packet, Proc, HEADER_LEN};
use super::protocol::{Action, Envelope, Incoming, Outgoing};
use crate::tcp::sys;

/// Encoded bytes a channel holds before it stops encoding more.
const OUT_HIGH: usize = 1 << 20;
/// Messages a channel queues before `try_send` says "full".
const QUEUE_MAX: usize = 64;
/// The receive buffer: many small packets per read (see `Rx`).
const RX_BUF: usize = 256 * 1024;
/// Reads per poll, so one busy channel cannot starve the others.
const READS_PER_POLL: usize = 8;
/// Below this a message written while others went since the last poll is
/// queued and leaves with them (one write for a burst of small ones).
const COALESCE_BELOW: usize = 16 * 1024;
/// Queued bytes written at once rather than at the next poll.
const COALESCE_FLUSH: usize = 64 * 1024;
/// Bytes before the engine's header in an IMPI message: its length.
const LEN_PREFIX: usize = 4;
/// Payloads from this size on are offered to the engine (`Arrivals::place`)
/// when their packet is not all in yet: below it, copying out of the
/// receive buffer costs less than the extra receive call.
const PLACE_MIN: usize = 16 * 1024;

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

/// The receive buffer: unparsed bytes are `buf[start..end]`; `need` is
/// the size of the packet they begin, once its header is in (0 before).
/// It starts at `RX_BUF` and grows, once, for a channel that carries
/// packets larger than that (up to `HEADER_LEN + maxdatalen`, which the
/// header check bounds), so idle channels stay small.
#[derive(Default)]
struct Rx {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    need: usize,
    /// The packet at `start` was offered to `place` and declined.
    declined: bool,
}

impl Rx {
    fn new() -> Rx {
        Rx {
            buf: vec![0u8; RX_BUF].into_boxed_slice(),
            start: 0,
            end: 0,
            need: 0,
            declined: false,
        }
    }

    /// Free room after the unparsed bytes, made large enough for the
    /// packet they begin.
    fn room(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.buf.len() - self.start < self.need.max(HEADER_LEN)
            || self.buf.len() - self.end < self.buf.len() / 2
        {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.need > self.buf.len() {
            let mut grown = vec![0u8; self.need.max(2 * self.buf.len())].into_boxed_slice();
            grown[..self.end].copy_from_slice(&self.buf[..self.end]);
            self.buf = grown;
        }
        &mut self.buf[self.end..]
    }
}

/// Where a channel hands what arrives (the netmod's `Sink`, for one peer).
pub trait Arrivals {
    /// A whole engine message.
    fn deliver(&mut self, header: &[u8], payload: &[u8]);

    /// A message with this engine header and a `len`-byte payload is
    /// arriving: `Some(dst)` to have the payload written there, then
    /// `deliver`ed with exactly that memory (`Sink::place`'s contract).
    fn place(&mut self, header: &[u8], len: usize) -> Option<NonNull<u8>> {
        let _ = (header, len);
        None
    }
}

impl<F: FnMut(&[u8], &[u8])> Arrivals for F {
    fn deliver(&mut self, header: &[u8], payload: &[u8]) {
        self(header, payload)
    }
}

/// A payload being received straight into the engine's memory.
struct Placing {
    dst: NonNull<u8>,
    len: usize,
    got: usize,
}

// SAFETY: the pointer is used only by the channel holding it, from the
// thread driving the netmod (the engine serialises them); the engine keeps
// the memory valid until `deliver` or the peer's failure (Sink::place).
unsafe impl Send for Placing {}

/// `(pk_lsrank, pk_tag, pk_cid)` from an engine header: its sender's rank
/// in the communicator (`src`, bytes 12..16), tag (8..12) and context id
/// (4..8), in the engine's native byte order. The engine checks these
/// offsets against its `WireHeader` in a test; a header too short for
/// them (never sent by the engine) gives zeros.
pub fn engine_envelope(header: &[u8]) -> (i32, i32, u64) {
    if header.len() < 16 {
        return (0, 0, 0);
    }
    let word = |at: usize| {
        u32::from_ne_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    (word(12) as i32, word(8) as i32, word(4) as u64)
}

pub struct Channel {
    /// A connected stream socket (TCP, or a Unix socket to the agent).
    pub sock: Option<OwnedFd>,
    me: Proc,
    them: Proc,
    maxdatalen: u32,
    /// Largest message this side accepts (`msglen`).
    max_msg: u64,
    out: Vec<u8>,
    out_at: usize,
    rx: Rx,
    /// The payload of the packet being read goes to the engine's memory.
    placing: Option<Placing>,
    /// Its engine header (kept for `deliver`).
    placed_header: Vec<u8>,
    /// Payload bytes still to come of a placed message given up on.
    skip: usize,
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
    /// A message was written since the last poll (see `take`).
    wrote_since_poll: bool,
    /// Packets written, for tests and `describe`.
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
            rx: Rx::new(),
            placing: None,
            placed_header: Vec::new(),
            skip: 0,
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
            wrote_since_poll: false,
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

    /// A new poll began: the next small message may be written at once.
    pub fn new_poll(&mut self) {
        self.wrote_since_poll = false;
    }

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
                Some(s) if self.out_at == self.out.len() && !coalesce => {
                    // Straight from the caller's buffers; the rest, if the
                    // socket is full, waits in `out`.
                    self.wrote_since_poll = true;
                    self.syscalls += 1;
                    let total = head.len() + header.len() + payload.len();
                    let n = match sys::send(s.as_raw_fd(), &[&head, header, payload]) {
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                        Err(e) => return Err(e),
                    };
                    if n < total {
                        self.out.clear();
                        self.out_at = 0;
                        let mut skip = n;
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

    /// Append bytes to `out` (reset first when everything was written).
    fn append(&mut self, parts: &[&[u8]]) {
        if self.out_at == self.out.len() {
            self.out.clear();
            self.out_at = 0;
        }
        for p in parts {
            self.out.extend_from_slice(p);
        }
    }

    fn put(&mut self, p: &Packet, data: &[u8]) {
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
            match sys::send(fd, &[&self.out[self.out_at..]]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
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

    /// Stop writing into the engine's memory (the engine is going away):
    /// the rest of a placed payload is read and dropped.
    pub fn abandon_placing(&mut self) {
        if let Some(pl) = self.placing.take() {
            self.skip = pl.len - pl.got;
        }
    }

    /// Send `IMPI_PK_FINI` (3.8): after it only protocol ACKs go.
    pub fn send_fini(&mut self) {
        if !self.fini_sent {
            self.put(&Packet::fini(), &[]);
            self.fini_sent = true;
        }
    }

    /// Read what arrived and act on it, handing each whole engine message
    /// (header, payload) to `deliver`; `Ok(false)` once the peer closed.
    /// Protocol ACKs this makes due are left queued (`wants_write`); other
    /// packets it makes possible are written.
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
                }
                if n < want {
                    break;
                }
                continue;
            }
            let room = rx.room();
            let want = room.len();
            self.syscalls += 1;
            // SAFETY: `room` is `want` writable bytes of our buffer.
            let n = match unsafe { sys::recv(fd, room.as_mut_ptr(), want) } {
                Ok(0) => return Ok(false),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            };
            rx.end += n;
            self.parse(rx, deliver)?;
            if n < want {
                break;
            }
        }
        let before = self.out.len();
        if !(self.queue.is_empty() && self.ctl.is_empty() && self.streaming.is_empty()) {
            self.pump();
        }
        // Only ACKs added: they wait for the next write or poll.
        if pending_before > 0 || self.out.len() > before {
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
            self.put(&ack, &[]);
        }
        let have = rx.end - body;
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
                self.put(&ack, &[]);
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
                Action::Send(reply) if reply.kind == Kind::ProtoAck => self.put(&reply, &[]),
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

/// An engine message's (header, payload) from its IMPI user data.
pub fn split_message(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_be_bytes(buf.get(..4)?.try_into().ok()?) as usize;
    let rest = &buf[4..];
    (len <= rest.len()).then(|| rest.split_at(len))
}

#[cfg(test)]
#[path = "channel_tests.rs"]
mod tests;
