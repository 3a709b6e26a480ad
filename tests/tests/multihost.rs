//! rivetrun across hosts: namespace hosts on a bridge (`rivet_tests::netns`),
//! entered through `--launcher-exec`. Shared memory inside a host, tcp
//! across; PMI-2; MPMD; the proxy tree; an MPICH program; Slurm; stdin;
//! start-up against Hydra. Failures are in `multihost_failures.rs`,
//! `--pmi-port` in `multihost_pmi_port.rs`. Skipped, saying why, where
//! network namespaces cannot be made (not root).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rivet_tests::netns::{cluster, on_hosts};
use rivet_tests::{
    appnums, bin, mpi_check_passed_on_hosts, mpicc, run_job, run_job_with, serial, Outcome,
};

const DEADLINE: Duration = Duration::from_secs(120);

/// The `--launch-stats` line: (hosts, barriers, barrier messages).
fn stats(o: &Outcome) -> (u64, u64, u64) {
    let line = o
        .stderr
        .lines()
        .find(|l| l.starts_with("rivetrun: launch stats: "))
        .unwrap_or_else(|| panic!("no stats line\n{}", o.show()));
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit() && c != '.')
        .filter_map(|w| w.parse().ok())
        .collect();
    // hosts, ranks, fan-out, barriers, barrier messages, per barrier, messages
    (nums[0], nums[3], nums[4])
}

#[test]
fn p2p_on_3_hosts_of_2_ranks_uses_shm_inside_a_host_and_tcp_across() {
    let _serial = serial();
    let Some(c) = cluster(3) else { return };
    let prog = bin("engine_check");
    let iface = c.iface.clone();
    for mode in [
        &["connect_all"][..],
        &["order"],
        &["probe"],
        &["stress", "3000"],
    ] {
        let o = run_job(
            on_hosts(
                &c,
                &["-hosts", &c.host_list(2)],
                6,
                &["--iface", &iface, "--report-bindings"],
                &prog,
                mode,
            ),
            DEADLINE,
        );
        assert_eq!(o.code(), Some(0), "{mode:?}: {}", o.show());
        // Each host's proxy placed its own ranks, under its own name.
        for want in [
            "rank 0 on h1 (node 0, local 0 of 2)",
            "rank 3 on h2 (node 1, local 1 of 2)",
            "rank 4 on h3 (node 2, local 0 of 2)",
        ] {
            assert!(o.stderr.contains(want), "{want:?}: {}", o.show());
        }
        for rank in 0..6 {
            let ok = format!("engine_check {} OK rank {rank} of 6 ", mode[0]);
            assert!(o.stdout.contains(&ok), "{mode:?} rank {rank}: {}", o.show());
        }
        if mode[0] == "connect_all" {
            // Rank 0 on h1: one peer on its host (shm), four on the others (tcp).
            for want in [
                "engine_check info: vcs: 1 shm, 4 netmod",
                "(6 ranks, 2 on this node",
                "transport.netmod: tcp",
            ] {
                assert!(o.stdout.contains(want), "{want:?}: {}", o.show());
            }
        }
        // One barrier message per host per barrier, whatever the ranks.
        let (hosts, barriers, msgs) = stats(&o);
        assert_eq!(hosts, 3, "{}", o.show());
        assert!(barriers >= 1, "{}", o.show());
        assert_eq!(msgs, 3 * barriers, "{}", o.show());
    }
    // The ofi netmod across hosts (auto picks it where a provider is
    // named), shared memory still inside each.
    let mut cmd = on_hosts(
        &c,
        &["-hosts", &c.host_list(2)],
        6,
        &[
            "--iface",
            &iface,
            "-genv",
            "RIVET_OFI_PROVIDER",
            "tcp;ofi_rxm",
        ],
        &prog,
        &["connect_all"],
    );
    cmd.env("FI_TCP_IFACE", &iface);
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "ofi: {}", o.show());
    for want in ["vcs: 1 shm, 4 netmod", "transport.netmod: ofi"] {
        assert!(o.stdout.contains(want), "ofi {want:?}: {}", o.show());
    }
    // The same with one rank per host: the same messages per barrier.
    let o = run_job(
        on_hosts(
            &c,
            // -ppn overrides the slots: one rank per host.
            &["-hosts", &c.host_list(4), "-ppn", "1"],
            3,
            &["--iface", &iface],
            &prog,
            &["connect_all"],
        ),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert!(o.stdout.contains("vcs: 0 shm, 2 netmod"), "{}", o.show());
    let (_, barriers, msgs) = stats(&o);
    assert_eq!(msgs, 3 * barriers, "{}", o.show());
}

