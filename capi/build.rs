//! Lays out librivet next to what cargo builds, so that after a plain
//! `cargo build --release` the C library is usable uninstalled:
//!
//! ```text
//! target/<profile>/librivet_capi.so     cargo's cdylib (soname librivet.so.0)
//! target/<profile>/librivet_capi.a      cargo's staticlib
//! target/<profile>/librivet.so.0     -> librivet_capi.so
//! target/<profile>/librivet.so       -> librivet.so.0
//! target/<profile>/librivet.a        -> librivet_capi.a
//! target/<profile>/include/rivet.h      copy of include/rivet.h
//! target/<profile>/pkgconfig/rivet.pc          -lrivet (shared, with an rpath)
//! target/<profile>/pkgconfig/rivet-static.pc   librivet.a and what Rust's std needs
//! ```
//!
//! As in pmi-capi (whose file helpers this includes): the links are made
//! before the link step writes their targets; the soname is set here
//! because cargo has no setting for it; the profile directory is OUT_DIR's
//! third ancestor.

use std::path::{Path, PathBuf};
use std::{env, fs, io};

#[path = "../pmi-capi/build/layout.rs"]
mod layout;
use layout::{replace_file, symlink};

/// Soname major version: bump when the C ABI changes incompatibly (and
/// `RIVET_API_VERSION` in rivet.h with it).
const SO_MAJOR: u32 = 0;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=include/rivet.h");
    println!("cargo:rerun-if-changed=../pmi-capi/build/layout.rs");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librivet.so.{SO_MAJOR}");
    }
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let Some(profile) = out.ancestors().nth(3) else {
        println!(
            "cargo:warning=unexpected OUT_DIR {}; librivet not laid out",
            out.display()
        );
        return;
    };
    if let Err(e) = lay_out(&manifest, profile) {
        println!(
            "cargo:warning=laying out librivet in {} failed: {e}",
            profile.display()
        );
    }
}

fn lay_out(manifest: &Path, profile: &Path) -> io::Result<()> {
    let include = profile.join("include");
    fs::create_dir_all(&include)?;
    replace_file(
        &include.join("rivet.h"),
        &fs::read(manifest.join("include/rivet.h"))?,
    )?;

    let so_major = format!("librivet.so.{SO_MAJOR}");
    symlink("librivet_capi.so", &profile.join(&so_major))?;
    symlink(&so_major, &profile.join("librivet.so"))?;
    symlink("librivet_capi.a", &profile.join("librivet.a"))?;

    let pkgconfig = profile.join("pkgconfig");
    fs::create_dir_all(&pkgconfig)?;
    let version = env::var("CARGO_PKG_VERSION").unwrap_or_else(|_| "0".into());
    let head = format!(
        "# Uninstalled pkg-config file written by capi/build.rs.\n\
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
        &pkgconfig.join("rivet.pc"),
        format!(
            "{head}Name: rivet\n\
             Description: Rivet communication engine, C ABI\n\
             Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lrivet\n\
             Libs.private: {std_libs}\n"
        )
        .as_bytes(),
    )?;
    replace_file(
        &pkgconfig.join("rivet-static.pc"),
        format!(
            "{head}Name: rivet-static\n\
             Description: Rivet communication engine, C ABI, linked statically\n\
             Libs: ${{libdir}}/librivet.a {std_libs}\n"
        )
        .as_bytes(),
    )
}
