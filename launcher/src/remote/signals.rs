//! rivetrun's signals during a multi-host job: recorded by the handler,
//! taken by the event loop, which passes them on to the proxies.

use std::sync::atomic::{AtomicI32, Ordering};

/// The last signal rivetrun received (SIGINT, SIGTERM, SIGHUP), 0 if none.
pub(super) static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, Ordering::Relaxed);
}

pub(super) fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}
