//! Spawn in a multi-host job: the proxy of the rank that asks starts the
//! children on its own host (all of them: placement across hosts is not
//! done yet), checked and planned as on one host (`crate::spawn::plan`,
//! all or none). Their namespace (`<job>_h<PROXY>_s<N>`, unique in the job)
//! is served by this proxy's PMI loop as a namespace of its own, whose
//! barriers stay on this node. rivetrun hears of the namespace first
//! (`spawned KVS SIZE`, so group connects naming the children are served
//! job-wide), then of each child's end (`sexit KVS INDEX CODE SIGNAL`);
//! a child that fails fails the job, as a rank does.
//!
//! A `PMIx_Spawn` (the node's PMIx server's upcall) is carried out alike;
//! where the node serves PMIx, the children's namespace is registered with
//! its server before they start and each child gets what setup-fork gives
//! (`pmix_host::child_envs`, as on one host), so they bootstrap by PMIx
//! too. The caller hears the namespace, or the failure, from the library.
//! rivetrun has every other proxy register the namespace with its own
//! server (`pmix_spawned`), so the job's ranks on other hosts can name the
//! children: their data comes by direct modex from this proxy.

use std::ffi::OsString;
use std::sync::Arc;

use rivet_pmi::server::{ConnId, SpawnFailure, Spawned};

use super::job::Job;
use super::pmi::{self, Asker, Cmd, SpawnAsk};
use super::upstream::Upstream;
use crate::launch::{self, Started};
use crate::pmix_host::{self, PmixHost};
use crate::remote::commands as cmd;
use crate::spawn::{self, SpawnBase};

/// PMI connection ids of spawned processes start here (ranks use rank + 1).
const FIRST_ID: ConnId = 1 << 31;

/// One started child: its namespace, index and process.
pub(super) struct Child {
    pub kvs: String,
    pub index: u32,
    pub started: Started,
    pub said: Arc<pmi::Said>,
}

pub(super) struct Spawner {
    /// The base of each app (by appnum): env, wdir, search path.
    bases: Vec<SpawnBase>,
    /// Namespace appnum of each of this node's ranks.
    appnum_of: Vec<(u32, u32)>,
    count: u32,
    next_id: ConnId,
}

impl Spawner {
    pub fn new(job: &Job, proxy_id: u32, host: &str) -> Spawner {
        let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
        let attributes: Vec<(String, String)> = job
            .attrs
            .iter()
            .filter(|(k, _)| k != rivet_pmi::server::PROCESS_MAPPING_KEY)
            .cloned()
            .collect();
        let bases = job
            .apps
            .iter()
            .map(|app| {
                let env: Vec<(OsString, OsString)> =
                    job.env.iter().chain(&app.env).cloned().collect();
                let search_path = env
                    .iter()
                    .rev()
                    .find(|(k, _)| k == "PATH")
                    .map(|(_, v)| v.clone());
                SpawnBase {
                    env,
                    clear_env: true,
                    wdir: app.wdir.as_ref().map_or(cwd.clone(), |d| cwd.join(d)),
                    search_path,
                    attributes: attributes.clone(),
                    kvsname: format!("{}_h{proxy_id}", job.kvsname),
                    universe_size: job.size,
                    hostname: host.to_string(),
                }
            })
            .collect();
        Spawner {
            bases,
            appnum_of: job
                .ranks
                .iter()
                .copied()
                .zip(job.appnums.iter().copied())
                .collect(),
            count: 0,
            next_id: FIRST_ID,
        }
    }

    /// Carry out `ask`: the children started (the PMI loop already serves
    /// them), or the refusal the asking rank gets. The asker (the PMI loop
    /// for a PMI-1 spawn, the PMIx library for `PMIx_Spawn`) gets the
    /// answer either way.
    pub fn spawn(
        &mut self,
        ask: SpawnAsk,
        pmi: &pmi::Handle,
        up: &Upstream,
        priority: &launch::Priority,
        pmix: Option<&PmixHost>,
    ) -> Vec<Child> {
        let command_env = match &ask.asker {
            Asker::Pmix(call) => call.env.clone(),
            Asker::Pmi(_) => Vec::new(),
        };
        let result = self.start(&ask, pmi, up, priority, pmix, &command_env);
        let (answer, children) = match result {
            Ok((kvs, children)) => (Ok((kvs, children.len())), children),
            Err(failure) => {
                eprintln!(
                    "rivetrun: spawn requested by rank {} of {} failed: {}",
                    ask.rank, ask.kvs, failure.message
                );
                (Err(failure), Vec::new())
            }
        };
        refuse_or_answer(ask.asker, answer, pmi);
        children
    }

