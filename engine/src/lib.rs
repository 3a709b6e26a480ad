//! Rivet: the communication engine that MPI runtimes and parallel libraries
//! link.
//!
//! [`Engine::init`] bootstraps through `rivet-pmi` and hands out the world
//! [`Comm`]. Point-to-point calls on a communicator become requests in the
//! engine's table (`request`); one progress loop (`engine`) polls the
//! transports, runs the protocols (`protocol`: eager, rendezvous, sync and
//! cancel handshakes) and matches arrivals MPI-style (`matching`). Peers
//! are reached through virtual connections of process groups (`pg`: our own
//! COMM_WORLD and the foreign ones met through dynamic processes); VCs are
//! created on first use, and communicators name them through shared VC
//! tables with seed 000's reference counts. A VC goes over the node's
//! shared memory (`shm`) when the node map (`node_map`) says the peer is
//! local, else through a network module (`rivet-netmods`, opened by
//! `netmod` when some peer needs it; a card comes from the KVS or, for a
//! foreign group, with its description). `dynamic` holds ports,
//! accept/connect, spawn, names and group connect; `intercomm` merge and disconnect;
//! `collective` the few collectives those need; `groups` the engine's side
//! of registering foreign groups. Every message carries one
//! `wire::WireHeader`.
//!
//! Buffer safety: blocking calls borrow; nonblocking calls on borrowed
//! buffers live in a [`Scope`] that finishes them before returning; the
//! `*_raw` calls are `unsafe` and leave that duty to the caller (C ABI).

#![deny(clippy::undocumented_unsafe_blocks)]

mod backoff;
mod collective;
mod comm;
mod config;
mod copy;
mod core;
mod dynamic;
mod engine;
mod error;
mod external;
mod failure;
/// Entry points of the fuzz targets (`fuzz/`); not an API.
#[doc(hidden)]
pub mod fuzzing;
mod groups;
mod impi_coll;
mod inner;
mod intercomm;
pub mod matching;
mod message;
mod netmod;
pub mod node_map;
mod peer_watch;
mod pg;
mod pmi_watch;
mod post;
mod protocol;
mod raw;
mod request;
mod rma;
mod scope;
pub mod shm;
mod state;
mod status;
mod table;
mod thread;
/// In `rivet-lockfree` with the shm queue and ring that carry it.
pub use rivet_lockfree::wire;

pub use comm::Comm;
pub use config::parse_size;
pub use dynamic::{
    ConnectAttrs, Connected, Group, GroupEvent, GroupEventKind, PortName, SpawnCommand,
    PARENT_PORT_KEY,
};
pub use engine::{Counts, Engine, Info};
pub use error::{Error, Result};
pub use external::{Bootstrap, ATTACH_WAIT};
pub use matching::{ANY_SOURCE, ANY_TAG};
pub use message::Message;
pub use pg::PgCounts;
pub use raw::{REQUEST_COMPLETE, USER_CONTEXT_MAX};
pub use request::Request;
pub use rivet_pmi as pmi;
pub use rivet_pmi::group::ProcName;
pub use scope::Scope;
pub use status::{MsgError, Status};
pub use thread::{Local, Shared, ThreadLevel, Threading};
