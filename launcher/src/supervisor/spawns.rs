//! Spawns: a PMI or PMIx spawn request planned (`spawn::plan`), its
//! namespace added to the server, and its processes started, all or none.

use rivet_pmi::server::{NsId, SpawnFailure};
use rivet_pmi::wire::SpawnRequest;

use super::{Failure, Phase, Supervisor, Who};
use crate::error::LaunchError;
use crate::launch::{self, Started};
use crate::pmix_host;
use crate::spawn::{self, Plan};

impl Supervisor {
    /// Carry out a spawn request of rank `rank` of `ns`: all of its
    /// processes start, or none does.
    pub(super) fn spawn(
        &mut self,
        ns: NsId,
        rank: u32,
        request: &SpawnRequest,
        command_env: &[Vec<(String, String)>],
    ) -> Result<(Vec<i32>, String), SpawnFailure> {
        let parent = self.who(ns, rank);
        let refuse = |message: String, errcodes: Vec<i32>| {
            eprintln!("rivetrun: spawn requested by {parent} failed: {message}");
            Err(SpawnFailure { errcodes, message })
        };
        if !matches!(self.phase, Phase::Running) {
            return refuse("the job is being torn down".into(), Vec::new());
        }
        let Some(spawner) = self.spawner.as_mut() else {
            return refuse(
                "rivetrun is not ready to spawn processes".into(),
                Vec::new(),
            );
        };
        let mut warnings = Vec::new();
        let planned = spawn::plan(&spawner.base, request, &mut warnings);
        for warning in warnings {
            eprintln!("rivetrun: warning: {warning}");
        }
        let plan = match planned {
            Ok(plan) => plan,
            Err(refusal) => return refuse(refusal.message, refusal.errcodes),
        };
        spawner.count += 1;
        let number = spawner.count;
        let kvsname = format!("{}_s{number}", spawner.base.kvsname);
        let spec = plan.namespace(&spawner.base, &kvsname, request);
        let child_ns = match self.server.create_namespace(spec) {
            Ok(id) => id,
            Err(e) => return refuse(e.to_string(), vec![1; plan.total as usize]),
        };
        if let Some(link) = &self.group_link {
            link.register_ns(&self.server, child_ns);
        }
        // Served PMIx too, where the job is: registered before they start.
        let pmix_env = pmix_host::child_envs(
            self.pmix.as_ref(),
            &kvsname,
            &plan.commands.iter().map(|c| c.nprocs).collect::<Vec<_>>(),
            (self.server.namespace_name(ns), rank),
            command_env,
        );
        let started = match self.start_children(&plan, &kvsname, &pmix_env) {
            Ok(started) => started,
            Err((index, code, message)) => {
                // Its namespace stays, without processes: a group connect
                // naming them must not wait for them.
                let mut outputs = Vec::new();
                for r in 0..plan.total {
                    self.server.process_ended(child_ns, r, &mut outputs);
                    if let Some(link) = &self.group_link {
                        link.process_ended(&self.server, child_ns, r);
                    }
                }
                self.apply(outputs);
                let mut codes = vec![0; plan.total as usize];
                codes[index as usize] = code;
                return refuse(message, codes);
            }
        };
        for (index, s) in started.into_iter().enumerate() {
            let index = index as u32;
            let who = Who::Spawned {
                kvsname: kvsname.clone(),
                index,
            };
            let label = self.label.then(|| format!("[s{number}:{index}] "));
            if let Err(err) = self.add_proc(s, who.clone(), (child_ns, number), index, label) {
                // It runs but cannot be watched: the job cannot go on.
                self.begin_teardown(Failure::Internal(format!("cannot watch {who}: {err}")));
            }
        }
        Ok((vec![0; plan.total as usize], kvsname))
    }

    /// Start every process of `plan`; on the first that cannot start, kill
    /// and reap the ones already started and say which failed (its index,
    /// error code and why).
    pub(super) fn start_children(
        &self,
        plan: &Plan,
        kvsname: &str,
        pmix_env: &[Vec<(String, String)>],
    ) -> Result<Vec<Started>, (u32, i32, String)> {
        let Some(spawner) = self.spawner.as_ref() else {
            return Err((0, 1, "spawning is not enabled".into()));
        };
        let (jobs, places) = plan.jobs_and_places(&spawner.base, kvsname);
        let procs = plan
            .appnum_of_rank()
            .into_iter()
            .zip(0u32..)
            .map(|(c, index)| {
                let env = pmix_env.get(index as usize).map_or(&[][..], Vec::as_slice);
                (&jobs[c as usize], index, &places[index as usize], env)
            });
        let started = launch::start_all(procs, &spawner.priority).map_err(|(index, err)| {
            let code = err.exit_code();
            let message = match err {
                LaunchError::Spawn { program, err, .. } => format!(
                    "could not start spawned process {index} of {kvsname} ({program}): {err}"
                ),
                other => other.to_string(),
            };
            (index as u32, code, message)
        })?;
        Ok(started)
    }
}
