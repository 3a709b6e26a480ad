//! Tests of `pmix_subset`: what goes to rivetrun and what waits.

use super::*;
use rivet_pmi::pmix_ffi::PmixInfo;
use std::ffi::{c_int, c_void};
use std::io::BufRead;
use std::sync::Mutex;

/// What group completions said: (status, context id if any).
type Seen = Mutex<Vec<(c_int, Option<u64>)>>;

unsafe extern "C" fn seen(
    status: c_int,
    info: *mut PmixInfo,
    n: usize,
    cbdata: *mut c_void,
    release: Option<unsafe extern "C" fn(*mut c_void)>,
    release_data: *mut c_void,
) {
    // SAFETY: `cbdata` is the test's `Seen`; `n` infos at `info`, alive
    // until `release` (called right after they are read).
    unsafe {
        let ctx = (n > 0).then(|| (*info).value.data[0]);
        (*(cbdata as *const Seen))
            .lock()
            .unwrap()
            .push((status, ctx));
        if let Some(r) = release {
            r(release_data);
        }
    }
}

/// An upstream to a socket the test reads as rivetrun.
fn upstream() -> (Upstream, std::io::BufReader<std::net::TcpStream>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = Upstream::new(std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap());
    (up, std::io::BufReader::new(l.accept().unwrap().0))
}

/// The next line rivetrun got, as words.
fn rivetrun_hears(peer: &mut std::io::BufReader<std::net::TcpStream>) -> Vec<Vec<u8>> {
    let mut line = String::new();
    peer.read_line(&mut line).unwrap();
    wire::recv(&mut line.as_bytes()).unwrap().unwrap()
}

fn call(construct: bool, procs: &[u32], s: &Seen) -> GroupCall {
    let procs = procs.iter().map(|&r| ("kvs".to_string(), r)).collect();
    let cbdata = s as *const Seen as *mut c_void;
    GroupCall::for_test(construct, "g", procs, true, seen, cbdata)
}

#[test]
fn groups_go_to_rivetrun_and_a_destruct_naming_none_uses_the_construct() {
    let (up, mut peer) = upstream();
    let mut next = || rivetrun_hears(&mut peer);
    // Node 1 of ranks on nodes 0, 0, 1, 1.
    let mut st = Subsets::new(1, "kvs", vec![0, 0, 1, 1]);
    let s = Seen::default();
    st.group(call(true, &[1, PMIX_RANK_WILDCARD], &s), &up);
    let words = next();
    assert_eq!((&words[0][..], &words[2][..]), (&b"coll"[..], &b"0,1"[..]));
    let key = wire::text(&words[1]);
    let done = |key: String, status| Done {
        key,
        status,
        context: 7,
        blobs: Vec::new(),
    };
    st.done(done(key, PMIX_SUCCESS));
    assert_eq!(s.lock().unwrap().pop(), Some((PMIX_SUCCESS, Some(7))));
    // The destruct names no processes: the construct's nodes.
    st.group(call(false, &[], &s), &up);
    let words = next();
    assert_eq!(words[2], b"0,1");
    assert_ne!(wire::text(&words[1]), "", "a key of its own");
    st.done(done(wire::text(&words[1]), PMIX_SUCCESS));
    assert_eq!(s.lock().unwrap().pop(), Some((PMIX_SUCCESS, None)));
    // Now it is gone: a destruct naming none is refused.
    st.group(call(false, &[], &s), &up);
    assert_eq!(s.lock().unwrap().pop(), Some((PMIX_ERR_BAD_PARAM, None)));
    // Optional members on several hosts, a rank past the job: refused.
    let mut opt = call(true, &[0, 3], &s);
    opt.optional = true;
    st.group(opt, &up);
    st.group(call(true, &[9], &s), &up);
    let refused = s.lock().unwrap().drain(..).collect::<Vec<_>>();
    assert_eq!(refused, vec![(PMIX_ERR_NOT_SUPPORTED, None); 2]);
    // The optional one's refusal goes to rivetrun as a failed part, for
    // the other host's members; nothing waits for an answer here.
    let words = next();
    assert_eq!(wire::text(&words[1]), "group/construct/g#2");
    assert_eq!(words[2], b"0,1");
    assert_eq!(words[4], PMIX_ERR_NOT_SUPPORTED.to_string().as_bytes());
    assert_eq!(st.waiting(), 0);
    // A collective under way fails when rivetrun's link is lost.
    st.group(call(true, &[2, 3], &s), &up);
    assert_eq!(next()[2], b"1");
    assert_eq!(st.waiting(), 1);
    st.lost();
    assert_eq!(s.lock().unwrap().pop(), Some((PMIX_ERR_UNREACH, None)));
    assert_eq!(st.waiting(), 0);
}

