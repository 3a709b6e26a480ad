// Shared by launcher/build.rs and benches/build.rs: the git commit the
// binary is built from, for `--version`, as RIVET_GIT_COMMIT ("4988e0e5a1b2",
// or "unknown" outside a git checkout). Uncommitted changes are not marked:
// cargo reruns this only when HEAD moves, so such a mark would go stale.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

pub fn emit_commit() {
    let value = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=RIVET_GIT_COMMIT={value}");
    // Rebuild when HEAD moves: a checkout (HEAD) or a commit (its branch).
    if let Some(p) = git(&["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={p}");
    }
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &r]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
}
