//! The channel over a real loopback pair: order and flow control, the
//! receive buffer's growth, placement into the engine's memory, the
//! envelope at the seed's offsets, and the message size limit.

use super::*;
use std::net::{TcpListener, TcpStream};
use std::ptr::NonNull;

use crate::impi::packet::HEADER_LEN;

fn pair() -> (Channel, Channel) {
    pair_of(1000)
}

fn pair_of(maxdatalen: u32) -> (Channel, Channel) {
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
    let mut a = Channel::new(pa, pb, maxdatalen, 1 << 21, (2, 4), 2);
    let mut b = Channel::new(pb, pa, maxdatalen, 1 << 21, (2, 4), 2);
    for (c, s) in [(&mut a, a_sock), (&mut b, b_sock)] {
        s.set_nonblocking(true).unwrap();
        c.sock = Some(s.into());
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
        assert!(b
            .read(&mut |h: &[u8], p: &[u8]| got.push((h.to_vec(), p.to_vec())))
            .unwrap());
        assert!(a
            .read(&mut |_: &[u8], _: &[u8]| panic!("nothing goes to a"))
            .unwrap());
        // Queued protocol ACKs leave at the next poll.
        a.new_poll();
        b.new_poll();
        a.flush().unwrap();
        b.flush().unwrap();
        if got.len() == msgs.len() {
            break;
        }
    }
    assert_eq!(got, msgs, "every message whole, in send order");
    assert!(a.packets_out > 12, "the long ones went as several packets");
    // FINI both ways, then both sides are idle.
    a.send_fini();
    b.send_fini();
    for _ in 0..10_000 {
        a.flush().unwrap();
        b.flush().unwrap();
        a.read(&mut |_: &[u8], _: &[u8]| panic!("nothing after FINI"))
            .unwrap();
        b.read(&mut |_: &[u8], _: &[u8]| panic!("nothing after FINI"))
            .unwrap();
        if a.fini_got && b.fini_got {
            break;
        }
    }
    assert!(a.fini_got && b.fini_got);
    assert!(a.idle() && b.idle());
}

#[test]
fn a_short_message_larger_than_the_receive_buffer_grows_it() {
    let (mut a, mut b) = pair_of((1 << 20) + 4096);
    let big: Vec<u8> = (0..(1usize << 20)).map(|i| (i * 13 % 251) as u8).collect();
    let small = b"after".to_vec();
    assert!(a.take(b"h1", &big).unwrap());
    assert!(a.take(b"h2", &small).unwrap());
    let mut got: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for _ in 0..100_000 {
        b.read(&mut |h: &[u8], p: &[u8]| got.push((h.to_vec(), p.to_vec())))
            .unwrap();
        a.read(&mut |_: &[u8], _: &[u8]| {}).unwrap();
        a.new_poll();
        a.flush().unwrap();
        b.flush().unwrap();
        if got.len() == 2 {
            break;
        }
    }
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].0.as_slice(), got[0].1 == big), (&b"h1"[..], true));
    assert_eq!(got[1], (b"h2".to_vec(), small));
    assert_eq!(a.packets_out, 2, "each went as one short packet");
    assert!(b.rx.buf.len() > RX_BUF, "grown for the large packet");
}

/// Places payloads of at least PLACE_MIN bytes in its own buffer.
struct Placer {
    mem: Vec<u8>,
    placed: usize,
    got: Vec<(Vec<u8>, Vec<u8>, bool)>,
}

impl Arrivals for Placer {
    fn deliver(&mut self, h: &[u8], p: &[u8]) {
        let in_mem = p.as_ptr() == self.mem.as_ptr();
        self.got.push((h.to_vec(), p.to_vec(), in_mem));
    }
    fn place(&mut self, _: &[u8], len: usize) -> Option<NonNull<u8>> {
        self.placed += 1;
        self.mem = vec![0; len];
        NonNull::new(self.mem.as_mut_ptr())
    }
}

