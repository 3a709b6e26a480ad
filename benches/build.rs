//! The git commit for `rivet-bench --version`.

#[path = "../launcher/build/git.rs"]
mod git;

fn main() {
    git::emit_commit();
}
