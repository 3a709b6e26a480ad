//! One namespace (one job, one `MPI_COMM_WORLD`): its KVS, the job
//! attributes the server answers itself, barriers and per-rank state.
//!
//! Lookups check the attributes first (`PMI_process_mapping` computed from
//! the rank→node array, then the launcher's attributes such as
//! `PMI_hwloc_xmlfile`), then the KVS, as Hydra's proxy does. Attributes are
//! never stored in the user KVS and clients cannot put `PMI_` keys.
//! A put overwrites: the last write wins (Hydra behaves the same).

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::server::barrier::Barriers;
use crate::server::mapping::process_mapping_within;
use crate::server::{ConnId, NamespaceSpec};
use crate::wire::limits::{MAX_KEY, MAX_KVSNAME, MAX_SEND_LINE, MAX_VALUE};
use crate::wire::Message;

/// Key of the computed node map.
pub const PROCESS_MAPPING_KEY: &str = "PMI_process_mapping";

/// Prefix of keys reserved for the process manager.
pub const RESERVED_PREFIX: &str = "PMI_";

/// Longest value that fits a `cmd=get_result rc=0 value=...` reply line.
pub const MAX_REPLY_VALUE: usize = MAX_SEND_LINE - "cmd=get_result rc=0 value=\n".len();

/// True if `value` can be sent back in one `get_result` line to any client.
pub fn fits_reply(value: &str) -> bool {
    Message::GetResult {
        rc: 0,
        value: Some(value.to_string()),
        msg: None,
    }
    .encode()
    .is_ok()
}

fn invalid(name: &str, reason: impl Into<String>) -> Error {
    Error::InvalidNamespace {
        name: name.to_string(),
        reason: reason.into(),
    }
}

fn check_pair(ns: &str, what: &str, key: &str, value: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(invalid(
            ns,
            format!("{what} key {key:?} must be 1..={MAX_KEY} bytes"),
        ));
    }
    if value.len() > MAX_VALUE || !fits_reply(value) || !fits_reply(key) {
        return Err(invalid(
            ns,
            format!(
                "{what} {key:?} cannot be sent in one PMI line (values must be at most \
                 {MAX_REPLY_VALUE} bytes without spaces, line breaks or control characters)"
            ),
        ));
    }
    Ok(())
}

/// Entries a namespace of `size` ranks may hold: generous for ranks that
/// put a few cards each, and a bound on what a rank that puts in a loop
/// makes the launcher keep (a put over it answers `rc=1 msg=kvs_full`;
/// overwriting a key always works).
pub fn max_entries(size: u32) -> usize {
    MAX_ENTRIES_PER_RANK
        .saturating_mul(size as usize)
        .max(MIN_MAX_ENTRIES)
}

/// See [`max_entries`].
pub const MAX_ENTRIES_PER_RANK: usize = 64;
/// See [`max_entries`].
pub const MIN_MAX_ENTRIES: usize = 1 << 16;

/// State of one namespace.
#[derive(Debug)]
pub struct Namespace {
    pub name: String,
    pub size: u32,
    pub appnum: u32,
    /// Per-rank appnums (a spawn of several commands); empty: all `appnum`.
    appnum_of_rank: Vec<u32>,
    pub universe_size: u32,
    pub node_of_rank: Vec<u32>,
    /// `""` when the map cannot be expressed in one reply (then a get misses
    /// and MPICH falls back to exchanging hostnames; an empty value would
    /// make MPICH 4.0.2 abort, verified).
    mapping: String,
    attributes: HashMap<String, String>,
    kvs: HashMap<String, String>,
    pub barriers: Barriers,
    /// Ranks that sent `finalize` (only those: a namespace may be large
    /// and mostly silent, as on the name server's hub).
    finalized: HashSet<u32>,
    /// Which connection speaks for each rank that has one.
    rank_conn: HashMap<u32, ConnId>,
    /// Served as one node of a multi-host job (`node.rs`).
    pub(super) delegated: Option<super::node::Delegated>,
}

