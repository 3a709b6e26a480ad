//! A stranger poses as a rank of a running job on the tcp netmod: it knows
//! the job's name and where rank 0 listens, but not the job secret
//! rivetrun gave the ranks. Its HELLO is refused (verdict "unsupported"),
//! and the job completes with exit 0. The same job shows another invariant
//! of ARCHITECTURE.md: a process that never opens the ofi netmod never
//! loads libfabric (no rank maps it).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use rivet_tests::procfs::{listening, rank_pid};
use rivet_tests::{bin, rivetrun, run_job_with, serial};

const DEADLINE: Duration = Duration::from_secs(90);

/// A HELLO "I am rank `rank` of `job`" without the secret's MAC; the
/// acceptor's verdict byte, or `None` if it closed without one.
fn pose_as(addr: SocketAddr, rank: u64, job: &str) -> Option<u8> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    let mut hello = b"RVTCP\x02\0\0".to_vec();
    hello.push(1); // a rank
    hello.extend_from_slice(&rank.to_le_bytes());
    hello.extend_from_slice(&(job.len() as u16).to_le_bytes());
    hello.extend_from_slice(job.as_bytes());
    hello.extend_from_slice(&[0x5a; 8]); // nonce
    hello.extend_from_slice(&[0; 8]); // no MAC
    s.write_all(&hello).ok()?;
    let mut verdict = [0u8; 9];
    s.read_exact(&mut verdict).ok()?;
    Some(verdict[8])
}

#[test]
fn a_stranger_posing_as_a_rank_over_tcp_is_refused() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("rivet-test-tcpauth-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let marked = |d: &Path| (0..4).all(|r| d.join(format!("ready-{r}")).exists());
    let mut cmd = rivetrun(&["-n", "4"]);
    cmd.arg(bin("engine_check"))
        .args(["hang", dir.to_str().unwrap(), "release"])
        .env("RIVET_YIELD", "always")
        .env("RIVET_NETMOD", "tcp")
        .stdin(std::process::Stdio::null());
    let d = dir.clone();
    let mut verdicts = Vec::new();
    let mut found = Vec::new();
    let mut maps = Vec::new();
    let o = run_job_with(&mut cmd, DEADLINE, |launcher| {
        let start = Instant::now();
        while !marked(&d) && start.elapsed() < DEADLINE / 2 {
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("ranks up after {:?}", start.elapsed());
        let job = format!("rivet_{launcher}_0");
        if let Some(pid) = rank_pid(launcher, 0) {
            found = listening(pid);
            // Rank 2 or rank 1, connected already or not: no MAC, no entry.
            for addr in &found {
                for rank in [2, 1] {
                    verdicts.push((*addr, rank, pose_as(*addr, rank, &job)));
                }
            }
        }
        eprintln!("posed after {:?}", start.elapsed());
        for rank in 0..4 {
            if let Some(pid) = rank_pid(launcher, rank) {
                let m = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
                maps.push((rank, m));
            }
        }
        std::fs::write(d.join("go"), b"").unwrap();
    });
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert_eq!(
        o.stdout.matches("engine_check hang OK").count(),
        4,
        "{}",
        o.show()
    );
    assert!(!found.is_empty(), "rank 0's tcp listener was not found");
    assert_eq!(maps.len(), 4, "every rank's memory map was read");
    for (rank, m) in &maps {
        assert!(m.contains("[stack]"), "rank {rank}: no map read");
        assert!(
            !m.contains("libfabric"),
            "rank {rank} loaded libfabric without opening ofi:\n{m}"
        );
    }
    for (addr, rank, verdict) in &verdicts {
        // 3: Verdict::Unsupported. 0 (accept) would let the stranger in.
        assert_eq!(
            *verdict,
            Some(3),
            "posing as rank {rank} at {addr}: {verdicts:?}"
        );
    }
}
