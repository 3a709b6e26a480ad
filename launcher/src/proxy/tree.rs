//! Barriers up a tree of proxies (Hydra's design): with fan-out `k`
//! (`RIVET_PROXY_FANOUT`), rivetrun's children are proxies `0..k`, and
//! proxy `i`'s are `k(i+1) .. k(i+1)+k`. A proxy sends its subtree's
//! barrier (its node's puts and its children's) to its parent once its own
//! node and every child have arrived, and passes `barrier_out` down, so
//! rivetrun handles at most `k` barrier messages each way per barrier,
//! however many hosts. Only barriers travel the tree: everything else
//! (exits, aborts, signals) goes straight between each proxy and rivetrun.
//!
//! A barrier needs every rank of the job, as on one host: a child whose
//! connection ended (its ranks all exited, or its host was lost) before its
//! subtree's barrier came makes the barrier impossible. The proxy then says
//! `stranded CHILD` to rivetrun, which fails the job naming the child's
//! host, and its waiters get an error (`child_proxy_ended`); likewise a
//! child whose parent ended says `orphaned`. A child can end before it
//! learns where its parent listens and so never connect: rivetrun then
//! tells the parent (`child_done ID`), which counts it ended the same way.
//!
//! A child connects to the address its parent told rivetrun (`listen`),
//! which rivetrun passes on (`parent ADDR`), and says `child SECRET ID`.

use std::collections::{HashMap, HashSet};
use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::pmi::{Cmd, Handle};
use super::upstream::Upstream;
use crate::remote::commands as cmd;
use crate::remote::wire;

/// The proxies whose parent is proxy `id` (`None`: rivetrun) among `n`.
pub fn children(id: Option<u32>, n: u32, fanout: u32) -> Vec<u32> {
    let k = fanout.max(1);
    let first = id.map_or(0, |i| k.saturating_mul(i + 1));
    (first..first.saturating_add(k).min(n)).collect()
}

/// The parent of proxy `id` (`None`: rivetrun).
pub fn parent(id: u32, fanout: u32) -> Option<u32> {
    let p = id / fanout.max(1);
    (p > 0).then(|| p - 1)
}

/// One proxy's place in the tree and the barrier it is gathering.
#[derive(Default)]
pub struct Tree {
    /// Whether the parent is a proxy (not rivetrun).
    pub has_parent: bool,
    /// The parent proxy's connection, once up.
    pub parent: Option<Upstream>,
    /// A barrier ready before the parent's connection was.
    pub held: Option<Vec<Vec<u8>>>,
    /// A barrier went to the parent and its `barrier_out` has not come.
    pub in_flight: bool,
    /// The parent's connection ended (it finished or its host is lost):
    /// no barrier can complete any more.
    pub orphaned: bool,
    /// Every child, and the connected ones' writers.
    expected: HashSet<u32>,
    /// Children whose connection ended.
    gone: HashSet<u32>,
    writers: HashMap<u32, Upstream>,
    /// This node's barrier (its puts), once its ranks are all in.
    node: Option<Vec<(String, String)>>,
    /// The children's barriers so far.
    arrived: HashMap<u32, Vec<(String, String)>>,
}

impl Tree {
    pub fn new(has_parent: bool, children: &[u32]) -> Tree {
        Tree {
            has_parent,
            expected: children.iter().copied().collect(),
            ..Tree::default()
        }
    }

    pub fn add_child(&mut self, id: u32, up: Upstream) {
        if self.expected.contains(&id) {
            self.writers.insert(id, up);
        }
    }

    pub fn node_in(&mut self, puts: Vec<(String, String)>) {
        self.node = Some(puts);
    }

    pub fn child_in(&mut self, id: u32, puts: Vec<(String, String)>) {
        if self.expected.contains(&id) {
            self.arrived.insert(id, puts);
        }
    }

    /// A child's connection ended: its ranks are done (or its host is
    /// lost, which rivetrun sees on its own connection). Its subtree can
    /// take part in no barrier any more.
    pub fn child_gone(&mut self, id: u32) {
        if self.expected.contains(&id) {
            self.gone.insert(id);
            self.writers.remove(&id);
            self.arrived.remove(&id);
        }
    }

