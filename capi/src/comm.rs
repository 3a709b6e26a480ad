//! Communicators: queries, dup (agreed or on a caller's context id),
//! creation from chosen ranks, merge, barrier, free and disconnect.

use std::ffi::c_int;

use crate::errors::{boundary, invalid};
use crate::handles::{self, comm, give, new_comm, on, out_ptr, rank_arg, rivet_comm_t};

/// This process's rank (in the local group of an intercommunicator).
///
/// # Safety
/// `c` is a live handle; `rank` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_rank(c: *const rivet_comm_t, rank: *mut c_int) -> c_int {
    boundary("rivet_comm_rank", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(rank, "the rank")?;
        // SAFETY: checked non-null; valid by the contract.
        unsafe { rank.write(on!(&c.c, c => c.rank()) as c_int) };
        Ok(())
    })
}

/// The number of ranks (of the local group of an intercommunicator).
///
/// # Safety
/// `c` is a live handle; `size` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_size(c: *const rivet_comm_t, size: *mut c_int) -> c_int {
    boundary("rivet_comm_size", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(size, "the size")?;
        // SAFETY: checked non-null; valid by the contract.
        unsafe { size.write(on!(&c.c, c => c.size()) as c_int) };
        Ok(())
    })
}

/// The size of an intercommunicator's remote group; -1 for an
/// intracommunicator.
///
/// # Safety
/// `c` is a live handle; `size` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_remote_size(c: *const rivet_comm_t, size: *mut c_int) -> c_int {
    boundary("rivet_comm_remote_size", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(size, "the size")?;
        let remote = on!(&c.c, c => c.remote_size()).map_or(-1, |s| s as c_int);
        // SAFETY: checked non-null; valid by the contract.
        unsafe { size.write(remote) };
        Ok(())
    })
}

/// A new communicator with the same groups and a context id the members
/// agree on. Collective over every process of `c` (both groups of an
/// intercommunicator), in the same order.
///
/// # Safety
/// `c` is a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_dup(
    c: *const rivet_comm_t,
    out: *mut *mut rivet_comm_t,
) -> c_int {
    boundary("rivet_comm_dup", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(out, "the communicator")?;
        let new = new_comm!(&c.c, c => c.dup()?);
        // SAFETY: checked non-null; valid by the contract.
        unsafe { give(out, new) };
        Ok(())
    })
}

/// The same groups on the caller's context id `context_id`
/// (`0..=RIVET_CONTEXT_ID_MAX`), without communication: every member
/// calls it with the same id, and the caller keeps that id unused by any
/// other live communicator these processes share.
///
/// # Safety
/// `c` is a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_dup_with_context(
    c: *const rivet_comm_t,
    context_id: u32,
    out: *mut *mut rivet_comm_t,
) -> c_int {
    boundary("rivet_comm_dup_with_context", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(out, "the communicator")?;
        let new = new_comm!(&c.c, c => c.dup_with_context(context_id)?);
        // SAFETY: checked non-null; valid by the contract.
        unsafe { give(out, new) };
        Ok(())
    })
}

/// A communicator of `ranks[0..n]` (ranks of the intracommunicator `c`,
/// in the new order, including this process) on the caller's context id
/// (as [`rivet_comm_dup_with_context`]). Only the members call it, all
/// with the same ranks and id; no communication.
///
/// # Safety
/// `c` is a live handle; `ranks` valid for `n` reads; `out` for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_create(
    c: *const rivet_comm_t,
    ranks: *const c_int,
    n: usize,
    context_id: u32,
    out: *mut *mut rivet_comm_t,
) -> c_int {
    boundary("rivet_comm_create", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(out, "the communicator")?;
        if ranks.is_null() {
            return Err(invalid("the rank list is null"));
        }
        // SAFETY: non-null and valid for `n` reads by the contract.
        let list = unsafe { std::slice::from_raw_parts(ranks, n) };
        let list = list
            .iter()
            .map(|&r| rank_arg(r, "rank"))
            .collect::<Result<Vec<u32>, _>>()?;
        let new = new_comm!(&c.c, c => c.create_with_context(&list, context_id)?);
        // SAFETY: checked non-null; valid by the contract.
        unsafe { give(out, new) };
        Ok(())
    })
}

