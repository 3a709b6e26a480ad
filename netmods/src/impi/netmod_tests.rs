//! Two `ImpiNetmod`s in one process, world ranks 0 and 1 of two clients:
//! forged hellos are refused before a channel exists, the genuine one
//! opens it, and a FINI is answered at once (3.8).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::IntoRawFd;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use super::hello::{hello, HELLO_LEN};
use super::{ImpiConfig, ImpiNetmod};
use crate::auth::JobKey;
use crate::{peer_id, Netmod, PeerId, Sink};

#[derive(Default)]
struct Got {
    msgs: Vec<(PeerId, Vec<u8>, Vec<u8>)>,
    failed: Vec<(PeerId, String)>,
}

impl Sink for Got {
    fn deliver(&mut self, peer: PeerId, header: &[u8], payload: &[u8]) {
        self.msgs.push((peer, header.to_vec(), payload.to_vec()));
    }
    fn place(&mut self, _: PeerId, _: &[u8], _: usize) -> Option<NonNull<u8>> {
        None
    }
    fn peer_failed(&mut self, peer: PeerId, why: &str) {
        self.failed.push((peer, why.to_string()));
    }
}

const KEY: [u8; 16] = [7; 16];

/// Listeners for ranks 0 and 1, and each rank's config (one proc per client).
fn world() -> (Vec<ImpiConfig>, String) {
    let ls: Vec<TcpListener> = (0..2)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let procs = ls
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{}/{}/2/4", l.local_addr().unwrap(), i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let addr0 = ls[0].local_addr().unwrap().to_string();
    let cfgs = ls
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let fd = l.into_raw_fd();
            let mut c = ImpiConfig::parse(&procs, i as u32, 1 << 16, &[fd], 0, 1).unwrap();
            c.client_firsts = vec![0, 1];
            c.channel_key = Some(JobKey::new(KEY));
            c
        })
        .collect();
    (cfgs, addr0)
}

/// Poll `nm` until `done` holds (bounded: a failure, not a hang).
fn poll_until(nm: &mut ImpiNetmod, got: &mut Got, done: impl Fn(&ImpiNetmod, &Got) -> bool) {
    let start = Instant::now();
    while !done(nm, got) {
        assert!(start.elapsed() < Duration::from_secs(30), "no progress");
        nm.poll(got).unwrap();
        std::thread::yield_now();
    }
}

/// A forged hello: the peer closes the connection without a word.
fn refused(nm: &mut ImpiNetmod, got: &mut Got, addr: &str, bytes: &[u8]) {
    let before = nm.refused_hellos();
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(bytes).unwrap();
    poll_until(nm, got, |nm, _| nm.refused_hellos() > before);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = [0u8; 1];
    assert!(
        matches!(s.read(&mut b), Ok(0) | Err(_)),
        "a refused connection is closed"
    );
    assert_eq!(nm.channel_state(1), None, "no channel for a stranger");
}

#[test]
fn forged_hellos_are_refused_and_fini_is_answered_at_once() {
    let (mut cfgs, addr0) = world();
    let cfg1 = cfgs.pop().unwrap();
    let cfg0 = cfgs.pop().unwrap();
    let mut nm0 = ImpiNetmod::new(cfg0, None).unwrap();
    let mut got0 = Got::default();
    let wrong = JobKey::new([8; 16]);
    let right = JobKey::new(KEY);
    // A wrong key; the right key but addressed to another rank; a bad
    // magic with a valid MAC; the sender claiming to be rank 0 itself.
    refused(&mut nm0, &mut got0, &addr0, &hello(&wrong, 1, 0, [1; 8]));
    refused(&mut nm0, &mut got0, &addr0, &hello(&right, 1, 2, [2; 8]));
    let mut bad_magic = hello(&right, 1, 0, [3; 8]);
    bad_magic[0] = b'X';
    refused(&mut nm0, &mut got0, &addr0, &bad_magic);
    refused(&mut nm0, &mut got0, &addr0, &hello(&right, 0, 0, [4; 8]));
    assert_eq!(HELLO_LEN, 28);
    assert_eq!(nm0.refused_hellos(), 4);

    // The genuine rank 1 dials at open with the right key.
    let mut nm1 = ImpiNetmod::new(cfg1, None).unwrap();
    assert!(nm1.try_send(peer_id(0, 0), b"hdr", b"from one").unwrap());
    poll_until(&mut nm0, &mut got0, |_, g| !g.msgs.is_empty());
    assert_eq!(
        got0.msgs,
        vec![(peer_id(0, 1), b"hdr".to_vec(), b"from one".to_vec())]
    );
    assert_eq!(nm0.channel_state(1), Some((true, false, false)));
    // A replay of a valid hello once the channel exists is refused too.
    refused_replay(&mut nm0, &mut got0, &addr0, &right);

    // Rank 1 drops its netmod: rank 0 answers its FINI from its poll.
    let dropper = std::thread::spawn(move || drop(nm1));
    poll_until(&mut nm0, &mut got0, |nm, _| {
        nm.channel_state(1) == Some((false, true, true))
    });
    dropper.join().unwrap();
    // A FINI then a close is reported once, as a peer that finalized
    // (the engine then fails only what still names it).
    poll_until(&mut nm0, &mut got0, |_, g| !g.failed.is_empty());
    assert_eq!(got0.failed.len(), 1, "{:?}", got0.failed);
    assert!(
        got0.failed[0].0 == peer_id(0, 1) && got0.failed[0].1.contains("has finalized"),
        "{:?}",
        got0.failed
    );
    let e = nm0.try_send(peer_id(0, 1), b"h", b"late").unwrap_err();
    assert!(e.to_string().contains("has finalized"), "{e}");
    assert!(nm0.idle());
}

/// A hello copied from rank 1 (right key, right target) while its channel
/// is open: never heard, the open channel untouched. (Rank 0 has every
/// channel it expects, so it stopped listening: the connection is refused
/// outright; while it listens, a second channel from one rank is refused.)
fn refused_replay(nm: &mut ImpiNetmod, got: &mut Got, addr: &str, key: &JobKey) {
    if let Ok(mut s) = TcpStream::connect(addr) {
        s.write_all(&hello(key, 1, 0, [9; 8])).unwrap();
        for _ in 0..100 {
            nm.poll(got).unwrap();
        }
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut b = [0u8; 1];
        let r = s.read(&mut b);
        assert!(!matches!(r, Ok(n) if n > 0), "nothing is said to a replay");
    }
    assert_eq!(nm.channel_state(1), Some((true, false, false)));
}