    /// A gone child, if a barrier is under way here without it: that
    /// barrier cannot complete.
    pub fn stranded(&self) -> Option<u32> {
        if self.node.is_none() && self.arrived.is_empty() {
            return None;
        }
        self.gone.iter().copied().min()
    }

    /// Drop the barrier being gathered (it failed).
    pub fn abandon(&mut self) {
        self.node = None;
        self.arrived.clear();
    }

    /// The subtree's puts once the node and every child are in.
    pub fn ready(&mut self) -> Option<Vec<(String, String)>> {
        if self.node.is_none() || self.expected.iter().any(|c| !self.arrived.contains_key(c)) {
            return None;
        }
        let mut puts = self.node.take().unwrap_or_default();
        for (_, p) in self.arrived.drain() {
            puts.extend(p);
        }
        Some(puts)
    }

    /// Pass the job's `barrier_out` to the children.
    pub fn barrier_out(&mut self, puts: &[(String, String)]) {
        self.in_flight = false;
        if self.writers.is_empty() {
            return;
        }
        let line = wire::line(&wire::with_pairs(cmd::BARRIER_OUT, puts.to_vec()));
        for w in self.writers.values() {
            let _ = w.write_line(&line);
        }
    }
}

/// Listen for this proxy's children on the address it reaches rivetrun
/// from; the address to tell rivetrun.
pub fn listen(
    local: std::net::IpAddr,
    secret: String,
    children: Vec<u32>,
    pmi: Handle,
) -> std::io::Result<String> {
    let listener = TcpListener::bind((local, 0))?;
    let addr = listener.local_addr()?.to_string();
    // Children not yet connected; each connection's hello is read on a
    // thread of its own, so a silent stranger delays nobody.
    let left: Arc<Mutex<HashSet<u32>>> = Arc::new(Mutex::new(children.into_iter().collect()));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let (secret, mine, pmi) = (secret.clone(), left.clone(), pmi.clone());
            std::thread::spawn(move || serve_child(conn, &secret, &mine, pmi));
            if left.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
                return;
            }
        }
    });
    Ok(addr)
}

/// One connection to our listener: a child of ours once its `child` hello
/// carries the secret and the id of a child not yet connected; then its
/// barriers go to the PMI loop until it closes.
fn serve_child(conn: TcpStream, secret: &str, left: &Mutex<HashSet<u32>>, pmi: Handle) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(read) = conn.try_clone() else { return };
    let mut reader = BufReader::new(read);
    let Ok(Some(hello)) = wire::recv(&mut reader) else {
        return;
    };
    let id = hello.get(2).and_then(|w| wire::text(w).parse::<u32>().ok());
    let ok = hello.len() == 3 && hello[0] == cmd::CHILD.as_bytes() && hello[1] == secret.as_bytes();
    let taken = |i: &u32| left.lock().unwrap_or_else(|p| p.into_inner()).remove(i);
    let Some(id) = id.filter(|i| ok && taken(i)) else {
        return;
    };
    let _ = conn.set_read_timeout(None);
    let _ = conn.set_nodelay(true);
    let _ = wire::keepalive(&conn, wire::PROXY_PROBES);
    pmi.send(Cmd::Child(id, Upstream::new(conn)));
    while let Ok(Some(msg)) = wire::recv(&mut reader) {
        if msg.first().is_some_and(|w| w == cmd::BARRIER.as_bytes()) {
            pmi.send(Cmd::ChildBarrier(id, wire::pairs(&msg)));
        }
    }
    pmi.send(Cmd::ChildGone(id));
}

