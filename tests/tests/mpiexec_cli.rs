//! rivetrun's mpiexec-compatible command line, end to end: unknown and
//! host options exit 2 (never help and 0), and the job time limit.

use std::time::Duration;

use rivet_tests::{rivetrun, run_job, serial};

const DEADLINE: Duration = Duration::from_secs(60);

#[test]
fn single_dash_words_are_options_never_help() {
    let _serial = serial();
    for (args, names) in [
        (&["-hosts", "a,b", "-n", "2", "true"][..], "-hosts"),
        (&["-hostfile", "hf", "-n", "2", "true"][..], "-hostfile"),
        (&["-host", "a", "true"][..], "-host"),
        (&["-f", "hf", "true"][..], "-f"),
        (&["-bogus", "true"][..], "'-bogus'"),
        (&["--bogus", "true"][..], "'--bogus'"),
    ] {
        let o = run_job(rivetrun(args), DEADLINE);
        assert_eq!(o.code(), Some(2), "{args:?}: {}", o.show());
        assert!(o.stderr.contains(names), "{args:?}: {}", o.show());
        assert!(
            !o.stdout.contains("Usage"),
            "{args:?} printed help: {}",
            o.show()
        );
    }
    // Hydra spellings that are rivetrun's options.
    let o = run_job(
        rivetrun(&["-prepend-rank", "-genvall", "-n", "2", "echo", "hi"]),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert!(
        o.stdout.contains("[0] hi") && o.stdout.contains("[1] hi"),
        "{}",
        o.show()
    );
}

#[test]
fn a_job_past_its_time_limit_is_torn_down_with_255() {
    let _serial = serial();
    let sleeper = |cmd: &mut std::process::Command| {
        cmd.args(["-n", "2", "--kill-grace", "1", "sleep", "30"]);
    };
    let mut cmd = rivetrun(&["--timeout", "1"]);
    sleeper(&mut cmd);
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(255), "{}", o.show());
    assert!(o.stderr.contains("the job timed out"), "{}", o.show());
    // Hydra's variable, also with -disable-auto-cleanup.
    let mut cmd = rivetrun(&["-disable-auto-cleanup"]);
    cmd.env("MPIEXEC_TIMEOUT", "1");
    sleeper(&mut cmd);
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(255), "{}", o.show());
    // --timeout wins; 0 is no limit; a job that ends in time is not touched.
    let mut cmd = rivetrun(&["-timeout", "0", "-n", "2", "true"]);
    cmd.env("MPIEXEC_TIMEOUT", "1");
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let mut cmd = rivetrun(&["-n", "1", "true"]);
    cmd.env("MPIEXEC_TIMEOUT", "soon");
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(2), "{}", o.show());
    assert!(o.stderr.contains("MPIEXEC_TIMEOUT"), "{}", o.show());
}
