//! The libfabric netmod's set-up: bad cards and settings, group errors,
//! what `describe` says, provider and domain choice, and no /dev/shm
//! leftovers, between instances in this process, for the providers
//! `tcp;ofi_rxm` (on loopback) and `shm`, which every libfabric build has:
//! a provider that cannot be opened fails the test. Every wait is bounded:
//! a stuck test fails after its deadline.

#![cfg(feature = "ofi")]

mod common;

use common::ofi::*;
use common::setup::{bad_sends_refused, bad_vars_named};
use common::*;
use rivet_netmods::{Netmod, NetmodError, OfiConfig, OfiNetmod};

/// Files in /dev/shm whose names contain `needle`.
fn shm_files(needle: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(needle))
                .collect()
        })
        .unwrap_or_default()
}

/// The endpoint name in a card, as text (shm names are strings).
fn card_name(card: &str) -> String {
    let hex = card.rsplit(':').next().unwrap();
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    String::from_utf8_lossy(&bytes)
        .trim_end_matches('\0')
        .to_string()
}

#[test]
fn shm_leaves_nothing_in_dev_shm() {
    let Some(mut nets) = open_n(SHM, "leak", 2) else {
        return;
    };
    let mut sinks = vec![Rec::default(), Rec::default()];
    connect_all(&mut nets);
    send(&mut nets, &mut sinks, 0, 1, 0, 3 << 20);
    send(&mut nets, &mut sinks, 1, 0, 0, 10);
    pump(&mut nets, &mut sinks, |n, s| {
        s.iter().all(|s| s.msgs.len() == 1) && n.iter().all(|n| n.idle())
    });
    // "fi_shm://PID:N:M" lives in /dev/shm as "PID:N:M" while open.
    let names: Vec<String> = nets.iter().map(|n| card_name(n.business_card())).collect();
    let files: Vec<String> = names
        .iter()
        .map(|n| n.trim_start_matches("fi_shm://").to_string())
        .collect();
    let before: Vec<Vec<String>> = files.iter().map(|f| shm_files(f)).collect();
    eprintln!("shm endpoints {names:?}, files while open: {before:?}");
    drop(nets);
    for f in &files {
        let left = shm_files(f);
        assert!(
            left.iter().all(|l| l != f),
            "libfabric's shm provider left /dev/shm/{f}"
        );
    }
}

#[test]
fn group_errors() {
    let Some(mut nets) = open_n(TCP, "groups", 1) else {
        return;
    };
    let n = &mut nets[0];
    let c = n.business_card().to_string();
    common::setup::group_errors(n, &c);
    assert!(OfiNetmod::new(config(TCP), "groups", 1 << 32).is_err());
    assert!(OfiNetmod::new(config(TCP), &"j".repeat(257), 0).is_err());
}

#[test]
fn bad_cards_and_settings() {
    let Some(mut nets) = open_n(TCP, "cards", 1) else {
        return;
    };
    let n = &mut nets[0];
    let good = n.business_card().to_string();
    assert!(good.starts_with("ofi:tcp;ofi_rxm:"), "{good}");
    assert!(!good.contains(char::is_whitespace));
    let short = &good[..good.len() - 2];
    let shm_card = "ofi:shm:66695f73686d3a2f2f313a303a3000";
    for card in [
        "",
        "ofi:",
        "tcp:127.0.0.1:5",
        "ofi:tcp;ofi_rxm:",
        "ofi:tcp;ofi_rxm:xyz",
        "ofi:tcp;ofi_rxm:0102",
        short,
        shm_card,
    ] {
        assert!(
            matches!(n.connect(1, card), Err(NetmodError::BadCard { .. })),
            "{card:?}"
        );
    }
    let e = n.connect(1, shm_card).unwrap_err().to_string();
    assert!(e.contains("provider \"shm\""), "{e}");
    bad_sends_refused(n, &good);

    let e = OfiNetmod::new(
        OfiConfig {
            provider: Some("foo".into()),
            ..OfiConfig::default()
        },
        "j",
        0,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("no libfabric provider \"foo\" offers FI_EP_RDM")
            && e.contains("available: ")
            && e.contains("tcp;ofi_rxm"),
        "{e}"
    );
    let e = OfiNetmod::new(
        OfiConfig {
            domain: Some("no-such-nic9".into()),
            ..config(TCP)
        },
        "j",
        0,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("no-such-nic9") && e.contains("lo"), "{e}");
    bad_vars_named(
        |v| OfiConfig::from_vars(v),
        &[
            &[("RIVET_OFI_EAGER_MAX", "12Q")],
            &[("RIVET_OFI_PIECE", "0")],
            &[("RIVET_OFI_TIMEOUT", "never")],
        ],
    );
}

