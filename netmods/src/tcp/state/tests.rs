use super::*;

/// A HELLO's target: (rank, job).
type Target<'a> = (u64, &'a [u8]);

fn sock_pair() -> (OwnedFd, OwnedFd) {
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    (a.into(), b.into())
}

/// Feeds a HELLO from `rank` of `job` to a fresh acceptor socket.
fn hello_from(st: &mut State, rank: u64, job: &[u8]) -> (u32, Verdict) {
    hello_kind(st, KIND_RANK, rank, job)
}

fn hello_kind(st: &mut State, kind: u8, id: u64, job: &[u8]) -> (u32, Verdict) {
    hello_auth(st, kind, id, job, &[0; wire::HELLO_AUTH])
}

fn hello_auth(
    st: &mut State,
    kind: u8,
    id: u64,
    job: &[u8],
    auth: &[u8; wire::HELLO_AUTH],
) -> (u32, Verdict) {
    let (fd, _other) = sock_pair();
    let slot = st.add_acceptor(fd);
    let mut b = [0u8; HELLO_MAX];
    let n = wire::encode_hello(&mut b, kind, id, job, auth);
    let s = st.sock(slot).unwrap();
    s.hs.inb[..n].copy_from_slice(&b[..n]);
    st.hs_received(slot, n);
    let s = st.sock(slot).unwrap();
    let v = wire::parse_verdict(s.hs_pending()).unwrap();
    (slot, v)
}

/// A stranger opening sockets and saying nothing holds at most
/// `max_awaiting` of them: the oldest silent one goes; ranks that sent
/// their HELLO are never touched.
#[test]
fn silent_sockets_are_capped_oldest_first() {
    let mut st = State::new(0, b"job");
    st.max_awaiting = 4;
    let (ranked, v) = hello_from(&mut st, 1, b"job");
    assert_eq!(v, Verdict::Accept);
    let mut keep = Vec::new();
    let mut silent = Vec::new();
    for _ in 0..10 {
        let (fd, other) = sock_pair();
        keep.push(other);
        silent.push(st.add_acceptor(fd));
    }
    let waiting = silent
        .iter()
        .filter(|&&s| st.sock(s).is_some_and(|s| s.phase == Phase::AwaitHello))
        .count();
    assert_eq!(waiting, 4);
    assert_eq!(st.evicted, 6);
    for &s in &silent[6..] {
        assert_eq!(
            st.sock(s).unwrap().phase,
            Phase::AwaitHello,
            "the newest stay"
        );
    }
    assert_ne!(st.sock(ranked).unwrap().phase, Phase::Closing);
    assert!(st.failures.is_empty());
}

#[test]
fn a_silent_acceptor_closes_only_after_its_deadline() {
    let mut st = State::new(0, b"job");
    let (fd, _other) = sock_pair();
    let slot = st.add_acceptor(fd);
    assert!(!st.hello_overdue(slot), "a fresh socket has time left");
    assert_eq!(st.sock(slot).unwrap().phase, Phase::AwaitHello);
    st.hs_timeout = Duration::ZERO;
    // A socket that did send its HELLO is never expired.
    let (done, v) = hello_from(&mut st, 1, b"job");
    assert_eq!(v, Verdict::Accept);
    assert_eq!(st.expire_handshakes(), 1);
    assert_eq!(st.sock(slot).unwrap().phase, Phase::Closing);
    assert_ne!(st.sock(done).unwrap().phase, Phase::Closing);
    assert_eq!((st.expired, st.live), (1, 1));
    assert!(st.failures.is_empty(), "a stranger is no peer to fail");
}

#[test]
fn a_cut_handshake_redials_then_fails() {
    let mut st = State::new(0, b"job");
    let addr: SocketAddr = ([127, 0, 0, 1], 9).into();
    let peer = 1;
    st.peers.insert(
        peer,
        Peer {
            addrs: vec![addr],
            ..Peer::default()
        },
    );
    let mut slot = st.add_connector(peer, 0, true, None).unwrap();
    for round in 0..=MAX_REDIALS {
        st.connected(slot);
        assert!(matches!(st.sock(slot).unwrap().phase, Phase::Hello { .. }));
        st.sock_failed(slot, "connection closed during the handshake".into());
        assert_eq!(st.sock(slot).unwrap().phase, Phase::Closing);
        if round == MAX_REDIALS {
            break;
        }
        assert!(st.peers[&peer].failed.is_none(), "round {round}");
        slot = st.redial.pop().expect("a new connect to issue");
        assert!(st.redial.is_empty());
        let s = st.sock(slot).unwrap();
        assert_eq!(
            (s.phase, s.peer),
            (Phase::Connecting { addr: 0 }, Some(peer))
        );
        let id = st.sock(slot).unwrap().id(slot);
        assert_eq!(st.peers[&peer].mine, Some(id));
    }
    let why = st.peers[&peer]
        .failed
        .clone()
        .expect("failed after the redials");
    assert!(why.contains("closed during the handshake"), "{why}");
    assert!(st.redial.is_empty());
}

