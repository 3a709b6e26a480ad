//! Builds librivetmpi, a C library, with the system C compiler (`$CC`,
//! else `cc`) and lays it out next to what cargo builds:
//!
//! ```text
//! target/<profile>/librivetmpi.so.0.1.0        the shared library (soname librivetmpi.so.0)
//! target/<profile>/librivetmpi.so.0         -> librivetmpi.so.0.1.0
//! target/<profile>/librivetmpi.so           -> librivetmpi.so.0
//! target/<profile>/librivetmpi.a               the archive
//! target/<profile>/include/mpi.h               copy of include/mpi.h
//! ```
//!
//! librivetmpi needs librivet.so.0 (DT_NEEDED, found through its
//! `$ORIGIN` runpath beside it), but cargo runs this script before it has
//! linked librivet, so the link here is against an empty stand-in with the
//! same soname, built in OUT_DIR: the undefined `rivet_*` symbols resolve
//! at run time (and when a program links `-lrivetmpi -lrivet`, as rivetcc
//! does). The profile directory is OUT_DIR's third ancestor, as for the
//! other C libraries (shared helpers in pmi-capi/build/layout.rs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::{env, fs, io};

#[path = "../pmi-capi/build/layout.rs"]
mod layout;
use layout::{replace_file, symlink};

/// Soname major version: bump when mpi.h's ABI changes incompatibly.
const SO_MAJOR: u32 = 0;

const SOURCES: [&str; 10] = [
    "init.c",
    "comm.c",
    "p2p.c",
    "request.c",
    "reduce.c",
    "coll.c",
    "dynamic.c",
    "external32.c",
    "foreign.c",
    "coll_ext32.c",
];

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=include/mpi.h");
    println!("cargo:rerun-if-changed=src/impl.h");
    println!("cargo:rerun-if-changed=../capi/include/rivet.h");
    println!("cargo:rerun-if-changed=../pmi-capi/build/layout.rs");
    println!("cargo:rerun-if-env-changed=CC");
    for s in SOURCES {
        println!("cargo:rerun-if-changed=src/{s}");
    }
    let Some(profile) = out.ancestors().nth(3) else {
        panic!("unexpected OUT_DIR {}", out.display());
    };
    if let Err(e) = build(&manifest, &out, profile) {
        panic!("building librivetmpi failed: {e}");
    }
}

fn cc() -> Command {
    Command::new(env::var("CC").unwrap_or_else(|_| "cc".into()))
}

fn run(mut cmd: Command) -> io::Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| io::Error::other(format!("{shown}: {e} (is a C compiler installed?)")))?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("{shown} failed: {status}")))
    }
}

fn build(manifest: &Path, out: &Path, profile: &Path) -> io::Result<()> {
    let version = env::var("CARGO_PKG_VERSION").unwrap_or_else(|_| "0.0.0".into());
    let opt = if env::var("PROFILE").as_deref() == Ok("release") {
        "-O2"
    } else {
        "-O1"
    };
    let mut objects = Vec::new();
    for s in SOURCES {
        let obj = out.join(s.replace(".c", ".o"));
        let mut c = cc();
        c.args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-g"])
            // -fno-plt: each call into librivet goes through its GOT slot at
            // once (resolved at load), not a PLT stub; -fvisibility=hidden
            // (with impl.h's pragma) keeps the layer's own calls direct.
            .args([opt, "-fPIC", "-fvisibility=hidden", "-fno-plt", "-c", "-o"])
            .arg(&obj)
            .arg(manifest.join("src").join(s))
            .arg("-I")
            .arg(manifest.join("include"))
            .arg("-I")
            .arg(manifest.join("../capi/include"))
            .arg(format!("-DRIVETMPI_VERSION=\"{version}\""));
        run(c)?;
        objects.push(obj);
    }

    // The stand-in for librivet.so.0 (see the top of this file).
    let stub_dir = out.join("stub");
    fs::create_dir_all(&stub_dir)?;
    let stub_src = stub_dir.join("empty.c");
    fs::write(&stub_src, "typedef int rivet_stub;\n")?;
    let mut c = cc();
    c.args(["-shared", "-fPIC", "-Wl,-soname,librivet.so.0", "-o"])
        .arg(stub_dir.join("librivet.so"))
        .arg(&stub_src);
    run(c)?;

    let real = format!("librivetmpi.so.{version}");
    let so_major = format!("librivetmpi.so.{SO_MAJOR}");
    let tmp = out.join(&real);
    let mut c = cc();
    c.args(["-shared", "-fPIC", "-g"])
        .arg(format!("-Wl,-soname,{so_major}"))
        .arg("-Wl,-rpath,$ORIGIN")
        .arg("-o")
        .arg(&tmp)
        .args(&objects)
        .arg("-L")
        .arg(&stub_dir)
        .args([
            "-Wl,--no-as-needed",
            "-lrivet",
            "-Wl,--as-needed",
            "-lpthread",
        ]);
    run(c)?;
    let archive = out.join("librivetmpi.a");
    let _ = fs::remove_file(&archive);
    let mut ar = Command::new(env::var("AR").unwrap_or_else(|_| "ar".into()));
    ar.arg("crs").arg(&archive).args(&objects);
    run(ar)?;

    replace_file(&profile.join(&real), &fs::read(&tmp)?)?;
    replace_file(&profile.join("librivetmpi.a"), &fs::read(&archive)?)?;
    symlink(&real, &profile.join(&so_major))?;
    symlink(&so_major, &profile.join("librivetmpi.so"))?;
    let include = profile.join("include");
    fs::create_dir_all(&include)?;
    replace_file(
        &include.join("mpi.h"),
        &fs::read(manifest.join("include/mpi.h"))?,
    )
}
