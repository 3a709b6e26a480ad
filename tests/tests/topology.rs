//! Placement end to end: what rivetrun reports, what it publishes through
//! PMI, what the kernel says each rank is bound to, and what MPICH makes of
//! the node map. Expected placements are written out, not computed.

use std::collections::BTreeMap;
use std::time::Duration;

use rivet_tests::{bin, mpicc, rivetrun, run_job, serial, Outcome};

const DEADLINE: Duration = Duration::from_secs(60);
const SYNTH: &str = "pack:2 numa:2 core:8 pu:2";

/// `topo rank R k1 v1 k2 v2 ...` lines from `pmi_check topology`, by rank.
fn topo_lines(o: &Outcome) -> BTreeMap<u32, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for line in o.stdout.lines().filter(|l| l.starts_with("topo rank ")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let rank: u32 = words[2].parse().unwrap();
        let fields = words[3..]
            .chunks(2)
            .map(|kv| (kv[0].to_string(), kv[1].to_string()))
            .collect();
        out.insert(rank, fields);
    }
    out
}

/// The CPUs this test process may use, as the kernel lists them.
fn own_cpus() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list:"))
        .unwrap();
    line.split_whitespace().nth(1).unwrap().to_string()
}

#[test]
fn bound_ranks_run_where_the_launcher_says() {
    let _serial = serial();
    let mut cmd = rivetrun(&["-n", "2", "--bind-to", "core", "--report-bindings"]);
    cmd.arg(bin("pmi_check")).arg("topology");
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let topo = topo_lines(&o);
    assert_eq!(topo.len(), 2, "{}", o.show());
    let mut seen = Vec::new();
    for (rank, f) in &topo {
        // rivetrun's report line for this rank: "rank R on HOST (...): core C, cpus X".
        let report = o
            .stderr
            .lines()
            .find(|l| l.starts_with(&format!("rank {rank} on ")))
            .unwrap_or_else(|| panic!("no report line for rank {rank}\n{}", o.show()));
        let reported = report.rsplit("cpus ").next().unwrap();
        assert_eq!(
            &f["affinity"],
            reported,
            "kernel affinity vs report, rank {rank}\n{}",
            o.show()
        );
        assert_eq!(
            &f["cpuset"],
            reported,
            "published cpuset vs report, rank {rank}\n{}",
            o.show()
        );
        assert_eq!(f["bound"], format!("core_{rank}"), "{}", o.show());
        assert_eq!(f["local"], format!("{rank}/2"));
        assert_eq!(f["xml"], "readable");
        seen.push(f["affinity"].clone());
    }
    assert_ne!(
        seen[0],
        seen[1],
        "two ranks bound to the same CPUs\n{}",
        o.show()
    );
}

/// `cmd` runs with its CPU affinity narrowed to `cpu` alone (as `taskset -c CPU` would).
fn pinned_to(cmd: &mut std::process::Command, cpu: usize) {
    use std::os::unix::process::CommandExt;
    // SAFETY: zeroed is the empty cpu_set_t; CPU_SET below CPU_SETSIZE (checked by the
    // caller's CPU number coming from this machine's list); sched_setaffinity is
    // async-signal-safe, fine between fork and exec.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[test]
fn ranks_are_bound_inside_rivetruns_affinity_mask() {
    let _serial = serial();
    // The last CPU this test may use: not core 0's, where a mask-blind launcher binds.
    let cpus = rivet_pmi::topology::parse_cpu_list(&own_cpus()).unwrap();
    let cpu = *cpus.last().unwrap();
    if cpu == 0 {
        eprintln!("skipped: this test may use CPU 0 only");
        return;
    }
    let mut cmd = rivetrun(&["-n", "1", "--report-bindings"]);
    cmd.arg(bin("pmi_check")).arg("topology");
    pinned_to(&mut cmd, cpu as usize);
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let f = &topo_lines(&o)[&0];
    assert_eq!(f["affinity"], cpu.to_string(), "{}", o.show());
    assert_eq!(f["cpuset"], cpu.to_string(), "{}", o.show());
    assert!(
        o.stderr
            .lines()
            .any(|l| l.starts_with("rank 0 on ") && l.ends_with(&format!(", cpus {cpu}"))),
        "{}",
        o.show()
    );
    // Two ranks on a one-CPU mask: not bound (they keep the mask), and told so.
    let mut cmd = rivetrun(&["-n", "2", "--report-bindings"]);
    cmd.arg(bin("pmi_check")).arg("topology");
    pinned_to(&mut cmd, cpu as usize);
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert!(o.stderr.contains("ranks on 1 core"), "{}", o.show());
    for (rank, f) in topo_lines(&o) {
        assert_eq!(f["affinity"], cpu.to_string(), "rank {rank}\n{}", o.show());
    }
    // --info names the mask; --cpu-list outside it is refused before any rank starts.
    let mut cmd = rivetrun(&["--info"]);
    pinned_to(&mut cmd, cpu as usize);
    let o = run_job(cmd, DEADLINE);
    assert!(
        o.stdout.contains(&format!(
            "ranks go only on CPUs {cpu} of {}: rivetrun's affinity mask",
            own_cpus()
        )),
        "{}",
        o.show()
    );
    let mut cmd = rivetrun(&["-n", "1", "--cpu-list", "0"]);
    cmd.arg(bin("pmi_check")).arg("topology");
    pinned_to(&mut cmd, cpu as usize);
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(2), "{}", o.show());
    assert!(
        o.stderr.contains("rivetrun's affinity mask"),
        "{}",
        o.show()
    );
    assert!(o.stdout.is_empty(), "a rank ran\n{}", o.show());
}

