//! A test rank that exercises the `rivet` engine, run by `tests/engine.rs`
//! under `rivetrun`, under MPICH's `mpiexec.hydra`, and as a singleton.
//!
//! `engine_check MODE [ARGS]`; every mode verifies what it receives and
//! exits 1 with an `engine_check rank R: FAILED: ...` line on stderr at the
//! first mismatch. A rank that passes prints `engine_check MODE OK rank R of
//! N at thread level L` last.
//!
//! Thread levels: `threads` runs on an `Engine<Shared>` (MULTIPLE: its
//! threads share the handles); every other mode on an `Engine<Local>`
//! initialised at SINGLE, so the engine runs without a lock unless
//! `RIVET_THREAD_LEVEL=multiple` raises the level. The level provided must
//! be the one `RIVET_THREAD_LEVEL` asks for (unset: SINGLE, or MULTIPLE for
//! `threads`), or the rank fails at once.
//!
//! Modes (the ranks they need):
//! - `pingpong` (2): both directions, a few sizes up to 4 MiB, blocking,
//!   scoped and raw calls.
//! - `order` (>= 2, meant for 4): ranks 1.. send K messages each to rank 0,
//!   which receives with exact and wildcard patterns and checks that every
//!   receive got the earliest matching message of its sender (non-overtaking).
//! - `probe` (>= 2): probe/iprobe report what the next receive gets.
//! - `mprobe` (2): matched probes take messages of every size out of
//!   matching (no other receive gets them), then receive them; a dropped
//!   matched message lets its sender finish.
//! - `cancel` (2): cancelled receives and sends, and cancels that come too
//!   late.
//! - `ssend` (2): a synchronous send stays pending until the receiver
//!   matches it.
//! - `sizes` (2): zero bytes to 4 MiB+1, around every threshold the engine
//!   reports or the environment sets, one by one and all at once.
//! - `trunc` (2): receive buffers smaller than the message.
//! - `stress [TOTAL] [SEED]` (>= 2, meant for 3): TOTAL (10^5) messages of
//!   random sizes and tags between all ranks, mixed receive patterns.
//! - `threads` (2): worker threads on dup'd and shared communicators, and a
//!   thread that only calls `progress()`.
//! - `kill [early]` (3): rank 2 kills itself while ranks 0 and 1 wait for
//!   it (`early`: before it starts its engine, while the others start theirs).
//! - `connect_all` (any): every rank sends to every other rank at once,
//!   first thing after init, so over tcp every pair connects from both
//!   sides simultaneously; every message must arrive exactly once, in order.
//! - `netkill` (3, tcp, under `rivetrun --disable-auto-cleanup`): rank 1
//!   kills itself while rank 0 streams messages to it and has a receive
//!   posted for it and an `ANY_SOURCE` one; rank 0 must see errors on
//!   all three (naming rank 1), then finish an exchange
//!   with rank 2 and exit cleanly.
//! - `readkill` (2, a netmod, under `rivetrun --disable-auto-cleanup`):
//!   rank 1 dies while rank 0 pulls its 48 MiB rendezvous message.
//!   `readkill dead`: rank 1 is dead before rank 0 posts the receive of
//!   its (probed) request, which must fail with `PeerFailed` naming it.
//! - `panic` (2, a netmod): rank 0 panics inside a scope while its
//!   receive of rank 1's rendezvous message is under way; the process must
//!   abort (SIGABRT) rather than unwind past the buffer the netmod writes.
//! - `early_exit` (3): rank 2 exchanges a message with rank 0, finalizes
//!   and exits while rank 0 waits in an `ANY_SOURCE` receive that rank 1
//!   fills only afterwards: a peer that finished must not fail it.
//! - `shmkill` (3, under `rivetrun --disable-auto-cleanup`): rank 2 kills
//!   itself while rank 0 waits in a receive from it and rank 1 in an
//!   `ANY_SOURCE` receive; both fail naming rank 2, then 0 and 1 go on.
//! - `hang DIR [release]` (>= 2): after a ring exchange, marks
//!   `DIR/ready-RANK` and waits forever in a receive nobody matches (the
//!   launcher-death tests); with `release`, until `DIR/go` exists.
//! - `dup [DIR]` (any): context ids, isolation of dup'd communicators,
//!   barriers (checked through marker files in DIR when given).
//! - `singleton` (1): messages to self.
//!
//! Payloads name their sender, receiver and sequence number: a 16-byte
//! header (sequence, size, tag, checksum of the body) then a pattern seeded
//! by (sender, receiver, sequence); messages under 16 bytes carry the first
//! bytes of the header.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use rivet::{
    Comm, Engine, Local, MsgError, Request, Shared, Status, ThreadLevel, Threading, ANY_SOURCE,
    ANY_TAG,
};
use rivet_tests::ensure;
use rivet_tests::pattern::{fill, mix, pattern, seed_of};
use rivet_tests::rank_check::{self, die, OrDie};

fn main() {
    rank_check::start("engine_check");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().cloned().unwrap_or_else(|| "pingpong".into());
    let rest = &args[args.len().min(1)..];

    if mode == "kill" && rest.first().map(String::as_str) == Some("early") {
        kill_before_init();
    }

    // `threads` calls the engine from several threads at once: its handles
    // must be `Send + Sync` (`Engine<Shared>`, always MULTIPLE). Every other
    // mode runs on one thread, on an `Engine<Local>` at SINGLE: no lock,
    // unless RIVET_THREAD_LEVEL=multiple raises the level.
    if mode == "threads" {
        run(
            rank_check::init::<Shared>(ThreadLevel::Multiple),
            &mode,
            |engine, world| {
                need(&mode, world, 2);
                threads(engine, world)
            },
        );
    } else {
        run(
            rank_check::init::<Local>(ThreadLevel::Single),
            &mode,
            |engine, world| one_thread(engine, world, &mode, rest),
        );
    }
}

/// Run `body` on the world, finalize, and say `OK` with the thread level
/// the engine ran at.
fn run<T: Threading>(engine: Engine<T>, mode: &str, body: impl FnOnce(&Engine<T>, &Comm<T>)) {
    let world = engine.world();
    let (rank, size) = (world.rank(), world.size());
    ensure!(
        engine.rank() == rank && engine.size() == size,
        "engine says rank {} of {}, the world communicator {rank} of {size}",
        engine.rank(),
        engine.size()
    );
    ensure!(rank < size, "rank {rank} >= size {size}");
    body(&engine, &world);
    let level = engine.thread_level();
    drop(world);
    engine.finalize().or_die("finalize");
    println!("engine_check {mode} OK rank {rank} of {size} at thread level {level}");
}

fn need<T: Threading>(mode: &str, world: &Comm<T>, n: u32) {
    let size = world.size();
    ensure!(size == n, "mode {mode} needs {n} ranks, not {size}");
}

fn at_least<T: Threading>(mode: &str, world: &Comm<T>, n: u32) {
    let size = world.size();
    ensure!(size >= n, "mode {mode} needs {n} ranks or more, not {size}");
}

/// Every mode but `threads`.
fn one_thread<T: Threading>(engine: &Engine<T>, world: &Comm<T>, mode: &str, rest: &[String]) {
    let need = |n: u32| need(mode, world, n);
    let at_least = |n: u32| at_least(mode, world, n);
    match mode {
        "pingpong" => {
            need(2);
            print_info(engine);
            pingpong(world)
        }
        "order" => {
            at_least(2);
            order(world)
        }
        "probe" => {
            at_least(2);
            probe(world)
        }
        "mprobe" => {
            need(2);
            mprobe(world)
        }
        "cancel" => {
            need(2);
            cancel(world)
        }
        "ssend" => {
            need(2);
            ssend(world)
        }
        "sizes" => {
            need(2);
            sizes(engine, world)
        }
        "trunc" => {
            need(2);
            trunc(world)
        }
        "stress" => {
            at_least(2);
            let total = rest.first().map_or(100_000, |s| s.parse().or_die("TOTAL"));
            let seed = rest.get(1).map_or(1, |s| s.parse().or_die("SEED"));
            print_info(engine);
            stress(world, total, seed)
        }
        "kill" => {
            need(3);
            kill(world)
        }
        "connect_all" => {
            connect_all(world);
            // After the traffic: the info names the VCs each path carried.
            print_info(engine)
        }
        "netkill" => {
            need(3);
            netkill(world)
        }
        "early_exit" => {
            need(3);
            early_exit(world)
        }
        "readkill" => {
            need(2);
            if rest.first().map(String::as_str) == Some("dead") {
                readkill_dead(world)
            } else {
                readkill(world)
            }
        }
        "panic" => {
            need(2);
            panic_mid_rendezvous(world)
        }
        "shmkill" => {
            need(3);
            shmkill(world)
        }
        "hang" => {
            at_least(2);
            let Some(dir) = rest.first() else {
                die("hang needs a DIR")
            };
            let release = rest.get(1).map(String::as_str) == Some("release");
            hang(world, std::path::Path::new(dir), release)
        }
        "dup" => dup(world, rest.first().map(String::as_str)),
        "singleton" => {
            need(1);
            singleton(world)
        }
        other => die(format!("unknown mode {other}")),
    }
}

// ---------------------------------------------------------------------------
// Patterns, payloads, random numbers.

/// The pattern of a test message of `size` bytes, number `index`.
fn sized_pattern(size: usize, index: u64) -> Vec<u8> {
    pattern(size, seed_of(&[size as u64, index]))
}

/// Die unless `got == want`, naming the first differing byte.
fn same_bytes(what: &str, got: &[u8], want: &[u8]) {
    ensure!(
        got.len() == want.len(),
        "{what}: {} bytes, expected {}",
        got.len(),
        want.len()
    );
    if got != want {
        let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap();
        die(format!(
            "{what}: byte {i} of {} is {:#04x}, expected {:#04x}",
            got.len(),
            got[i],
            want[i]
        ));
    }
}

