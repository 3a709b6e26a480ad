//! Rivet's network modules: the [`Netmod`] trait through which the engine
//! drives every off-node transport, the [`Sink`] through which a netmod
//! hands back arrivals (and asks where large payloads go), and the
//! transports: [`tcp`] (nonblocking sockets or io_uring) and `ofi`
//! (libfabric: any provider with reliable datagrams and tagged messages,
//! such as `tcp;ofi_rxm`, `shm` or `verbs;ofi_rxm`; built with the `ofi`
//! feature, it loads libfabric >= 1.17 at run time). Also small helpers shared with the engine: the
//! byte-size parser ([`parse_size`]), a hasher for integer keys
//! ([`FxBuildHasher`]), and whether the node has an interconnect device
//! ([`fabric_devices`], asked before libfabric is loaded).
//!
//! A netmod moves opaque `(header, payload)` messages between processes and
//! knows nothing of matching or protocols; the engine owns both. It is
//! driven from the engine's progress loop only, under the engine's lock, so
//! it needs `Send` but not `Sync`.
//!
//! [`impi`] reaches ranks of other IMPI clients (seed 003, chapter 3):
//! packets, flow control, the message protocols, and `ImpiNetmod`, which
//! wraps the netmod a client uses for its own ranks.
//!
//! [`auth`] holds the job secret and the MAC with which a connecting rank
//! proves it belongs to the job (the tcp HELLO).
//!
//! Peers are named by [`PeerId`]s: `(group, rank)` pairs ([`peer_id`],
//! [`split_peer`]). Group 0 is the process's own job. For dynamic processes
//! the engine names other jobs' processes by group slots
//! ([`Netmod::add_group`]) and meets new ones through temporary port
//! connections ([`Netmod::connect_port`], [`Sink::port_connection`]),
//! closing connections it is done with ([`Netmod::disconnect`]).
//!
//! The HELLO MAC is SipHash-2-4 written in `auth.rs` (checked against the paper's vector and std's
//! deprecated `SipHasher`), not a crypto crate: a keyed 64-bit PRF over a few dozen bytes is all a
//! handshake needs.
//!
//! Module map:
//!
//! - `lib.rs`: the plug-in point (`Netmod`, and `Sink`: deliver, place, peer_failed), peer ids.
//! - `tcp/`: the TCP netmod: cards (`card.rs`), the addresses in them (`iface.rs`), settings
//!   (`config.rs`), the handshake and its tie-break (`wire.rs`), sans-IO framing (`conn.rs`), the
//!   connection table both backends drive (`state/`: HELLO handling in `handshake.rs`, peer
//!   loss in `failure.rs`), socket calls (`sys.rs`), and two
//!   backends: `uring/` (io_uring, the default where allowed (`auto`): SINGLE_ISSUER +
//!   DEFER_TASKRUN when one thread drives it, else COOP
//!   (`ring.rs`); one multishot RECV per connection on a shared provided-buffer ring (`bufs.rs`);
//!   sends straight from the caller's buffer (`send.rs`); an idle progress call makes no system
//!   call, a busy one one `io_uring_enter`) and `poll.rs` (the fallback: one `epoll_wait` per
//!   progress call with two or more connections, so its cost does not grow with them).
//! - `ofi/`: the libfabric netmod (feature `ofi`): libfabric 1.17 opened at run time
//!   (`sys/library.rs`: dlopen, signal handlers put back), raw FFI (`sys/`, layout-tested against
//!   the C headers), RAII wrappers (`fid.rs`), provider choice and `is_fast` (`provider.rs`; a job
//!   all on one node prefers the `lo` domain), HELLO/VERDICT with the job secret's MAC
//!   (`handshake.rs`), CTS before large payloads, credits, keepalive, RMA (`rma.rs`); one shared
//!   pool of receive buffers sized by busy peers, not connected ones (`pool.rs`); unguessable
//!   connection ids (`state.rs`); receive order (`order.rs`); the fuzz target over HELLO and
//!   message sequences (`fuzz.rs`).
//! - `impi/`: IMPI data transfer (seed 003 ch. 3), sans I/O: the 128-byte packet header codec
//!   (`packet.rs`), per-pair flow control (`flow.rs`: ackmark/hiwater; the receiver's pair
//!   governs), the short/long/synchronous/cancel protocols (`protocol.rs`), a link's bytes cut
//!   into packets with bounded memory (`framer.rs`); the `impi` netmod: other clients' ranks on
//!   direct per-proc TCP channels, or the agent's socket for pairs without one (`channel/`: one
//!   engine message = one IMPI message, delivered in first-packet order; sending, receiving, the
//!   receive buffer, what crosses to the engine), dialled to lower ranks at init with a
//!   `RIVI`+rank hello (`netmod/connect.rs`), this client's through the inner tcp/ofi netmod under
//!   client-local ids (`netmod/`: calls and poll in `api.rs`, FINI at the end in `shutdown.rs`);
//!   the `IMPI_*` variables a rank gets (`config.rs`).
//! - `auth.rs`: the job secret (`RIVET_JOB_SECRET`) and the MAC with which a rank HELLO proves
//!   membership of its job.
//! - `jobs.rs`: which job a peer belongs to (own = group 0, added groups), for both handshakes.
//! - `fabric.rs`: whether the node has an interconnect device (sysfs, `/dev`), asked before
//!   libfabric is loaded.
//! - `size.rs`, `fxhash.rs`: shared with the engine: the size parser, an integer-key hasher.
//! - `libs.rs`: the libraries found, for `--version`.
//! - `fuzzing.rs` (hidden): the fuzz targets over the tcp and ofi decoders.
//!
//! What must stay true here (ARCHITECTURE.md's netmod invariants, in full):
//!
//! - A frame (tcp) or LARGE (ofi) above the netmod's piece that no posted receive takes fails its
//!   peer before anything is allocated for it, and ofi fails a peer whose message lies far past
//!   its credit window instead of holding it: per connection a peer can make us hold at most the
//!   input buffer plus one piece (tcp), or one piece plus a credit window of messages (ofi).
//! - The ofi netmod's posted receive buffers are one pool shared by all peers: 32 plus a credit
//!   window for each peer busy in this or the last keepalive round, at most 16 of them (with
//!   libfabric's `shm`, which loses unexpected messages, a window per connection, at most 64);
//!   the buffers are mappings of their own, resident only where written. A connected idle peer
//!   costs no receive buffer.
//! - With a job secret (rivetrun always sets one), tcp accepts a rank HELLO naming its own job
//!   only with the secret's MAC over (kind, rank, target rank, job, nonce, target job), and ofi
//!   only with its MAC over all of the HELLO's fields (endpoint name and ids included) and the
//!   target rank. Between jobs (accept/connect, spawn, group connect) a rank HELLO carries the MAC
//!   of its job's group key (derived from the secret, one way), which the other job got in the
//!   group description (`card#key`); a port connection needs the port's random tag.
//! - A process that never opens the ofi netmod never loads libfabric, and `auto` asks libfabric
//!   for a fast provider only where an interconnect device exists: loading it costs 0.2-0.7 s.
//! - Every tcp socket has TCP keepalive (`RIVET_TCP_KEEPALIVE`); an accepted socket without its
//!   whole HELLO by `RIVET_TCP_HANDSHAKE_TIMEOUT` is closed (checked only on the slow path); at
//!   most 512 accepted sockets wait for their HELLO at once (the oldest is closed to make room); a
//!   connector cut that way before its verdict connects again (at most 3 times per peer).
//! - After `Rma::stop_reads(peer)` returns `true`, no read from `peer` writes into its local
//!   buffer (ofi: cancelled or reaped, within the timeout); the engine fails such a read's
//!   receive only then.
//! - Memory an io_uring operation points at (buffers, addresses, placed receive buffers, provided
//!   buffers) is not freed or reused until its completion is reaped; a send from the caller's
//!   buffer (`try_send`) is reaped before `try_send` returns (MSG_DONTWAIT: it completes inline).

