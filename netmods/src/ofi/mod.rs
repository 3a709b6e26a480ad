//! The libfabric network module: one reliable-datagram endpoint
//! (`FI_EP_RDM`) per process, tagged messages, progress only in `poll`
//! (manual progress, no threads). Any provider offering that with 64-bit
//! tags and send-after-send order serves: `tcp;ofi_rxm`, `shm`,
//! `verbs;ofi_rxm`, ... (`RIVET_OFI_PROVIDER`, else libfabric's choice).
//!
//! RDM has no connections, so the netmod makes its own: the first message
//! to a peer is a HELLO naming the sender (job and rank, or a port tag)
//! and carrying its endpoint name and the id the receiver is to tag its
//! messages with; the VERDICT answers with the receiver's id, or refuses
//! (another job). From then on every message's tag carries the id its
//! receiver gave the sender, so the receiver knows who sent it without
//! provider help (`wire` has the format). Peers are named and accepted as
//! in the tcp netmod: group 0 is our job, `add_group` admits another,
//! port HELLOs make temporary peers announced by `Sink::port_connection`.
//!
//! Small messages are injected or sent from a copy; large payloads follow
//! their header as a message of their own, which the receiver takes
//! straight into the engine's memory (`Sink::place`). Where the provider
//! has `FI_RMA`, `rma()` offers one-sided reads.
//!
//! A peer fails on an error completion of a send to it, on a malformed or
//! refused handshake, on its BYE (it disconnected), or when it has left
//! us without progress for `RIVET_OFI_TIMEOUT` (some providers, such as
//! `tcp;ofi_rxm` with a dead peer, only ever say "try again").
//!
//! Those all need a send, and a peer that dies while we have nothing for
//! it would never be noticed (`tcp;ofi_rxm` says nothing about an idle
//! dead peer), so there is a keepalive: while the netmod is polled, a
//! connection whose handshake is done, that is neither failed nor
//! disconnected (by us or by its BYE), and to which nothing was sent for
//! one to two keepalive intervals (`OfiConfig::keepalive_interval`: a
//! quarter of the timeout, within 100 ms..5 s) gets a PING through the
//! normal send path. A dead peer's PING then fails or makes no progress,
//! and the peer fails as above: within about two intervals and the
//! timeout of its death. A live peer answers with a PONG whenever it
//! polls; at most `wire::PINGS` PINGs go unanswered, so one that does not
//! poll for a long time is not flooded (nor failed: the provider takes
//! the few PINGs). PING and PONG never reach the engine, take no credits
//! and no place in the sequence, and do not count for `idle` (neither
//! queued nor in flight; nor do CREDITs: losing any of them costs no
//! data, and a peer that has exited must not hold our finalize for the
//! timeout). The clock is read every `KEEPALIVE_POLLS` polls, not on
//! every one. Same-node providers deliver into a dead process's queue
//! without complaint (`shm`), so where an endpoint name gives the owner's
//! process id (`fi_shm://PID:...`), the keepalive round also fails a peer
//! whose process is gone.
//!
//! | file | holds |
//! | --- | --- |
//! | `sys/` | raw libfabric 1.17 bindings, one file per header |
//! | `fid.rs` | owning wrappers that close libfabric objects |
//! | `config.rs` | `OfiConfig`, `RIVET_OFI_*` parsing |
//! | `provider.rs` | hints, choosing the provider, what it offers |
//! | `card.rs`, `wire.rs` | the business card; tags and handshake encoding |
//! | `state.rs` | peers, the connection table, failure and detach rules |
//! | `conn.rs` | one connection: send queue, handshake phase, credits |
//! | `handshake.rs` | accepting or refusing a HELLO; a VERDICT's effect |
//! | `proof.rs` | keys per job group, the VERDICT's MAC, message tokens |
//! | `order.rs` | the receive order of a connection's messages |
//! | `ops.rs` | posted operations and the memory they own |
//! | `pool.rs` | the shared receive pool: its size, its buffers |
//! | `xfer.rs` | posting sends and receives, send buffers, memory keys |
//! | `send.rs` | the send path: queues, back-pressure, HELLO, peer addresses |
//! | `reap.rs` | reaping the completion queue; stopping a placed receive |
//! | `recv.rs` | what arrives: messages by kind and in turn, keepalive round |
//! | `rma.rs` | memory registration and one-sided reads; stopping a failed peer's reads |
//! | `fuzz.rs` | the fuzz target over HELLO and message sequences |
//! | `forge.rs` | what an intruder can send (hidden; for tests) |

