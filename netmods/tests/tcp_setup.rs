//! The TCP netmod's set-up: group errors, bad cards and settings, a refused
//! connect, and the described io_uring fallback, between instances in this
//! process, over loopback, for both backends (io_uring skipped with a note
//! where no ring can be made). Every wait is bounded: a stuck test fails
//! after its deadline.

mod common;

use common::tcp::*;
use common::*;
use rivet_netmods::tcp::{Backend, TcpConfig, TcpNetmod};
use rivet_netmods::{peer_id, Netmod, NetmodError, TEMP_GROUP};

#[test]
fn group_errors() {
    let mut n = TcpNetmod::new(config(Backend::Poll), "groups", 0).unwrap();
    for (g, job) in [(0, "x"), (TEMP_GROUP, "x"), (1, "groups")] {
        assert!(n.add_group(g, job).is_err(), "{g} {job}");
    }
    assert!(n.add_group(1, &"j".repeat(257)).is_err(), "job id too long");
    n.add_group(1, &"j".repeat(256)).unwrap();
    assert!(n.add_group(1, "other").is_err(), "group added already");
    let c = "tcp:127.0.0.1:1";
    n.connect(peer_id(1, 3), c).unwrap();
    // Groups not added, and temporary ids, cannot be connected to.
    assert!(matches!(
        n.connect(peer_id(2, 3), c),
        Err(NetmodError::Peer { .. })
    ));
    assert!(matches!(
        n.connect(peer_id(TEMP_GROUP, 0), c),
        Err(NetmodError::Peer { .. })
    ));
    n.remove_group(1);
    n.remove_group(1);
    n.add_group(1, "other").unwrap();
    assert!(n.knows(peer_id(1, 3)), "existing peers are not touched");
    assert_eq!(n.peer_count(), 1);
    n.disconnect(peer_id(1, 3));
    n.disconnect(12345);
    assert_eq!(n.peer_count(), 0);
    assert!(TcpNetmod::new(config(Backend::Poll), "groups", 1 << 32).is_err());
}

#[test]
fn bad_cards_and_settings() {
    let mut n = TcpNetmod::new(config(Backend::Poll), "cards", 0).unwrap();
    for card in [
        "",
        "tcp:",
        "ofi:fi_addr",
        "tcp:localhost:1",
        "tcp:1.2.3.4:0",
        "tcp:1.2.3.4:5,x",
    ] {
        assert!(
            matches!(n.connect(1, card), Err(NetmodError::BadCard { .. })),
            "{card:?}"
        );
    }
    assert!(!n.knows(1));
    assert!(matches!(
        n.try_send(1, b"h", b"p"),
        Err(NetmodError::Peer { peer: 1, .. })
    ));
    n.connect(1, "tcp:127.0.0.1:1").unwrap();
    let big = vec![0u8; (8 << 20) + 1];
    assert!(
        n.try_send(1, b"h", &big).is_err(),
        "payload above the piece size"
    );
    assert!(
        n.try_send(1, &[0; 257], b"").is_err(),
        "header above 256 bytes"
    );

    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    for bad in [
        &[("RIVET_TCP_BACKEND", "fast")][..],
        &[("RIVET_TCP_EAGER_MAX", "12Q")],
        &[("RIVET_TCP_PIECE", "0")],
    ] {
        let e = TcpConfig::from_vars(vars(bad)).unwrap_err().to_string();
        assert!(e.contains(bad[0].0), "{e}");
    }
    let c = TcpConfig {
        ifaces: vec!["no-such-if9".into()],
        ..TcpConfig::default()
    };
    let e = TcpNetmod::new(c, "j", 0).err().unwrap().to_string();
    assert!(e.contains("no-such-if9") && e.contains("lo"), "{e}");
}

#[test]
fn connect_refused_fails_the_peer() {
    for b in [Backend::Poll, Backend::Uring] {
        let Some(mut nets) = open_n(b, "refused", 1) else {
            continue;
        };
        let mut sinks = vec![Rec::default()];
        // A port nobody listens on: bind one, then close it.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let card = format!("tcp:{}", l.local_addr().unwrap());
        drop(l);
        nets[0].connect(5, &card).unwrap();
        match nets[0].try_send(5, &header(0, 1), b"x") {
            Ok(true) | Err(NetmodError::Peer { peer: 5, .. }) => {}
            r => panic!("{r:?}"),
        }
        pump(&mut nets, &mut sinks, |_, s| !s[0].failed.is_empty());
        spin(&mut nets, &mut sinks, 20);
        assert_eq!(sinks[0].failed.len(), 1);
        assert_eq!(sinks[0].failed[0].0, 5);
        assert!(nets[0].try_send(5, &header(0, 1), b"x").is_err());
    }
}

#[test]
fn uring_fallback_is_described() {
    let c = TcpConfig {
        inject_uring_failure: true,
        ..config(Backend::Auto)
    };
    let n = TcpNetmod::new(c.clone(), "fallback", 0).unwrap();
    assert_eq!(n.backend(), Backend::Poll);
    let d = n.describe();
    let line = &d.iter().find(|(k, _)| k == "tcp.backend").unwrap().1;
    assert!(
        line.starts_with("poll (io_uring unavailable: failure injected"),
        "{line}"
    );
    let e = TcpNetmod::new(
        TcpConfig {
            backend: Backend::Uring,
            ..c
        },
        "fallback",
        0,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("RIVET_TCP_BACKEND=uring") && e.contains("injected"),
        "{e}"
    );
    let p = TcpNetmod::new(config(Backend::Poll), "fallback", 0).unwrap();
    let line = p.describe()[0].1.clone();
    assert_eq!(line, "poll (RIVET_TCP_BACKEND=poll, the default)");
    assert!(p.describe()[1].1.starts_with("tcp:127.0.0.1:"));
    if let Ok(u) = TcpNetmod::new(config(Backend::Auto), "fallback", 0) {
        eprintln!("auto picked: {:?}", u.describe()[0]);
    }
}
