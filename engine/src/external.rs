//! Start-up without a process manager, for runtimes that own their
//! bootstrap (their own PMI or PMIx): UCX's shape, a worker address blob
//! the caller carries to every peer, then "here are everyone's".
//!
//! [`Engine::bootstrap_external`] opens what needs no peers (the netmod,
//! whose card goes in the address) and returns a [`Bootstrap`];
//! [`Bootstrap::add_peers`] takes every rank's address, works out which
//! ranks share this node (same host id), sets up the node's shared memory
//! and returns the engine. Without a process manager there is no KVS
//! barrier: the node leader (lowest local rank) creates the segment under
//! a name every local rank can compute from the addresses, and the others
//! attach as soon as it is there (waiting at most [`ATTACH_WAIT`]).
//! Spawn, the name service and group connect need a process manager and
//! fail with `Error::Unsupported`; accept/connect on port names work.

use std::marker::PhantomData;
use std::time::{Duration, Instant};

use crate::config::{Config, NetmodChoice};
use crate::engine::{node_segment_name, Engine};
use crate::error::{Error, Result};
use crate::netmod;
use crate::node_map::NodeMap;
use crate::pg::ProcessGroup;
use crate::shm::{ShmConfig, ShmError, ShmNode};
use crate::thread::{Shared, ThreadLevel, Threading};

/// How long a local rank waits for its node leader's segment.
pub const ATTACH_WAIT: Duration = Duration::from_secs(60);

/// The address format's first field; another version is refused.
const MAGIC: &str = "rivet-address-1";

/// An engine half started: its address is ready to be exchanged.
pub struct Bootstrap<T: Threading = Shared> {
    config: Config,
    level: ThreadLevel,
    me: Address,
    netmod: Option<netmod::Opened>,
    address: Vec<u8>,
    _threads: PhantomData<T>,
}

/// What one rank's address says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Address {
    job: String,
    rank: u32,
    size: u32,
    /// Ranks with the same host id share a node (and its /dev/shm).
    host: String,
    pid: u32,
    /// The netmod's business card (empty in a job of one).
    card: String,
}

impl Address {
    fn encode(&self) -> Vec<u8> {
        format!(
            "{MAGIC};job={};rank={};size={};host={};pid={};card={}",
            self.job, self.rank, self.size, self.host, self.pid, self.card
        )
        .into_bytes()
    }

    fn decode(bytes: &[u8]) -> std::result::Result<Address, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?;
        let (head, card) = text
            .split_once(";card=")
            .ok_or("no card= field (not a Rivet address)")?;
        let mut fields = head.split(';');
        if fields.next() != Some(MAGIC) {
            return Err(format!(
                "it does not start with {MAGIC:?} (not a Rivet address, or another version)"
            ));
        }
        let mut get = |key: &str| -> std::result::Result<String, String> {
            let field = fields.next().ok_or(format!("no {key}= field"))?;
            field
                .strip_prefix(key)
                .and_then(|v| v.strip_prefix('='))
                .map(str::to_string)
                .ok_or(format!("expected {key}=, found {field:?}"))
        };
        let number = |key: &str, v: String| {
            v.parse::<u32>()
                .map_err(|_| format!("{key}={v:?} is not a number"))
        };
        let job = get("job")?;
        let rank = number("rank", get("rank")?)?;
        let size = number("size", get("size")?)?;
        let host = get("host")?;
        let pid = number("pid", get("pid")?)?;
        Ok(Address {
            job,
            rank,
            size,
            host,
            pid,
            card: card.to_string(),
        })
    }
}

/// This machine's identity as far as shared memory goes: the kernel's
/// boot id (one per running kernel) and the host name.
fn host_id() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let id = format!(
        "{}@{}",
        read("/proc/sys/kernel/hostname"),
        read("/proc/sys/kernel/random/boot_id")
    );
    id.replace(';', "_")
}