#[test]
fn sockets_get_keepalive_unless_turned_off() {
    let any: SocketAddr = ([127, 0, 0, 1], 0).into();
    let mut st = State::new(0, b"job");
    st.keepalive = Some(Duration::from_secs(20));
    let slot = st.add_acceptor(sys::tcp_socket(&any, true).unwrap());
    let fd = st.sock(slot).unwrap().fd.as_raw_fd();
    assert_eq!(sys::keepalive_of(fd).unwrap(), (true, 10));
    st.keepalive = None;
    let slot = st.add_acceptor(sys::tcp_socket(&any, true).unwrap());
    let fd = st.sock(slot).unwrap().fd.as_raw_fd();
    assert!(!sys::keepalive_of(fd).unwrap().0);
}

#[test]
fn tie_break_lower_rank_wins() {
    // Within one job, exactly as before groups: ranks decide.
    // Rank 1 has a pending connection to 0 and to 2.
    let mut st = State::new(1, b"job");
    for q in [0, 2] {
        st.peers.insert(
            q,
            Peer {
                addrs: vec!["127.0.0.1:9".parse().unwrap()],
                ..Peer::default()
            },
        );
        st.peers.get_mut(&q).unwrap().started = true;
        st.add_connector(q, 0, true, None).unwrap();
    }
    // 0 < 1: its connection wins; 2 > 1: ours wins, reject.
    assert_eq!(hello_from(&mut st, 0, b"job").1, Verdict::Accept);
    assert_eq!(hello_from(&mut st, 2, b"job").1, Verdict::Duplicate);
    // Another connection from 0 is a duplicate; other jobs and self are refused.
    assert_eq!(hello_from(&mut st, 0, b"job").1, Verdict::Duplicate);
    assert_eq!(hello_from(&mut st, 5, b"other").1, Verdict::OtherJob);
    assert_eq!(hello_from(&mut st, 1, b"job").1, Verdict::Unsupported);
    // A stranger with no connection of ours is accepted.
    assert_eq!(hello_from(&mut st, 9, b"job").1, Verdict::Accept);
    assert!(st.failures.is_empty());
}

#[test]
fn with_a_job_secret_a_rank_hello_of_our_job_must_prove_it() {
    let key = JobKey::new([7; 16]);
    let mut st = State::new(1, b"job");
    st.key = Some(key);
    st.jobs.add(1, b"other").unwrap();
    // A stranger naming our job: no MAC, a MAC for another target,
    // another key, a MAC over another rank: all refused.
    let wrong_key = JobKey::new([8; 16]);
    let job = &b"job"[..];
    let cases: [(Option<&JobKey>, u64, Option<Target>); 5] = [
        (None, 0, None),
        (Some(&key), 0, Some((2, job))),
        (Some(&wrong_key), 0, Some((1, job))),
        (Some(&key), 3, Some((1, job))),
        (Some(&key), 0, Some((1, b"other"))),
    ];
    for (k, signer, target) in cases {
        let mut auth = wire::hello_auth(k, KIND_RANK, signer, target, b"job");
        if signer == 3 {
            // Signed as rank 3, sent as rank 0.
            auth = wire::hello_auth(k, KIND_RANK, 3, target, b"job");
        }
        assert_eq!(
            hello_auth(&mut st, KIND_RANK, 0, b"job", &auth).1,
            Verdict::Unsupported,
            "signer {signer} target {target:?}"
        );
    }
    assert!(st.peers.get(&0).is_none_or(|p| p.conn.is_none()));
    // The real rank 0, proving it to us (rank 1): accepted.
    let auth = wire::hello_auth(Some(&key), KIND_RANK, 0, Some((1, job)), b"job");
    assert_eq!(
        hello_auth(&mut st, KIND_RANK, 0, b"job", &auth).1,
        Verdict::Accept
    );
    // Another job without a group key (started without a secret):
    // nothing to check.
    assert_eq!(hello_from(&mut st, 4, b"other").1, Verdict::Accept);
    // Without a secret, as before: a rank HELLO without a MAC is taken.
    let mut plain = State::new(1, b"job");
    assert_eq!(hello_from(&mut plain, 0, b"job").1, Verdict::Accept);
}

