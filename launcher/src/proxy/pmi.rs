//! PMI-1 served by the proxy to its node's ranks (one thread per rank's
//! `PMI_FD`), Hydra's way: answers that need nobody else (init, maxes,
//! appnum, kvsname, universe size, finalize) at once; puts kept in a node
//! cache and sent upstream in one batch at the next barrier; gets served
//! from the cache (which every barrier fills with the job's puts); a
//! barrier goes upstream once, when the node's last rank arrives.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use rivet_pmi::wire::{Frame, Framer, Limits, Message};

use super::upstream::Upstream;

/// What the node's ranks share.
#[derive(Debug, Default)]
struct Cache {
    kvs: HashMap<String, String>,
    /// Puts not yet sent upstream.
    pending: Vec<(String, String)>,
    /// Ranks waiting in the current barrier.
    arrived: usize,
    /// Barriers completed (a waiter leaves when it changes).
    generation: u64,
    /// The upstream connection is gone: barriers fail.
    broken: bool,
}

/// The node's PMI state; cloned into every rank's thread.
#[derive(Clone)]
pub struct NodeKvs {
    inner: Arc<(Mutex<Cache>, Condvar)>,
    local_ranks: usize,
    size: u32,
    kvsname: Arc<str>,
}

impl NodeKvs {
    pub fn new(kvsname: &str, size: u32, local_ranks: usize, attrs: Vec<(String, String)>) -> Self {
        let cache = Cache {
            kvs: attrs.into_iter().collect(),
            ..Cache::default()
        };
        NodeKvs {
            inner: Arc::new((Mutex::new(cache), Condvar::new())),
            local_ranks,
            size,
            kvsname: kvsname.into(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.inner.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// rivetrun's `barrier_out`: the job's puts since the last barrier.
    pub fn barrier_out(&self, puts: Vec<(String, String)>) {
        let mut c = self.lock();
        c.kvs.extend(puts);
        c.generation += 1;
        self.inner.1.notify_all();
    }

    /// The connection to rivetrun is gone: wake every waiter with an error.
    pub fn break_off(&self) {
        self.lock().broken = true;
        self.inner.1.notify_all();
    }

    /// Arrive at the barrier; returns once the whole job has.
    fn barrier(&self, up: &Upstream) -> bool {
        let mut c = self.lock();
        if c.broken {
            return false;
        }
        let gen = c.generation;
        c.arrived += 1;
        if c.arrived == self.local_ranks {
            c.arrived = 0;
            let puts = std::mem::take(&mut c.pending);
            let mut words: Vec<Vec<u8>> = vec![b"barrier".to_vec()];
            for (k, v) in puts {
                words.push(k.into_bytes());
                words.push(v.into_bytes());
            }
            if up.send(&words).is_err() {
                c.broken = true;
                self.inner.1.notify_all();
                return false;
            }
        }
        while c.generation == gen && !c.broken {
            c = self.inner.1.wait(c).unwrap_or_else(|p| p.into_inner());
        }
        c.generation != gen
    }
}

/// What a rank did over PMI, read when it exits: one that spoke PMI and
/// exits 0 without finalizing fails the job (others may wait for it).
#[derive(Default)]
pub struct Said {
    pub spoke: AtomicBool,
    pub finalized: AtomicBool,
}

/// Serve one rank until its PMI connection closes.
pub fn serve(mut conn: UnixStream, rank: u32, kvs: NodeKvs, up: Upstream, said: Arc<Said>) {
    let mut framer = Framer::new();
    let mut frames = Vec::new();
    let mut buf = vec![0u8; 16384];
    let mut finalized = false;
    loop {
        let n = match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        said.spoke.store(true, Ordering::Relaxed);
        if framer.feed(&buf[..n], &mut frames).is_err() {
            return; // a garbage stream: close it
        }
        for frame in frames.drain(..) {
            let reply = match frame {
                Frame::Message(msg) => {
                    let r = answer(msg, rank, &kvs, &up, &mut finalized);
                    // Before the answer: the rank exits only after it.
                    said.finalized.store(finalized, Ordering::Relaxed);
                    r
                }
                Frame::Invalid { cmd, error } => Some(Message::error_reply(
                    cmd.as_deref(),
                    1,
                    error.to_string().replace(' ', "_"),
                )),
            };
            if let Some(reply) = reply {
                let Ok(bytes) = reply.encode() else {
                    return;
                };
                if conn.write_all(&bytes).is_err() {
                    return;
                }
            }
        }
    }
}

fn answer(
    msg: Message,
    rank: u32,
    kvs: &NodeKvs,
    up: &Upstream,
    finalized: &mut bool,
) -> Option<Message> {
    use Message as M;
    let size = i32::try_from(kvs.size).unwrap_or(i32::MAX);
    Some(match msg {
        M::Init { version, .. } => {
            let (v, s) = rivet_pmi::server::SERVER_VERSION;
            M::InitResponse {
                rc: if version == v { 0 } else { -1 },
                version: v,
                subversion: s,
                msg: (version != v).then(|| "this_proxy_speaks_PMI-1".into()),
            }
        }
        M::GetMaxes => {
            let l = Limits::DEFAULT;
            M::Maxes {
                rc: 0,
                kvsname_max: l.kvsname_max as u32,
                keylen_max: l.keylen_max as u32,
                vallen_max: l.vallen_max as u32,
                msg: None,
            }
        }
        M::GetAppnum => M::Appnum {
            rc: 0,
            appnum: 0,
            msg: None,
        },
        M::GetMyKvsname => M::MyKvsname {
            rc: 0,
            kvsname: kvs.kvsname.to_string(),
            msg: None,
        },
        M::GetUniverseSize => M::UniverseSize {
            rc: 0,
            size,
            msg: None,
        },
        M::Put {
            kvsname,
            key,
            value,
        } => {
            if !kvsname.is_empty() && *kvsname != *kvs.kvsname {
                M::error_reply(Some("put"), 1, "put_allowed_only_into_own_kvs")
            } else {
                let mut c = kvs.lock();
                c.kvs.insert(key.clone(), value.clone());
                c.pending.push((key, value));
                M::PutResult { rc: 0, msg: None }
            }
        }
        M::Get { kvsname, key } => {
            if kvsname.is_some_and(|k| !k.is_empty() && *k != *kvs.kvsname) {
                M::error_reply(Some("get"), 1, "unknown_kvsname")
            } else {
                match kvs.lock().kvs.get(&key) {
                    Some(v) => M::GetResult {
                        rc: 0,
                        value: Some(v.clone()),
                        msg: None,
                    },
                    None => M::error_reply(Some("get"), 1, "key_not_found"),
                }
            }
        }
        M::BarrierIn { group } if group.as_deref().is_none_or(|g| g == "WORLD") => {
            if kvs.barrier(up) {
                M::BarrierOut {
                    rc: 0,
                    tag: None,
                    msg: None,
                }
            } else {
                M::error_reply(Some("barrier_in"), -1, "launcher_connection_lost")
            }
        }
        M::Finalize => {
            *finalized = true;
            M::FinalizeAck { rc: 0, msg: None }
        }
        M::Abort { exitcode, message } => {
            let _ = up.send(&[
                b"abort".to_vec(),
                rank.to_string().into_bytes(),
                exitcode.to_string().into_bytes(),
                message.unwrap_or_default().into_bytes(),
            ]);
            return None;
        }
        other => M::error_reply(Some(other.cmd()), 1, "not_supported_in_multi-host_jobs_yet"),
    })
}
