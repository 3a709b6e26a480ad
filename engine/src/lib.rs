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
//!
//! Thread levels are types: `Engine<Shared>` (the default: `Send + Sync` handles, MULTIPLE) or
//! `Engine<Local>` (`!Send`, `!Sync`; below MULTIPLE the state sits behind a non-atomic busy flag,
//! so no atomic read-modify-write from isend to completion). Misuse of a `Local` handle across
//! threads does not compile; `RIVET_THREAD_LEVEL` can only raise a level. At MULTIPLE the state
//! is split into workers, each behind its own lock with its own requests, matching, send queues
//! and shared-memory lane and netmod instance; communicators of our world map to workers by
//! context id, alike on every rank; dynamic processes stay on worker 0 (`thread.rs`). Shared memory
//! between processes is lock-free. `rivet-bench mr --threads` measures the cost, the criterion
//! bench `engine_path` the lock per call.
//!
//! Module map:
//!
//! - `engine.rs`: the `Engine` handle (world, progress, finalize, abort); start-up (PMI, node
//!   segment, workers) in `engine/startup.rs`, under `--impi-client` one MPI_COMM_WORLD
//!   (`init_thread`: global rank = client offset + PMI rank, node map shifted, other clients'
//!   cards `impi`, own cards under global keys); `info` and `counts` in `engine/info.rs`.
//! - `external.rs`: start-up without a process manager: address blobs, `add_peers`, the node
//!   leader's segment by a computed name.
//! - `node_map.rs`: which peers share the node; shm or netmod per peer.
//! - `netmod.rs`: opening the netmod at init (`auto`: ofi where a provider is named or beats tcp),
//!   business-card keys; `wrap_impi` for other IMPI clients' ranks.
//! - `comm.rs`, `request.rs`, `scope.rs`, `status.rs`, `message.rs`: the public handles (`Comm`:
//!   dup, barrier, p2p; matched probes); `error.rs` the one error type.
//! - `split.rs`: `Comm::create` and `Comm::split`, and the context agreement they and `dup` run:
//!   the engine's within one IMPI client, seed 003's 4.4 / 4.6 / 4.7 across clients.
//! - `raw.rs`: calls by plain handle for C callers: `u64` requests and messages, caller-chosen
//!   context ids (`USER_CONTEXT_BASE` + 4 * id, above what agreement hands out).
//! - `raw_p2p.rs`: `RawP2p`, a communicator's isend/irecv/send/recv as one non-generic value of
//!   plain pointers (worker and VC table taken once), for the C ABI's `*_unchecked` entries:
//!   compiled here, so a C start is one call with its arguments and result in registers.
//! - `thread.rs`: thread levels, the `Shared`/`Local` handle types, the engine lock (a spin lock
//!   at MULTIPLE, a busy flag below), workers and how communicators map to them.
//! - `inner.rs`: `Inner`, what every handle points at: the workers (each a locked `Core`), wait
//!   loops, abandon, finalize, the parent link; `waits.rs` waits on many requests.
//! - `core.rs`: `Core`, the transports plus `State`: progress, transmit, flush of each VC's send
//!   queue.
//! - `route.rs`: how a VC reaches its peer (`Route`: loopback, shm, netmod) and what each
//!   transport allows (`Limits`, `RouteLimits::of`), as data.
//! - `transport/`: the transports behind one shape (`Transport`: limits, try_send, poll, read):
//!   `ShmLink` (the shm lane; its RMA is the CMA read, its local peers watched) and `NetLink`
//!   (the netmod, its poll cadence and `Sink`, its RMA); `Transports` dispatches by route and runs
//!   every rendezvous read after the poll (`run_reads`).
//! - `post.rs`: posting sends and receives (eager at once or queued, rendezvous requests), cancel,
//!   abandon.
//! - `pmi_watch.rs`: ends the rank when its PMI connection hangs up (launcher dead).
//! - `peer_watch.rs`: local peers' processes watched (pidfds, polled while idle), so a dead shm
//!   peer fails its waiters.
//! - `state/`: the protocol state (requests, matching, VCs, unexpected messages with their kept
//!   buffers `spare.rs`, netmod reads `reads.rs` and shared copies `copies.rs` under way) and the
//!   protocol code that changes it, behind private fields:
//!   - `state/protocol.rs`: arrivals: eager, ssend ack, send cancel; rendezvous (a transport's
//!     read, or streamed; direct placement) in `protocol/rendezvous.rs`, eager credit in
//!     `protocol/credit.rs`, a shm eager message over several cells taken cell by cell into a
//!     posted receive in `protocol/cells.rs`.
//!   - `state/posting.rs`: posting, probing, cancelling and withdrawing requests, what waits take.
//!   - `state/vcs.rs`: the VC of an id, our process group, foreign groups' registration and
//!     references, the list of VCs with queued sends.
//!   - `state/ports.rs`: open ports, their accept queues, temporary VCs' inboxes.
//!   - `state/copy.rs`: large shared-memory messages copied by both ranks (`Write`/`Written`);
//!     single-copy jobs run after the poll.
//!   - `state/rma.rs`: rendezvous by one-sided read, either transport's: its end (`Ack`) or its
//!     refusal (fallback to streaming); a failed peer's reads stopped first.
//!   - `state/failure.rs`: peer failure, protocol violations (`misbehaved`), the finalize `Bye`
//!     handshake.
//! - `table.rs`: the request table (generation-checked `u64` handles) and `SendPhase`.
//! - `matching/`: posted and unexpected queues, O(1) exact match; slab and intrusive lists in
//!   `matching/slab.rs`.
//! - `pg/`: process groups, ours (`world.rs`, from the KVS) and foreign ones (`foreign.rs`, cards
//!   cached), `VcId` = (PG slot, rank) (`vc_id.rs`, below `pg` and `error`), the world's netmod
//!   VCs by rank in a two-level table (`ranks.rs`), reference counts; one VC (`vc.rs`: route, send
//!   queue, credit, failure, refs); VC tables (`vcrt.rs`: shared by dups, identity map for
//!   COMM_WORLD); group descriptions shipped by connect/accept and spawn (`desc.rs`).
//! - `groups.rs`: registering foreign groups, creating and releasing VC tables, lazy netmod.
//! - `dynamic/`: port names, opening, accepting on and connecting to ports (`ports.rs`; their
//!   state in `state/ports.rs`); accept/connect in
//!   seed 001's steps (`connect.rs`), spawn (`spawn.rs`), name service (`names.rs`); group
//!   connect, disconnect and group events, seed 004 (`group.rs`; the event table `Inner` holds
//!   in `group_events.rs`, below `inner`).
//! - `intercomm.rs`: intercommunicator merge, disconnect.
//! - `collective.rs`: engine-internal collectives (barrier, context agreement, bcast, gather, root
//!   swap).
//! - `impi_coll.rs`: IMPI collectives (seed 003 ch. 4): the barrier across clients, the
//!   all-reduce and all-gather communicator creation runs; tag values Rivet chose where the text
//!   is cut. `impi_topo.rs`: clients per rank, masters per client,
//!   `cubedim` and the tree, as data. `impi_comm.rs`: 4.5 free, 4.8 `intercomm_create`, 4.9
//!   merge (for COMM_WORLD's processes), with the seed's messages and context-id rule.
//! - `shm/`: the node segment (`segment.rs`, `layout.rs`), sizes and errors (`config.rs`), the
//!   send and receive sides of a lane (`send.rs`, `recv.rs`), CMA (`cma.rs`); the fastbox rings
//!   (`shm::fastbox`) and Nemesis MPSC queues (`shm::queue`) are `rivet-lockfree`'s, re-exported,
//!   with their loom models in `lockfree/tests/loom_{queue,ring}.rs`.
//! - `wire`: the header every message carries (`rivet-lockfree`'s, re-exported).
//! - `config.rs`, `backoff.rs`: the engine's `RIVET_*` settings; the spin/yield/park policy.
//! - `fuzzing.rs` (hidden): the fuzz target over `deliver`.
//!
//! What must stay true here (ARCHITECTURE.md's engine invariants, in full):
//!
//! - Reference counts follow seed 000: a VC table takes one reference per foreign VC (0 -> 2: one
//!   is "connected"); dropping the last handle on a table (`free`) gives back one, `disconnect`
//!   also the last; a foreign PG lives while any of its VCs is referenced, then its connections
//!   get a `Bye` and close. COMM_WORLD's VCs are never counted or freed.
//! - A VC is named `(PG slot, rank)`, and the netmod uses the same number as its peer id. Slots are
//!   never reused, so a straggler from a disconnected group is dropped, never misdelivered.
//! - Temporary VCs (port connections) carry only `Port` messages, outside matching, and close once
//!   connect/accept ends; a connection to a tag not open is closed at once (the connector fails).
//!   Any other message on a temporary VC, or a `Port` message on any other VC, is refused: its
//!   sender is treated as failed and its connection closed.
//! - Group connect: nobody sends on a new group before the process manager has heard from every
//!   member that it registered the group's process groups (`group_ready`); PMI calls that wait
//!   for other processes run on a helper thread while the caller keeps the engine progressing.
//! - Per pair and context, messages match in send order, whichever shm path (fastbox ring or cell
//!   queue) each took: per-pair sequence numbers merge them. A context runs on one worker, the
//!   same on both ranks, and so on one shm lane (`thread.rs`).
//! - The node segment is unlinked as soon as every local rank has attached.
//! - Nothing a peer sends can make the engine panic or write outside a receive buffer: handles are
//!   generation-checked, offsets bounds-checked.
//! - A send moves through explicit phases (`table::SendPhase`: Queued, Sent, AwaitingAck, RtsSent,
//!   Streaming, Done, Cancelled, Failed; a pending cancel is a flag), only through `SendOp`'s
//!   methods. An `Ack`, `Cts` or `CancelAck` acts only on a send to the VC it came from, in a
//!   phase that awaits it; any other is dropped and its sender treated as failed ("protocol
//!   violation", connection closed), the send untouched.
//! - A single-copy (CMA) read reads from the pid the node segment has at the sender's slot, never
//!   from a pid a message names (the `Rts` still carries one, unused).
//! - A local peer whose process ends fails like a netmod peer (`PeerFailed`), found by a pidfd on
//!   the process its segment slot names (never a reused pid), once a poll after the death found
//!   nothing more from it; a peer that marked its slot finalized fails only what names it. Under
//!   `--disable-auto-cleanup` too: nothing waits forever on a dead neighbour.
//! - A netmod peer's failure fails only the requests that need that peer (sends to it, receives
//!   for it or `ANY_SOURCE`, streams from it); messages already received from it stay receivable.
//! - Unasked-for eager data buffered per netmod peer is bounded by the credit window; larger or
//!   credit-less sends go by rendezvous, whose data lands straight in the posted buffer
//!   (`Sink::place`).
//! - A blocking call that fails or unwinds withdraws its request before it returns
//!   (`request::Lent`): nothing points at its buffer afterwards.
//! - No borrowed buffer is released (a scope or blocking call returning or unwinding) while a
//!   netmod, a netmod read or a peer's single-copy write may still write into it
//!   (`Inner::abandon`): the receive is finished first, or, during a panic or once the engine has
//!   failed, the process aborts (SIGABRT, reason on stderr) instead of unwinding.
//! - A shared copy (`state/copy.rs`): the sender writes only into the range the receiver named for a
//!   send of its own to that receiver, right after its `Rts` and within the message; the receiver
//!   completes only after its own part and the sender's `Written`, then answers `Ack`.
//! - A rendezvous receive that reads over the netmod stays in its Reading phase, its buffer
//!   untouched by anything else, until the read ends; if its peer fails, until the netmod has
//!   stopped the read (`Rma::stop_reads`; one it cannot stop fails the engine); the sender's
//!   registration lives until its send completes (an abandoned send's is deregistered before its
//!   buffer is released).
//! - Finalize: a rank says `Bye` to every live netmod peer and waits for each one's `Bye` (a peer
//!   answers one at once and sends nothing else after a `Bye` it got).
//! - shm attach maps a segment only if it is a regular file of our user with mode 0600
//!   (`shm/segment.rs`, `trusted`), so a planted segment is refused.

#![deny(clippy::undocumented_unsafe_blocks)]

mod backoff;
mod collective;
mod comm;
mod config;
mod core;
mod dynamic;
mod engine;
mod error;
mod external;
/// Entry points of the fuzz targets (`fuzz/`); not an API.
#[doc(hidden)]
pub mod fuzzing;
mod group_events;
mod groups;
mod impi_coll;
mod impi_comm;
mod impi_topo;
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
mod raw;
mod raw_p2p;
mod request;
mod route;
mod scope;
pub mod shm;
mod split;
mod state;
mod status;
mod table;
#[cfg(test)]
mod test_netmod;
mod thread;
mod transport;
mod vc_id;
mod waits;
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
pub use raw_p2p::{BoxedError, RawP2p};
pub use request::Request;
pub use rivet_pmi as pmi;
pub use rivet_pmi::group::ProcName;
pub use scope::Scope;
pub use status::{MsgError, Status};
pub use thread::{Local, Shared, ThreadLevel, Threading};