fn all_bytes(what: &str, got: &[u8], value: u8) {
    if let Some(i) = got.iter().position(|&b| b != value) {
        die(format!(
            "{what}: byte {i} of {} is {:#04x}, expected it untouched ({value:#04x})",
            got.len(),
            got[i]
        ));
    }
}

fn checksum(b: &[u8]) -> u32 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().unwrap());
        h = (h.rotate_left(5) ^ w).wrapping_mul(0x0000_0100_0000_01B3);
    }
    for &byte in chunks.remainder() {
        h = (h.rotate_left(5) ^ byte as u64).wrapping_mul(0x0000_0100_0000_01B3);
    }
    (h ^ (h >> 32)) as u32
}

const HDR: usize = 16;

/// Message `seq` from `src` to `dst`: header (seq, size, tag, checksum of
/// the body), then the body's pattern; cut to `size` bytes.
fn message(src: u32, dst: u32, seq: u32, tag: i32, size: usize) -> Vec<u8> {
    let mut m = vec![0u8; size.max(HDR)];
    fill(
        &mut m[HDR..],
        seed_of(&[src as u64, dst as u64, seq as u64]),
    );
    let sum = checksum(&m[HDR..]);
    m[0..4].copy_from_slice(&seq.to_le_bytes());
    m[4..8].copy_from_slice(&(size as u32).to_le_bytes());
    m[8..12].copy_from_slice(&tag.to_le_bytes());
    m[12..16].copy_from_slice(&sum.to_le_bytes());
    m.truncate(size);
    m
}

/// Check a received message by its header and checksum (without rebuilding
/// the body): the cheap check of the stress mode.
fn check_by_checksum(what: &str, got: &[u8], src: u32, dst: u32, seq: u32, tag: i32, size: usize) {
    ensure!(
        got.len() == size,
        "{what}: {} bytes, expected {size}",
        got.len()
    );
    if size < HDR {
        same_bytes(what, got, &message(src, dst, seq, tag, size));
        return;
    }
    let word = |i: usize| u32::from_le_bytes(got[i..i + 4].try_into().unwrap());
    ensure!(
        word(0) == seq && word(4) == size as u32 && word(8) as i32 == tag,
        "{what}: header says seq {} size {} tag {}, expected seq {seq} size {size} tag {tag}",
        word(0),
        word(4),
        word(8) as i32
    );
    let sum = checksum(&got[HDR..]);
    ensure!(
        sum == word(12),
        "{what}: checksum of the {} body bytes is {sum:#010x}, the sender's {:#010x}",
        size - HDR,
        word(12)
    );
}

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(mix(seed))
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn pat(p: i32) -> String {
    if p == ANY_SOURCE {
        "ANY".into()
    } else {
        p.to_string()
    }
}

fn ok_status(what: &str, st: &Status) {
    ensure!(!st.cancelled, "{what}: reported cancelled: {st:?}");
    ensure!(st.error.is_none(), "{what}: reported an error: {st:?}");
}

