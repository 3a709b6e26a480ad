//! Rivet: the communication engine that MPI runtimes and parallel libraries link.
//!
//! The engine bootstraps through `rivet-pmi`, drives every transport from one
//! progress loop, matches messages MPI-style and moves them over shared memory
//! on the node and through `rivet-netmods` off it. Today it holds the first
//! piece of that: `node_map`, which reads the process manager's node map and
//! decides, per peer, between shared memory and a network module. Progress,
//! matching and the transports come with the engine-core issue.

pub mod node_map;

pub use rivet_pmi as pmi;
