//! `rivetrun --version`: the version, the git commit built from, the build
//! profile, cargo features, and the libraries found (hwloc, linked in;
//! libfabric and libpmix, looked for at run time). Computed only when
//! asked for: probing opens libfabric.

/// The long version text (clap prints it after "rivetrun ").
pub fn long() -> String {
    let mut lines = vec![
        env!("CARGO_PKG_VERSION").to_string(),
        format!("commit:    {}", env!("RIVET_GIT_COMMIT")),
        format!(
            "profile:   {}",
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
        ),
    ];
    let api = hwlocality::hwloc_api_version();
    lines.push(format!(
        "hwloc:     API {}.{}.{} (linked statically)",
        api >> 16,
        (api >> 8) & 0xff,
        api & 0xff
    ));
    for (label, value) in rivet_netmods::libs::version_lines() {
        lines.push(format!("{:<10} {value}", format!("{label}:")));
    }
    lines.join("\n")
}