impl<T: Threading> Engine<T> {
    /// Start without a process manager: rank `rank` of a job of `size`
    /// ranks named `job` (the same string on every rank, unique to the
    /// job). Carry [`Bootstrap::address`] to every rank by your own means,
    /// then call [`Bootstrap::add_peers`] with all of them.
    pub fn bootstrap_external(
        level: ThreadLevel,
        job: &str,
        rank: u32,
        size: u32,
    ) -> Result<Bootstrap<T>> {
        if size == 0 || rank >= size {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} of a job of {size} ranks: ranks go from 0 to size - 1"
            )));
        }
        if job.is_empty() || job.contains(';') || job.len() > 256 {
            return Err(Error::InvalidArgument(format!(
                "job name {job:?}: give 1 to 256 characters without ';'"
            )));
        }
        let config = Config::from_env()?;
        let level = ThreadLevel::provided(level.max(T::FLOOR), config.thread_level);
        let netmod = if size > 1 {
            let hints = netmod::Hints {
                one_node: false,
                one_thread: level <= ThreadLevel::Funneled,
            };
            Some(netmod::open(config.netmod, job, rank, hints)?)
        } else {
            None
        };
        let me = Address {
            job: job.to_string(),
            rank,
            size,
            host: host_id(),
            pid: std::process::id(),
            card: netmod
                .as_ref()
                .map(|n| n.netmod.business_card().to_string())
                .unwrap_or_default(),
        };
        Ok(Bootstrap {
            address: me.encode(),
            config,
            level,
            me,
            netmod,
            _threads: PhantomData,
        })
    }
}

impl<T: Threading> Bootstrap<T> {
    /// The thread level the engine will provide.
    pub fn level(&self) -> ThreadLevel {
        self.level
    }

    /// This rank's address: opaque bytes to hand to every other rank.
    pub fn address(&self) -> &[u8] {
        &self.address
    }

    /// Finish start-up with every rank's address, indexed by rank (this
    /// one's included). Collective in the sense that each local rank's
    /// call waits for its node leader's.
    pub fn add_peers(self, addresses: &[&[u8]]) -> Result<Engine<T>> {
        let me = &self.me;
        if addresses.len() != me.size as usize {
            return Err(Error::InvalidArgument(format!(
                "{} addresses for a job of {} ranks: give one per rank, in rank order",
                addresses.len(),
                me.size
            )));
        }
        let mut peers = Vec::with_capacity(addresses.len());
        for (i, bytes) in addresses.iter().enumerate() {
            let a = Address::decode(bytes).map_err(|why| {
                Error::InvalidArgument(format!("the address of rank {i} is malformed: {why}"))
            })?;
            if a.rank as usize != i || a.size != me.size || a.job != me.job {
                return Err(Error::InvalidArgument(format!(
                    "address {i} is rank {} of {} in job {:?}, expected rank {i} of {} in {:?}: \
                     addresses must be given in rank order, all from this job",
                    a.rank, a.size, a.job, me.size, me.job
                )));
            }
            peers.push(a);
        }
        if peers[me.rank as usize] != *me {
            return Err(Error::InvalidArgument(format!(
                "address {} is not this rank's own address",
                me.rank
            )));
        }
        let forced = self.config.netmod != NetmodChoice::Auto;
        let local: Vec<u32> = peers
            .iter()
            .filter(|p| p.host == me.host)
            .map(|p| p.rank)
            .collect();
        let node_map = NodeMap::from_local(me.rank, local.clone()).with_force_netmod(forced);
        let mut shm = None;
        if local.len() > 1 && !forced {
            let leader = &peers[local[0] as usize];
            let name = node_segment_name(&me.job, leader.rank, leader.pid);
            let my_local = node_map.my_local_index();
            shm = Some(if my_local == 0 {
                ShmNode::create(&name, local.len(), 0, &ShmConfig::from_env()?)?
            } else {
                attach_when_ready(&name, local.len(), my_local)?
            });
        }
        let mut world = ProcessGroup::new(
            me.job.clone(),
            me.size,
            me.rank,
            node_map,
            self.config.eager_window,
        );
        world.cards = peers.into_iter().map(|p| p.card).collect();
        Engine::assemble(
            &self.config,
            self.level,
            world,
            shm,
            self.netmod,
            Vec::new(),
            None,
        )
    }
}