mod card;
mod config;
mod conn;
mod fid;
mod forge;
#[doc(hidden)]
pub use forge::Forgery;
#[doc(hidden)]
pub mod fuzz;
mod handshake;
mod ops;
mod order;
mod pool;
mod proof;
mod provider;
mod reap;
mod recv;
mod rma;
mod send;
mod state;
pub mod sys;
pub(crate) mod wire;
mod xfer;

use std::collections::VecDeque;
use std::io;
use std::time::Instant;

use crate::{Limits, Netmod, NetmodError, PeerId, Rma, Sink};

pub use config::OfiConfig;
pub use provider::{is_fast, provider_domains, providers};

use fid::{Base, Endpoint, Fabric};
use ops::Ops;
use pool::Pool;
use provider::{caps_str, fi_err, mr_mode_str, version_str, Chosen};
use reap::Completion;
use rma::Regions;
use send::Refusal;
use state::State;

/// Polls between two looks at the clock for the keepalive round.
const KEEPALIVE_POLLS: u32 = 16;

/// The libfabric netmod. Fields close in declaration order: the endpoint
/// first (nothing is posted after), then the memory operations used, then
/// registered regions, then the endpoint's parents.
pub struct OfiNetmod {
    ep: Endpoint,
    ops: Ops,
    regions: Regions,
    base: Base,
    st: State,
    cfg: OfiConfig,
    chosen: Chosen,
    card: String,
    /// Our endpoint name (in HELLOs).
    name: Vec<u8>,
    /// Size of the generic receive buffers.
    slot: usize,
    /// Generic receive buffers made (posted, or being handled).
    generic: usize,
    /// How many to keep posted (`pool.rs`).
    rx_pool: Pool,
    /// Receives the provider refused for now ("again"), to post at `poll`.
    unposted: Vec<usize>,
    /// Completions read while waiting for another (cancel) or without a
    /// sink (`poll_reads`), handled at the next `poll`.
    deferred: VecDeque<Completion>,
    /// VERDICTs refusing a HELLO, not yet posted.
    refusals: VecDeque<Refusal>,
    /// Key source for regions whose key we choose.
    next_key: u64,
    /// Spare send buffers.
    pool: Vec<Vec<u8>>,
    /// Receives into engine memory that did not stop within the timeout
    /// at `disconnect` or failure (see `reap::quiesce`).
    stuck: u64,
    /// Failed peers whose reads did not end within the timeout
    /// (`Rma::stop_reads`).
    stuck_reads: u64,
    /// Events of the current `poll`.
    events: usize,
    /// Polls so far (wrapping): the keepalive looks at the clock every
    /// `KEEPALIVE_POLLS`.
    polls: u32,
    /// When the next keepalive round is due.
    ka_next: Instant,
    /// PINGs sent (queued for posting), PONGs received.
    pings_sent: u64,
    pongs: u64,
}

// SAFETY: the libfabric objects are opened with FI_THREAD_DOMAIN: any
// thread may use them as long as calls are serialised, which `&mut self`
// does (the netmod is driven from one thread at a time, under the engine's
// lock). Placement pointers are the engine's memory, valid per `Sink::place`.
unsafe impl Send for OfiNetmod {}

fn invalid(why: &str) -> NetmodError {
    NetmodError::Io {
        what: "ofi netmod".into(),
        source: io::Error::new(io::ErrorKind::InvalidInput, why.to_string()),
    }
}

