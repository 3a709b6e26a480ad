//! `--version` tells what was built and what it found; `--clap-generate`
//! (what `cargo xtask man` runs) writes man pages and completions.

use std::process::Command;

use rivet_tests::bin;

fn stdout_of(program: &str, args: &[&str]) -> String {
    let out = Command::new(bin(program)).args(args).output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn version_names_commit_features_and_libraries() {
    for program in ["rivetrun", "rivet-bench"] {
        let v = stdout_of(program, &["--version"]);
        assert!(v.starts_with(&format!("{program} 0.")), "{v}");
        let commit = v
            .lines()
            .find_map(|l| l.strip_prefix("commit:"))
            .unwrap_or_else(|| panic!("no commit line: {v}"))
            .trim();
        assert!(
            commit == "unknown"
                || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())),
            "{commit:?}"
        );
        for label in ["profile:", "features:", "libfabric:", "libpmix:"] {
            assert!(
                v.lines().any(|l| l.starts_with(label)),
                "{label} missing: {v}"
            );
        }
        // -V stays one line.
        assert_eq!(stdout_of(program, &["-V"]).lines().count(), 1);
    }
    let v = stdout_of("rivetrun", &["--version"]);
    assert!(v.lines().any(|l| l.starts_with("hwloc:     API 2.")), "{v}");
}

#[test]
fn man_pages_and_completions_come_from_the_options() {
    let man = stdout_of("rivetrun", &["--clap-generate", "man"]);
    assert!(man.contains(".TH rivetrun 1"), "{man}");
    assert!(man.contains("genvlist"), "options are in the page");
    let man = stdout_of("rivet-bench", &["--clap-generate", "man"]);
    assert!(man.contains("compare"), "subcommands are in the page");
    let bash = stdout_of("rivet-bench", &["--clap-generate", "bash"]);
    assert!(
        bash.contains("complete -F") && bash.contains("latency"),
        "{bash}"
    );
    let zsh = stdout_of("rivetrun", &["--clap-generate", "zsh"]);
    assert!(zsh.contains("#compdef rivetrun"));
    let out = Command::new(bin("rivetrun"))
        .args(["--clap-generate", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