#[test]
fn a_large_payload_is_received_straight_into_the_engines_memory() {
    let (mut a, mut b) = pair_of((1 << 20) + 4096);
    let big: Vec<u8> = (0..(1usize << 20)).map(|i| (i * 7 % 253) as u8).collect();
    assert!(a.take(b"head", &big).unwrap());
    assert!(a.take(b"h2", b"small").unwrap());
    let mut to = Placer {
        mem: Vec::new(),
        placed: 0,
        got: Vec::new(),
    };
    for _ in 0..100_000 {
        b.read(&mut to).unwrap();
        a.read(&mut |_: &[u8], _: &[u8]| {}).unwrap();
        a.new_poll();
        a.flush().unwrap();
        b.flush().unwrap();
        if to.got.len() == 2 {
            break;
        }
    }
    assert_eq!(to.placed, 1, "offered once");
    assert_eq!(to.got.len(), 2);
    assert_eq!(to.got[0].0, b"head");
    assert!(to.got[0].1 == big, "the payload whole");
    assert!(to.got[0].2, "delivered in the placed memory");
    assert_eq!(to.got[1], (b"h2".to_vec(), b"small".to_vec(), false));
    assert_eq!(b.rx.buf.len(), RX_BUF, "no growth when placed");
}

#[test]
fn after_a_placed_payload_the_next_ones_skip_the_receive_buffer() {
    let (mut a, mut b) = pair_of((1 << 20) + 4096);
    let big: Vec<u8> = (0..(1usize << 20)).map(|i| (i * 5 % 251) as u8).collect();
    let mut to = Placer {
        mem: Vec::new(),
        placed: 0,
        got: Vec::new(),
    };
    let mut sent = 0;
    for _ in 0..100_000 {
        if sent < 4 && a.take(b"head", &big).unwrap() {
            sent += 1;
        }
        b.read(&mut to).unwrap();
        a.read(&mut |_: &[u8], _: &[u8]| {}).unwrap();
        a.new_poll();
        a.flush().unwrap();
        b.flush().unwrap();
        if to.got.len() == 4 {
            break;
        }
    }
    assert_eq!(to.placed, 4);
    assert!(
        to.got.iter().all(|g| g.1 == big && g.2),
        "whole, in placed memory"
    );
    // The first payload may start in the buffer (a full read of it); the
    // others at most a peek's worth each.
    assert!(
        b.copied <= (RX_BUF + 3 * rx::PEEK) as u64,
        "{} bytes copied",
        b.copied
    );
}

