//! rivetrun's mpiexec-compatible command line, end to end: unknown and
//! host options exit 2 (never help and 0), and the job time limit.

use std::time::Duration;

use rivet_tests::{appnums, bin, mpicc, rivetrun, run_job, serial};

const DEADLINE: Duration = Duration::from_secs(60);

#[test]
fn single_dash_words_are_options_never_help() {
    let _serial = serial();
    // Host options are options (here: hosts that do not resolve, a host
    // file that does not exist), never `-h` for help.
    // (Both hosts' proxies start at once: either may be named first.)
    for (args, names, code) in [
        (
            &["-hosts", "a,b", "-n", "2", "true"][..],
            &["host a", "host b"][..],
            None,
        ),
        (
            &["-hostfile", "hf", "-n", "2", "true"][..],
            &["hf"][..],
            None,
        ),
        (&["-host", "a", "true"][..], &["host a"][..], None),
        (&["-f", "hf", "true"][..], &["hf"][..], None),
        (&["-bogus", "true"][..], &["'-bogus'"][..], Some(2)),
        (&["--bogus", "true"][..], &["'--bogus'"][..], Some(2)),
    ] {
        let o = run_job(rivetrun(args), DEADLINE);
        match code {
            Some(code) => assert_eq!(o.code(), Some(code), "{args:?}: {}", o.show()),
            None => assert!(
                !matches!(o.code(), Some(0) | None),
                "{args:?}: {}",
                o.show()
            ),
        }
        assert!(
            names.iter().any(|n| o.stderr.contains(n)),
            "{args:?}: {}",
            o.show()
        );
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

#[test]
fn output_goes_to_files_named_by_hydras_patterns() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("rivet-outfile-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = format!("{}/out.%r.%g", dir.display());
    let err = format!("{}/err.all", dir.display());
    let o = run_job(
        rivetrun(&[
            "-outfile-pattern",
            &out,
            "-errfile-pattern",
            &err,
            "-l",
            "-n",
            "3",
            "sh",
            "-c",
            "echo out$PMI_RANK; echo err$PMI_RANK >&2",
        ]),
        DEADLINE,
    );
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let (out0, out2, errs) = (read("out.0.0"), read("out.2.0"), read("err.all"));
    let bad = run_job(
        rivetrun(&["-outfile-pattern", &format!("{}/%x", dir.display()), "true"]),
        DEADLINE,
    );
    let missing = run_job(
        rivetrun(&[
            "-outfile-pattern",
            &format!("{}/no/such/%r", dir.display()),
            "true",
        ]),
        DEADLINE,
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert!(
        !o.stdout.contains("out") && !o.stderr.contains("err0"),
        "{}",
        o.show()
    );
    assert_eq!(out0, "[0] out0\n");
    assert_eq!(out2, "[2] out2\n");
    let mut lines: Vec<&str> = errs.lines().collect();
    lines.sort();
    assert_eq!(lines, ["[0] err0", "[1] err1", "[2] err2"]);
    assert_eq!(bad.code(), Some(2), "{}", bad.show());
    assert!(bad.stderr.contains("%x"), "{}", bad.show());
    assert_eq!(missing.code(), Some(2), "{}", missing.show());
    assert!(missing.stderr.contains("no/such/0"), "{}", missing.show());
}

#[test]
fn mpmd_sections_and_configfile_number_ranks_on_with_one_appnum_each() {
    let _serial = serial();
    let check = bin("pmi_check").display().to_string();
    // Three programs; the last section's own -env makes it speak PMI-2.
    let o = run_job(
        rivetrun(&[
            "-n",
            "2",
            &check,
            ":",
            "-n",
            "1",
            &check,
            ":",
            "-np",
            "2",
            "-env",
            "RIVET_PMI",
            "pmi2",
            &check,
        ]),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let want: Vec<(u32, i32, String)> = [(0, 0, "pmi1"), (1, 0, "pmi1"), (2, 1, "pmi1")]
        .into_iter()
        .chain([(3, 2, "pmi2"), (4, 2, "pmi2")])
        .map(|(r, a, k)| (r, a, k.to_string()))
        .collect();
    assert_eq!(appnums(&o.stdout), want, "{}", o.show());
    assert_eq!(
        o.stdout.matches("pmi_check OK rank").count(),
        5,
        "{}",
        o.show()
    );
    // The same job from a Hydra config file.
    let cfg = std::env::temp_dir().join(format!("rivet-mpmd-{}.cfg", std::process::id()));
    std::fs::write(
        &cfg,
        format!("# sections\n-n 2 {check}\n\n-n 1 {check} : -n 2 -env RIVET_PMI pmi2 {check}\n"),
    )
    .unwrap();
    let o = run_job(rivetrun(&["-configfile", cfg.to_str().unwrap()]), DEADLINE);
    std::fs::remove_file(&cfg).unwrap();
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert_eq!(appnums(&o.stdout), want, "{}", o.show());
    // A section that cannot run stops everything before anything starts.
    let o = run_job(
        rivetrun(&["-n", "1", &check, ":", "-n", "1", "/nonexistent/prog"]),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(127), "{}", o.show());
    assert!(!o.stdout.contains("pmi_check rank"), "{}", o.show());
    let o = run_job(
        rivetrun(&["-n", "1", &check, ":", "-bogus", &check]),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(2), "{}", o.show());
    assert!(o.stderr.contains("-bogus"), "{}", o.show());
}

#[test]
fn mpich_sees_each_sections_appnum() {
    let _serial = serial();
    let prog = mpicc("mpi_appnum.c").display().to_string();
    let o = run_job(
        rivetrun(&["-n", "1", &prog, ":", "-n", "2", &prog]),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for (rank, app) in [(0, 0), (1, 1), (2, 1)] {
        assert!(
            o.stdout
                .contains(&format!("mpi_appnum rank {rank} appnum {app}\n")),
            "{}",
            o.show()
        );
    }
}
