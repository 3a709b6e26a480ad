//! The proxy tree when a proxy with children ends early: its host's ranks
//! all finished, while ranks below it in the tree still enter a barrier.
//! That barrier cannot complete; the job must fail at once, naming the
//! host whose proxy ended, and leave nothing behind. Skipped, saying why,
//! where namespaces cannot be made (not root).

use std::time::Duration;

use rivet_tests::netns::Cluster;
use rivet_tests::{bin, run_job, serial};

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