impl OfiNetmod {
    /// Opens the provider's fabric, domain, endpoint, completion queue and
    /// address vector, and posts the receive buffers. `job` is the process
    /// group's id (the PMI KVS name): HELLOs from other jobs are refused
    /// unless added with `add_group`. `my_rank` (below 2^32) is our rank
    /// in it, the PeerId other processes of the job know us by.
    pub fn new(config: OfiConfig, job: &str, my_rank: u64) -> Result<OfiNetmod, NetmodError> {
        config.validate()?;
        if job.len() > wire::MAX_JOB {
            return Err(invalid("job id longer than 256 bytes"));
        }
        let me = u32::try_from(my_rank).map_err(|_| invalid("rank above 2^32 - 1"))?;
        let (info, chosen) = provider::select(&config)?;
        let prov = chosen.provider.clone();
        let err = |e| fi_err(&prov, e);
        let fabric = Fabric::open(&info).map_err(err)?;
        let domain = fabric.domain(&info).map_err(err)?;
        let cq = domain.cq(0).map_err(err)?;
        let av = domain.av(sys::FI_AV_TABLE, 64).map_err(err)?;
        let ep = domain.endpoint(&info).map_err(err)?;
        ep.enable(&cq, &av).map_err(err)?;
        let name = ep.name().map_err(err)?;
        if name.len() > wire::MAX_NAME {
            return Err(invalid("endpoint name longer than 256 bytes"));
        }
        let mut config = config;
        let eager_max = *config
            .eager_max
            .get_or_insert_with(|| config::default_eager_max(&chosen.provider));
        let slot = (wire::PREFIX + wire::MAX_HEADER + eager_max).max(wire::HELLO_MAX);
        let mut st = State::new(me, job.as_bytes(), eager_max as u32);
        st.key = config.job_key;
        let (a, b) = (crate::auth::nonce(), crate::auth::nonce());
        let mut id_key = [0u8; 16];
        id_key[..8].copy_from_slice(&a);
        id_key[8..].copy_from_slice(&b);
        st.id_key = Some(crate::auth::JobKey::new(id_key));
        let mut n = OfiNetmod {
            ep,
            ops: Ops::default(),
            regions: Regions::default(),
            base: Base {
                av,
                cq,
                domain,
                fabric,
                info,
            },
            st,
            card: card::format(&chosen.provider, &name),
            cfg: config,
            chosen,
            name,
            slot,
            generic: 0,
            rx_pool: Pool::new(&prov),
            unposted: Vec::new(),
            deferred: VecDeque::new(),
            refusals: VecDeque::new(),
            next_key: 1,
            pool: Vec::new(),
            stuck: 0,
            stuck_reads: 0,
            events: 0,
            polls: 0,
            ka_next: Instant::now(),
            pings_sent: 0,
            pongs: 0,
        };
        for _ in 0..pool::RX_DEPTH {
            n.add_generic_recv().map_err(err)?;
        }
        Ok(n)
    }

    /// The eager limit in use (set, or the provider's default).
    pub(crate) fn eager_max(&self) -> usize {
        self.cfg.eager_max.unwrap_or(config::LARGE_EAGER_MAX)
    }

    /// The provider in use (`tcp;ofi_rxm`, `shm`, ...).
    pub fn provider(&self) -> &str {
        &self.chosen.provider
    }

    /// Handshakes completed so far (ours answered, or theirs accepted).
    pub fn connections_made(&self) -> u64 {
        self.st.made
    }

    /// RMA reads posted and not yet completed (for tests: after
    /// `Rma::stop_reads(peer)` none of them is `peer`'s).
    #[doc(hidden)]
    pub fn reads_in_flight(&self) -> usize {
        self.ops.reads_from(None).len()
    }

    /// Peers whose handshake is done and that have not failed.
    pub fn connected_peers(&self) -> usize {
        self.st
            .peers
            .values()
            .filter_map(|id| self.st.conns.get(id))
            .filter(|c| c.ready() && c.failed.is_none())
            .count()
    }

    /// Messages dropped as malformed or from unknown connections.
    pub fn dropped(&self) -> u64 {
        self.st.dropped
    }

    /// Keepalive PINGs sent (handed to the send path) and PONGs received
    /// so far.
    pub fn pings(&self) -> (u64, u64) {
        (self.pings_sent, self.pongs)
    }
}

