//! What the TCP netmod tests share: their settings on loopback, opening
//! netmods (or not, with a note, where io_uring cannot run), and one test
//! per backend for each test body.

use rivet_netmods::tcp::{Backend, TcpConfig, TcpNetmod};

use super::uring_missing_here;

/// `backend` on loopback, everything else the default: what a test of one
/// setting starts from.
pub fn plain(backend: Backend) -> TcpConfig {
    TcpConfig {
        backend,
        ifaces: vec!["lo".into()],
        ..TcpConfig::default()
    }
}

/// `plain` with 8 MiB pieces: the data tests send payloads of up to 8 MiB.
pub fn config(backend: Backend) -> TcpConfig {
    TcpConfig {
        piece: 8 << 20,
        ..plain(backend)
    }
}

/// `n` netmods of ranks 0..n in job `job`, or `None` (with a note) if the
/// io_uring backend cannot run here.
pub fn open_n(backend: Backend, job: &str, n: u64) -> Option<Vec<TcpNetmod>> {
    open_n_with(&config(backend), job, n)
}

/// `n` netmods of ranks 0..n in job `job` with `cfg`, or `None` (with a
/// note) if `cfg` asks for io_uring and it cannot run here.
pub fn open_n_with(cfg: &TcpConfig, job: &str, n: u64) -> Option<Vec<TcpNetmod>> {
    let procs: Vec<(&str, u64)> = (0..n).map(|r| (job, r)).collect();
    open_with(cfg, &procs)
}

/// One netmod per `(job, rank)`, or `None` (with a note) if the io_uring
/// backend cannot run here.
pub fn open_jobs(backend: Backend, procs: &[(&str, u64)]) -> Option<Vec<TcpNetmod>> {
    open_with(&config(backend), procs)
}

/// One netmod per `(job, rank)` with `cfg`, or `None` (with a note) if
/// `cfg` asks for io_uring and it cannot run here.
pub fn open_with(cfg: &TcpConfig, procs: &[(&str, u64)]) -> Option<Vec<TcpNetmod>> {
    let mut v = Vec::new();
    for &(job, rank) in procs {
        v.push(open_one(cfg.clone(), job, rank)?);
    }
    Some(v)
}

/// A netmod with `cfg`, or `None` (with a note) if `cfg` asks for io_uring
/// and it cannot run here.
pub fn open_one(cfg: TcpConfig, job: &str, rank: u64) -> Option<TcpNetmod> {
    let backend = cfg.backend;
    match TcpNetmod::new(cfg, job, rank) {
        Ok(m) => {
            if backend != Backend::Auto {
                assert_eq!(m.backend(), backend);
            }
            Some(m)
        }
        Err(e) if backend == Backend::Uring && uring_missing_here(&e) => None,
        Err(e) => panic!("{e}"),
    }
}

/// One `#[test]` per backend for each listed `fn(b: Backend)` of the
/// calling file (in modules `poll` and `uring`, so the names read
/// `poll::placement`).
#[allow(unused_macros)] // not every test binary has per-backend tests
macro_rules! both_backends {
    ($($name:ident),*) => {
        mod poll {
            use super::*;
            $(#[test] fn $name() { super::$name(Backend::Poll) })*
        }
        mod uring {
            use super::*;
            $(#[test] fn $name() { super::$name(Backend::Uring) })*
        }
    };
}

#[allow(unused_imports)]
pub(crate) use both_backends;
