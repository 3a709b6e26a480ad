//! The git commit for `rivetrun --version`.

#[path = "build/git.rs"]
mod git;

fn main() {
    git::emit_commit();
}
