//! `rivetrun --version`: the version, the git commit built from, the build
//! profile, cargo features, and the libraries found (hwloc, linked;
//! libfabric and libpmix, looked for at run time). Computed only when
//! asked for: probing opens libfabric.

/// The long version text (clap prints it after "rivetrun ").
pub fn long() -> String {
    let api = hwlocality::hwloc_api_version();
    let hwloc = format!(
        "hwloc:     API {}.{}.{} (linked: libhwloc)",
        api >> 16,
        (api >> 8) & 0xff,
        api & 0xff
    );
    rivet_netmods::libs::version_text(env!("RIVET_GIT_COMMIT"), &[hwloc])
}