/// A call the node's upcall already refused (a `PMIX_TIMEOUT`,
/// `pmix_host/timeouts.rs`) goes to rivetrun as a failed part under the
/// key the other hosts compute for the same call, so their members fail
/// rather than wait; its callback, the library's finished one, is not
/// called, and nothing waits here. The next call's key moves on as theirs.
#[test]
fn a_call_refused_by_the_upcall_fails_the_other_hosts_under_the_same_key() {
    let (up, mut peer) = upstream();
    let mut st = Subsets::new(1, "kvs", vec![0, 1]);
    let s = Seen::default();
    let mut refused = call(true, &[PMIX_RANK_WILDCARD], &s);
    refused.refusal = Some(PMIX_ERR_NOT_SUPPORTED);
    refused.forget_callback();
    st.group(refused, &up);
    let words = rivetrun_hears(&mut peer);
    assert_eq!(wire::text(&words[1]), "group/construct/g#1");
    assert_eq!(words[2], b"0,1");
    assert_eq!(words[4], PMIX_ERR_NOT_SUPPORTED.to_string().as_bytes());
    let procs = vec![("kvs".to_string(), PMIX_RANK_WILDCARD)];
    let mut conn = ConnectCall::for_test(true, procs.clone(), connected, std::ptr::null_mut());
    conn.refusal = Some(PMIX_ERR_NOT_SUPPORTED);
    conn.forget_callback();
    st.connect(conn, &up);
    let words = rivetrun_hears(&mut peer);
    assert_eq!(wire::text(&words[1]), "connect/kvs:*#1");
    assert_eq!(words[4], PMIX_ERR_NOT_SUPPORTED.to_string().as_bytes());
    assert_eq!(st.waiting(), 0);
    assert!(s.lock().unwrap().is_empty(), "a refused call was answered");
    // The next construct of the group is the second, as on other hosts.
    st.group(call(true, &[PMIX_RANK_WILDCARD], &s), &up);
    assert_eq!(
        wire::text(&rivetrun_hears(&mut peer)[1]),
        "group/construct/g#2"
    );
}

/// What connect completions said.
static CONNECTS: Mutex<Vec<c_int>> = Mutex::new(Vec::new());

unsafe extern "C" fn connected(status: c_int, _cbdata: *mut c_void) {
    CONNECTS.lock().unwrap().push(status);
}

#[test]
fn connects_over_the_job_and_its_spawned_namespaces_go_to_rivetrun() {
    let (up, mut peer) = upstream();
    let mut next = || rivetrun_hears(&mut peer);
    let procs = || {
        vec![
            ("kids".to_string(), PMIX_RANK_WILDCARD),
            ("kvs".to_string(), PMIX_RANK_WILDCARD),
        ]
    };
    let call =
        |connect, procs| ConnectCall::for_test(connect, procs, connected, std::ptr::null_mut());
    // Node 1 of ranks on nodes 0, 0, 1, 1.
    let mut st = Subsets::new(1, "kvs", vec![0, 0, 1, 1]);
    // A namespace nobody said was spawned: refused at once.
    st.connect(call(true, procs()), &up);
    assert_eq!(CONNECTS.lock().unwrap().pop(), Some(PMIX_ERR_NOT_SUPPORTED));
    assert_eq!(st.waiting(), 0);
    // Spawned by node 0's proxy: the parents' nodes and node 0 take
    // part, under a key every node derives alike.
    st.spawned("kids", 0, &up);
    st.connect(call(true, procs()), &up);
    let words = next();
    assert_eq!(words[0], b"coll");
    assert_eq!(wire::text(&words[1]), "connect/kids:*,kvs:*#1");
    assert_eq!(words[2], b"0,1");
    assert!(CONNECTS.lock().unwrap().is_empty(), "completed early");
    let done = |key: &[u8], status| Done {
        key: wire::text(key),
        status,
        context: 3,
        blobs: vec![(0, Vec::new()), (1, Vec::new())],
    };
    st.done(done(&words[1], PMIX_SUCCESS));
    assert_eq!(CONNECTS.lock().unwrap().pop(), Some(PMIX_SUCCESS));
    // A disconnect over the children and one parent on each node; its
    // failure (a proxy that ended) reaches the caller.
    let some = vec![
        ("kvs".to_string(), 0),
        ("kids".to_string(), 1),
        ("kvs".to_string(), 3),
    ];
    st.connect(call(false, some), &up);
    let words = next();
    assert_eq!(wire::text(&words[1]), "disconnect/kids:1,kvs:0,kvs:3#1");
    assert_eq!(words[2], b"0,1");
    st.done(done(&words[1], PMIX_ERR_UNREACH));
    assert_eq!(CONNECTS.lock().unwrap().pop(), Some(PMIX_ERR_UNREACH));
    assert_eq!(st.waiting(), 0);
}