/// The `topo rank ...` lines of `pmi_check topology`, by rank: (node,
/// local rank/size, cluster levels, xml, PMI kind from the rank's first line).
fn topo_lines(stdout: &str) -> Vec<(u32, String)> {
    let mut v: Vec<(u32, String)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("topo rank "))
        .map(|l| {
            let (r, rest) = l.split_once(' ').unwrap();
            (r.parse().unwrap(), rest.to_string())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn pmi2_ranks_run_p2p_across_hosts_and_learn_their_placement() {
    let _serial = serial();
    let Some(c) = cluster(2) else { return };
    let iface = c.iface.clone();
    let pmi2 = ["--iface", &iface, "-genv", "RIVET_PMI", "pmi2"];
    for mode in [
        &["connect_all"][..],
        &["order"],
        &["probe"],
        &["stress", "2000"],
    ] {
        let cmd = on_hosts(
            &c,
            &["-hosts", &c.host_list(2)],
            4,
            &pmi2,
            &bin("engine_check"),
            mode,
        );
        let o = run_job(cmd, DEADLINE);
        assert_eq!(o.code(), Some(0), "{mode:?}: {}", o.show());
        for rank in 0..4 {
            let ok = format!("engine_check {} OK rank {rank} of 4 ", mode[0]);
            assert!(o.stdout.contains(&ok), "{mode:?} rank {rank}: {}", o.show());
        }
        if mode[0] == "connect_all" {
            assert!(o.stdout.contains("vcs: 1 shm, 2 netmod"), "{}", o.show());
        }
        let (hosts, barriers, msgs) = stats(&o);
        assert_eq!((hosts, msgs), (2, 2 * barriers), "{}", o.show());
    }
    // The placement keys, each node's own, over PMI-2 and PMI-1 alike.
    for kind in ["pmi2", "pmi1"] {
        let cmd = on_hosts(
            &c,
            &["-hosts", &c.host_list(2)],
            4,
            &[
                "--iface",
                &iface,
                "-genv",
                "RIVET_PMI",
                kind,
                "--bind-to",
                "none",
            ],
            &bin("pmi_check"),
            &["topology"],
        );
        let o = run_job(cmd, DEADLINE);
        assert_eq!(o.code(), Some(0), "{kind}: {}", o.show());
        let topo = topo_lines(&o.stdout);
        assert_eq!(topo.len(), 4, "{}", o.show());
        for (rank, line) in &topo {
            let (node, local) = (rank / 2, rank % 2);
            let want = format!("type cluster node {node} local {local}/2 ");
            assert!(line.contains(&want), "rank {rank} {want:?}: {}", o.show());
            let cluster = format!(" cluster node.{node}.{local} ");
            assert!(
                line.contains(&cluster),
                "rank {rank} {cluster:?}: {}",
                o.show()
            );
            assert!(line.contains(" xml readable "), "rank {rank}: {}", o.show());
            // Itself and the one peer on its own host, from the process mapping.
            let pair = if node == 0 { "0,1" } else { "2,3" };
            let peers = format!("shm_peers {pair}");
            assert!(line.ends_with(&peers), "rank {rank}: {}", o.show());
        }
        assert!(
            appnums(&o.stdout)
                .iter()
                .all(|(_, a, k)| *a == 0 && k == kind),
            "{}",
            o.show()
        );
    }
}

#[test]
fn mpmd_across_hosts_gives_each_rank_its_program_and_appnum() {
    let _serial = serial();
    let Some(c) = cluster(2) else { return };
    let check = bin("pmi_check").display().to_string();
    let sh = "/bin/sh";
    // -hosts h1,h2 (2 slots each): ranks 0-1 on h1 run pmi_check over
    // PMI-1, ranks 2-3 on h2 run it over PMI-2 with their own argument;
    // a third section's shell prints its appnum-free environment.
    let cmd = on_hosts(
        &c,
        &["-hosts", &c.host_list(2)],
        2,
        &["--iface", &c.iface.clone()],
        Path::new(&check),
        &[
            "topology",
            ":",
            "-n",
            "2",
            "-env",
            "RIVET_PMI",
            "pmi2",
            &check,
            "topology",
        ],
    );
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let want: Vec<(u32, i32, String)> = [
        (0, 0, "pmi1"),
        (1, 0, "pmi1"),
        (2, 1, "pmi2"),
        (3, 1, "pmi2"),
    ]
    .into_iter()
    .map(|(r, a, k)| (r, a, k.to_string()))
    .collect();
    assert_eq!(appnums(&o.stdout), want, "{}", o.show());
    assert_eq!(topo_lines(&o.stdout).len(), 4, "{}", o.show());
    // A section's own -env reaches only its ranks: a shell section beside.
    let script = "echo \"rank $PMI_RANK on $(hostname) says [$WHO]\"";
    let cmd = on_hosts(
        &c,
        &["-hosts", &c.host_list(1)],
        1,
        &["-env", "WHO", "first"],
        Path::new(sh),
        &[
            "-c", script, ":", "-n", "1", "-env", "WHO", "second", sh, "-c", script,
        ],
    );
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for want in ["rank 0 on h1 says [first]", "rank 1 on h2 says [second]"] {
        assert!(o.stdout.contains(want), "{want:?}: {}", o.show());
    }
}

#[test]
fn barriers_go_up_a_tree_of_proxies() {
    let _serial = serial();
    let Some(c) = cluster(4) else { return };
    let iface = c.iface.clone();
    // One rank per host; fan-out 2: rivetrun's children are h1 and h2, h1's
    // are h3 and h4. rivetrun sees 2 barrier messages per barrier, not 4.
    for (fanout, per_barrier) in [("2", 2), ("1", 1), ("8", 4)] {
        let mut cmd = on_hosts(
            &c,
            &["-hosts", &c.host_list(1)],
            4,
            &["--iface", &iface],
            &bin("engine_check"),
            &["connect_all"],
        );
        cmd.env("RIVET_PROXY_FANOUT", fanout);
        let o = run_job(cmd, DEADLINE);
        assert_eq!(o.code(), Some(0), "fan-out {fanout}: {}", o.show());
        for rank in 0..4 {
            let ok = format!("engine_check connect_all OK rank {rank} of 4 ");
            assert!(
                o.stdout.contains(&ok),
                "fan-out {fanout} rank {rank}: {}",
                o.show()
            );
        }
        let (hosts, barriers, msgs) = stats(&o);
        assert_eq!(hosts, 4);
        assert!(barriers >= 1, "{}", o.show());
        assert_eq!(
            msgs,
            per_barrier * barriers,
            "fan-out {fanout}: {}",
            o.show()
        );
    }
}

#[test]
fn mpich_program_runs_on_2_hosts_of_2_ranks() {
    let _serial = serial();
    let Some(c) = cluster(2) else { return };
    let prog = mpicc("mpi_check.c");
    // Hosts by address, no --iface: rivetrun finds its own address on the
    // route toward them; the ranks learn which ranks share their host.
    // A host file (Hydra's host:slots form, comments).
    let file = std::env::temp_dir().join(format!("rivet-mh-hosts-{}", std::process::id()));
    let text = format!(
        "# two hosts\n{}:2\n\n{}:2  # the second\n",
        c.hosts[0].addr, c.hosts[1].addr
    );
    std::fs::write(&file, text).unwrap();
    let file_arg = file.display().to_string();
    let cmd = on_hosts(&c, &["-hostfile", &file_arg], 4, &[], &prog, &[]);
    let o = run_job(cmd, DEADLINE);
    let _ = std::fs::remove_file(&file);
    mpi_check_passed_on_hosts(&o, 4, 2);
}

#[test]
fn inside_a_slurm_allocation_srun_starts_the_proxies() {
    let _serial = serial();
    rivet_tests::slurm_up();
    // (Without --launcher, only an allocation of several nodes uses srun.)
    let mut cmd = Command::new("salloc");
    cmd.args(["-n", "2", "--quiet"])
        .arg(rivet_tests::bin("rivetrun"))
        .args(["--launcher", "slurm", "--launch-stats", "-n", "2"])
        .args(["-genv", "RIVET_YIELD", "always"])
        .arg(bin("engine_check"))
        .arg("connect_all");
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    for rank in 0..2 {
        let ok = format!("engine_check connect_all OK rank {rank} of 2 ");
        assert!(o.stdout.contains(&ok), "{}", o.show());
    }
    // Both ranks on the allocation's one node: shared memory.
    assert!(o.stdout.contains("vcs: 1 shm, 0 netmod"), "{}", o.show());
    let (hosts, barriers, msgs) = stats(&o);
    assert_eq!((hosts, msgs), (1, barriers), "{}", o.show());
}

#[test]
fn stdin_reaches_rank_0_on_its_host() {
    let _serial = serial();
    let Some(c) = cluster(2) else { return };
    let input = std::env::temp_dir().join(format!("rivet-mh-stdin-{}", std::process::id()));
    std::fs::write(&input, "first line\nsecond line\n").unwrap();
    let script = "read a; read b; read c || echo \"rank $PMI_RANK on $(hostname): [$a] [$b] eof\"";
    let mut cmd = on_hosts(
        &c,
        &["-hosts", &c.host_list(1)],
        2,
        &[],
        Path::new("/bin/sh"),
        &["-c", script],
    );
    cmd.stdin(std::fs::File::open(&input).unwrap());
    let o = run_job_with(&mut cmd, DEADLINE, |_| {});
    let _ = std::fs::remove_file(&input);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert!(
        o.stdout
            .contains("rank 0 on h1: [first line] [second line] eof"),
        "{}",
        o.show()
    );
    // The others get no input.
    assert!(o.stdout.contains("rank 1 on h2: [] [] eof"), "{}", o.show());
}

/// Each proxy leads a session of its own (rivetrun starts each launcher
/// command in one) and raises that session's scheduling group, since with
/// autogroups a nice value counts only inside its session; each rank has a
/// session, so a group, of its own at the nice value it was given.
#[test]
fn proxies_lead_sessions_of_their_own_raised_over_their_ranks() {
    let _serial = serial();
    let Some(c) = cluster(2) else { return };
    // /proc/PID/stat: field 6 is the session, 19 the nice value.
    let script = "p=$PPID; echo \"rank $PMI_RANK proxy $p $(cut -d' ' -f6,19 /proc/$p/stat) \
                  [$(cat /proc/$p/autogroup 2>/dev/null)] self $$ $(cut -d' ' -f6 /proc/$$/stat) \
                  [$(cat /proc/$$/autogroup 2>/dev/null)]\"";
    let cmd = on_hosts(
        &c,
        &["-hosts", &c.host_list(1)],
        2,
        &[],
        Path::new("/bin/sh"),
        &["-c", script],
    );
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let lines: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("rank "))
        .collect();
    assert_eq!(lines.len(), 2, "{}", o.show());
    for line in lines {
        let w: Vec<&str> = line.split_whitespace().collect();
        // rank R proxy PID SID NICE [GROUP] self PID SID [GROUP]
        let (proxy, proxy_sid, proxy_nice) = (w[3], w[4], w[5]);
        assert_eq!(proxy, proxy_sid, "the proxy leads its session: {line}");
        let at = w.iter().position(|x| *x == "self").unwrap();
        assert_eq!(w[at + 1], w[at + 2], "the rank leads its session: {line}");
        let groups: Vec<&str> = line.split(['[', ']']).collect();
        let (proxy_group, rank_group) = (groups[1], groups[3]);
        // Where the proxy could raise itself (nice -5), it raised its group
        // too; a rank's group is at the nice value its session began with.
        if proxy_nice == "-5" && !proxy_group.is_empty() {
            assert!(proxy_group.ends_with("nice -5"), "{line}");
            assert!(rank_group.ends_with("nice 0"), "{line}");
            assert_ne!(proxy_group, rank_group, "{line}");
        }
    }
}

/// Start-up of an MPICH hello (`mpi_startup.c`: init and finalize, no
/// polling between) on 4 namespace hosts, 64 and 256 ranks oversubscribed,
/// rivetrun against `mpiexec.hydra` through its own `-launcher-exec`,
/// interleaved (the order alternating each round). Only prints: the times,
/// the median ratio per size, and rivetrun's barrier messages (a figure,
/// not a check: this machine's 2 cores are shared). `RIVETRUN_BIN` picks
/// the rivetrun to time (a release build), `STARTUP_ROUNDS` the rounds (3).
/// `cargo test -p rivet-tests --test multihost -- --ignored --nocapture startup`
#[test]
#[ignore]
fn startup_against_hydra() {
    let _serial = serial();
    let Some(c) = cluster(4) else { return };
    let prog = mpicc("mpi_startup.c");
    let ours_bin = std::env::var_os("RIVETRUN_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| bin("rivetrun"));
    let rounds: usize = std::env::var("STARTUP_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let hosts: Vec<String> = c.hosts.iter().map(|h| h.addr.clone()).collect();
    let hosts = hosts.join(",");
    let exec = c.launcher_exec().display().to_string();
    let common = [
        "-launcher",
        "rsh",
        "-launcher-exec",
        &exec,
        "-iface",
        &c.iface,
    ];
    let sizes = [64u32, 256];
    let mut times: Vec<Vec<(f64, f64)>> = vec![Vec::new(); sizes.len()];
    for round in 0..rounds {
        for (i, &n) in sizes.iter().enumerate() {
            let ns = n.to_string();
            let mut ours = Command::new(&ours_bin);
            ours.args(common)
                .args([
                    "-hosts",
                    &hosts,
                    "-n",
                    &ns,
                    "--bind-to",
                    "none",
                    "--launch-stats",
                ])
                .arg(&prog);
            let mut hydra = Command::new("mpiexec.hydra");
            hydra
                .args(common)
                .args(["-hosts", &hosts, "-n", &ns])
                .arg(&prog);
            let mut pair = [("rivetrun", ours), ("hydra", hydra)];
            if round % 2 == 1 {
                pair.reverse();
            }
            let (mut t_ours, mut t_hydra) = (0.0, 0.0);
            for (name, cmd) in pair {
                let o = run_job(cmd, Duration::from_secs(300));
                assert_eq!(o.code(), Some(0), "{name} {n}: {}", o.show());
                let hellos = o.stdout.matches("hello from rank ").count();
                assert_eq!(hellos, n as usize, "{name} {n}: {}", o.show());
                let t = o.elapsed.as_secs_f64();
                if name == "rivetrun" {
                    t_ours = t;
                    let (_, barriers, msgs) = stats(&o);
                    if let Some(l) = o.stderr.lines().find(|l| l.contains("launch times:")) {
                        eprintln!("  {n} ranks: {l}");
                    }
                    eprintln!("  {n} ranks: rivetrun handled {msgs} barrier messages in {barriers} barriers");
                } else {
                    t_hydra = t;
                }
            }
            eprintln!(
                "round {round}: {n} ranks: rivetrun {t_ours:.2}s hydra {t_hydra:.2}s ratio {:.2}",
                t_ours / t_hydra
            );
            times[i].push((t_ours, t_hydra));
        }
    }
    for (i, &n) in sizes.iter().enumerate() {
        let mut ratios: Vec<f64> = times[i].iter().map(|(a, b)| a / b).collect();
        ratios.sort_by(|a, b| a.total_cmp(b));
        eprintln!(
            "startup of {n} ranks on 4 hosts: rivetrun/hydra median ratio {:.2} (rounds {:?})",
            ratios[ratios.len() / 2],
            times[i]
        );
    }
}
