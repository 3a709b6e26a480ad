//! `rivet-bench compare` from a fresh clone: its peer programs
//! (benches/peers: mpi_p2p.c, mpi_hello.c, tcp_pingpong.c) build with
//! MPICH's and Open MPI's compilers and `cc`, run on 2 ranks, and every
//! stack reports a value. Few iterations: this checks that the programs
//! work, not how fast.

use std::process::Command;
use std::time::Duration;

use rivet_tests::{bin, run_job, serial};

/// A fresh build directory, so the programs are built by this run.
fn build_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rivet-peers-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// `rivet-bench compare ARGS --json --build-dir DIR`, few iterations; the JSON line.
fn compare(dir: &std::path::Path, args: &[&str]) -> String {
    let mut cmd = Command::new(bin("rivet-bench"));
    cmd.args(["compare", "--reps", "1", "--json", "-i", "20", "-x", "2"])
        .arg("--build-dir")
        .arg(dir)
        .args(args);
    let out = run_job(cmd, Duration::from_secs(240));
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(out.code(), Some(0), "{}", out.show());
    out.stdout
        .lines()
        .find(|l| l.starts_with("{\"benchmark\":\"compare\""))
        .unwrap_or_else(|| panic!("no JSON report\n{}", out.show()))
        .to_string()
}

/// The `"stacks":{...}` object of the row `key` of bench `bench`.
fn row<'a>(json: &'a str, bench: &str, key: &str) -> &'a str {
    let at = json
        .find(&format!("{{\"bench\":\"{bench}\""))
        .unwrap_or_else(|| panic!("no {bench} in {json}"));
    let rest = &json[at..];
    let at = rest
        .find(&format!("{key},\"stacks\":{{"))
        .unwrap_or_else(|| panic!("no row {key} of {bench} in {json}"));
    let rest = &rest[at..];
    let end = ["\"best_peer\"", "\"ratios\""]
        .iter()
        .filter_map(|m| rest.find(m))
        .min()
        .unwrap_or(rest.len());
    rest[..end].split_once("\"stacks\":").expect("stacks").1
}

#[test]
fn mpi_peer_programs_build_and_run_under_mpich_and_open_mpi() {
    let _g = serial();
    let dir = build_dir("mpi");
    let json = compare(
        &dir,
        &[
            "--stacks",
            "mpich,openmpi",
            "--benches",
            "latency,bw,mr,startup",
            "--sizes",
            "8,1K",
            "--ranks",
            "2",
            "-W",
            "8",
        ],
    );
    assert!(json.contains("\"skipped\":[]"), "{json}");
    assert!(json.contains("\"failed_runs\":0"), "{json}");
    for (bench, key) in [
        ("latency", "\"size\":8"),
        ("latency", "\"size\":1024"),
        ("bw", "\"size\":1024"),
        ("mr", "\"size\":8"),
        ("startup", "\"ranks\":2"),
    ] {
        let r = row(&json, bench, key);
        for stack in ["mpich", "openmpi"] {
            assert!(
                r.contains(&format!("\"{stack}\":{{\"median\":")),
                "{stack} has no {bench} value at {key}: {r}\n{json}"
            );
        }
    }
}

#[test]
fn raw_tcp_peer_program_builds_and_runs() {
    let _g = serial();
    let dir = build_dir("tcp");
    let json = compare(
        &dir,
        &[
            "--transport",
            "tcp",
            "--stacks",
            "raw-tcp",
            "--benches",
            "latency,bw",
            "--sizes",
            "8,64K",
        ],
    );
    assert!(json.contains("\"failed_runs\":0"), "{json}");
    assert!(
        row(&json, "latency", "\"size\":8").contains("\"raw-tcp\":{\"median\":"),
        "{json}"
    );
    assert!(
        row(&json, "bw", "\"size\":65536").contains("\"raw-tcp\":{\"median\":"),
        "{json}"
    );
}

/// The benchmarks of scale over tcp, on both backends: `latency
/// --idle-peers` (idle ranks asleep in a PMI barrier; the measuring ranks'
/// last messages must still leave), its memory line, `fanin`, and the
/// netmod's system calls per message beside the latency rows.
#[test]
fn idle_peers_fanin_and_system_calls_over_tcp() {
    let _g = serial();
    let dir = build_dir("scale");
    let json = compare(
        &dir,
        &[
            "--transport",
            "tcp",
            "--stacks",
            "rivet",
            "--benches",
            "idle,fanin,latency",
            "--sizes",
            "8",
            "--idle-peers",
            "2",
            "--senders",
            "3",
        ],
    );
    assert!(json.contains("\"failed_runs\":0"), "{json}");
    for (bench, key) in [
        ("latency-idle", "\"idle_peers\":0"),
        ("latency-idle", "\"idle_peers\":2"),
        ("memory", "\"idle_peers\":0"),
        ("memory", "\"idle_peers\":2"),
        ("fanin", "\"senders\":3"),
        ("latency", "\"size\":8"),
    ] {
        let r = row(&json, bench, key);
        for stack in ["rivet-uring", "rivet-poll"] {
            assert!(
                r.contains(&format!("\"{stack}\":{{\"median\":")),
                "{stack} has no {bench} value at {key}: {r}\n{json}"
            );
        }
    }
    let at = json.find("{\"bench\":\"latency\"").expect("latency");
    assert!(
        json[at..].contains("\"syscalls_per_msg\":{\"rivet-uring\":"),
        "no system calls per message: {json}"
    );
}