/// What completions of the waiting test's connects said.
static LATE: Mutex<Vec<c_int>> = Mutex::new(Vec::new());

unsafe extern "C" fn late(status: c_int, _cbdata: *mut c_void) {
    LATE.lock().unwrap().push(status);
}

#[test]
fn a_connect_naming_a_spawn_not_yet_announced_waits_for_it_a_bounded_time() {
    let (up, mut peer) = upstream();
    let call = |ns: &str| {
        let procs = vec![
            (ns.to_string(), PMIX_RANK_WILDCARD),
            ("kvs".to_string(), PMIX_RANK_WILDCARD),
        ];
        ConnectCall::for_test(true, procs, late, std::ptr::null_mut())
    };
    let mut st = Subsets::new(1, "kvs", vec![0, 0, 1, 1]);
    // Node 0's proxy spawned kvs_h0_s1; its children connect here
    // before rivetrun's pmix_spawned arrived: it waits, nothing sent.
    st.connect(call("kvs_h0_s1"), &up);
    assert_eq!((st.parked(), st.waiting()), (1, 0));
    assert!(
        LATE.lock().unwrap().is_empty(),
        "refused or completed early"
    );
    // The news comes: the connect goes to rivetrun as it would have.
    st.spawned("kvs_h0_s1", 0, &up);
    let words = rivetrun_hears(&mut peer);
    assert_eq!(wire::text(&words[1]), "connect/kvs:*,kvs_h0_s1:*#1");
    assert_eq!(words[2], b"0,1");
    assert_eq!((st.parked(), st.waiting()), (0, 1));
    st.done(Done {
        key: wire::text(&words[1]),
        status: PMIX_SUCCESS,
        context: 1,
        blobs: Vec::new(),
    });
    assert_eq!(LATE.lock().unwrap().pop(), Some(PMIX_SUCCESS));
    // News that never comes: failed at the bound, with a timeout.
    st.connect(call("kvs_s2"), &up);
    let deadline = st.next_deadline().expect("a deadline");
    st.expire(deadline - Duration::from_millis(1), &up);
    assert_eq!(st.parked(), 1);
    assert!(LATE.lock().unwrap().is_empty());
    st.expire(deadline, &up);
    assert_eq!(LATE.lock().unwrap().pop(), Some(PMIX_ERR_TIMEOUT));
    assert_eq!((st.parked(), st.next_deadline()), (0, None));
    // Not named as the job's spawns are: refused at once, as before.
    st.connect(call("other_s1"), &up);
    assert_eq!(LATE.lock().unwrap().pop(), Some(PMIX_ERR_NOT_SUPPORTED));
    // Waiting when rivetrun's link is lost: unreachable.
    st.connect(call("kvs_h1_s3"), &up);
    st.lost();
    assert_eq!(LATE.lock().unwrap().pop(), Some(PMIX_ERR_UNREACH));
    assert_eq!(st.parked(), 0);
}

#[test]
fn the_jobs_spawns_are_told_by_their_names() {
    for ns in ["kvs_s1", "kvs_s12", "kvs_h0_s1", "kvs_h3_s7"] {
        assert!(one_of_the_jobs_spawns("kvs", ns), "{ns}");
    }
    for ns in [
        "kvs", "kvs_s", "kvs_sx", "kvs_h_s1", "kvs_h1", "kvs2_s1", "x_s1",
    ] {
        assert!(!one_of_the_jobs_spawns("kvs", ns), "{ns}");
    }
}

