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
//!
//! PMIx is OpenPMIx's (no PMIx wire code of ours), opened at run time like libfabric: a machine
//! without `libpmix.so.2` builds and runs, with PMI-1 only. Raw `extern "C"` types live in one
//! file (`pmix_ffi.rs`, layout- and constant-tested against the installed header), no bindgen or
//! `pmix-sys`; the launcher's PMIx server shares them.
//!
//! Module map:
//!
//! - `wire/`: the PMI-1 message enum (`message.rs`), parsed (`parse.rs`) and written (`write.rs`)
//!   in one place each, tokens and escapes (`escape.rs`), `mcmd=spawn` blocks (`spawn.rs`),
//!   limits (`limits.rs`); byte stream -> messages with bounded memory (`framer.rs`); PMI-2
//!   (`v2.rs`: the command table, length-prefixed `cmd=...;k=v;` bodies without escaping, its
//!   framer; `v2_spawn.rs`: the `spawn` query written and read).
//! - `client/`: the rank side (`mod.rs`): finding the process manager (`config.rs`: `PMI_FD`,
//!   `PMI_PORT` + initack, singleton), the blocking channel (`conn.rs`), a singleton's own state
//!   (`local.rs`); PMI-2 (`pmi2.rs`, `RIVET_PMI=pmi2`: fullinit, KVS, fence, job attributes,
//!   names); under a PMIx server OpenPMIx's client opened at run time (`pmix.rs`: the KVS as one
//!   blob per rank, gathered by a collecting fence; group connect on PMIx groups in
//!   `pmix_groups.rs`, members' ends as PMIx events in `pmix_events.rs`, with other jobs over
//!   rivetrun's PMI-1 channel beside PMIx in `pmix_side.rs`; spawn onto `PMIx_Spawn`, pre-puts
//!   in the children's environment, in `pmix_spawn.rs`); group connect
//!   (`groups.rs`, events stashed) and resources (`resources.rs`).
//! - `server/`: the sans-IO server core (`mod.rs`): namespaces and KVS (`kvs.rs`), barriers
//!   (`barrier.rs`), one function per command (`handle.rs`), the name table, name requests and
//!   the standalone `NameServer` (`names.rs`), spawn and name hand-off, `PMI_PORT` authentication
//!   (`auth.rs`: random `PMI_ID`s, the job secret, the gate before `initack`),
//!   `PMI_process_mapping` build and parse (`mapping.rs`), group connect serving (`groups/`:
//!   ops, ready phase, groups, `process_ended`), resources kept per rank (`resources.rs`), one
//!   node of a multi-host job (`node.rs`: WORLD barriers go upstream), PMI-2 beside PMI-1 on one
//!   connection (`v2.rs`: switched on `init pmi_version=2`, queries through the PMI-1 handlers,
//!   answers rewritten).
//! - `group.rs`: group-connect names (`ProcName`, `cluster:ns:rank`) and flags.
//! - `resource.rs`: seed 002's `resource_register`/`resource_release` (shm names, files,
//!   `pid:starttime` children); the client asks only where `PMI_rivet_resources` is set, and a
//!   server that does not free them answers `rc!=0`.
//! - `topology/`: the topology keys (`PMI_rivet_*`): key names and types (`mod.rs`), cluster levels
//!   (`cluster.rs`), a rank's value (`rank.rs`), CPU sets (`cpus.rs`), client queries (`client_queries.rs`).
//! - `impi/`: the IMPI startup wire (seed 003 ch. 2), network byte order: command headers
//!   (`mod.rs`), AUTH (`auth.rs`: masks, choice, key, `-auth` lists), the COLL labels of version
//!   0.0 and the server's concatenation (`labels.rs`), the rendezvous server's state, sans I/O
//!   (`relay.rs`), a client's labels and the job it learns (`world.rs`).
//! - `pmix_ffi.rs`: OpenPMIx types and library loading, shared by the PMIx client and server.
//! - `error.rs`: the crate's one `Error`.
//!
//! What must stay true here (ARCHITECTURE.md's PMI invariants, in full):
//!
//! - The server core does no I/O: the launcher feeds it bytes and carries out its `Output`s
//!   (spawns and forwarded name requests are answered later, one outstanding per connection). It
//!   never panics on input; a bad line, an over-long one included (dropped as it arrives, its
//!   command kept to answer), gets an `rc!=0` answer, a garbage stream gets its connection
//!   closed, other ranks go on. Parsing `PMI_process_mapping` costs at most its length plus the
//!   ranks asked for.
//! - A `PMI_PORT` connection is served nothing before it authenticates: an `initack` with a
//!   random `PMI_ID` rivetrun handed out, each good once, and the job secret when the client sends
//!   one; any other line closes it, so no stranger's `abort` reaches the launcher.
//! - The server holds at most `max_entries(size)` KVS entries per namespace (64 per rank, at least
//!   65536); a put past it is answered `rc=1 msg=kvs_full`.

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
