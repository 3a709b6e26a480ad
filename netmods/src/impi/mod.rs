//! The `impi` netmod's wire (seed 003, chapter 3): traffic between hosts of
//! different IMPI clients. So far: the 128-byte packet header
//! ([`packet`]) and the per-pair flow control of 3.6 ([`flow`]); the
//! message protocols (short, long, synchronous, cancel) and the netmod
//! itself are not written yet.

pub mod flow;
pub mod packet;
