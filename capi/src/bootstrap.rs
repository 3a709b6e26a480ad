//! External bootstrap, for a runtime that owns its process manager
//! (its own PMI or PMIx): start, hand this rank's address blob to every
//! rank by your own means, then add everyone's.

use std::ffi::{c_char, c_int, c_void};

use rivet::{Bootstrap, Engine, Local, Shared, ThreadLevel};

use crate::errors::{boundary, invalid};
use crate::handles::{self, give, on, out_ptr, rivet_engine_t, Either};
use crate::init::{level_from, level_to};
use crate::{strings, RIVET_API_VERSION};

/// A half-started engine from `rivet_init_external`, consumed by
/// `rivet_bootstrap_add_peers` or `rivet_bootstrap_free`.
pub struct rivet_bootstrap_t {
    b: Either<Bootstrap<Local>, Bootstrap<Shared>>,
}

/// Start without a process manager as rank `rank` of `size` in the job
/// named `job` (the same string on every rank, unique to the job; no
/// `;`). `*provided` (may be null) gets the thread level granted. Then
/// exchange `rivet_bootstrap_address` blobs and call
/// `rivet_bootstrap_add_peers`. Spawn, publish/lookup and group connect
/// need a process manager: they return `RIVET_ERR_UNSUPPORTED`.
///
/// # Safety
/// `job` is a C string; `out` valid for a write; `provided` null or valid.
#[no_mangle]
pub unsafe extern "C" fn rivet_init_external(
    api_version: u32,
    required: c_int,
    job: *const c_char,
    rank: c_int,
    size: c_int,
    out: *mut *mut rivet_bootstrap_t,
    provided: *mut c_int,
) -> c_int {
    boundary("rivet_init_external", || {
        if api_version != RIVET_API_VERSION {
            return Err(invalid(format!(
                "built against rivet.h API version {api_version}, this library is version \
                 {RIVET_API_VERSION}: rebuild against this library's rivet.h"
            )));
        }
        let level = level_from(required)?;
        out_ptr(out, "the bootstrap")?;
        // SAFETY: a C string by the contract.
        let job = unsafe { strings::arg(job, "the job name") }?;
        let (rank, size) = match (u32::try_from(rank), u32::try_from(size)) {
            (Ok(r), Ok(s)) => (r, s),
            _ => return Err(invalid(format!("rank {rank} of {size}: both must be >= 0"))),
        };
        let b = if level == ThreadLevel::Multiple {
            Either::Shared(Engine::bootstrap_external(level, job, rank, size)?)
        } else {
            Either::Local(Engine::bootstrap_external(level, job, rank, size)?)
        };
        if !provided.is_null() {
            let granted = on!(&b, b => b.level());
            // SAFETY: non-null, valid for writes by the contract.
            unsafe { provided.write(level_to(granted)) };
        }
        // SAFETY: checked non-null; valid by the contract.
        unsafe { give(out, rivet_bootstrap_t { b }) };
        Ok(())
    })
}

/// This rank's address: `*len` bytes at `*address`, owned by the
/// bootstrap (valid until it is consumed). Opaque; carry it unchanged.
///
/// # Safety
/// `b` is a live bootstrap; `address` and `len` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn rivet_bootstrap_address(
    b: *const rivet_bootstrap_t,
    address: *mut *const c_void,
    len: *mut usize,
) -> c_int {
    boundary("rivet_bootstrap_address", || {
        // SAFETY: null is checked by as_ref; otherwise live by the contract.
        let b = unsafe { b.as_ref() }.ok_or_else(|| invalid("the bootstrap handle is null"))?;
        out_ptr(address, "the address")?;
        out_ptr(len, "the length")?;
        let bytes = on!(&b.b, b => b.address());
        // SAFETY: both checked non-null; valid by the contract.
        unsafe {
            address.write(bytes.as_ptr().cast());
            len.write(bytes.len());
        }
        Ok(())
    })
}

/// Finish start-up with every rank's address (`addresses[i]`, `lens[i]`
/// bytes, for rank i; `n` = the job's size, this rank's own included):
/// `*engine` as from `rivet_init`. Ranks on one node wait for their
/// node's lowest rank to get here. `b` is consumed, also on failure.
///
/// # Safety
/// `b` came from `rivet_init_external` and is not used again; the arrays
/// hold `n` entries, each address `lens[i]` readable bytes; `engine`
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_bootstrap_add_peers(
    b: *mut rivet_bootstrap_t,
    addresses: *const *const c_void,
    lens: *const usize,
    n: usize,
    engine: *mut *mut rivet_engine_t,
) -> c_int {
    boundary("rivet_bootstrap_add_peers", || {
        // SAFETY: from rivet_init_external, given back once by the contract.
        let b = unsafe { handles::take(b, "bootstrap") }?;
        out_ptr(engine, "the engine")?;
        if n > 0 && (addresses.is_null() || lens.is_null()) {
            return Err(invalid("the address or length array is null"));
        }
        let mut list = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: `n` entries each, by the contract.
            let (p, len) = unsafe { (*addresses.add(i), *lens.add(i)) };
            // SAFETY: `len` readable bytes at `p`, by the contract.
            list.push(unsafe { strings::bytes(p.cast(), len) }?);
        }
        let e = match b.b {
            Either::Local(b) => Either::Local(b.add_peers(&list)?),
            Either::Shared(b) => Either::Shared(b.add_peers(&list)?),
        };
        // SAFETY: checked non-null; valid by the contract.
        unsafe { give(engine, rivet_engine_t { e }) };
        Ok(())
    })
}

/// Give up a bootstrap that will not be completed.
///
/// # Safety
/// `b` came from `rivet_init_external` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn rivet_bootstrap_free(b: *mut rivet_bootstrap_t) -> c_int {
    boundary("rivet_bootstrap_free", || {
        // SAFETY: from rivet_init_external, given back once by the contract.
        drop(unsafe { handles::take(b, "bootstrap") }?);
        Ok(())
    })
}
