//! The `impi` netmod (seed 003, chapter 3): traffic between ranks of
//! different IMPI clients. Sans I/O: the 128-byte packet header
//! ([`packet`]) and the cutting of a link's bytes into packets
//! ([`framer`]), the per-pair flow control of 3.6 ([`flow`]) and the
//! message protocols of 3.7 (short, long, synchronous, cancel:
//! [`protocol`]). Driven over direct TCP channels by [`channel`] (one per
//! pair of procs, opened by a [`hello`] proving the run's channel key),
//! behind the [`Netmod`](crate::Netmod) trait by
//! [`netmod`], from what the launcher tells a rank ([`config`]).

mod channel;
pub mod config;
pub mod flow;
pub mod framer;
pub mod hello;
pub mod netmod;
#[cfg(test)]
mod netmod_tests;
pub mod packet;
pub mod protocol;

pub use channel::engine_envelope;
pub use config::ImpiConfig;
pub use netmod::ImpiNetmod;

#[cfg(test)]
mod tests {
    //! The pieces together over a real TCP connection: a long and a
    //! synchronous message under tight flow control, then FINI both ways.

    use std::collections::HashMap;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::flow::Credit;
    use super::framer::Framer;
    use super::packet::{Kind, Packet, Proc};
    use super::protocol::{Action, Envelope, Incoming, Outgoing};

    const MAXDATALEN: u32 = 1000;

    fn payload(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    struct Link {
        s: TcpStream,
        framer: Framer,
        queue: Vec<(Packet, Vec<u8>)>,
    }

    impl Link {
        fn next(&mut self) -> (Packet, Vec<u8>) {
            while self.queue.is_empty() {
                let mut buf = [0u8; 512];
                let n = self.s.read(&mut buf).unwrap();
                assert!(n > 0, "peer closed early");
                self.queue = self.framer.push(&buf[..n]).unwrap();
                self.queue.reverse();
            }
            self.queue.pop().unwrap()
        }

        fn send(&mut self, p: &Packet, data: &[u8]) {
            self.s.write_all(&p.encode()).unwrap();
            self.s.write_all(data).unwrap();
        }
    }

    fn receiver(s: TcpStream) -> HashMap<u64, Vec<u8>> {
        let mut link = Link {
            s,
            framer: Framer::new(MAXDATALEN),
            queue: Vec::new(),
        };
        let mut rx = Incoming::new(MAXDATALEN, 2);
        let mut bufs: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut done = HashMap::new();
        loop {
            let (p, data) = link.next();
            let mut actions = rx.on_packet(&p).unwrap();
            let mut i = 0;
            while i < actions.len() {
                match actions[i].clone() {
                    Action::Message { id, first } => {
                        let mut buf = vec![0u8; first.msglen as usize];
                        buf[..data.len()].copy_from_slice(&data);
                        bufs.insert(id, buf);
                        // A receive is posted for everything: match at once.
                        actions.extend(rx.matched(id).unwrap());
                    }
                    Action::Continue { id, offset, len } => {
                        let at = offset as usize;
                        bufs.get_mut(&id).unwrap()[at..at + len as usize].copy_from_slice(&data);
                    }
                    Action::Complete { id } => {
                        done.insert(id, bufs.remove(&id).unwrap());
                    }
                    Action::Send(reply) => link.send(&reply, &[]),
                    Action::Fini => {
                        link.send(&Packet::fini(), &[]);
                        return done;
                    }
                    other => panic!("unexpected {other:?}"),
                }
                i += 1;
            }
        }
    }

    #[test]
    fn long_and_synchronous_messages_over_tcp_with_flow_control() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let rx = std::thread::spawn(move || receiver(listener.accept().unwrap().0));
        let mut link = Link {
            s: TcpStream::connect(addr).unwrap(),
            framer: Framer::new(MAXDATALEN),
            queue: Vec::new(),
        };
        let env = Envelope {
            src: Proc {
                hostid: [1; 16],
                pid: 1,
            },
            dest: Proc {
                hostid: [2; 16],
                pid: 2,
            },
            lsrank: 0,
            tag: 1,
            cid: 0,
        };
        let mut credit = Credit::new(2, 4);
        let mut stalls = 0;
        let mut syncacks: HashMap<u64, Packet> = HashMap::new();
        // Read one packet that came back: a protocol ACK or a SYNCACK.
        let pump = |link: &mut Link, credit: &mut Credit, syncacks: &mut HashMap<u64, Packet>| {
            let (p, _) = link.next();
            match p.kind {
                Kind::ProtoAck => credit.acked().unwrap(),
                Kind::SyncAck => {
                    syncacks.insert(p.srqid, p);
                }
                other => panic!("sender got {other:?}"),
            }
        };
        let long = payload(10_500, 7);
        let short = payload(300, 9);
        for (srqid, data, sync) in [(1u64, &long, false), (2, &short, true)] {
            let mut out = Outgoing::new(env, srqid, data.len() as u64, sync, MAXDATALEN);
            let (first, r) = out.first();
            while !credit.can_send() {
                stalls += 1;
                pump(&mut link, &mut credit, &mut syncacks);
            }
            link.send(&first, &data[r.start as usize..r.end as usize]);
            credit.sent();
            while !out.complete() {
                while !syncacks.contains_key(&srqid) {
                    pump(&mut link, &mut credit, &mut syncacks);
                }
                let ack = syncacks.remove(&srqid).unwrap();
                for (p, r) in out.on_syncack(&ack).unwrap() {
                    while !credit.can_send() {
                        stalls += 1;
                        pump(&mut link, &mut credit, &mut syncacks);
                    }
                    link.send(&p, &data[r.start as usize..r.end as usize]);
                    credit.sent();
                }
            }
        }
        link.send(&Packet::fini(), &[]);
        loop {
            let (p, _) = link.next();
            if p.kind == Kind::Fini {
                break;
            }
            assert_eq!(p.kind, Kind::ProtoAck);
        }
        let got = rx.join().unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[&1], long);
        assert_eq!(got[&2], short);
        assert!(stalls > 0, "hiwater 4 must stall an 11-packet message");
    }
}