fn statuses<T: Threading>(what: &str, reqs: &[Request<'_, T>]) -> Vec<Status> {
    reqs.iter()
        .enumerate()
        .map(|(i, r)| {
            ensure!(r.is_done(), "{what}: request {i} not done after wait_all");
            *r.status()
                .unwrap_or_else(|| die(format!("{what}: request {i} has no status after wait_all")))
        })
        .collect()
}

fn wait_all_ok<T: Threading>(what: &str, reqs: &mut [Request<'_, T>]) -> Vec<Status> {
    Request::wait_all(reqs).or_die(what);
    let sts = statuses(what, reqs);
    for (i, st) in sts.iter().enumerate() {
        ok_status(&format!("{what}: request {i}"), st);
    }
    sts
}

// ---------------------------------------------------------------------------
// The non-overtaking checker.

/// What a rank expects to receive: per sender, its messages to this rank in
/// send order (tag, size). A receive posted with (source, tag) must get the
/// earliest not-yet-received message of the sender it reports that matches
/// the tag: MPI's non-overtaking rule. Results of receives posted together
/// are checked in posting order.
struct Inbox {
    me: u32,
    plan: Vec<Vec<(i32, usize)>>,
    got: Vec<Vec<bool>>,
    /// First message not yet received, per sender.
    low: Vec<usize>,
    /// Messages at or past this index are not sent yet (stress rounds).
    limit: Vec<usize>,
    received: usize,
    bytes: u64,
}

impl Inbox {
    fn new(me: u32, plan: Vec<Vec<(i32, usize)>>) -> Inbox {
        Inbox {
            me,
            got: plan.iter().map(|p| vec![false; p.len()]).collect(),
            low: vec![0; plan.len()],
            limit: plan.iter().map(Vec::len).collect(),
            plan,
            received: 0,
            bytes: 0,
        }
    }

    fn total(&self) -> usize {
        self.plan.iter().map(Vec::len).sum()
    }

    fn remaining(&self) -> usize {
        self.total() - self.received
    }

    /// The message of `s` the pattern `tag` must get next.
    fn expected(&self, s: usize, tag: i32) -> Option<usize> {
        (self.low[s]..self.limit[s])
            .find(|&q| !self.got[s][q] && (tag == ANY_TAG || self.plan[s][q].0 == tag))
    }

    /// A pattern that some message available now matches: of (ANY, ANY),
    /// (s, ANY), (ANY, t), (s, t), with s and t those of a random message.
    fn pick(&self, rng: &mut Rng) -> (i32, i32) {
        let (s, t) = self.pick_message(rng);
        match rng.below(4) {
            0 => (ANY_SOURCE, ANY_TAG),
            1 => (s, ANY_TAG),
            2 => (ANY_SOURCE, t),
            _ => (s, t),
        }
    }

    /// Sender and tag of a random message available now.
    fn pick_message(&self, rng: &mut Rng) -> (i32, i32) {
        let senders: Vec<usize> = (0..self.plan.len())
            .filter(|&s| self.expected(s, ANY_TAG).is_some())
            .collect();
        ensure!(!senders.is_empty(), "nothing left to receive");
        let s = senders[rng.below(senders.len() as u64) as usize];
        let (lo, hi) = (self.low[s], self.limit[s]);
        let start = lo + rng.below((hi - lo) as u64) as usize;
        let q = (start..hi)
            .chain(lo..start)
            .find(|&q| !self.got[s][q])
            .unwrap();
        (s as i32, self.plan[s][q].0)
    }

    /// The size the receive (s, t) will get, when s and t are exact.
    fn size_for(&self, (s, t): (i32, i32)) -> Option<usize> {
        if s == ANY_SOURCE || t == ANY_TAG {
            return None;
        }
        self.expected(s as usize, t)
            .map(|q| self.plan[s as usize][q].1)
    }

    /// Check the receive posted with `(sp, tp)` that completed with `st`,
    /// `data` being its buffer; `verify(sender, seq, tag, size, bytes)`.
    fn accept(
        &mut self,
        (sp, tp): (i32, i32),
        st: &Status,
        data: &[u8],
        verify: impl FnOnce(u32, u32, i32, usize, &[u8]),
    ) {
        let what = format!(
            "receive #{} (source {}, tag {}) by rank {}",
            self.received,
            pat(sp),
            pat(tp),
            self.me
        );
        ok_status(&what, st);
        ensure!(
            st.source >= 0 && (st.source as usize) < self.plan.len(),
            "{what}: source {} out of range",
            st.source
        );
        let s = st.source as usize;
        ensure!(
            sp == ANY_SOURCE || sp == st.source,
            "{what}: got a message from {}",
            st.source
        );
        ensure!(tp == ANY_TAG || tp == st.tag, "{what}: got tag {}", st.tag);
        let Some(q) = self.expected(s, tp) else {
            die(format!(
                "{what}: got source {} tag {} count {}, but rank {s} has no such message left",
                st.source, st.tag, st.count
            ))
        };
        let (tag, size) = self.plan[s][q];
        ensure!(
            st.tag == tag && st.count == size,
            "{what}: got source {s} tag {} count {}, but the earliest matching message not yet \
             received from rank {s} is #{q} with tag {tag} and {size} bytes (overtaken or lost)",
            st.tag,
            st.count
        );
        ensure!(
            data.len() >= size,
            "{what}: {size} bytes do not fit the {}-byte buffer",
            data.len()
        );
        verify(s as u32, q as u32, tag, size, &data[..size]);
        self.got[s][q] = true;
        while self.low[s] < self.plan[s].len() && self.got[s][self.low[s]] {
            self.low[s] += 1;
        }
        self.received += 1;
        self.bytes += size as u64;
    }
}

/// Verify by rebuilding the whole message.
fn verify_full(me: u32) -> impl Fn(u32, u32, i32, usize, &[u8]) {
    move |s, q, tag, size, data| {
        same_bytes(
            &format!("message #{q} from rank {s} (tag {tag})"),
            data,
            &message(s, me, q, tag, size),
        )
    }
}

// ---------------------------------------------------------------------------
// pingpong

fn pingpong<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    let peer = 1 - me;
    let sizes = [0usize, 1, 100, 4096, 65_536, 300_000, 4 << 20];
    for (i, &size) in sizes.iter().enumerate() {
        for rep in 0..4u64 {
            let index = (i as u64) * 100 + rep * 2;
            let ping = sized_pattern(size, index);
            let pong = sized_pattern(size, index + 1);
            let mut buf = vec![0u8; size];
            let tag = i as i32;
            let what = format!("{size} bytes, repetition {rep}");
            match (me, rep % 4) {
                // Blocking calls.
                (0, 0) => {
                    world.send(&ping, peer, tag).or_die("send");
                    let st = world.recv(&mut buf, peer as i32, tag).or_die("recv");
                    check_recv(&what, &st, peer, tag, &buf, &pong);
                }
                (1, 0) => {
                    let st = world.recv(&mut buf, peer as i32, tag).or_die("recv");
                    check_recv(&what, &st, peer, tag, &buf, &ping);
                    world.send(&pong, peer, tag).or_die("send");
                }
                // Scoped nonblocking calls, the receive posted first.
                (_, 1) => {
                    let (out, want) = if me == 0 {
                        (&ping, &pong)
                    } else {
                        (&pong, &ping)
                    };
                    let st = world.scope(|s| {
                        let r = s.irecv(&mut buf, ANY_SOURCE, tag).or_die("irecv");
                        let w = s.isend(out, peer, tag).or_die("isend");
                        let st = r.wait().or_die("wait irecv");
                        ok_status("isend", &w.wait().or_die("wait isend"));
                        st
                    });
                    check_recv(&what, &st, peer, tag, &buf, want);
                }
                // Raw calls.
                (_, 2) => {
                    let (out, want) = if me == 0 {
                        (&ping, &pong)
                    } else {
                        (&pong, &ping)
                    };
                    // SAFETY: both buffers outlive the requests, which are
                    // waited for before the buffers are touched again.
                    let st = unsafe {
                        let w = world
                            .isend_raw(out.as_ptr(), out.len(), peer, tag)
                            .or_die("isend_raw");
                        let r = world
                            .irecv_raw(buf.as_mut_ptr(), buf.len(), peer as i32, ANY_TAG)
                            .or_die("irecv_raw");
                        let mut reqs = [w, r];
                        let sts = wait_all_ok("raw wait_all", &mut reqs);
                        sts[1]
                    };
                    check_recv(&what, &st, peer, tag, &buf, want);
                }
                // Synchronous sends, receive polled with test().
                _ => {
                    let (out, want) = if me == 0 {
                        (&ping, &pong)
                    } else {
                        (&pong, &ping)
                    };
                    let st = world.scope(|s| {
                        let w = s.issend(out, peer, tag).or_die("issend");
                        let mut r = s.irecv(&mut buf, peer as i32, tag).or_die("irecv");
                        let st = loop {
                            if let Some(st) = r.test().or_die("test") {
                                break st;
                            }
                        };
                        ensure!(r.is_done(), "{what}: test() gave a status, is_done() false");
                        ok_status("issend", &w.wait().or_die("wait issend"));
                        st
                    });
                    check_recv(&what, &st, peer, tag, &buf, want);
                }
            }
        }
    }
    if me == 0 {
        println!("engine_check pingpong: sizes {sizes:?} both ways");
    }
}

fn check_recv(what: &str, st: &Status, source: u32, tag: i32, buf: &[u8], want: &[u8]) {
    ok_status(what, st);
    ensure!(
        st.source == source as i32 && st.tag == tag && st.count == want.len(),
        "{what}: status {st:?}, expected source {source} tag {tag} count {}",
        want.len()
    );
    same_bytes(what, &buf[..want.len()], want);
}

// ---------------------------------------------------------------------------
// order

const ORDER_K: u32 = 300;
const ORDER_BIG: usize = 300_000;

fn order_tag(s: u32, q: u32) -> i32 {
    ((q + s) % 5) as i32
}

fn order_size(q: u32) -> usize {
    match q {
        q if q % 10 == 9 => ORDER_BIG,
        q if q % 23 == 0 => (q % 16) as usize,
        q => HDR + (q as usize * 37) % 300,
    }
}

fn order_plan(s: u32) -> Vec<(i32, usize)> {
    (0..ORDER_K)
        .map(|q| (order_tag(s, q), order_size(q)))
        .collect()
}

fn order<T: Threading>(world: &Comm<T>) {
    let (me, n) = (world.rank(), world.size());
    if me != 0 {
        let msgs: Vec<Vec<u8>> = (0..ORDER_K)
            .map(|q| message(me, 0, q, order_tag(me, q), order_size(q)))
            .collect();
        // Everything at once: small messages queue behind the large ones.
        world.scope(|s| {
            let mut reqs: Vec<Request<'_, T>> = msgs
                .iter()
                .enumerate()
                .map(|(q, m)| s.isend(m, 0, order_tag(me, q as u32)).or_die("isend"))
                .collect();
            wait_all_ok("sends to rank 0", &mut reqs);
        });
        return;
    }

    let plan: Vec<Vec<(i32, usize)>> = (0..n)
        .map(|s| if s == 0 { Vec::new() } else { order_plan(s) })
        .collect();
    let mut inbox = Inbox::new(0, plan);
    let check = verify_full(0);

    // Phase A: exact receives posted before wildcard ones, all at once.
    let mut pats: Vec<(i32, i32)> = Vec::new();
    for s in 1..n {
        // Not the tag of the sender's first message.
        pats.push((s as i32, order_tag(s, 3)));
    }
    pats.push((ANY_SOURCE, 4));
    for j in 0..24u32 {
        pats.push(match j % 4 {
            3 => ((1 + j % (n - 1)) as i32, ANY_TAG),
            _ => (ANY_SOURCE, ANY_TAG),
        });
    }
    let mut bufs: Vec<Vec<u8>> = pats.iter().map(|_| vec![0u8; ORDER_BIG]).collect();
    let sts = recv_batch(world, &pats, &mut bufs);
    for ((p, st), b) in pats.iter().zip(&sts).zip(&bufs) {
        inbox.accept(*p, st, b, &check);
    }

    // Phase B: one receive at a time, patterns at random.
    let mut rng = Rng::new(7);
    let mut buf = vec![0u8; ORDER_BIG];
    let mut kinds = [0usize; 4];
    while inbox.remaining() > 0 {
        let p = inbox.pick(&mut rng);
        kinds[(p.0 != ANY_SOURCE) as usize * 2 + (p.1 != ANY_TAG) as usize] += 1;
        let st = world.recv(&mut buf, p.0, p.1).or_die("recv");
        inbox.accept(p, &st, &buf, &check);
    }
    println!(
        "engine_check order: rank 0 got all {} messages of {} senders in order \
         ({} posted together, then {} any/any, {} any/tag, {} src/any, {} src/tag)",
        inbox.received,
        n - 1,
        pats.len(),
        kinds[0],
        kinds[1],
        kinds[2],
        kinds[3]
    );
}

/// Post one receive per pattern, in order, then wait for all of them.
fn recv_batch<T: Threading>(
    world: &Comm<T>,
    pats: &[(i32, i32)],
    bufs: &mut [Vec<u8>],
) -> Vec<Status> {
    world.scope(|s| {
        let mut reqs: Vec<Request<'_, T>> = bufs
            .iter_mut()
            .zip(pats)
            .map(|(b, &(sp, tp))| s.irecv(b, sp, tp).or_die("irecv"))
            .collect();
        Request::wait_all(&mut reqs).or_die("wait_all receives");
        statuses("receives", &reqs)
    })
}

// ---------------------------------------------------------------------------
// probe

// ---------------------------------------------------------------------------
// mprobe

fn mprobe<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    // (tag, size): eager (ring, cell), rendezvous (single copy, shared
    // copy from 64 KiB), and one dropped unreceived (tag 66).
    let msgs: [(i32, usize); 7] = [
        (5, 0),
        (6, 8),
        (7, 3000),
        (8, 40_000),
        (9, 300_000),
        (66, 2 << 20),
        (10, 1 << 20),
    ];
    if me == 1 {
        let data: Vec<Vec<u8>> = msgs
            .iter()
            .enumerate()
            .map(|(q, &(tag, size))| message(1, 0, q as u32, tag, size))
            .collect();
        world.scope(|s| {
            let mut reqs: Vec<Request<'_, T>> = data
                .iter()
                .zip(&msgs)
                // Synchronous: each completes only once rank 0 took it,
                // the dropped one included.
                .map(|(m, &(tag, _))| s.issend(m, 0, tag).or_die("issend"))
                .collect();
            wait_all_ok("synchronous sends", &mut reqs);
        });
        world.send(&[], 0, 1).or_die("done");
        println!("engine_check mprobe: rank 1 sends all finished");
    } else {
        let mut got = 0;
        // Wildcards take the earliest; an exact probe its own message.
        let m = world.mprobe(ANY_SOURCE, ANY_TAG).or_die("mprobe(ANY, ANY)");
        ensure!(
            m.status().tag == 5 && m.status().count == 0 && m.status().source == 1,
            "mprobe(ANY, ANY): {:?}",
            m.status()
        );
        // Taken: another probe sees the next message, not this one.
        let next = world.probe(1, ANY_TAG).or_die("probe after mprobe");
        ensure!(
            next.tag == 6,
            "probe after mprobe saw tag {}, not 6",
            next.tag
        );
        let st = m.recv(&mut []).or_die("mrecv of 0 bytes");
        ensure!(st.count == 0 && st.tag == 5, "mrecv of 0 bytes: {st:?}");
        got += 1;
        for (q, &(tag, size)) in msgs.iter().enumerate().skip(1) {
            let m = loop {
                match world.improbe(1, tag).or_die("improbe") {
                    Some(m) => break m,
                    None => std::hint::spin_loop(),
                }
            };
            ensure!(
                m.status().count == size && m.status().tag == tag,
                "improbe(1, {tag}): {:?}, expected {size} bytes",
                m.status()
            );
            ensure!(
                world.iprobe(1, tag).or_die("iprobe").is_none(),
                "tag {tag}: iprobe still sees a message a matched probe took"
            );
            if tag == 66 {
                drop(m);
                continue;
            }
            let mut b = vec![0u8; size];
            let st = m.recv(&mut b).or_die("mrecv");
            ok_status("mrecv", &st);
            same_bytes(
                &format!("matched message tag {tag}"),
                &b,
                &message(1, 0, q as u32, tag, size),
            );
            got += 1;
        }
        world.recv(&mut [], 1, 1).or_die("done");
        println!("engine_check mprobe: rank 0 took and received {got} messages, dropped 1");
    }
}

