//! The shared libraries Rivet can open at run time, for `--version`
//! reports: libfabric (the ofi netmod) and libpmix (the PMIx client
//! library). Probing dlopens and closes at once; the ofi netmod's own
//! loading is untouched unless libfabric's version is asked for.

use std::ffi::CString;

/// Where a library was found (the name or path that loaded), if anywhere.
pub fn find(candidates: &[&str]) -> Option<String> {
    candidates.iter().find_map(|name| {
        let c = CString::new(*name).ok()?;
        // SAFETY: dlopen with a NUL-terminated name; the handle is closed at once.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return None;
        }
        // SAFETY: `handle` came from dlopen above.
        unsafe { libc::dlclose(handle) };
        Some(name.to_string())
    })
}

/// libpmix, by the soname the PMIx client and rivetrun's PMIx server open
/// (`rivet_pmi::pmix_ffi::LIBRARY`), so "found" means they can use it.
pub fn pmix() -> Option<String> {
    find(&["libpmix.so.2"])
}

/// "1.20 (libfabric.so.1)", or why libfabric cannot be used.
#[cfg(feature = "ofi")]
pub fn libfabric() -> Result<String, String> {
    crate::ofi::sys::load()?;
    // SAFETY: plain FFI; load() succeeded.
    let v = unsafe { crate::ofi::sys::fi_version() };
    Ok(format!("{}.{} (libfabric.so.1)", v >> 16, v & 0xffff))
}

/// Without the ofi feature libfabric is never used.
#[cfg(not(feature = "ofi"))]
pub fn libfabric() -> Result<String, String> {
    Err("not built in (feature ofi off)".into())
}

/// This crate's cargo features that are on.
pub fn features() -> Vec<&'static str> {
    let mut on = Vec::new();
    if cfg!(feature = "ofi") {
        on.push("ofi");
    }
    on
}

/// The long `--version` text every Rivet binary prints: the version, the
/// git commit it was built from (each binary's build script gives its
/// own), the profile, `own` lines of the binary's, then [`version_lines`].
pub fn version_text(commit: &str, own: &[String]) -> String {
    let mut lines = vec![
        env!("CARGO_PKG_VERSION").to_string(),
        format!("commit:    {commit}"),
        format!(
            "profile:   {}",
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
        ),
    ];
    lines.extend_from_slice(own);
    for (label, value) in version_lines() {
        lines.push(format!("{:<10} {value}", format!("{label}:")));
    }
    lines.join("\n")
}

/// The lines a `--version` shares across Rivet's binaries: features and
/// the run-time libraries, as (label, value).
pub fn version_lines() -> Vec<(&'static str, String)> {
    let features = features();
    vec![
        (
            "features",
            if features.is_empty() {
                "none".into()
            } else {
                features.join(", ")
            },
        ),
        (
            "libfabric",
            libfabric().unwrap_or_else(|why| format!("not usable: {why}")),
        ),
        (
            "libpmix",
            pmix().map_or_else(|| "not found".into(), |at| format!("found ({at})")),
        ),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_libc_and_not_a_made_up_library() {
        assert_eq!(
            super::find(&["libnot-a-library.so.9", "libc.so.6"]).as_deref(),
            Some("libc.so.6")
        );
        assert_eq!(super::find(&["libnot-a-library.so.9"]), None);
    }
}
