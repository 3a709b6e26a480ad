//! What every mode checks with: payloads that name sender, receiver and
//! sequence (checksummed header, seeded pattern), byte and status checks,
//! a seeded generator, and the inbox that matches what arrives to what was sent.

use rivet::{Comm, Request, Status, Threading, ANY_SOURCE, ANY_TAG};
use rivet_tests::ensure;
use rivet_tests::pattern::{fill, mix, pattern, seed_of};
use rivet_tests::rank_check::{die, OrDie};

/// The pattern of a test message of `size` bytes, number `index`.
pub(crate) fn sized_pattern(size: usize, index: u64) -> Vec<u8> {
    pattern(size, seed_of(&[size as u64, index]))
}

/// Die unless `got == want`, naming the first differing byte.
pub(crate) fn same_bytes(what: &str, got: &[u8], want: &[u8]) {
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

pub(crate) fn all_bytes(what: &str, got: &[u8], value: u8) {
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

pub(crate) const HDR: usize = 16;

/// Message `seq` from `src` to `dst`: header (seq, size, tag, checksum of
/// the body), then the body's pattern; cut to `size` bytes.
pub(crate) fn message(src: u32, dst: u32, seq: u32, tag: i32, size: usize) -> Vec<u8> {
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
pub(crate) fn check_by_checksum(
    what: &str,
    got: &[u8],
    src: u32,
    dst: u32,
    seq: u32,
    tag: i32,
    size: usize,
) {
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

pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(mix(seed))
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub(crate) fn pat(p: i32) -> String {
    if p == ANY_SOURCE {
        "ANY".into()
    } else {
        p.to_string()
    }
}

pub(crate) fn ok_status(what: &str, st: &Status) {
    ensure!(!st.cancelled, "{what}: reported cancelled: {st:?}");
    ensure!(st.error.is_none(), "{what}: reported an error: {st:?}");
}

pub(crate) fn statuses<T: Threading>(what: &str, reqs: &[Request<'_, T>]) -> Vec<Status> {
    reqs.iter()
        .enumerate()
        .map(|(i, r)| {
            ensure!(r.is_done(), "{what}: request {i} not done after wait_all");
            *r.status()
                .unwrap_or_else(|| die(format!("{what}: request {i} has no status after wait_all")))
        })
        .collect()
}

pub(crate) fn wait_all_ok<T: Threading>(what: &str, reqs: &mut [Request<'_, T>]) -> Vec<Status> {
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
pub(crate) struct Inbox {
    me: u32,
    plan: Vec<Vec<(i32, usize)>>,
    pub(crate) got: Vec<Vec<bool>>,
    /// First message not yet received, per sender.
    pub(crate) low: Vec<usize>,
    /// Messages at or past this index are not sent yet (stress rounds).
    pub(crate) limit: Vec<usize>,
    pub(crate) received: usize,
    pub(crate) bytes: u64,
}

impl Inbox {
    pub(crate) fn new(me: u32, plan: Vec<Vec<(i32, usize)>>) -> Inbox {
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

    pub(crate) fn remaining(&self) -> usize {
        self.total() - self.received
    }

    /// The message of `s` the pattern `tag` must get next.
    fn expected(&self, s: usize, tag: i32) -> Option<usize> {
        (self.low[s]..self.limit[s])
            .find(|&q| !self.got[s][q] && (tag == ANY_TAG || self.plan[s][q].0 == tag))
    }

    /// A pattern that some message available now matches: of (ANY, ANY),
    /// (s, ANY), (ANY, t), (s, t), with s and t those of a random message.
    pub(crate) fn pick(&self, rng: &mut Rng) -> (i32, i32) {
        let (s, t) = self.pick_message(rng);
        match rng.below(4) {
            0 => (ANY_SOURCE, ANY_TAG),
            1 => (s, ANY_TAG),
            2 => (ANY_SOURCE, t),
            _ => (s, t),
        }
    }

    /// Sender and tag of a random message available now.
    pub(crate) fn pick_message(&self, rng: &mut Rng) -> (i32, i32) {
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
    pub(crate) fn size_for(&self, (s, t): (i32, i32)) -> Option<usize> {
        if s == ANY_SOURCE || t == ANY_TAG {
            return None;
        }
        self.expected(s as usize, t)
            .map(|q| self.plan[s as usize][q].1)
    }

    /// Check the receive posted with `(sp, tp)` that completed with `st`,
    /// `data` being its buffer; `verify(sender, seq, tag, size, bytes)`.
    pub(crate) fn accept(
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
pub(crate) fn verify_full(me: u32) -> impl Fn(u32, u32, i32, usize, &[u8]) {
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

pub(crate) fn check_recv(what: &str, st: &Status, source: u32, tag: i32, buf: &[u8], want: &[u8]) {
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

/// Sends `value` to rank `to` of `c` while receiving one from `from`, both
/// on `tag`; what arrived.
pub(crate) fn swap_u32<T: Threading>(c: &Comm<T>, value: u32, to: u32, from: u32, tag: i32) -> u32 {
    let mut got = [0u8; 4];
    let out = value.to_be_bytes();
    c.scope(|s| {
        let w = s.isend(&out, to, tag).or_die("isend");
        s.irecv(&mut got, from as i32, tag)
            .or_die("irecv")
            .wait()
            .or_die("wait irecv");
        w.wait().or_die("wait isend");
    });
    u32::from_be_bytes(got)
}
