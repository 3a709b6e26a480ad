//! rivetrun end to end: unmodified MPICH programs, the rivet-pmi client
//! under rivetrun, Hydra and as a singleton, and every failure path the
//! launcher must handle without hanging or leaking processes.

use std::process::Command;
use std::time::Duration;

use rivet_tests::{
    bin, mpi_check_passed, mpicc, ranks_on_one_cpu, rivetrun, run_job, run_job_with, serial,
};

const DEADLINE: Duration = Duration::from_secs(60);

fn rivetrun_with(args: &[&str], program: &std::path::Path, prog_args: &[&str]) -> Command {
    let mut cmd = rivetrun(args);
    cmd.arg(program).args(prog_args);
    cmd
}

#[test]
fn mpich_program_runs_on_1_2_and_4_ranks() {
    let _serial = serial();
    let prog = mpicc("mpi_check.c");
    for n in [1, 2, 4] {
        let o = run_job(rivetrun_with(&["-n", &n.to_string()], &prog, &[]), DEADLINE);
        mpi_check_passed(&o, n);
    }
}

#[test]
fn mpich_program_runs_with_pmi_port() {
    let _serial = serial();
    let prog = mpicc("mpi_check.c");
    let o = run_job(
        rivetrun_with(&["-n", "2", "--pmi-port"], &prog, &[]),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert!(o.stdout.contains("mpi_check OK size=2"), "{}", o.show());
}

#[test]
fn label_prefixes_every_line_with_its_rank() {
    let _serial = serial();
    let prog = mpicc("mpi_check.c");
    let o = run_job(rivetrun_with(&["-n", "2", "-l"], &prog, &[]), DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(lines.len() >= 3, "{}", o.show());
    for line in lines {
        let rest = line
            .strip_prefix("[0] ")
            .or_else(|| line.strip_prefix("[1] "));
        let rest = rest.unwrap_or_else(|| panic!("unlabelled line {line:?}\n{}", o.show()));
        if let Some(tail) = rest.strip_prefix("hello from rank ") {
            assert!(
                line.starts_with(&format!("[{}] ", &tail[..1])),
                "label of {line:?} is not its rank"
            );
        }
    }
}

/// ARCHITECTURE.md: output is forwarded in whole lines, no line from two
/// ranks interleaves. Four ranks write 300 lines each at once, lines of
/// 1-9 KiB (past a pipe's atomic 4 KiB write, in several writes each),
/// every third one to stderr too: every line arrives whole, labelled with
/// the rank that wrote it, each rank's stdout lines in order.
#[test]
fn concurrent_ranks_lines_arrive_whole() {
    let _serial = serial();
    // printf of a line in three writes: head, a long body, the rank again.
    let script = "i=0; while [ $i -lt 300 ]; do n=$(( (i % 9 + 1) * 1024 )); \
                  body=$(head -c $n /dev/zero | tr '\\0' \"$PMI_RANK\"); \
                  printf 'r%s l%s ' $PMI_RANK $i; printf '%s' \"$body\"; \
                  printf ' r%s\\n' $PMI_RANK; \
                  if [ $((i % 3)) = 0 ]; then printf 'e%s l%s %s\\n' $PMI_RANK $i \"$body\" >&2; fi; \
                  i=$((i+1)); done";
    let o = run_job(
        rivetrun_with(
            &["-n", "4", "-l"],
            std::path::Path::new("sh"),
            &["-c", script],
        ),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let mut next = [0u32; 4];
    for line in o.stdout.lines() {
        let (label, rest) = line.split_at(4.min(line.len()));
        let rank: usize = label
            .strip_prefix('[')
            .and_then(|l| l.strip_suffix("] "))
            .and_then(|r| r.parse().ok())
            .filter(|&r| r < 4)
            .unwrap_or_else(|| panic!("unlabelled line {:.80}", line));
        let f: Vec<&str> = rest.split(' ').collect();
        let i = next[rank];
        let want_len = ((i % 9 + 1) * 1024) as usize;
        let ok = f.len() == 4
            && f[0] == format!("r{rank}")
            && f[1] == format!("l{i}")
            && f[2].len() == want_len
            && f[2].bytes().all(|b| b == b'0' + rank as u8)
            && f[3] == format!("r{rank}");
        assert!(ok, "rank {rank} line {i} is not whole: {:.200}", line);
        next[rank] += 1;
    }
    assert_eq!(next, [300; 4], "every line of every rank arrived");
    // stderr too: "[R] eR lI <body>" for every third line.
    let rank_line = |l: &&str| l.starts_with('[') && l.as_bytes().get(2..5) == Some(b"] e");
    let errs: Vec<&str> = o.stderr.lines().filter(rank_line).collect();
    assert_eq!(errs.len(), 4 * 100, "stderr lines");
    for line in errs {
        let rank = &line[1..2];
        let f: Vec<&str> = line[4..].split(' ').collect();
        assert!(
            f.len() == 3
                && f[0] == format!("e{rank}")
                && f[2].bytes().all(|b| b == rank.as_bytes()[0]),
            "stderr line not whole: {:.200}",
            line
        );
    }
}

#[test]
fn mpi_abort_tears_the_job_down_with_the_abort_code() {
    let _serial = serial();
    let prog = mpicc("mpi_check.c");
    let o = run_job(
        rivetrun_with(&["-n", "3"], &prog, &["abort", "1", "13"]),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(13), "{}", o.show());
    assert!(o.stderr.contains("rank 1 called abort"), "{}", o.show());
}

#[test]
fn pmi_client_passes_under_rivetrun_with_fd_and_port() {
    let _serial = serial();
    for extra in [&[][..], &["--pmi-port"][..]] {
        let mut args = vec!["-n", "4"];
        args.extend_from_slice(extra);
        let o = run_job(rivetrun_with(&args, &bin("pmi_check"), &[]), DEADLINE);
        assert_eq!(o.code(), Some(0), "{extra:?}: {}", o.show());
        for rank in 0..4 {
            assert!(
                o.stdout.contains(&format!("pmi_check OK rank {rank}\n")),
                "{extra:?}: {}",
                o.show()
            );
        }
    }
}

#[test]
fn pmi_client_passes_under_mpich_hydra() {
    let _serial = serial();
    let mut cmd = Command::new("mpiexec.hydra");
    cmd.args(["-n", "4"]).arg(bin("pmi_check"));
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for rank in 0..4 {
        assert!(
            o.stdout.contains(&format!("pmi_check OK rank {rank}\n")),
            "{}",
            o.show()
        );
    }
}

#[test]
fn pmi_client_passes_as_a_singleton() {
    let _serial = serial();
    let mut cmd = Command::new(bin("pmi_check"));
    for var in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
        cmd.env_remove(var);
    }
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert!(o.stdout.contains("pmi_check rank 0 of 1 "), "{}", o.show());
    assert!(o.stdout.contains("pmi_check OK rank 0\n"), "{}", o.show());
}

/// Requests the launcher must refuse without harm: the rank gets an error
/// answer and every rank still finishes.
#[test]
fn refused_pmi_requests_do_not_stop_the_job() {
    let _serial = serial();
    // (ranks, pmi_check mode, what stdout must say)
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("3", &["garbage", "1"], &["rank 1: bad line answered: cmd="]),
        (
            "2",
            &["spawn"],
            &["spawn refused:", "rivet-no-such-program': not found"],
        ),
    ];
    for (ranks, mode, messages) in cases {
        let o = run_job(
            rivetrun_with(&["-n", ranks], &bin("pmi_check"), mode),
            DEADLINE,
        );
        assert_eq!(o.code(), Some(0), "{mode:?}: {}", o.show());
        for message in *messages {
            assert!(
                o.stdout.contains(message),
                "{mode:?}: expected {message:?}\n{}",
                o.show()
            );
        }
        let n: usize = ranks.parse().unwrap();
        assert_eq!(
            o.stdout.matches("pmi_check OK rank").count(),
            n,
            "{mode:?}: {}",
            o.show()
        );
    }
}

/// A rank that fails in any way ends the job: the others are terminated,
/// rivetrun names the rank and the cause, and its exit code says which.
#[test]
fn a_failing_rank_ends_the_job_with_its_cause() {
    let _serial = serial();
    // (ranks, pmi_check mode and its arguments, exit code, what stderr must say)
    let cases: &[(&str, &[&str], i32, &[&str])] = &[
        (
            "3",
            &["signal", "2", "9"],
            128 + 9,
            &[
                "rank 2 was killed by signal 9 (SIGKILL)",
                "terminating the other 2 rank(s)",
            ],
        ),
        ("4", &["exit", "1", "3"], 3, &["rank 1 exited with code 3"]),
        (
            "2",
            &["nofinalize", "0"],
            1,
            &["rank 0 exited with code 0 without finalizing PMI"],
        ),
        (
            "2",
            &["abort", "0", "7"],
            7,
            &["rank 0 called abort (exit code 7)"],
        ),
    ];
    for (ranks, mode, code, messages) in cases {
        let o = run_job(
            rivetrun_with(&["-n", ranks], &bin("pmi_check"), mode),
            DEADLINE,
        );
        assert_eq!(o.code(), Some(*code), "{mode:?}: {}", o.show());
        for message in *messages {
            assert!(
                o.stderr.contains(message),
                "{mode:?}: expected {message:?}\n{}",
                o.show()
            );
        }
    }
}

/// `--disable-auto-cleanup`: a failed rank is reported, the others run to
/// their end (each prints after the failure), and the exit code is still
/// the failure's.
#[test]
fn disable_auto_cleanup_lets_the_other_ranks_finish() {
    let _serial = serial();
    let script = "if [ \"$PMI_RANK\" = 1 ]; then exit 3; fi; sleep 1; echo rank $PMI_RANK finished";
    let o = run_job(
        rivetrun_with(
            &["-n", "3", "--disable-auto-cleanup"],
            std::path::Path::new("sh"),
            &["-c", script],
        ),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(3), "{}", o.show());
    rivet_tests::assert_only_failure(&o, "rank 1", "sh");
    assert!(
        o.stderr
            .contains("rank 1 exited with code 3; 2 other rank(s) keep running"),
        "{}",
        o.show()
    );
    for rank in [0, 2] {
        assert!(
            o.stdout.contains(&format!("rank {rank} finished")),
            "{}",
            o.show()
        );
    }
}

#[test]
fn a_missing_program_is_a_clear_error() {
    let _serial = serial();
    let o = run_job(rivetrun(&["-n", "2", "no-such-program-rivet"]), DEADLINE);
    assert_eq!(o.code(), Some(127), "{}", o.show());
    assert!(
        o.stderr
            .contains("cannot execute 'no-such-program-rivet': not found in PATH"),
        "{}",
        o.show()
    );
    let o = run_job(rivetrun(&["-n", "2", "/etc/passwd"]), DEADLINE);
    assert_eq!(o.code(), Some(126), "{}", o.show());
    assert!(o.stderr.contains("is not executable"), "{}", o.show());
}

#[test]
fn a_rank_whose_exec_fails_is_named_with_its_error_and_the_others_are_killed() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("rivet-badexec-{}", std::process::id()));
    let bad = rivet_tests::bad_interpreter(&dir);
    let bad = bad.to_str().unwrap();
    // Ranks 0-1 would sleep; rank 2 cannot exec, rank 3 could again.
    let o = run_job(
        rivetrun(&[
            "-n", "2", "sleep", "30", ":", "-n", "1", bad, ":", "-n", "1", "sleep", "30",
        ]),
        DEADLINE,
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(o.code(), Some(127), "{}", o.show());
    let want = format!("could not start rank 2 ({bad}): No such file or directory");
    assert!(o.stderr.contains(&want), "{}", o.show());
    assert!(!o.stderr.contains("rank 3"), "{}", o.show());
}