#![deny(clippy::undocumented_unsafe_blocks)]

use std::ptr::NonNull;

pub mod auth;
mod fabric;
/// Entry points of the fuzz targets (`fuzz/`); not an API.
#[doc(hidden)]
pub mod fuzzing;
mod fxhash;
pub mod impi;
mod jobs;
pub mod libs;
#[cfg(feature = "ofi")]
pub mod ofi;
mod size;
pub mod tcp;

pub use fabric::fabric_devices;
pub use fxhash::{FxBuildHasher, FxHasher};
pub use size::parse_size;

#[cfg(feature = "ofi")]
pub use ofi::{Forgery, OfiConfig, OfiNetmod};
pub use tcp::{TcpConfig, TcpNetmod};

/// The engine's name for a peer process: `peer_id(group, rank)`, the
/// engine's slot for the peer's process group in the high 32 bits and the
/// peer's rank in that group in the low 32. Group 0 is this process's own
/// job, so there a peer id is simply the rank, the same number on both
/// sides of a connection. Peers of other jobs (dynamic processes, after
/// [`Netmod::add_group`]) are named by the group slot this process gave
/// their job, which need not match the other side's slot for ours.
/// [`TEMP_GROUP`] holds temporary port connections ([`Netmod::connect_port`],
/// [`Sink::port_connection`]): their ranks are local serial numbers.
pub type PeerId = u64;

