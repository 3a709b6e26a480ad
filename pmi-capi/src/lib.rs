//! librivet-pmi: the PMI-1 C API on Rivet's PMI-1 client.
//!
//! The exported functions are those of `include/pmi.h` (MPICH's pmi.h
//! signatures and return codes, plus the topology queries and resource
//! registration of the PMI interface document, seed 002). Each one is a thin
//! shell over [`rivet_pmi::Client`]:
//!
//! * the client lives in one process-global [`State`] behind a mutex
//!   (`PMI_Init` creates it, `PMI_Finalize` ends it; once per process);
//! * every export runs inside [`boundary`], so a Rust panic becomes
//!   `PMI_FAIL` and never unwinds into C;
//! * every pointer from C is checked for null and every output buffer for
//!   room before anything is written ([`strings`]); a bad argument is an
//!   error code, never a crash.
//!
//! The library's file names and pkg-config files are made by `build.rs`.
//!
//! Choices: librivet-pmi adds no dependency (`rivet-pmi` only) and no code generator: `pmi.h` is a
//! fixed standard API, so `include/pmi.h` is written by hand with MPICH's signatures and values
//! (programs built against MPICH's header behave the same), and `header_tests.rs` compiles every
//! Rust signature against it (C99 `-Werror`, C++ `is_same`). No cargo-c: `build.rs` (helpers in
//! `build/layout.rs`, shared with librivet) sets the soname and lays out `librivet-pmi.so`/`.a`,
//! `pmi.h` and the `.pc` files next to the libraries, so `cargo build` alone is enough.
//!
//! Module map: `lib.rs` the exports' global client state, panic boundary and error codes;
//! `group.rs` init, finalize, identity, barrier, abort; `kvs.rs` the key-value space; `spawn.rs`
//! `PMI_Spawn_multiple`; `topo.rs` the topology queries; `unsupported.rs` the calls the PMI
//! document lets an implementation leave out; `strings.rs` C strings, checked.
//!
//! What must stay true here: no Rust panic crosses into C (every export inside `catch_unwind`,
//! unit tests check each one; a panic is `PMI_FAIL`); return codes are MPICH's `pmi.h` values.

#![deny(clippy::undocumented_unsafe_blocks)]
// The exported names are the C API's.
#![allow(non_snake_case)]

mod group;
mod kvs;
mod spawn;
mod strings;
mod topo;
mod unsupported;

#[cfg(test)]
mod header_tests;

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};

use rivet_pmi::{Client, Error};

// Return codes: MPICH's pmi.h values (see include/pmi.h).
pub const PMI_SUCCESS: c_int = 0;
pub const PMI_FAIL: c_int = -1;
pub const PMI_ERR_INIT: c_int = 1;
pub const PMI_ERR_NOMEM: c_int = 2;
pub const PMI_ERR_INVALID_ARG: c_int = 3;
pub const PMI_ERR_INVALID_KEY: c_int = 4;
pub const PMI_ERR_INVALID_KEY_LENGTH: c_int = 5;
pub const PMI_ERR_INVALID_VAL: c_int = 6;
pub const PMI_ERR_INVALID_VAL_LENGTH: c_int = 7;
pub const PMI_ERR_INVALID_LENGTH: c_int = 8;
pub const PMI_ERR_INVALID_ARGS: c_int = 10;
/// Slurm's value; MPICH documents the name without defining it.
pub const PMI_ERR_INVALID_KVS: c_int = 14;
/// Rivet's value; the PMI document names it, no shipped header defines it.
pub const PMI_ERR_UNSUPPORTED: c_int = 15;

pub const PMI_TRUE: c_int = 1;
pub const PMI_FALSE: c_int = 0;

/// The process's PMI state.
enum State {
    /// Before `PMI_Init`.
    Fresh,
    Up(Box<Up>),
    /// After `PMI_Finalize`, or after an init that failed once it had taken
    /// the inherited PMI descriptor: the descriptor is closed (its number may
    /// now be another file's), so there is no second init.
    Done,
}

/// An initialised process.
struct Up {
    client: Client,
    /// Ranks on this node, computed on first use.
    clique: Option<Vec<c_int>>,
}

static STATE: Mutex<State> = Mutex::new(State::Fresh);

/// The state, also after a panic elsewhere poisoned the lock (the state is
/// still a valid enum; at worst the client's stream is mid-request, and its
/// next call fails with an error code).
fn lock() -> MutexGuard<'static, State> {
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Run the body of an export: a panic becomes `PMI_FAIL` instead of
/// unwinding into C (which would abort the process).
fn boundary(body: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(PMI_FAIL)
}

/// [`boundary`] for calls that need an initialised process: `PMI_ERR_INIT`
/// before `PMI_Init` and after `PMI_Finalize`.
fn with_up(body: impl FnOnce(&mut Up) -> c_int) -> c_int {
    boundary(|| match &mut *lock() {
        State::Up(up) => body(up),
        State::Fresh | State::Done => PMI_ERR_INIT,
    })
}

/// The PMI code for a client error.
fn code(e: &Error) -> c_int {
    match e {
        Error::TooLong { what: "key", .. } => PMI_ERR_INVALID_KEY_LENGTH,
        Error::TooLong { what: "value", .. } | Error::LineTooLong { .. } => {
            PMI_ERR_INVALID_VAL_LENGTH
        }
        Error::TooLong {
            what: "kvsname", ..
        } => PMI_ERR_INVALID_KVS,
        Error::ReservedKey { .. } | Error::Unencodable { field: "key", .. } => PMI_ERR_INVALID_KEY,
        Error::Unencodable { field: "value", .. } => PMI_ERR_INVALID_VAL,
        _ => PMI_FAIL,
    }
}

/// `PMI_SUCCESS` or the error's code.
fn rc(result: rivet_pmi::Result<()>) -> c_int {
    match result {
        Ok(()) => PMI_SUCCESS,
        Err(e) => code(&e),
    }
}

/// Store `value` through an output pointer from C.
///
/// # Safety
/// `out` is null or valid for writing one `T`.
unsafe fn put_out<T>(out: *mut T, value: T) -> c_int {
    if out.is_null() {
        return PMI_ERR_INVALID_ARG;
    }
    // SAFETY: not null, and the caller's contract says it is writable.
    unsafe { out.write(value) };
    PMI_SUCCESS
}

/// A Rust count as a C int, saturating.
fn to_int<T: TryInto<c_int>>(n: T) -> c_int {
    n.try_into().unwrap_or(c_int::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_pmi_fail() {
        assert_eq!(boundary(|| panic!("inside an export")), PMI_FAIL);
        assert_eq!(boundary(|| PMI_SUCCESS), PMI_SUCCESS);
    }

    /// Every export's body runs inside `boundary` (directly or through
    /// `with_up`), so no panic can unwind into C.
    #[test]
    fn every_export_is_behind_the_panic_boundary() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut exports = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                if !line.contains("extern \"C\" fn PMI_") {
                    continue;
                }
                exports += 1;
                // The first code line after the signature's opening brace.
                let open = (i..lines.len())
                    .find(|&j| lines[j].trim_end().ends_with('{'))
                    .unwrap();
                let first = lines[open + 1..]
                    .iter()
                    .find(|l| !l.trim_start().starts_with("//"))
                    .unwrap();
                assert!(
                    first.contains("boundary(") || first.contains("with_up("),
                    "{}:{}: {} starts with {first:?}",
                    path.display(),
                    i + 1,
                    line.trim()
                );
            }
        }
        assert!(exports >= 30, "found only {exports} exports");
    }
}
