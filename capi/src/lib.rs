//! librivet: Rivet's C ABI, for MPI runtimes and C libraries that link a
//! communication engine the way they link UCX or libfabric.
//!
//! The exports (`rivet_*`, declared in `include/rivet.h`, which cbindgen
//! generates from this crate; `header_tests` fails if it is stale) are thin
//! shells over the `rivet` engine:
//!
//! * [`handles`]: the opaque `rivet_engine_t` / `rivet_comm_t` /
//!   `rivet_group_t`. The engine's thread level is a Rust type (`Local`
//!   below MULTIPLE, `Shared` at it); C chooses it at run time, so each
//!   handle holds one or the other and every call dispatches on it once;
//! * [`errors`]: error codes, `rivet_strerror`, and the per-thread
//!   message of the last failure (`rivet_last_error`);
//! * [`init`] (start-up through PMI, finalize, abort, info), [`bootstrap`]
//!   (start-up without one: address blobs and "add these peers"), [`comm`]
//!   (communicators, caller context ids), [`p2p`] (sends, receives,
//!   probes), [`request`] (test/wait/cancel on `u64` handles),
//!   [`dynamic`] (ports, accept/connect, spawn, names, group connect);
//! * every export runs inside [`errors::boundary`]: a Rust panic becomes
//!   `RIVET_ERR_PANIC` and never unwinds into C; pointers from C are
//!   checked for null and output buffers for room before anything is
//!   written.
//!
//! The library's file names, soname and pkg-config files come from
//! `build.rs`.

#![deny(clippy::undocumented_unsafe_blocks)]
// Exported types keep C's spelling (`rivet_status_t`).
#![allow(non_camel_case_types)]

pub mod bootstrap;
pub mod comm;
pub mod dynamic;
pub mod errors;
pub mod handles;
pub mod init;
pub mod p2p;
pub mod request;
mod strings;

#[cfg(test)]
mod header_tests;

pub use dynamic::*;
pub use errors::*;
pub use handles::{rivet_comm_t, rivet_engine_t, rivet_group_t, rivet_message_t, rivet_request_t};

/// The C API's version: `RIVET_API_VERSION` in rivet.h; bumped with the
/// soname on incompatible changes. `rivet_init` refuses another.
pub const RIVET_API_VERSION: u32 = 1;

/// Receive from any rank (the engine's `ANY_SOURCE`; a test checks).
pub const RIVET_ANY_SOURCE: i32 = -1;
/// Receive any tag (the engine's `ANY_TAG`; a test checks).
pub const RIVET_ANY_TAG: i32 = -1;
/// No request; also what a completed request's handle becomes.
pub const RIVET_REQUEST_NULL: u64 = 0;
/// No message; what a received matched message's handle becomes.
pub const RIVET_MESSAGE_NULL: u64 = 0;

/// Room a port name needs, with its terminating NUL.
pub const RIVET_PORT_NAME_MAX: usize = 1024;
/// Largest caller-chosen context id (`rivet_comm_create`; the engine's
/// `USER_CONTEXT_MAX`, a test checks).
pub const RIVET_CONTEXT_ID_MAX: u32 = 0x0fff_ffff;

/// Thread levels (MPI's four, in order).
pub const RIVET_THREAD_SINGLE: i32 = 0;
pub const RIVET_THREAD_FUNNELED: i32 = 1;
pub const RIVET_THREAD_SERIALIZED: i32 = 2;
pub const RIVET_THREAD_MULTIPLE: i32 = 3;

/// The outcome of a receive, a probe or a completed request.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct rivet_status_t {
    /// The sender's rank in the communicator (receives and probes).
    pub source: i32,
    pub tag: i32,
    /// `RIVET_SUCCESS`, `RIVET_ERR_TRUNCATE` (the first `count` bytes were
    /// delivered) or `RIVET_ERR_PEER_FAILED`.
    pub error: i32,
    /// 1 if the operation was cancelled (nothing sent or received).
    pub cancelled: i32,
    /// Bytes received (receives) or waiting (probes).
    pub count: u64,
}

impl From<rivet::Status> for rivet_status_t {
    fn from(s: rivet::Status) -> rivet_status_t {
        rivet_status_t {
            source: s.source,
            tag: s.tag,
            error: match s.error {
                None => RIVET_SUCCESS,
                Some(rivet::MsgError::Truncated { .. }) => RIVET_ERR_TRUNCATE,
                Some(rivet::MsgError::PeerFailed { .. }) => RIVET_ERR_PEER_FAILED,
            },
            cancelled: s.cancelled as i32,
            count: s.count as u64,
        }
    }
}

/// Store `s` where C asked for it (a null pointer means "ignore").
///
/// # Safety
/// `out` is null or valid for a write of one `rivet_status_t`.
pub(crate) unsafe fn put_status(out: *mut rivet_status_t, s: rivet::Status) {
    if !out.is_null() {
        // SAFETY: non-null, and valid for writes by the caller's contract.
        unsafe { out.write(s.into()) };
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn header_constants_are_the_engines() {
        assert_eq!(super::RIVET_ANY_SOURCE, rivet::ANY_SOURCE);
        assert_eq!(super::RIVET_ANY_TAG, rivet::ANY_TAG);
        assert_eq!(super::RIVET_CONTEXT_ID_MAX, rivet::USER_CONTEXT_MAX);
    }
}

/// Every export runs its body inside `errors::boundary` (so no panic
/// unwinds into C), except the two that cannot panic and `rivet_mrecv`,
/// which calls `rivet_imrecv` first and then its own boundary.
#[cfg(test)]
mod boundary_tests {
    #[test]
    fn every_export_runs_inside_the_panic_boundary() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut exports = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for (i, part) in text
                .split(concat!("#[no_mangle]", "\npub "))
                .enumerate()
                .skip(1)
            {
                let name = part
                    .split("fn ")
                    .nth(1)
                    .and_then(|s| s.split('(').next())
                    .unwrap_or_else(|| panic!("{}: export {i} has no fn", path.display()));
                exports += 1;
                let body = part.split_once(" {\n").map_or("", |(_, b)| b);
                let first = body.trim_start();
                let guarded = first.starts_with(&format!("boundary(\"{name}\""));
                let exempt = matches!(
                    name,
                    "rivet_strerror" | "rivet_last_error" | "rivet_mrecv" | "rivet_abort"
                );
                assert!(
                    guarded || exempt,
                    "{name} in {} does not start with boundary(\"{name}\", ...)",
                    path.display()
                );
            }
        }
        assert!(exports >= 50, "found only {exports} exports");
    }
}
