//! An intruder on the machine while a `--pmi-port` job runs over the tcp
//! netmod: it connects to the PMI port and to every port each rank listens
//! on, tries abort and initack, sends garbage, an endless PMI line and a
//! 1 GiB frame announcement (behind a port HELLO, which any process may
//! send). The job completes with exit 0, and no rank's (nor rivetrun's)
//! peak memory comes near what the intruder announced.
//!
//! A stranger gets no further than the handshake here: a rank HELLO needs
//! the job secret's MAC and a port HELLO an open port's random tag (one
//! naming another tag is closed before its frames are read). What a peer
//! that did get in can announce is bounded by the receive budget, shown
//! by the tcp netmod's `huge_unplaced_frame` test (netmods/tests/tcp.rs).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use rivet_tests::procfs::{listening, peak_rss, pmi_port_of_child, rank_pid};
use rivet_tests::{bin, rivetrun, run_job_with, serial, wait_for};

const DEADLINE: Duration = Duration::from_secs(120);
const RANKS: u32 = 3;
/// Far above what a rank of this job needs, far below the 1 GiB announced.
const PEAK_BOUND: u64 = 256 << 20;

/// Connects, sends `bytes` (stopping quietly if the peer closes first) and
/// waits, bounded, for the peer to close; whatever it answered.
fn intrude(addr: SocketAddr, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    s.set_write_timeout(Some(Duration::from_secs(30))).ok();
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => Ok(got),
        // Closed with unread bytes of ours: a reset, as good as a close.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(got),
        Err(e) => Err(format!("{addr} kept the intruder's connection open: {e}")),
    }
}

/// A tcp netmod HELLO to port `tag` (no secret needed), then a frame
/// prefix announcing a 1 GiB payload, its header and the first bytes.
fn port_hello_then_huge_frame(tag: u64) -> Vec<u8> {
    let mut b = b"RVTCP\x02\0\0".to_vec();
    b.push(2); // a port connection
    b.extend_from_slice(&tag.to_le_bytes());
    let job = b"intruder";
    b.extend_from_slice(&(job.len() as u16).to_le_bytes());
    b.extend_from_slice(job);
    b.extend_from_slice(&[0x33; 16]); // nonce, no MAC
    b.extend_from_slice(&40u32.to_le_bytes());
    b.extend_from_slice(&(1u32 << 30).to_le_bytes());
    b.extend_from_slice(&[4; 40]); // a header claiming a Data piece
    b.extend_from_slice(&[0x77; 64 << 10]);
    b
}

#[test]
fn an_intruder_on_every_port_leaves_the_job_and_its_memory_alone() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("rivet-test-intruder-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let marked = |d: &Path| (0..RANKS).all(|r| d.join(format!("ready-{r}")).exists());
    let mut cmd = rivetrun(&["-n", &RANKS.to_string(), "--pmi-port"]);
    cmd.arg(bin("engine_check"))
        .args(["hang", dir.to_str().unwrap(), "release"])
        .env("RIVET_YIELD", "always")
        .env("RIVET_NETMOD", "tcp")
        .stdin(std::process::Stdio::null());
    let d = dir.clone();
    let mut problems: Vec<String> = Vec::new();
    let mut ports = 0;
    let mut peaks: Vec<(String, u64)> = Vec::new();
    let o = run_job_with(&mut cmd, DEADLINE, |launcher| {
        let mut pmi = None;
        let up = wait_for(DEADLINE / 3, || marked(&d))
            && wait_for(DEADLINE / 3, || {
                pmi = pmi_port_of_child(launcher);
                pmi.is_some()
            });
        let Some(pmi) = pmi.filter(|_| up) else {
            problems.push("the job never came up".into());
            std::fs::write(d.join("go"), b"").unwrap();
            return;
        };
        let pmi: SocketAddr = pmi.parse().expect("PMI_PORT is host:port");
        let mut endless = b"cmd=put kvsname=x key=y value=".to_vec();
        endless.resize(8 << 20, b'z');
        for attempt in [
            &b"cmd=abort exitcode=9 message=intruder\n"[..],
            b"cmd=initack pmiid=1\ncmd=abort exitcode=9\n",
            b"cmd=initack pmiid=0 secret=00\n",
            b"\x00\x01\x02garbage\xff\xfe\n",
            &endless,
        ] {
            if let Err(e) = intrude(pmi, attempt) {
                problems.push(e);
            }
        }
        for rank in 0..RANKS {
            let Some(pid) = rank_pid(launcher, rank) else {
                problems.push(format!("rank {rank} not found"));
                continue;
            };
            for addr in listening(pid) {
                ports += 1;
                for attempt in [
                    b"GET / HTTP/1.0\r\n\r\n".to_vec(),
                    vec![0xff; 4096],
                    // A frame announcement without any HELLO.
                    [&8u32.to_le_bytes()[..], &(1u32 << 30).to_le_bytes()].concat(),
                    port_hello_then_huge_frame(1),
                    port_hello_then_huge_frame(u64::MAX),
                ] {
                    if let Err(e) = intrude(addr, &attempt) {
                        problems.push(e);
                    }
                }
            }
            peaks.push((format!("rank {rank}"), peak_rss(pid).unwrap_or(0)));
        }
        peaks.push(("rivetrun".into(), peak_rss(launcher).unwrap_or(0)));
        std::fs::write(d.join("go"), b"").unwrap();
    });
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("peak memory after the intrusion: {peaks:?}");
    assert!(problems.is_empty(), "{problems:?}\n{}", o.show());
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert_eq!(
        o.stdout.matches("engine_check hang OK").count(),
        RANKS as usize,
        "{}",
        o.show()
    );
    assert!(ports >= RANKS as usize, "only {ports} rank ports found");
    assert_eq!(peaks.len(), RANKS as usize + 1, "{peaks:?}");
    for (who, peak) in &peaks {
        assert!(*peak > 0, "no VmHWM for {who}");
        assert!(
            *peak < PEAK_BOUND,
            "{who} peaked at {peak} bytes: {peaks:?}"
        );
    }
}
