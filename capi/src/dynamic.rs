//! Dynamic processes: ports, accept/connect, spawn, the name service, and
//! group connect (seed 004). All need the process manager except
//! accept/connect on a port name passed by other means.
//!
//! `rivet_group_connect` takes RFC0003's attributes as `RIVET_GROUP_*` flags.

use std::ffi::{c_char, c_int};

use rivet::{ConnectAttrs, Connected, ProcName, SpawnCommand};

use crate::errors::{boundary, invalid, Fail, RIVET_ERR_NOT_FOUND};
use crate::handles::{self, comm, give, new_comm, on, out_ptr, rank_arg, Either};
use crate::handles::{rivet_comm_t, rivet_engine_t, rivet_group_t};
use crate::strings;

/// Processes that end without joining do not fail the operation.
pub const RIVET_GROUP_OPTIONAL: u32 = 1;
/// Only exchange connection information: no group is made.
pub const RIVET_GROUP_XCHG_ONLY: u32 = 2;
/// A member may end without disconnecting.
pub const RIVET_GROUP_EARLY_TERM_ALLOWED: u32 = 4;
/// Events for each member joining or leaving.
pub const RIVET_GROUP_NOTIFY_EACH: u32 = 8;

/// Open a port others can `rivet_comm_connect` to; its name goes to
/// `port` (`RIVET_PORT_NAME_MAX` bytes are always enough).
///
/// # Safety
/// `engine` is a live handle; `port` valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn rivet_open_port(
    engine: *const rivet_engine_t,
    port: *mut c_char,
    len: usize,
) -> c_int {
    boundary("rivet_open_port", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        let name = on!(&e.e, e => e.open_port())?;
        // SAFETY: valid for `len` bytes by the contract.
        unsafe { strings::put(&name, port, len, "the port name") }
    })
}

/// Close a port this process opened; connects to it fail from then on.
///
/// # Safety
/// `engine` is a live handle; `port` a C string.
#[no_mangle]
pub unsafe extern "C" fn rivet_close_port(
    engine: *const rivet_engine_t,
    port: *const c_char,
) -> c_int {
    boundary("rivet_close_port", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        // SAFETY: a C string by the contract.
        let port = unsafe { strings::arg(port, "the port name") }?;
        on!(&e.e, e => e.close_port(port))?;
        Ok(())
    })
}

/// The port name argument of accept/connect: it matters at the root only,
/// so other ranks may pass null.
///
/// # Safety
/// `port` is null or a C string.
unsafe fn port_arg<'a>(port: *const c_char) -> Result<&'a str, Fail> {
    if port.is_null() {
        return Ok("");
    }
    // SAFETY: a C string by the contract.
    unsafe { strings::arg(port, "the port name") }
}

/// Wait for a connect to `port` and return the intercommunicator to the
/// connecting group. Collective over `c`; `port` matters at `root` only.
///
/// # Safety
/// `c` is a live handle; `port` null or a C string; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_accept(
    c: *const rivet_comm_t,
    port: *const c_char,
    root: c_int,
    out: *mut *mut rivet_comm_t,
) -> c_int {
    boundary("rivet_comm_accept", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(out, "the intercommunicator")?;
        // SAFETY: null or a C string by the contract.
        let port = unsafe { port_arg(port) }?;
        let root = rank_arg(root, "root")?;
        let inter = new_comm!(&c.c, c => c.accept(port, root)?);
        // SAFETY: checked non-null; valid by the contract.
        unsafe { give(out, inter) };
        Ok(())
    })
}

/// Connect to a group waiting in accept on `port`. Collective over `c`;
/// `port` matters at `root` only.
///
/// # Safety
/// As [`rivet_comm_accept`].
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_connect(
    c: *const rivet_comm_t,
    port: *const c_char,
    root: c_int,
    out: *mut *mut rivet_comm_t,
) -> c_int {
    boundary("rivet_comm_connect", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(out, "the intercommunicator")?;
        // SAFETY: null or a C string by the contract.
        let port = unsafe { port_arg(port) }?;
        let root = rank_arg(root, "root")?;
        let inter = new_comm!(&c.c, c => c.connect(port, root)?);
        // SAFETY: checked non-null; valid by the contract.
        unsafe { give(out, inter) };
        Ok(())
    })
}