impl Netmod for OfiNetmod {
    fn name(&self) -> &'static str {
        "ofi"
    }

    fn business_card(&self) -> &str {
        &self.card
    }

    fn knows(&self, peer: PeerId) -> bool {
        self.st.peers.contains_key(&peer)
    }

    fn connect(&mut self, peer: PeerId, card: &str) -> Result<(), NetmodError> {
        if self.knows(peer) {
            return Ok(());
        }
        self.st.jobs.check_connect(peer)?;
        let addr = self.card_addr(card)?;
        self.st.add_conn(Some(peer), addr);
        Ok(())
    }

    fn add_group(&mut self, group: u32, job: &str) -> Result<(), NetmodError> {
        self.st.jobs.add_group(group, job)
    }

    fn remove_group(&mut self, group: u32) {
        self.st.jobs.remove(group);
    }

    fn set_group_key(&mut self, group: u32, key: crate::auth::JobKey) -> Result<(), NetmodError> {
        self.st.jobs.set_key(group, key)
    }

    fn connect_port(&mut self, card: &str, tag: u64) -> Result<PeerId, NetmodError> {
        let addr = self.card_addr(card)?;
        let peer = self.st.new_temp();
        let id = self.st.add_conn(Some(peer), addr);
        if let Some(c) = self.st.conns.get_mut(&id) {
            c.port = Some(tag);
        }
        self.st.set_port_key(id, tag);
        // Not lazy: a refusal or a dead card is reported even if nothing is sent.
        self.start(id);
        Ok(peer)
    }

    fn disconnect(&mut self, peer: PeerId) {
        if let Some(&id) = self.st.peers.get(&peer) {
            self.quiesce(id);
            self.st.detach(peer);
        }
    }

    fn peer_count(&self) -> usize {
        self.st.peer_count()
    }

    fn try_send(
        &mut self,
        peer: PeerId,
        header: &[u8],
        payload: &[u8],
    ) -> Result<bool, NetmodError> {
        self.send(peer, header, payload)
    }

    fn poll(&mut self, sink: &mut dyn Sink) -> Result<usize, NetmodError> {
        self.events = 0;
        self.reap(Some(sink));
        self.polls = self.polls.wrapping_add(1);
        if self.polls % KEEPALIVE_POLLS == 0 {
            self.keepalive();
        }
        self.work();
        for (peer, why) in std::mem::take(&mut self.st.failures) {
            sink.peer_failed(peer, &why);
            self.events += 1;
        }
        Ok(self.events)
    }

    /// Keepalives aside: a connection with only PINGs and PONGs queued or
    /// in flight is idle.
    fn idle(&self) -> bool {
        let quiet = |c: &conn::Conn| {
            c.out.iter().all(conn::Tx::optional) && c.awaiting.is_empty() && !c.bye
        };
        self.ops.sends() == 0 && self.refusals.is_empty() && self.st.conns.values().all(quiet)
    }

    fn limits(&self) -> Limits {
        Limits {
            max_payload: self.cfg.piece,
            eager_max: self.eager_max(),
        }
    }

    fn rma(&mut self) -> Option<&mut dyn Rma> {
        if self.chosen.rma.is_ok() {
            Some(self)
        } else {
            None
        }
    }

    fn describe(&self) -> Vec<(String, String)> {
        let c = &self.chosen;
        let rma = match &c.rma {
            Ok(_) => "read (FI_RMA): the receiver reads rendezvous data from the sender's \
                      registered buffer"
                .to_string(),
            Err(why) => format!("none ({why}): rendezvous data is streamed with sends"),
        };
        let mut d = vec![
            (
                "ofi.provider".into(),
                format!(
                    "{} {} (fabric {}, domain {}, {} v{}; libfabric {}, API 1.17)",
                    c.provider,
                    version_str(c.prov_version),
                    c.fabric,
                    c.domain,
                    c.protocol,
                    c.protocol_version,
                    // SAFETY: plain FFI query.
                    version_str(unsafe { sys::fi_version() }),
                ),
            ),
            (
                "ofi.caps".into(),
                format!("{} (inject {} B)", caps_str(c.caps), c.inject),
            ),
            ("ofi.mr_mode".into(), mr_mode_str(c.mr_mode)),
            ("ofi.rma".into(), rma),
            ("ofi.card".into(), self.card.clone()),
            (
                "ofi.eager_max".into(),
                format!(
                    "{} B (RIVET_OFI_EAGER_MAX, RIVET_EAGER_MAX, else the provider's default)",
                    self.eager_max()
                ),
            ),
            ("ofi.piece".into(), self.cfg.piece.to_string()),
            ("ofi.timeout".into(), format!("{:?}", self.cfg.timeout)),
            (
                "ofi.keepalive".into(),
                format!(
                    "PING after {:?} without sends; {} sent, {} answered",
                    self.cfg.keepalive_interval(),
                    self.pings_sent,
                    self.pongs
                ),
            ),
            (
                "ofi.peers".into(),
                format!("{} connected", self.connected_peers()),
            ),
            (
                "ofi.receives".into(),
                format!(
                    "{} buffers of {} B posted, shared by all peers (up to {}: {})",
                    self.generic,
                    self.slot,
                    self.rx_pool.most(),
                    self.rx_pool.describe()
                ),
            ),
        ];
        if self.st.dropped > 0 || self.stuck > 0 || self.stuck_reads > 0 {
            d.push((
                "ofi.dropped".into(),
                format!(
                    "{} messages (last: {}); {} placements and {} failed peers' reads not \
                     stopped in time",
                    self.st.dropped,
                    self.st.last_drop.as_deref().unwrap_or("-"),
                    self.stuck,
                    self.stuck_reads
                ),
            ));
        }
        d
    }
}
