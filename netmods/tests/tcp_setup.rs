//! The TCP netmod's set-up: group errors, bad cards and settings, a refused
//! connect, and the described io_uring fallback, between instances in this
//! process, over loopback, for both backends (io_uring skipped with a note
//! where no ring can be made). Every wait is bounded: a stuck test fails
//! after its deadline.

mod common;

use common::setup::{bad_sends_refused, bad_vars_named};
use common::tcp::*;
use common::*;
use rivet_netmods::tcp::{Backend, TcpConfig, TcpNetmod};
use rivet_netmods::{Netmod, NetmodError};

#[test]
fn group_errors() {
    let mut n = TcpNetmod::new(config(Backend::Poll), "groups", 0).unwrap();
    common::setup::group_errors(&mut n, "tcp:127.0.0.1:1");
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
    bad_sends_refused(&mut n, "tcp:127.0.0.1:1");
    bad_vars_named(
        |v| TcpConfig::from_vars(v),
        &[
            &[("RIVET_TCP_BACKEND", "fast")],
            &[("RIVET_TCP_EAGER_MAX", "12Q")],
            &[("RIVET_TCP_PIECE", "0")],
        ],
    );
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
    assert_eq!(line, "poll (RIVET_TCP_BACKEND=poll)");
    assert!(p.describe()[1].1.starts_with("tcp:127.0.0.1:"));
    if let Ok(u) = TcpNetmod::new(config(Backend::Auto), "fallback", 0) {
        eprintln!("auto picked: {:?}", u.describe()[0]);
    }
}
