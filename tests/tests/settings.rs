//! The `RIVET_*` settings table at work: a typo draws one warning naming
//! the closest setting, and `--info --all` lists every setting with the
//! value in force and its source.

use std::time::Duration;

use rivet_tests::{bin, rivetrun, run_job, serial};

const DEADLINE: Duration = Duration::from_secs(60);

#[test]
fn a_misspelt_setting_draws_one_warning_naming_the_right_one() {
    let _g = serial();
    let mut cmd = rivetrun(&["-n", "2"]);
    cmd.arg(bin("rivet-bench"))
        .arg("info")
        .env("RIVET_SHM_EAGERMAX", "1");
    let out = run_job(cmd, DEADLINE);
    assert_eq!(out.code(), Some(0), "{}", out.show());
    let warning = "RIVET_SHM_EAGERMAX is not a Rivet setting and is ignored \
                   (did you mean RIVET_SHM_EAGER_MAX?)";
    // Once per job: rank 0 warns, at init.
    assert_eq!(out.stderr.matches(warning).count(), 1, "{}", out.show());
    // A correct name draws none.
    let mut cmd = rivetrun(&["-n", "2"]);
    cmd.arg(bin("rivet-bench"))
        .arg("info")
        .env("RIVET_SHM_EAGER_MAX", "1K");
    let out = run_job(cmd, DEADLINE);
    assert_eq!(out.code(), Some(0), "{}", out.show());
    assert!(
        !out.stderr.contains("not a Rivet setting"),
        "{}",
        out.show()
    );
}

#[test]
fn info_all_lists_every_setting_with_value_and_source() {
    let _g = serial();
    let mut cmd = rivetrun(&["--info", "--all"]);
    cmd.env("RIVET_YIELD", "always").env("RIVET_YEILD", "never");
    let out = run_job(cmd, DEADLINE);
    assert_eq!(out.code(), Some(0), "{}", out.show());
    for s in rivet_settings::SETTINGS {
        assert!(
            out.stdout.contains(s.name),
            "{} missing:\n{}",
            s.name,
            out.stdout
        );
    }
    assert!(
        out.stdout
            .contains("RIVET_YIELD                    always [environment]; default auto"),
        "{}",
        out.stdout
    );
    assert!(out
        .stdout
        .contains("RIVET_NETMOD                   auto [default]"));
    assert!(out
        .stdout
        .contains("RIVET_YEILD: not a Rivet setting (did you mean RIVET_YIELD?)"));
    // Without --all, no listing; --all alone is refused.
    let out = run_job(rivetrun(&["--info"]), DEADLINE);
    assert!(!out.stdout.contains("RIVET_YIELD"), "{}", out.stdout);
    let out = run_job(rivetrun(&["--all", "true"]), DEADLINE);
    assert_ne!(out.code(), Some(0), "{}", out.show());

    // Inside a job, as rank 0 sees it.
    let mut cmd = rivetrun(&["-n", "1"]);
    cmd.arg(bin("rivet-bench"))
        .args(["info", "--all"])
        .env("RIVET_SHM_LMT", "copy");
    let out = run_job(cmd, DEADLINE);
    assert_eq!(out.code(), Some(0), "{}", out.show());
    assert!(out.stdout.contains("# Rivet engine info"), "{}", out.stdout);
    assert!(
        out.stdout.contains("copy [environment]; default auto"),
        "{}",
        out.stdout
    );
}