#[test]
fn oversubscribed_ranks_are_not_bound_and_the_user_is_told() {
    let _serial = serial();
    let mut cmd = rivetrun(&["-n", "3", "--report-bindings"]);
    cmd.arg(bin("pmi_check")).arg("topology");
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert!(
        o.stderr
            .contains("note: oversubscribed: 3 ranks on 2 cores, binding off"),
        "{}",
        o.show()
    );
    for (rank, f) in topo_lines(&o) {
        assert_eq!(f["cpuset"], "none", "rank {rank}\n{}", o.show());
        assert!(
            o.stderr.contains(&format!("rank {rank} on ")),
            "{}",
            o.show()
        );
    }
    assert_eq!(o.stderr.matches(": not bound").count(), 3, "{}", o.show());
}

#[test]
fn a_simulated_placement_is_published_to_the_ranks() {
    let _serial = serial();
    let mut cmd = rivetrun(&["-n", "4", "--topology", SYNTH, "--map-by", "socket"]);
    cmd.arg(bin("pmi_check")).arg("topology");
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert!(
        o.stderr.contains("binding is simulated, nothing is bound"),
        "{}",
        o.show()
    );
    let topo = topo_lines(&o);
    // map-by socket alternates packages; each rank gets the next core of its package.
    let want = [
        ("0-1", "core_0", "node.0.0,package.0.0,numa.0.0,core.0.0"),
        (
            "32-33",
            "core_16",
            "node.0.1,package.1.0,numa.2.0,core.16.0",
        ),
        ("2-3", "core_1", "node.0.2,package.0.1,numa.0.1,core.1.0"),
        (
            "34-35",
            "core_17",
            "node.0.3,package.1.1,numa.2.1,core.17.0",
        ),
    ];
    for (rank, (cpuset, bound, cluster)) in want.iter().enumerate() {
        let f = &topo[&(rank as u32)];
        assert_eq!(&f["cpuset"], cpuset, "rank {rank}\n{}", o.show());
        assert_eq!(&f["bound"], bound, "rank {rank}\n{}", o.show());
        assert_eq!(&f["cluster"], cluster, "rank {rank}\n{}", o.show());
        assert_eq!(f["type"], "cluster");
        // Nothing is bound: every rank may run wherever this test may.
        assert_eq!(f["affinity"], own_cpus(), "rank {rank}\n{}", o.show());
    }
}