fn probe<T: Threading>(world: &Comm<T>) {
    let (me, n) = (world.rank(), world.size());
    let fixed: [(i32, usize); 4] = [(7, 100), (9, 0), (11, 200_000), (13, 5000)];
    // Phase 1: rank 1 sends four messages; rank 0 probes each before
    // receiving it.
    if me == 1 {
        for (q, &(tag, size)) in fixed.iter().enumerate() {
            let m = message(1, 0, q as u32, tag, size);
            world.send(&m, 0, tag).or_die("send");
        }
    } else if me == 0 {
        let want = |q: usize| message(1, 0, q as u32, fixed[q].0, fixed[q].1);
        let same = |what: &str, st: &Status, source: i32, (tag, count): (i32, usize)| {
            ok_status(what, st);
            ensure!(
                st.source == source && st.tag == tag && st.count == count,
                "{what}: {st:?}, expected source {source} tag {tag} count {count}"
            );
        };
        let st = world.probe(1, 7).or_die("probe(1, 7)");
        same("probe(1, 7)", &st, 1, fixed[0]);
        let again = world.probe(1, 7).or_die("probe(1, 7) again");
        same("a second probe(1, 7)", &again, 1, fixed[0]);
        let st = world
            .iprobe(1, 7)
            .or_die("iprobe(1, 7)")
            .unwrap_or_else(|| die("iprobe(1, 7) after probe(1, 7) found nothing"));
        same("iprobe(1, 7) after probe", &st, 1, fixed[0]);
        let mut b = vec![0u8; 100];
        let st = world.recv(&mut b, 1, 7).or_die("recv(1, 7)");
        same("recv after probe(1, 7)", &st, 1, fixed[0]);
        same_bytes("message tag 7", &b, &want(0));

        let st = loop {
            if let Some(st) = world.iprobe(ANY_SOURCE, ANY_TAG).or_die("iprobe") {
                break st;
            }
        };
        same("iprobe(ANY, ANY)", &st, 1, fixed[1]);
        let mut b = vec![0xEEu8; 16];
        let st = world.recv(&mut b, ANY_SOURCE, ANY_TAG).or_die("recv");
        same("recv(ANY, ANY) after iprobe", &st, 1, fixed[1]);
        all_bytes("buffer of the 0-byte receive", &b, 0xEE);

        ensure!(
            world.iprobe(1, 99).or_die("iprobe(1, 99)").is_none(),
            "iprobe(1, 99) found a message no one sent"
        );
        let st = world.probe(ANY_SOURCE, 11).or_die("probe(ANY, 11)");
        same("probe(ANY, 11) of a large message", &st, 1, fixed[2]);
        let mut b = vec![0u8; st.count];
        let st = world.recv(&mut b, st.source, st.tag).or_die("recv(1, 11)");
        same("recv after probe(ANY, 11)", &st, 1, fixed[2]);
        same_bytes("message tag 11", &b, &want(2));

        let st = world.probe(1, ANY_TAG).or_die("probe(1, ANY)");
        same("probe(1, ANY)", &st, 1, fixed[3]);
        let mut b = vec![0u8; st.count];
        let st = world.recv(&mut b, ANY_SOURCE, 13).or_die("recv(ANY, 13)");
        same("recv after probe(1, ANY)", &st, 1, fixed[3]);
        same_bytes("message tag 13", &b, &want(3));
    }
    world.barrier().or_die("barrier");

    // Phase 2: every other rank sends K messages; rank 0 probes (blocking or
    // polling, wildcard or not) and the next receive must get that message.
    const K: u32 = 40;
    let tag_of = |s: u32, q: u32| (100 + (q + s) % 3) as i32;
    let size_of = |q: u32| match q % 8 {
        7 => 150_000,
        3 => 0,
        _ => HDR + (q as usize * 101) % 3000,
    };
    if me != 0 {
        let msgs: Vec<Vec<u8>> = (0..K)
            .map(|q| message(me, 0, 4 + q, tag_of(me, q), size_of(q)))
            .collect();
        world.scope(|s| {
            let mut reqs: Vec<Request<'_, T>> = msgs
                .iter()
                .enumerate()
                .map(|(q, m)| s.isend(m, 0, tag_of(me, q as u32)).or_die("isend"))
                .collect();
            wait_all_ok("sends", &mut reqs);
        });
    } else {
        // Sequence numbers 0..4 were phase 1's; mark them received.
        let plan: Vec<Vec<(i32, usize)>> = (0..n)
            .map(|s| {
                let mut p: Vec<(i32, usize)> = Vec::new();
                if s != 0 {
                    p.extend(fixed.iter().copied().filter(|_| s == 1));
                    while p.len() < 4 {
                        p.push((-2, 0));
                    }
                    p.extend((0..K).map(|q| (tag_of(s, q), size_of(q))));
                }
                p
            })
            .collect();
        let mut inbox = Inbox::new(0, plan);
        for s in 1..n as usize {
            for q in 0..4 {
                inbox.got[s][q] = true;
            }
            inbox.low[s] = 4;
        }
        inbox.received = 4 * (n as usize - 1);
        let check = verify_full(0);
        let mut rng = Rng::new(11);
        let mut i = 0u32;
        while inbox.remaining() > 0 {
            let (ps, pt) = inbox.pick_message(&mut rng);
            let probe_pat = match i % 3 {
                0 => (ANY_SOURCE, ANY_TAG),
                1 => (ps, ANY_TAG),
                _ => (ANY_SOURCE, pt),
            };
            let st = if i % 2 == 0 {
                world.probe(probe_pat.0, probe_pat.1).or_die("probe")
            } else {
                loop {
                    if let Some(st) = world.iprobe(probe_pat.0, probe_pat.1).or_die("iprobe") {
                        break st;
                    }
                }
            };
            let what = format!("probe #{i} ({}, {})", pat(probe_pat.0), pat(probe_pat.1));
            ok_status(&what, &st);
            if let Some(again) = world.iprobe(probe_pat.0, probe_pat.1).or_die("iprobe") {
                ensure!(
                    again == st,
                    "{what}: gave {st:?}, an iprobe right after gave {again:?}"
                );
            } else {
                die(format!(
                    "{what}: found {st:?}, an iprobe right after found nothing"
                ));
            }
            // Receive with the same pattern, or exactly what was probed,
            // into a buffer of exactly the probed size.
            let recv_pat = if i % 4 < 2 {
                probe_pat
            } else {
                (st.source, st.tag)
            };
            let mut b = vec![0u8; st.count];
            let got = world.recv(&mut b, recv_pat.0, recv_pat.1).or_die("recv");
            ensure!(
                got.source == st.source && got.tag == st.tag && got.count == st.count,
                "{what}: probed {st:?}, the receive ({}, {}) after it got {got:?}",
                pat(recv_pat.0),
                pat(recv_pat.1)
            );
            inbox.accept(probe_pat, &got, &b, &check);
            i += 1;
        }
        ensure!(
            world.iprobe(ANY_SOURCE, ANY_TAG).or_die("iprobe").is_none(),
            "a message is waiting after all were received"
        );
        println!(
            "engine_check probe: rank 0 probed and received {} messages",
            inbox.received
        );
    }
}

// ---------------------------------------------------------------------------
// cancel

