//! Lays out librivet-pmi next to what cargo builds, so that after a plain
//! `cargo build --release` the C library is usable uninstalled:
//!
//! ```text
//! target/<profile>/librivet_pmi_capi.so     cargo's cdylib (soname librivet-pmi.so.0)
//! target/<profile>/librivet_pmi_capi.a      cargo's staticlib
//! target/<profile>/librivet-pmi.so.0     -> librivet_pmi_capi.so
//! target/<profile>/librivet-pmi.so       -> librivet-pmi.so.0
//! target/<profile>/librivet-pmi.a        -> librivet_pmi_capi.a
//! target/<profile>/include/pmi.h            copy of include/pmi.h
//! target/<profile>/pkgconfig/rivet-pmi.pc          -lrivet-pmi (shared, with an rpath)
//! target/<profile>/pkgconfig/rivet-pmi-static.pc   librivet-pmi.a and what Rust's std needs
//! ```
//!
//! A build script runs before its crate is linked, so the symbolic links are
//! made first and dangle until the link step of the same build writes their
//! targets. The soname is set here because cargo has no setting for it.
//! Writing outside OUT_DIR is deliberate: it is the profile directory cargo
//! itself puts the libraries in (OUT_DIR's third ancestor).

use std::path::{Path, PathBuf};
use std::{env, fs, io};

#[path = "build/layout.rs"]
mod layout;
use layout::{replace_file, symlink};

/// Soname major version: bump when the C ABI changes incompatibly.
const SO_MAJOR: u32 = 0;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=include/pmi.h");
    println!("cargo:rerun-if-changed=build/layout.rs");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librivet-pmi.so.{SO_MAJOR}");
    }
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR = <target>/<profile>/build/<package>-<hash>/out
    let Some(profile) = out.ancestors().nth(3) else {
        println!(
            "cargo:warning=unexpected OUT_DIR {}; librivet-pmi not laid out",
            out.display()
        );
        return;
    };
    if let Err(e) = lay_out(&manifest, profile) {
        println!(
            "cargo:warning=laying out librivet-pmi in {} failed: {e}",
            profile.display()
        );
    }
}

fn lay_out(manifest: &Path, profile: &Path) -> io::Result<()> {
    let include = profile.join("include");
    fs::create_dir_all(&include)?;
    replace_file(
        &include.join("pmi.h"),
        &fs::read(manifest.join("include/pmi.h"))?,
    )?;

    let so_major = format!("librivet-pmi.so.{SO_MAJOR}");
    symlink("librivet_pmi_capi.so", &profile.join(&so_major))?;
    symlink(&so_major, &profile.join("librivet-pmi.so"))?;
    symlink("librivet_pmi_capi.a", &profile.join("librivet-pmi.a"))?;

    let pkgconfig = profile.join("pkgconfig");
    fs::create_dir_all(&pkgconfig)?;
    let version = env::var("CARGO_PKG_VERSION").unwrap_or_else(|_| "0".into());
    let head = format!(
        "# Uninstalled pkg-config file written by pmi-capi/build.rs.\n\
         prefix={}\n\
         libdir=${{prefix}}\n\
         includedir=${{prefix}}/include\n\n\
         Version: {version}\n\
         Cflags: -I${{includedir}}\n",
        profile.display()
    );
    // What the Rust standard library of a staticlib needs on Linux (rustc
    // --print native-static-libs); -lgcc_s is the unwinder.
    let std_libs = "-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc";
    replace_file(
        &pkgconfig.join("rivet-pmi.pc"),
        format!(
            "{head}Name: rivet-pmi\n\
             Description: PMI-1 C API (MPICH's pmi.h) on Rivet's PMI-1 client\n\
             Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lrivet-pmi\n\
             Libs.private: {std_libs}\n"
        )
        .as_bytes(),
    )?;
    replace_file(
        &pkgconfig.join("rivet-pmi-static.pc"),
        format!(
            "{head}Name: rivet-pmi-static\n\
             Description: PMI-1 C API (MPICH's pmi.h) on Rivet's PMI-1 client, linked statically\n\
             Libs: ${{libdir}}/librivet-pmi.a {std_libs}\n"
        )
        .as_bytes(),
    )
}
