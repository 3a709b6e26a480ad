//! Rivet: the communication engine that MPI runtimes and parallel libraries link.
//!
//! The engine bootstraps through `rivet-pmi`, drives every transport from one
//! progress loop, matches messages MPI-style and moves them over shared memory
//! on the node and through `rivet-netmods` off it. This crate is a placeholder
//! until the engine-core issue fills it.

pub use rivet_pmi as pmi;