/// Between jobs: once the group description gave us the other job's
/// group key, its rank HELLOs must carry that key's MAC; its job
/// secret, our own key, our group key or a MAC for another target do
/// not do, so knowing the job's name (or having been connected to it
/// once) does not let anyone pose as one of its ranks.
#[test]
fn a_rank_of_another_job_proves_its_group_key() {
    let ours = JobKey::new([7; 16]);
    let theirs = JobKey::new([9; 16]);
    let mut st = State::new(1, b"job");
    st.key = Some(ours);
    st.jobs.add(3, b"other").unwrap();
    st.jobs.set_key(3, theirs.group_key()).unwrap();
    let job = &b"job"[..];
    let forged: [(Option<JobKey>, Option<Target>); 6] = [
        (None, None),
        (Some(theirs), Some((1, job))),
        (Some(ours), Some((1, job))),
        (Some(ours.group_key()), Some((1, job))),
        (Some(theirs.group_key()), Some((2, job))),
        (Some(theirs.group_key()), Some((1, b"else"))),
    ];
    for (i, (k, target)) in forged.iter().enumerate() {
        let auth = wire::hello_auth(k.as_ref(), KIND_RANK, 0, *target, b"other");
        assert_eq!(
            hello_auth(&mut st, KIND_RANK, 0, b"other", &auth).1,
            Verdict::Unsupported,
            "case {i}"
        );
    }
    assert!(!st.peers.contains_key(&peer_id(3, 0)));
    let auth = wire::hello_auth(
        Some(&theirs.group_key()),
        KIND_RANK,
        0,
        Some((1, job)),
        b"other",
    );
    assert_eq!(
        hello_auth(&mut st, KIND_RANK, 0, b"other", &auth).1,
        Verdict::Accept
    );
    assert!(st.peers.contains_key(&peer_id(3, 0)));
}

/// Our HELLO to a rank of an added job carries our group key's MAC
/// for that rank and job, which its acceptor (holding our group key)
/// takes.
#[test]
fn our_hello_to_another_job_is_proven_with_our_group_key() {
    let ours = JobKey::new([7; 16]);
    let mut st = State::new(2, b"job");
    st.key = Some(ours);
    st.jobs.add(5, b"other").unwrap();
    let slot = connecting(&mut st, peer_id(5, 1));
    st.connected(slot);
    let s = st.sock(slot).unwrap();
    let sent = s.hs.out[..s.hs.out_len].to_vec();
    let mut acceptor = State::new(1, b"other");
    acceptor.key = Some(JobKey::new([9; 16]));
    acceptor.jobs.add(4, b"job").unwrap();
    // With another key the acceptor refuses; with ours it accepts.
    for (key, want) in [
        (JobKey::new([1; 16]), Verdict::Unsupported),
        (ours.group_key(), Verdict::Accept),
    ] {
        acceptor.jobs.set_key(4, key).unwrap();
        let (fd, _other) = sock_pair();
        let a2 = acceptor.add_acceptor(fd);
        let s = acceptor.sock(a2).unwrap();
        s.hs.inb[..sent.len()].copy_from_slice(&sent);
        acceptor.hs_received(a2, sent.len());
        let v = acceptor.sock(a2).unwrap().hs.out[8];
        assert_eq!(v, want as u8);
    }
}

/// A pending connection of ours to `peer`.
fn connecting(st: &mut State, peer: PeerId) -> u32 {
    st.peers.insert(
        peer,
        Peer {
            addrs: vec!["127.0.0.1:9".parse().unwrap()],
            ..Peer::default()
        },
    );
    st.peers.get_mut(&peer).unwrap().started = true;
    st.add_connector(peer, 0, true, None).unwrap()
}

/// The acceptor's verdict on `slot` is written.
fn verdict_sent(st: &mut State, slot: u32) {
    let n = st.sock(slot).unwrap().hs_pending().len();
    st.hs_sent(slot, n);
}