/// The group of temporary port connections (see [`PeerId`]).
pub const TEMP_GROUP: u32 = u32::MAX;

/// The peer id of `rank` in process group slot `group`.
pub fn peer_id(group: u32, rank: u32) -> PeerId {
    ((group as u64) << 32) | rank as u64
}

/// `(group, rank)` of a peer id: the inverse of [`peer_id`].
pub fn split_peer(peer: PeerId) -> (u32, u32) {
    ((peer >> 32) as u32, peer as u32)
}

#[derive(Debug, thiserror::Error)]
pub enum NetmodError {
    #[error("peer {peer}: {what}")]
    Peer { peer: PeerId, what: String },
    #[error("bad business card {card:?}: {why}")]
    BadCard { card: String, why: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The netmod asked for is not in this build.
    #[error("{0}")]
    Unavailable(String),
}

/// The libfabric netmod, configured from the environment (`OfiConfig`),
/// for rank `rank` of job `job`, on `provider` unless `RIVET_OFI_PROVIDER`
/// names one; or why this build or machine has none.
pub fn open_ofi(
    job: &str,
    rank: u64,
    provider: Option<&str>,
    loopback: bool,
) -> Result<Box<dyn Netmod>, NetmodError> {
    #[cfg(feature = "ofi")]
    {
        let mut config = OfiConfig::from_env()?;
        if config.provider.is_none() {
            config.provider = provider.map(str::to_string);
        }
        if loopback {
            config.prefer_domain = Some("lo".into());
        }
        Ok(Box::new(OfiNetmod::new(config, job, rank)?))
    }
    #[cfg(not(feature = "ofi"))]
    {
        let _ = (job, rank, provider, loopback);
        Err(NetmodError::Unavailable(
            "this build has no libfabric netmod (rivet-netmods was built without its `ofi` \
             feature)"
                .into(),
        ))
    }
}

/// The first libfabric provider here that is faster than tcp (verbs, efa,
/// cxi, psm3, ...: see `ofi::is_fast`), which `auto` prefers for peers on
/// other nodes; `Ok(None)` if there is none, `Err` if libfabric cannot be
/// used at all.
pub fn ofi_fast_provider() -> Result<Option<String>, String> {
    #[cfg(feature = "ofi")]
    {
        Ok(ofi::providers()?.into_iter().find(|p| ofi::is_fast(p)))
    }
    #[cfg(not(feature = "ofi"))]
    {
        Err("rivet-netmods was built without its `ofi` feature".into())
    }
}

/// What a netmod hands the engine from `poll`. Called during `poll` only.
pub trait Sink {
    /// A whole message from `peer`, in the order `peer` sent it.
    fn deliver(&mut self, peer: PeerId, header: &[u8], payload: &[u8]);

