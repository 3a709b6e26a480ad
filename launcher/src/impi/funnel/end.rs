//! One socket of the funnel (a host link or a pair's end): packets cut
//! from what it reads, and what waits to be written, under a hard cap.
//!
//! The pairs' flow control (3.6) bounds what may wait for a socket whose
//! reader is slow: per pair, at most the receiving host's `hiwater`
//! counted packets of at most `HEADER_LEN + maxdatalen` bytes, and the
//! uncounted acknowledgements that answer packets received. A socket's cap
//! is twice that for the pairs it carries (the second half for the
//! uncounted packets), never more than [`MAX_QUEUED`]; more waiting means a
//! peer broke the flow control or stopped reading while acknowledging, and
//! the funnel fails that link rather than grow.
//!
//! A protocol ACK is queued at the end of the packet being written, ahead
//! of the packets waiting behind it (3.6 wants ACKs expedited: a sender at
//! its hiwater waits for it), so `out` keeps where its packets end.

use std::collections::VecDeque;
use std::io::{self, Read, Write};

use rivet_netmods::impi::framer::Framer;
use rivet_netmods::impi::packet::{Kind, Packet, HEADER_LEN};

/// Whole packets with their user data.
pub(super) type Packets = Vec<(Packet, Vec<u8>)>;

/// Reads of one socket per turn (each at most the buffer given), so a
/// peer that writes faster than the funnel routes cannot make one turn's
/// packets grow without bound.
const READS_PER_TURN: usize = 8;

/// No socket's queue grows beyond this, whatever the hosts announced.
pub const MAX_QUEUED: usize = 256 << 20;

/// The cap of a socket carrying `pairs` pairs toward a host whose
/// `hiwater` governs them.
pub fn cap(pairs: usize, hiwater: u32, maxdatalen: u32) -> usize {
    let packet = HEADER_LEN as u64 + u64::from(maxdatalen);
    let bound = 2u64
        .saturating_mul(pairs as u64)
        .saturating_mul(u64::from(hiwater.max(1)))
        .saturating_mul(packet);
    bound.min(MAX_QUEUED as u64) as usize
}

/// A socket the thread reads packets from and writes packets to.
pub(super) struct End<S> {
    pub(super) sock: S,
    framer: Framer,
    out: Vec<u8>,
    at: usize,
    /// Ends of the packets in `out` from `at` on, ascending.
    bounds: VecDeque<usize>,
    pub(super) open: bool,
    /// Most bytes that may wait in `out`.
    pub(super) cap: usize,
}

impl<S: Read + Write> End<S> {
    pub(super) fn new(sock: S, maxdatalen: u32, cap: usize) -> End<S> {
        End {
            sock,
            framer: Framer::new(maxdatalen),
            out: Vec::new(),
            at: 0,
            bounds: VecDeque::new(),
            open: true,
            cap,
        }
    }

    /// Queue a packet; `Err(bytes)` (nothing queued) when the bytes
    /// waiting would pass the cap.
    pub(super) fn queue(&mut self, p: &Packet, data: &[u8]) -> Result<(), usize> {
        if self.at == self.out.len() {
            self.out.clear();
            self.at = 0;
            self.bounds.clear();
        }
        let waiting = self.out.len() - self.at + HEADER_LEN + data.len();
        if waiting > self.cap {
            return Err(waiting);
        }
        if self.at > 0 && self.out.len() + HEADER_LEN + data.len() > self.out.capacity() {
            // Reuse the written front rather than grow past what waits.
            self.out.drain(..self.at);
            for b in self.bounds.iter_mut() {
                *b -= self.at;
            }
            self.at = 0;
        }
        match self.bounds.front().copied() {
            Some(end) if p.kind == Kind::ProtoAck && end < self.out.len() => {
                self.out.splice(end..end, p.encode());
                for b in self.bounds.iter_mut().skip(1) {
                    *b += HEADER_LEN;
                }
                self.bounds.insert(1, end + HEADER_LEN);
            }
            _ => {
                self.out.extend_from_slice(&p.encode());
                self.out.extend_from_slice(data);
                self.bounds.push_back(self.out.len());
            }
        }
        Ok(())
    }

    /// `n` more bytes were written.
    fn advance(&mut self, n: usize) {
        self.at += n;
        while self.bounds.front().is_some_and(|&b| b < self.at) {
            self.bounds.pop_front();
        }
    }

    pub(super) fn pending(&self) -> bool {
        self.at < self.out.len()
    }