/// Split the intracommunicator `c`: processes passing the same `color`
/// form a new one, ordered by `key`, then by rank in `c`; a negative
/// `color` (MPI's `MPI_UNDEFINED`) gives a null `*out`. The context id is
/// agreed over `c` (across IMPI clients as seed 003's 4.7: the new
/// communicator gets `maxcid + 1`, its collectives `maxcid + 2`), so
/// another IMPI implementation agrees. Collective over `c`.
///
/// # Safety
/// `c` is a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_split(
    c: *const rivet_comm_t,
    color: c_int,
    key: c_int,
    out: *mut *mut rivet_comm_t,
) -> c_int {
    boundary("rivet_comm_split", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(out, "the communicator")?;
        let color = u32::try_from(color).ok();
        let new = match &c.c {
            handles::Either::Local(c) => c.split(color, key)?.map(rivet_comm_t::local),
            handles::Either::Shared(c) => c.split(color, key)?.map(rivet_comm_t::shared),
        };
        // SAFETY: checked non-null; valid by the contract.
        unsafe { give_or_null(out, new) };
        Ok(())
    })
}

/// A communicator of `ranks[0..n]` (ranks of the intracommunicator `c`,
/// in the new order) on a context id agreed over `c`, as
/// [`rivet_comm_split`] agrees one; members get it, every other process
/// of `c` a null `*out`. Collective over `c`: every process calls it with
/// the same ranks.
///
/// # Safety
/// `c` is a live handle; `ranks` valid for `n` reads; `out` for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_create_agreed(
    c: *const rivet_comm_t,
    ranks: *const c_int,
    n: usize,
    out: *mut *mut rivet_comm_t,
) -> c_int {
    boundary("rivet_comm_create_agreed", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(out, "the communicator")?;
        if ranks.is_null() && n > 0 {
            return Err(invalid("the rank list is null"));
        }
        let list = if n == 0 {
            &[][..]
        } else {
            // SAFETY: non-null and valid for `n` reads by the contract.
            unsafe { std::slice::from_raw_parts(ranks, n) }
        };
        let list = list
            .iter()
            .map(|&r| rank_arg(r, "rank"))
            .collect::<Result<Vec<u32>, _>>()?;
        let new = match &c.c {
            handles::Either::Local(c) => c.create(&list)?.map(rivet_comm_t::local),
            handles::Either::Shared(c) => c.create(&list)?.map(rivet_comm_t::shared),
        };
        // SAFETY: checked non-null; valid by the contract.
        unsafe { give_or_null(out, new) };
        Ok(())
    })
}

/// The groups of `c` on its collective context (its context id + 1: the
/// seed's collective context of a communicator made by dup, split or
/// create), for an MPI layer's own collectives. The engine's collectives
/// (`rivet_comm_barrier`, agreements) use tags 1 to 5 and 1001 to 1006
/// there; a layer keeps to others. No communication.
///
/// # Safety
/// `c` is a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_collective(
    c: *const rivet_comm_t,
    out: *mut *mut rivet_comm_t,
) -> c_int {
    boundary("rivet_comm_collective", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(out, "the communicator")?;
        let new = new_comm!(&c.c, c => c.on_collective_context());
        // SAFETY: checked non-null; valid by the contract.
        unsafe { give(out, new) };
        Ok(())
    })
}

/// For each rank `c` sends to (the remote group's of an
/// intercommunicator), whether it runs under another IMPI client than
/// this process: `flags[r]` = 1 if so, else 0, for `r < n` (`n` is the
/// (remote) size); `*any` = 1 if one is. User data to such a rank travels
/// as external32 (seed 003, 1.2.2), which the caller converts. All 0
/// outside an IMPI job. No communication.
///
/// # Safety
/// `c` is a live handle; `flags` valid for `n` writes (or null with `n`
/// 0); `any` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_foreign_peers(
    c: *const rivet_comm_t,
    flags: *mut u8,
    n: usize,
    any: *mut c_int,
) -> c_int {
    boundary("rivet_comm_foreign_peers", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(any, "the flag")?;
        let peers = on!(&c.c, c => c.foreign_peers());
        if n != peers.len() {
            return Err(invalid(format!(
                "the flag array holds {n} entries for {} peers",
                peers.len()
            )));
        }
        if flags.is_null() && n > 0 {
            return Err(invalid("the flag array is null"));
        }
        for (r, &f) in peers.iter().enumerate() {
            // SAFETY: non-null and valid for `n` writes by the contract.
            unsafe { flags.add(r).write(u8::from(f)) };
        }
        // SAFETY: checked non-null; valid by the contract.
        unsafe { any.write(c_int::from(peers.contains(&true))) };
        Ok(())
    })
}