    fn start(
        &mut self,
        ask: &SpawnAsk,
        pmi: &pmi::Handle,
        up: &Upstream,
        priority: &launch::Priority,
        pmix: Option<&PmixHost>,
        command_env: &[Vec<(String, String)>],
    ) -> Result<(String, Vec<Child>), SpawnFailure> {
        // A rank's app; a spawned process spawning uses the first app's base.
        let app = self
            .appnum_of
            .iter()
            .find(|(r, _)| *r == ask.rank)
            .map_or(0, |(_, a)| *a as usize);
        let base = self
            .bases
            .get(app)
            .or(self.bases.first())
            .ok_or_else(|| SpawnFailure::from("the job has no programs".to_string()))?;
        let mut warnings = Vec::new();
        let planned = spawn::plan(base, &ask.request, &mut warnings);
        for w in warnings {
            eprintln!("rivetrun: warning: {w}");
        }
        let plan = planned.map_err(|r| SpawnFailure {
            errcodes: r.errcodes,
            message: r.message,
        })?;
        self.count += 1;
        let kvs = format!("{}_s{}", base.kvsname, self.count);
        pmi.send(Cmd::Namespace(plan.namespace(base, &kvs, &ask.request)));
        up.send(&[cmd::SPAWNED, &kvs, &plan.total.to_string()])
            .map_err(|e| SpawnFailure::from(format!("telling rivetrun: {e}")))?;
        // Served PMIx too, where this node is: registered before they start.
        let sizes: Vec<u32> = plan.commands.iter().map(|c| c.nprocs).collect();
        let envs = pmix_host::child_envs(pmix, &kvs, &sizes, (&ask.kvs, ask.rank), command_env);
        if pmix.is_some() {
            // The other nodes' servers register it too (`super::pmix::spawned_elsewhere`).
            let sizes = sizes
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",");
            let rank = ask.rank.to_string();
            let _ = up.send(&[cmd::PMIX_SPAWNED, &kvs, &ask.kvs, &rank, &sizes]);
        }
        let (jobs, places) = plan.jobs_and_places(base, &kvs);
        let procs = plan
            .appnum_of_rank()
            .into_iter()
            .zip(0u32..)
            .map(|(c, index)| {
                let env = envs.get(index as usize).map_or(&[][..], Vec::as_slice);
                (&jobs[c as usize], index, &places[index as usize], env)
            });
        let mut children: Vec<Child> = match launch::start_all(procs, priority) {
            Ok(started) => started
                .into_iter()
                .zip(0u32..)
                .map(|(started, index)| Child {
                    kvs: kvs.clone(),
                    index,
                    started,
                    said: Arc::new(pmi::Said::default()),
                })
                .collect(),
            Err((index, err)) => {
                let mut codes = vec![0; plan.total as usize];
                codes[index] = err.exit_code();
                // rivetrun counts them as ended (their group operations fail).
                for i in 0..plan.total {
                    let _ = up.send(&[cmd::SEXIT, &kvs, &i.to_string(), "0", "0"]);
                }
                return Err(SpawnFailure {
                    errcodes: codes,
                    message: format!("could not start spawned process {index} of {kvs}: {err}"),
                });
            }
        };
        for c in &mut children {
            if let Some(conn) = c.started.pmi.take() {
                pmi.send(Cmd::Spawned {
                    kvs: c.kvs.clone(),
                    index: c.index,
                    id: self.next_id,
                    conn,
                    said: c.said.clone(),
                });
                self.next_id += 1;
            }
        }
        Ok((kvs, children))
    }
}

/// Tell the asker: the new namespace and its size, or why there is none.
pub(super) fn refuse_or_answer(
    asker: Asker,
    answer: Result<(String, usize), SpawnFailure>,
    pmi: &pmi::Handle,
) {
    match asker {
        Asker::Pmi(conn) => {
            let codes = answer.map(|(jobid, n)| Spawned {
                jobid,
                errcodes: vec![0; n],
            });
            pmi.send(Cmd::SpawnDone(conn, codes));
        }
        Asker::Pmix(call) => call.finish(
            answer
                .map(|(kvs, _)| kvs)
                .map_err(|f| crate::pmix_host::status_of(&f)),
        ),
    }
}
