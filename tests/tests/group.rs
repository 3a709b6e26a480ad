//! Group connect end to end (`group_check` ranks under rivetrun, seed 004):
//! a group across two process groups (a job and the children it spawned)
//! with connect ids, new ranks, `xchg_only` and events; `optional` with a
//! participant that died; a member ending without disconnecting, allowed
//! (`early_term_allowed`) and not. Each runs over shared memory inside a job
//! (tcp between process groups), and with a netmod forced everywhere:
//! `RIVET_NETMOD=tcp`, and `RIVET_NETMOD=ofi` on the `tcp;ofi_rxm` and
//! `shm` providers; each at thread level SINGLE (no `RIVET_THREAD_LEVEL`:
//! the ranks' `Engine<Local>` runs without a lock) and at MULTIPLE
//! (`RIVET_THREAD_LEVEL=multiple`), the ranks checking that they run at the
//! level asked for (`rivet_tests::every_transport_and_level`). Two
//! separately started jobs form groups through the name server, over PMI-1
//! and with ranks bootstrapped by PMIx. Under Hydra the call is refused
//! before Hydra sees it.
//! Every job must end by itself and leave no process and no shared-memory
//! segment behind.

use std::process::Command;
use std::time::Duration;

use rivet::ThreadLevel;
use rivet_tests::{
    bin, every_transport_and_level, job_over, level_env, oks_at, run_job, run_job_checking_shm,
    serial, NameServer, Outcome, ShmWatch, LEVELS,
};

const DEADLINE: Duration = Duration::from_secs(120);

fn group_job(n: u32, args: &[&str], env: &[(&str, &str)], extra: &[&str]) -> Command {
    job_over("group_check", n, args, env, extra)
}

/// Ranks that passed `mode` at thread level `level`.
fn oks(o: &Outcome, mode: &str, level: ThreadLevel) -> usize {
    oks_at(&o.stdout, "group_check", mode, level)
}

#[test]
fn a_group_across_a_job_and_its_children() {
    let _g = serial();
    for over in every_transport_and_level() {
        let (name, env, level) = (over.to_string(), &over.env, over.level);
        let o = run_job_checking_shm(group_job(2, &["parents", "2"], env, &[]), DEADLINE);
        assert_eq!(o.code(), Some(0), "{name}: {}", o.show());
        assert_eq!(
            oks(&o, "parents", level) + oks(&o, "child", level),
            4,
            "{name}: 2 parents and 2 children must pass at thread level {level}\n{}",
            o.show()
        );
    }
}

#[test]
fn optional_goes_on_without_a_dead_participant() {
    let _g = serial();
    for over in every_transport_and_level() {
        let (name, env, level) = (over.to_string(), &over.env, over.level);
        let job = group_job(3, &["optional"], env, &["--disable-auto-cleanup"]);
        let o = run_job_checking_shm(job, DEADLINE);
        // Rank 2 aborted: rivetrun reports it, the others finished.
        assert_eq!(o.code(), Some(128 + libc::SIGABRT), "{name}: {}", o.show());
        assert_eq!(oks(&o, "optional", level), 2, "{name}: {}", o.show());
        rivet_tests::assert_only_failure(&o, "rank 2", &name);
        assert_eq!(
            o.stdout.matches("refused").count(),
            2,
            "{name}: the strict connect must fail on both survivors\n{}",
            o.show()
        );
    }
}

#[test]
fn a_member_that_ends_without_disconnecting() {
    let _g = serial();
    for over in every_transport_and_level() {
        let (name, env, level) = (over.to_string(), &over.env, over.level);
        let o = run_job_checking_shm(group_job(3, &["term", "early"], env, &[]), DEADLINE);
        assert_eq!(o.code(), Some(0), "{name}, early_term: {}", o.show());
        assert_eq!(
            oks(&o, "term", level),
            3,
            "{name}, early_term: {}",
            o.show()
        );

        let o = run_job_checking_shm(group_job(3, &["term"], env, &[]), DEADLINE);
        assert_ne!(o.code(), Some(0), "{name}, no early_term: {}", o.show());
        assert!(
            o.stderr.contains("early_term_allowed"),
            "{name}, no early_term: rivetrun must say why\n{}",
            o.show()
        );
    }
}

