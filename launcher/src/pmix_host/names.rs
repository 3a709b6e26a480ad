//! The PMIx server's name service: the host module's `publish`, `lookup`
//! and `unpublish` upcalls, behind Open MPI's `MPI_Publish_name`,
//! `MPI_Lookup_name` and `MPI_Unpublish_name`.
//!
//! They are served from the table PMI-1 ranks use: the job's own
//! (`rivet_pmi::server::NameService`, through the `Server`), where only the
//! publisher may unpublish, or the `--nameserver` the job was given, so
//! that a name an Open MPI rank publishes is found by a Rivet or MPICH rank
//! of another job sharing that name server.
//!
//! An upcall (`name_upcalls.rs`) runs on the library's thread: it copies
//! what it was given into a [`NameCall`] and hands it to the supervisor, which answers from
//! the job's table at once, or gives it to a thread of its own that asks the
//! name server and calls the library back from there (the library accepts
//! callbacks from any thread).
//!
//! A lookup answers "not found" at once unless the caller asks to wait
//! (`PMIX_WAIT`, with an optional `PMIX_TIMEOUT`); Open MPI 4.1's
//! `MPI_Lookup_name` does not ask. A waiting lookup is tried again every
//! [`RETRY`] until it is answered or its time is up.

use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

use rivet_pmi::pmix_ffi::{
    PMIX_ERROR, PMIX_ERR_DUPLICATE_KEY, PMIX_ERR_NOT_FOUND, PMIX_ERR_NOT_SUPPORTED,
    PMIX_ERR_NO_PERMISSIONS, PMIX_ERR_OUT_OF_RESOURCE, PMIX_ERR_PARTIAL_SUCCESS, PMIX_ERR_UNREACH,
    PMIX_SUCCESS,
};
use rivet_pmi::server::{NameRequest, NsId, Server};
use rivet_pmi::wire::Message;

use super::name_upcalls::Callback;
use super::values::Stored;

/// How often a lookup that waits is tried again.
pub const RETRY: Duration = Duration::from_millis(100);

/// What a rank asked of the name service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameOp {
    /// Service → port, for each entry.
    Publish(Vec<(String, String)>),
    Lookup {
        keys: Vec<String>,
        wait: Option<Wait>,
    },
    /// `None`: everything this rank published.
    Unpublish(Option<Vec<String>>),
}

/// A lookup that waits until `count` keys are found (0: all of them), or
/// until `until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    pub count: usize,
    pub until: Option<Instant>,
}

/// One name call of rank `rank` of `nspace`, answered (once) by
/// [`NameCall::finish`].
pub struct NameCall {
    pub nspace: String,
    pub rank: u32,
    pub op: NameOp,
    pub(super) callback: Callback,
    pub(super) cbdata: *mut c_void,
}

// SAFETY: `cbdata` is the library's own token for this call, which it lets
// the host hand back from any thread; nothing here dereferences it.
unsafe impl Send for NameCall {}

impl std::fmt::Debug for NameCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NameCall {{ {}:{}, op: {:?} }}",
            self.nspace, self.rank, self.op
        )
    }
}

/// A name found by a lookup: key, port, and who published it if known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub key: String,
    pub port: String,
    pub publisher: Option<(String, u32)>,
}

/// The answer to a [`NameCall`]: a PMIx status and, for a lookup, what
/// was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: c_int,
    pub found: Vec<Found>,
}

impl Answer {
    fn status(status: c_int) -> Answer {
        Answer {
            status,
            found: Vec::new(),
        }
    }
}

/// A name table to answer from.
pub trait Table {
    /// One PMI-1 name query, answered as the PMI-1 server would.
    fn ask(&mut self, request: &NameRequest) -> Result<Message, String>;
    /// Who published `service`, if the table knows.
    fn publisher(&self, service: &str) -> Option<(String, u32)>;
    /// Remove everything the caller published; `None` if the table cannot.
    fn unpublish_all(&mut self) -> Option<usize>;
    /// Remove `service` whoever published it (a value read once).
    fn take(&mut self, service: &str);
}