/// For each rank `r < n` of `c`'s (local) group, its rank in `other`'s
/// local group in `ranks[r]`, or -1 if it is not there (`n` is `c`'s
/// size). No communication.
///
/// # Safety
/// `c` and `other` are live handles; `ranks` valid for `n` writes.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_translate_ranks(
    c: *const rivet_comm_t,
    other: *const rivet_comm_t,
    ranks: *mut c_int,
    n: usize,
) -> c_int {
    boundary("rivet_comm_translate_ranks", || {
        // SAFETY: live handles by the contract.
        let (c, other) = unsafe { (comm(c)?, comm(other)?) };
        let found = match (&c.c, &other.c) {
            (handles::Either::Local(a), handles::Either::Local(b)) => a.ranks_in(b),
            (handles::Either::Shared(a), handles::Either::Shared(b)) => a.ranks_in(b),
            _ => return Err(invalid("the communicators are of two engines")),
        };
        if n != found.len() {
            return Err(invalid(format!(
                "the rank array holds {n} entries for {} ranks",
                found.len()
            )));
        }
        if ranks.is_null() && n > 0 {
            return Err(invalid("the rank array is null"));
        }
        for (i, r) in found.into_iter().enumerate() {
            let r = r.map_or(-1, |r| r as c_int);
            // SAFETY: non-null and valid for `n` writes by the contract.
            unsafe { ranks.add(i).write(r) };
        }
        Ok(())
    })
}

/// Store `value` as a new handle, or null.
///
/// # Safety
/// `out` is valid for a write.
unsafe fn give_or_null<T>(out: *mut *mut T, value: Option<T>) {
    match value {
        // SAFETY: valid for writes by the caller's contract.
        Some(v) => unsafe { give(out, v) },
        // SAFETY: valid for writes by the caller's contract.
        None => unsafe { out.write(std::ptr::null_mut()) },
    }
}

/// An intracommunicator of both groups of the intercommunicator `c`; the
/// group passing `high = 0` comes first. Collective over both groups.
///
/// # Safety
/// `c` is a live handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_merge(
    c: *const rivet_comm_t,
    high: c_int,
    out: *mut *mut rivet_comm_t,
) -> c_int {
    boundary("rivet_comm_merge", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        out_ptr(out, "the communicator")?;
        let new = new_comm!(&c.c, c => c.merge(high != 0)?);
        // SAFETY: checked non-null; valid by the contract.
        unsafe { give(out, new) };
        Ok(())
    })
}

/// Block until every process of `c` has called it.
///
/// # Safety
/// `c` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_barrier(c: *const rivet_comm_t) -> c_int {
    boundary("rivet_comm_barrier", || {
        // SAFETY: live handle by the contract.
        let c = unsafe { comm(c) }?;
        on!(&c.c, c => c.barrier())?;
        Ok(())
    })
}

/// Free the handle. The last handle on a communicator's groups gives
/// back their references (connections to other jobs stay until
/// disconnect). Operations already started go on.
///
/// # Safety
/// `c` came from this library and is not used again.
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_free(c: *mut rivet_comm_t) -> c_int {
    boundary("rivet_comm_free", || {
        // SAFETY: from this library, given back once by the contract.
        drop(unsafe { handles::take(c, "communicator") }?);
        Ok(())
    })
}

/// Wait for traffic on `c` to end (collective), then free it; with the
/// last handle on its groups, the connections to other jobs close.
///
/// # Safety
/// As [`rivet_comm_free`].
#[no_mangle]
pub unsafe extern "C" fn rivet_comm_disconnect(c: *mut rivet_comm_t) -> c_int {
    boundary("rivet_comm_disconnect", || {
        // SAFETY: from this library, given back once by the contract.
        let c = unsafe { handles::take(c, "communicator") }?;
        on!(c.c, c => c.disconnect())?;
        Ok(())
    })
}