fn cancel<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    let big = 4 << 20;
    // Sends rank 0 cancels: (synchronous?, size).
    let sends: [(bool, usize); 4] = [(true, 100), (true, 0), (false, big), (true, big)];
    if me == 0 {
        // (a) Receives that nothing matches. Rank 1 sends nothing until told.
        for (sp, tp) in [
            (ANY_SOURCE, ANY_TAG),
            (1, 77),
            (ANY_SOURCE, 77),
            (1, ANY_TAG),
        ] {
            let what = format!("cancelled receive ({}, {})", pat(sp), pat(tp));
            let mut buf = vec![0xABu8; 1000];
            let st = world.scope(|s| {
                let mut r = s.irecv(&mut buf, sp, tp).or_die("irecv");
                for _ in 0..100 {
                    if let Some(st) = r.test().or_die("test") {
                        die(format!("{what}: completed before it was cancelled: {st:?}"));
                    }
                }
                r.cancel().or_die("cancel");
                r.wait().or_die("wait after cancel")
            });
            ensure!(st.cancelled, "{what}: status says not cancelled: {st:?}");
            all_bytes(&what, &buf, 0xAB);
        }
        let mut raw = vec![0xABu8; 64];
        // SAFETY: `raw` outlives the request, which is waited for.
        let st = unsafe {
            let r = world
                .irecv_raw(raw.as_mut_ptr(), raw.len(), 1, 78)
                .or_die("irecv_raw");
            r.cancel().or_die("cancel raw");
            r.wait().or_die("wait raw")
        };
        ensure!(st.cancelled, "cancelled raw receive: {st:?}");
        all_bytes("cancelled raw receive", &raw, 0xAB);

        // (b) A message with the cancelled receive's tag, sent afterwards,
        // is received normally.
        world.send(b"go", 1, 1).or_die("send go");
        let mut buf = vec![0u8; 100];
        let st = world.recv(&mut buf, 1, 77).or_die("recv(1, 77)");
        check_recv(
            "tag 77 after the cancelled receives",
            &st,
            1,
            77,
            &buf,
            &message(1, 0, 0, 77, 50),
        );

        // (c) Sends rank 1 never matches are withdrawn: its ANY_TAG receive
        // then gets the message after them.
        for (i, &(sync, size)) in sends.iter().enumerate() {
            let what = format!(
                "cancelled {} of {size} bytes",
                if sync { "issend" } else { "isend" }
            );
            let m = sized_pattern(size, i as u64);
            let tag = 50 + i as i32;
            let st = world.scope(|s| {
                let mut r = if sync {
                    s.issend(&m, 1, tag)
                } else {
                    s.isend(&m, 1, tag)
                }
                .or_die("send");
                for _ in 0..10 {
                    let _ = r.test().or_die("test");
                }
                if r.is_done() {
                    die(format!(
                        "{what}: completed although rank 1 has not received it"
                    ));
                }
                r.cancel().or_die("cancel");
                r.wait().or_die("wait after cancel")
            });
            ensure!(st.cancelled, "{what}: status says not cancelled: {st:?}");
            world.send(b"go", 1, 2).or_die("send go");
            let next = message(0, 1, i as u32, 60 + i as i32, 40);
            world.send(&next, 1, 60 + i as i32).or_die("send next");
        }

        // (d) Cancelling a send after rank 1 matched it fails.
        for (tag, size) in [(70, 1000usize), (72, big)] {
            let what = format!("cancel of an issend of {size} bytes after its match");
            let m = sized_pattern(size, tag as u64);
            let st = world.scope(|s| {
                let r = s.issend(&m, 1, tag).or_die("issend");
                let mut b = [0u8; 8];
                let st = world.recv(&mut b, 1, 71).or_die("recv(1, 71)");
                ok_status("matched notice", &st);
                r.cancel().or_die("cancel");
                r.wait().or_die("wait after cancel")
            });
            ensure!(!st.cancelled, "{what}: status says cancelled: {st:?}");
        }

        // (e) Rank 1 cancels receives that already matched.
        for (tag, size) in [(73, big), (76, 100)] {
            let mut b = [0u8; 8];
            let st = world.recv(&mut b, 1, 74).or_die("recv(1, 74)");
            ok_status("posted notice", &st);
            let m = sized_pattern(size, tag as u64);
            world.scope(|s| {
                let r = s.isend(&m, 1, tag).or_die("isend");
                world.send(b"sent", 1, 75).or_die("send(75)");
                ok_status("isend", &r.wait().or_die("wait isend"));
            });
        }
    } else {
        let mut b = [0u8; 8];
        let st = world.recv(&mut b, 0, 1).or_die("recv go");
        ok_status("go", &st);
        world
            .send(&message(1, 0, 0, 77, 50), 0, 77)
            .or_die("send(77)");

        for (i, &(_, size)) in sends.iter().enumerate() {
            let st = world.recv(&mut b, 0, 2).or_die("recv go");
            ok_status("go", &st);
            let mut buf = vec![0u8; size.max(100)];
            let st = world.recv(&mut buf, 0, ANY_TAG).or_die("recv(0, ANY)");
            let next = message(0, 1, i as u32, 60 + i as i32, 40);
            check_recv(
                &format!(
                    "the receive after a cancelled send of {size} bytes (tag {})",
                    50 + i
                ),
                &st,
                0,
                60 + i as i32,
                &buf,
                &next,
            );
        }

        for (tag, size) in [(70, 1000usize), (72, big)] {
            let mut buf = vec![0u8; size];
            let st = world.recv(&mut buf, 0, tag).or_die("recv");
            check_recv(
                "issend",
                &st,
                0,
                tag,
                &buf,
                &sized_pattern(size, tag as u64),
            );
            world.send(b"matched", 0, 71).or_die("send(71)");
        }

        for (tag, size) in [(73, big), (76, 100)] {
            let what = format!("cancel of a matched receive of {size} bytes");
            let mut buf = vec![0u8; size];
            let st = world.scope(|s| {
                let r = s.irecv(&mut buf, 0, tag).or_die("irecv");
                world.send(b"posted", 0, 74).or_die("send(74)");
                // Tag 75 comes after `tag`, so `tag` has matched by now.
                let mut b = [0u8; 8];
                ok_status(
                    "sent notice",
                    &world.recv(&mut b, 0, 75).or_die("recv(0, 75)"),
                );
                r.cancel().or_die("cancel");
                r.wait().or_die("wait after cancel")
            });
            ensure!(!st.cancelled, "{what}: status says cancelled: {st:?}");
            check_recv(&what, &st, 0, tag, &buf, &sized_pattern(size, tag as u64));
        }
    }
    world.barrier().or_die("barrier");
    if let Some(st) = world.iprobe(ANY_SOURCE, ANY_TAG).or_die("iprobe") {
        die(format!("a message is still waiting at the end: {st:?}"));
    }
    if me == 0 {
        println!(
            "engine_check cancel: 5 receives and {} sends cancelled, 4 late cancels refused",
            sends.len()
        );
    }
}

// ---------------------------------------------------------------------------
// ssend

fn ssend<T: Threading>(world: &Comm<T>) {
    const TESTS: usize = 2000;
    let me = world.rank();
    let sizes = [0usize, 1, 100, 4000, 65_536, 1 << 20, 4 << 20];
    let mut early = 0;
    for (i, &size) in sizes.iter().enumerate() {
        let i = i as u64;
        let m = sized_pattern(size, i * 10);
        let plain = sized_pattern(size, i * 10 + 1);
        let blocking = sized_pattern(size, i * 10 + 2);
        if me == 0 {
            world.scope(|s| {
                let mut r = s.issend(&m, 1, 10).or_die("issend");
                for k in 0..TESTS {
                    if let Some(st) = r.test().or_die("test") {
                        die(format!(
                            "an issend of {size} bytes completed ({st:?}) at test {k}, before \
                             rank 1 could post its receive (it waits for a go message)"
                        ));
                    }
                }
                world.send(b"go", 1, 11).or_die("send go");
                ok_status("issend", &r.wait().or_die("wait issend"));
            });
            // The same with a standard send: it may complete early.
            world.scope(|s| {
                let mut r = s.isend(&plain, 1, 12).or_die("isend");
                let mut done = false;
                for _ in 0..TESTS {
                    if let Some(st) = r.test().or_die("test") {
                        ok_status("isend", &st);
                        done = true;
                        break;
                    }
                }
                early += done as usize;
                world.send(b"go", 1, 13).or_die("send go");
                if !done {
                    ok_status("isend", &r.wait().or_die("wait isend"));
                }
            });
            world.ssend(&blocking, 1, 14).or_die("ssend");
        } else {
            let mut b = [0u8; 8];
            let mut buf = vec![0u8; size];
            ok_status("go", &world.recv(&mut b, 0, 11).or_die("recv go"));
            let st = world.recv(&mut buf, 0, 10).or_die("recv(0, 10)");
            check_recv("issend", &st, 0, 10, &buf, &m);
            ok_status("go", &world.recv(&mut b, 0, 13).or_die("recv go"));
            let st = world.recv(&mut buf, 0, 12).or_die("recv(0, 12)");
            check_recv("isend", &st, 0, 12, &buf, &plain);
            let st = world.recv(&mut buf, 0, 14).or_die("recv(0, 14)");
            check_recv("ssend", &st, 0, 14, &buf, &blocking);
        }
    }
    if me == 0 {
        println!(
            "engine_check ssend: {} issends stayed pending for {TESTS} tests each until matched; \
             {early} standard sends completed before their match",
            sizes.len()
        );
    }
}

// ---------------------------------------------------------------------------
// sizes

/// Sizes to try: fixed ones, plus one around every number the engine's info
/// or the environment gives as a threshold.
fn interesting_sizes<T: Threading>(engine: &Engine<T>) -> Vec<usize> {
    let mut sizes: Vec<usize> = vec![
        0,
        1,
        2,
        7,
        8,
        9,
        15,
        16,
        17,
        31,
        63,
        64,
        65,
        100,
        1000,
        4095,
        4096,
        4097,
        65_535,
        65_536,
        65_537,
        1 << 20,
        (1 << 20) + 1,
        (4 << 20) - 1,
        4 << 20,
        (4 << 20) + 1,
    ];
    let mut around = |v: usize| {
        for d in [0usize, 1, 40, 41, 64] {
            sizes.push(v.saturating_sub(d));
        }
        sizes.push(v + 1);
    };
    for k in [1usize, 2, 8, 16, 32, 64, 128, 256] {
        around(k << 10);
    }
    for name in [
        "RIVET_SHM_EAGER_MAX",
        "RIVET_EAGER_MAX",
        "RIVET_TCP_EAGER_MAX",
        "RIVET_TCP_PIECE",
        "RIVET_SHM_CELL_SIZE",
        "RIVET_SHM_FASTBOX_MAX",
    ] {
        if let Some(v) = std::env::var(name).ok().and_then(|v| v.parse().ok()) {
            around(v);
        }
    }
    for (key, value) in &engine.info().items {
        let key = key.to_ascii_lowercase();
        if ["shm", "eager", "lmt", "threshold", "piece"]
            .iter()
            .any(|w| key.contains(w))
        {
            for v in numbers(value).into_iter().filter(|&v| v >= 16) {
                around(v);
                // Piece boundaries of a pipelined copy.
                if v >= 1024 {
                    around(2 * v);
                    around(3 * v);
                }
            }
        }
    }
    sizes.retain(|&s| s <= (4 << 20) + 1);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Every decimal number in `s`.
fn numbers(s: &str) -> Vec<usize> {
    s.split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// Rank 0 prints what the engine runs with, one `engine_check info:` line
/// per item.
fn print_info<T: Threading>(engine: &Engine<T>) {
    if engine.rank() == 0 {
        for (k, v) in &engine.info().items {
            println!("engine_check info: {k}: {v}");
        }
    }
}

fn sizes<T: Threading>(engine: &Engine<T>, world: &Comm<T>) {
    let me = world.rank();
    let peer = 1 - me;
    let sizes = interesting_sizes(engine);
    print_info(engine);
    if me == 0 {
        println!("engine_check sizes: {} sizes: {sizes:?}", sizes.len());
    }
    const GUARD: usize = 64;
    // One at a time, both ways, into buffers larger than the message.
    for (i, &size) in sizes.iter().enumerate() {
        let i = i as u64;
        let ping = sized_pattern(size, 4 * i);
        let pong = sized_pattern(size, 4 * i + 1);
        let mut buf = vec![0xEEu8; size + GUARD];
        let tag = (i % 1000) as i32;
        let what = format!("{size} bytes");
        let (out, want) = if me == 0 {
            (&ping, &pong)
        } else {
            (&pong, &ping)
        };
        if me == 0 {
            world.send(out, peer, tag).or_die("send");
        }
        let st = world.recv(&mut buf, peer as i32, tag).or_die("recv");
        check_recv(&what, &st, peer, tag, &buf, want);
        all_bytes(
            &format!("{what}: bytes after the message"),
            &buf[size..],
            0xEE,
        );
        if me == 1 {
            world.send(out, peer, tag).or_die("send");
        }
    }
    // All at once, both ways; receives posted in reverse order.
    let outs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &s)| sized_pattern(s, 4 * i as u64 + 2 + me as u64))
        .collect();
    let mut ins: Vec<Vec<u8>> = sizes.iter().map(|&s| vec![0u8; s]).collect();
    world.scope(|s| {
        let mut reqs: Vec<Request<'_, T>> = Vec::new();
        for (i, b) in ins.iter_mut().enumerate().rev() {
            reqs.push(s.irecv(b, peer as i32, i as i32).or_die("irecv"));
        }
        for (i, m) in outs.iter().enumerate() {
            reqs.push(s.isend(m, peer, i as i32).or_die("isend"));
        }
        wait_all_ok("all sizes at once", &mut reqs);
    });
    for (i, b) in ins.iter().enumerate() {
        let want = sized_pattern(sizes[i], 4 * i as u64 + 2 + peer as u64);
        same_bytes(&format!("{} bytes, all at once", sizes[i]), b, &want);
    }
    println!(
        "engine_check sizes: rank {me} verified {} sizes from {} to {} bytes",
        sizes.len(),
        sizes[0],
        sizes[sizes.len() - 1]
    );
    if let Some((_, reads)) = engine
        .info()
        .items
        .iter()
        .find(|(k, _)| k == "netmod.rendezvous_reads")
    {
        println!("engine_check sizes: rank {me} rendezvous reads: {reads}");
    }
    if let Some((_, reads)) = engine
        .info()
        .items
        .iter()
        .find(|(k, _)| k == "shm.single_copy_reads")
    {
        println!("engine_check sizes: rank {me} single-copy reads: {reads}");
    }
}

