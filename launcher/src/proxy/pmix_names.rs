//! PMIx publish, lookup and unpublish of this node's ranks, served by the
//! job's one name table at rivetrun (or its `--nameserver`) as the PMI-1
//! ones of every host are: each query goes up as `name KVS RANK CONN LINE`
//! and its `name_done CONN ...` comes back here (a `CONN` from
//! [`CONN_BASE`] up, which no PMI connection uses) instead of to the PMI
//! loop. A call is served on a thread of its own, which waits for each
//! answer (at most [`ANSWER_WITHIN`]); a lookup asked to wait
//! (`PMIX_WAIT`) is tried again every `pmix_host::NAME_RETRY`.
//!
//! rivetrun does not say who published a name, so found values carry no
//! publisher, and unpublishing everything a rank published (`PMIx_Unpublish`
//! without keys) is not supported.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use rivet_pmi::server::{ConnId, NameRequest};
use rivet_pmi::wire::Message;

use super::upstream::Upstream;
use crate::pmix_host::names::{answer, Table};
use crate::pmix_host::{NameCall, NAME_RETRY};
use crate::remote::commands as cmd;

/// The first connection id of a PMIx name query (PMI connections are
/// rank + 1 and spawned processes' ids, far below).
pub const CONN_BASE: ConnId = 0xC000_0000;

/// How long a query waits for rivetrun's answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Queries waiting for their answer, by connection id.
type Waiting = HashMap<ConnId, mpsc::Sender<Result<Message, String>>>;
static WAITING: Mutex<Option<Waiting>> = Mutex::new(None);

fn waiting() -> std::sync::MutexGuard<'static, Option<Waiting>> {
    WAITING.lock().unwrap_or_else(|e| e.into_inner())
}

/// rivetrun's `name_done` for PMIx query `conn` (from [`CONN_BASE`] up).
pub fn deliver(conn: ConnId, result: Result<Message, String>) {
    if let Some(tx) = waiting().get_or_insert_with(HashMap::new).remove(&conn) {
        let _ = tx.send(result);
    }
}

/// The job's name table at rivetrun, for rank `rank` of `kvs`.
struct Rivetrun {
    up: Upstream,
    kvs: String,
    rank: u32,
}

impl Table for Rivetrun {
    fn ask(&mut self, request: &NameRequest) -> Result<Message, String> {
        let conn = CONN_BASE + ConnId::from(NEXT.fetch_add(1, Ordering::Relaxed) % 0x3FFF_FFFF);
        let (tx, rx) = mpsc::channel();
        waiting().get_or_insert_with(HashMap::new).insert(conn, tx);
        let line = request.to_message().encode().map_err(|e| e.to_string());
        let sent = line.and_then(|line| {
            self.up
                .send(&[
                    cmd::NAME.as_bytes().to_vec(),
                    self.kvs.as_bytes().to_vec(),
                    self.rank.to_string().into_bytes(),
                    conn.to_string().into_bytes(),
                    line,
                ])
                .map_err(|e| format!("rivetrun cannot be reached: {e}"))
        });
        let result = match sent {
            Ok(()) => rx
                .recv_timeout(ANSWER_WITHIN)
                .unwrap_or_else(|_| Err("rivetrun did not answer a name query".into())),
            Err(why) => Err(why),
        };
        waiting().get_or_insert_with(HashMap::new).remove(&conn);
        result
    }

    fn publisher(&self, _service: &str) -> Option<(String, u32)> {
        None
    }

    fn unpublish_all(&mut self) -> Option<usize> {
        None
    }

    fn take(&mut self, service: &str) {
        // Allowed only to its publisher at rivetrun: best effort.
        let request = NameRequest::Unpublish {
            service: service.to_string(),
        };
        let _ = self.ask(&request);
    }
}

/// Serve `call` on a thread of its own.
pub fn serve(call: NameCall, up: Upstream) {
    std::thread::spawn(move || {
        let mut table = Rivetrun {
            up,
            kvs: call.nspace.clone(),
            rank: call.rank,
        };
        let mut warn = |why: &str| eprintln!("rivetrun: proxy: {why}");
        loop {
            match answer(&call.op, &mut table, &mut warn) {
                Some(a) => return call.finish(a),
                None => std::thread::sleep(NAME_RETRY),
            }
        }
    });
}
