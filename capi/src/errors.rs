//! Error codes, their strings, the last failure's message per thread, and
//! the panic boundary every export runs inside.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

pub const RIVET_SUCCESS: c_int = 0;
/// A null pointer, a buffer too small, a value out of range.
pub const RIVET_ERR_INVALID_ARG: c_int = 1;
/// A rank outside the communicator.
pub const RIVET_ERR_RANK: c_int = 2;
/// A negative tag (other than `RIVET_ANY_TAG` on receives).
pub const RIVET_ERR_TAG: c_int = 3;
/// A message longer than the receive buffer (in a status).
pub const RIVET_ERR_TRUNCATE: c_int = 4;
/// The peer failed before the operation finished.
pub const RIVET_ERR_PEER_FAILED: c_int = 5;
/// The process manager (PMI) refused or failed.
pub const RIVET_ERR_PMI: c_int = 6;
/// Shared memory could not be set up or was corrupted.
pub const RIVET_ERR_SHM: c_int = 7;
/// A network module failed, or no path leads to the peer.
pub const RIVET_ERR_NETMOD: c_int = 8;
/// A `RIVET_*` setting is malformed.
pub const RIVET_ERR_CONFIG: c_int = 9;
/// A peer broke the protocol.
pub const RIVET_ERR_PROTOCOL: c_int = 10;
/// A bad port name, or the port connection failed.
pub const RIVET_ERR_PORT: c_int = 11;
/// A spawn failed.
pub const RIVET_ERR_SPAWN: c_int = 12;
/// Not available here (e.g. spawn without a process manager).
pub const RIVET_ERR_UNSUPPORTED: c_int = 13;
/// The engine was finalized.
pub const RIVET_ERR_FINALIZED: c_int = 14;
/// The engine stopped working, or the operation failed at its root.
pub const RIVET_ERR_FAILED: c_int = 15;
/// A system call failed.
pub const RIVET_ERR_IO: c_int = 16;
/// A name looked up was not published.
pub const RIVET_ERR_NOT_FOUND: c_int = 17;
/// A bug in Rivet (a Rust panic, caught at the C boundary).
pub const RIVET_ERR_PANIC: c_int = 18;
/// `rivet_waitall`: some request failed; its status says how.
pub const RIVET_ERR_IN_STATUS: c_int = 19;

/// The static description of an error code (never null).
#[no_mangle]
pub extern "C" fn rivet_strerror(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        RIVET_SUCCESS => c"success",
        RIVET_ERR_INVALID_ARG => c"invalid argument",
        RIVET_ERR_RANK => c"rank out of range",
        RIVET_ERR_TAG => c"invalid tag",
        RIVET_ERR_TRUNCATE => c"message truncated",
        RIVET_ERR_PEER_FAILED => c"peer failed",
        RIVET_ERR_PMI => c"process manager (PMI) error",
        RIVET_ERR_SHM => c"shared memory error",
        RIVET_ERR_NETMOD => c"network module error",
        RIVET_ERR_CONFIG => c"bad RIVET_* setting",
        RIVET_ERR_PROTOCOL => c"protocol error from a peer",
        RIVET_ERR_PORT => c"port error",
        RIVET_ERR_SPAWN => c"spawn failed",
        RIVET_ERR_UNSUPPORTED => c"not supported here",
        RIVET_ERR_FINALIZED => c"the engine has been finalized",
        RIVET_ERR_FAILED => c"the operation failed",
        RIVET_ERR_IO => c"system call failed",
        RIVET_ERR_NOT_FOUND => c"name not found",
        RIVET_ERR_PANIC => c"internal error (a bug in Rivet)",
        RIVET_ERR_IN_STATUS => c"a request failed: see its status",
        _ => c"unknown error code",
    };
    s.as_ptr()
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// The message of the last call on this thread that failed: what went
/// wrong and what to do (empty if none failed yet). Valid until this
/// thread's next failing call.
#[no_mangle]
pub extern "C" fn rivet_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

fn remember(message: String) {
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = message);
}

/// A failure on its way to C: a code and the message for `rivet_last_error`.
/// Boxed, so that a `Result<(), Fail>` is one pointer (null: success) and
/// comes back from the inlined body in a register, not through memory.
pub struct Fail(Box<(c_int, String)>);

impl Fail {
    /// A failure with `code` and `message` (cold: only failures build one).
    #[cold]
    #[inline(never)]
    pub fn new(code: c_int, message: impl Into<String>) -> Fail {
        Fail(Box::new((code, message.into())))
    }
}

impl From<rivet::Error> for Fail {
    // Cold and out of line: every `?` on an engine call converts through
    // here, and the success path should not carry its code.
    #[cold]
    #[inline(never)]
    fn from(e: rivet::Error) -> Fail {
        use rivet::Error as E;
        let code = match &e {
            E::Pmi(rivet::pmi::Error::NoProcessManager { .. }) => RIVET_ERR_UNSUPPORTED,
            E::Pmi(_) => RIVET_ERR_PMI,
            E::Shm(_) => RIVET_ERR_SHM,
            E::RankOutOfRange { .. } => RIVET_ERR_RANK,
            E::InvalidTag(_) => RIVET_ERR_TAG,
            E::NoRoute(_) | E::Netmod(_) => RIVET_ERR_NETMOD,
            E::PeerFailed { .. } => RIVET_ERR_PEER_FAILED,
            E::Config { .. } => RIVET_ERR_CONFIG,
            E::Protocol { .. } => RIVET_ERR_PROTOCOL,
            E::BadPort { .. } | E::PortClosed(_) => RIVET_ERR_PORT,
            E::Spawn { .. } => RIVET_ERR_SPAWN,
            E::InvalidArgument(_) => RIVET_ERR_INVALID_ARG,
            E::Unsupported(_) => RIVET_ERR_UNSUPPORTED,
            E::RootFailed { .. } | E::Failed(_) => RIVET_ERR_FAILED,
            E::Finalized => RIVET_ERR_FINALIZED,
            E::Io { .. } => RIVET_ERR_IO,
        };
        Fail::new(code, e.to_string())
    }
}

/// An argument error with its message (cold: only failures build one).
#[cold]
#[inline(never)]
pub fn invalid(what: impl Into<String>) -> Fail {
    Fail::new(RIVET_ERR_INVALID_ARG, what)
}

pub type CResult = Result<(), Fail>;

/// Run an export's body: its error as a code (message kept for
/// `rivet_last_error`), a panic as `RIVET_ERR_PANIC`. Inlined into every
/// export so that success costs no call; failures leave through cold
/// functions. The body's `Result` becomes a plain code inside the unwind
/// guard, so only an integer crosses it (a `Result<(), Fail>` would be
/// written to memory and read back on every call).
#[inline(always)]
pub fn boundary(name: &'static str, body: impl FnOnce() -> CResult) -> c_int {
    let guarded = || match body() {
        Ok(()) => RIVET_SUCCESS,
        Err(fail) => failed(name, fail),
    };
    match catch_unwind(AssertUnwindSafe(guarded)) {
        Ok(code) => code,
        Err(panic) => panicked(name, panic),
    }
}

#[cold]
#[inline(never)]
fn failed(name: &str, fail: Fail) -> c_int {
    let (code, message) = *fail.0;
    remember(format!("{name}: {message}"));
    code
}

#[cold]
#[inline(never)]
fn panicked(name: &str, panic: Box<dyn std::any::Any + Send>) -> c_int {
    let why = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    remember(format!("{name}: internal error: {why}"));
    RIVET_ERR_PANIC
}