    /// A message from `peer` with this `header` and a `len`-byte payload is
    /// arriving. `Some(dst)`: the netmod writes the payload straight into
    /// `dst..dst+len` (the engine's posted receive buffer) and then calls
    /// `deliver` with exactly that memory as the payload; the memory stays
    /// writable until then (or until `peer_failed` for `peer`, or until
    /// `Netmod::disconnect(peer)` returns, after which the netmod no longer
    /// touches it). `None` (the default): the netmod buffers it.
    fn place(&mut self, peer: PeerId, header: &[u8], len: usize) -> Option<NonNull<u8>> {
        let _ = (peer, header, len);
        None
    }

    /// `peer` is gone (connection reset or closed, connect refused,
    /// handshake rejected): nothing more arrives from it, sends to it fail.
    /// Reported once per connection; the netmod has already dropped any
    /// pointer `place` gave it for this peer.
    fn peer_failed(&mut self, peer: PeerId, why: &str);

    /// A process connected to port `tag` (its `connect_port`); it is known
    /// as `peer` (in TEMP_GROUP) from now on. Reported before anything from
    /// that peer is delivered. Default: ignore.
    fn port_connection(&mut self, peer: PeerId, tag: u64) {
        let _ = (peer, tag);
    }
}

/// Sizes the engine's protocols pick their path by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest payload one `try_send` takes.
    pub max_payload: usize,
    /// Messages up to this size go eagerly; larger ones by rendezvous.
    pub eager_max: usize,
}

/// A transport to processes the engine cannot reach through shared memory.
pub trait Netmod: Send {
    /// Short name for `--info` and errors ("tcp", "ofi").
    fn name(&self) -> &'static str;

    /// How other processes reach this one; published through the process
    /// manager's key-value space. Printable, no whitespace.
    fn business_card(&self) -> &str;

    /// Whether `peer` can be sent to without a `connect` first: `connect`
    /// was called for it, or it connected to us.
    fn knows(&self, peer: PeerId) -> bool;

    /// Start connecting to `peer` (lazily, on the first message to it);
    /// messages may be sent as soon as this returns, before the
    /// connection completes. A no-op if the peer is already known.
    fn connect(&mut self, peer: PeerId, card: &str) -> Result<(), NetmodError>;

    /// Processes of job `job` (another process group's id, as its netmod was
    /// created with) are peers `peer_id(group, rank)`: their connections are
    /// accepted and `connect(peer_id(group, r), card)` reaches them.
    /// Errors: group 0 or TEMP_GROUP, `job` equal to our own job, a job id
    /// longer than the handshake allows, or a group already added.
    fn add_group(&mut self, group: u32, job: &str) -> Result<(), NetmodError>;

    /// Forget a group: later connections from its job are refused as from
    /// another job. Existing peers are not touched (the engine disconnects them).
    fn remove_group(&mut self, group: u32);

    /// HELLOs from processes of added group `group` must prove `key`,
    /// that job's group key (`auth::JobKey::group_key`, carried in the
    /// group description the connect step exchanged); this netmod proves
    /// ours with our own job's group key. The default ignores it (a netmod
    /// that does not check HELLOs between jobs). Error: `group` not added.
    fn set_group_key(&mut self, group: u32, key: auth::JobKey) -> Result<(), NetmodError> {
        let _ = (group, key);
        Ok(())
    }

    /// Open a temporary connection to the process with business card `card`,
    /// naming port `tag` in the handshake (MPI_Comm_connect's first step).
    /// Returns a new peer id in TEMP_GROUP; messages may be sent at once.
    /// An unreachable card or a refusal is reported as `peer_failed` of that id.
    fn connect_port(&mut self, card: &str, tag: u64) -> Result<PeerId, NetmodError>;

    /// Close the connection to `peer` once everything already taken by
    /// `try_send` for it has been written; forget the peer. Nothing more is
    /// delivered from it and no `peer_failed` is reported for it afterwards;
    /// `knows(peer)` is false at once. A no-op for an unknown peer.
    fn disconnect(&mut self, peer: PeerId);

