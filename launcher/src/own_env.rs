//! Settings rivetrun puts in its own environment for the libraries it
//! loads itself, and keeps out of its ranks' environments (unlike
//! `pmix_host::PMIX_DEFAULTS`, which the ranks share on purpose).
//!
//! `HWLOC_PLUGINS_BLACKLIST`: at its first topology, hwloc dlopens every
//! plugin it finds (on Debian: OpenCL, GL with libX11 and libxcb, PCI with
//! libpciaccess, libxml2 with ICU and libstdc++), a few hundred
//! relocations and page faults per library. rivetrun keeps no I/O objects
//! and hwloc's built-in XML reader and writer serve `--topology` and the
//! ranks' topology file, so it needs none of them. The ranks' own hwloc
//! (Open MPI's, MPICH's) may want them: they do not inherit the setting.

use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};

/// hwloc's list of plugins not to load.
const PLUGINS_VAR: &str = "HWLOC_PLUGINS_BLACKLIST";

/// hwloc's I/O and libxml2 plugins (those of hwloc 2.9, and the GPU ones
/// other builds carry).
const PLUGINS_LEFT_OUT: &str = "hwloc_xml_libxml,hwloc_pci,hwloc_opencl,hwloc_gl,\
hwloc_cuda,hwloc_nvml,hwloc_rsmi,hwloc_levelzero";

/// Whether [`choose`] set [`PLUGINS_VAR`] (the user's own setting is kept
/// and passed on).
static SET_HERE: AtomicBool = AtomicBool::new(false);

/// Applies the settings the user did not make. Called first thing in
/// `main`, before any thread runs (the environment is not safe to change
/// once threads may read it).
pub fn choose() {
    if std::env::var_os(PLUGINS_VAR).is_none() {
        std::env::set_var(PLUGINS_VAR, PLUGINS_LEFT_OUT);
        SET_HERE.store(true, Ordering::Relaxed);
    }
}

/// True for a variable [`choose`] set, which a rank must not inherit.
pub fn is_own(name: &OsStr) -> bool {
    SET_HERE.load(Ordering::Relaxed) && name == PLUGINS_VAR
}

/// Keeps what [`choose`] set out of `cmd`'s environment (a proxy's
/// launcher command: the proxy, a rivetrun too, then sets it for itself
/// and keeps it from its ranks).
pub fn keep_out_of(cmd: &mut std::process::Command) {
    if SET_HERE.load(Ordering::Relaxed) {
        cmd.env_remove(PLUGINS_VAR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a variable set here is held back, and only that one.
    #[test]
    fn holds_back_only_what_it_set() {
        SET_HERE.store(false, Ordering::Relaxed);
        assert!(!is_own(OsStr::new(PLUGINS_VAR)));
        SET_HERE.store(true, Ordering::Relaxed);
        assert!(is_own(OsStr::new(PLUGINS_VAR)));
        assert!(!is_own(OsStr::new("HWLOC_COMPONENTS")));
        assert!(!is_own(OsStr::new("PATH")));
        SET_HERE.store(false, Ordering::Relaxed);
    }

    /// Every name is an hwloc plugin's (`hwloc_*`), comma-separated.
    #[test]
    fn plugin_list_is_well_formed() {
        for name in PLUGINS_LEFT_OUT.split(',') {
            assert!(name.starts_with("hwloc_") && !name.contains(' '), "{name}");
        }
    }
}
