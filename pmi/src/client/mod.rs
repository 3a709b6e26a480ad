//! The rank side of PMI-1.
//!
//! [`Client::init`] reads the environment as MPICH's client does (see
//! [`ClientConfig::from_env`]); [`Client::connect`] takes the settings
//! explicitly. After connecting, the client runs MPICH's start-up sequence
//! (`init`, `get_maxes`, `get_my_kvsname`, `get_appnum`,
//! `get_universe_size`) and caches the answers. Every call is one request
//! and one reply on a blocking stream; a reply of the wrong kind is an error,
//! never a hang. Keys and values are checked against the server's limits
//! before anything is sent. Rivet's group connect (`groups.rs`) adds
//! replies of several lines and events the server sends unasked.

mod config;
mod conn;
mod groups;
mod local;
mod pmi2;
mod pmix;
mod pmix_events;
mod pmix_groups;
mod pmix_side;
mod resources;

use std::fs::File;
use std::net::TcpStream;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use crate::error::{Error, Result};
use crate::server::RESERVED_PREFIX;
use crate::wire::limits::Limits;
use crate::wire::{Message, SpawnRequest};

pub use crate::group::{GroupEvent, GroupEventKind, ProcName};
pub use config::{ClientConfig, Transport};
use conn::{check, Conn};
pub use groups::{GroupConnectReply, GroupConnectRequest, GroupMember};
use local::Local;
use pmi2::Pmi2;
use pmix::Pmix;

/// How this client reaches its process manager.
#[derive(Debug)]
enum Mode {
    Remote(Conn),
    Singleton(Local),
    /// Started by a PMIx server (`pmix.rs`).
    Pmix(Box<Pmix>),
    /// PMI-2 over `PMI_FD`/`PMI_PORT` (`pmi2.rs`, `RIVET_PMI=pmi2`).
    Pmi2(Box<Pmi2>),
}

/// A PMI-1 client (one per process). `Send`, not `Sync`: calls take
/// `&mut self` because the wire is one request at a time.
#[derive(Debug)]
pub struct Client {
    mode: Mode,
    rank: u32,
    size: u32,
    appnum: i32,
    kvs_name: String,
    universe_size: i32,
    spawned: bool,
    limits: Limits,
    server_version: Option<(i32, i32)>,
}

/// Take ownership of the inherited descriptor `fd`.
fn file_from_fd(fd: RawFd) -> Result<File> {
    let bad = |reason: String| Error::Env {
        var: "PMI_FD",
        value: fd.to_string(),
        reason,
    };
    // SAFETY: fcntl(F_GETFD) only reads the descriptor flags; it is safe for
    // any integer and fails with EBADF if `fd` is not open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(bad(format!(
            "descriptor is not open ({}); was the process started by the launcher?",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: as above, on a descriptor known to be open. Close-on-exec keeps
    // the PMI socket out of processes this rank execs.
    unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
    // SAFETY: `fd` is open (checked above) and was handed to this process by
    // its process manager for the PMI client alone; the client becomes its
    // only owner and closes it when dropped.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(File::from(owned))
}

/// The job secret rivetrun gives `PMI_PORT` ranks, sent with `initack`.
fn port_secret() -> Option<String> {
    std::env::var(crate::server::PORT_SECRET_ENV)
        .ok()
        .filter(|s| !s.is_empty())
}

impl Client {
    /// Connect as the environment says (`PMI_FD`, `PMI_PORT`/`PMI_ID`, or
    /// singleton) and run the start-up sequence.
    pub fn init() -> Result<Client> {
        Client::connect(ClientConfig::from_env()?)
    }