/// The job's own table, on behalf of rank `rank` of `ns`.
pub struct JobTable<'a> {
    pub server: &'a mut Server,
    pub ns: NsId,
    pub rank: u32,
}

impl Table for JobTable<'_> {
    fn ask(&mut self, request: &NameRequest) -> Result<Message, String> {
        Ok(self.server.answer_name(self.ns, self.rank, request))
    }

    fn publisher(&self, service: &str) -> Option<(String, u32)> {
        self.server.name_publisher(service)
    }

    fn unpublish_all(&mut self) -> Option<usize> {
        Some(self.server.unpublish_names_of(self.ns, self.rank))
    }

    fn take(&mut self, service: &str) {
        // On behalf of its publisher, who alone may remove it.
        let (ns, rank) = match self.server.name_publisher(service) {
            Some((name, rank)) => match self.server.namespace_id(&name) {
                Some(ns) => (ns, rank),
                None => return,
            },
            None => (self.ns, self.rank),
        };
        let request = NameRequest::Unpublish {
            service: service.to_string(),
        };
        self.server.answer_name(ns, rank, &request);
    }
}

/// An outside name server (`--nameserver HOST:PORT`), which knows no
/// publishers.
pub struct NameServerTable {
    pub addr: String,
}

impl Table for NameServerTable {
    fn ask(&mut self, request: &NameRequest) -> Result<Message, String> {
        crate::nameserver::ask(&self.addr, request)
    }

    fn publisher(&self, _service: &str) -> Option<(String, u32)> {
        None
    }

    fn unpublish_all(&mut self) -> Option<usize> {
        None
    }

    fn take(&mut self, service: &str) {
        // The name server lets anyone remove a name.
        let request = NameRequest::Unpublish {
            service: service.to_string(),
        };
        let _ = crate::nameserver::ask(&self.addr, &request);
    }
}

/// The PMIx status for a PMI-1 name answer (`Err`: the table could not be
/// asked).
fn status_of(reply: &Result<Message, String>) -> c_int {
    match reply {
        Err(_) => PMIX_ERR_UNREACH,
        Ok(m) => match m.status() {
            Some((0, _)) => PMIX_SUCCESS,
            Some((_, Some("key_already_present"))) => PMIX_ERR_DUPLICATE_KEY,
            Some((_, Some("service_not_found"))) => PMIX_ERR_NOT_FOUND,
            Some((_, Some("not_the_publisher"))) => PMIX_ERR_NO_PERMISSIONS,
            Some((_, Some("name_table_full"))) => PMIX_ERR_OUT_OF_RESOURCE,
            _ => PMIX_ERROR,
        },
    }
}

