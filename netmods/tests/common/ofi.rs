//! What the libfabric netmod tests share: their settings for the providers
//! `tcp;ofi_rxm` (on loopback) and `shm`, opening netmods, and one test per
//! provider for each test body.

use std::time::Duration;

use rivet_netmods::{OfiConfig, OfiNetmod};

pub const TCP: &str = "tcp;ofi_rxm";
pub const SHM: &str = "shm";

/// `prov` (tcp on loopback) with a 5 s timeout, everything else the
/// default: what a test of one setting starts from.
pub fn plain(prov: &str) -> OfiConfig {
    OfiConfig {
        provider: Some(prov.into()),
        domain: (prov == TCP).then(|| "lo".to_string()),
        timeout: Duration::from_secs(5),
        ..OfiConfig::default()
    }
}

/// `plain` with 8 MiB pieces: the data tests send payloads of up to 8 MiB.
pub fn config(prov: &str) -> OfiConfig {
    OfiConfig {
        piece: 8 << 20,
        ..plain(prov)
    }
}

/// One netmod per `(job, rank)` with `cfg`. (`Option` so that the test
/// bodies read the same if a provider is ever optional.)
pub fn open_with(cfg: &OfiConfig, procs: &[(&str, u64)]) -> Option<Vec<OfiNetmod>> {
    let mut v = Vec::new();
    for &(job, rank) in procs {
        match OfiNetmod::new(cfg.clone(), job, rank) {
            Ok(m) => {
                assert_eq!(m.provider(), cfg.provider.as_deref().unwrap());
                v.push(m);
            }
            Err(e) => panic!("cannot open provider {:?}: {e}", cfg.provider),
        }
    }
    Some(v)
}

pub fn open_jobs(prov: &str, procs: &[(&str, u64)]) -> Option<Vec<OfiNetmod>> {
    open_with(&config(prov), procs)
}

/// `n` netmods of ranks 0..n in job `job`.
pub fn open_n(prov: &str, job: &str, n: u64) -> Option<Vec<OfiNetmod>> {
    let procs: Vec<(&str, u64)> = (0..n).map(|r| (job, r)).collect();
    open_jobs(prov, &procs)
}

/// One `#[test]` per provider for each listed `fn(prov: &str)` of the
/// calling file (in modules `tcp_rxm` and `shm`, so the names read
/// `tcp_rxm::ordering`).
#[allow(unused_macros)] // not every test binary has per-provider tests
macro_rules! both_providers {
    ($($name:ident),*) => {
        mod tcp_rxm {
            $(#[test] fn $name() { super::$name(super::TCP) })*
        }
        mod shm {
            $(#[test] fn $name() { super::$name(super::SHM) })*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use both_providers;
