//! Load: `stress` (random sizes and tags between all ranks, mixed receive
//! patterns) and `threads` (workers on dup'd and shared communicators).

use std::sync::atomic::{AtomicBool, Ordering};

use rivet::{Comm, Engine, Request, Threading, ANY_SOURCE, ANY_TAG};
use rivet_tests::ensure;
use rivet_tests::pattern::seed_of;
use rivet_tests::rank_check::{die, OrDie};

use crate::check::{check_by_checksum, check_recv, message, ok_status, wait_all_ok, Inbox, Rng};

/// 2% empty; else 2^(e-1)..=2^e bytes with e in 1..=20, weight 0.8^e: most
/// messages are small, a few hundred MB in all for 10^5 messages.
fn stress_size(rng: &mut Rng) -> usize {
    let u = rng.unit();
    if u < 0.02 {
        return 0;
    }
    let total: f64 = (1..=20).map(|e| 0.8f64.powi(e)).sum();
    let mut v = (u - 0.02) / 0.98 * total;
    for e in 1..=20 {
        v -= 0.8f64.powi(e);
        if v < 0.0 || e == 20 {
            let lo = 1u64 << (e - 1);
            return (lo + rng.below(lo + 1)) as usize;
        }
    }
    unreachable!()
}

const STRESS_ROUND: usize = 256;

const STRESS_MAX: usize = 1 << 20;

struct Planned {
    dest: u32,
    tag: i32,
    size: usize,
    sync: bool,
}

fn stress_plan(sender: u32, n: u32, total: usize, seed: u64) -> Vec<Planned> {
    let count = total / n as usize + ((sender as usize) < total % n as usize) as usize;
    let mut rng = Rng::new(seed_of(&[seed, sender as u64]));
    (0..count)
        .map(|_| {
            let d = rng.below(n as u64 - 1) as u32;
            Planned {
                dest: if d >= sender { d + 1 } else { d },
                tag: rng.below(8) as i32,
                size: stress_size(&mut rng),
                sync: rng.below(10) == 0,
            }
        })
        .collect()
}

pub(crate) fn stress<T: Threading>(world: &Comm<T>, total: usize, seed: u64) {
    let (me, n) = (world.rank(), world.size());
    let plans: Vec<Vec<Planned>> = (0..n).map(|s| stress_plan(s, n, total, seed)).collect();
    let rounds = plans
        .iter()
        .map(Vec::len)
        .max()
        .unwrap()
        .div_ceil(STRESS_ROUND);
    // Per sender: its messages to me, and how many of them come in rounds
    // up to each round.
    let mut to_me: Vec<Vec<(i32, usize)>> = vec![Vec::new(); n as usize];
    let mut upto: Vec<Vec<usize>> = vec![Vec::new(); n as usize];
    for s in 0..n as usize {
        for (i, p) in plans[s].iter().enumerate() {
            if p.dest == me {
                to_me[s].push((p.tag, p.size));
            }
            if (i + 1) % STRESS_ROUND == 0 {
                upto[s].push(to_me[s].len());
            }
        }
        upto[s].resize(rounds, to_me[s].len());
    }
    let mut inbox = Inbox::new(me, to_me);
    // Sequence numbers per destination.
    let mut seq_to = vec![0u32; n as usize];
    let mut rng = Rng::new(seed_of(&[seed, 1000 + me as u64]));
    let mut big = vec![0u8; STRESS_MAX];
    let (mut sent, mut sent_bytes) = (0usize, 0u64);
    let mut kinds = [0usize; 4];
    let verify = |s: u32, q: u32, tag: i32, size: usize, data: &[u8]| {
        check_by_checksum(
            &format!("message #{q} from rank {s} to rank {me} (tag {tag}, {size} bytes)"),
            data,
            s,
            me,
            q,
            tag,
            size,
        )
    };
    for round in 0..rounds {
        let mine = &plans[me as usize];
        let part = &mine
            [(round * STRESS_ROUND).min(mine.len())..((round + 1) * STRESS_ROUND).min(mine.len())];
        let msgs: Vec<Vec<u8>> = part
            .iter()
            .map(|p| {
                let q = seq_to[p.dest as usize];
                seq_to[p.dest as usize] += 1;
                message(me, p.dest, q, p.tag, p.size)
            })
            .collect();
        for (limit, upto) in inbox.limit.iter_mut().zip(&upto) {
            *limit = upto[round];
        }
        let due: usize = (0..n as usize)
            .map(|s| upto[s][round] - if round == 0 { 0 } else { upto[s][round - 1] })
            .sum();
        world.scope(|sc| {
            let mut reqs: Vec<Request<'_, T>> = part
                .iter()
                .zip(&msgs)
                .map(|(p, m)| {
                    if p.sync {
                        sc.issend(m, p.dest, p.tag)
                    } else {
                        sc.isend(m, p.dest, p.tag)
                    }
                    .or_die("send")
                })
                .collect();
            for _ in 0..due {
                let p = inbox.pick(&mut rng);
                kinds[(p.0 != ANY_SOURCE) as usize * 2 + (p.1 != ANY_TAG) as usize] += 1;
                // Exact patterns get a buffer of exactly the message's size.
                let cap = inbox.size_for(p).unwrap_or(STRESS_MAX);
                let st = world.recv(&mut big[..cap], p.0, p.1).or_die("recv");
                inbox.accept(p, &st, &big[..cap], verify);
            }
            wait_all_ok(&format!("round {round} sends"), &mut reqs);
        });
        sent += part.len();
        sent_bytes += part.iter().map(|p| p.size as u64).sum::<u64>();
        world.barrier().or_die("barrier after a round");
    }
    ensure!(
        inbox.remaining() == 0,
        "{} messages never received",
        inbox.remaining()
    );
    println!(
        "engine_check stress: rank {me} sent {sent} messages ({sent_bytes} bytes), received {} \
         ({} bytes) in {rounds} rounds; patterns any/any {} any/tag {} src/any {} src/tag {}",
        inbox.received, inbox.bytes, kinds[0], kinds[1], kinds[2], kinds[3]
    );
}