impl Namespace {
    /// Validate a spec and build the namespace.
    pub fn from_spec(spec: NamespaceSpec) -> Result<Namespace> {
        let name = spec.name;
        if name.is_empty() || name.len() > MAX_KVSNAME {
            return Err(invalid(
                &name,
                format!("the name must be 1..={MAX_KVSNAME} bytes"),
            ));
        }
        if name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
        {
            return Err(invalid(
                &name,
                "the name must not contain spaces, backslashes or control characters \
                 (MPICH clients cannot read them back)",
            ));
        }
        if spec.size == 0 {
            return Err(invalid(&name, "size must be at least 1"));
        }
        if spec.node_of_rank.len() != spec.size as usize {
            return Err(invalid(
                &name,
                format!(
                    "node_of_rank has {} entries but size is {}",
                    spec.node_of_rank.len(),
                    spec.size
                ),
            ));
        }
        if !spec.appnum_of_rank.is_empty() && spec.appnum_of_rank.len() != spec.size as usize {
            return Err(invalid(
                &name,
                format!(
                    "appnum_of_rank has {} entries but size is {}",
                    spec.appnum_of_rank.len(),
                    spec.size
                ),
            ));
        }
        let mut attributes = HashMap::new();
        for (k, v) in spec.attributes {
            check_pair(&name, "attribute", &k, &v)?;
            attributes.insert(k, v);
        }
        let mut kvs = HashMap::new();
        for (k, v) in spec.preput {
            check_pair(&name, "preput", &k, &v)?;
            kvs.insert(k, v);
        }
        let mapping = process_mapping_within(&spec.node_of_rank, MAX_REPLY_VALUE);
        Ok(Namespace {
            name,
            size: spec.size,
            appnum: spec.appnum,
            appnum_of_rank: spec.appnum_of_rank,
            universe_size: spec.universe_size,
            node_of_rank: spec.node_of_rank,
            mapping,
            attributes,
            kvs,
            barriers: Barriers::default(),
            finalized: HashSet::new(),
            rank_conn: HashMap::new(),
            delegated: None,
        })
    }

    /// A namespace known only for group connect (the name server's hub,
    /// `hub.rs`): no node map, attributes or KVS, so it costs the same
    /// whatever its size. A barrier in it fails (`rank_out_of_range`); the
    /// hub relays none.
    pub fn for_groups(name: String, size: u32) -> Namespace {
        Namespace {
            name,
            size,
            appnum: 0,
            appnum_of_rank: Vec::new(),
            universe_size: size,
            node_of_rank: Vec::new(),
            mapping: String::new(),
            attributes: HashMap::new(),
            kvs: HashMap::new(),
            barriers: Barriers::default(),
            finalized: HashSet::new(),
            rank_conn: HashMap::new(),
            delegated: None,
        }
    }

    /// The connection that speaks for `rank`, if any.
    pub fn conn_of(&self, rank: u32) -> Option<ConnId> {
        self.rank_conn.get(&rank).copied()
    }

    /// `conn` speaks for `rank` from now on; `false` (and nothing kept)
    /// for a rank outside the namespace.
    pub fn set_conn(&mut self, rank: u32, conn: ConnId) -> bool {
        if rank >= self.size {
            return false;
        }
        self.rank_conn.insert(rank, conn);
        true
    }

    /// `conn` went away: `rank` has no connection unless another took over.
    pub fn clear_conn(&mut self, rank: u32, conn: ConnId) {
        if self.rank_conn.get(&rank) == Some(&conn) {
            self.rank_conn.remove(&rank);
        }
    }

    /// The appnum of `rank` (the namespace's when the rank is not known).
    pub fn appnum_of(&self, rank: Option<u32>) -> u32 {
        rank.and_then(|r| self.appnum_of_rank.get(r as usize))
            .copied()
            .unwrap_or(self.appnum)
    }

    /// Set (or replace) a server-answered attribute.
    pub fn set_attribute(&mut self, key: &str, value: &str) -> Result<()> {
        check_pair(&self.name, "attribute", key, value)?;
        self.attributes.insert(key.to_string(), value.to_string());
        Ok(())
    }

    /// Attributes first, then the KVS.
    pub fn get(&self, key: &str) -> Option<&str> {
        if key == PROCESS_MAPPING_KEY && !self.mapping.is_empty() {
            return Some(&self.mapping);
        }
        self.attributes
            .get(key)
            .or_else(|| self.kvs.get(key))
            .map(String::as_str)
    }

    /// A client's put: `PMI_` keys are reserved; the last write wins.
    /// `Err` is the wire `msg=`.
    pub fn put(&mut self, key: &str, value: &str) -> Result<(), &'static str> {
        if key.starts_with(RESERVED_PREFIX) {
            return Err("key_reserved_PMI_prefix");
        }
        if !fits_reply(value) {
            return Err("value_too_long_to_get_back");
        }
        if self.kvs.len() >= max_entries(self.size) && !self.kvs.contains_key(key) {
            return Err("kvs_full");
        }
        self.kvs.insert(key.to_string(), value.to_string());
        Ok(())
    }

    /// A put made elsewhere in the job, as a barrier reports it: stored
    /// as it came (its own server checked it).
    pub fn store(&mut self, key: String, value: String) {
        self.kvs.insert(key, value);
    }

    pub fn mark_finalized(&mut self, rank: u32) {
        if rank < self.size {
            self.finalized.insert(rank);
        }
    }

    pub fn is_finalized(&self, rank: u32) -> bool {
        self.finalized.contains(&rank)
    }
}
