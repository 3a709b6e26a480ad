//! PMIx collectives over some of the job's ranks on several hosts: a
//! fence over a subset (`PMIx_Fence` naming procs), group construct and
//! destruct, and connect and disconnect (`PMIx_Connect`, which Open MPI's
//! spawn and connect/accept end with). Processes of a namespace a proxy
//! spawned count as that proxy's node's (all its processes are there). The node's server has gathered its own participants; the
//! proxy sends rivetrun the node's part, `coll KEY NODES DATA`: a key every
//! participating node derives alike, the nodes taking part (from the
//! job's process map) and the node's blob. rivetrun gathers every listed
//! node's part (`remote/pmix.rs`) and answers each of them `coll_out KEY
//! STATUS CONTEXT NODE DATA ...`: every node's blob, in node order, and a
//! number unique in the job, a group's context id. A whole-job fence still
//! rides the proxy tree's barrier (`pmix.rs`): only some hosts take part in
//! a subset, so its parts go straight to rivetrun, as direct modex does.
//!
//! Keys: a fence's (a connect's) is its processes (sorted) and how many
//! fences (connects) over the same processes this node ran before; a
//! group's its operation, name and count. PMIx has every participant call collectives over the same
//! processes in the same order, so every node derives the same keys.
//!
//! A collective naming one of the job's spawned namespaces (`<job>_s<N>`)
//! that this proxy has not yet heard of waits for rivetrun's
//! `pmix_spawned`: the spawning proxy's children may reach their server and
//! connect before the news reaches this proxy. It waits up to
//! [`SPAWN_NEWS_WAIT`], then fails with `PMIX_ERR_TIMEOUT` and a message.
//!
//! Refused at once, with a message: processes of another namespace (a
//! proxy serves only the job's and those spawned from it), ranks past the
//! job, a group with optional members over several hosts (nodes whose
//! members never join would be waited for; the node also sends rivetrun a
//! failed part, `coll KEY NODES DATA STATUS`, which fails the collective on
//! the other nodes at once), a destruct of a group this node never
//! constructed. A participating host whose proxy ended, or rivetrun's link
//! lost, fails the collective (`PMIX_ERR_UNREACH`); nothing waits for ever.
//!
//! A fence given `PMIX_TIMEOUT` (which OpenPMIx 4.2.2 stops timing once
//! the node's clients are in) is timed here from when its part goes to
//! rivetrun; if rivetrun has not answered by then the node sends
//! `coll_late KEY`, and rivetrun, unless every part was in first, fails it
//! with `PMIX_ERR_TIMEOUT` for the nodes in and for each late part as it
//! comes (`remote/pmix.rs`): every host's fence ends alike. The key's
//! count keeps a later fence over the same processes apart from it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rivet_pmi::pmix_ffi::{
    PMIX_ERR_BAD_PARAM, PMIX_ERR_NOT_SUPPORTED, PMIX_ERR_TIMEOUT, PMIX_ERR_UNREACH,
    PMIX_RANK_WILDCARD, PMIX_SUCCESS,
};

use super::upstream::Upstream;
use crate::pmix_host::node::FenceCall;
use crate::pmix_host::{ConnectCall, GroupCall};
use crate::remote::commands as cmd;
use crate::remote::wire;