#[test]
fn tie_break_across_jobs_compares_job_then_rank() {
    // Rank 0 of "jobA" and rank 0 of "jobB" connect to each other:
    // "jobA" < "jobB", so A's connection wins on both sides.
    let mut a = State::new(0, b"jobA");
    a.jobs.add(1, b"jobB").unwrap();
    connecting(&mut a, peer_id(1, 0));
    let mut b = State::new(0, b"jobB");
    b.jobs.add(1, b"jobA").unwrap();
    connecting(&mut b, peer_id(1, 0));
    assert_eq!(hello_from(&mut a, 0, b"jobB").1, Verdict::Duplicate);
    let (slot, v) = hello_from(&mut b, 0, b"jobA");
    assert_eq!(v, Verdict::Accept);
    assert_eq!(b.sock(slot).unwrap().peer, Some(peer_id(1, 0)));
    // The job decides before the rank: rank 5 of "jobA" still beats
    // rank 0 of "jobB"; rank 0 of "jobC" loses to rank 3 of "jobB".
    let mut b = State::new(0, b"jobB");
    b.jobs.add(1, b"jobA").unwrap();
    b.jobs.add(2, b"jobC").unwrap();
    connecting(&mut b, peer_id(1, 5));
    connecting(&mut b, peer_id(2, 0));
    assert_eq!(hello_from(&mut b, 5, b"jobA").1, Verdict::Accept);
    assert_eq!(hello_from(&mut b, 0, b"jobC").1, Verdict::Duplicate);
    // Without a connection of ours, anyone of a known job is accepted;
    // a rank equal to ours is not a self-connection in another job.
    assert_eq!(hello_from(&mut b, 7, b"jobC").1, Verdict::Accept);
    assert!(b.peers[&peer_id(2, 7)].conn.is_some());
    assert_eq!(hello_from(&mut b, 1 << 32, b"jobC").1, Verdict::Unsupported);
    // Unknown and removed jobs are another job.
    assert_eq!(hello_from(&mut b, 0, b"jobD").1, Verdict::OtherJob);
    b.jobs.remove(2);
    assert_eq!(hello_from(&mut b, 9, b"jobC").1, Verdict::OtherJob);
    assert!(b.failures.is_empty());
}

#[derive(Default)]
struct Events(Vec<String>);

impl Sink for Events {
    fn deliver(&mut self, peer: PeerId, h: &[u8], _: &[u8]) {
        self.0.push(format!("deliver {peer:x} {h:?}"));
    }
    fn peer_failed(&mut self, peer: PeerId, _: &str) {
        self.0.push(format!("failed {peer:x}"));
    }
    fn port_connection(&mut self, peer: PeerId, tag: u64) {
        self.0.push(format!("port {peer:x} {tag}"));
    }
}

#[test]
fn port_hellos_are_new_temporary_peers_announced_first() {
    let mut st = State::new(0, b"job");
    // Any job, any number of times, even with a rank connection to the
    // same process and an identical tag: always accepted, never a duplicate.
    connecting(&mut st, 1);
    let (s1, v1) = hello_kind(&mut st, KIND_PORT, 77, b"job");
    let (s2, v2) = hello_kind(&mut st, KIND_PORT, 77, b"other");
    assert_eq!((v1, v2), (Verdict::Accept, Verdict::Accept));
    let p1 = st.sock(s1).unwrap().peer.unwrap();
    let p2 = st.sock(s2).unwrap().peer.unwrap();
    assert_eq!(p1, peer_id(TEMP_GROUP, 0));
    assert_eq!(p2, peer_id(TEMP_GROUP, 1));
    assert_eq!(st.peer_count(), 3);
    assert_eq!(hello_kind(&mut st, 9, 0, b"job").1, Verdict::Unsupported);
    // A frame arriving with the HELLO's verdict still going out: the
    // announcements come first.
    let mut frame = wire::encode_prefix(1, 0).to_vec();
    frame.push(42);
    let (ptr, room) = st.sock(s2).unwrap().recv_target().unwrap();
    assert!(room >= frame.len());
    // SAFETY: recv_target gives `room` writable bytes.
    unsafe { std::ptr::copy_nonoverlapping(frame.as_ptr(), ptr, frame.len()) };
    let mut ev = Events::default();
    assert_eq!(st.rx_data(s2, frame.len(), &mut ev), 1);
    st.report(&mut ev);
    assert_eq!(
        ev.0,
        [
            format!("port {p1:x} 77"),
            format!("port {p2:x} 77"),
            format!("deliver {p2:x} [42]")
        ]
    );
    // Our own port connection sends a port HELLO with the tag.
    let me = st.add_port_peer(vec!["127.0.0.1:9".parse().unwrap()], 5);
    assert_eq!(me, peer_id(TEMP_GROUP, 2));
    let slot = st.add_connector(me, 0, true, None).unwrap();
    st.connected(slot);
    match wire::parse_hello(st.sock(slot).unwrap().hs_pending()) {
        Hello::Done { kind, id, job, .. } => {
            assert_eq!((kind, id, job), (KIND_PORT, 5, &b"job"[..]))
        }
        h => panic!("{h:?}"),
    }
    // Refused (never a duplicate for a port): the peer fails.
    let s = st.sock(slot).unwrap();
    s.hs.inb[..VERDICT_LEN].copy_from_slice(&wire::encode_verdict(Verdict::Duplicate));
    st.hs_received(slot, VERDICT_LEN);
    let s = st.release(slot).unwrap();
    st.finish(s);
    assert_eq!(st.failures.len(), 1);
    assert_eq!(st.failures[0].0, me);
}