#[test]
fn simulated_nodes_and_mesh_dims_reach_the_ranks() {
    let _serial = serial();
    let mut cmd = rivetrun(&[
        "-n",
        "4",
        "-ppn",
        "2",
        "--topology",
        "pack:1 core:2 pu:1",
        "--mesh-dims",
        "2x2",
    ]);
    cmd.arg(bin("pmi_check")).arg("topology");
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let topo = topo_lines(&o);
    let want = [("0", "0/2"), ("0", "1/2"), ("1", "0/2"), ("1", "1/2")];
    let shm_peers = ["0,1", "0,1", "2,3", "2,3"];
    for (rank, (node, local)) in want.iter().enumerate() {
        let f = &topo[&(rank as u32)];
        // The engine's node map: shared memory only with ranks of the same node.
        assert_eq!(f["shm_peers"], shm_peers[rank], "rank {rank}\n{}", o.show());
        assert_eq!(&f["node"], node, "rank {rank}\n{}", o.show());
        assert_eq!(&f["local"], local, "rank {rank}\n{}", o.show());
        assert_eq!(f["type"], "mesh:2x2", "rank {rank}\n{}", o.show());
    }
    // Objects on different nodes have different ids.
    assert_eq!(
        topo[&2]["cluster"],
        "node.1.0,package.1.0,numa.1.0,core.2.0",
        "{}",
        o.show()
    );
}

#[test]
fn mpich_sees_the_node_map() {
    let _serial = serial();
    let prog = mpicc("mpi_check.c");
    let mut cmd = rivetrun(&["-n", "4"]);
    cmd.arg(&prog);
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for rank in 0..4 {
        assert!(
            o.stdout.contains(&format!("hello from rank {rank} of 4 ")),
            "{}",
            o.show()
        );
        assert!(
            o.stdout.contains(&format!("node-local {rank} of 4\n")),
            "{}",
            o.show()
        );
    }
    // Two simulated nodes, cyclic: MPICH must see ranks {0,2} and {1,3} as node mates.
    let mut cmd = rivetrun(&[
        "-n",
        "4",
        "-ppn",
        "2",
        "--map-by",
        "node",
        "--topology",
        "pack:1 core:2 pu:1",
    ]);
    cmd.arg(&prog);
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for (rank, local) in [(0, 0), (1, 0), (2, 1), (3, 1)] {
        let want = format!("hello from rank {rank} of 4 ");
        let line = o
            .stdout
            .lines()
            .find(|l| l.starts_with(&want))
            .unwrap_or_else(|| panic!("{}", o.show()));
        assert!(
            line.ends_with(&format!("node-local {local} of 2")),
            "{line}\n{}",
            o.show()
        );
    }
}

#[test]
fn bad_placement_requests_fail_before_any_rank_starts() {
    let _serial = serial();
    let cases: &[(&[&str], &str)] = &[
        (
            &["-n", "2", "--map-by", "cache"],
            "unknown --map-by policy 'cache'",
        ),
        (
            &["-n", "2", "--bind-to", "board"],
            "unknown --bind-to policy 'board'",
        ),
        (&["-n", "3", "--bind-to", "core"], "3 ranks but 2 cores"),
        (
            &["-n", "2", "--topology", "pack:two core:2"],
            "invalid hwloc synthetic topology",
        ),
        (
            &["-n", "2", "--topology", "/nonexistent/machine.xml"],
            "/nonexistent/machine.xml",
        ),
        (&["-n", "2", "--cpu-list", "0:4096"], "4096"),
        (&["-n", "4", "-ppn", "2"], "need 2 nodes"),
    ];
    for (args, message) in cases {
        let mut cmd = rivetrun(args);
        cmd.args(["sh", "-c", "echo a rank ran"]);
        let o = run_job(cmd, DEADLINE);
        assert_eq!(o.code(), Some(2), "{args:?}\n{}", o.show());
        assert!(
            o.stderr.contains(message),
            "{args:?}: expected {message:?}\n{}",
            o.show()
        );
        assert!(o.stdout.is_empty(), "{args:?}: a rank ran\n{}", o.show());
    }
}

#[test]
fn info_reports_topology_and_transports() {
    let _serial = serial();
    let o = run_job(rivetrun(&["--info"]), DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for key in [
        "topology:",
        "cores",
        "io_uring:",
        "CMA:",
        "libfabric:",
        "shm:",
    ] {
        assert!(o.stdout.contains(key), "--info lacks {key}\n{}", o.show());
    }
    // libfabric's usable providers, each with its domains.
    if o.stdout.contains("libfabric:    available") {
        assert!(
            o.stdout.contains("ofi:          providers ") && o.stdout.contains(" (domains: "),
            "{}",
            o.show()
        );
    }
    let o = run_job(rivetrun(&["--info", "--topology", SYNTH]), DEADLINE);
    assert!(
        o.stdout.contains("2 packages, 4 NUMA nodes"),
        "{}",
        o.show()
    );
    assert!(o.stdout.contains("32 cores, 64 PUs"), "{}", o.show());
}