/// Attach to the node segment once its leader has made it.
fn attach_when_ready(name: &str, local_size: usize, my_local: usize) -> Result<ShmNode> {
    let start = Instant::now();
    loop {
        match ShmNode::attach(name, local_size, my_local) {
            Ok(node) => return Ok(node),
            Err(e) if not_there_yet(&e) && start.elapsed() < ATTACH_WAIT => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if not_there_yet(&e) => {
                return Err(Error::Failed(format!(
                    "the node leader did not create /dev/shm/{name} within {}s ({e}); did \
                     every rank on this node call add_peers?",
                    ATTACH_WAIT.as_secs()
                )))
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The segment does not exist yet, or its creator is still filling it.
fn not_there_yet(e: &ShmError) -> bool {
    match e {
        ShmError::Io { source, .. } => source.raw_os_error() == Some(libc::ENOENT),
        ShmError::TooSmall { .. } | ShmError::NotASegment { .. } => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Address {
        Address {
            job: "j1".into(),
            rank: 3,
            size: 8,
            host: "node@boot".into(),
            pid: 42,
            card: "tcp;10.0.0.1:5000;x=y".into(),
        }
    }

    #[test]
    fn addresses_round_trip_with_any_card() {
        let a = sample();
        assert_eq!(Address::decode(&a.encode()), Ok(a));
    }

    #[test]
    fn malformed_addresses_are_refused_with_a_reason() {
        for (bytes, why) in [
            (&b"hello"[..], "no card="),
            (
                b"rivet-address-2;job=j;rank=0;size=1;host=h;pid=1;card=",
                "another version",
            ),
            (
                b"rivet-address-1;job=j;rank=x;size=1;host=h;pid=1;card=",
                "rank=\"x\"",
            ),
            (
                b"rivet-address-1;job=j;size=1;host=h;pid=1;card=",
                "expected rank=",
            ),
            (&[0xff, 0xfe][..], "UTF-8"),
        ] {
            let err = Address::decode(bytes).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
    }

    #[test]
    fn a_singleton_starts_and_talks_to_itself() {
        let boot = Engine::<crate::Local>::bootstrap_external(ThreadLevel::Single, "solo", 0, 1)
            .expect("bootstrap");
        let address = boot.address().to_vec();
        let engine = boot.add_peers(&[&address]).expect("add_peers");
        let world = engine.world();
        assert_eq!((world.rank(), world.size()), (0, 1));
        world.send(b"hi", 0, 1).unwrap();
        let mut buf = [0u8; 2];
        world.recv(&mut buf, 0, 1).unwrap();
        assert_eq!(&buf, b"hi");
        // What needs a process manager says so.
        let err = engine.publish_name("svc", "port").unwrap_err();
        assert!(matches!(err, Error::Unsupported(_)), "{err}");
        engine.finalize().unwrap();
    }

    #[test]
    fn wrong_peer_lists_are_refused() {
        let boot = Engine::<crate::Local>::bootstrap_external(ThreadLevel::Single, "solo", 0, 1)
            .expect("bootstrap");
        let other = Address {
            job: "other".into(),
            rank: 0,
            size: 1,
            ..sample()
        }
        .encode();
        assert!(boot.add_peers(&[&other]).is_err());
        assert!(
            Engine::<crate::Local>::bootstrap_external(ThreadLevel::Single, "j", 2, 2).is_err()
        );
        assert!(
            Engine::<crate::Local>::bootstrap_external(ThreadLevel::Single, "a;b", 0, 1).is_err()
        );
    }
}
