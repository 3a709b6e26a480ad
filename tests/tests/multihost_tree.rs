//! The proxy tree when a proxy ends early: its host's ranks all finished,
//! while ranks elsewhere still enter a barrier, which needs every rank of
//! the job. That barrier cannot complete, whether the proxy that ended is
//! above the waiting ranks in the tree, below them, or beside them (a flat
//! tree, rivetrun its parent); the job must fail at once, naming the host
//! whose proxy ended, and leave nothing behind. Skipped, saying why, where
//! namespaces cannot be made (not root).

use std::time::Duration;

use rivet_tests::netns::Cluster;
use rivet_tests::{bin, run_job, serial, Outcome};

#[test]
fn a_barrier_below_a_proxy_that_ended_fails_the_job_naming_its_host() {
    let _serial = serial();
    let c = match Cluster::new(2) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipping: cannot create network namespace hosts here: {why}");
            return;
        }
    };
    // Fan-out 1: h2's proxy is h1's child. Rank 0 (h1) finalizes and
    // exits at once, so h1's proxy ends; rank 1 (h2) then enters a barrier.
    let mut cmd = c.rivetrun(1, 2);
    cmd.env("RIVET_PROXY_FANOUT", "1")
        .arg(bin("pmi_check"))
        .args(["early", "0"]);
    let o = run_job(cmd, Duration::from_secs(60));
    assert_ne!(o.code(), Some(0), "{}", o.show());
    assert!(
        o.stderr.contains(
            "host h1: its proxy ended (its ranks had all exited) while ranks on h2 below it"
        ),
        "{}",
        o.show()
    );
    // (Rank 1's barrier failed rather than hung; rivetrun's teardown may
    // end it before it says so.)
    // About 2 s of waiting in rank 1, not a timeout.
    assert!(o.elapsed < Duration::from_secs(30), "{}", o.show());
    for i in 0..2 {
        assert!(c.pids(i).is_empty(), "left on h{}: {:?}", i + 1, c.pids(i));
    }
}

/// Two hosts, one rank each: rank `early` finalizes and exits at once, the
/// other enters a barrier 2 s later; with `fanout` (1: h2's proxy is h1's
/// child; 8: both are rivetrun's).
fn early_exit(c: &Cluster, fanout: &str, early: &str) -> Outcome {
    let mut cmd = c.rivetrun(1, 2);
    cmd.env("RIVET_PROXY_FANOUT", fanout)
        .arg(bin("pmi_check"))
        .args(["early", early]);
    let o = run_job(cmd, Duration::from_secs(60));
    for i in 0..2 {
        assert!(c.pids(i).is_empty(), "left on h{}: {:?}", i + 1, c.pids(i));
    }
    o
}

#[test]
fn a_barrier_without_the_ranks_of_a_proxy_that_ended_fails_the_job_naming_its_host() {
    let _serial = serial();
    let c = match Cluster::new(2) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipping: cannot create network namespace hosts here: {why}");
            return;
        }
    };
    // (fan-out, the rank that ends early, the host that ends, the waiting host)
    for (fanout, early, ended, waiting) in [
        ("8", "0", "h1", "h2"),
        ("8", "1", "h2", "h1"),
        ("1", "1", "h2", "h1"),
    ] {
        let o = early_exit(&c, fanout, early);
        let case = format!("fan-out {fanout}, rank {early} ends early");
        assert_ne!(o.code(), Some(0), "{case}: {}", o.show());
        // The barrier did not complete without the rank that had ended (it
        // failed, or the teardown ended the waiting rank first).
        let completed = format!("barrier after rank {early} ended: Ok");
        assert!(!o.stderr.contains(&completed), "{case}: {}", o.show());
        let want = format!(
            "host {ended}: its proxy ended (its ranks had all exited) while ranks on {waiting} \
             entered a barrier, which cannot complete without them"
        );
        assert!(o.stderr.contains(&want), "{case}: {}", o.show());
    }
}
