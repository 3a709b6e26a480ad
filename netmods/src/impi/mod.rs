//! The `impi` netmod's wire (seed 003, chapter 3): traffic between hosts of
//! different IMPI clients. So far, sans I/O: the 128-byte packet header
//! ([`packet`]), the per-pair flow control of 3.6 ([`flow`]) and the
//! message protocols of 3.7 (short, long, synchronous, cancel:
//! [`protocol`]). The netmod that drives them over the host links, and
//! the engine's routing of other clients' ranks to it, are not written yet.

pub mod flow;
pub mod packet;
pub mod protocol;
