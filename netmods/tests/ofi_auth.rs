//! The ofi netmod's HELLO with a job secret (issue 20): a process that
//! names itself a rank of our job without the secret's MAC is refused
//! and holds nothing; the genuine rank then connects as usual. After the
//! handshake, a stranger who knows (guessed) the connection's id and next
//! sequence number can forge neither data, nor a BYE, CTS, CREDIT or PING,
//! nor a VERDICT redirecting the connection. For
//! `tcp;ofi_rxm` (on loopback) and `shm`, between instances in this
//! process; every wait is bounded.

#![cfg(feature = "ofi")]

mod common;

use std::time::Duration;

use common::ofi::*;
use common::*;
use rivet_netmods::auth::JobKey;
use rivet_netmods::{Forgery, Netmod, OfiConfig, OfiNetmod};

fn open(prov: &str, key: Option<JobKey>, rank: u64) -> OfiNetmod {
    let cfg = OfiConfig {
        job_key: key,
        ..plain(prov)
    };
    open_with(&cfg, &[("authjob", rank)]).unwrap().remove(0)
}

fn forged_hello_refused(prov: &str) {
    let key = JobKey::new([0x5a; 16]);
    // 0: the rank attacked; 1: the genuine rank 1; 2, 3: strangers posing
    // as rank 1 (no secret, a wrong one).
    let mut nets = vec![
        open(prov, Some(key), 0),
        open(prov, Some(key), 1),
        open(prov, None, 1),
        open(prov, Some(JobKey::new([0x5b; 16])), 1),
    ];
    let mut sinks: Vec<Rec> = (0..4).map(|_| Rec::default()).collect();
    let c0 = card(&nets, 0);
    for i in [2, 3] {
        nets[i].connect(0, &c0).unwrap();
        send(&mut nets, &mut sinks, i, 0, 0, 10);
        pump(&mut nets, &mut sinks, |_, s| !s[i].failed.is_empty());
        let (peer, why) = &sinks[i].failed[0];
        assert_eq!(*peer, 0);
        assert!(why.contains("rejected by the peer"), "{why}");
    }
    // Nothing of theirs reached rank 0, which holds no peer for them.
    assert!(sinks[0].msgs.is_empty() && sinks[0].failed.is_empty());
    assert!(!nets[0].knows(1));
    assert_eq!(nets[0].peer_count(), 0);
    assert_eq!(nets[0].connections_made(), 0);
    assert_eq!(nets[0].dropped(), 2, "{:?}", nets[0].describe());
    assert!(describe(&nets[0], "ofi.dropped").contains("job secret"));
    // The genuine rank 1 connects and is heard, in both directions.
    nets[1].connect(0, &c0).unwrap();
    let c1 = card(&nets, 1);
    nets[0].connect(1, &c1).unwrap();
    send(&mut nets, &mut sinks, 1, 0, 0, 10);
    send(&mut nets, &mut sinks, 0, 1, 0, 20);
    pump(&mut nets, &mut sinks, |_, s| {
        s[0].msgs.len() == 1 && s[1].msgs.len() == 1
    });
    assert_eq!(sinks[0].from(1), expect(1, &[10]));
    assert_eq!(sinks[1].from(0), expect(0, &[20]));
    assert!(sinks[0].failed.is_empty() && sinks[1].failed.is_empty());
    assert_eq!(nets[0].dropped(), 2);
}