#[test]
fn describe_says_what_runs() {
    for prov in [TCP, SHM] {
        let Some(nets) = open_n(prov, "desc", 1) else {
            continue;
        };
        let d = nets[0].describe();
        eprintln!("{prov}: {d:#?}");
        let get = |k: &str| describe(&nets[0], k);
        assert!(get("ofi.provider").starts_with(prov), "{d:?}");
        assert!(get("ofi.provider").contains("API 1.17"), "{d:?}");
        assert!(get("ofi.caps").contains("FI_TAGGED"), "{d:?}");
        assert!(!get("ofi.mr_mode").is_empty());
        let rma = get("ofi.rma");
        assert!(
            rma.starts_with("read (FI_RMA)")
                || rma.ends_with("rendezvous data is streamed with sends"),
            "{rma}"
        );
        assert_eq!(get("ofi.card"), nets[0].business_card());
        assert_eq!(nets[0].name(), "ofi");
        let l = nets[0].limits();
        let eager = if prov == SHM { 8 << 10 } else { 64 << 10 };
        assert_eq!((l.max_payload, l.eager_max), (8 << 20, eager));
    }
    // Without RMA asked for, it says so.
    let cfg = OfiConfig {
        rma: false,
        ..config(TCP)
    };
    if let Some(mut nets) = open_with(&cfg, &[("desc", 0)]) {
        assert!(nets[0].rma().is_none());
        assert!(describe(&nets[0], "ofi.rma").starts_with("none ("));
    }
}

/// What `auto` looks at: the providers that fit, and which beat tcp.
#[test]
fn providers_here_and_the_fast_one() {
    let all = rivet_netmods::ofi::providers().unwrap();
    for p in [TCP, SHM] {
        assert!(all.iter().any(|a| a == p), "{p} missing from {all:?}");
    }
    let fast = rivet_netmods::ofi_fast_provider().unwrap();
    // Whatever this machine has, the answer is consistent with the list.
    assert_eq!(
        fast,
        all.iter().find(|p| rivet_netmods::ofi::is_fast(p)).cloned(),
        "{all:?}"
    );
    assert!(!rivet_netmods::ofi::is_fast(TCP) && !rivet_netmods::ofi::is_fast(SHM));
    eprintln!("providers here: {all:?}; faster than tcp: {fast:?}");
}

/// A preferred domain is taken where the provider offers it, and is no
/// requirement where it does not; a set domain wins.
#[test]
fn preferred_domain() {
    let open = |prefer: &str| {
        let cfg = OfiConfig {
            provider: Some(TCP.into()),
            domain: None,
            prefer_domain: Some(prefer.into()),
            ..OfiConfig::default()
        };
        let n = OfiNetmod::new(cfg, "pref", 0).unwrap();
        describe(&n, "ofi.provider")
    };
    assert!(open("lo").contains("domain lo,"), "{}", open("lo"));
    let any = open("no-such-nic9");
    assert!(any.contains(TCP), "{any}");
    let set = OfiConfig {
        prefer_domain: Some("no-such-nic9".into()),
        ..config(TCP)
    };
    let n = OfiNetmod::new(set, "pref", 1).unwrap();
    assert!(describe(&n, "ofi.provider").contains("domain lo,"));
}
