//! The fuzz targets' smoke run in CI: each target over every input of its
//! committed corpus, then a few thousand deterministic mutations of them
//! (the long coverage-guided runs are `fuzz/run.sh`'s). A crash found by
//! a fuzzer goes in the corpus, so it is replayed here from then on.

use std::path::PathBuf;

use rivet_fuzz::TARGETS;

/// Mutations per target: a couple of seconds in a debug build.
const MUTATIONS: usize = 1500;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| std::fs::read(p).expect("corpus file"))
        .collect()
}

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes that steer decoders to their edges.
const TOKENS: &[&[u8]] = &[
    b"\n",
    b"=",
    b" ",
    b"\0",
    b"\xff",
    b"4294967295",
    b"-1",
    b"18446744073709551616",
    b"cmd=",
    b"mcmd=spawn\n",
    b"endcmd\n",
    b"\x00\x00\x00\x40",
    b"\xff\xff\xff\xff",
    b":",
    b",",
    b"(vector,",
];

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut v = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                v.splice(at..at, t.iter().copied());
            }
            2 if at < v.len() => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                v.drain(at..end);
            }
            3 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len() + 1);
                let end = (from + rng.below(64)).min(other.len());
                v.splice(at..at, other[from..end].iter().copied());
            }
            4 if at < v.len() => v[at] = rng.next() as u8,
            _ => v.truncate(at),
        }
    }
    v
}

fn smoke(name: &str) {
    let (_, target) = TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no target {name}"));
    let seeds = corpus(name);
    assert!(!seeds.is_empty(), "{name} has no corpus");
    for s in &seeds {
        target(s);
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
    for _ in 0..MUTATIONS {
        target(&mutate(&mut rng, &seeds));
    }
}

#[test]
fn every_target_has_a_smoke_test() {
    let src = include_str!("smoke.rs");
    for (name, _) in TARGETS {
        assert!(
            src.contains(&format!("fn {name}() {{")),
            "no smoke test for {name}"
        );
        assert!(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join(format!("fuzz_targets/{name}.rs"))
                .exists(),
            "no fuzz binary for {name}"
        );
    }
}

#[test]
fn pmi_framer() {
    smoke("pmi_framer");
}

#[test]
fn pmi_server() {
    smoke("pmi_server");
}

#[test]
fn name_server() {
    smoke("name_server");
}

#[test]
fn tcp_frames() {
    smoke("tcp_frames");
}

#[test]
fn tcp_handshake() {
    smoke("tcp_handshake");
}

#[test]
fn ofi_sequences() {
    smoke("ofi_sequences");
}

#[test]
fn engine_deliver() {
    smoke("engine_deliver");
}

#[test]
fn parsers() {
    smoke("parsers");
}
