//! Fuzz targets for everything in Rivet that decodes a peer's bytes.
//!
//! Each target is a function of arbitrary bytes that must not panic and
//! asserts what must hold whatever arrives (round trips, memory bounds,
//! no unauthenticated abort). They run two ways:
//!
//! * coverage-guided, as libFuzzer binaries (`fuzz_targets/`, feature
//!   `libfuzzer`), built and run by `fuzz/run.sh TARGET` on stable rustc;
//! * as a short smoke run in `cargo test` (`tests/smoke.rs`): every input
//!   of the target's committed corpus (`fuzz/corpus/TARGET/`) and a few
//!   thousand deterministic mutations of them.
//!
//! The targets reaching crate internals (the tcp frame parser and
//! handshake, the ofi netmod's HELLO and message sequences, the engine's
//! `deliver`) live in those crates' hidden
//! `fuzzing` modules; the PMI ones here, on the public API.
//!
//! Choices: coverage-guided fuzzing with libFuzzer through `libfuzzer-sys`, optional behind the
//! `libfuzzer` feature (it compiles libFuzzer with the system C++ compiler), on stable rustc:
//! SanitizerCoverage is a plain `-C` flag, so neither nightly nor cargo-fuzz is needed
//! (`fuzz/run.sh`). Without the feature this crate builds no binary and its test replays the
//! corpora, so `cargo test --workspace` stays stable-only.
//!
//! Module map: `src/pmi.rs` the PMI targets (framer, server, name server, parsers);
//! `fuzz_targets/` one libFuzzer main per target; `corpus/TARGET/` the committed corpora;
//! `tests/smoke.rs` the smoke run; the internal targets in `netmods/src/fuzzing.rs` (tcp frames
//! and handshake), `netmods/src/ofi/fuzz.rs` (the ofi connection table and receive order over
//! HELLO and message sequences) and `engine/src/fuzzing.rs` (`deliver`).

mod pmi;
pub use pmi::{name_server, parsers as pmi_parsers, pmi_framer, pmi_server};

pub use rivet::fuzzing::deliver as engine_deliver;
pub use rivet_netmods::fuzzing::{ofi_sequences, tcp_frames, tcp_handshake};

/// The text parsers of every crate: PMI's (process mapping, process
/// names, cpu lists, topology values), the engine's (port names, group
/// descriptions) and the tcp business card (in `tcp_handshake`).
pub fn parsers(data: &[u8]) {
    pmi_parsers(data);
    rivet::fuzzing::parsers(data);
}

/// A fuzz target: arbitrary bytes in, a panic on a finding.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/run.sh` and the smoke test know them.
pub const TARGETS: &[(&str, Target)] = &[
    ("pmi_framer", pmi_framer),
    ("pmi_server", pmi_server),
    ("name_server", name_server),
    ("tcp_frames", tcp_frames),
    ("tcp_handshake", tcp_handshake),
    ("ofi_sequences", ofi_sequences),
    ("engine_deliver", engine_deliver),
    ("parsers", parsers),
];