/// `0,1,...`: the nodes taking part, as `coll` lists them.
fn nodes_word(nodes: &[u32]) -> String {
    (nodes.iter().map(u32::to_string))
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether `ns` is named as the job's spawns are: `<job>_h<P>_s<N>` by
/// proxy P (`proxy/spawn.rs`), `<job>_s<N>` by rivetrun.
fn one_of_the_jobs_spawns(job: &str, ns: &str) -> bool {
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let Some(rest) = ns.strip_prefix(job).and_then(|r| r.strip_prefix('_')) else {
        return false;
    };
    let rest = match rest.strip_prefix('h').and_then(|r| r.split_once('_')) {
        Some((p, r)) if number(p) => r,
        _ => rest,
    };
    rest.strip_prefix('s').is_some_and(number)
}

/// `procs` as every node words them: `NS:RANK` (`NS:*`), sorted, once each.
fn key_of(procs: &[(String, u32)]) -> String {
    let mut words: Vec<String> = (procs.iter())
        .map(|(ns, r)| match *r {
            PMIX_RANK_WILDCARD => format!("{ns}:*"),
            r => format!("{ns}:{r}"),
        })
        .collect();
    words.sort();
    words.dedup();
    words.join(",")
}

/// rivetrun's answer to one collective: `coll_out KEY STATUS CONTEXT
/// (NODE DATA)...`.
#[derive(Debug, PartialEq, Eq)]
pub struct Done {
    pub key: String,
    pub status: i32,
    pub context: u64,
    /// Each participating node's blob, in node order.
    pub blobs: Vec<(u32, Vec<u8>)>,
}

impl Done {
    /// Parse `coll_out` (None if malformed).
    pub fn parse(words: &[Vec<u8>]) -> Option<Done> {
        if words.first()? != cmd::COLL_OUT.as_bytes() {
            return None;
        }
        let text = |i: usize| words.get(i).map(|w| wire::text(w));
        let rest = words.get(4..)?;
        if rest.len() % 2 != 0 {
            return None;
        }
        let blobs = rest
            .chunks_exact(2)
            .map(|p| Some((wire::text(&p[0]).parse().ok()?, p[1].clone())))
            .collect::<Option<Vec<_>>>()?;
        Some(Done {
            key: text(1)?,
            status: text(2)?.parse().ok()?,
            context: text(3)?.parse().ok()?,
            blobs,
        })
    }
}

/// How long a collective naming a spawned namespace this proxy has not
/// heard of waits for `pmix_spawned` (the news follows the spawn's start
/// by one message through rivetrun; this bounds a namespace that never
/// comes).
pub const SPAWN_NEWS_WAIT: Duration = Duration::from_secs(30);

/// Why a collective's processes have no nodes (yet).
enum Unplaced {
    /// A spawned namespace of the job not announced yet: wait for it.
    NotYet(String),
    Refused(String),
}

/// A collective waiting for `pmix_spawned` of namespace `ns`.
struct Parked {
    since: Instant,
    ns: String,
    call: Waiting,
}

/// What a collective completes once rivetrun answers.
enum Waiting {
    Fence(FenceCall),
    Group(GroupCall),
    Connect(ConnectCall),
}

impl Waiting {
    fn fail(self, status: i32) {
        match self {
            Waiting::Fence(call) => call.finish(status, Vec::new()),
            Waiting::Group(call) => call.finish(status, None),
            Waiting::Connect(call) => call.finish(status),
        }
    }
}

/// The node's collectives over subsets.
pub struct Subsets {
    node: u32,
    kvsname: String,
    /// The node of each rank of the job.
    node_of_rank: Vec<u32>,
    /// Collectives run so far, by what they were over (for keys).
    seen: HashMap<String, u64>,
    /// Sent to rivetrun, waiting for its `coll_out`, by key.
    pending: HashMap<String, Waiting>,
    /// Pending fences given `PMIX_TIMEOUT`: when to send `coll_late`.
    deadlines: HashMap<String, Instant>,
    /// Groups constructed here and not destructed: their processes.
    groups: HashMap<String, Vec<(String, u32)>>,
    /// Namespaces a proxy spawned (all on its node): that node.
    spawned_at: HashMap<String, u32>,
    /// Collectives waiting for a namespace's `pmix_spawned`, oldest first.
    parked: Vec<Parked>,
}

impl Subsets {
    pub fn new(node: u32, kvsname: &str, node_of_rank: Vec<u32>) -> Subsets {
        Subsets {
            node,
            kvsname: kvsname.to_string(),
            node_of_rank,
            seen: HashMap::new(),
            pending: HashMap::new(),
            deadlines: HashMap::new(),
            groups: HashMap::new(),
            spawned_at: HashMap::new(),
            parked: Vec::new(),
        }
    }

    /// Namespace `ns` was spawned by node `node`'s proxy: its processes
    /// are all there. Collectives that waited for it go on, in order.
    pub fn spawned(&mut self, ns: &str, node: u32, rivetrun: &Upstream) {
        self.spawned_at.insert(ns.to_string(), node);
        let (ready, still): (Vec<Parked>, Vec<Parked>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| p.ns == ns);
        self.parked = still;
        for p in ready {
            // Parked again if it names another namespace not heard of yet.
            match p.call {
                Waiting::Fence(call) => self.fence(call, rivetrun),
                Waiting::Group(call) => self.group(call, rivetrun),
                Waiting::Connect(call) => self.connect(call, rivetrun),
            }
        }
    }

    /// When the oldest parked collective's wait ends, or a timed fence's
    /// time passes, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        let parked = self.parked.iter().map(|p| p.since + SPAWN_NEWS_WAIT);
        parked.chain(self.deadlines.values().copied()).min()
    }

    /// Fail the parked collectives whose wait ended by `now`; ask rivetrun
    /// to fail the fences whose time passed (`coll_late KEY`, once each).
    pub fn expire(&mut self, now: Instant, rivetrun: &Upstream) {
        let late: Vec<String> = (self.deadlines.iter())
            .filter(|(_, &d)| now >= d)
            .map(|(k, _)| k.clone())
            .collect();
        for key in late {
            self.deadlines.remove(&key);
            let words = [cmd::COLL_LATE.to_string(), key.clone()];
            if rivetrun.send(&words).is_err() {
                if let Some(w) = self.pending.remove(&key) {
                    w.fail(PMIX_ERR_UNREACH);
                }
            }
        }
        let (over, still): (Vec<Parked>, Vec<Parked>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| now >= p.since + SPAWN_NEWS_WAIT);
        self.parked = still;
        for p in over {
            eprintln!(
                "rivetrun: proxy {}: a PMIx collective named namespace {}, which looks like \
                 one of job {}'s spawns, but no proxy announced it within {} s: failed \
                 (PMIX_ERR_TIMEOUT)",
                self.node,
                p.ns,
                self.kvsname,
                SPAWN_NEWS_WAIT.as_secs()
            );
            p.call.fail(PMIX_ERR_TIMEOUT);
        }
    }

    /// Wait for `pmix_spawned` of `ns` before running `call`.
    fn park(&mut self, ns: String, call: Waiting) {
        self.parked.push(Parked {
            since: Instant::now(),
            ns,
            call,
        });
    }

    /// The nodes of `procs` (sorted), or why they cannot take part (yet).
    fn nodes_of(&self, procs: &[(String, u32)]) -> Result<Vec<u32>, Unplaced> {
        let mut nodes = Vec::new();
        for (ns, rank) in procs {
            if *ns != self.kvsname {
                match self.spawned_at.get(ns) {
                    Some(&n) => nodes.push(n),
                    None if one_of_the_jobs_spawns(&self.kvsname, ns) => {
                        return Err(Unplaced::NotYet(ns.clone()))
                    }
                    None => {
                        return Err(Unplaced::Refused(format!(
                            "processes of namespace {ns}: a proxy serves only the job's ({}) \
                             and those its ranks spawned",
                            self.kvsname
                        )))
                    }
                }
            } else if *rank == PMIX_RANK_WILDCARD {
                nodes.extend(self.node_of_rank.iter().copied());
            } else {
                match self.node_of_rank.get(*rank as usize) {
                    Some(&n) => nodes.push(n),
                    None => {
                        return Err(Unplaced::Refused(format!("rank {rank} is not in the job")))
                    }
                }
            }
        }
        nodes.sort_unstable();
        nodes.dedup();
        if nodes.is_empty() {
            return Err(Unplaced::Refused("no processes named".into()));
        }
        Ok(nodes)
    }

    /// The key of the next collective over `what`.
    fn key(&mut self, what: String) -> String {
        let count = self.seen.entry(what.clone()).or_insert(0);
        *count += 1;
        format!("{what}#{count}")
    }

    fn refuse(&self, what: &str, why: &str) {
        eprintln!(
            "rivetrun: proxy {}: {what} is not supported under multi-host proxies: {why}",
            self.node
        );
    }

    /// A fence over `call.procs`, some ranks of several hosts.
    pub fn fence(&mut self, call: FenceCall, rivetrun: &Upstream) {
        let nodes = match self.nodes_of(&call.procs) {
            Ok(n) => n,
            Err(Unplaced::NotYet(ns)) => return self.park(ns, Waiting::Fence(call)),
            Err(Unplaced::Refused(why)) => {
                self.refuse("a PMIx fence over these processes", &why);
                return call.finish(PMIX_ERR_NOT_SUPPORTED, Vec::new());
            }
        };
        let key = self.key(format!("fence/{}", key_of(&call.procs)));
        let data = call.data.clone();
        let deadline = call.timeout.and_then(|t| Instant::now().checked_add(t));
        self.send(key.clone(), &nodes, data, Waiting::Fence(call), rivetrun);
        if let (Some(d), true) = (deadline, self.pending.contains_key(&key)) {
            self.deadlines.insert(key, d);
        }
    }

    /// A connect or disconnect (`PMIx_Connect`: Open MPI's spawn and
    /// connect/accept), over processes of several namespaces.
    pub fn connect(&mut self, call: ConnectCall, rivetrun: &Upstream) {
        let op = if call.connect {
            "connect"
        } else {
            "disconnect"
        };
        let nodes = match self.nodes_of(&call.procs) {
            Ok(n) => n,
            Err(Unplaced::NotYet(ns)) => return self.park(ns, Waiting::Connect(call)),
            Err(Unplaced::Refused(why)) => {
                self.refuse(&format!("a PMIx {op} over these processes"), &why);
                return call.finish(PMIX_ERR_NOT_SUPPORTED);
            }
        };
        let key = self.key(format!("{op}/{}", key_of(&call.procs)));
        if let Some(status) = call.refusal {
            // Refused by this node's upcall: the others fail too.
            return refuse_for_all(key, &nodes, status, rivetrun);
        }
        self.send(key, &nodes, Vec::new(), Waiting::Connect(call), rivetrun);
    }

    /// A group construct or destruct.
    pub fn group(&mut self, call: GroupCall, rivetrun: &Upstream) {
        let procs = if call.procs.is_empty() && !call.construct {
            match self.groups.get(&call.name) {
                Some(p) => p.clone(),
                None => {
                    let why = format!("group {} was not constructed here", call.name);
                    self.refuse("a PMIx group destruct", &why);
                    return call.finish(PMIX_ERR_BAD_PARAM, None);
                }
            }
        } else {
            call.procs.clone()
        };
        let nodes = match self.nodes_of(&procs) {
            Ok(n) => n,
            Err(Unplaced::NotYet(ns)) => return self.park(ns, Waiting::Group(call)),
            Err(Unplaced::Refused(why)) => {
                self.refuse("a PMIx group over these processes", &why);
                return call.finish(PMIX_ERR_NOT_SUPPORTED, None);
            }
        };
        let op = if call.construct {
            "construct"
        } else {
            "destruct"
        };
        let key = self.key(format!("group/{op}/{}", call.name));
        if let Some(status) = call.refusal {
            // Refused by this node's upcall: the others fail too.
            return refuse_for_all(key, &nodes, status, rivetrun);
        }
        if call.optional && nodes.len() > 1 {
            let why = "optional members (PMIX_GROUP_OPTIONAL) on several hosts";
            self.refuse("a PMIx group", why);
            refuse_for_all(key, &nodes, PMIX_ERR_NOT_SUPPORTED, rivetrun);
            return call.finish(PMIX_ERR_NOT_SUPPORTED, None);
        }
        self.send(key, &nodes, Vec::new(), Waiting::Group(call), rivetrun);
    }

    fn send(
        &mut self,
        key: String,
        nodes: &[u32],
        data: Vec<u8>,
        waiting: Waiting,
        rivetrun: &Upstream,
    ) {
        let words = [
            cmd::COLL.as_bytes().to_vec(),
            key.clone().into_bytes(),
            nodes_word(nodes).into_bytes(),
            data,
        ];
        match rivetrun.send(&words) {
            Ok(()) => {
                self.pending.insert(key, waiting);
            }
            Err(_) => waiting.fail(PMIX_ERR_UNREACH),
        }
    }

    /// rivetrun's answer: complete the collective it names.
    pub fn done(&mut self, done: Done) {
        self.deadlines.remove(&done.key);
        let Some(waiting) = self.pending.remove(&done.key) else {
            return;
        };
        match waiting {
            Waiting::Fence(call) if done.status == PMIX_SUCCESS => call.finish(
                PMIX_SUCCESS,
                done.blobs.into_iter().flat_map(|(_, b)| b).collect(),
            ),
            Waiting::Group(call) if done.status == PMIX_SUCCESS => {
                if call.construct {
                    self.groups.insert(call.name.clone(), call.procs.clone());
                } else {
                    self.groups.remove(&call.name);
                }
                call.finish(PMIX_SUCCESS, Some(done.context));
            }
            Waiting::Connect(call) => call.finish(done.status),
            w => w.fail(done.status),
        }
    }

    /// rivetrun's link is gone: every collective under way, or waiting
    /// for news that can no longer come, fails.
    pub fn lost(&mut self) {
        self.deadlines.clear();
        for (_, w) in self.pending.drain() {
            w.fail(PMIX_ERR_UNREACH);
        }
        for p in self.parked.drain(..) {
            p.call.fail(PMIX_ERR_UNREACH);
        }
    }

    /// Whether collectives wait for rivetrun.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.pending.len()
    }

    /// Whether collectives wait for `pmix_spawned`.
    #[cfg(test)]
    pub fn parked(&self) -> usize {
        self.parked.len()
    }
}

/// This node's part of collective `key`, refused with `status`: rivetrun
/// fails it for every listed node, so the other hosts' members do not wait
/// for ours.
fn refuse_for_all(key: String, nodes: &[u32], status: i32, rivetrun: &Upstream) {
    let words = [
        cmd::COLL.as_bytes().to_vec(),
        key.into_bytes(),
        nodes_word(nodes).into_bytes(),
        Vec::new(),
        status.to_string().into_bytes(),
    ];
    let _ = rivetrun.send(&words);
}

#[cfg(test)]
#[path = "pmix_subset_tests.rs"]
mod tests;
