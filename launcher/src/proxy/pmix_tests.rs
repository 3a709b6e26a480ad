//! The proxy's PMIx state: fences through the tree and rivetrun, hex
//! blobs, rivetrun's messages.

use super::*;
use crate::proxy::pmix_fences::FENCE_KEY;
use crate::remote::wire;
use rivet_pmi::pmix_ffi::PMIX_ERR_NOT_SUPPORTED;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;

/// What fence completions said: (status, data).
pub(in crate::proxy) type Seen = Mutex<Vec<(c_int, Vec<u8>)>>;

/// A fence's completion callback: records it in the `Seen` at `cbdata`.
pub(in crate::proxy) unsafe extern "C" fn seen(
    status: c_int,
    data: *const c_char,
    n: usize,
    cbdata: *mut c_void,
    release: Option<unsafe extern "C" fn(*mut c_void)>,
    release_data: *mut c_void,
) {
    // SAFETY: `cbdata` is the test's `Seen`; `n` bytes at `data`,
    // alive until `release` (called right after the copy).
    unsafe {
        let bytes = if n == 0 {
            Vec::new()
        } else {
            std::slice::from_raw_parts(data.cast::<u8>(), n).to_vec()
        };
        (*(cbdata as *const Seen))
            .lock()
            .unwrap()
            .push((status, bytes));
        if let Some(r) = release {
            r(release_data);
        }
    }
}

fn fence(ranks: &[u32], data: &[u8], s: &Seen) -> PmixEvent {
    let procs = ranks.iter().map(|&r| ("kvs_1".to_string(), r)).collect();
    let cbdata = s as *const Seen as *mut c_void;
    PmixEvent::Fence(FenceCall::for_test(procs, data.to_vec(), seen, cbdata))
}

fn rivetrun() -> (Upstream, std::net::TcpStream) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    (Upstream::new(up), l.accept().unwrap().0)
}

#[test]
fn fences_go_up_the_tree_one_at_a_time_and_come_back_concatenated() {
    let (up, _peer) = rivetrun();
    // Node 1 of a 4-rank job holding ranks 2 and 3.
    let mut st = State::new(1, "kvs_1", 4, vec![0, 0, 1, 1], vec![2, 3]);
    let s = Seen::default();
    // A fence among this node's ranks completes at once, with its data.
    assert!(matches!(
        st.event(fence(&[2, 3], b"ab", &s), &up),
        Step::Nothing
    ));
    assert_eq!(
        s.lock().unwrap().pop(),
        Some((PMIX_SUCCESS, b"ab".to_vec()))
    );
    // Two whole-job fences: the first goes up, the second waits.
    let Step::Barrier(puts) = st.event(fence(&[PMIX_RANK_WILDCARD], b"\x01\x02", &s), &up) else {
        panic!("no barrier for a whole-job fence");
    };
    assert_eq!(puts, vec![(format!("{FENCE_KEY}1"), "0102".to_string())]);
    assert!(matches!(
        st.event(fence(&[0, 1, 2, 3], b"z", &s), &up),
        Step::Nothing
    ));
    assert!(st.in_tree());
    // The job's barrier_out: node 0's blob and ours, in node order; the
    // waiting fence goes up next.
    let out = vec![
        (format!("{FENCE_KEY}1"), "0102".to_string()),
        ("other".to_string(), "x".to_string()),
        (format!("{FENCE_KEY}0"), "ff".to_string()),
    ];
    let Step::Barrier(next) = st.barrier_out(&out) else {
        panic!("the second fence did not go up");
    };
    assert_eq!(next, vec![(format!("{FENCE_KEY}1"), hex(b"z"))]);
    assert_eq!(
        s.lock().unwrap().pop(),
        Some((PMIX_SUCCESS, vec![0xff, 1, 2]))
    );
    // The tree fails: the fence under way fails, nothing hangs.
    st.fail_fences();
    assert!(!st.in_tree());
    assert_eq!(
        s.lock().unwrap().pop(),
        Some((PMIX_ERR_UNREACH, Vec::new()))
    );
    // Some ranks of several hosts: gathered by rivetrun, not the tree.
    let (up, peer) = rivetrun();
    assert!(matches!(
        st.event(fence(&[0, 3], b"q", &s), &up),
        Step::Nothing
    ));
    assert!(!st.in_tree());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(peer), &mut line).unwrap();
    let words = wire::recv(&mut line.as_bytes()).unwrap().unwrap();
    assert_eq!(words[0], b"coll");
    assert_eq!(words[2], b"0,1");
    assert_eq!(words[3], b"q");
    // rivetrun's answer completes it with both nodes' blobs.
    let done = Done {
        key: wire::text(&words[1]),
        status: PMIX_SUCCESS,
        context: 1,
        blobs: vec![(0, b"p".to_vec()), (1, b"q".to_vec())],
    };
    st.message(Msg::Coll(done), &up);
    assert_eq!(
        s.lock().unwrap().pop(),
        Some((PMIX_SUCCESS, b"pq".to_vec()))
    );
    // A namespace this proxy spawned is all here: its fence completes
    // at once, with this node's ranks too.
    st.spawned_here("kvs_1_h1_s1", &up);
    let kids = vec![
        ("kvs_1_h1_s1".to_string(), PMIX_RANK_WILDCARD),
        ("kvs_1".to_string(), 2),
    ];
    let cbdata = &s as *const Seen as *mut c_void;
    let call = FenceCall::for_test(kids, b"k".to_vec(), seen, cbdata);
    assert!(matches!(
        st.event(PmixEvent::Fence(call), &up),
        Step::Nothing
    ));
    assert_eq!(s.lock().unwrap().pop(), Some((PMIX_SUCCESS, b"k".to_vec())));
    // Another namespace's processes: refused at once.
    let other = vec![("kvs_1".to_string(), 0), ("other".to_string(), 1)];
    let cbdata = &s as *const Seen as *mut c_void;
    let call = FenceCall::for_test(other, Vec::new(), seen, cbdata);
    st.event(PmixEvent::Fence(call), &up);
    assert_eq!(
        s.lock().unwrap().pop(),
        Some((PMIX_ERR_NOT_SUPPORTED, Vec::new()))
    );
}

