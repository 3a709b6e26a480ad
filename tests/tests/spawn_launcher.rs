//! rivetrun serving PMI spawn and names: children start, see what they must,
//! are supervised like ranks and never outlive the job; failed spawns are
//! reported per process; a name server shared by separately started jobs.
//! Every job runs alone (`serial`) with a deadline and a leak check.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rivet_tests::{bin, rivetrun, run_job, serial, tagged_processes, Outcome};

const DEADLINE: Duration = Duration::from_secs(60);

fn check(args: &[&str], mode: &[&str]) -> Command {
    let mut cmd = rivetrun(args);
    cmd.arg(bin("pmi_spawn_check")).args(mode);
    cmd
}

/// A directory with a space in its name, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("rivet {what} {}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn spawned_children_run_see_their_job_and_end_with_it() {
    let _serial = serial();
    let wdir = TempDir::new("spawn wdir");
    let o = run_job(
        check(&["-n", "2", "-l"], &["spawn", "3", wdir.path()]),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let cwd = wdir.0.canonicalize().unwrap();
    for (index, appnum) in [(0, 0), (1, 1), (2, 1)] {
        let line = o
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("[s1:{index}] child {index} of 3 ")))
            .unwrap_or_else(|| panic!("no line from child {index}\n{}", o.show()));
        assert!(line.contains(&format!(" appnum {appnum} ")), "{line}");
        assert!(line.contains("_s1 port port-of-rivet_"), "{line}");
        assert!(line.ends_with(&format!(" cwd {}", cwd.display())), "{line}");
        assert!(
            o.stdout
                .contains(&format!("[s1:{index}] child OK rank {index}\n")),
            "{}",
            o.show()
        );
    }
    for rank in 0..2 {
        assert!(
            o.stdout
                .contains(&format!("[{rank}] parent OK rank {rank}\n")),
            "{}",
            o.show()
        );
    }
    assert!(
        o.stdout.contains("[0] spawned 3 from rivet_"),
        "{}",
        o.show()
    );
    assert!(
        o.stderr
            .contains("warning: spawn info key 'soft' is not supported by rivetrun; ignored"),
        "{}",
        o.show()
    );
}

/// Over PMI-2, rivetrun's `spawn-response` names the new job (`jobid`):
/// the parent is told the KVS name its children find themselves in.
#[test]
fn a_pmi2_spawn_response_names_the_children_s_job() {
    let _serial = serial();
    let wdir = TempDir::new("pmi2 spawn wdir");
    let o = run_job(
        check(
            &["-n", "1", "-genv", "RIVET_PMI", "pmi2"],
            &["spawn", "2", wdir.path()],
        ),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(0), "{}", o.show());
    let job = o
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("spawned 2 from ")?.split_once(" as job "))
        .map(|(_, job)| job.to_string())
        .unwrap_or_else(|| panic!("no job named to the parent\n{}", o.show()));
    assert!(job.ends_with("_s1"), "{job}");
    for index in 0..2 {
        assert!(
            o.stdout
                .lines()
                .any(|l| l.starts_with(&format!("child {index} of 2 "))
                    && l.contains(&format!(" kvs {job} "))),
            "child {index} is not in {job}\n{}",
            o.show()
        );
    }
}

#[test]
fn spawned_processes_may_spawn_again() {
    let _serial = serial();
    let o = run_job(check(&["-n", "1"], &["nested"]), DEADLINE);
    assert_eq!(o.code(), Some(0), "{}", o.show());
    assert!(o.stdout.contains("nest OK rank 0\n"), "{}", o.show());
    let grandchild = o
        .stdout
        .lines()
        .find(|l| l.starts_with("child 0 of 1 "))
        .unwrap_or_else(|| panic!("no grandchild\n{}", o.show()));
    assert!(
        grandchild.contains("_s2 port port-of-rivet_"),
        "{grandchild}"
    );
    assert!(grandchild.contains("_s1 cwd"), "{grandchild}");
}