    /// Peers known now (connected or connecting, temporary ones included),
    /// for the engine's counters.
    fn peer_count(&self) -> usize;

    /// Take one message for a known `peer`: `Ok(true)` once the bytes are
    /// copied or written (the caller may reuse its buffers), `Ok(false)` if
    /// the transport is full for now and the caller should retry after
    /// `poll`. A peer reported failed, or one not known (`knows` false),
    /// gives `Err`: the engine sends first and connects only on that
    /// error, so a known peer costs no `knows` lookup per message.
    fn try_send(
        &mut self,
        peer: PeerId,
        header: &[u8],
        payload: &[u8],
    ) -> Result<bool, NetmodError>;

    /// Drive I/O once without blocking; hand arrivals and failures to
    /// `sink`. Returns the number of events (messages delivered, peers
    /// failed, connections made).
    fn poll(&mut self, sink: &mut dyn Sink) -> Result<usize, NetmodError>;

    /// Block in the kernel until something may be there for `poll` (bytes
    /// or a connection arriving, an operation of ours ending) or `timeout`
    /// passes; true if it blocked (whatever ended it), false at once if it
    /// cannot watch everything `poll` serves that way, or if `poll` may
    /// already have work. A yielding engine calls this, between polls,
    /// when waiting rounds found nothing and the netmod is the only
    /// transport that could wake it: on a crowded host a process asleep in
    /// the kernel leaves the CPU to those with work, where `sched_yield`
    /// gives it back almost at once. The default never blocks.
    fn park(&mut self, timeout: std::time::Duration) -> bool {
        let _ = timeout;
        false
    }

    /// Nothing taken by `try_send` is still waiting in this process (all of
    /// it is with the kernel or the peer): finalize waits for this.
    fn idle(&self) -> bool;

    fn limits(&self) -> Limits;

    /// System calls this netmod made for I/O so far, where it counts them
    /// (`rivet-bench` reports them per message); `None` if it does not.
    fn syscalls(&self) -> Option<u64> {
        None
    }

    /// One-sided reads for the rendezvous protocol, where the transport has
    /// them (RDMA); `None` means rendezvous data is streamed with `try_send`.
    fn rma(&mut self) -> Option<&mut dyn Rma> {
        None
    }

    /// `name: value` lines for `--info`: backend, thresholds, state.
    fn describe(&self) -> Vec<(String, String)>;
}

/// One-sided access to registered memory of a peer.
pub trait Rma {
    /// Make `len` bytes at `addr` readable by peers; the returned key goes
    /// in the rendezvous request.
    fn register(&mut self, addr: usize, len: usize) -> Result<u64, NetmodError>;

    fn deregister(&mut self, key: u64) -> Result<(), NetmodError>;

    /// Start reading `len` bytes of `peer`'s memory (`remote_addr`, `key`)
    /// into `local`; `Ok(token)`, completion reported by `poll_reads`.
    ///
    /// # Safety
    /// `local..local+len` must stay valid for writes until the read completes.
    unsafe fn read(
        &mut self,
        peer: PeerId,
        local: *mut u8,
        len: usize,
        remote_addr: u64,
        key: u64,
    ) -> Result<u64, NetmodError>;

    /// Reads that ended since the last call: `done(token, Ok(()))` for a
    /// read whose bytes are all in place, `Err(why)` for one that failed
    /// (its local buffer is no longer written either way).
    fn poll_reads(&mut self, done: &mut dyn FnMut(u64, Result<(), String>));

    /// `peer` failed (whoever found out: this netmod, or the engine): end
    /// every read from it now, cancelled or finished, waiting a bounded
    /// time for the provider. `true`: when this returns, no read from
    /// `peer` writes into its local buffer any more (their ends may still
    /// be reported by `poll_reads`; the caller ignores them); `false`: some
    /// read could not be ended in time and may still write, so its buffer
    /// must not be given back yet.
    fn stop_reads(&mut self, peer: PeerId) -> bool;
}
