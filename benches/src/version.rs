//! `rivet-bench --version`: the version, the git commit built from, the
//! build profile, cargo features and the run-time libraries found
//! (libfabric, libpmix). Computed only when asked for.

pub fn long() -> String {
    rivet_netmods::libs::version_text(env!("RIVET_GIT_COMMIT"), &[])
}
