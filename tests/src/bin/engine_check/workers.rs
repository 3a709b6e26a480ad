//! `node_workers`: at MULTIPLE, in a job with a netmod, two threads each
//! run traffic on their own communicator with every other rank, and each
//! worker's own netmod instance (and shm lane, where the node has one)
//! must have carried it (`Engine::info`'s `worker.N` lines).

use rivet::{Comm, Engine, Shared};
use rivet_tests::ensure;
use rivet_tests::rank_check::{die, OrDie};

use crate::check::{check_recv, message, wait_all_ok};

/// Exchanges per thread with each other rank.
const ITERS: u32 = 60;

pub(crate) fn node_workers(engine: &Engine<Shared>, world: &Comm<Shared>) {
    let (me, n) = (world.rank(), world.size());
    let c1 = world.dup().or_die("dup 1");
    let c2 = world.dup().or_die("dup 2");
    std::thread::scope(|ts| {
        let threads: Vec<_> = [(&c1, 1u32), (&c2, 2u32)]
            .into_iter()
            .map(|(comm, id)| ts.spawn(move || exchanges(comm, id)))
            .collect();
        for t in threads {
            if t.join().is_err() {
                die("a worker thread panicked");
            }
        }
    });
    world.barrier().or_die("barrier");

    // Every worker that carried a communicator has a VC to each other rank
    // (netmod ones to the other node's, shm ones to this node's) and a
    // netmod with connections; two threads' communicators ran on two.
    let info = engine.info();
    let item = |key: &str| {
        info.items
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let workers = item("workers").unwrap_or_else(|| die("no workers line in info"));
    let local = info.local_size;
    let shm_peers = match item("transport.shm") {
        Some(v) if v.starts_with("on") => local - 1,
        _ => 0,
    };
    let want = format!(
        "{shm_peers} shm VCs, {} netmod VCs open; netmod: ",
        n - 1 - shm_peers
    );
    let busy: Vec<String> = (0..64)
        .filter_map(|w| item(&format!("worker.{w}")).map(|v| (w, v)))
        .filter(|(_, v)| v.starts_with(&want) && !v.ends_with("with 0 connections"))
        .map(|(w, v)| format!("worker.{w}: {v}"))
        .collect();
    ensure!(
        busy.len() >= 2,
        "two threads' traffic went through {} worker(s) with a netmod and {want:?} \
         (workers: {workers}); info:\n{info}",
        busy.len()
    );
    world.barrier().or_die("barrier");
    for line in busy {
        println!("engine_check node_workers: rank {me}: {line}");
    }
}

/// `ITERS` rounds on `comm`: a receive from and a send to every other
/// rank, sizes from empty to a rendezvous one, each received byte checked.
fn exchanges(comm: &Comm<Shared>, id: u32) {
    let (me, n) = (comm.rank(), comm.size());
    let peers: Vec<u32> = (0..n).filter(|&p| p != me).collect();
    for i in 0..ITERS {
        let size = match i % 20 {
            19 => 150_000,
            k => (k as usize * 97 + id as usize) % 3000,
        };
        let tag = (i % 5) as i32;
        let seq = i + 1000 * id;
        let outs: Vec<Vec<u8>> = peers
            .iter()
            .map(|&p| message(me, p, seq, tag, size))
            .collect();
        let mut bufs: Vec<Vec<u8>> = peers.iter().map(|_| vec![0u8; size]).collect();
        let statuses = comm.scope(|s| {
            let mut reqs = Vec::new();
            for (buf, &p) in bufs.iter_mut().zip(&peers) {
                reqs.push(s.irecv(buf, p as i32, tag).or_die("irecv"));
            }
            for (out, &p) in outs.iter().zip(&peers) {
                reqs.push(s.isend(out, p, tag).or_die("isend"));
            }
            wait_all_ok("node_workers exchange", &mut reqs)
        });
        for (k, &p) in peers.iter().enumerate() {
            check_recv(
                &format!("thread {id} round {i} from rank {p}"),
                &statuses[k],
                p,
                tag,
                &bufs[k],
                &message(p, me, seq, tag, size),
            );
        }
    }
}
