//! `cargo xtask install --prefix DIR [--profile release|debug] [--no-build]`:
//! lay out what `cargo build --release --workspace` made under a prefix, the
//! way a package would:
//!
//! ```text
//! DIR/bin/            rivetrun, rivet-bench (and rivetcc where built)
//! DIR/lib/            librivet.so.0 (+ librivet.so, librivet.a), librivet-pmi.*, librivetmpi.*
//! DIR/include/        rivet.h, pmi.h (and mpi.h)
//! DIR/lib/pkgconfig/  rivet.pc, rivet-static.pc, rivet-pmi.pc, ... with DIR as prefix
//! ```
//!
//! `cargo xtask man [--out DIR]`: build rivetrun and rivet-bench (debug)
//! and write their man pages and shell completions, generated from their
//! clap definitions (each binary's hidden `--clap-generate KIND`):
//!
//! ```text
//! DIR/man1/rivetrun.1, DIR/man1/rivet-bench.1
//! DIR/completions/bash/{rivetrun,rivet-bench}
//! DIR/completions/zsh/{_rivetrun,_rivet-bench}
//! DIR/completions/fish/{rivetrun,rivet-bench}.fish
//! ```
//! (default DIR: target/cli-docs; `man -l DIR/man1/rivetrun.1` to read).
//!
//! The uninstalled `.pc` files name the profile directory as their prefix
//! and keep libraries and headers beside it; installed, the libraries go
//! to `lib/`, so their `prefix=` and `libdir=` lines are rewritten.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Rivet's project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Build in release mode and install under a prefix.
    Install {
        /// Where to install (bin/, lib/, include/, lib/pkgconfig/ below it).
        #[arg(long)]
        prefix: PathBuf,
        /// Install what is already built; do not run `cargo build` first.
        #[arg(long)]
        no_build: bool,
        /// The cargo profile to build and install (its target/ directory).
        #[arg(long, default_value = "release", value_parser = ["release", "debug"])]
        profile: String,
    },
    /// Write man pages and bash/zsh/fish completions of rivetrun and rivet-bench.
    Man {
        /// Where to write man1/ and completions/ [default: target/cli-docs].
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let (what, result) = match Cli::parse().task {
        Task::Install {
            prefix,
            no_build,
            profile,
        } => (
            "install",
            install(&prefix, no_build, &profile)
                .map(|n| format!("installed {n} files under {}", prefix.display())),
        ),
        Task::Man { out } => {
            let out = out.unwrap_or_else(|| target_dir().join("cli-docs"));
            (
                "man",
                man(&out).map(|n| format!("wrote {n} files under {}", out.display())),
            )
        }
    };
    match result {
        Ok(done) => {
            eprintln!("xtask: {done}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask: {what} failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
}

/// Build the two programs and write their man pages and completions.
fn man(out: &Path) -> io::Result<usize> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new(cargo)
        .args(["build", "-p", "rivet-launcher", "-p", "rivet-bench"])
        .current_dir(workspace())
        .status()?;
    if !built.success() {
        return Err(io::Error::other(
            "cargo build -p rivet-launcher -p rivet-bench failed",
        ));
    }
    let mut n = 0;
    for program in ["rivetrun", "rivet-bench"] {
        let exe = target_dir().join("debug").join(program);
        for (kind, file) in [
            ("man", format!("man1/{program}.1")),
            ("bash", format!("completions/bash/{program}")),
            ("zsh", format!("completions/zsh/_{program}")),
            ("fish", format!("completions/fish/{program}.fish")),
        ] {
            let result = Command::new(&exe)
                .args(["--clap-generate", kind])
                .output()?;
            if !result.status.success() || result.stdout.is_empty() {
                return Err(io::Error::other(format!(
                    "{} --clap-generate {kind} failed: {}",
                    exe.display(),
                    String::from_utf8_lossy(&result.stderr).trim()
                )));
            }
            let path = out.join(file);
            fs::create_dir_all(path.parent().expect("a file in a directory"))?;
            fs::write(&path, &result.stdout)?;
            n += 1;
        }
    }
    Ok(n)
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask/ sits in the workspace")
        .to_path_buf()
}

fn install(prefix: &Path, no_build: bool, profile: &str) -> io::Result<usize> {
    let root = workspace();
    if !no_build {
        let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        build.args(["build", "--workspace"]).current_dir(&root);
        if profile == "release" {
            build.arg("--release");
        }
        if !build.status()?.success() {
            return Err(io::Error::other(format!(
                "cargo build --workspace ({profile}) failed"
            )));
        }
    }
    let built = target_dir().join(profile);
    if !built.join("librivet.so").exists() {
        return Err(io::Error::other(format!(
            "{} has no librivet.so: build first (cargo build --workspace, --release for release)",
            built.display()
        )));
    }
    let prefix = std::path::absolute(prefix)?;
    let dirs = ["bin", "lib", "include", "lib/pkgconfig"].map(|d| prefix.join(d));
    for d in &dirs {
        fs::create_dir_all(d)?;
    }
    let [bin, lib, include, pkgconfig] = dirs;
    let mut n = 0;
    for exe in ["rivetrun", "rivet-bench", "rivetcc"] {
        n += copy_if_built(&built.join(exe), &bin.join(exe))?;
    }
    for entry in fs::read_dir(&built)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // The libraries under their public names; cargo's own
        // librivet_capi.so etc. are what the links point at.
        let public = name.starts_with("librivet.")
            || name.starts_with("librivet-pmi.")
            || name.starts_with("librivetmpi.");
        if !public || name.ends_with(".rlib") || name.ends_with(".d") {
            continue;
        }
        // A link to another public name stays a link (librivet.so ->
        // librivet.so.0); a link to cargo's file becomes that file.
        let to = lib.join(name);
        match fs::read_link(&path) {
            Ok(target)
                if target.to_str().is_some_and(|t| {
                    t.starts_with("librivet.")
                        || t.starts_with("librivet-pmi.")
                        || t.starts_with("librivetmpi.")
                }) =>
            {
                let _ = fs::remove_file(&to);
                std::os::unix::fs::symlink(&target, &to)?;
                n += 1;
            }
            _ => n += copy_if_built(&fs::canonicalize(&path)?, &to)?,
        }
    }
    for entry in fs::read_dir(built.join("include"))? {
        let path = entry?.path();
        if let Some(name) = path.file_name() {
            n += copy_if_built(&path, &include.join(name))?;
        }
    }
    for entry in fs::read_dir(built.join("pkgconfig"))? {
        let path = entry?.path();
        let Some(name) = path.file_name() else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "pc") {
            let text = fs::read_to_string(&path)?;
            fs::write(pkgconfig.join(name), relocate(&text, &built, &prefix))?;
            n += 1;
        }
    }
    Ok(n)
}

/// An uninstalled .pc file's text for the installed layout.
fn relocate(pc: &str, built: &Path, prefix: &Path) -> String {
    pc.lines()
        .map(|l| {
            if l.starts_with("prefix=") {
                format!("prefix={}", prefix.display())
            } else if l == "libdir=${prefix}" {
                "libdir=${prefix}/lib".to_string()
            } else if l.starts_with('#') {
                "# Installed by `cargo xtask install`.".to_string()
            } else {
                l.replace(
                    &built.display().to_string(),
                    &prefix.join("lib").display().to_string(),
                )
            }
        })
        .map(|l| l + "\n")
        .collect()
}

/// Copy `from` to `to` (following links, keeping the mode) if it exists.
fn copy_if_built(from: &Path, to: &Path) -> io::Result<usize> {
    if !from.exists() {
        return Ok(0);
    }
    let _ = fs::remove_file(to);
    fs::copy(from, to)?;
    Ok(1)
}