// ---------------------------------------------------------------------------
// trunc

fn trunc<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    let mut cases: Vec<(usize, usize)> = vec![
        (10, 5),
        (100, 0),
        (100, 100),
        (5000, 4096),
        (5000, 1),
        (16_320, 10_000),
        (16_321, 16_320),
        (200_000, 100_000),
        (200_000, 1000),
        (200_000, 200_000),
        ((4 << 20) + 1, 4 << 20),
        ((4 << 20) + 1, 65_536),
    ];
    for name in ["RIVET_SHM_EAGER_MAX", "RIVET_EAGER_MAX"] {
        if let Some(t) = std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
        {
            cases.extend([(t + 1, t), (t, t.saturating_sub(1)), (t + 100, t + 99)]);
        }
    }
    const GUARD: usize = 64;
    for (i, &(size, cap)) in cases.iter().enumerate() {
        let m = sized_pattern(size, i as u64);
        let next = sized_pattern(64, 1000 + i as u64);
        if me == 1 {
            world.send(&m, 0, 30).or_die("send");
            world.send(&next, 0, 31).or_die("send next");
            continue;
        }
        let what = format!("{size}-byte message into {cap} bytes");
        let mut alloc = vec![0xEEu8; cap + GUARD];
        let st = if i % 2 == 0 {
            world.recv(&mut alloc[..cap], 1, 30).or_die("recv")
        } else {
            world.scope(|s| {
                s.irecv(&mut alloc[..cap], ANY_SOURCE, ANY_TAG)
                    .or_die("irecv")
                    .wait()
                    .or_die("wait")
            })
        };
        ensure!(!st.cancelled, "{what}: status says cancelled: {st:?}");
        ensure!(st.source == 1 && st.tag == 30, "{what}: {st:?}");
        if cap < size {
            ensure!(
                st.error
                    == Some(MsgError::Truncated {
                        sent: size,
                        capacity: cap
                    }),
                "{what}: status error {:?}, expected Truncated {{ sent: {size}, capacity: {cap} }}",
                st.error
            );
        } else {
            ensure!(st.error.is_none(), "{what}: status error {:?}", st.error);
        }
        ensure!(st.count == cap.min(size), "{what}: count {}", st.count);
        same_bytes(&what, &alloc[..cap.min(size)], &m[..cap.min(size)]);
        all_bytes(
            &format!("{what}: bytes past the buffer"),
            &alloc[cap.min(size)..],
            0xEE,
        );
        let mut b = vec![0u8; 100];
        let st = world.recv(&mut b, 1, ANY_TAG).or_die("recv next");
        check_recv(
            &format!("the message after the {what}"),
            &st,
            1,
            31,
            &b,
            &next,
        );
    }
    if me == 0 {
        println!("engine_check trunc: {} cases checked", cases.len());
    }
}

// ---------------------------------------------------------------------------
// stress

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

fn stress<T: Threading>(world: &Comm<T>, total: usize, seed: u64) {
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

fn threads(engine: &Engine, world: &Comm) {
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
}

// ---------------------------------------------------------------------------
// kill

fn kill<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    world.barrier().or_die("barrier");
    if me == 2 {
        let mut b = [0u8; 8];
        for s in [0, 1] {
            ok_status("ready", &world.recv(&mut b, s, 1).or_die("recv ready"));
        }
        println!("engine_check kill: rank 2 raises SIGKILL");
        let _ = std::io::stdout().flush();
        // SAFETY: raise(3) takes no pointers.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
        die("still alive after SIGKILL");
    }
    world.send(b"ready", 2, 1).or_die("send ready");
    let mut b = [0u8; 64];
    match world.recv(&mut b, 2, 2) {
        Ok(st) => die(format!("a receive from the killed rank returned {st:?}")),
        Err(e) => {
            // Leave the exit code to the launcher's teardown.
            eprintln!("engine_check rank {me}: the receive from rank 2 failed: {e}");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
    }
}

/// Rank 2 SIGKILLs itself once ranks 0 and 1 wait on it: rank 0 in a
/// receive from rank 2, rank 1 in an `ANY_SOURCE` receive. Both must fail
/// with `PeerFailed` naming rank 2 (over shared memory nothing breaks: the
/// engine must see the process gone); then ranks 0 and 1 still exchange a
/// message and finalize.
fn shmkill<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    world.barrier().or_die("barrier");
    let mut b = [0u8; 16];
    if me == 2 {
        for s in [0, 1] {
            ok_status("ready", &world.recv(&mut b, s, 1).or_die("recv ready"));
        }
        println!("engine_check shmkill: rank 2 raises SIGKILL");
        let _ = std::io::stdout().flush();
        // SAFETY: raise(3) takes no pointers.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
        die("still alive after SIGKILL");
    }
    let source = if me == 0 { 2 } else { ANY_SOURCE };
    // The receive is posted before rank 2 may die: it waits for our ready.
    let got = world.scope(|s| {
        let r = s.irecv(&mut b, source, 2)?;
        world.send(b"ready", 2, 1)?;
        r.wait()
    });
    // The failure comes as the request's status (or as the wait's error).
    let failed = match &got {
        Ok(st) => st.error == Some(MsgError::PeerFailed { rank: 2 }),
        Err(rivet::Error::PeerFailed { rank: 2, .. }) => true,
        Err(_) => false,
    };
    ensure!(failed, "the receive from {source} ended with {got:?}");
    println!("engine_check shmkill: rank {me}'s receive from {source} failed: rank 2 failed");
    let other = 1 - me;
    let mut c = [0u8; 8];
    if me == 0 {
        world.send(b"after", other, 7).or_die("send after");
        world.recv(&mut c, other as i32, 8).or_die("recv after");
    } else {
        world.recv(&mut c, other as i32, 7).or_die("recv after");
        world.send(b"after", other, 8).or_die("send after");
    }
    ensure!(&c[..5] == b"after", "got {c:?}");
    println!("engine_check shmkill: rank {me} exchanged a message after the failure");
}

