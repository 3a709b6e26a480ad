//! A reader of rivetrun's stdout that stops reading stalls only the ranks'
//! output, not rivetrun: while rank 0 prints 8 MB nobody reads, rank 1
//! (which starts only once rank 0 printed 1 MB) is still served PMI (init,
//! its placement, finalize) and finishes. Then the
//! reader reads again, and every byte of rank 0's output arrives.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rivet_tests::{bin, rivetrun, serial};

const DEADLINE: Duration = Duration::from_secs(90);
const PRINTED: usize = 8_000_000;

#[test]
fn a_stalled_stdout_reader_does_not_stop_pmi_serving() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("rivet-test-stall-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let done = dir.join("rank1.done");
    let pmi = bin("pmi_check");
    // Rank 1 starts PMI only once rank 0 has printed 1 MB, more than any
    // pipe holds: by then rivetrun has met the stalled reader.
    let started = dir.join("rank0.started");
    let script = format!(
        "if [ \"$PMI_RANK\" = 0 ]; then {{ head -c 1000000 /dev/zero | tr '\\0' x; \
         touch {started}; head -c {rest} /dev/zero | tr '\\0' x; echo; }}; \
         exec {pmi} topology; \
         else while [ ! -e {started} ]; do sleep 0.05; done; \
         {pmi} topology > {out} 2>&1 && touch {done}; fi",
        rest = PRINTED - 1_000_000,
        started = started.display(),
        pmi = pmi.display(),
        out = dir.join("rank1.out").display(),
        done = done.display(),
    );
    let mut child = rivetrun(&["-n", "2", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rivetrun");
    // Nobody reads stdout until rank 1 is done (or the wait gives up).
    let start = Instant::now();
    while !done.exists() && start.elapsed() < DEADLINE / 3 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let served = done.exists();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        out
    });
    let err_reader = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        err
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > DEADLINE {
            // SAFETY: signalling our own child by its pid.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = reader.join().unwrap();
    let err = err_reader.join().unwrap();
    let rank1 = std::fs::read_to_string(dir.join("rank1.out")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        served,
        "rank 1 was not served PMI while stdout was stalled\nrank 1: {rank1}\nstderr: {err}"
    );
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{err}");
    let text = String::from_utf8_lossy(&out);
    let xs = text
        .lines()
        .find(|l| l.starts_with('x'))
        .map_or(0, |l| l.bytes().filter(|&b| b == b'x').count());
    assert_eq!(xs, PRINTED, "rank 0's output arrived whole\n{err}");
    assert!(text.contains("topo rank 0 "), "{err}");
    assert!(rank1.contains("topo rank 1 "), "{rank1}");
}
