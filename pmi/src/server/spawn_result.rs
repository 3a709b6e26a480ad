//! The answer to a spawn the launcher carried out (`cmd=spawn_result`),
//! made to fit one PMI line.

use super::output::reply_to;
use super::{ConnId, Output, Server, SpawnFailure, Spawned};
use crate::error::Result;
use crate::wire::Message;

impl Server {
    /// Answer a pending spawn: `Ok(spawned)` → `cmd=spawn_result rc=0`
    /// (PMI-2: `spawn-response` with `rc=0` and `jobid`), `Err(failure)` →
    /// `cmd=spawn_result rc=1 errcodes=... msg=...`.
    ///
    /// Error codes are sent only when one is nonzero and there is one per
    /// requested process (MPICH asserts on any other count); all zeros are
    /// left out, as Hydra does. MPICH's client reads no codes from a failed
    /// spawn (it stops at `rc`); Rivet's returns them in
    /// [`crate::Error::SpawnFailed`]. A connection without a pending spawn
    /// is ignored.
    pub fn spawn_done(
        &mut self,
        conn: ConnId,
        result: Result<Spawned, SpawnFailure>,
        out: &mut Vec<Output>,
    ) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let Some(total) = c.spawn_pending.take() else {
            return;
        };
        if let (Some(v2), Ok(spawned)) = (c.v2.as_mut(), &result) {
            v2.spawned_jobid = Some(spawned.jobid.clone());
        }
        let reply = match result.map(|s| s.errcodes) {
            Ok(codes) if codes.iter().all(|&c| c == 0) => Message::SpawnResult {
                rc: 0,
                errcodes: Vec::new(),
                msg: None,
            },
            Ok(codes) if codes.len() as u64 == total => Message::SpawnResult {
                rc: 0,
                errcodes: codes,
                msg: None,
            },
            Ok(_) => Message::error_reply(Some("spawn"), -1, "some_processes_failed_to_start"),
            Err(failure) => {
                let errcodes = if failure.errcodes.len() as u64 == total {
                    failure.errcodes
                } else {
                    Vec::new()
                };
                spawn_failure_reply(errcodes, failure.message)
            }
        };
        let start = out.len();
        reply_to(out, conn, &reply);
        // A PMI-2 connection gets its `spawn-response`.
        self.translate_v2(start, out);
    }
}

/// `cmd=spawn_result rc=1 errcodes=... msg=...` made to fit one line: a long
/// message is shortened, and codes that cannot fit even so are left out
/// (a client could not read them).
fn spawn_failure_reply(errcodes: Vec<i32>, message: String) -> Message {
    let reply = |errcodes: &[i32], msg: &str| Message::SpawnResult {
        rc: 1,
        errcodes: errcodes.to_vec(),
        msg: Some(msg.to_string()),
    };
    let codes_fit = reply(&errcodes, "").encode().is_ok();
    let codes: &[i32] = if codes_fit { &errcodes } else { &[] };
    shorten_to_fit(|m| reply(codes, m), message)
}

/// `make(message)`, with `message` shortened (marked `...`) until the
/// reply fits one line.
pub(super) fn shorten_to_fit(make: impl Fn(&str) -> Message, message: String) -> Message {
    let mut msg = message;
    while make(&msg).encode().is_err() && !msg.is_empty() {
        // Cut a quarter (at a character boundary) and mark the cut.
        let keep = msg.trim_end_matches("...").len() * 3 / 4;
        let cut = (0..=keep)
            .rev()
            .find(|&i| msg.is_char_boundary(i))
            .unwrap_or(0);
        msg.truncate(cut);
        if !msg.is_empty() {
            msg.push_str("...");
        }
    }
    make(&msg)
}