// ---------------------------------------------------------------------------
// threads

pub(crate) fn threads(engine: &Engine, world: &Comm) {
    const ITERS: u32 = 400;
    let me = world.rank();
    let peer = 1 - me;
    let c1 = world.dup().or_die("dup 1");
    let c2 = world.dup().or_die("dup 2");
    ensure!(
        c1.context_id() != c2.context_id() && c1.context_id() != world.context_id(),
        "dup'd context ids {} {} (world {})",
        c1.context_id(),
        c2.context_id(),
        world.context_id()
    );
    let stop = AtomicBool::new(false);
    // (communicator, thread id, tag base, wildcard receives)
    let workers: [(&Comm, u32, i32, bool); 4] = [
        (&c1, 0, 0, true),
        (&c2, 1, 0, false),
        (world, 2, 100, false),
        (world, 3, 200, false),
    ];
    let polls = std::thread::scope(|ts| {
        let progress = ts.spawn(|| {
            let mut events = 0usize;
            while !stop.load(Ordering::Relaxed) {
                events += engine.progress();
                std::thread::yield_now();
            }
            events
        });
        let handles: Vec<_> = workers
            .iter()
            .map(|&(comm, id, base, wild)| {
                ts.spawn(move || {
                    for i in 0..ITERS {
                        let tag = base + (i % 7) as i32;
                        let size = if i % 50 == 49 {
                            200_000
                        } else {
                            (i as usize * 13 + id as usize) % 2000
                        };
                        let out = message(me, peer, i + 10_000 * id, tag, size);
                        let want = message(peer, me, i + 10_000 * id, tag, size);
                        let mut buf = vec![0u8; size];
                        let (sp, tp) = if wild {
                            (ANY_SOURCE, ANY_TAG)
                        } else {
                            (peer as i32, tag)
                        };
                        let st = comm.scope(|s| {
                            let r = s.irecv(&mut buf, sp, tp).or_die("irecv");
                            let w = s.isend(&out, peer, tag).or_die("isend");
                            if i % 2 == 0 {
                                let mut reqs = [r, w];
                                wait_all_ok("thread exchange", &mut reqs)[0]
                            } else {
                                ok_status("isend", &w.wait().or_die("wait isend"));
                                r.wait().or_die("wait irecv")
                            }
                        });
                        check_recv(
                            &format!("thread {id} iteration {i}"),
                            &st,
                            peer,
                            tag,
                            &buf,
                            &want,
                        );
                    }
                })
            })
            .collect();
        for h in handles {
            if h.join().is_err() {
                die("a worker thread panicked");
            }
        }
        stop.store(true, Ordering::Relaxed);
        progress
            .join()
            .unwrap_or_else(|_| die("the progress thread panicked"))
    });
    world.barrier().or_die("barrier");
    println!(
        "engine_check threads: rank {me}: 4 threads x {ITERS} exchanges verified; \
         the progress thread handled {polls} events"
    );
    across_workers(engine, world, &c1, &c2);
}