#[test]
fn blobs_survive_hex_and_garbage_is_refused() {
    let b = vec![0u8, 1, 0xfe, 0xff, b'%', b' '];
    assert_eq!(unhex(&hex(&b)), Some(b));
    assert_eq!(unhex(""), Some(Vec::new()));
    assert_eq!(unhex("abc"), None);
    assert_eq!(unhex("zz"), None);
}

#[test]
fn rivetruns_dmodex_messages_parse_and_bad_ones_do_not() {
    let words = |s: &[&str]| s.iter().map(|w| w.as_bytes().to_vec()).collect::<Vec<_>>();
    match Msg::parse(&words(&["dmodex_ask", "2", "7", "kvs_1", "3"])) {
        Some(Msg::Ask {
            from,
            id,
            nspace,
            rank,
        }) => assert_eq!((from, id, nspace.as_str(), rank), (2, 7, "kvs_1", 3)),
        _ => panic!("not an ask"),
    }
    match Msg::parse(&words(&["dmodex_done", "7", "0", "00ff"])) {
        Some(Msg::Done { id, status, data }) => {
            assert_eq!((id, status, data), (7, 0, vec![0, 255]))
        }
        _ => panic!("not an answer"),
    }
    match Msg::parse(&words(&[
        "pmix_spawned",
        "kvs_1_h1_s1",
        "1",
        "kvs_1",
        "3",
        "2",
    ])) {
        Some(Msg::Spawned { kvs, node }) => assert_eq!((kvs.as_str(), node), ("kvs_1_h1_s1", 1)),
        _ => panic!("not a spawn"),
    }
    assert!(Msg::parse(&words(&["pmix_spawned", "k", "x"])).is_none());
    assert!(Msg::parse(&words(&["dmodex_done", "x", "0", ""])).is_none());
    assert!(Msg::parse(&words(&["dmodex_ask", "1"])).is_none());
}