/// A spawn that cannot start is refused as a whole, with one code per
/// process and a clear message; the parent goes on and the job succeeds.
#[test]
fn failed_spawns_are_refused_per_process_and_the_parent_goes_on() {
    let _serial = serial();
    let missing_dir = std::env::temp_dir().join("rivet-no-such-wdir");
    let missing_dir = missing_dir.to_str().unwrap();
    // (mode, what stdout must say)
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["missing"],
            &[
                "spawn failed: codes [0, 127, 127]: ",
                "cannot execute '/nonexistent/rivet-no-such-program': not found",
            ],
        ),
        (
            &["badhost"],
            &[
                "spawn failed: codes [2, 2]: ",
                "host elsewhere.invalid: rivetrun starts processes on this machine only",
            ],
        ),
        (
            &["badwdir", missing_dir],
            &[
                "spawn failed: codes [2]: ",
                "rivet-no-such-wdir' does not exist or is not a directory",
            ],
        ),
    ];
    for (mode, messages) in cases {
        let o = run_job(check(&["-n", "2"], mode), DEADLINE);
        assert_eq!(o.code(), Some(0), "{mode:?}: {}", o.show());
        for message in *messages {
            assert!(
                o.stdout.contains(message),
                "{mode:?}: expected {message:?}\n{}",
                o.show()
            );
        }
        assert!(
            o.stderr
                .contains("rivetrun: spawn requested by rank 0 failed: "),
            "{mode:?}: {}",
            o.show()
        );
        // All or nothing: not one child ran.
        assert!(!o.stdout.contains("child"), "{mode:?}: {}", o.show());
        assert_eq!(
            o.stdout.matches("parent OK rank").count(),
            2,
            "{mode:?}: {}",
            o.show()
        );
    }
}

#[test]
fn a_failing_spawned_process_fails_the_job() {
    let _serial = serial();
    let o = run_job(check(&["-n", "1"], &["childfail", "2", "1", "3"]), DEADLINE);
    assert_eq!(o.code(), Some(3), "{}", o.show());
    assert!(o.stdout.contains("child 1 exits with 3"), "{}", o.show());
    assert!(
        o.stderr.contains("spawned process 1 of rivet_")
            && o.stderr.contains("_s1 exited with code 3"),
        "{}",
        o.show()
    );
}

/// The parent fails while its children run: they are torn down with it
/// (the harness fails the test if any of them outlives rivetrun).
#[test]
fn children_do_not_outlive_a_failed_job() {
    let _serial = serial();
    let o = run_job(
        check(&["-n", "1", "--kill-grace", "1"], &["orphan"]),
        DEADLINE,
    );
    assert_eq!(o.code(), Some(5), "{}", o.show());
    assert!(
        o.stderr
            .contains("rank 0 exited with code 5; terminating the other 2 spawned process(es)"),
        "{}",
        o.show()
    );
}

/// `rivetrun --name-server` in the background, tagged for the leak check.
struct NameServer {
    child: Child,
    addr: String,
    tag: String,
}

impl NameServer {
    fn start() -> NameServer {
        let tag = format!("name-server-{}", std::process::id());
        let mut child = rivetrun(&["--name-server"])
            .env("RIVET_TEST_TAG", &tag)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting rivetrun --name-server");
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
        let addr = line.trim().to_string();
        let server = NameServer { child, addr, tag };
        let (host, port) = server
            .addr
            .rsplit_once(':')
            .unwrap_or_else(|| panic!("the name server printed {line:?}, not HOST:PORT"));
        assert_eq!(host, hostname(), "HOST is this machine's name");
        assert!(port.parse::<u16>().is_ok_and(|p| p > 0), "{line:?}");
        server
    }

