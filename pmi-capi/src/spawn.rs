//! `PMI_Spawn_multiple` (MPICH's signature).

use std::ffi::{c_char, c_int};

use rivet_pmi::wire::{SpawnCommand, SpawnRequest};
use rivet_pmi::Error;

use crate::strings::{arg, array};
use crate::{with_up, PMI_ERR_INVALID_ARG, PMI_ERR_INVALID_ARGS, PMI_FAIL, PMI_SUCCESS};

/// `PMI_keyval_t`: a key and a value, both C strings.
#[repr(C)]
pub struct PMI_keyval_t {
    pub key: *const c_char,
    pub val: *const c_char,
}

/// Most arguments one command may carry (an argv without its NULL is a bug
/// in the caller; this bounds the walk).
const MAX_ARGS: usize = rivet_pmi::wire::limits::MAX_SPAWN_ITEMS;

/// Key/value pairs of a C vector.
///
/// # Safety
/// `v` holds `n` elements whose strings are null or NUL-terminated.
unsafe fn pairs(v: *const PMI_keyval_t, n: c_int) -> Result<Vec<(String, String)>, c_int> {
    // SAFETY: `n` readable elements, as the caller guarantees.
    let items = unsafe { array(v, n) }.ok_or(PMI_ERR_INVALID_ARG)?;
    items
        .iter()
        .map(|kv| {
            // SAFETY: null or NUL-terminated strings, as the caller guarantees.
            let (k, v) = unsafe {
                (
                    arg(kv.key, PMI_ERR_INVALID_ARG),
                    arg(kv.val, PMI_ERR_INVALID_ARG),
                )
            };
            Ok((k?.to_string(), v?.to_string()))
        })
        .collect()
}

/// A NULL-terminated argument list (null: none).
///
/// # Safety
/// `argv` is null or a NULL-terminated array of NUL-terminated strings.
unsafe fn args(argv: *const *const c_char) -> Result<Vec<String>, c_int> {
    let mut out = Vec::new();
    if argv.is_null() {
        return Ok(out);
    }
    for i in 0..=MAX_ARGS {
        // SAFETY: the array is NULL-terminated (the caller's contract) and
        // this reads no further than its terminator.
        let p = unsafe { *argv.add(i) };
        if p.is_null() {
            return Ok(out);
        }
        // SAFETY: a NUL-terminated string, as the caller guarantees.
        out.push(unsafe { arg(p, PMI_ERR_INVALID_ARGS) }?.to_string());
    }
    Err(PMI_ERR_INVALID_ARGS)
}

/// The request the C arguments describe.
///
/// # Safety
/// As `PMI_Spawn_multiple`.
#[allow(clippy::too_many_arguments)] // PMI_Spawn_multiple's own arguments
unsafe fn request(
    count: c_int,
    cmds: *mut *const c_char,
    argvs: *mut *mut *const c_char,
    maxprocs: *const c_int,
    info_sizes: *const c_int,
    info: *mut *const PMI_keyval_t,
    preput_size: c_int,
    preput: *const PMI_keyval_t,
) -> Result<SpawnRequest, c_int> {
    if count <= 0 {
        return Err(PMI_ERR_INVALID_ARG);
    }
    // SAFETY: `count` readable elements where not null, as the caller
    // guarantees (for this array and the three below).
    let cmds = unsafe { array(cmds.cast_const(), count) }.ok_or(PMI_ERR_INVALID_ARG)?;
    // SAFETY: as above.
    let maxprocs = unsafe { array(maxprocs, count) }.ok_or(PMI_ERR_INVALID_ARG)?;
    let argvs = if argvs.is_null() {
        None
    } else {
        // SAFETY: as above.
        unsafe { array(argvs.cast_const(), count) }
    };
    let infos = if info_sizes.is_null() || info.is_null() {
        None
    } else {
        // SAFETY: as above.
        unsafe { array(info_sizes, count).zip(array(info.cast_const(), count)) }
    };
    let mut commands = Vec::with_capacity(cmds.len());
    for (i, &cmd) in cmds.iter().enumerate() {
        let nprocs = u32::try_from(maxprocs[i]).map_err(|_| PMI_ERR_INVALID_ARG)?;
        // SAFETY: null or a NUL-terminated string, as the caller guarantees.
        let execname = unsafe { arg(cmd, PMI_ERR_INVALID_ARG) }?.to_string();
        let args = match argvs {
            // SAFETY: each entry is null or a NULL-terminated argv.
            Some(a) => unsafe { args(a[i].cast_const()) }?,
            None => Vec::new(),
        };
        let info = match infos {
            // SAFETY: sizes[i] elements at vectors[i], as the caller guarantees.
            Some((sizes, vectors)) => unsafe { pairs(vectors[i], sizes[i]) }?,
            None => Vec::new(),
        };
        commands.push(SpawnCommand {
            execname,
            nprocs,
            args,
            info,
        });
    }
    Ok(SpawnRequest {
        commands,
        // SAFETY: `preput_size` elements, as the caller guarantees.
        preput: unsafe { pairs(preput, preput_size) }?,
    })
}

/// Start processes in a new process group; `errors` gets one code per
/// process.
///
/// # Safety
/// The arrays hold `count` elements (or are null where `pmi.h` allows), the
/// strings are NUL-terminated, each argv is NULL-terminated, `errors` holds
/// one int per requested process.
#[no_mangle]
pub unsafe extern "C" fn PMI_Spawn_multiple(
    count: c_int,
    cmds: *mut *const c_char,
    argvs: *mut *mut *const c_char,
    maxprocs: *const c_int,
    info_keyval_sizesp: *const c_int,
    info_keyval_vectors: *mut *const PMI_keyval_t,
    preput_keyval_size: c_int,
    preput_keyval_vector: *const PMI_keyval_t,
    errors: *mut c_int,
) -> c_int {
    with_up(|up| {
        // SAFETY: forwarded under this function's own contract.
        let req = match unsafe {
            request(
                count,
                cmds,
                argvs,
                maxprocs,
                info_keyval_sizesp,
                info_keyval_vectors,
                preput_keyval_size,
                preput_keyval_vector,
            )
        } {
            Ok(r) => r,
            Err(e) => return e,
        };
        let total = usize::try_from(req.total_procs()).unwrap_or(usize::MAX);
        if errors.is_null() && total > 0 {
            return PMI_ERR_INVALID_ARG;
        }
        let (codes, result) = match up.client.spawn(&req) {
            Ok(codes) => (codes, PMI_SUCCESS),
            Err(Error::SpawnFailed { errcodes, message }) => {
                eprintln!("PMI_Spawn_multiple: {message}");
                (errcodes, PMI_FAIL)
            }
            Err(e) => {
                eprintln!("PMI_Spawn_multiple: {e}");
                (vec![PMI_FAIL; total], PMI_FAIL)
            }
        };
        for (i, c) in codes.iter().take(total).enumerate() {
            // SAFETY: `errors` holds `total` ints (the caller's contract).
            unsafe { errors.add(i).write(*c) };
        }
        result
    })
}