#[test]
fn disconnect_detaches_and_keeps_the_queue() {
    let mut st = State::new(0, b"j");
    let (slot, _) = hello_from(&mut st, 3, b"j");
    verdict_sent(&mut st, slot);
    st.peers.get_mut(&3).unwrap().out.push(b"h", b"data", 0);
    assert_eq!(st.peer_count(), 1);
    st.disconnect(3);
    assert!(!st.peers.contains_key(&3));
    assert_eq!(st.peer_count(), 0);
    let s = st.sock(slot).unwrap();
    assert!(s.detached && s.peer.is_none() && s.phase == Phase::Open);
    assert_eq!(s.drain.len(), wire::PREFIX + 5);
    assert!(!st.drained());
    // Input is dropped, and its end closes the socket without a report.
    let mut ev = Events::default();
    assert_eq!(st.rx_data(slot, 10, &mut ev), 0);
    st.sock_failed(slot, "connection closed by the peer".into());
    let s = st.release(slot).unwrap();
    st.finish(s);
    assert!(st.failures.is_empty() && ev.0.is_empty());
    st.disconnect(3); // unknown now: a no-op

    // A failed peer: its report is dropped, the count restored.
    let (slot, _) = hello_from(&mut st, 4, b"j");
    verdict_sent(&mut st, slot);
    st.sock_failed(slot, "reset".into());
    assert_eq!(st.peer_count(), 0);
    st.disconnect(4);
    let s = st.release(slot).unwrap();
    st.finish(s);
    assert!(st.failures.is_empty());
    assert_eq!(st.peer_count(), 0);
    assert!(st.peers.is_empty());

    // A pending connect with queued data goes on, detached; without
    // data it is just closed.
    let slot = connecting(&mut st, 5);
    st.peers.get_mut(&5).unwrap().out.push(b"h", b"", 0);
    st.disconnect(5);
    let s = st.sock(slot).unwrap();
    assert!(s.detached && matches!(s.phase, Phase::Connecting { .. }));
    st.connected(slot);
    let s = st.sock(slot).unwrap();
    s.hs.inb[..VERDICT_LEN].copy_from_slice(&wire::encode_verdict(Verdict::Accept));
    st.hs_received(slot, VERDICT_LEN);
    assert_eq!(st.sock(slot).unwrap().phase, Phase::Open);
    assert!(!st.peers.contains_key(&5));
    let slot = connecting(&mut st, 6);
    st.disconnect(6);
    assert_eq!(st.sock(slot).unwrap().phase, Phase::Closing);
}

#[test]
fn failure_reported_once_after_release() {
    let mut st = State::new(0, b"j");
    let (slot, v) = hello_from(&mut st, 3, b"j");
    assert_eq!(v, Verdict::Accept);
    let n = st.sock(slot).unwrap().hs_pending().len();
    st.hs_sent(slot, n);
    assert_eq!(st.open, [slot]);
    st.sock_failed(slot, "reset".into());
    st.sock_failed(slot, "again".into());
    assert!(st.failures.is_empty(), "not before release");
    let s = st.release(slot).unwrap();
    st.finish(s);
    assert_eq!(st.failures, [(3, "reset".to_string())]);
    assert!(st.open.is_empty());
    assert!(st.peers[&3].failed.is_some());
}
