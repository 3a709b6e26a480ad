//! Process group calls: init and finalize, identity, barrier, abort, the
//! node's ranks (clique), and the name service.

use std::ffi::{c_char, c_int};

use rivet_pmi::server::{parse_process_mapping, PROCESS_MAPPING_KEY};
use rivet_pmi::Client;

use crate::strings::{arg, write_array, write_str};
use crate::{
    boundary, lock, put_out, rc, to_int, with_up, State, Up, PMI_ERR_INIT, PMI_ERR_INVALID_ARG,
    PMI_ERR_NOMEM, PMI_FAIL, PMI_FALSE, PMI_SUCCESS, PMI_TRUE,
};

/// Longest port name `PMI_Lookup_name` writes, NUL included (`PMI_MAX_PORT_NAME`).
const MAX_PORT_NAME: usize = 1024;

fn flag(b: bool) -> c_int {
    if b {
        PMI_TRUE
    } else {
        PMI_FALSE
    }
}

/// Connect to the process manager (or become a singleton).
///
/// # Safety
/// `spawned` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn PMI_Init(spawned: *mut c_int) -> c_int {
    boundary(|| {
        if spawned.is_null() {
            return PMI_ERR_INVALID_ARG;
        }
        let mut state = lock();
        let was = match &*state {
            State::Up(up) => Some(up.client.spawned()),
            State::Done => return PMI_FAIL,
            State::Fresh => None,
        };
        let is_spawned = match was {
            Some(s) => s,
            None => match Client::init() {
                Ok(client) => {
                    let s = client.spawned();
                    *state = State::Up(Box::new(Up {
                        client,
                        clique: None,
                    }));
                    s
                }
                Err(e) => {
                    eprintln!("PMI_Init: {e}");
                    if std::env::var_os("PMI_FD").is_some() {
                        // The inherited descriptor may already be closed.
                        *state = State::Done;
                    }
                    return PMI_FAIL;
                }
            },
        };
        // SAFETY: not null; the caller passes a writable int.
        unsafe { put_out(spawned, flag(is_spawned)) }
    })
}

/// # Safety
/// `initialized` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn PMI_Initialized(initialized: *mut c_int) -> c_int {
    boundary(|| {
        let up = matches!(&*lock(), State::Up(_));
        // SAFETY: null or writable, as the caller guarantees.
        unsafe { put_out(initialized, flag(up)) }
    })
}

#[no_mangle]
pub extern "C" fn PMI_Finalize() -> c_int {
    boundary(|| {
        let mut state = lock();
        match std::mem::replace(&mut *state, State::Done) {
            State::Up(up) => rc(up.client.finalize()),
            other => {
                *state = other;
                PMI_ERR_INIT
            }
        }
    })
}

/// # Safety
/// `size` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_size(size: *mut c_int) -> c_int {
    // SAFETY: null or writable, as the caller guarantees.
    with_up(|up| unsafe { put_out(size, to_int(up.client.size())) })
}

/// # Safety
/// `rank` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_rank(rank: *mut c_int) -> c_int {
    // SAFETY: null or writable, as the caller guarantees.
    with_up(|up| unsafe { put_out(rank, to_int(up.client.rank())) })
}

/// # Safety
/// `size` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_universe_size(size: *mut c_int) -> c_int {
    // SAFETY: null or writable, as the caller guarantees.
    with_up(|up| unsafe { put_out(size, up.client.universe_size()) })
}

/// # Safety
/// `appnum` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_appnum(appnum: *mut c_int) -> c_int {
    // SAFETY: null or writable, as the caller guarantees.
    with_up(|up| unsafe { put_out(appnum, up.client.appnum()) })
}

#[no_mangle]
pub extern "C" fn PMI_Barrier() -> c_int {
    with_up(|up| rc(up.client.barrier()))
}

/// Ask the process manager to end the job, then exit with `exit_code`.
///
/// # Safety
/// `error_msg` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PMI_Abort(exit_code: c_int, error_msg: *const c_char) -> c_int {
    let asked = boundary(|| {
        // SAFETY: null or a NUL-terminated string, as the caller
        // guarantees; null or not UTF-8 aborts without a message.
        let msg = unsafe { arg(error_msg, 0) }.unwrap_or("");
        with_up(|up| {
            if up.client.is_singleton() {
                eprintln!("PMI_Abort({exit_code}): {msg}");
            }
            // The process exits anyway; the process manager notices that.
            let _ = up.client.abort(exit_code, msg);
            PMI_SUCCESS
        })
    });
    if asked != PMI_SUCCESS {
        return asked;
    }
    // Outside the lock: exit handlers may call PMI themselves.
    std::process::exit(exit_code)
}

