//! Reading a finished job's output: a passing `mpi_check`, `engine_check`
//! or `dyn_check spawn`, any job that passed printing given lines, the failures rivetrun
//! reported, the appnum of each rank.

use crate::jobs::Outcome;

/// `tests/c/mpi_check.c` (any MPI's build) passed on `n` ranks, all on one
/// node: exit 0, its OK line (ring, allreduce, 4 MiB message checked by
/// the program), and one hello per rank whose node-local rank and size are
/// its world rank and size.
pub fn mpi_check_passed(o: &Outcome, n: u32) {
    mpi_check_passed_on_hosts(o, n, n);
}

/// [`mpi_check_passed`] for `n` ranks placed `per_host` to a host in
/// blocks: each rank's node-local rank is its place in its block.
pub fn mpi_check_passed_on_hosts(o: &Outcome, n: u32, per_host: u32) {
    assert_eq!(o.code(), Some(0), "n={n}: {}", o.show());
    assert!(
        o.stdout.contains(&format!("mpi_check OK size={n}")),
        "n={n}: {}",
        o.show()
    );
    for rank in 0..n {
        let hello = format!("hello from rank {rank} of {n} pid ");
        let local = format!(" node-local {} of {per_host}", rank % per_host);
        assert!(
            o.stdout
                .lines()
                .any(|l| l.starts_with(&hello) && l.ends_with(&local)),
            "n={n} rank {rank}: {}",
            o.show()
        );
    }
}

/// `engine_check MODE` passed on every one of `n` ranks (exit 0, each
/// rank's OK line at thread level single).
pub fn engine_check_passed(o: &Outcome, mode: &str, n: u32) {
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for r in 0..n {
        let line = format!("engine_check {mode} OK rank {r} of {n} at thread level single");
        assert!(o.stdout.contains(&line), "{mode} rank {r}: {}", o.show());
    }
}

/// Every parent and child of a `dyn_check spawn` passed (exit 0, each
/// one's OK line), and every child printed `bootstrap`, the line saying how
/// it bootstrapped (PMI-2, PMIx...).
pub fn dyn_spawn_passed(o: &Outcome, parents: u32, children: u32, bootstrap: &str) {
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for r in 0..parents {
        let line = format!("dyn_check spawn OK rank {r} of {parents} at thread level single");
        assert!(o.stdout.contains(&line), "{line}: {}", o.show());
    }
    for r in 0..children {
        for line in [
            format!("dyn_check child OK rank {r} of {children} at thread level single"),
            format!("dyn_check child {r} {bootstrap}"),
        ] {
            assert!(o.stdout.contains(&line), "{line}: {}", o.show());
        }
    }
}

/// The failures rivetrun reported under `--disable-auto-cleanup` (one line
/// each, the first sets the exit code): a survivor that crashes after its
/// OK line shows up here even though the exit code does not change.
pub fn reported_failures(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| {
            l.starts_with("rivetrun: ") && l.ends_with("keep running (--disable-auto-cleanup)")
        })
        .collect()
}

/// Under `--disable-auto-cleanup`: the only failure rivetrun reported is
/// `who`'s (e.g. "rank 2"): no survivor failed after it.
pub fn assert_only_failure(o: &Outcome, who: &str, case: &str) {
    let failures = reported_failures(&o.stderr);
    assert!(
        failures.len() == 1 && failures[0].starts_with(&format!("rivetrun: {who} ")),
        "{case}: the only failure must be {who}'s, not {failures:?}\n{}",
        o.show()
    );
}

/// `pmi_check rank R of N ... appnum A over KIND` lines of a job's stdout,
/// as (R, A, KIND), sorted by rank.
pub fn appnums(stdout: &str) -> Vec<(u32, i32, String)> {
    let mut seen: Vec<(u32, i32, String)> = stdout
        .lines()
        .filter(|l| l.starts_with("pmi_check rank ") && l.contains(" appnum "))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = |k: &str| w[w.iter().position(|x| *x == k).unwrap() + 1];
            (
                w[2].parse().unwrap(),
                at("appnum").parse().unwrap(),
                at("over").to_string(),
            )
        })
        .collect();
    seen.sort();
    seen
}

/// The job ended with code 0 and printed each of `lines`.
pub fn passed_saying<S: AsRef<str>>(o: &Outcome, lines: impl IntoIterator<Item = S>) {
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for want in lines {
        let want = want.as_ref();
        assert!(o.stdout.contains(want), "{want:?}: {}", o.show());
    }
}
