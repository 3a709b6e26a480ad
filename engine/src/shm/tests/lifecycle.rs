//! The shm segment's life and set-up: names unlinked once all attached, bad
//! arguments, attach checks and settings.

use super::*;

#[test]
fn a_rank_leaving_before_all_attached_takes_the_name_away() {
    let name = Name::new("leave");
    let a = ShmNode::create(&name.0, 3, 0, &small()).unwrap();
    let b = ShmNode::attach(&name.0, 3, 1).unwrap();
    assert!(name.exists());
    drop(b);
    assert!(
        !name.exists(),
        "rank 2 never came: the name must not outlive the job"
    );
    drop(a);
}

#[test]
fn a_rank_leaving_early_waits_for_a_slow_peer_to_attach() {
    let name = Name::new("slow");
    let a = ShmNode::create(&name.0, 2, 0, &small()).unwrap();
    let late = {
        let n = name.0.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            ShmNode::attach(&n, 2, 1)
        })
    };
    // Rank 0 is done before rank 1 started: its leaving must not take the
    // segment away from rank 1.
    drop(a);
    let b = late.join().unwrap();
    assert!(b.is_ok(), "the slow rank could not attach: {:?}", b.err());
    assert!(!name.exists(), "the last to attach unlinks the name");
}

#[test]
fn name_is_unlinked_once_all_attached() {
    let name = Name::new("unlink");
    let a = ShmNode::create(&name.0, 3, 0, &small()).unwrap();
    assert!(name.exists());
    let b = ShmNode::attach(&name.0, 3, 2).unwrap();
    assert!(name.exists());
    // The same local rank twice is refused.
    let e = ShmNode::attach(&name.0, 3, 2).unwrap_err();
    assert!(matches!(e, ShmError::AlreadyAttached { .. }), "{e}");
    let c = ShmNode::attach(&name.0, 3, 1).unwrap();
    assert!(!name.exists());
    assert_eq!(a.peer_pid(1), std::process::id());
    assert_eq!(c.peer_pid(2), std::process::id());
    assert_eq!(b.peer_pid(7), 0);
    assert_eq!(b.config(), &small());
    // A node of one unlinks at once.
    let one = Name::new("one");
    let _n = ShmNode::create(&one.0, 1, 0, &small()).unwrap();
    assert!(!one.exists());
}

#[test]
fn create_on_existing_name_fails_clearly() {
    let name = Name::new("exists");
    let _a = ShmNode::create(&name.0, 2, 0, &small()).unwrap();
    let e = ShmNode::create(&name.0, 2, 0, &small()).unwrap_err();
    assert!(matches!(e, ShmError::Exists { .. }), "{e}");
    assert!(e.to_string().contains(&name.0), "{e}");
    // The failed create must not remove the first one's file.
    assert!(name.exists());
}

#[test]
fn bad_arguments() {
    let name = Name::new("args");
    let e = ShmNode::create(&name.0, 2, 2, &small()).unwrap_err();
    assert!(matches!(e, ShmError::BadRank { .. }), "{e}");
    let e = ShmNode::create(&name.0, 0, 0, &small()).unwrap_err();
    assert!(matches!(e, ShmError::BadLocalSize(0)), "{e}");
    let e = ShmNode::create("a/b", 2, 0, &small()).unwrap_err();
    assert!(matches!(e, ShmError::Name { .. }), "{e}");
    let bad = ShmConfig {
        cell_bytes: 1000,
        ..small()
    };
    let e = ShmNode::create(&name.0, 2, 0, &bad).unwrap_err();
    assert!(e.to_string().contains("RIVET_SHM_CELL_SIZE"), "{e}");
    assert!(!name.exists());
    let e = ShmNode::attach(&name.0, 2, 1).unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
}

fn write_file(name: &Name, bytes: &[u8]) {
    use std::os::unix::fs::PermissionsExt;
    let path = Path::new("/dev/shm").join(&name.0);
    std::fs::write(&path, bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Attach checks the segment before mapping it: a segment others may
/// read or write, or one another user owns, is refused (someone could
/// have planted it under our name, or write into our queues); once it is
/// ours and 0600 again it attaches.
#[test]
fn attach_checks_the_segments_owner_and_mode() {
    use std::os::unix::fs::PermissionsExt;
    let name = Name::new("owner");
    let _a = ShmNode::create(&name.0, 2, 0, &small()).unwrap();
    let path = Path::new("/dev/shm").join(&name.0);
    let mode = |m: u32| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m));
    for m in [0o644, 0o606, 0o660, 0o666] {
        mode(m).unwrap();
        let e = ShmNode::attach(&name.0, 2, 1).unwrap_err();
        assert!(matches!(e, ShmError::Untrusted { .. }), "mode {m:o}: {e}");
        assert!(e.to_string().contains("mode"), "{e}");
    }
    mode(0o600).unwrap();
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    // Only root can give a file away; as another user the open itself is
    // refused by the kernel already for 0600 segments.
    if me == 0 {
        std::os::unix::fs::chown(&path, Some(12345), None).unwrap();
        let e = ShmNode::attach(&name.0, 2, 1).unwrap_err();
        assert!(matches!(e, ShmError::Untrusted { .. }), "{e}");
        assert!(e.to_string().contains("uid 12345"), "{e}");
        std::os::unix::fs::chown(&path, Some(me), None).unwrap();
    }
    let _b = ShmNode::attach(&name.0, 2, 1).unwrap();
}