/// Ask the name server at `addr` to look `service` up (one connection).
fn published(addr: &str, service: &str) -> bool {
    use std::io::{BufRead, BufReader, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.write_all(format!("cmd=lookup_name service={service}\n").as_bytes());
    let mut line = String::new();
    let _ = BufReader::new(s).read_line(&mut line);
    line.starts_with("cmd=lookup_result rc=0 ")
}

#[test]
fn two_separately_started_jobs_form_groups_through_the_name_server() {
    let _g = serial();
    for over in every_transport_and_level() {
        let label = format!("{}-{}", over.transport, over.level);
        two_jobs(&over.to_string(), &label, &over.env, &over.env, over.level);
    }
}

/// The same with ranks bootstrapped by PMIx (`RIVET_PMI=pmix`): their
/// connects name another job, so they go over rivetrun's PMI-1 group
/// service beside PMIx (`pmi/src/client/pmix_side.rs`); both jobs PMIx,
/// then a PMIx job with a PMI-1 one.
#[test]
fn two_separately_started_jobs_form_groups_through_the_name_server_over_pmix() {
    let _g = serial();
    let pmix = [("RIVET_PMI", "pmix")];
    let level = ThreadLevel::Single;
    two_jobs("pmix and pmix", "pmix-pmix", &pmix, &pmix, level);
    two_jobs("pmix and pmi1", "pmix-pmi1", &pmix, &[], level);
}

/// Jobs a (2 ranks, environment `env_a`) and b (3 ranks, `env_b`, cluster
/// id `clB`), started separately with one name server, form groups.
fn two_jobs(
    name: &str,
    label: &str,
    env_a: &[(&str, &str)],
    env_b: &[(&str, &str)],
    level: ThreadLevel,
) {
    let ns = NameServer::start();
    // Plain characters only: `published` writes it unescaped.
    let service: String = format!("group-jobs-{label}-{}", std::process::id())
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let with = ["--nameserver", ns.addr.as_str()];
    let a = group_job(2, &["jobs", "a", &service], env_a, &with);
    let b_extra = [with[0], with[1], "--cluster-id", "clB"];
    let b = group_job(3, &["jobs", "b", &service], env_b, &b_extra);
    let shm = ShmWatch::new();
    let a = std::thread::spawn(move || run_job(a, DEADLINE));
    // Job a registers with the hub before its ranks start; once its
    // name is published, b comes second in every group.
    let start = std::time::Instant::now();
    while !published(&ns.addr, &format!("{service}-a")) {
        if a.is_finished() {
            let oa = a.join().expect("job a's thread");
            panic!("{name}: job a ended before publishing: {}", oa.show());
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{name}: job a never published its name"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let ob = run_job(b, DEADLINE);
    let oa = a.join().expect("job a's thread");
    let leaked = shm.leaked();
    assert!(leaked.is_empty(), "{name}: segments left: {leaked:?}");
    assert_eq!(oa.code(), Some(0), "{name}: job a: {}", oa.show());
    assert_eq!(ob.code(), Some(0), "{name}: job b: {}", ob.show());
    assert_eq!(oks(&oa, "jobs", level), 2, "{name}: job a: {}", oa.show());
    assert_eq!(oks(&ob, "jobs", level), 3, "{name}: job b: {}", ob.show());
    let status = ns.stop();
    assert!(status.success(), "name server ended with {status:?}");
}

#[test]
fn hydra_is_not_asked() {
    let _g = serial();
    for level in LEVELS {
        let mut cmd = Command::new("mpiexec.hydra");
        cmd.args(["-n", "2"])
            .arg(bin("group_check"))
            .arg("unserved");
        cmd.env_remove("RIVET_NETMOD")
            .env_remove("RIVET_THREAD_LEVEL")
            .env("RIVET_YIELD", "always")
            .envs(level_env(level));
        let o = run_job_checking_shm(cmd, DEADLINE);
        assert_eq!(o.code(), Some(0), "thread level {level}: {}", o.show());
        assert_eq!(
            oks(&o, "unserved", level),
            2,
            "thread level {level}: {}",
            o.show()
        );
    }
}
