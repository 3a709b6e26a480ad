//! Loading libfabric must not change how the process dies. A test binary
//! of its own: nothing else in this process loads libfabric, so "before"
//! is the process's own state.

#![cfg(feature = "ofi")]

mod common;

use common::ofi::{plain, TCP};
use rivet_netmods::OfiNetmod;

/// The current handler of `sig` (`SIG_DFL`, `SIG_IGN` or a function).
fn handler(sig: i32) -> libc::sighandler_t {
    // SAFETY: a null new action only reads the current one.
    let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
    assert_eq!(
        unsafe { libc::sigaction(sig, std::ptr::null(), &mut now) },
        0
    );
    now.sa_sigaction
}

/// Loading libfabric runs libinfinipath's constructor, which installs
/// backtrace handlers that exit 1; the netmod puts the process's own
/// dispositions back, so a rank that aborts still dies of SIGABRT.
#[test]
fn opening_leaves_signal_handlers_alone() {
    let sigs = [
        libc::SIGINT,
        libc::SIGILL,
        libc::SIGABRT,
        libc::SIGBUS,
        libc::SIGSEGV,
        libc::SIGTERM,
    ];
    let before: Vec<_> = sigs.iter().map(|&s| handler(s)).collect();
    let net = OfiNetmod::new(plain(TCP), "signals", 0).unwrap();
    let after: Vec<_> = sigs.iter().map(|&s| handler(s)).collect();
    assert_eq!(
        before, after,
        "handlers of {sigs:?} changed by opening libfabric"
    );
    drop(net);
}
