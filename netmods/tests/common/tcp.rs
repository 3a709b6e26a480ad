//! What the TCP netmod tests share: their settings on loopback, opening
//! netmods (or not, with a note, where io_uring cannot run), and one test
//! per backend for each test body.

use rivet_netmods::tcp::{Backend, TcpConfig, TcpNetmod};

use super::uring_missing_here;

pub fn config(backend: Backend) -> TcpConfig {
    TcpConfig {
        backend,
        ifaces: vec!["lo".into()],
        piece: 8 << 20,
        ..TcpConfig::default()
    }
}

/// `n` netmods of ranks 0..n in job `job`, or `None` (with a note) if the
/// io_uring backend cannot run here.
pub fn open_n(backend: Backend, job: &str, n: u64) -> Option<Vec<TcpNetmod>> {
    let procs: Vec<(&str, u64)> = (0..n).map(|r| (job, r)).collect();
    open_jobs(backend, &procs)
}

/// One netmod per `(job, rank)`, or `None` (with a note) if the io_uring
/// backend cannot run here.
pub fn open_jobs(backend: Backend, procs: &[(&str, u64)]) -> Option<Vec<TcpNetmod>> {
    let mut v = Vec::new();
    for &(job, rank) in procs {
        match TcpNetmod::new(config(backend), job, rank) {
            Ok(m) => {
                assert_eq!(m.backend(), backend);
                v.push(m);
            }
            Err(e) if backend == Backend::Uring && uring_missing_here(&e) => return None,
            Err(e) => panic!("{e}"),
        }
    }
    Some(v)
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
