//! Hand-written bindings to the parts of libfabric 1.17 Rivet uses: one
//! file per header (`fabric.h`, `fi_domain.h`, `fi_endpoint.h` with
//! `fi_cm.h`, `fi_tagged.h` and `fi_rma.h`, `fi_eq.h`, `fi_errno.h`).
//!
//! The library is opened at run time (`library.rs` says why); only its
//! exported functions are looked up (`fi_getinfo`, `fi_freeinfo`,
//! `fi_dupinfo`, `fi_fabric`, `fi_strerror`, `fi_version`, `fi_tostr_r`); the
//! header's `static inline` dispatchers (`fi_domain`, `fi_tsend`, ...) are
//! re-implemented here as calls through the objects' ops tables, returning
//! `-FI_ENOSYS` where a provider left an entry empty instead of jumping to
//! null. Struct layouts are checked against the C headers at test time
//! (`tests/ofi_layout.rs`). Everything here is raw: the netmod uses the
//! owning wrappers in `ofi::fid`.

#![allow(non_camel_case_types)]

pub mod domain;
pub mod endpoint;
pub mod eq;
pub mod errno;
pub mod fabric;
pub mod library;

pub use domain::*;
pub use endpoint::*;
pub use eq::*;
pub use errno::*;
pub use fabric::*;
pub use library::load;

/// A function-table entry Rivet never calls: only its size matters.
pub type Unused = Option<unsafe extern "C" fn()>;
