//! Name requests (publish, lookup, unpublish) sent to the outside name
//! server on threads of their own, what its group hub sends back, and
//! PMIx's name upcalls.

use std::sync::Arc;
use std::time::Instant;

use rivet_pmi::pmix_ffi::{PMIX_ERR_BAD_PARAM, PMIX_ERR_NOT_SUPPORTED};
use rivet_pmi::server::{ConnId, NameRequest, NsId};

use super::{Failure, NameAnswer, Supervisor, Who};
use crate::nameserver;
use crate::pmix_host::{self, NameCall, PmixEvent};

impl Supervisor {
    /// What the name server's group hub sent (`group_link.rs`).
    pub(super) fn on_group_link(&mut self) {
        let Some(link) = &self.group_link else {
            return;
        };
        let mut out = Vec::new();
        if !link.deliver(&mut self.server, &mut out) {
            self.group_link = None;
        }
        self.apply(out);
    }

    /// Hand a name request to a thread that asks the name server.
    pub(super) fn forward_name(
        &mut self,
        conn: ConnId,
        ns: NsId,
        rank: Option<u32>,
        request: NameRequest,
    ) {
        let who = match rank {
            Some(r) => self.who(ns, r).to_string(),
            None => "a rank".to_string(),
        };
        let Some(names) = self.names.as_ref() else {
            let mut replies = Vec::new();
            self.server
                .name_done(conn, Err("no_name_server".into()), &mut replies);
            self.apply(replies);
            return;
        };
        let addr = names.addr.clone();
        let tx = names.tx.clone();
        let waker = Arc::clone(&names.waker);
        let spawned = std::thread::Builder::new()
            .name("rivetrun-names".into())
            .spawn(move || {
                let result = nameserver::ask(&addr, &request);
                let _ = tx.send(NameAnswer {
                    conn,
                    who,
                    request,
                    result,
                });
                let _ = waker.wake();
            });
        if let Err(err) = spawned {
            let mut replies = Vec::new();
            self.server.name_done(
                conn,
                Err(format!(
                    "name_server_error: rivetrun cannot start a thread: {err}"
                )),
                &mut replies,
            );
            self.apply(replies);
        }
    }

    /// Pass the name server's answers on to the ranks that asked.
    pub(super) fn on_name_answers(&mut self) {
        let mut answers = Vec::new();
        if let Some(names) = self.names.as_ref() {
            while let Ok(answer) = names.rx.try_recv() {
                answers.push(answer);
            }
        }
        for answer in answers {
            let result = answer.result.map_err(|why| {
                eprintln!(
                    "rivetrun: {why}; {} of '{}' by {} fails",
                    answer.request.query(),
                    answer.request.service(),
                    answer.who
                );
                format!("name_server_error: {why}")
            });
            let mut replies = Vec::new();
            self.server.name_done(answer.conn, result, &mut replies);
            self.apply(replies);
        }
    }

    pub(super) fn on_pmix_events(&mut self) {
        let Some(host) = &self.pmix else {
            return;
        };
        for event in host.take_events() {
            match event {
                PmixEvent::Aborted {
                    nspace,
                    rank,
                    code,
                    message,
                    // Dropped after the job is failed: then the caller's
                    // exit can only follow its abort.
                    ack: _ack,
                } => {
                    let who = match self.server.namespace_id(&nspace) {
                        Some(ns) => self.who(ns, rank),
                        None => Who::Rank(rank),
                    };
                    self.job_failed(Failure::Aborted {
                        who,
                        code,
                        message: (!message.is_empty()).then_some(message),
                    })
                }
                PmixEvent::Names(call) => self.pmix_names(call),
                PmixEvent::Spawn(call) => {
                    // The caller's own namespace: the job's, or a spawned one.
                    let Some(ns) = self.server.namespace_id(&call.nspace) else {
                        call.finish(Err(PMIX_ERR_BAD_PARAM));
                        continue;
                    };
                    let result = self.spawn(ns, call.rank, &call.request, &call.env);
                    call.finish(
                        result
                            .map(|(_, ns)| ns)
                            .map_err(|f| pmix_host::status_of(&f)),
                    );
                }
                // A node's upcalls (a proxy's server), never single-host rivetrun's.
                PmixEvent::Fence(call) => call.finish(PMIX_ERR_NOT_SUPPORTED, Vec::new()),
                PmixEvent::Dmodex(call) => call.finish(PMIX_ERR_NOT_SUPPORTED, Vec::new()),
                PmixEvent::Group(call) => call.finish(PMIX_ERR_NOT_SUPPORTED, None),
                PmixEvent::Connect(call) => call.finish(PMIX_ERR_NOT_SUPPORTED),
                PmixEvent::DmodexAnswer { .. } => {}
            }
        }
    }

    /// A PMIx publish, lookup or unpublish: from the job's name table (as
    /// PMI-1's), or its name server.
    pub(super) fn pmix_names(&mut self, call: NameCall) {
        if let Some(names) = &self.names {
            return pmix_host::serve_from_name_server(call, names.addr.clone());
        }
        // The caller's namespace, as the table records publishers.
        let Some(ns) = self.server.namespace_id(&call.nspace) else {
            return call.refuse(PMIX_ERR_BAD_PARAM);
        };
        if let Some(call) = pmix_host::serve_from_job(call, &mut self.server, ns) {
            self.pmix_waiting.push(call);
            self.pmix_retry_at
                .get_or_insert_with(|| Instant::now() + pmix_host::NAME_RETRY);
        }
    }

    /// Try the waiting PMIx lookups again.
    pub(super) fn retry_pmix_lookups(&mut self) {
        self.pmix_retry_at = None;
        for call in std::mem::take(&mut self.pmix_waiting) {
            self.pmix_names(call);
        }
    }
}