#[test]
fn environment_and_working_directory_reach_the_ranks() {
    let _serial = serial();
    let dir = std::env::temp_dir();
    let o = run_job(
        rivetrun(&[
            "-n",
            "2",
            "-genv",
            "RIVET_A",
            "one",
            "-env",
            "RIVET_B",
            "two words",
            "-wdir",
            dir.to_str().unwrap(),
            "sh",
            "-c",
            "echo \"$PMI_RANK/$PMI_SIZE $RIVET_A $RIVET_B $(pwd)\"",
        ]),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let here = dir.canonicalize().unwrap();
    for rank in 0..2 {
        let want = format!("{rank}/2 one two words {}\n", here.display());
        assert!(o.stdout.contains(&want), "missing {want:?}\n{}", o.show());
    }
    // -genvnone passes only what is asked for, plus what PMI and PMIx need
    // (rivetrun's PMIx server's variables: OpenPMIx is installed here) and
    // where an Open MPI rank keeps its segments (the job's directory).
    let o = run_job(
        rivetrun(&[
            "-n",
            "1",
            "-genvnone",
            "-genvlist",
            "HOME",
            "-genv",
            "X",
            "1",
            "/usr/bin/env",
        ]),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let mut names: Vec<&str> = o
        .stdout
        .lines()
        .filter_map(|l| l.split('=').next())
        .collect();
    names.sort_unstable();
    let pmix = |n: &&str| n.starts_with("PMIX_") || *n == "FLUX_JOB_ID";
    for var in [
        "PMIX_NAMESPACE",
        "PMIX_RANK",
        "PMIX_SERVER_URI41",
        "FLUX_JOB_ID",
    ] {
        assert!(names.contains(&var), "{var} missing\n{}", o.show());
    }
    names.retain(|n| !pmix(n));
    assert_eq!(
        names,
        [
            "HOME",
            "MPI_LOCALNRANKS",
            "MPI_LOCALRANKID",
            "OMPI_MCA_btl_vader_backing_directory",
            "PMI_FD",
            "PMI_RANK",
            "PMI_SIZE",
            "RIVET_JOBID",
            "RIVET_JOB_SECRET",
            "X"
        ],
        "{}",
        o.show()
    );
}

#[test]
fn stdin_goes_to_rank_0_only() {
    let _serial = serial();
    let input = tempfile_with("line one\nline two\n");
    let mut cmd = rivetrun(&["-n", "2", "-l", "cat"]);
    cmd.stdin(std::fs::File::open(&input).unwrap());
    let o = run_job_with(&mut cmd, DEADLINE, |_| {});
    let _ = std::fs::remove_file(&input);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert_eq!(o.stdout, "[0] line one\n[0] line two\n", "{}", o.show());
}

#[test]
fn sigterm_to_rivetrun_reaches_the_ranks() {
    let _serial = serial();
    let mut cmd = rivetrun(&["-n", "2", "sh", "-c", "echo started; exec sleep 100"]);
    cmd.stdin(std::process::Stdio::null());
    let o = run_job_with(&mut cmd, DEADLINE, |pid| {
        // Give the ranks time to start; the outcome does not depend on it.
        std::thread::sleep(Duration::from_millis(500));
        // SAFETY: kill(2) takes no pointers.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    });
    assert_eq!(o.code(), Some(128 + 15), "{}", o.show());
    assert!(o.stderr.contains("received SIGTERM"), "{}", o.show());
}

#[test]
fn exit_code_is_zero_only_when_every_rank_succeeds() {
    let _serial = serial();
    let o = run_job(rivetrun(&["-n", "3", "sh", "-c", "exit 0"]), DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let o = run_job(
        rivetrun(&["-n", "3", "sh", "-c", "[ \"$PMI_RANK\" != 2 ] || exit 5"]),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(5), "{}", o.show());
    assert!(
        o.stderr.contains("rank 2 exited with code 5"),
        "{}",
        o.show()
    );
}

#[test]
fn help_and_version_tell_the_truth() {
    let out = Command::new(bin("rivetrun"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for option in [
        "--np",
        "-l",
        "--genv",
        "--genvlist",
        "--env",
        "--wdir",
        "--pmi-port",
        "--version",
    ] {
        assert!(
            help.contains(option),
            "--help does not mention {option}:\n{help}"
        );
    }
    let out = Command::new(bin("rivetrun"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("rivetrun "));
    let out = Command::new(bin("rivetrun"))
        .args(["-n", "0", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

fn tempfile_with(content: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("rivet-stdin-{}", std::process::id()));
    std::fs::write(&path, content).unwrap();
    path
}

/// The harness itself: a process that outlives its job must fail the test.
#[test]
#[should_panic(expected = "outlived it")]
fn the_harness_catches_a_process_that_outlives_its_job() {
    let _serial = serial();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "sleep 30 & exit 0"]);
    run_job(cmd, DEADLINE);
}

/// The spawn and name-server features are documented where users look.
#[test]
fn help_documents_spawn_and_the_name_server() {
    let out = Command::new(bin("rivetrun"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for text in [
        "--name-server",
        "--port <PORT>",
        "--nameserver <HOST:PORT>",
        "RIVET_NAMESERVER",
        "PMI_SPAWNED=1",
        "unbound",
        "-nameserver",
    ] {
        assert!(
            help.contains(text),
            "--help does not mention {text}:\n{help}"
        );
    }
}

/// The timer slack each rank of `rivetrun -n N` on one CPU starts with.
fn timer_slack_under_one_cpu(n: u32) -> Vec<String> {
    ranks_on_one_cpu(&[], n, "slack", "$(cat /proc/self/timerslack_ns)")
}

/// Ranks that outnumber rivetrun's CPUs get a 1 ms timer slack, so that
/// those waiting in short sleeps wake less often; others keep the one
/// rivetrun inherited.
#[test]
fn oversubscribed_ranks_get_a_coarser_timer_slack() {
    let _serial = serial();
    let own = std::fs::read_to_string("/proc/self/timerslack_ns").expect("timerslack_ns");
    assert_eq!(timer_slack_under_one_cpu(1), [own.trim()]);
    assert_eq!(timer_slack_under_one_cpu(2), ["1000000", "1000000"]);
}
