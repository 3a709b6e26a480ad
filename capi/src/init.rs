//! Start-up, the process's own communicators, progress, finalize, abort,
//! and what the engine runs with.

use std::ffi::{c_char, c_int};

use rivet::{Engine, ThreadLevel};

use crate::errors::{boundary, invalid, Fail};
use crate::handles::{self, give, new_comm, on, out_ptr, rivet_comm_t, rivet_engine_t, Either};
use crate::{strings, RIVET_API_VERSION};

pub(crate) fn level_from(level: c_int) -> Result<ThreadLevel, Fail> {
    usize::try_from(level)
        .ok()
        .and_then(|i| ThreadLevel::ALL.get(i).copied())
        .ok_or_else(|| invalid(format!("thread level {level} is not one of RIVET_THREAD_*")))
}

pub(crate) fn level_to(level: ThreadLevel) -> c_int {
    ThreadLevel::ALL
        .iter()
        .position(|&l| l == level)
        .unwrap_or(0) as c_int
}

/// Bootstrap through the process manager (rivetrun, mpiexec.hydra, srun
/// with PMI-1/2 wire, or none: a singleton) at thread level `required`
/// (`RIVET_THREAD_*`). `api_version` is `RIVET_API_VERSION` from the
/// header the caller was built with. `*provided` gets the level granted:
/// at least `required`, higher if `RIVET_THREAD_LEVEL` asks.
///
/// # Safety
/// `engine_out` and `provided` are valid for writes (`provided` may be null).
#[no_mangle]
pub unsafe extern "C" fn rivet_init(
    api_version: u32,
    required: c_int,
    engine_out: *mut *mut rivet_engine_t,
    provided: *mut c_int,
) -> c_int {
    boundary("rivet_init", || {
        if api_version != RIVET_API_VERSION {
            return Err(invalid(format!(
                "built against rivet.h API version {api_version}, this library is version \
                 {RIVET_API_VERSION}: rebuild against this library's rivet.h"
            )));
        }
        let level = level_from(required)?;
        out_ptr(engine_out, "the engine")?;
        let e = if level == ThreadLevel::Multiple {
            Either::Shared(Engine::init_thread(level)?)
        } else {
            Either::Local(Engine::init_thread(level)?)
        };
        let granted = on!(&e, e => e.thread_level());
        if !provided.is_null() {
            // SAFETY: non-null, valid for writes by the contract.
            unsafe { provided.write(level_to(granted)) };
        }
        // SAFETY: checked non-null above; valid by the contract.
        unsafe { give(engine_out, rivet_engine_t { e }) };
        Ok(())
    })
}

/// Finish outstanding sends, leave the job, and free `engine`.
/// Communicators still held fail with `RIVET_ERR_FINALIZED` afterwards
/// (free them still).
///
/// # Safety
/// `engine` came from `rivet_init` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn rivet_finalize(engine: *mut rivet_engine_t) -> c_int {
    boundary("rivet_finalize", || {
        // SAFETY: from rivet_init, given back once by the contract.
        let e = unsafe { handles::take(engine, "engine") }?;
        on!(e.e, e => e.finalize())?;
        Ok(())
    })
}

/// End the whole job with `code` through the process manager; does not
/// return.
///
/// # Safety
/// `engine` is a live handle; `message` is null or a C string.
#[no_mangle]
pub unsafe extern "C" fn rivet_abort(
    engine: *const rivet_engine_t,
    code: c_int,
    message: *const c_char,
) -> c_int {
    // SAFETY: null or a C string by the contract.
    let message = unsafe { strings::arg(message, "message") }.unwrap_or("");
    let message = message.to_string();
    boundary("rivet_abort", move || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        on!(&e.e, e => e.abort(code, &message))
    })
}

/// The level `rivet_init` granted (`RIVET_THREAD_*`).
///
/// # Safety
/// `engine` is a live handle; `level` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_query_thread(
    engine: *const rivet_engine_t,
    level: *mut c_int,
) -> c_int {
    boundary("rivet_query_thread", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        out_ptr(level, "the level")?;
        // SAFETY: checked non-null; valid by the contract.
        unsafe { level.write(level_to(on!(&e.e, e => e.thread_level()))) };
        Ok(())
    })
}