#[test]
fn attach_to_garbage_fails_clearly() {
    let name = Name::new("garbage");
    write_file(&name, b"hello");
    let e = ShmNode::attach(&name.0, 2, 1).unwrap_err();
    assert!(matches!(e, ShmError::TooSmall { .. }), "{e}");
    write_file(&name, &[0x5a; 8192]);
    let e = ShmNode::attach(&name.0, 2, 1).unwrap_err();
    assert!(matches!(e, ShmError::NotASegment { .. }), "{e}");
    write_file(&name, &[]);
    let e = ShmNode::attach(&name.0, 2, 1).unwrap_err();
    assert!(matches!(e, ShmError::TooSmall { .. }), "{e}");

    // A real header, then tampered with.
    let good = Name::new("good");
    let a = ShmNode::create(&good.0, 2, 0, &small()).unwrap();
    let header = |off: usize| a.seg.word(off);
    let e = ShmNode::attach(&good.0, 3, 1).unwrap_err();
    assert!(matches!(e, ShmError::LocalSizeMismatch { .. }), "{e}");
    header(H_VERSION).store(99, Ordering::Relaxed);
    let e = ShmNode::attach(&good.0, 2, 1).unwrap_err();
    assert!(matches!(e, ShmError::Version { found: 99, .. }), "{e}");
    header(H_VERSION).store(VERSION, Ordering::Relaxed);
    header(H_CELL_BYTES).store(1 << 40, Ordering::Relaxed);
    let e = ShmNode::attach(&good.0, 2, 1).unwrap_err();
    assert!(matches!(e, ShmError::BadHeader { .. }), "{e}");
    header(H_CELL_BYTES).store(1 << 20, Ordering::Relaxed);
    let e = ShmNode::attach(&good.0, 2, 1).unwrap_err();
    assert!(matches!(e, ShmError::BadHeader { .. }), "{e}");
    header(H_CELL_BYTES).store(small().cell_bytes as u64, Ordering::Relaxed);
    // Truncated copy of a good segment.
    let bytes = std::fs::read(Path::new("/dev/shm").join(&good.0)).unwrap();
    write_file(&name, &bytes[..bytes.len() / 2]);
    let e = ShmNode::attach(&name.0, 2, 1).unwrap_err();
    assert!(matches!(e, ShmError::TooSmall { .. }), "{e}");
    // And the untouched one still works.
    let _b = ShmNode::attach(&good.0, 2, 1).unwrap();
}

#[test]
fn config_from_lookup() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    assert_eq!(
        ShmConfig::from_lookup(env(&[])).unwrap(),
        ShmConfig::default()
    );
    let c = ShmConfig::from_lookup(env(&[
        ("RIVET_SHM_FASTBOX_SIZE", "64k"),
        ("RIVET_SHM_FASTBOX_MAX", "2048"),
        ("RIVET_SHM_CELLS", "128"),
        ("RIVET_SHM_CELL_SIZE", "64KiB"),
    ]))
    .unwrap();
    assert_eq!(
        c,
        ShmConfig {
            fastbox_bytes: 65536,
            fastbox_max: 2048,
            cells_per_rank: 128,
            cell_bytes: 65536
        }
    );
    assert_eq!(
        ShmConfig::from_lookup(env(&[("RIVET_SHM_FASTBOX_SIZE", "0")]))
            .unwrap()
            .fastbox_bytes,
        0
    );
    for bad in [
        &[("RIVET_SHM_CELLS", "lots")][..],
        &[("RIVET_SHM_CELLS", "0")],
        &[("RIVET_SHM_CELL_SIZE", "1000")],
        &[("RIVET_SHM_FASTBOX_SIZE", "3000")],
        &[("RIVET_SHM_FASTBOX_SIZE", "512")],
        &[("RIVET_SHM_FASTBOX_MAX", "40000")],
    ] {
        let e = ShmConfig::from_lookup(env(bad)).unwrap_err();
        assert!(e.to_string().contains(bad[0].0), "{e}");
    }
}