/// Start `maxprocs` copies of `program` with arguments `argv` (a
/// NULL-terminated list, without the program; may be null) and return
/// the intercommunicator to them. `info_keys`/`info_values` (`n_info`
/// each) are process-manager keys (`wdir`, `path`, `host`). Collective
/// over `c`; the program, arguments and info matter at `root` only
/// (others may pass null and 0). All or nothing: on `RIVET_ERR_SPAWN`
/// nothing runs and `errcodes` (null, or `maxprocs` entries at the root)
/// holds one code per process (0 for those not at fault).
///
/// # Safety
/// `c` is a live handle; strings are C strings; arrays valid for their
/// lengths; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_spawn(
    c: *const rivet_comm_t,
    program: *const c_char,
    argv: *const *const c_char,
    maxprocs: c_int,
    info_keys: *const *const c_char,
    info_values: *const *const c_char,
    n_info: usize,
    root: c_int,
    out: *mut *mut rivet_comm_t,
    errcodes: *mut c_int,
) -> c_int {
    boundary("rivet_comm_spawn", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(out, "the intercommunicator")?;
        let root = rank_arg(root, "root")?;
        let me = on!(&c.c, c => c.rank());
        let command = if me == root {
            // SAFETY: C strings and arrays by the contract.
            unsafe { command_arg(program, argv, maxprocs, info_keys, info_values, n_info) }?
        } else {
            SpawnCommand::default()
        };
        let n = command.maxprocs as usize;
        let result = match &c.c {
            Either::Local(c) => c.spawn_multiple(&[command], root).map(rivet_comm_t::local),
            Either::Shared(c) => c.spawn_multiple(&[command], root).map(rivet_comm_t::shared),
        };
        let codes = match &result {
            Err(rivet::Error::Spawn { errcodes, .. }) => errcodes.clone(),
            _ => Vec::new(),
        };
        if !errcodes.is_null() && me == root {
            for i in 0..n {
                // SAFETY: `maxprocs` entries at the root by the contract.
                unsafe { errcodes.add(i).write(codes.get(i).copied().unwrap_or(0)) };
            }
        }
        // SAFETY: checked non-null; valid by the contract.
        unsafe { give(out, result?) };
        Ok(())
    })
}

/// # Safety
/// As [`rivet_comm_spawn`]'s arguments.
unsafe fn command_arg(
    program: *const c_char,
    argv: *const *const c_char,
    maxprocs: c_int,
    info_keys: *const *const c_char,
    info_values: *const *const c_char,
    n_info: usize,
) -> Result<SpawnCommand, Fail> {
    // SAFETY: C strings by the contract.
    let program = unsafe { strings::arg(program, "the program") }?;
    // SAFETY: a NULL-terminated list by the contract.
    let args = unsafe { strings::list(argv, "an argument") }?;
    let maxprocs = u32::try_from(maxprocs)
        .ok()
        .filter(|&m| m > 0)
        .ok_or_else(|| invalid(format!("maxprocs {maxprocs} must be > 0")))?;
    let mut command = SpawnCommand::new(program, &args, maxprocs);
    if n_info > 0 && (info_keys.is_null() || info_values.is_null()) {
        return Err(invalid("info keys or values are null but n_info is not 0"));
    }
    for i in 0..n_info {
        // SAFETY: both arrays hold `n_info` C strings by the contract.
        let (k, v) = unsafe { (*info_keys.add(i), *info_values.add(i)) };
        // SAFETY: C strings by the contract.
        let (k, v) = unsafe {
            (
                strings::arg(k, "an info key")?,
                strings::arg(v, "an info value")?,
            )
        };
        command = command.info(k, v);
    }
    Ok(command)
}

/// Publish `port` under `service` with the process manager's name service.
///
/// # Safety
/// `engine` is a live handle; strings are C strings.
#[no_mangle]
pub unsafe extern "C" fn rivet_publish_name(
    engine: *const rivet_engine_t,
    service: *const c_char,
    port: *const c_char,
) -> c_int {
    boundary("rivet_publish_name", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        // SAFETY: C strings by the contract.
        let (service, port) = unsafe {
            (
                strings::arg(service, "the service name")?,
                strings::arg(port, "the port name")?,
            )
        };
        on!(&e.e, e => e.publish_name(service, port))?;
        Ok(())
    })
}

/// The port published under `service`, into `port` of `len` bytes;
/// `RIVET_ERR_NOT_FOUND` if none is.
///
/// # Safety
/// `engine` is a live handle; `service` a C string; `port` valid for
/// `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn rivet_lookup_name(
    engine: *const rivet_engine_t,
    service: *const c_char,
    port: *mut c_char,
    len: usize,
) -> c_int {
    boundary("rivet_lookup_name", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        // SAFETY: a C string by the contract.
        let service = unsafe { strings::arg(service, "the service name") }?;
        let name = on!(&e.e, e => e.lookup_name(service)).map_err(|err| match err {
            rivet::Error::Pmi(rivet::pmi::Error::Server { .. }) => Fail::new(
                RIVET_ERR_NOT_FOUND,
                format!("no port is published under {service:?}: {err}"),
            ),
            other => other.into(),
        })?;
        // SAFETY: valid for `len` bytes by the contract.
        unsafe { strings::put(&name, port, len, "the port name") }
    })
}

/// Withdraw the name `service`.
///
/// # Safety
/// `engine` is a live handle; `service` a C string.
#[no_mangle]
pub unsafe extern "C" fn rivet_unpublish_name(
    engine: *const rivet_engine_t,
    service: *const c_char,
) -> c_int {
    boundary("rivet_unpublish_name", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        // SAFETY: a C string by the contract.
        let service = unsafe { strings::arg(service, "the service name") }?;
        on!(&e.e, e => e.unpublish_name(service))?;
        Ok(())
    })
}

