//! With io_uring forbidden, as a seccomp filter or `kernel.io_uring_disabled`
//! forbids it, the tcp netmod's `auto` backend (io_uring where allowed)
//! falls back to poll, says why, and still talks to a peer that runs
//! io_uring.
//!
//! The filter (io_uring_setup fails with EPERM) is installed in a thread
//! of its own: seccomp filters apply to the thread that installs them (no
//! TSYNC), so the rest of the test process keeps io_uring.

mod common;

use common::tcp::plain;
use common::*;
use rivet_netmods::tcp::{Backend, TcpNetmod};

/// Makes io_uring_setup fail with EPERM in the calling thread.
fn forbid_io_uring() {
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    let ins = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let filter = [
        // seccomp_data.nr is at offset 0.
        ins(LD_W_ABS, 0, 0, 0),
        ins(JEQ_K, 0, 1, libc::SYS_io_uring_setup as u32),
        ins(RET_K, 0, 0, RET_ERRNO | libc::EPERM as u32),
        ins(RET_K, 0, 0, RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut _,
    };
    // SAFETY: plain prctl calls; `prog` and `filter` outlive them (the
    // kernel copies the program).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog
            ),
            0,
            "seccomp: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[test]
fn forbidden_io_uring_falls_back_to_poll() {
    let (fallback, refused) = std::thread::spawn(|| {
        forbid_io_uring();
        let n = TcpNetmod::new(plain(Backend::Auto), "seccomp", 0).unwrap();
        let refused = TcpNetmod::new(plain(Backend::Uring), "seccomp", 0)
            .err()
            .map(|e| e.to_string());
        (n, refused)
    })
    .join()
    .unwrap();
    assert_eq!(fallback.backend(), Backend::Poll);
    let why = describe(&fallback, "tcp.backend");
    assert!(
        why.starts_with("poll (io_uring unavailable: io_uring_setup: ")
            && why.contains("(os error 1)"),
        "{why}"
    );
    let refused = refused.expect("RIVET_TCP_BACKEND=uring opened without io_uring");
    assert!(
        refused.contains("RIVET_TCP_BACKEND=uring") && refused.contains("(os error 1)"),
        "{refused}"
    );

    // Outside the filter the default is io_uring (where this kernel has
    // it), and it talks to the fallback.
    let other = match TcpNetmod::new(plain(Backend::Auto), "seccomp", 1) {
        Ok(n) => n,
        Err(e) => panic!("{e}"),
    };
    if other.backend() == Backend::Poll {
        let why = describe(&other, "tcp.backend");
        let missing = why.contains("io_uring_setup: ")
            && (why.contains("(os error 1)") || why.contains("(os error 38)"));
        assert!(missing, "io_uring failed here: {why}");
        eprintln!("note: no io_uring in this process either: {why}");
    } else {
        assert!(describe(&other, "tcp.backend").starts_with("uring (auto: "));
    }
    let mut nets = vec![fallback, other];
    let mut sinks = vec![Rec::default(), Rec::default()];
    connect_all(&mut nets);
    for (seq, len) in [(0, 8), (1, 100 << 10)] {
        send(&mut nets, &mut sinks, 0, 1, seq, len);
        send(&mut nets, &mut sinks, 1, 0, seq, len);
    }
    pump(&mut nets, &mut sinks, |_, s| {
        s[0].msgs.len() == 2 && s[1].msgs.len() == 2
    });
    assert_eq!(sinks[1].from(0), expect(0, &[8, 100 << 10]));
    assert_eq!(sinks[0].from(1), expect(1, &[8, 100 << 10]));
    assert!(sinks.iter().all(|s| s.failed.is_empty()));
}