    /// Connect with explicit settings and run the start-up sequence.
    pub fn connect(config: ClientConfig) -> Result<Client> {
        let spawned = config.spawned;
        let (pmi2, jobid) = (config.pmi2, config.jobid);
        let (stream, rank, size, pmiid): (Box<dyn conn::Duplex>, u32, u32, Option<i32>) =
            match config.transport {
                Transport::Singleton => return Ok(Client::singleton(spawned)),
                Transport::Pmix => return Client::pmix(spawned),
                Transport::Fd { fd, rank, size } => (Box::new(file_from_fd(fd)?), rank, size, None),
                Transport::Stream { stream, rank, size } => (Box::new(stream), rank, size, None),
                Transport::Port {
                    addr,
                    pmiid,
                    rank,
                    size,
                } => {
                    let tcp = TcpStream::connect(&addr)
                        .map_err(|e| Error::io(format!("connecting to PMI_PORT={addr}"), e))?;
                    // Small request/response lines: do not let Nagle delay them.
                    let _ = tcp.set_nodelay(true);
                    (Box::new(tcp), rank, size, pmiid)
                }
            };
        let mut client = Client {
            mode: Mode::Remote(Conn::new(stream)),
            rank,
            size,
            appnum: 0,
            kvs_name: String::new(),
            universe_size: i32::try_from(size).unwrap_or(i32::MAX),
            spawned,
            limits: Limits::DEFAULT,
            server_version: None,
        };
        if let Some(id) = pmiid {
            client.initack(id)?;
        }
        if pmi2 {
            client.start_pmi2(jobid.as_deref())?;
        } else {
            client.handshake()?;
        }
        Ok(client)
    }

    /// Shorthand for [`Transport::Fd`] (`PMI_FD` mode).
    pub fn from_fd(fd: RawFd, rank: u32, size: u32) -> Result<Client> {
        Client::connect(ClientConfig {
            transport: Transport::Fd { fd, rank, size },
            spawned: false,
            pmi2: false,
            jobid: None,
        })
    }

    fn singleton(spawned: bool) -> Client {
        Client {
            mode: Mode::Singleton(Local::default()),
            rank: 0,
            size: 1,
            appnum: -1,
            kvs_name: format!("singleton_kvs_{}", std::process::id()),
            universe_size: 1,
            spawned,
            limits: Limits::DEFAULT,
            server_version: None,
        }
    }

    fn pmix(spawned: bool) -> Result<Client> {
        let started = Pmix::init()?;
        Ok(Client {
            kvs_name: started.pmix.nspace.clone(),
            mode: Mode::Pmix(Box::new(started.pmix)),
            rank: started.rank,
            size: started.size,
            appnum: started.appnum,
            universe_size: started.universe,
            spawned,
            limits: Limits::DEFAULT,
            server_version: None,
        })
    }