fn forged_messages_after_the_handshake_are_dropped(prov: &str) {
    let key = JobKey::new([0x5a; 16]);
    // Ranks 0 and 1 of the job, and a stranger (2) without the secret.
    let mut nets = vec![
        open(prov, Some(key), 0),
        open(prov, Some(key), 1),
        open(prov, None, 1),
    ];
    let mut sinks: Vec<Rec> = (0..3).map(|_| Rec::default()).collect();
    let (c0, c1) = (card(&nets, 0), card(&nets, 1));
    nets[0].connect(1, &c1).unwrap();
    nets[1].connect(0, &c0).unwrap();
    send(&mut nets, &mut sinks, 1, 0, 0, 10);
    send(&mut nets, &mut sinks, 0, 1, 0, 20);
    pump(&mut nets, &mut sinks, |_, s| {
        s[0].msgs.len() == 1 && s[1].msgs.len() == 1
    });
    // The worst case: the stranger knows the id rank 1's messages to
    // rank 0 carry, and that the next one is number 1.
    let id = nets[0]
        .connection_id(1)
        .expect("rank 0 has a connection to 1");
    let before = nets[0].dropped();
    let forged = [
        Forgery::Msg {
            seq: 1,
            header: header(1, 30),
            payload: payload(2, 1, 30),
        },
        Forgery::Bye { seq: 1 },
        Forgery::Cts { seq: 0 },
        Forgery::Credit(5),
        Forgery::Ping,
        Forgery::Accept { conn: 0x1234_5678 },
    ];
    for f in &forged {
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while !nets[2].forge(&c0, id, f).unwrap() {
            assert!(std::time::Instant::now() < end, "cannot forge {f:?}");
            spin(&mut nets, &mut sinks, 1);
        }
    }
    let n = forged.len() as u64;
    pump(&mut nets, &mut sinks, |n_, _| n_[0].dropped() >= before + n);
    assert_eq!(nets[0].dropped(), before + n, "{:?}", nets[0].describe());
    assert!(
        describe(&nets[0], "ofi.dropped").contains("without its"),
        "{:?}",
        nets[0].describe()
    );
    // Nothing forged reached the engine or failed the pair ...
    assert_eq!(sinks[0].from(1), expect(1, &[10]));
    assert!(sinks[0].failed.is_empty() && sinks[1].failed.is_empty());
    // ... and it goes on in both directions: rank 0 still sends to rank
    // 1's own id (the forged VERDICT did not redirect it), and rank 1's
    // message 1 is handled as number 1.
    send(&mut nets, &mut sinks, 1, 0, 1, 40);
    send(&mut nets, &mut sinks, 0, 1, 1, 50);
    pump(&mut nets, &mut sinks, |_, s| {
        s[0].msgs.len() == 2 && s[1].msgs.len() == 2
    });
    assert_eq!(sinks[0].from(1), expect(1, &[10, 40]));
    assert_eq!(sinks[1].from(0), expect(0, &[20, 50]));
    assert!(sinks[0].failed.is_empty() && sinks[1].failed.is_empty());
    assert_eq!(nets[0].dropped(), before + n);
    assert_eq!(nets[1].dropped(), 0);
}

/// A port connection (accept/connect) is proven by the port's tag: a
/// stranger who knows the connection's id but not the tag forges nothing.
fn forged_messages_on_a_port_connection_are_dropped(prov: &str) {
    let key = JobKey::new([0x5a; 16]);
    let mut nets = vec![
        open(prov, Some(key), 0),
        open(prov, Some(JobKey::new([0x33; 16])), 0),
        open(prov, None, 7),
    ];
    let mut sinks: Vec<Rec> = (0..3).map(|_| Rec::default()).collect();
    let c0 = card(&nets, 0);
    let p = nets[1].connect_port(&c0, 0x0123_4567_89ab_cdef).unwrap();
    send(&mut nets, &mut sinks, 1, p, 0, 10);
    pump(&mut nets, &mut sinks, |_, s| s[0].msgs.len() == 1);
    let (q, tag, _) = sinks[0].ports[0];
    assert_eq!(tag, 0x0123_4567_89ab_cdef);
    let id = nets[0].connection_id(q).expect("the port's connection");
    let before = nets[0].dropped();
    let forged = Forgery::Msg {
        seq: 1,
        header: header(1, 30),
        payload: payload(2, 1, 30),
    };
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while !nets[2].forge(&c0, id, &forged).unwrap() {
        assert!(std::time::Instant::now() < end, "cannot forge");
        spin(&mut nets, &mut sinks, 1);
    }
    pump(&mut nets, &mut sinks, |n, _| n[0].dropped() > before);
    // The genuine message 1 still comes, and both ways work.
    send(&mut nets, &mut sinks, 1, p, 1, 40);
    send(&mut nets, &mut sinks, 0, q, 0, 50);
    pump(&mut nets, &mut sinks, |_, s| {
        s[0].msgs.len() == 2 && s[1].msgs.len() == 1
    });
    assert_eq!(sinks[0].from(q), expect(1, &[10, 40]));
    assert_eq!(sinks[1].from(p), expect(0, &[50]));
    assert_eq!(nets[0].dropped(), before + 1);
}

/// Without a secret (Hydra, singletons) nothing is checked, as before.
fn no_secret_no_check(prov: &str) {
    let mut nets = vec![open(prov, None, 0), open(prov, None, 1)];
    let mut sinks: Vec<Rec> = (0..2).map(|_| Rec::default()).collect();
    connect_all(&mut nets);
    send(&mut nets, &mut sinks, 1, 0, 0, 10);
    pump(&mut nets, &mut sinks, |_, s| s[0].msgs.len() == 1);
    assert_eq!(sinks[0].from(1), expect(1, &[10]));
    assert_eq!(nets[0].dropped(), 0);
}

both_providers!(
    forged_hello_refused,
    forged_messages_after_the_handshake_are_dropped,
    forged_messages_on_a_port_connection_are_dropped,
    no_secret_no_check
);