/// Answer `op` from `table`; `None` for a lookup that waits and has not
/// found enough yet (try again later). `warn` hears why a table could not
/// be asked.
pub fn answer(op: &NameOp, table: &mut dyn Table, warn: &mut dyn FnMut(&str)) -> Option<Answer> {
    let mut first_failure = |request: NameRequest| -> Option<c_int> {
        let reply = table.ask(&request);
        if let Err(why) = &reply {
            warn(&format!(
                "{why}; {} of '{}' fails",
                request.query(),
                request.service()
            ));
        }
        Some(status_of(&reply)).filter(|&s| s != PMIX_SUCCESS)
    };
    match op {
        NameOp::Publish(entries) => {
            let failed = entries.iter().find_map(|(service, port)| {
                first_failure(NameRequest::Publish {
                    service: service.clone(),
                    port: port.clone(),
                })
            });
            Some(Answer::status(failed.unwrap_or(PMIX_SUCCESS)))
        }
        NameOp::Unpublish(Some(keys)) => {
            let failed = keys.iter().find_map(|service| {
                first_failure(NameRequest::Unpublish {
                    service: service.clone(),
                })
            });
            Some(Answer::status(failed.unwrap_or(PMIX_SUCCESS)))
        }
        NameOp::Unpublish(None) => Some(Answer::status(match table.unpublish_all() {
            Some(_) => PMIX_SUCCESS,
            None => PMIX_ERR_NOT_SUPPORTED,
        })),
        NameOp::Lookup { keys, wait } => {
            let mut found = Vec::new();
            let mut unreachable = false;
            for key in keys {
                let request = NameRequest::Lookup {
                    service: key.clone(),
                };
                match table.ask(&request) {
                    Ok(Message::LookupResult {
                        rc: 0,
                        port: Some(port),
                        ..
                    }) => {
                        let publisher = table.publisher(key);
                        if Stored::decode(&port).once {
                            table.take(key);
                        }
                        found.push(Found {
                            key: key.clone(),
                            port,
                            publisher,
                        })
                    }
                    Ok(_) => {}
                    Err(why) => {
                        warn(&format!("{why}; lookup_name of '{key}' fails"));
                        unreachable = true;
                    }
                }
            }
            if let Some(w) = wait {
                let needed = match w.count {
                    0 => keys.len(),
                    n => n.min(keys.len()),
                };
                let expired = w.until.is_some_and(|t| Instant::now() >= t);
                if found.len() < needed && !expired && !unreachable {
                    return None;
                }
            }
            let status = if found.len() == keys.len() {
                PMIX_SUCCESS
            } else if unreachable && found.is_empty() {
                PMIX_ERR_UNREACH
            } else if found.is_empty() {
                PMIX_ERR_NOT_FOUND
            } else {
                PMIX_ERR_PARTIAL_SUCCESS
            };
            Some(Answer { status, found })
        }
    }
}

impl NameCall {
    /// Refuse the call with `status`.
    pub fn refuse(self, status: c_int) {
        self.finish(Answer::status(status));
    }

    /// Give the library the answer (this ends the call).
    pub fn finish(self, answer: Answer) {
        self.callback.answer(self.cbdata, answer);
    }
}

/// Serve `call` from the job's own table; a lookup that must wait comes
/// back, to be tried again after [`RETRY`].
pub fn serve_from_job(call: NameCall, server: &mut Server, ns: NsId) -> Option<NameCall> {
    let mut table = JobTable {
        server,
        ns,
        rank: call.rank,
    };
    match answer(&call.op, &mut table, &mut |_| {}) {
        Some(a) => {
            call.finish(a);
            None
        }
        None => Some(call),
    }
}

/// Serve `call` from the name server at `addr`, on a thread of its own
/// (asking takes bounded but real time); a lookup that waits is asked
/// again every [`RETRY`] there.
pub fn serve_from_name_server(call: NameCall, addr: String) {
    // Shared so that a thread that cannot start still lets us answer.
    let call = std::sync::Arc::new(std::sync::Mutex::new(Some(call)));
    let mine = std::sync::Arc::clone(&call);
    let spawned = std::thread::Builder::new()
        .name("rivetrun-pmix-names".into())
        .spawn(move || {
            let Some(call) = mine.lock().unwrap_or_else(|e| e.into_inner()).take() else {
                return;
            };
            let mut table = NameServerTable { addr };
            let mut warn = |why: &str| eprintln!("rivetrun: {why}");
            loop {
                if let Some(a) = answer(&call.op, &mut table, &mut warn) {
                    call.finish(a);
                    return;
                }
                std::thread::sleep(RETRY);
            }
        });
    if let Err(err) = spawned {
        eprintln!("rivetrun: cannot start a thread for a PMIx name request: {err}");
        if let Some(call) = call.lock().unwrap_or_else(|e| e.into_inner()).take() {
            call.finish(Answer::status(PMIX_ERR_OUT_OF_RESOURCE));
        }
    }
}

#[cfg(test)]
#[path = "names_tests.rs"]
mod tests;
