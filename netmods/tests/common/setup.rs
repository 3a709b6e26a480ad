//! Set-up checks both netmods share: group errors, sends refused to an
//! unknown peer or above the limits, and settings read from variables.

use rivet_netmods::{peer_id, Netmod, NetmodError, TEMP_GROUP};

/// `n` (of job "groups", no group added yet) refuses bad groups and
/// connects to groups not added; removing a group leaves its peers alone.
/// `card` is any well-formed card of `n`'s netmod (nothing is sent to it).
pub fn group_errors<N: Netmod>(n: &mut N, card: &str) {
    for (g, job) in [(0, "x"), (TEMP_GROUP, "x"), (1, "groups")] {
        assert!(n.add_group(g, job).is_err(), "{g} {job}");
    }
    assert!(n.add_group(1, &"j".repeat(257)).is_err(), "job id too long");
    n.add_group(1, &"j".repeat(256)).unwrap();
    assert!(n.add_group(1, "other").is_err(), "group added already");
    n.connect(peer_id(1, 3), card).unwrap();
    // Groups not added, and temporary ids, cannot be connected to.
    assert!(matches!(
        n.connect(peer_id(2, 3), card),
        Err(NetmodError::Peer { .. })
    ));
    assert!(matches!(
        n.connect(peer_id(TEMP_GROUP, 0), card),
        Err(NetmodError::Peer { .. })
    ));
    n.remove_group(1);
    n.remove_group(1);
    n.add_group(1, "other").unwrap();
    assert!(n.knows(peer_id(1, 3)), "existing peers are not touched");
    assert_eq!(n.peer_count(), 1);
    n.disconnect(peer_id(1, 3));
    n.disconnect(12345);
    assert_eq!(n.peer_count(), 0);
}

/// `n` knows no peer 1: sending to it fails; once connected to `card`, a
/// payload above the 8 MiB piece or a header above 256 bytes is refused.
pub fn bad_sends_refused<N: Netmod>(n: &mut N, card: &str) {
    assert!(!n.knows(1));
    assert!(matches!(
        n.try_send(1, b"h", b"p"),
        Err(NetmodError::Peer { peer: 1, .. })
    ));
    n.connect(1, card).unwrap();
    let big = vec![0u8; (8 << 20) + 1];
    assert!(
        n.try_send(1, b"h", &big).is_err(),
        "payload above the piece size"
    );
    assert!(
        n.try_send(1, &[0; 257], b"").is_err(),
        "header above 256 bytes"
    );
}

/// Each list of variables in `bad` makes `from_vars` fail with an error
/// that names the list's first variable.
pub fn bad_vars_named<C, E: std::fmt::Display>(
    from_vars: impl Fn(&dyn Fn(&str) -> Option<String>) -> Result<C, E>,
    bad: &[&[(&str, &str)]],
) {
    for &vars in bad {
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        let Err(e) = from_vars(&get) else {
            panic!("{vars:?} accepted");
        };
        let e = e.to_string();
        assert!(e.contains(vars[0].0), "{e}");
    }
}
