//! Dynamic processes: ports, accept/connect, spawn, the name service,
//! group connect.
//!
//! Seed 001's step tables, built on the PG/VC layer (`pg`): a port is this
//! process's business card plus a tag (`ports.rs`); `connect` opens a
//! temporary VC to the port's owner with the tag in the netmod handshake,
//! the two roots swap group descriptions over it (members, their process
//! groups and cards, a context-id proposal) and broadcast them inside their
//! communicators, every member registers the foreign groups and builds the
//! intercommunicator, and the temporary VC is closed (`connect.rs`).
//! `spawn` is a PMI spawn whose children find the parent's port in their
//! KVS and connect back during `Engine::init` (`spawn.rs`). Names are
//! published through the process manager (`names.rs`). Group connect
//! (seed 004) joins processes of any process groups into a new group named
//! by the process manager, which also carries the cards (`group.rs`).

mod connect;
mod group;
mod names;
mod ports;
mod spawn;

pub use crate::group_events::{GroupEvent, GroupEventKind};
pub use group::{ConnectAttrs, Connected, Group};
pub use ports::PortName;
pub use spawn::SpawnCommand;

/// The KVS key under which a spawned job finds its parent's port (MPICH's).
pub const PARENT_PORT_KEY: &str = "PARENT_ROOT_PORT_NAME";