#[test]
fn rivetruns_answer_parses_and_garbage_does_not() {
    let w = |s: &[&str]| s.iter().map(|w| w.as_bytes().to_vec()).collect::<Vec<_>>();
    assert_eq!(
        Done::parse(&w(&["coll_out", "k#1", "0", "3", "0", "ab", "1", ""])),
        Some(Done {
            key: "k#1".into(),
            status: 0,
            context: 3,
            blobs: vec![(0, b"ab".to_vec()), (1, Vec::new())],
        })
    );
    for bad in [
        &["coll_out", "k", "0"][..],
        &["coll_out", "k", "x", "1"],
        &["coll_out", "k", "0", "1", "0"],
        &["coll_out", "k", "0", "1", "n", "b"],
        &["coll", "k", "0", "1"],
    ] {
        assert_eq!(Done::parse(&w(bad)), None, "{bad:?}");
    }
}

/// What fence completions said: (status, bytes of data).
static FENCED: Mutex<Vec<(c_int, usize)>> = Mutex::new(Vec::new());

unsafe extern "C" fn fenced(
    status: c_int,
    _data: *const std::ffi::c_char,
    n: usize,
    _cbdata: *mut c_void,
    release: Option<unsafe extern "C" fn(*mut c_void)>,
    release_data: *mut c_void,
) {
    FENCED.lock().unwrap().push((status, n));
    if let Some(r) = release {
        // SAFETY: the release function and data the fence passed.
        unsafe { r(release_data) };
    }
}

/// A subset fence given `PMIX_TIMEOUT`: at its deadline the node asks
/// rivetrun (`coll_late KEY`) and waits for its answer, whichever it is;
/// an untimed one, and the next one over the same ranks, have no deadline
/// and keys of their own.
#[test]
fn a_timed_subset_fence_asks_rivetrun_at_its_deadline_and_takes_its_answer() {
    let (up, mut peer) = upstream();
    let mut st = Subsets::new(0, "kvs", vec![0, 0, 1, 1]);
    let fence = |timeout: Option<u64>| {
        let procs = vec![("kvs".to_string(), 0), ("kvs".to_string(), 3)];
        let mut c = FenceCall::for_test(procs, b"d".to_vec(), fenced, std::ptr::null_mut());
        c.timeout = timeout.map(Duration::from_secs);
        c
    };
    let before = Instant::now();
    st.fence(fence(Some(1)), &up);
    let first = wire::text(&rivetrun_hears(&mut peer)[1]);
    assert_eq!(first, "fence/kvs:0,kvs:3#1");
    let deadline = st.next_deadline().expect("timed");
    assert!(deadline >= before + Duration::from_secs(1));
    st.expire(deadline - Duration::from_millis(1), &up);
    st.expire(deadline, &up);
    assert_eq!(
        rivetrun_hears(&mut peer),
        vec![b"coll_late".to_vec(), first.clone().into_bytes()]
    );
    // Asked once; the fence still waits for rivetrun's word.
    assert_eq!((st.next_deadline(), st.waiting()), (None, 1));
    assert!(FENCED.lock().unwrap().is_empty());
    st.done(Done {
        key: first,
        status: PMIX_ERR_TIMEOUT,
        context: 0,
        blobs: Vec::new(),
    });
    assert_eq!(FENCED.lock().unwrap().pop(), Some((PMIX_ERR_TIMEOUT, 0)));
    // The next fence over the same ranks, untimed: a new key, no deadline.
    st.fence(fence(None), &up);
    let second = wire::text(&rivetrun_hears(&mut peer)[1]);
    assert_eq!(second, "fence/kvs:0,kvs:3#2");
    assert_eq!(st.next_deadline(), None);
    st.done(Done {
        key: second,
        status: PMIX_SUCCESS,
        context: 0,
        blobs: vec![(0, b"d".to_vec()), (1, b"e".to_vec())],
    });
    assert_eq!(FENCED.lock().unwrap().pop(), Some((PMIX_SUCCESS, 2)));
    // A timed one answered in time forgets its deadline.
    st.fence(fence(Some(5)), &up);
    let third = wire::text(&rivetrun_hears(&mut peer)[1]);
    assert!(st.next_deadline().is_some());
    st.done(Done {
        key: third,
        status: PMIX_SUCCESS,
        context: 0,
        blobs: Vec::new(),
    });
    assert_eq!(FENCED.lock().unwrap().pop(), Some((PMIX_SUCCESS, 0)));
    assert_eq!((st.next_deadline(), st.waiting()), (None, 0));
}