    /// The process manager connection (`None` for a singleton), borrowed
    /// for a watch on it hanging up; nothing may be read from it.
    pub fn connection_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        match &self.mode {
            // SAFETY: the descriptor is open while `self.mode` owns the stream,
            // which outlives the borrow.
            Mode::Remote(c) => Some(unsafe { std::os::fd::BorrowedFd::borrow_raw(c.raw_fd()) }),
            // SAFETY: as above; the PMI-2 stream is owned by `self.mode`.
            Mode::Pmi2(p) => Some(unsafe { std::os::fd::BorrowedFd::borrow_raw(p.raw_fd()) }),
            Mode::Singleton(_) | Mode::Pmix(_) => None,
        }
    }

    fn conn(&mut self) -> Option<&mut Conn> {
        match &mut self.mode {
            Mode::Remote(c) => Some(c),
            Mode::Singleton(_) | Mode::Pmix(_) | Mode::Pmi2(_) => None,
        }
    }

    /// Which bootstrap serves this client: `pmi1`, `pmi2`, `pmix` or `singleton`.
    pub fn kind(&self) -> &'static str {
        match self.mode {
            Mode::Remote(_) => "pmi1",
            Mode::Pmi2(_) => "pmi2",
            Mode::Singleton(_) => "singleton",
            Mode::Pmix(_) => "pmix",
        }
    }

    /// The ranks sharing this node, where the process manager says so
    /// directly (PMIx's local peers); `None`: read `PMI_process_mapping`.
    pub fn local_ranks(&mut self) -> Result<Option<Vec<u32>>> {
        match &self.mode {
            Mode::Pmix(p) => p.local_ranks(),
            _ => Ok(None),
        }
    }

    /// `PMI_PORT` mode: identify with `initack` and read `set` lines.
    fn initack(&mut self, pmiid: i32) -> Result<()> {
        let Some(conn) = self.conn() else {
            return Ok(());
        };
        check(
            conn.request(
                &Message::InitAck {
                    pmiid,
                    secret: port_secret(),
                },
                "initack",
            )?,
            "initack",
        )?;
        let (mut rank, mut size) = (None, None);
        for _ in 0..3 {
            if let Message::Set { key, value } = conn.expect("set")? {
                let n = value.trim().parse::<u32>().ok();
                match key.as_str() {
                    "rank" => rank = n,
                    "size" => size = n,
                    _ => {}
                }
            }
        }
        match (rank, size) {
            (Some(r), Some(s)) if r < s => {
                self.rank = r;
                self.size = s;
                self.universe_size = i32::try_from(s).unwrap_or(i32::MAX);
                Ok(())
            }
            _ => Err(Error::UnexpectedReply {
                expected: "set",
                got: format!("initack set lines without a valid rank and size ({rank:?}/{size:?})"),
            }),
        }
    }

    /// Switch the connection to PMI-2 and run its start-up (`pmi2.rs`).
    fn start_pmi2(&mut self, jobid: Option<&str>) -> Result<()> {
        let placeholder = Mode::Singleton(Local::default());
        let stream = match std::mem::replace(&mut self.mode, placeholder) {
            Mode::Remote(conn) => conn.into_stream(),
            other => {
                self.mode = other;
                return Ok(());
            }
        };
        let (p, started) = Pmi2::start(stream, self.rank, jobid)?;
        self.mode = Mode::Pmi2(Box::new(p));
        self.rank = started.rank;
        self.size = started.size;
        self.appnum = started.appnum;
        self.kvs_name = started.jobid;
        self.universe_size = started.universe_size;
        self.server_version = Some((2, 0));
        Ok(())
    }

    /// MPICH's start-up sequence.
    fn handshake(&mut self) -> Result<()> {
        let Some(conn) = self.conn() else {
            return Ok(());
        };
        let init = Message::Init {
            version: 1,
            subversion: 1,
        };
        let version = match check(conn.request(&init, "response_to_init")?, "init")? {
            Message::InitResponse {
                version,
                subversion,
                ..
            } if version == 1 && (1..=2).contains(&subversion) => (version, subversion),
            Message::InitResponse {
                version,
                subversion,
                ..
            } => {
                return Err(Error::VersionMismatch {
                    version,
                    subversion,
                })
            }
            _ => unreachable_reply("response_to_init")?,
        };
        let limits = match check(conn.request(&Message::GetMaxes, "maxes")?, "get_maxes")? {
            Message::Maxes {
                kvsname_max,
                keylen_max,
                vallen_max,
                ..
            } => Limits {
                kvsname_max: kvsname_max as usize,
                keylen_max: keylen_max as usize,
                vallen_max: vallen_max as usize,
            }
            .clamp_to_codec(),
            _ => unreachable_reply("maxes")?,
        };
        let kvs_name = match check(
            conn.request(&Message::GetMyKvsname, "my_kvsname")?,
            "get_my_kvsname",
        )? {
            Message::MyKvsname { kvsname, .. } => kvsname,
            _ => unreachable_reply("my_kvsname")?,
        };
        let appnum = match check(conn.request(&Message::GetAppnum, "appnum")?, "get_appnum")? {
            Message::Appnum { appnum, .. } => appnum,
            _ => unreachable_reply("appnum")?,
        };
        let universe = Message::GetUniverseSize;
        let universe_size = match check(
            conn.request(&universe, "universe_size")?,
            "get_universe_size",
        )? {
            Message::UniverseSize { size, .. } => size,
            _ => unreachable_reply("universe_size")?,
        };
        self.server_version = Some(version);
        self.limits = limits;
        self.kvs_name = kvs_name;
        self.appnum = appnum;
        self.universe_size = universe_size;
        Ok(())
    }

    // ------------------------------------------------------------ getters

    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// Which command of an `mpiexec`/spawn this process belongs to
    /// (-1 for a singleton, as MPICH reports).
    pub fn appnum(&self) -> i32 {
        self.appnum
    }

    /// This job's KVS name.
    pub fn kvs_name(&self) -> &str {
        &self.kvs_name
    }

    /// How many processes the job may grow to (-1: unknown/unlimited, as Hydra says).
    pub fn universe_size(&self) -> i32 {
        self.universe_size
    }

    pub fn is_singleton(&self) -> bool {
        matches!(self.mode, Mode::Singleton(_))
    }

    /// Started by a spawn (`PMI_SPAWNED`); the parent's port is then in the
    /// KVS under `PARENT_ROOT_PORT_NAME`.
    pub fn spawned(&self) -> bool {
        self.spawned
    }

    /// Key/value/kvsname limits (the server's, capped to this codec's).
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// `(version, subversion)` the server reported; `None` for a singleton.
    pub fn server_version(&self) -> Option<(i32, i32)> {
        self.server_version
    }

    // ------------------------------------------------------------ KVS

    fn check_key(&self, key: &str) -> Result<()> {
        if key.is_empty() {
            return Err(Error::Malformed {
                reason: "empty PMI key".to_string(),
            });
        }
        if key.len() > self.limits.keylen_max {
            return Err(Error::TooLong {
                what: "key",
                len: key.len(),
                max: self.limits.keylen_max,
            });
        }
        Ok(())
    }

    /// Put `key=value` into this job's KVS. Visible to others after a
    /// [`Client::barrier`]. Keys starting with `PMI_` are reserved.
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        self.check_key(key)?;
        if key.starts_with(RESERVED_PREFIX) {
            return Err(Error::ReservedKey {
                key: key.to_string(),
            });
        }
        if value.len() > self.limits.vallen_max {
            return Err(Error::TooLong {
                what: "value",
                len: value.len(),
                max: self.limits.vallen_max,
            });
        }
        let msg = Message::Put {
            kvsname: self.kvs_name.clone(),
            key: key.to_string(),
            value: value.to_string(),
        };
        // Catches values that cannot be encoded or do not fit one line.
        msg.encode()?;
        match &mut self.mode {
            Mode::Singleton(local) => {
                local.put(key, value);
                Ok(())
            }
            Mode::Remote(conn) => check(conn.request(&msg, "put_result")?, "put").map(|_| ()),
            Mode::Pmix(p) => {
                p.put(key, value);
                Ok(())
            }
            Mode::Pmi2(p) => p.put(key, value),
        }
    }

    /// Kept for the PMI API: puts are sent at once on the PMI-1 wire.
    pub fn commit(&mut self) -> Result<()> {
        Ok(())
    }

    /// Get `key` from this job's KVS (or a job attribute such as
    /// `PMI_process_mapping`). A miss is [`Error::KeyNotFound`].
    pub fn get(&mut self, key: &str) -> Result<String> {
        let kvs = self.kvs_name.clone();
        self.get_from(&kvs, key)
    }

    /// Get `key` from the KVS named `kvsname` (e.g. another job's).
    pub fn get_from(&mut self, kvsname: &str, key: &str) -> Result<String> {
        self.check_key(key)?;
        if kvsname.len() > self.limits.kvsname_max {
            return Err(Error::TooLong {
                what: "kvsname",
                len: kvsname.len(),
                max: self.limits.kvsname_max,
            });
        }
        let not_found = || Error::KeyNotFound {
            key: key.to_string(),
        };
        let own = kvsname == self.kvs_name;
        let size = self.size;
        match &mut self.mode {
            Mode::Singleton(local) if own => local.get(key),
            Mode::Singleton(_) => Err(not_found()),
            // Job attributes (PMI_ keys) have no PMIx twin here, but for
            // the cluster id (`PMIX_CLUSTER_ID`).
            Mode::Pmix(p) if own && !key.starts_with(RESERVED_PREFIX) => {
                p.get(key, size)?.ok_or_else(not_found)
            }
            Mode::Pmix(p) if own && key == crate::group::KEY_CLUSTER => {
                p.cluster()?.ok_or_else(not_found)
            }
            Mode::Pmix(_) => Err(not_found()),
            // Job attributes are PMI-2's info-getjobattr (Slurm's KVS has none).
            Mode::Pmi2(p) if own && key.starts_with(RESERVED_PREFIX) => {
                p.job_attr(key)?.ok_or_else(not_found)
            }
            Mode::Pmi2(p) => p.get(kvsname, key)?.ok_or_else(not_found),
            Mode::Remote(conn) => {
                let msg = Message::Get {
                    kvsname: Some(kvsname.to_string()),
                    key: key.to_string(),
                };
                match conn.request(&msg, "get_result")? {
                    Message::GetResult {
                        rc: 0,
                        value: Some(v),
                        ..
                    } => Ok(v),
                    Message::GetResult { rc: 0, .. } => Err(not_found()),
                    // A failing get is a miss unless the server says otherwise
                    // (Hydra: `msg=key_..._not_found`, or no msg at all).
                    Message::GetResult { rc, msg, .. } => match msg {
                        None => Err(not_found()),
                        Some(m) if m.contains("not_found") || m.contains("not found") => {
                            Err(not_found())
                        }
                        Some(m) => Err(Error::Server {
                            cmd: "get".to_string(),
                            rc,
                            msg: Some(m),
                        }),
                    },
                    _ => unreachable_reply("get_result"),
                }
            }
        }
    }

    /// A job attribute answered by the process manager (`PMI_` keys, e.g.
    /// `PMI_process_mapping`; the prefix is added when missing). `None`
    /// when the process manager does not provide it.
    pub fn job_attribute(&mut self, key: &str) -> Result<Option<String>> {
        let full = if key.starts_with(RESERVED_PREFIX) {
            key.to_string()
        } else {
            format!("{RESERVED_PREFIX}{key}")
        };
        match self.get(&full) {
            Ok(v) => Ok(Some(v)),
            Err(Error::KeyNotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Wait until every rank of the job has called `barrier`; puts made
    /// before it are then visible to all. A no-op for a singleton.
    pub fn barrier(&mut self) -> Result<()> {
        match &mut self.mode {
            Mode::Singleton(_) => Ok(()),
            Mode::Remote(conn) => {
                let reply = conn.request(&Message::BarrierIn { group: None }, "barrier_out")?;
                check(reply, "barrier_in").map(|_| ())
            }
            Mode::Pmix(p) => p.barrier(),
            Mode::Pmi2(p) => p.fence(),
        }
    }

    /// Ask the process manager to tear the job down with `exit_code`.
    ///
    /// Sends `cmd=abort exitcode=N [message=...]` and returns without
    /// waiting: there is no reply. The caller must then exit the process
    /// (e.g. `std::process::exit(exit_code)`). The message is escaped;
    /// if it does not fit one line it is left out, as MPICH 4.0.2 always
    /// does.
    pub fn abort(&mut self, exit_code: i32, message: &str) -> Result<()> {
        if let Mode::Pmix(p) = &self.mode {
            p.abort(exit_code, message);
            return Ok(());
        }
        if let Mode::Pmi2(p) = &mut self.mode {
            return p.abort(exit_code, message);
        }
        let Some(conn) = self.conn() else {
            return Ok(());
        };
        let with = Message::Abort {
            exitcode: exit_code,
            message: Some(message.to_string()).filter(|m| !m.is_empty()),
        };
        let msg = if with.encode().is_ok() {
            with
        } else {
            Message::Abort {
                exitcode: exit_code,
                message: None,
            }
        };
        conn.send(&msg)
    }

    /// Tell the process manager this rank is done with PMI and wait for the
    /// acknowledgement. Consumes the client.
    pub fn finalize(mut self) -> Result<()> {
        if let Mode::Pmix(mut p) = self.mode {
            let side = p.side.finalize();
            return (*p).finalize().and(side);
        }
        if let Mode::Pmi2(p) = &mut self.mode {
            return p.finalize();
        }
        match self.conn() {
            None => Ok(()),
            Some(conn) => check(
                conn.request(&Message::Finalize, "finalize_ack")?,
                "finalize",
            )
            .map(|_| ()),
        }
    }

    // ------------------------------------------------------------ names

    /// Publish `service` at `port` (server-wide; a taken name is an error).
    pub fn publish_name(&mut self, service: &str, port: &str) -> Result<()> {
        match &mut self.mode {
            Mode::Singleton(local) => local.publish(service, port),
            Mode::Pmix(p) => p.publish(service, port),
            Mode::Pmi2(p) => p.publish(service, port),
            Mode::Remote(conn) => {
                let msg = Message::PublishName {
                    service: service.to_string(),
                    port: port.to_string(),
                };
                check(conn.request(&msg, "publish_result")?, "publish_name").map(|_| ())
            }
        }
    }

    /// The port `service` was published at.
    pub fn lookup_name(&mut self, service: &str) -> Result<String> {
        match &mut self.mode {
            Mode::Singleton(local) => local.lookup(service),
            Mode::Pmix(p) => p.lookup(service),
            Mode::Pmi2(p) => p.lookup(service),
            Mode::Remote(conn) => {
                let msg = Message::LookupName {
                    service: service.to_string(),
                };
                match check(conn.request(&msg, "lookup_result")?, "lookup_name")? {
                    Message::LookupResult { port: Some(p), .. } => Ok(p),
                    _ => Err(Error::UnexpectedReply {
                        expected: "lookup_result",
                        got: "a successful lookup_result without port=".to_string(),
                    }),
                }
            }
        }
    }

    /// Withdraw `service`.
    pub fn unpublish_name(&mut self, service: &str) -> Result<()> {
        match &mut self.mode {
            Mode::Singleton(local) => local.unpublish(service),
            Mode::Pmix(p) => p.unpublish(service),
            Mode::Pmi2(p) => p.unpublish(service),
            Mode::Remote(conn) => {
                let msg = Message::UnpublishName {
                    service: service.to_string(),
                };
                check(conn.request(&msg, "unpublish_result")?, "unpublish_name").map(|_| ())
            }
        }
    }

    // ------------------------------------------------------------ spawn

    /// Start new processes; returns one error code per process (0 = started;
    /// all zeros when the server does not report codes, as Hydra does not).
    ///
    /// A spawn the process manager refuses or cannot carry out (`rc≠0`) is
    /// [`Error::SpawnFailed`], with one code per process and the server's
    /// message.
    pub fn spawn(&mut self, request: &SpawnRequest) -> Result<Vec<i32>> {
        if let Mode::Pmix(_) = self.mode {
            return Err(Error::PmixUnsupported { op: "spawn" });
        }
        if let Mode::Pmi2(_) = self.mode {
            return Err(Error::Pmi2Unsupported { op: "spawn" });
        }
        let Some(conn) = self.conn() else {
            return Err(Error::NoProcessManager { op: "spawn" });
        };
        let total = request.total_procs();
        let reply = conn.request(&Message::Spawn(request.clone()), "spawn_result")?;
        if let Message::SpawnResult { rc, errcodes, msg } = &reply {
            if *rc != 0 {
                let errcodes = if errcodes.len() as u64 == total {
                    errcodes.clone()
                } else {
                    vec![*rc; usize::try_from(total).unwrap_or(0)]
                };
                return Err(Error::SpawnFailed {
                    errcodes,
                    message: msg
                        .clone()
                        .unwrap_or_else(|| format!("the process manager answered rc={rc}")),
                });
            }
        }
        match check(reply, "spawn")? {
            Message::SpawnResult { errcodes, .. } if errcodes.is_empty() => {
                Ok(vec![0; usize::try_from(total).unwrap_or(0)])
            }
            Message::SpawnResult { errcodes, .. } if errcodes.len() as u64 == total => Ok(errcodes),
            Message::SpawnResult { errcodes, .. } => Err(Error::UnexpectedReply {
                expected: "spawn_result",
                got: format!("{} error codes for {total} processes", errcodes.len()),
            }),
            _ => unreachable_reply("spawn_result"),
        }
    }
}

/// `Conn::expect` already checked the command; this covers the type system.
fn unreachable_reply<T>(expected: &'static str) -> Result<T> {
    Err(Error::UnexpectedReply {
        expected,
        got: "a different message".to_string(),
    })
}

#[cfg(test)]
mod group_tests;
#[cfg(test)]
mod tests;
