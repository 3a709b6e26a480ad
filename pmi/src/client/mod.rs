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
mod kvs;
mod local;
mod names;
mod pmi2;
mod pmix;
mod pmix_events;
mod pmix_groups;
mod pmix_side;
mod pmix_spawn;
mod resources;
mod startup;

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

impl Client {
    /// Connect as the environment says (`PMI_FD`, `PMI_PORT`/`PMI_ID`, or
    /// singleton) and run the start-up sequence.
    pub fn init() -> Result<Client> {
        Client::connect(ClientConfig::from_env()?)
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

    // ------------------------------------------------------------ spawn

    /// Start new processes; returns one error code per process (0 = started;
    /// all zeros when the server does not report codes, as Hydra does not).
    ///
    /// A spawn the process manager refuses or cannot carry out (`rc≠0`) is
    /// [`Error::SpawnFailed`], with one code per process and the server's
    /// message.
    pub fn spawn(&mut self, request: &SpawnRequest) -> Result<Vec<i32>> {
        self.spawn_job(request).map(|(codes, _job)| codes)
    }

    /// As [`Client::spawn`], with the new job's id where the process
    /// manager says it: PMIx's namespace, PMI-2's `jobid`; PMI-1's
    /// `spawn_result` carries none.
    pub fn spawn_job(&mut self, request: &SpawnRequest) -> Result<(Vec<i32>, Option<String>)> {
        if let Mode::Pmix(p) = &self.mode {
            return p
                .spawn(request)
                .map(|(codes, nspace)| (codes, Some(nspace)));
        }
        if let Mode::Pmi2(p) = &mut self.mode {
            return p.spawn(request);
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
                Ok((vec![0; usize::try_from(total).unwrap_or(0)], None))
            }
            Message::SpawnResult { errcodes, .. } if errcodes.len() as u64 == total => {
                Ok((errcodes, None))
            }
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
