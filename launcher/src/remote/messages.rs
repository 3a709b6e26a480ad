//! What each message from a proxy does to the running job (`Running`),
//! one arm per command of `commands` that proxies send.

use super::barrier;
use super::commands as cmd;
use super::events::Ev;
use super::jobwide;
use super::pmix;
use super::proxies::{deliver, stranded};
use super::running::Running;
use super::wire;
use crate::proxy::tree;

impl Running<'_> {
    pub(super) fn on_message(&mut self, id: u32, msg: Vec<Vec<u8>>) {
        self.stats.msgs += 1;
        let i = id as usize;
        let n = self.proxies.len() as u32;
        let word = |n: usize| msg.get(n).map(|w| wire::text(w)).unwrap_or_default();
        match word(0).as_str() {
            cmd::BARRIER => {
                self.stats.barrier_msgs += 1;
                match self.barrier.arrive(id, msg.into_iter().skip(1)) {
                    barrier::Step::Waiting => {}
                    barrier::Step::Complete(mut out) => {
                        self.fence_timeouts.barrier_done(&mut out);
                        self.stats.t_last = self.started.elapsed().as_millis();
                        if self.barrier.completed == 1 {
                            self.stats.t_first = self.stats.t_last;
                        }
                        let line = wire::line(&out);
                        for &t in &self.top {
                            if let Some(c) = &mut self.proxies[t as usize].conn {
                                let _ = std::io::Write::write_all(c, &line);
                            }
                        }
                    }
                    barrier::Step::Stranded { ended, waiting } => {
                        stranded(&self.proxies, ended, waiting, &mut self.failure);
                    }
                }
            }
            cmd::STRANDED => {
                // A child of this proxy ended before its subtree's barrier came.
                let child = word(1).parse::<u32>().ok();
                if let Some(c) = child.filter(|&c| tree::parent(c, self.fanout) == Some(id)) {
                    stranded(&self.proxies, c, id, &mut self.failure);
                }
            }
            cmd::EXIT => {
                self.proxies[i].exited += 1;
                self.exits += 1;
                let (rank, code, sig) = (word(1), word(2), word(3));
                if let Ok(r) = rank.parse() {
                    let routed = self.jobwide.ended(&self.kvsname, r);
                    deliver(&mut self.proxies, routed, &mut self.failure);
                }
                let code: i32 = code.parse().unwrap_or(1);
                let sig: i32 = sig.parse().unwrap_or(0);
                let host = self.proxies[i].host.clone();
                if sig != 0 && self.failure.is_none() {
                    self.fail(
                        code,
                        format!("rank {rank} on {host} was killed by signal {sig}"),
                    );
                } else if code != 0 && self.failure.is_none() {
                    self.fail(
                        code,
                        format!("rank {rank} on {host} exited with code {code}"),
                    );
                } else if word(4) == "1" && self.failure.is_none() && self.exits < self.size {
                    let msg = format!(
                        "rank {rank} on {host} exited with code 0 without finalizing \
                     PMI; the other processes could wait for it forever"
                    );
                    self.fail(1, msg);
                }
            }
            cmd::ABORT => {
                let code: i32 = word(2).parse().unwrap_or(1);
                let msg = format!(
                    "rank {} on {} called abort (exit code {code}): {}",
                    word(1),
                    self.proxies[i].host,
                    word(3)
                );
                if self.failure.is_none() {
                    self.fail(code, msg);
                }
            }
            cmd::ERROR => {
                let msg = format!("host {}: {}", self.proxies[i].host, word(1));
                self.fail(1, msg);
            }
            cmd::SEXIT => {
                // A spawned process: (kvsname, index, code, signal).
                let (kvs, index) = (word(1), word(2));
                let code: i32 = word(3).parse().unwrap_or(1);
                let sig: i32 = word(4).parse().unwrap_or(0);
                let host = self.proxies[i].host.clone();
                if self.failure.is_none() && (code != 0 || sig != 0) {
                    let how = if sig != 0 {
                        format!("was killed by signal {sig}")
                    } else {
                        format!("exited with code {code}")
                    };
                    let msg = format!("spawned process {index} of {kvs} on {host} {how}");
                    self.fail(if code != 0 { code } else { 1 }, msg);
                }
                if let Ok(r) = index.parse() {
                    let routed = self.jobwide.ended(&kvs, r);
                    deliver(&mut self.proxies, routed, &mut self.failure);
                }
            }
            cmd::ORPHANED => {
                // A barrier of this proxy's subtree needs its parent proxy, which ended.
                let parent = tree::parent(id, self.fanout).map(|p| &self.proxies[p as usize]);
                if let (Some(parent), None) = (parent, self.failure) {
                    let why = if parent.done {
                        ": its proxy ended (its ranks had all exited)"
                    } else {
                        " lost: its proxy's connection closed"
                    };
                    let msg = format!(
                        "host {}{why} while ranks on {} below it in the proxy tree \
                     needed it for a barrier, which cannot complete",
                        parent.host, self.proxies[i].host
                    );
                    self.fail(1, msg);
                }
            }
            cmd::SPAWNED => {
                if let Err(e) = self.jobwide.spawned(&msg) {
                    eprintln!(
                        "rivetrun: host {}: spawned namespace: {e}",
                        self.proxies[i].host
                    );
                }
            }
            cmd::NAME => match self.jobwide.name(&msg) {
                Some(jobwide::NameAction::Reply(words)) => {
                    if let Some(c) = &mut self.proxies[i].conn {
                        let _ = wire::send(c, &words);
                    }
                }
                Some(jobwide::NameAction::Ask(addr, request)) => {
                    let tx = self.tx.clone();
                    let conn = msg.get(3).cloned().unwrap_or_default();
                    std::thread::spawn(move || {
                        let result = crate::nameserver::ask(&addr, &request);
                        let words = jobwide::name_done(&conn, result);
                        let _ = tx.send(Ev::NameAnswer(id, words));
                    });
                }
                None => {}
            },
            cmd::GEND => {
                pmix::member_ended(id, &msg, &mut self.proxies);
                let left = pmix::group_left(&self.kvsname, &msg, &self.proxies[i].host);
                if let (Some(why), None) = (left, self.failure) {
                    self.fail(1, why);
                }
            }
            cmd::PMIX_SPAWNED => pmix::spawned(id, &msg, &mut self.spawned_at, &mut self.proxies),
            cmd::DMODEX => {
                let target = pmix::target(&msg, &self.node_of_rank, &self.spawned_at);
                pmix::ask(id, &msg, target, &mut self.proxies)
            }
            cmd::DMODEX_DATA => pmix::answer(&msg, &mut self.proxies),
            cmd::COLL => {
                let proxies = &self.proxies;
                let gone = |n: u32| proxies.get(n as usize).is_some_and(|p| p.done || p.closed);
                let (sends, lost) = self.colls.arrive(id, &msg, n, gone);
                if let Some(l) = lost {
                    pmix::coll_lost(&self.proxies[l as usize].host, 1);
                }
                pmix::send(&mut self.proxies, sends);
            }
            cmd::COLL_LATE => {
                let sends = self.colls.late(id, &msg);
                pmix::send(&mut self.proxies, sends);
            }
            cmd::FENCE_LATE => {
                if let Some(failed) = self.fence_timeouts.late(&msg) {
                    for p in self.proxies.iter_mut() {
                        if let Some(c) = p.conn.as_mut() {
                            let _ = wire::send(c, &failed);
                        }
                    }
                }
            }
            cmd::PMI => {
                let routed = self.jobwide.relay(id, &msg);
                deliver(&mut self.proxies, routed, &mut self.failure);
            }
            cmd::LISTEN => {
                let addr = msg.get(1).cloned().unwrap_or_default();
                for c in tree::children(Some(id), n, self.fanout) {
                    if let Some(conn) = &mut self.proxies[c as usize].conn {
                        let _ = wire::send(conn, &[cmd::PARENT.as_bytes(), &addr]);
                    }
                }
                self.listening[i] = Some(addr);
            }
            cmd::DONE => {
                self.proxies[i].done = true;
                // Its parent proxy may never have heard from it (it
                // can end before it learns where the parent listens):
                // a barrier there must not wait for it.
                if let Some(parent) = tree::parent(id, self.fanout) {
                    if let Some(conn) = &mut self.proxies[parent as usize].conn {
                        let _ = wire::send(conn, &[cmd::CHILD_DONE, &id.to_string()]);
                    }
                }
                self.proxy_ended(id);
                for (k, slot) in self.stats.slowest.iter_mut().enumerate() {
                    let t = word(k + 1).parse::<u64>().unwrap_or(0);
                    *slot = (*slot).max(t);
                }
            }
            _ => {}
        }
    }
}
