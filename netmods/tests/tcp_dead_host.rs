//! A peer that vanishes without a FIN or a reset: a raw client completes
//! the handshake as rank 1, then closes its socket in TCP repair mode
//! (CAP_NET_ADMIN), so its kernel forgets the connection and says nothing.
//! The netmod's side is idle, so only keepalive probes can find out (here
//! the probe meets a reset, as from a host that rebooted; a host that is
//! off answers nothing and the probes run out). The peer is reported
//! failed; with keepalive off nothing would ever be sent. Skipped with a
//! note where repair mode is not allowed.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use common::tcp::{open_one, plain};
use common::*;
use rivet_netmods::tcp::{Backend, TcpConfig};
use rivet_netmods::Netmod;

const TCP_REPAIR: libc::c_int = 19;

fn keepalive_finds_a_vanished_peer(b: Backend) {
    let cfg = TcpConfig {
        keepalive: Some(Duration::from_secs(2)),
        ..plain(b)
    };
    let Some(mut net) = open_one(cfg, "vanish", 0) else {
        return;
    };
    let mut sink = Rec::default();
    let card = net.business_card().to_string();
    let addr: SocketAddr = card.strip_prefix("tcp:").unwrap().parse().unwrap();
    let mut c = TcpStream::connect(addr).unwrap();
    let mut hello = b"RVTCP\x02\0\0\x01".to_vec();
    hello.extend_from_slice(&1u64.to_le_bytes());
    hello.extend_from_slice(&6u16.to_le_bytes());
    hello.extend_from_slice(b"vanish");
    hello.extend_from_slice(&[0; 16]);
    c.write_all(&hello).unwrap();
    c.set_nonblocking(true).unwrap();
    let mut verdict = Vec::new();
    let end = Instant::now() + DEADLINE;
    while verdict.len() < 9 {
        assert!(Instant::now() < end, "no verdict");
        net.poll(&mut sink).unwrap();
        let mut buf = [0u8; 16];
        match c.read(&mut buf) {
            Ok(n) => verdict.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(verdict, b"RVTCP\x02\0\0\x00", "accepted as rank 1");
    assert_eq!(net.connected_peers(), 1);

    let on: libc::c_int = 1;
    // SAFETY: `on` outlives the call; the length matches.
    let r = unsafe {
        libc::setsockopt(
            c.as_raw_fd(),
            libc::IPPROTO_TCP,
            TCP_REPAIR,
            &on as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return eprintln!("note: skipped, TCP repair mode not allowed here: {e}");
    }
    drop(c); // gone without a FIN or a reset

    let end = Instant::now() + DEADLINE;
    while sink.failed.is_empty() {
        assert!(Instant::now() < end, "the vanished peer was never noticed");
        net.poll(&mut sink).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(sink.failed.len(), 1);
    assert_eq!(sink.failed[0].0, 1, "{:?}", sink.failed);
    assert!(net.try_send(1, &header(0, 1), &payload(0, 0, 1)).is_err());
}

#[test]
fn poll_keepalive_finds_a_vanished_peer() {
    keepalive_finds_a_vanished_peer(Backend::Poll)
}

#[test]
fn uring_keepalive_finds_a_vanished_peer() {
    keepalive_finds_a_vanished_peer(Backend::Uring)
}
