//! `rivet-bench --version`: the version, the git commit built from, the
//! build profile, cargo features and the run-time libraries found
//! (libfabric, libpmix). Computed only when asked for.

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
    for (label, value) in rivet_netmods::libs::version_lines() {
        lines.push(format!("{:<10} {value}", format!("{label}:")));
    }
    lines.join("\n")
}