/// The process manager's application number (`*appnum`) and universe
/// size (`*universe_size`), as MPI's `APPNUM` and `UNIVERSE_SIZE`
/// attributes need; -1 where it has none. `RIVET_ERR_UNSUPPORTED` after
/// `rivet_init_external`.
///
/// # Safety
/// `engine` is a live handle; `appnum` and `universe_size` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn rivet_job_attrs(
    engine: *const rivet_engine_t,
    appnum: *mut c_int,
    universe_size: *mut c_int,
) -> c_int {
    boundary("rivet_job_attrs", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        out_ptr(appnum, "the application number")?;
        out_ptr(universe_size, "the universe size")?;
        let (a, u) = on!(&e.e, e => e.job_attrs())?;
        // SAFETY: checked non-null; valid by the contract.
        unsafe {
            appnum.write(a);
            universe_size.write(u);
        }
        Ok(())
    })
}

/// Make progress once: poll the transports and run the protocols. `*events`
/// (may be null) gets how many things happened.
///
/// # Safety
/// `engine` is a live handle; `events` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_progress(
    engine: *const rivet_engine_t,
    events: *mut usize,
) -> c_int {
    boundary("rivet_progress", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        let n = on!(&e.e, e => e.progress());
        if !events.is_null() {
            // SAFETY: non-null, valid by the contract.
            unsafe { events.write(n) };
        }
        Ok(())
    })
}

/// A new handle on COMM_WORLD (free it with `rivet_comm_free`).
///
/// # Safety
/// `engine` is a live handle; `comm` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_world(
    engine: *const rivet_engine_t,
    comm: *mut *mut rivet_comm_t,
) -> c_int {
    boundary("rivet_comm_world", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        out_ptr(comm, "the communicator")?;
        // SAFETY: checked non-null; valid by the contract.
        unsafe { give(comm, new_comm!(&e.e, e => e.world())) };
        Ok(())
    })
}

/// A new handle on COMM_SELF.
///
/// # Safety
/// As [`rivet_comm_world`].
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_self(
    engine: *const rivet_engine_t,
    comm: *mut *mut rivet_comm_t,
) -> c_int {
    boundary("rivet_comm_self", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        out_ptr(comm, "the communicator")?;
        // SAFETY: checked non-null; valid by the contract.
        unsafe { give(comm, new_comm!(&e.e, e => e.self_comm())) };
        Ok(())
    })
}

/// The intercommunicator to the processes that spawned this one, or NULL
/// in `*comm` if it was not spawned (or has disconnected from them).
///
/// # Safety
/// As [`rivet_comm_world`].
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_parent(
    engine: *const rivet_engine_t,
    comm: *mut *mut rivet_comm_t,
) -> c_int {
    boundary("rivet_comm_parent", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        out_ptr(comm, "the communicator")?;
        let parent = match &e.e {
            Either::Local(e) => e.parent().map(rivet_comm_t::local),
            Either::Shared(e) => e.parent().map(rivet_comm_t::shared),
        };
        match parent {
            // SAFETY: checked non-null; valid by the contract.
            Some(p) => unsafe { give(comm, p) },
            // SAFETY: as above.
            None => unsafe { comm.write(std::ptr::null_mut()) },
        }
        Ok(())
    })
}

/// What the engine runs with, one `key: value` line each (transports,
/// thread level, limits), NUL-terminated into `buf` of `len` bytes. With
/// `buf` null, `*needed` (may be null otherwise) gets the size needed.
///
/// # Safety
/// `engine` is a live handle; `buf` null or valid for `len` bytes;
/// `needed` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_info(
    engine: *const rivet_engine_t,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> c_int {
    boundary("rivet_info", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        let info = on!(&e.e, e => e.info());
        let text: String = info
            .items
            .iter()
            .map(|(k, v)| format!("{k}: {v}\n"))
            .collect();
        if !needed.is_null() {
            // SAFETY: non-null, valid by the contract.
            unsafe { needed.write(text.len() + 1) };
        }
        if buf.is_null() {
            return Ok(());
        }
        // SAFETY: valid for `len` bytes by the contract.
        unsafe { strings::put(&text, buf, len, "the info text") }
    })
}