    /// SIGTERM, then the exit status within a deadline.
    fn stop(mut self) -> Option<i32> {
        // SAFETY: kill(2) takes no pointers.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the name server ignores SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for NameServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        assert!(
            std::thread::panicking() || tagged_processes(&self.tag).is_empty(),
            "the name server outlived its test"
        );
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

fn name_job(launcher_args: &[&str], op: &[&str]) -> Outcome {
    let mut mode = vec!["name"];
    mode.extend_from_slice(op);
    let o = run_job(check(launcher_args, &mode), DEADLINE);
    assert_eq!(o.code(), Some(0), "{op:?}: {}", o.show());
    o
}

#[test]
fn a_name_server_lets_separate_jobs_find_each_other() {
    let _serial = serial();
    let server = NameServer::start();
    let addr = server.addr.clone();
    let with = ["--nameserver", addr.as_str(), "-n", "2"];
    let hydra_spelling = ["-nameserver", addr.as_str(), "-n", "1"];
    // (launcher args, operation, what the job must print)
    let steps: &[(&[&str], &[&str], &str)] = &[
        (
            &with,
            &["publish", "ocean", "tag#0$port#7$"],
            "name publish ocean -> ok \n",
        ),
        (
            &hydra_spelling,
            &["lookup", "ocean"],
            "name lookup ocean -> ok tag#0$port#7$\n",
        ),
        (
            &with,
            &["publish", "ocean", "other"],
            "name publish ocean -> error rc=1 msg=key_already_present\n",
        ),
        (
            &with,
            &["lookup", "sea"],
            "name lookup sea -> error rc=1 msg=service_not_found\n",
        ),
    ];
    for (args, op, want) in steps {
        let o = name_job(args, op);
        assert!(o.stdout.contains(want), "{op:?}: {}", o.show());
    }
    // Garbage closes that connection only; the server goes on.
    let mut garbage = TcpStream::connect(addr.as_str()).unwrap();
    garbage
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    garbage.write_all(b"hello there\n").unwrap();
    let mut rest = Vec::new();
    let _ = garbage.read_to_end(&mut rest);
    // A raw client, several requests on one connection.
    let mut raw = TcpStream::connect(addr.as_str()).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw.write_all(b"cmd=lookup_name service=ocean\ncmd=lookup_name service=sea\n")
        .unwrap();
    let mut reader = BufReader::new(raw);
    let mut answers = String::new();
    for _ in 0..2 {
        reader.read_line(&mut answers).unwrap();
    }
    assert_eq!(
        answers,
        "cmd=lookup_result rc=0 port=tag#0$port#7$\n\
         cmd=lookup_result rc=1 msg=service_not_found\n"
    );
    drop(reader);
    // RIVET_NAMESERVER does what --nameserver does.
    let mut cmd = check(&["-n", "1"], &["name", "unpublish", "ocean"]);
    cmd.env("RIVET_NAMESERVER", &addr);
    let o = run_job(cmd, DEADLINE);
    assert!(
        o.stdout.contains("name unpublish ocean -> ok \n"),
        "{}",
        o.show()
    );
    let o = name_job(&with, &["lookup", "ocean"]);
    assert!(
        o.stdout
            .contains("name lookup ocean -> error rc=1 msg=service_not_found\n"),
        "{}",
        o.show()
    );
    assert_eq!(server.stop(), Some(0), "the name server's exit code");
}

#[test]
fn an_unreachable_name_server_is_an_error_not_a_hang() {
    let _serial = serial();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let o = name_job(&["--nameserver", &addr], &["lookup", "ocean"]);
    assert!(
        o.stdout.contains(
            "name lookup ocean -> error rc=1 msg=name_server_error: cannot connect to name server"
        ),
        "{}",
        o.show()
    );
    assert!(
        o.stderr
            .contains(&format!("rivetrun: cannot connect to name server {addr}")),
        "{}",
        o.show()
    );
    // A malformed address is a usage error before anything starts.
    let mut cmd = check(&["-n", "1"], &["name", "lookup", "ocean"]);
    cmd.env("RIVET_NAMESERVER", "no-port-here");
    let o = run_job(cmd, DEADLINE);
    assert_eq!(o.code(), Some(2), "{}", o.show());
    assert!(o.stderr.contains("RIVET_NAMESERVER"), "{}", o.show());
}
