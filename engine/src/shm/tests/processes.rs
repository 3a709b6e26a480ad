//! Two real processes on one segment, and CMA between handles.

use super::*;

#[test]
fn cma_probe_between_handles() {
    let name = Name::new("cma");
    let v = nodes(&name, 2, &small());
    // Same process: works wherever process_vm_readv works at all.
    assert_eq!(v[0].cma_probe(1), cma::probe().is_ok());
    assert!(!v[0].cma_probe(5));
}

const CHILD_ENV: &str = "RIVET_SHM_TEST_CHILD";

/// Child half of `two_processes_echo` (does nothing when run normally):
/// attaches as local rank 1, echoes every message back to rank 0 until tag
/// -1, then reports whether it can read rank 0's memory with CMA.
#[test]
fn cross_process_child() {
    let Ok(name) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut node = ShmNode::attach(&name, 2, 1).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut inbox: std::collections::VecDeque<(WireHeader, Vec<u8>)> = Default::default();
    let mut done = false;
    while !(done && inbox.is_empty()) {
        assert!(std::time::Instant::now() < deadline, "child timed out");
        node.poll(64, |p, h, b| {
            assert_eq!(p, 0);
            inbox.push_back((*h, b.to_vec()));
        })
        .unwrap();
        while let Some((h, b)) = inbox.front() {
            if h.tag == -1 {
                done = true;
                inbox.pop_front();
                continue;
            }
            if !node.try_send(0, h, b).unwrap() {
                break;
            }
            inbox.pop_front();
        }
        std::thread::yield_now();
    }
    let cma = node.cma_probe(0) as u8;
    while !node.try_send(0, &hdr(-2, 1), &[cma]).unwrap() {
        node.poll(64, |_, _, _| {}).unwrap();
        std::thread::yield_now();
    }
}

/// Two real processes on one segment: the child echoes random-sized
/// messages (both paths), the parent checks order and bytes.
#[test]
fn two_processes_echo() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let name = Name::new("proc");
    let mut node = ShmNode::create(&name.0, 2, 0, &small()).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "shm::tests::processes::cross_process_child",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &name.0)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    const N: usize = 5_000;
    let max = node.max_payload();
    let mut rng = Rng(42);
    let (mut sent, mut got) = (0, 0);
    let mut cma = None;
    let mut parent_cma = None;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while cma.is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("parent timed out: sent {sent}, got {got}");
        }
        let exited = child.try_wait().unwrap();
        if sent < N {
            let len = (rng.next() % (max as u64 + 1)) as usize;
            let len = if sent % 3 == 0 { len } else { len % 40 };
            if node
                .try_send(1, &hdr(sent as i32, 0), &pattern(0, sent, len))
                .unwrap()
            {
                sent += 1;
            }
        } else if sent == N && node.try_send(1, &hdr(-1, 0), &[]).unwrap() {
            sent += 1;
        }
        let delivered = node
            .poll(32, |p, h, b| {
                assert_eq!(p, 1);
                if h.tag == -2 {
                    cma = Some(b[0] == 1);
                    return;
                }
                assert_eq!(h.tag as usize, got, "echo out of order");
                assert_eq!(b, &pattern(0, got, b.len())[..]);
                got += 1;
            })
            .unwrap();
        // A child that has exited may still have echoes (and its last
        // message) queued: it is early only once they are all drained.
        if let (Some(status), None, 0) = (exited, cma, delivered) {
            panic!("child exited early ({status}): sent {sent}, got {got}");
        }
        if got > 0 && parent_cma.is_none() {
            // The child is attached and alive (it has not seen tag -1 yet).
            parent_cma = Some(node.cma_probe(1));
        }
        std::thread::yield_now();
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(got, N);
    assert!(!name.exists(), "the child's attach must unlink the name");
    assert!(node.stats().cell_sends > 0);
    // The parent may read its child wherever CMA works at all (even with
    // ptrace_scope=1); the child reading its parent may be refused.
    assert_eq!(parent_cma, Some(cma::probe().is_ok()));
    eprintln!("CMA parent->child {parent_cma:?}, child->parent {cma:?}");
}