/// This process's name for group connect: `cluster:namespace` (or the
/// namespace alone), to which `:rank` is appended to name one process.
///
/// # Safety
/// `engine` is a live handle; `buf` valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn rivet_nspace(
    engine: *const rivet_engine_t,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    boundary("rivet_nspace", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        let ns = on!(&e.e, e => e.qualified_nspace())?;
        // SAFETY: valid for `len` bytes by the contract.
        unsafe { strings::put(&ns, buf, len, "the namespace") }
    })
}

/// Connect with the processes `procs[0..n]` (`nspace:rank` names, this
/// process among them; see [`rivet_nspace`]): blocks until each has made
/// the same call with the same `id` (may be null). `flags` are
/// `RIVET_GROUP_*`. `*group` gets the new group, or NULL with
/// `RIVET_GROUP_XCHG_ONLY`.
///
/// # Safety
/// `engine` is a live handle; strings are C strings; `procs` valid for
/// `n` reads; `group` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_group_connect(
    engine: *const rivet_engine_t,
    procs: *const *const c_char,
    n: usize,
    id: *const c_char,
    flags: u32,
    group: *mut *mut rivet_group_t,
) -> c_int {
    boundary("rivet_group_connect", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        out_ptr(group, "the group")?;
        if n > 0 && procs.is_null() {
            return Err(invalid("the process list is null"));
        }
        let mut names = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: `n` C strings by the contract.
            let s = unsafe { strings::arg(*procs.add(i), "a process name") }?;
            let name: ProcName = s
                .parse()
                .map_err(|err| invalid(format!("process name {s:?}: {err}")))?;
            names.push(name);
        }
        let id = if id.is_null() {
            None
        } else {
            // SAFETY: a C string by the contract.
            Some(unsafe { strings::arg(id, "the id") }?.to_string())
        };
        let attrs = ConnectAttrs {
            id,
            optional: flags & RIVET_GROUP_OPTIONAL != 0,
            xchg_only: flags & RIVET_GROUP_XCHG_ONLY != 0,
            early_term_allowed: flags & RIVET_GROUP_EARLY_TERM_ALLOWED != 0,
            notify_each: flags & RIVET_GROUP_NOTIFY_EACH != 0,
        };
        let made = match &e.e {
            Either::Local(e) => match e.group_connect(&names, &attrs)? {
                Connected::Group(g) => Some(rivet_group_t {
                    g: Either::Local(g),
                }),
                Connected::Exchanged(_) => None,
            },
            Either::Shared(e) => match e.group_connect(&names, &attrs)? {
                Connected::Group(g) => Some(rivet_group_t {
                    g: Either::Shared(g),
                }),
                Connected::Exchanged(_) => None,
            },
        };
        match made {
            // SAFETY: checked non-null; valid by the contract.
            Some(g) => unsafe { give(group, g) },
            // SAFETY: as above.
            None => unsafe { group.write(std::ptr::null_mut()) },
        }
        Ok(())
    })
}

/// A new handle on the group's communicator (its members in rank order).
///
/// # Safety
/// `group` is a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_group_comm(
    group: *const rivet_group_t,
    out: *mut *mut rivet_comm_t,
) -> c_int {
    boundary("rivet_group_comm", || {
        // SAFETY: null is checked by as_ref; otherwise live by the contract.
        let g = unsafe { group.as_ref() }.ok_or_else(|| invalid("the group handle is null"))?;
        out_ptr(out, "the communicator")?;
        let c = new_comm!(&g.g, g => g.comm().clone());
        // SAFETY: checked non-null; valid by the contract.
        unsafe { give(out, c) };
        Ok(())
    })
}

/// The id the process manager gave the group.
///
/// # Safety
/// `group` is a live handle; `buf` valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn rivet_group_id(
    group: *const rivet_group_t,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    boundary("rivet_group_id", || {
        // SAFETY: null is checked by as_ref; otherwise live by the contract.
        let g = unsafe { group.as_ref() }.ok_or_else(|| invalid("the group handle is null"))?;
        let id = on!(&g.g, g => g.id().to_string());
        // SAFETY: valid for `len` bytes by the contract.
        unsafe { strings::put(&id, buf, len, "the group id") }
    })
}

/// Leave the group (not collective) and free the handle.
///
/// # Safety
/// `engine` is a live handle; `group` came from `rivet_group_connect` and
/// is not used again.
#[no_mangle]
pub unsafe extern "C" fn rivet_group_disconnect(
    engine: *const rivet_engine_t,
    group: *mut rivet_group_t,
) -> c_int {
    boundary("rivet_group_disconnect", || {
        // SAFETY: live handle by the contract.
        let e = unsafe { handles::engine(engine) }?;
        // SAFETY: from rivet_group_connect, given back once by the contract.
        let g = unsafe { handles::take(group, "group") }?;
        match (&e.e, g.g) {
            (Either::Local(e), Either::Local(g)) => e.group_disconnect(g)?,
            (Either::Shared(e), Either::Shared(g)) => e.group_disconnect(g)?,
            _ => return Err(invalid("the group belongs to another engine")),
        }
        Ok(())
    })
}
