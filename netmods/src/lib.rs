//! Rivet's network modules: the `Netmod` trait through which the engine drives
//! every off-node transport, and the transports themselves (`tcp` over
//! io_uring with a poll fallback, `ofi` over libfabric behind a cargo feature).
//!
//! This crate is a placeholder until the engine-core issue defines the trait;
//! it exists now so the layering (engine depends on netmods, never the reverse)
//! is fixed from the start.
