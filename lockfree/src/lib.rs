//! The lock-free structures Rivet's shared-memory transport runs on, and
//! the header their records carry: the multi-producer cell queue
//! ([`queue`]), the per-pair fastbox ring and its merge with cell traffic
//! ([`fastbox`]), [`wire::WireHeader`], and the short-payload copy both
//! ends of a ring and the tcp netmod's frames use ([`small_copy`]).
//!
//! They live in a crate of their own, with no dependencies, so that the
//! loom models in `tests/` (`--cfg loom`, release) build this crate alone
//! instead of the whole engine stack. The engine re-exports them where they
//! always were: `rivet::shm::{queue, fastbox}` and `rivet::wire`.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod fastbox;
pub mod queue;
pub mod small_copy;
pub mod wire;
