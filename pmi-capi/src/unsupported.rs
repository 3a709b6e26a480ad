//! Calls the PMI document lets an implementation leave out: they return
//! `PMI_ERR_UNSUPPORTED` (before `PMI_Init` too: they never depend on it).
//!
//! * KVS create/destroy/iterate: the PMI-1 wire rivetrun and Hydra serve has
//!   no command for them.
//! * Resource registration: no process manager Rivet runs under offers it,
//!   and the document says the registration call must then fail, so that
//!   the program cleans up after itself.

use std::ffi::{c_char, c_int, c_void};

use crate::{boundary, PMI_ERR_UNSUPPORTED};

/// A resource's clean-up handler (`void *(*)(void *)`).
pub type Handler = Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>;

#[no_mangle]
pub extern "C" fn PMI_KVS_Create(_kvsname: *mut c_char, _length: c_int) -> c_int {
    boundary(|| PMI_ERR_UNSUPPORTED)
}

#[no_mangle]
pub extern "C" fn PMI_KVS_Destroy(_kvsname: *const c_char) -> c_int {
    boundary(|| PMI_ERR_UNSUPPORTED)
}

#[no_mangle]
pub extern "C" fn PMI_KVS_Iter_first(
    _kvsname: *const c_char,
    _key: *mut c_char,
    _key_len: c_int,
    _val: *mut c_char,
    _val_len: c_int,
) -> c_int {
    boundary(|| PMI_ERR_UNSUPPORTED)
}

#[no_mangle]
pub extern "C" fn PMI_KVS_Iter_next(
    _kvsname: *const c_char,
    _key: *mut c_char,
    _key_len: c_int,
    _val: *mut c_char,
    _val_len: c_int,
) -> c_int {
    boundary(|| PMI_ERR_UNSUPPORTED)
}

#[no_mangle]
pub extern "C" fn PMI_Resource_register(
    _name: *const c_char,
    _at_exit: Handler,
    _at_exit_extra_data: *mut c_void,
    _at_abort: Handler,
    _at_abort_extra_data: *mut c_void,
) -> c_int {
    boundary(|| PMI_ERR_UNSUPPORTED)
}

#[no_mangle]
pub extern "C" fn PMI_Resource_release_begin(_name: *const c_char, _timeout: c_int) -> c_int {
    boundary(|| PMI_ERR_UNSUPPORTED)
}

#[no_mangle]
pub extern "C" fn PMI_Resource_release_end(_name: *const c_char) -> c_int {
    boundary(|| PMI_ERR_UNSUPPORTED)
}