/// Exchange a message around the ring (so every path is up), mark
/// `DIR/ready-RANK`, then wait forever in a receive nobody sends to: only
/// the launcher's death, through the engine, may end this rank. With
/// `release`, wait instead for `DIR/go` to appear, then end normally.
fn hang<T: Threading>(world: &Comm<T>, dir: &std::path::Path, release: bool) {
    let (me, n) = (world.rank(), world.size());
    let mut b = [0u8; 8];
    // Four bytes go eagerly: the send returns before the peer receives.
    world.send(b"ring", (me + 1) % n, 1).or_die("send ring");
    world
        .recv(&mut b, ((me + n - 1) % n) as i32, 1)
        .or_die("recv ring");
    // Every rank's ring message arrived: none waits on a rank that sleeps.
    world.barrier().or_die("barrier after the ring");
    std::fs::write(dir.join(format!("ready-{me}")), b"").or_die("mark ready");
    if release {
        // Progressing meanwhile: connections to this rank get answers.
        while !dir.join("go").exists() {
            let _ = world.iprobe(ANY_SOURCE, ANY_TAG).or_die("iprobe");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        world.barrier().or_die("barrier after go");
        return;
    }
    let got = world.recv(&mut b, ANY_SOURCE, 999);
    die(format!("the receive nobody sends to returned {got:?}"));
}

const CONNECT_ALL_ROUNDS: u32 = 5;
const CONNECT_ALL_BURST: u32 = 20;

fn connect_all<T: Threading>(world: &Comm<T>) {
    let (me, n) = (world.rank(), world.size());
    let peers: Vec<u32> = (0..n).filter(|&p| p != me).collect();
    for round in 0..CONNECT_ALL_ROUNDS {
        // Sizes on both sides of every eager limit: 1 B to 300 kB.
        let size = |q: u32| [1usize, 100, 5000, 70_000, 300_000][(q % 5) as usize];
        let out: Vec<(u32, Vec<u8>)> = peers
            .iter()
            .flat_map(|&p| {
                (0..CONNECT_ALL_BURST)
                    .map(move |q| (p, message(me, p, round * 1000 + q, 7, size(q))))
            })
            .collect();
        let mut bufs: Vec<Vec<u8>> = peers
            .iter()
            .flat_map(|_| (0..CONNECT_ALL_BURST).map(|_| vec![0u8; 300_000]))
            .collect();
        let sts = world.scope(|s| {
            // Receives first, then every send at once: no rank waits for
            // another before its first message leaves.
            let mut recvs: Vec<Request<'_, T>> = bufs
                .iter_mut()
                .enumerate()
                .map(|(i, b)| {
                    let p = peers[i / CONNECT_ALL_BURST as usize];
                    s.irecv(b, p as i32, 7).or_die("irecv")
                })
                .collect();
            let mut sends: Vec<Request<'_, T>> = out
                .iter()
                .map(|(p, m)| s.isend(m, *p, 7).or_die("isend"))
                .collect();
            wait_all_ok("sends", &mut sends);
            wait_all_ok("receives", &mut recvs)
        });
        for (i, b) in bufs.iter().enumerate() {
            let p = peers[i / CONNECT_ALL_BURST as usize];
            let q = (i % CONNECT_ALL_BURST as usize) as u32;
            ensure!(
                sts[i].source == p as i32 && sts[i].count == size(q),
                "connect_all: receive {i} got {:?}, expected {} bytes from rank {p}",
                sts[i],
                size(q)
            );
            check_by_checksum(
                "connect_all",
                &b[..size(q)],
                p,
                me,
                round * 1000 + q,
                7,
                size(q),
            );
        }
    }
    world.barrier().or_die("barrier");
    println!(
        "engine_check connect_all: rank {me} exchanged {} messages with each of {} peers",
        CONNECT_ALL_ROUNDS * CONNECT_ALL_BURST,
        n - 1
    );
}

fn early_exit<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    let mut b = [0u8; 16];
    match me {
        2 => {
            world.send(b"bye", 0, 1).or_die("send to rank 0");
            world.recv(&mut b, 0, 2).or_die("recv from rank 0");
        }
        1 => {
            // Long enough for rank 2 to finalize and its connection to close.
            std::thread::sleep(std::time::Duration::from_millis(500));
            world.send(b"late", 0, 3).or_die("send to rank 0");
        }
        _ => {
            world.recv(&mut b, 2, 1).or_die("recv from rank 2");
            world.send(b"ok", 2, 2).or_die("send to rank 2");
            let st = world.recv(&mut b, ANY_SOURCE, 3).or_die("ANY_SOURCE recv");
            ensure!(
                st.source == 1 && &b[..st.count] == b"late",
                "the ANY_SOURCE receive got {st:?}"
            );
            println!("engine_check early_exit: rank 0 received from rank 1 after rank 2 finished");
        }
    }
}

fn netkill<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    match me {
        1 => {
            let mut b = vec![0u8; 1 << 20];
            for i in 0..20 {
                world.recv(&mut b, 0, 1).or_die("recv from rank 0");
                if i == 10 {
                    println!("engine_check netkill: rank 1 raises SIGKILL");
                    let _ = std::io::stdout().flush();
                    // SAFETY: raise(3) takes no pointers.
                    unsafe {
                        libc::raise(libc::SIGKILL);
                    }
                }
            }
            die("still alive after SIGKILL");
        }
        0 => {
            let mut msgs = 0u32;
            let payload: Vec<Vec<u8>> = [100usize, 200_000, 1 << 20]
                .iter()
                .map(|&n| vec![0x5a; n])
                .collect();
            let mut never = [0u8; 8];
            let mut never_any = [0u8; 8];
            let failure = world.scope(|s| {
                // Nothing will ever come from rank 1 on tag 99, nor from
                // anyone on tag 98 (rank 2 sends only tag 4, and only later).
                let posted = s.irecv(&mut never, 1, 99).or_die("irecv");
                let any = s.irecv(&mut never_any, ANY_SOURCE, 98).or_die("irecv any");
                let mut send_error = None;
                for i in 0..1_000_000usize {
                    match world.send(&payload[i % 3], 1, 1) {
                        Ok(()) => msgs += 1,
                        Err(e) => {
                            send_error = Some(e.to_string());
                            break;
                        }
                    }
                }
                let recv_error = match posted.wait() {
                    Ok(st) => match st.error {
                        Some(MsgError::PeerFailed { rank: 1 }) => {
                            "PeerFailed { rank: 1 }".to_string()
                        }
                        other => die(format!(
                            "the posted receive from rank 1 ended with {other:?}"
                        )),
                    },
                    Err(e) => e.to_string(),
                };
                // ARCHITECTURE.md: an ANY_SOURCE receive fails on a netmod
                // peer's death too (any peer could have been its sender).
                let any_error = match any.wait() {
                    Ok(st) if st.error == Some(MsgError::PeerFailed { rank: 1 }) => {
                        "PeerFailed { rank: 1 }".to_string()
                    }
                    Err(e) if e.to_string().contains("rank 1") => e.to_string(),
                    other => die(format!(
                        "the ANY_SOURCE receive ended with {other:?}, not rank 1's failure"
                    )),
                };
                println!("engine_check netkill: the ANY_SOURCE receive: {any_error}");
                (send_error, recv_error)
            });
            let (Some(send_error), recv_error) = failure else {
                die("a million sends to a dead rank all succeeded")
            };
            ensure!(
                send_error.contains("rank 1"),
                "the send error does not name rank 1: {send_error}"
            );
            println!(
                "engine_check netkill: rank 0 sent {msgs} messages, then the send failed: {send_error}; the posted receive: {recv_error}"
            );
            // The rest of the job still works.
            let mut b = [0u8; 16];
            for q in 0..10u32 {
                let m = message(0, 2, q, 3, 16);
                world.send(&m, 2, 3).or_die("send to rank 2");
                world.recv(&mut b, 2, 4).or_die("recv from rank 2");
                check_by_checksum("netkill", &b, 2, 0, q, 4, 16);
            }
            println!(
                "engine_check netkill: rank 0 and rank 2 exchanged 10 messages after the failure"
            );
        }
        _ => {
            let mut b = [0u8; 16];
            for q in 0..10u32 {
                world.recv(&mut b, 0, 3).or_die("recv from rank 0");
                check_by_checksum("netkill", &b, 0, 2, q, 3, 16);
                world
                    .send(&message(2, 0, q, 4, 16), 0, 4)
                    .or_die("send to rank 0");
            }
        }
    }
}

/// `readkill`: rank 1 starts a 48 MiB rendezvous send to rank 0 and kills
/// itself once rank 0 has answered (so the two know each other), while
/// rank 0 pulls the data (read or streamed, as the netmod does it). Rank
/// 0's receive must end: with the whole message (if the pull was quick) or
/// with an error naming rank 1; never a hang.
fn readkill<T: Threading>(world: &Comm<T>) {
    const LEN: usize = 48 << 20;
    match world.rank() {
        1 => {
            let data = sized_pattern(LEN, 7);
            world.scope(|s| {
                let _pending = s.isend(&data, 0, 5).or_die("isend");
                let mut go = [0u8; 1];
                world.recv(&mut go, 0, 6).or_die("recv go");
                println!("engine_check readkill: rank 1 raises SIGKILL");
                let _ = std::io::stdout().flush();
                // SAFETY: raise(3) takes no pointers.
                unsafe {
                    libc::raise(libc::SIGKILL);
                }
            });
            die("still alive after SIGKILL");
        }
        _ => {
            let mut buf = vec![0u8; LEN];
            let ended = world.scope(|s| {
                let big = s.irecv(&mut buf, 1, 5).or_die("irecv");
                world.send(&[1], 1, 6).or_die("send go");
                big.wait()
            });
            let outcome = match ended {
                Ok(st) => match st.error {
                    None => {
                        same_bytes("readkill", &buf, &sized_pattern(LEN, 7));
                        "the whole message (the pull beat the kill)".to_string()
                    }
                    Some(MsgError::PeerFailed { rank: 1 }) => "PeerFailed { rank: 1 }".into(),
                    other => die(format!("the receive from rank 1 ended with {other:?}")),
                },
                Err(e) => {
                    ensure!(
                        e.to_string().contains("rank 1"),
                        "error without rank 1: {e}"
                    );
                    e.to_string()
                }
            };
            println!("engine_check readkill: rank 0's receive ended: {outcome}");
        }
    }
}

