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
