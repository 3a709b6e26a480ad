//! This process's hwloc topology handed to another library of the process
//! that would otherwise discover it again: the PMIx server
//! (`pmix_host`), whose `PMIx_server_init` takes a topology pointer
//! (`pmix.topo`) and then skips its own discovery.

use std::ffi::c_void;
use std::fmt::{self, Write};
use std::sync::Arc;

/// A shared, immutable hwloc topology. The library it is handed to keeps
/// the raw pointer, so the holder keeps a clone alive for as long as that
/// library may read it. hwloc allows concurrent reads of a topology that
/// nobody modifies, and nothing here modifies it.
#[derive(Clone)]
pub struct SharedTopology(pub(super) Arc<hwlocality::Topology>);

impl SharedTopology {
    /// The `hwloc_topology_t` behind the topology. hwlocality does not
    /// export it, but its `fmt::Pointer` prints exactly that pointer.
    pub fn raw(&self) -> Option<*mut c_void> {
        struct Ptr<'a>(&'a hwlocality::Topology);
        impl fmt::Display for Ptr<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Pointer::fmt(self.0, f)
            }
        }
        let mut text = String::new();
        write!(text, "{}", Ptr(&self.0)).ok()?;
        let addr = usize::from_str_radix(text.strip_prefix("0x")?, 16).ok()?;
        (addr != 0).then_some(addr as *mut c_void)
    }
}

impl fmt::Debug for SharedTopology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedTopology({:?})", self.raw())
    }
}
