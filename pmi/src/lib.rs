//! PMI-1 for Rivet: wire codec, client and server core.
//!
//! PMI-1 ("simple PMI") is the line protocol MPICH ranks speak with their
//! process manager (Hydra, Slurm, or Rivet's `rivetrun`) to learn rank and
//! size, exchange business cards through a key-value space (KVS), meet at
//! barriers, publish names and spawn processes. This crate speaks it
//! byte-compatibly with MPICH's client and Hydra's server:
//!
//! * [`wire`] is the codec: one [`wire::Message`] enum for both directions,
//!   parsed in one place and written in one place, and a [`wire::Framer`]
//!   that cuts a byte stream into messages with bounded memory.
//! * [`client`] is the rank side: [`Client`] finds its process manager the
//!   way MPICH does (`PMI_FD`, `PMI_PORT`/`PMI_ID`, or none = singleton) and
//!   offers put/get/barrier/names/spawn on top of the codec.
//! * [`server`] is a sans-IO core that a launcher embeds: it owns per-job
//!   namespaces (KVS, barriers, job attributes such as
//!   `PMI_process_mapping`) and a name service, eats bytes and returns
//!   [`server::Output`]s; sockets and the event loop stay with the launcher.
//! * [`group`] names processes (`[cluster:]nspace:rank|*`) and flags for
//!   Rivet's group-connect extension (PMIx RFC0003's connect/disconnect),
//!   which rivetrun serves and [`Client::group_connect`] asks for.
//! * [`impi`] is the startup wire of IMPI (seed 003, chapter 2): commands,
//!   AUTH, and the COLL labels a rendezvous server relays between
//!   separately started jobs (`rivetrun --impi-server` / `--impi-client`).
//! * [`resource`] is seed 002's resource registration: shm segments, files
//!   and child processes a rank registers, which rivetrun frees when the
//!   rank ends ([`Client::register_resource`]).
//! * `topology` (owned by the topology work) layers placement keys on top
//!   of the client's `get`.
//!
//! * PMI-2 (`wire::v2`, `RIVET_PMI=pmi2`): the client speaks it instead
//!   of PMI-1 over the same connection (`srun --mpi=pmi2`, rivetrun), and
//!   the server speaks both, telling them apart per connection.
//!
//! All fallible operations return the crate's single [`Error`].

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod client;
mod error;
pub mod group;
pub mod impi;
pub mod pmix_ffi;
pub mod resource;
pub mod server;
pub mod topology;
pub mod wire;

pub use client::{
    Client, ClientConfig, GroupConnectReply, GroupConnectRequest, GroupMember, Transport,
};
pub use error::{Error, Result};
pub use group::{GroupEvent, GroupEventKind, ProcName};
pub use wire::limits::Limits;