/// Connect to the parent proxy at `addr` (on a thread: it may not listen
/// yet on a slow host); its `barrier_out`s go to the PMI loop.
pub fn join_parent(addr: String, secret: String, id: u32, pmi: Handle) {
    std::thread::spawn(move || {
        let start = Instant::now();
        let stream = loop {
            match TcpStream::connect(&addr) {
                Ok(s) => break s,
                // The parent bound its listener before telling rivetrun
                // where it is, so a refusal means it has ended already.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    return pmi.send(Cmd::ParentGone);
                }
                Err(_) if start.elapsed() < Duration::from_secs(10) => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => {
                    eprintln!("rivetrun: proxy {id}: cannot reach the parent proxy at {addr}: {e}");
                    return pmi.send(Cmd::Lost);
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let _ = wire::keepalive(&stream, wire::PROXY_PROBES);
        let (Ok(read), Ok(mut write)) = (stream.try_clone(), stream.try_clone()) else {
            return pmi.send(Cmd::Lost);
        };
        if wire::send(&mut write, &[cmd::CHILD, &secret, &id.to_string()]).is_err() {
            return pmi.send(Cmd::Lost);
        }
        pmi.send(Cmd::Parent(Upstream::new(stream)));
        let mut reader = BufReader::new(read);
        while let Ok(Some(msg)) = wire::recv(&mut reader) {
            if msg
                .first()
                .is_some_and(|w| w == cmd::BARRIER_OUT.as_bytes())
            {
                pmi.send(Cmd::BarrierOut(wire::pairs(&msg)));
            }
        }
        let _ = write.flush();
        pmi.send(Cmd::ParentGone);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::pmi;
    use rivet_pmi::server::{NamespaceSpec, Server};
    use std::io::{BufRead, Read};
    use std::os::unix::net::UnixStream;

    /// A PMI loop for node `node` of a 2-rank job (one rank per node), its
    /// rank's end of the PMI connection, and rivetrun's end of its control
    /// connection.
    fn node(node: u32, tree: Tree) -> (Handle, UnixStream, BufReader<TcpStream>) {
        let mut server = Server::new();
        let ns = server
            .create_namespace(NamespaceSpec {
                name: "kvs_2".into(),
                size: 2,
                universe_size: 2,
                node_of_rank: vec![0, 1],
                ..NamespaceSpec::default()
            })
            .unwrap();
        server.delegate_barriers(ns, node);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let up = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (rivetrun, _) = listener.accept().unwrap();
        rivetrun
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let h = pmi::start(
            server,
            ns,
            Upstream::new(up),
            tree,
            std::sync::mpsc::channel().0,
            super::super::pmix::State::new(node, "kvs_2", 2, vec![0, 1], vec![node]),
        )
        .unwrap();
        let (ours, theirs) = UnixStream::pair().unwrap();
        ours.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let said = std::sync::Arc::new(pmi::Said::default());
        h.send(Cmd::Rank {
            rank: node,
            conn: theirs,
            said,
        });
        (h, ours, BufReader::new(rivetrun))
    }

    fn answer(r: &mut UnixStream) -> String {
        let mut buf = [0u8; 256];
        let n = r.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn a_child_proxys_barrier_reaches_rivetrun_through_its_parent() {
        let (parent, mut r0, mut up0) = node(0, Tree::new(false, &[1]));
        let addr = listen(
            "127.0.0.1".parse().unwrap(),
            "s3cret".into(),
            vec![1],
            parent.clone(),
        )
        .unwrap();
        // A stranger without the secret is not taken for the child.
        let mut stranger = TcpStream::connect(&addr).unwrap();
        wire::send(&mut stranger, &[cmd::CHILD, "guess", "1"]).unwrap();
        let (child, mut r1, _up1) = node(1, Tree::new(true, &[]));
        join_parent(addr, "s3cret".into(), 1, child.clone());
        r1.write_all(b"cmd=put kvsname=kvs_2 key=k1 value=v1\n")
            .unwrap();
        assert!(answer(&mut r1).contains("rc=0"));
        r1.write_all(b"cmd=barrier_in\n").unwrap();
        r0.write_all(b"cmd=barrier_in\n").unwrap();
        // One barrier reaches rivetrun, from the parent, with the child's put.
        let mut line = String::new();
        up0.read_line(&mut line).unwrap();
        let words = wire::recv(&mut line.as_bytes()).unwrap().unwrap();
        assert_eq!(words[0], b"barrier");
        assert_eq!(wire::pairs(&words), vec![("k1".into(), "v1".into())]);
        parent.send(Cmd::BarrierOut(vec![("k1".into(), "v1".into())]));
        assert_eq!(answer(&mut r0), "cmd=barrier_out\n");
        assert_eq!(answer(&mut r1), "cmd=barrier_out\n");
        r0.write_all(b"cmd=get kvsname=kvs_2 key=k1\n").unwrap();
        assert!(answer(&mut r0).contains("value=v1"));
    }

    #[test]
    fn a_barrier_needing_a_parent_that_ended_fails_and_tells_rivetrun() {
        // The parent is a bare listener that takes the child and then ends.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (child, mut r1, mut up1) = node(1, Tree::new(true, &[]));
        join_parent(addr, "s3cret".into(), 1, child.clone());
        let (parent_end, _) = listener.accept().unwrap();
        let mut hello = String::new();
        BufReader::new(parent_end.try_clone().unwrap())
            .read_line(&mut hello)
            .unwrap();
        assert!(hello.starts_with("child "), "{hello}");
        drop(parent_end);
        drop(listener);
        // The rank's barrier is answered with an error, not left waiting,
        // and rivetrun hears why first.
        std::thread::sleep(Duration::from_millis(200));
        r1.write_all(b"cmd=barrier_in\n").unwrap();
        let got = answer(&mut r1);
        assert!(
            got.contains("rc=-1") && got.contains("parent_proxy_ended"),
            "{got}"
        );
        let mut line = String::new();
        up1.read_line(&mut line).unwrap();
        assert_eq!(line, "orphaned\n");
    }

    #[test]
    fn every_proxy_has_one_parent_and_rivetrun_at_most_fanout_children() {
        for k in [1, 2, 3, 8] {
            for n in 1..40u32 {
                let top = children(None, n, k);
                assert_eq!(top.len() as u32, n.min(k));
                let mut seen: Vec<u32> = top.clone();
                for i in 0..n {
                    let kids = children(Some(i), n, k);
                    assert!(kids.len() as u32 <= k);
                    for &c in &kids {
                        assert_eq!(parent(c, k), Some(i), "k={k} n={n} c={c}");
                    }
                    seen.extend(kids);
                }
                seen.sort();
                assert_eq!(seen, (0..n).collect::<Vec<_>>(), "k={k} n={n}");
                for &c in &top {
                    assert_eq!(parent(c, k), None);
                }
            }
        }
    }

    #[test]
    fn a_barrier_goes_up_once_the_node_and_every_child_are_in() {
        let mut t = Tree::new(true, &[4, 5]);
        t.node_in(vec![("a".into(), "1".into())]);
        assert!(t.ready().is_none());
        t.child_in(4, vec![("b".into(), "2".into())]);
        t.child_in(9, vec![("x".into(), "0".into())]); // not a child: ignored
        assert!(t.ready().is_none());
        t.child_in(5, vec![]);
        let mut puts = t.ready().unwrap();
        puts.sort();
        assert_eq!(
            puts,
            vec![("a".into(), "1".into()), ("b".into(), "2".into())]
        );
        assert!(t.ready().is_none(), "gathered afresh for the next barrier");
        assert_eq!(t.stranded(), None);
    }

    #[test]
    fn a_barrier_without_a_child_that_ended_is_stranded_not_sent_up() {
        let mut t = Tree::new(true, &[4, 5]);
        // Gone between barriers: nothing is stranded until one begins.
        t.child_gone(5);
        t.child_gone(9); // not a child: ignored
        assert_eq!(t.stranded(), None);
        t.child_in(4, vec![]);
        assert_eq!(t.stranded(), Some(5));
        t.node_in(vec![]);
        assert!(t.ready().is_none(), "never complete without child 5");
        t.abandon();
        assert_eq!(t.stranded(), None);
        // Gone while a barrier is under way.
        let mut t = Tree::new(false, &[4]);
        t.node_in(vec![]);
        assert_eq!(t.stranded(), None);
        t.child_gone(4);
        assert_eq!(t.stranded(), Some(4));
    }
}
