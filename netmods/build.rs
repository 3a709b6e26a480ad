//! Probes for the system libfabric when the `ofi` feature is on. Found:
//! links it and sets `cfg(rivet_ofi)`, which compiles the ofi netmod.
//! Not found: says why in a build warning and builds without it.

/// The API the hand-written bindings in `src/ofi/sys` describe.
const MIN_VERSION: &str = "1.17";

fn main() {
    println!("cargo:rustc-check-cfg=cfg(rivet_ofi)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    if std::env::var_os("CARGO_FEATURE_OFI").is_none() {
        return;
    }
    match pkg_config::Config::new()
        .atleast_version(MIN_VERSION)
        .probe("libfabric")
    {
        Ok(_) => println!("cargo:rustc-cfg=rivet_ofi"),
        Err(e) => {
            // pkg-config's own text is long; its "Package ... not found" line says it.
            let all = e.to_string();
            let why = all
                .lines()
                .map(str::trim)
                .find(|l| l.starts_with("Package") || l.contains("not found"))
                .unwrap_or("pkg-config failed");
            println!(
                "cargo:warning=the ofi (libfabric) netmod is left out: libfabric >= {MIN_VERSION} \
                 not found by pkg-config ({why}); install libfabric-dev or build without the \
                 `ofi` feature"
            );
        }
    }
}