    /// Bytes waiting to be written.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.out.len() - self.at
    }

    /// Drop what waits (the socket failed): its memory goes at once.
    pub(super) fn discard(&mut self) {
        self.out = Vec::new();
        self.at = 0;
        self.bounds.clear();
        self.open = false;
    }

    /// Write what the socket takes.
    pub(super) fn flush(&mut self) -> io::Result<()> {
        while self.pending() {
            match self.sock.write(&self.out[self.at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.advance(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Read what came (at most [`READS_PER_TURN`] buffers), cut into
    /// packets; `Ok(None)` at the end of the stream.
    pub(super) fn read(&mut self, buf: &mut [u8]) -> io::Result<Option<Packets>> {
        let mut got = Vec::new();
        let mut reads = 0;
        while reads < READS_PER_TURN {
            match self.sock.read(buf) {
                Ok(0) => return Ok(if got.is_empty() { None } else { Some(got) }),
                Ok(n) => {
                    reads += 1;
                    let packets = self
                        .framer
                        .push(&buf[..n])
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                    got.extend(packets);
                    if n < buf.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Some(got))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rivet_netmods::impi::packet::{Kind, Proc};
    use std::os::unix::net::UnixStream;

    #[test]
    fn an_end_cuts_packets_and_writes_what_it_queued() {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        let mut ea = End::new(a, 64, MAX_QUEUED);
        let mut eb = End::new(b, 64, MAX_QUEUED);
        let mut p = Packet::new(Kind::Data, Proc::default(), Proc::default());
        p.len = 5;
        p.msglen = 5;
        ea.queue(&p, b"hello").unwrap();
        ea.queue(&Packet::fini(), &[]).unwrap();
        ea.flush().unwrap();
        assert!(!ea.pending());
        let mut buf = [0u8; 100];
        let mut got = Vec::new();
        while got.len() < 2 {
            got.extend(eb.read(&mut buf).unwrap().unwrap());
        }
        assert_eq!(got[0].0, p);
        assert_eq!(got[0].1, b"hello");
        assert_eq!(got[1].0.kind, Kind::Fini);
        // Garbage is an error, not a panic; a closed peer is the end.
        let (mut c, d) = UnixStream::pair().unwrap();
        c.write_all(&[0xff; 128]).unwrap();
        drop(c);
        let mut ed = End::new(d, 64, MAX_QUEUED);
        assert!(ed.read(&mut buf).is_err());
        let (c, d) = UnixStream::pair().unwrap();
        drop(c);
        let mut ed = End::new(d, 64, MAX_QUEUED);
        assert!(ed.read(&mut buf).unwrap().is_none());
    }

    /// A socket taking `room` more bytes, recording them.
    struct Slow {
        room: usize,
        wire: Vec<u8>,
    }

    impl Read for Slow {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::ErrorKind::WouldBlock.into())
        }
    }

    impl Write for Slow {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = b.len().min(self.room);
            self.room -= n;
            self.wire.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn an_ack_goes_ahead_of_the_packets_waiting_behind_the_one_being_written() {
        let slow = Slow {
            room: 100,
            wire: Vec::new(),
        };
        let mut e = End::new(slow, 1000, MAX_QUEUED);
        let data = |n: usize, byte: u8| {
            let mut p = Packet::new(Kind::Data, Proc::default(), Proc::default());
            p.len = n as u32;
            p.msglen = n as u64;
            (p, vec![byte; n])
        };
        let (p1, d1) = data(500, 1);
        let (p2, d2) = data(300, 2);
        e.queue(&p1, &d1).unwrap();
        e.queue(&p2, &d2).unwrap();
        // 100 bytes of the first packet went; the ACK comes after its end,
        // before the second.
        e.sock.room = 100;
        e.flush().unwrap();
        let ack = Packet::new(Kind::ProtoAck, Proc::default(), Proc::default());
        e.queue(&ack, &[]).unwrap();
        // Once the first packet is whole, a second ACK goes right there too.
        e.sock.room = HEADER_LEN + 500 - 100 + HEADER_LEN;
        e.flush().unwrap();
        e.queue(&ack, &[]).unwrap();
        e.sock.room = usize::MAX;
        e.flush().unwrap();
        assert!(!e.pending());
        let mut framer = Framer::new(1000);
        let kinds: Vec<(Kind, usize)> = framer
            .push(&e.sock.wire)
            .unwrap()
            .into_iter()
            .map(|(p, d)| (p.kind, d.len()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (Kind::Data, 500),
                (Kind::ProtoAck, 0),
                (Kind::ProtoAck, 0),
                (Kind::Data, 300)
            ]
        );
    }

    #[test]
    fn a_queue_stops_at_its_cap() {
        let (a, _b) = UnixStream::pair().unwrap();
        let mut e = End::new(a, 64, 3 * HEADER_LEN);
        let p = Packet::fini();
        for _ in 0..3 {
            e.queue(&p, &[]).unwrap();
        }
        assert_eq!(e.queue(&p, &[]), Err(4 * HEADER_LEN));
        assert_eq!(e.waiting(), 3 * HEADER_LEN, "nothing queued past the cap");
        e.discard();
        assert!(!e.pending() && !e.open);
    }

    #[test]
    fn caps_follow_the_flow_control_and_stay_bounded() {
        // hiwater 32 of 1 MiB + 4 KiB packets: 2 x 32 x (128 + 1052672) per pair.
        assert_eq!(cap(1, 32, 1_052_672), 2 * 32 * (128 + 1_052_672));
        assert_eq!(cap(4, 4, 1000), 2 * 4 * 4 * 1128);
        // A host announcing an absurd hiwater gets the hard cap.
        assert_eq!(cap(8, u32::MAX, u32::MAX), MAX_QUEUED);
        assert_eq!(cap(1, 0, 1000), 2 * 1128, "hiwater 0 counts as 1");
    }
}
