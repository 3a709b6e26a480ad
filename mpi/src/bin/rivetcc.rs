//! `rivetcc`: compile and link C programs against librivetmpi, used like
//! `mpicc`: `rivetcc -o prog prog.c` runs the C compiler with mpi.h's
//! directory, and (unless only compiling: `-c`, `-E`, `-S`, `-M`, `-MM`)
//! `-L`, an rpath, `-lrivetmpi -lrivet`. `-show` prints the command
//! instead of running it. The compiler is `$RIVETCC_CC`, else `$CC`,
//! else `cc` (a C++ compiler works too: mpi.h is C++-clean).
//!
//! Where the files are: beside this executable in a cargo profile
//! directory (`target/<profile>/{librivetmpi.so,include/mpi.h}`), or, once
//! installed (`cargo xtask install`), in the prefix's `lib/` and
//! `include/` next to its `bin/`.

use std::env;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// (include directory, library directory) for this rivetcc.
fn layout(exe: &Path) -> Option<(PathBuf, PathBuf)> {
    let dir = exe.parent()?;
    if dir.join("librivetmpi.so").exists() {
        return Some((dir.join("include"), dir.to_path_buf()));
    }
    let prefix = dir.parent()?;
    let lib = prefix.join("lib");
    lib.join("librivetmpi.so")
        .exists()
        .then(|| (prefix.join("include"), lib))
}

/// Does this command line only compile (no link step)?
fn compile_only(args: &[String]) -> bool {
    args.iter()
        .any(|a| matches!(a.as_str(), "-c" | "-E" | "-S" | "-M" | "-MM"))
}

/// The compiler's arguments for `args` (rivetcc's own, minus `-show`).
fn command_line(include: &Path, lib: &Path, args: &[String]) -> Vec<String> {
    let mut line = vec![format!("-I{}", include.display())];
    line.extend(args.iter().cloned());
    if !compile_only(args) {
        line.push(format!("-L{}", lib.display()));
        line.push(format!("-Wl,-rpath,{}", lib.display()));
        line.push("-lrivetmpi".into());
        line.push("-lrivet".into());
    }
    line
}

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let exe = env::current_exe().and_then(|e| e.canonicalize());
    let Some((include, lib)) = exe.as_deref().ok().and_then(layout) else {
        eprintln!(
            "rivetcc: librivetmpi.so not found beside {} or in its ../lib: build it \
             (cargo build -p rivet-mpi) or install it (cargo xtask install)",
            exe.map_or_else(|e| e.to_string(), |p| p.display().to_string())
        );
        return ExitCode::from(2);
    };
    if args.is_empty() {
        eprintln!("usage: rivetcc [-show] [compiler arguments...]   (like mpicc)");
        return ExitCode::from(2);
    }
    let show = args.iter().any(|a| a == "-show");
    let args: Vec<String> = args.into_iter().filter(|a| a != "-show").collect();
    let compiler = env::var("RIVETCC_CC")
        .or_else(|_| env::var("CC"))
        .unwrap_or_else(|_| "cc".into());
    let line = command_line(&include, &lib, &args);
    if show {
        println!("{compiler} {}", line.join(" "));
        return ExitCode::SUCCESS;
    }
    let err = Command::new(&compiler).args(&line).exec();
    eprintln!("rivetcc: cannot run {compiler}: {err}");
    ExitCode::from(127)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn links_only_when_linking() {
        let (i, l) = (Path::new("/p/include"), Path::new("/p/lib"));
        let link = command_line(i, l, &strings(&["-o", "x", "x.c"]));
        assert_eq!(
            link,
            strings(&[
                "-I/p/include",
                "-o",
                "x",
                "x.c",
                "-L/p/lib",
                "-Wl,-rpath,/p/lib",
                "-lrivetmpi",
                "-lrivet"
            ])
        );
        let compile = command_line(i, l, &strings(&["-c", "x.c"]));
        assert_eq!(compile, strings(&["-I/p/include", "-c", "x.c"]));
    }
}