/// The ranks of this process group on this node, in rank order: from
/// `PMI_process_mapping`, or this process alone when there is none.
fn clique(up: &mut Up) -> Result<&[c_int], c_int> {
    if up.clique.is_none() {
        let me = up.client.rank();
        let size = up.client.size();
        let mapping = up
            .client
            .job_attribute(PROCESS_MAPPING_KEY)
            .map_err(|e| crate::code(&e))?;
        let ranks = match mapping.and_then(|m| parse_process_mapping(&m, size as usize).ok()) {
            Some(nodes) => {
                let mine = nodes.get(me as usize).copied();
                nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| Some(**n) == mine)
                    .map(|(r, _)| to_int(r))
                    .collect()
            }
            None => vec![to_int(me)],
        };
        up.clique = Some(ranks);
    }
    Ok(up.clique.as_deref().unwrap_or(&[]))
}

/// # Safety
/// `size` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_clique_size(size: *mut c_int) -> c_int {
    with_up(|up| match clique(up) {
        // SAFETY: null or writable, as the caller guarantees.
        Ok(ranks) => unsafe { put_out(size, to_int(ranks.len())) },
        Err(code) => code,
    })
}

/// # Safety
/// `ranks` is null or valid for writing `length` ints.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_clique_ranks(ranks: *mut c_int, length: c_int) -> c_int {
    with_up(|up| match clique(up) {
        // SAFETY: null or `length` writable ints, as the caller guarantees.
        Ok(mine) => unsafe { write_array(ranks, length, mine, PMI_ERR_INVALID_ARG) },
        Err(code) => code,
    })
}

/// # Safety
/// Both arguments are null or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn PMI_Publish_name(
    service_name: *const c_char,
    port: *const c_char,
) -> c_int {
    with_up(|up| {
        // SAFETY: null or NUL-terminated strings, as the caller guarantees.
        let (service, port) = match unsafe {
            (
                arg(service_name, PMI_ERR_INVALID_ARG),
                arg(port, PMI_ERR_INVALID_ARG),
            )
        } {
            (Ok(s), Ok(p)) => (s, p),
            (Err(e), _) | (_, Err(e)) => return e,
        };
        if service.is_empty() {
            return PMI_ERR_INVALID_ARG;
        }
        rc(up.client.publish_name(service, port))
    })
}

/// # Safety
/// `service_name` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PMI_Unpublish_name(service_name: *const c_char) -> c_int {
    with_up(|up| {
        // SAFETY: null or a NUL-terminated string, as the caller guarantees.
        match unsafe { arg(service_name, PMI_ERR_INVALID_ARG) } {
            Ok(service) => rc(up.client.unpublish_name(service)),
            Err(e) => e,
        }
    })
}

/// # Safety
/// `service_name` is null or a NUL-terminated string; `port` is null or
/// holds `PMI_MAX_PORT_NAME` bytes.
#[no_mangle]
pub unsafe extern "C" fn PMI_Lookup_name(service_name: *const c_char, port: *mut c_char) -> c_int {
    with_up(|up| {
        // SAFETY: null or a NUL-terminated string, as the caller guarantees.
        let service = match unsafe { arg(service_name, PMI_ERR_INVALID_ARG) } {
            Ok(s) => s,
            Err(e) => return e,
        };
        if port.is_null() {
            return PMI_ERR_INVALID_ARG;
        }
        match up.client.lookup_name(service) {
            Ok(p) if p.len() >= MAX_PORT_NAME => PMI_ERR_NOMEM,
            // SAFETY: `port` holds PMI_MAX_PORT_NAME bytes (the caller's
            // contract) and the name is shorter.
            Ok(p) => unsafe { write_str(port, to_int(MAX_PORT_NAME), &p, PMI_ERR_INVALID_ARG) },
            Err(e) => crate::code(&e),
        }
    })
}
