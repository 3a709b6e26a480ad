//! A stranger on the machine connects to a `--pmi-port` job's PMI port:
//! it tries abort, initack with guessed ids and a wrong secret, and
//! garbage. Each of its connections is closed without effect, and the job
//! completes with exit 0. Strangers that connect and say nothing are held
//! only up to a bound; more are closed at once.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rivet_tests::procfs::pmi_port_of_child;
use rivet_tests::{bin, rivetrun, run_job_with, serial, wait_for};

const DEADLINE: Duration = Duration::from_secs(90);

/// Send `bytes` on a fresh connection and return all the server says
/// before it closes the connection.
fn intrude(addr: &str, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the PMI port");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(bytes).expect("send");
    // Our end of the stream: a line left unfinished stays unfinished.
    s.shutdown(std::net::Shutdown::Write).expect("shutdown");
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) => panic!(
            "the PMI port kept a stranger's connection open after {:?}: {e} (got {:?})",
            String::from_utf8_lossy(bytes),
            String::from_utf8_lossy(&got)
        ),
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn a_stranger_on_the_pmi_port_is_refused_and_the_job_completes() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("rivet-test-auth-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let marked = |d: &Path| (0..2).all(|r| d.join(format!("ready-{r}")).exists());
    let mut cmd = rivetrun(&["-n", "2", "--pmi-port"]);
    cmd.arg(bin("engine_check"))
        .args(["hang", dir.to_str().unwrap(), "release"])
        .env("RIVET_YIELD", "always")
        .stdin(std::process::Stdio::null());
    let mut answers: Vec<(String, String)> = Vec::new();
    let d: PathBuf = dir.clone();
    let o = run_job_with(&mut cmd, DEADLINE, |launcher| {
        let mut addr = None;
        let up = wait_for(DEADLINE / 2, || marked(&d))
            && wait_for(DEADLINE / 2, || {
                addr = pmi_port_of_child(launcher);
                addr.is_some()
            });
        let Some(addr) = addr.filter(|_| up) else {
            // The job is left to its deadline, which fails the test.
            return;
        };
        for attempt in [
            &b"cmd=abort exitcode=9 message=stranger\n"[..],
            b"cmd=initack pmiid=0\n",
            b"cmd=initack pmiid=1\ncmd=abort exitcode=9\n",
            b"cmd=initack pmiid=1 secret=00000000000000000000000000000000\n",
            b"cmd=get_maxes\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
            b"cmd=abort exitcode=9 message=",
        ] {
            let said = intrude(&addr, attempt);
            answers.push((String::from_utf8_lossy(attempt).into_owned(), said));
        }
        // Both ranks are in: as many strangers as the cap may wait saying
        // nothing; the next is closed unanswered, before it says anything.
        let idle: Vec<TcpStream> = (0..rivet_pmi::server::MAX_STRANGERS)
            .filter_map(|_| TcpStream::connect(&addr).ok())
            .collect();
        let mut crowd = String::new();
        if let Ok(mut extra) = TcpStream::connect(&addr) {
            let _ = extra.set_read_timeout(Some(Duration::from_secs(20)));
            let mut got = Vec::new();
            crowd = match extra.read_to_end(&mut got) {
                Ok(_) => String::from_utf8_lossy(&got).into_owned(),
                Err(e) => format!("left open: {e}"),
            };
        }
        answers.push((format!("{} idle, then one more", idle.len()), crowd));
        drop(idle);
        std::fs::write(d.join("go"), b"").unwrap();
    });
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        o.code(),
        Some(0),
        "{}\nthe stranger heard: {answers:?}",
        o.show()
    );
    assert_eq!(
        o.stdout.matches("engine_check hang OK").count(),
        2,
        "{}",
        o.show()
    );
    for (sent, said) in &answers {
        // Only failed handshakes are answered, and never with a rank.
        assert!(
            said.is_empty() || said.starts_with("cmd=initack rc=-1"),
            "{sent:?} got {said:?}"
        );
    }
    assert!(
        o.stderr
            .contains("before authenticating with initack; refused"),
        "{}",
        o.show()
    );
    assert!(
        answers.iter().any(|(sent, said)| sent
            == &format!("{} idle, then one more", rivet_pmi::server::MAX_STRANGERS)
            && said.is_empty()),
        "{answers:?}"
    );
    assert!(
        o.stderr
            .contains("PMI_PORT connections wait unidentified already; closing another"),
        "{}",
        o.show()
    );
    // The stranger's abort is never told as a rank's ("rank 4294967295").
    assert!(
        !o.stderr.contains("4294967295") && !o.stdout.contains("4294967295"),
        "{}",
        o.show()
    );
}