/// `readkill dead`: the deterministic case of `readkill`. Rank 1's 48 MiB
/// rendezvous request reaches rank 0 (probed), then rank 1 dies; only
/// once its process is gone does rank 0 post the receive. Nothing of the
/// payload can come any more: the receive must end with `PeerFailed`
/// naming rank 1 (in its status or as the error), never hang or complete.
fn readkill_dead<T: Threading>(world: &Comm<T>) {
    const LEN: usize = 48 << 20;
    match world.rank() {
        1 => {
            let data = sized_pattern(LEN, 7);
            world
                .send(&std::process::id().to_le_bytes(), 0, 7)
                .or_die("send pid");
            world.scope(|s| {
                let _pending = s.isend(&data, 0, 5).or_die("isend");
                world.recv(&mut [0u8; 1], 0, 6).or_die("recv go");
                println!("engine_check readkill: rank 1 raises SIGKILL");
                let _ = std::io::stdout().flush();
                // SAFETY: raise(3) takes no pointers.
                unsafe {
                    libc::raise(libc::SIGKILL);
                }
            });
            die("still alive after SIGKILL");
        }
        _ => {
            let mut pid = [0u8; 4];
            world.recv(&mut pid, 1, 7).or_die("recv pid");
            let pid = u32::from_le_bytes(pid);
            let st = world.probe(1, 5).or_die("probe the request");
            ensure!(st.count == LEN, "probed {st:?}");
            world.send(&[1], 1, 6).or_die("send go");
            // Gone: no /proc entry, or a zombie not yet reaped.
            let gone = || {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
                    s.rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('Z'))
                })
            };
            let start = std::time::Instant::now();
            while !gone() {
                ensure!(start.elapsed().as_secs() < 60, "rank 1 ({pid}) did not die");
                // Keep the engine moving ("go" may still sit in a queue);
                // nothing is ever sent on tag 99.
                let _ = world.iprobe(1, 99);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            let mut buf = vec![0u8; LEN];
            let ended = world.recv(&mut buf, 1, 5);
            let outcome = match ended {
                Ok(st) if st.error == Some(MsgError::PeerFailed { rank: 1 }) => {
                    "PeerFailed { rank: 1 }".to_string()
                }
                Err(rivet::Error::PeerFailed { rank: 1, .. }) => "PeerFailed { rank: 1 }".into(),
                other => die(format!(
                    "the receive from dead rank 1 must end with PeerFailed naming it, not {other:?}"
                )),
            };
            println!("engine_check readkill: rank 0's receive ended: {outcome}");
        }
    }
}

/// `panic`: rank 0 waits until rank 1's 16 MiB rendezvous request has
/// arrived, posts the receive in a scope (it matches at once and the data
/// starts flowing into the buffer through the netmod) and panics. The
/// unwind would free the buffer under the netmod: the engine must abort.
fn panic_mid_rendezvous<T: Threading>(world: &Comm<T>) {
    const LEN: usize = 16 << 20;
    match world.rank() {
        1 => {
            let data = sized_pattern(LEN, 3);
            // Rank 0 dies meanwhile: this fails, or the job ends first.
            let _ = world.send(&data, 0, 5);
            println!("engine_check panic: rank 1's send ended");
        }
        _ => {
            let mut buf = vec![0u8; LEN];
            world.probe(1, 5).or_die("probe");
            world.scope(|s| {
                let _big = s.irecv(&mut buf, 1, 5).or_die("irecv");
                println!("engine_check panic: rank 0 panics with its receive under way");
                let _ = std::io::stdout().flush();
                panic!("engine_check panic: a deliberate panic inside the scope");
            });
            die("the scope returned after a panic");
        }
    }
}

/// `kill early`: rank 2 dies before starting its engine, while the others
/// start theirs (rank 0 has created the node segment, which waits for rank 2
/// to attach).
fn kill_before_init() {
    let env_rank = std::env::var("PMI_RANK")
        .ok()
        .and_then(|r| r.parse::<u32>().ok());
    if env_rank == Some(2) {
        // Best effort: give rank 0 the time to create the segment.
        let segments = || -> Vec<String> {
            std::fs::read_dir("/dev/shm")
                .map(|d| {
                    d.flatten()
                        .filter_map(|e| e.file_name().into_string().ok())
                        .filter(|n| n.starts_with("rivet-"))
                        .collect()
                })
                .unwrap_or_default()
        };
        // The engine names segments after rivetrun's job id.
        let job: String = std::env::var("RIVET_JOBID")
            .unwrap_or_default()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let ours = format!("rivet-{job}-");
        let before = segments();
        let start = std::time::Instant::now();
        let seen = loop {
            if segments()
                .iter()
                .any(|n| (!job.is_empty() && n.starts_with(&ours)) || !before.contains(n))
            {
                break "once its node segment existed";
            }
            if start.elapsed() > std::time::Duration::from_secs(10) {
                break "without seeing its node segment";
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        println!("engine_check kill: rank 2 raises SIGKILL before Engine::init, {seen}");
        let _ = std::io::stdout().flush();
        // SAFETY: raise(3) takes no pointers.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
    }
}

// ---------------------------------------------------------------------------
// dup

fn dup<T: Threading>(world: &Comm<T>, dir: Option<&str>) {
    let (me, n) = (world.rank(), world.size());
    let d1 = world.dup().or_die("dup");
    let d2 = world.dup().or_die("second dup");
    let d3 = d1.dup().or_die("dup of a dup");
    let ids = [
        world.context_id(),
        d1.context_id(),
        d2.context_id(),
        d3.context_id(),
    ];
    for i in 0..ids.len() {
        for j in 0..i {
            ensure!(ids[i] != ids[j], "context ids not distinct: {ids:?}");
        }
    }
    for c in [&d1, &d2, &d3] {
        ensure!(
            c.rank() == me && c.size() == n,
            "a dup is rank {} of {}, its parent {me} of {n}",
            c.rank(),
            c.size()
        );
    }
    // Every rank agrees on the ids.
    let mine: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let mut theirs = vec![0u8; mine.len()];
    world.scope(|s| {
        let r = s.irecv(&mut theirs, prev as i32, 3).or_die("irecv ids");
        let w = s.isend(&mine, next, 3).or_die("isend ids");
        ok_status("ids", &r.wait().or_die("wait"));
        ok_status("ids", &w.wait().or_die("wait"));
    });
    same_bytes(&format!("context ids of rank {prev}"), &theirs, &mine);

    // A message on the dup does not match receives on the parent.
    for wild in [false, true] {
        let on_dup = message(me, next, 1, 5, 24);
        let on_parent = message(me, next, 2, 5, 24);
        let (sp, tp) = if wild {
            (ANY_SOURCE, ANY_TAG)
        } else {
            (prev as i32, 5)
        };
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 64];
        let (sa, sb) = d1.scope(|ds| {
            let w_dup = ds.isend(&on_dup, next, 5).or_die("isend on dup");
            world.scope(|s| {
                // Parent traffic, sent after the dup's.
                let w_parent = s.isend(&on_parent, next, 5).or_die("isend on parent");
                let sa = world.recv(&mut a, sp, tp).or_die("recv on parent");
                let sb = d1.recv(&mut b, sp, tp).or_die("recv on dup");
                ok_status("isend on parent", &w_parent.wait().or_die("wait"));
                ok_status("isend on dup", &w_dup.wait().or_die("wait"));
                (sa, sb)
            })
        });
        let what = if wild { "ANY/ANY" } else { "exact" };
        check_recv(
            &format!("{what} receive on the parent (the dup's message was sent first)"),
            &sa,
            prev,
            5,
            &a,
            &message(prev, me, 2, 5, 24),
        );
        check_recv(
            &format!("{what} receive on the dup"),
            &sb,
            prev,
            5,
            &b,
            &message(prev, me, 1, 5, 24),
        );
    }

    // Barriers: marker files written before a barrier are all there after.
    for (c, name) in [(world, "world"), (&d1, "dup"), (&d3, "dup-of-dup")] {
        for round in 0..15 {
            if let Some(dir) = dir {
                let f = format!("{dir}/{name}-{round}-{me}");
                std::fs::write(&f, b"").or_die(&format!("writing {f}"));
            }
            c.barrier().or_die(&format!("barrier on {name}"));
            if let Some(dir) = dir {
                for r in 0..n {
                    let f = format!("{dir}/{name}-{round}-{r}");
                    ensure!(
                        std::path::Path::new(&f).exists(),
                        "left barrier {round} on {name} before rank {r} entered it ({f} missing)"
                    );
                }
            }
            // Barrier traffic never matches user receives: a ring exchange
            // with ANY_TAG after each barrier gets exactly the ring message.
            let m = message(me, next, round, round as i32, 8);
            let mut b = vec![0u8; 32];
            let st = c.scope(|s| {
                let w = s.isend(&m, next, round as i32).or_die("isend");
                let st = c.recv(&mut b, ANY_SOURCE, ANY_TAG).or_die("recv");
                ok_status("isend", &w.wait().or_die("wait"));
                st
            });
            check_recv(
                &format!("ring message after barrier {round} on {name}"),
                &st,
                prev,
                round as i32,
                &b,
                &message(prev, me, round, round as i32, 8),
            );
        }
    }
    println!(
        "engine_check dup: rank {me} of {n}: context ids {ids:?}, isolation and 45 barriers checked"
    );
}

// ---------------------------------------------------------------------------
// singleton

fn singleton<T: Threading>(world: &Comm<T>) {
    ensure!(world.rank() == 0, "singleton rank {}", world.rank());
    let small = message(0, 0, 0, 4, 100);
    world.send(&small, 0, 4).or_die("send to self");
    let st = world.probe(0, ANY_TAG).or_die("probe self");
    ensure!(
        st.source == 0 && st.tag == 4 && st.count == 100,
        "probe of a message to self: {st:?}"
    );
    let mut b = vec![0u8; 100];
    let st = world.recv(&mut b, 0, 4).or_die("recv from self");
    check_recv("message to self", &st, 0, 4, &b, &small);
    for size in [0usize, 65_536, 4 << 20] {
        let m = sized_pattern(size, 9);
        let mut b = vec![0u8; size];
        let st = world.scope(|s| {
            let w = s.isend(&m, 0, 6).or_die("isend to self");
            let st = world
                .recv(&mut b, ANY_SOURCE, ANY_TAG)
                .or_die("recv from self");
            ok_status("isend to self", &w.wait().or_die("wait"));
            st
        });
        check_recv(&format!("{size} bytes to self"), &st, 0, 6, &b, &m);
    }
    let d = world.dup().or_die("dup");
    ensure!(
        d.size() == 1 && d.context_id() != world.context_id(),
        "dup of a singleton"
    );
    world.barrier().or_die("barrier");
    d.barrier().or_die("barrier on dup");
    println!("engine_check singleton: rank 0 of 1, messages to self verified");
}