#[test]
fn a_stream_of_large_messages_keeps_the_output_buffer_bounded() {
    let (mut a, mut b) = pair_of((1 << 20) + 4096);
    // Small socket buffers, so a 1 MiB message never leaves in one write.
    for (c, opt) in [(&a, libc::SO_SNDBUF), (&b, libc::SO_RCVBUF)] {
        use std::os::fd::AsRawFd;
        let v: libc::c_int = 64 * 1024;
        // SAFETY: a valid socket and a c_int option of its size.
        let rc = unsafe {
            libc::setsockopt(
                c.sock.as_ref().unwrap().as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
    }
    let big = vec![3u8; 1 << 20];
    let mut to = Placer {
        mem: Vec::new(),
        placed: 0,
        got: Vec::new(),
    };
    let mut most = 0;
    let mut sent = 0;
    // The reader takes a little per turn, so `out` never drains whole.
    for _ in 0..100_000 {
        if sent < 40 && a.take(b"h", &big).unwrap() {
            sent += 1;
        }
        most = most.max(a.out.len());
        b.read(&mut to).unwrap();
        a.read(&mut |_: &[u8], _: &[u8]| {}).unwrap();
        b.flush().unwrap();
        if to.got.len() == 40 {
            break;
        }
    }
    assert_eq!(to.got.len(), 40);
    // What may wait (4 x OUT_HIGH) plus one message, and the written
    // front of at most as much again.
    assert!(
        most <= 2 * (4 * OUT_HIGH + (1 << 20) + 4096),
        "out grew to {most}"
    );
}

#[test]
fn data_packets_carry_the_envelope_at_the_seeds_offsets() {
    use std::io::Read;
    let (mut a, b) = pair();
    // An engine header: context 6 at 4..8, tag 77 at 8..12, rank 3 at
    // 12..16 (native order), then the rest of its 40 bytes.
    let mut header = [0u8; 40];
    header[0] = 1;
    header[4..8].copy_from_slice(&6u32.to_ne_bytes());
    header[8..12].copy_from_slice(&77i32.to_ne_bytes());
    header[12..16].copy_from_slice(&3u32.to_ne_bytes());
    assert_eq!(engine_envelope(&header), (3, 77, 6));
    assert_eq!(
        engine_envelope(&header[..10]),
        (0, 0, 0),
        "too short: zeros"
    );
    assert!(a.take(&header, b"payload").unwrap());
    let mut s = TcpStream::from(b.sock.unwrap());
    s.set_nonblocking(false).unwrap();
    let mut wire = vec![0u8; HEADER_LEN + 4 + 40 + 7];
    s.read_exact(&mut wire).unwrap();
    // 3.5: pk_type 0 (DATA), pk_len = pk_msglen = 51, pk_lsrank at 80,
    // pk_tag at 84, pk_cid at 88, all big-endian.
    assert_eq!(&wire[0..4], &[0, 0, 0, 0]);
    assert_eq!(&wire[4..8], &51u32.to_be_bytes());
    assert_eq!(&wire[72..80], &51u64.to_be_bytes());
    assert_eq!(&wire[80..84], &3i32.to_be_bytes());
    assert_eq!(&wire[84..88], &77i32.to_be_bytes());
    assert_eq!(&wire[88..96], &6u64.to_be_bytes());
    assert_eq!(&wire[128..132], &40u32.to_be_bytes());
    assert_eq!(&wire[132..172], &header);
    assert_eq!(&wire[172..], b"payload");
    let p = Packet::decode(&wire[..HEADER_LEN], 1000).unwrap();
    assert_eq!((p.lsrank, p.tag, p.cid, p.srqid), (3, 77, 6, 1));
}

#[test]
fn a_message_over_the_limit_breaks_the_channel() {
    let (mut a, mut b) = pair();
    b.max_msg = 100;
    assert!(a.take(b"h", &[0u8; 200]).unwrap());
    let mut err = None;
    for _ in 0..10_000 {
        match b.read(&mut |_: &[u8], _: &[u8]| {}) {
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

/// Shrink both ends' socket buffers so a 1 MiB message never fits.
fn small_buffers(a: &Channel, b: &Channel) {
    use std::os::fd::AsRawFd;
    for (c, opt) in [(a, libc::SO_SNDBUF), (b, libc::SO_RCVBUF)] {
        let v: libc::c_int = 64 * 1024;
        // SAFETY: a valid socket and a c_int option of its size.
        let rc = unsafe {
            libc::setsockopt(
                c.sock.as_ref().unwrap().as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
    }
}

#[test]
fn a_message_that_must_wait_is_refused_not_copied() {
    let (mut a, mut b) = pair_of((1 << 20) + 4096);
    small_buffers(&a, &b);
    let big: Vec<u8> = (0..(1usize << 20)).map(|i| (i * 3 % 241) as u8).collect();
    // The first goes at once: what the socket did not take waits in `out`.
    assert!(a.take(b"h0", &big).unwrap());
    let tail = a.copied_out;
    assert!(tail > 0 && tail < big.len() as u64, "{tail} bytes copied");
    // The second would wait behind it: refused, nothing copied, nothing
    // counted against the flow control.
    let calls = a.syscalls;
    assert!(!a.take(b"h1", &big).unwrap());
    assert_eq!((a.copied_out, a.refused), (tail, 1));
    assert_eq!(a.credit.unacknowledged(), 1);
    // The socket was full: offers refused before the next poll do not try
    // it again; the first after a poll does, once.
    assert!(!a.take(b"h1", &big).unwrap());
    assert_eq!(a.syscalls, calls, "a refused offer wrote to a full socket");
    a.new_poll();
    assert!(!a.take(b"h1", &big).unwrap());
    assert_eq!(a.syscalls, calls + 1);
    assert_eq!(a.refused, 3);
    // Offered again as the socket drains, each goes once there is room;
    // no byte of any message is copied twice.
    let mut to = Placer {
        mem: Vec::new(),
        placed: 0,
        got: Vec::new(),
    };
    let mut sent = 1;
    for _ in 0..100_000 {
        if sent < 6 && a.take(format!("h{sent}").as_bytes(), &big).unwrap() {
            sent += 1;
        }
        b.read(&mut to).unwrap();
        a.read(&mut |_: &[u8], _: &[u8]| {}).unwrap();
        a.flush().unwrap();
        if to.got.len() == 6 {
            break;
        }
    }
    assert_eq!(to.got.len(), 6);
    assert!(to.got.iter().all(|g| g.1 == big), "each payload whole");
    assert!(a.refused > 1);
    assert!(
        a.copied_out <= 6 * (big.len() as u64 + 200),
        "{} bytes copied for 6 messages of {}",
        a.copied_out,
        big.len()
    );
}

#[test]
fn without_credit_a_message_waits_with_the_engine_and_the_ack_comes_at_once() {
    // hiwater 4, ackmark 2 both ways.
    let (mut a, mut b) = pair();
    for i in 0..4u8 {
        assert!(a.take(&[i], b"short").unwrap());
    }
    let copied = a.copied_out;
    assert!(!a.take(&[4], b"short").unwrap(), "at hiwater: full");
    assert_eq!(a.copied_out, copied, "nothing copied while refused");
    // One read by the receiver (no poll, no flush after it) sends its ACKs.
    let mut got = Vec::new();
    for _ in 0..10_000 {
        b.read(&mut |h: &[u8], _: &[u8]| got.push(h.to_vec()))
            .unwrap();
        if got.len() == 4 {
            break;
        }
    }
    assert_eq!(got.len(), 4);
    assert!(!b.wants_write(), "the ACKs were written by the read");
    for _ in 0..10_000 {
        a.read(&mut |_: &[u8], _: &[u8]| {}).unwrap();
        if a.credit.unacknowledged() == 0 {
            break;
        }
    }
    assert_eq!(a.credit.unacknowledged(), 0, "both ACKs came back");
    assert!(a.take(&[4], b"short").unwrap());
}

#[test]
fn an_ack_cuts_in_ahead_of_the_data_queued_before_it() {
    let (mut a, mut b) = pair_of((1 << 20) + 4096);
    small_buffers(&a, &b);
    // `a` fills its socket and `out`: one large message (its tail waits)
    // and two small ones queued behind it (hiwater 4: one credit left).
    let big = vec![7u8; 1 << 20];
    assert!(a.take(b"big", &big).unwrap());
    assert!(a.take(b"s1", &[1u8; 30_000]).unwrap());
    assert!(a.take(b"s2", &[2u8; 30_000]).unwrap());
    assert!(a.wants_write());
    // `b` sends two packets: `a` owes an ACK (ackmark 2) and queues it
    // where the large message ends, ahead of the small ones.
    assert!(b.take(b"x", b"1").unwrap() && b.take(b"y", b"2").unwrap());
    assert_eq!(b.credit.unacknowledged(), 2);
    // The second was coalesced behind the first: the next poll writes it.
    b.flush().unwrap();
    let mut at_a = 0;
    for _ in 0..10_000 {
        a.read(&mut |_: &[u8], _: &[u8]| at_a += 1).unwrap();
        if at_a == 2 {
            break;
        }
    }
    assert_eq!(at_a, 2);
    // On the wire to `b`: the large message, the ACK, then the small ones.
    use crate::impi::framer::Framer;
    use crate::impi::packet::Kind;
    use std::io::Read;
    let mut s = TcpStream::from(b.sock.take().unwrap());
    let mut framer = Framer::new((1 << 20) + 4096);
    let mut packets = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..100_000 {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => packets.extend(framer.push(&buf[..n]).unwrap()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
        a.flush().unwrap();
        if packets.len() == 4 {
            break;
        }
    }
    let kinds: Vec<(Kind, usize)> = packets.iter().map(|(p, d)| (p.kind, d.len())).collect();
    assert_eq!(
        kinds,
        vec![
            (Kind::Data, 4 + 3 + (1 << 20)),
            (Kind::ProtoAck, 0),
            (Kind::Data, 4 + 2 + 30_000),
            (Kind::Data, 4 + 2 + 30_000),
        ]
    );
}