/// One thread, communicators on different workers (at MULTIPLE in a
/// one-node job): a blocking receive on `c2` must also move a rendezvous
/// send on `c1` (the peer receives it before it sends on `c2`), and one
/// `wait_any`/`wait_all` over requests of three communicators sees each
/// complete.
fn across_workers(engine: &Engine, world: &Comm, c1: &Comm, c2: &Comm) {
    const BIG: usize = 300_000;
    let me = world.rank();
    let peer = 1 - me;
    let big = message(me, peer, 1, 5, BIG);
    let want_big = message(peer, me, 1, 5, BIG);
    let small = message(peer, me, 2, 6, 100);
    let mut got = vec![0u8; BIG];
    let mut got_small = vec![0u8; 100];
    if me == 0 {
        c1.scope(|s| {
            let w = s.isend(&big, peer, 5).or_die("isend on c1");
            let st = c2.recv(&mut got_small, peer as i32, 6).or_die("recv on c2");
            check_recv(
                "recv on c2 behind c1's rendezvous",
                &st,
                peer,
                6,
                &got_small,
                &small,
            );
            ok_status(
                "rendezvous isend on c1",
                &w.wait().or_die("wait isend on c1"),
            );
        });
    } else {
        let st = c1.recv(&mut got, peer as i32, 5).or_die("recv on c1");
        check_recv("rendezvous on c1", &st, peer, 5, &got, &want_big);
        c2.send(&message(me, peer, 2, 6, 100), peer, 6)
            .or_die("send on c2");
    }
    // wait_any, then wait_all, over receives on three communicators.
    let comms = [world, c1, c2];
    let outs: Vec<Vec<u8>> = (0..3)
        .map(|k| message(me, peer, 10 + k, 7, 64 << k))
        .collect();
    let wants: Vec<Vec<u8>> = (0..3)
        .map(|k| message(peer, me, 10 + k, 7, 64 << k))
        .collect();
    let mut bufs: Vec<Vec<u8>> = wants.iter().map(|w| vec![0u8; w.len()]).collect();
    let [b0, b1, b2] = &mut bufs[..] else {
        unreachable!()
    };
    let statuses = world.scope(|s0| {
        c1.scope(|s1| {
            c2.scope(|s2| {
                let mut reqs = [
                    s0.irecv(b0, peer as i32, 7).or_die("irecv world"),
                    s1.irecv(b1, peer as i32, 7).or_die("irecv c1"),
                    s2.irecv(b2, peer as i32, 7).or_die("irecv c2"),
                ];
                for (k, comm) in comms.iter().enumerate().rev() {
                    comm.send(&outs[k], peer, 7).or_die("send");
                }
                let (first, st) = Request::wait_any(&mut reqs)
                    .or_die("wait_any across workers")
                    .unwrap_or_else(|| die("wait_any found nothing to wait for"));
                ok_status("wait_any across workers", &st);
                let mut all = wait_all_ok("wait_all across workers", &mut reqs);
                all[first] = st;
                all
            })
        })
    });
    for k in 0..3 {
        check_recv("across workers", &statuses[k], peer, 7, &bufs[k], &wants[k]);
    }
    let workers = engine
        .info()
        .items
        .into_iter()
        .find(|(k, _)| k == "workers")
        .map_or_else(|| "?".to_string(), |(_, v)| v);
    world.barrier().or_die("barrier");
    println!("engine_check threads: rank {me}: across workers OK; workers: {workers}");
}

// ---------------------------------------------------------------------------
// kill
