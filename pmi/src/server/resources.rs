//! The server's side of resource registration (`crate::resource`): what
//! each rank registered, answered at once, handed to the launcher when the
//! rank ends (`Server::take_resources`), which frees it. A server that does
//! not free resources (the default: `Server::serve_resources` not called,
//! as in a proxy) answers every request with an error, so the rank knows
//! it must clean up itself.

use std::collections::HashMap;

use crate::resource::{Resource, MAX_PER_RANK};
use crate::wire::Message;

use super::handle::fail;
use super::{reply_to, ConnId, NsId, Output, Server};

/// Registered resources per (namespace, rank), in registration order.
pub(super) type Registry = HashMap<(NsId, u32), Vec<Resource>>;

impl Server {
    /// Serve `resource_register`/`resource_release`: the launcher promises
    /// to free what [`Server::take_resources`] hands it when a rank ends.
    pub fn serve_resources(&mut self) {
        self.resources.get_or_insert_with(Registry::new);
    }

    /// What rank `rank` of `ns` registered and did not release, forgotten
    /// here: the launcher frees it (the rank ended).
    pub fn take_resources(&mut self, ns: NsId, rank: u32) -> Vec<Resource> {
        self.resources
            .as_mut()
            .and_then(|r| r.remove(&(ns, rank)))
            .unwrap_or_default()
    }

    pub(super) fn resource_request(
        &mut self,
        conn: ConnId,
        ns: NsId,
        rank: Option<u32>,
        register: bool,
        resource: Resource,
        out: &mut Vec<Output>,
    ) {
        let q = if register {
            "resource_register"
        } else {
            "resource_release"
        };
        let Some(registry) = self.resources.as_mut() else {
            return fail(out, conn, q, -1, "resource_registration_not_served");
        };
        let Some(rank) = rank else {
            return fail(
                out,
                conn,
                q,
                -1,
                "initack_required_before_resource_requests",
            );
        };
        let mine = registry.entry((ns, rank)).or_default();
        let known = mine.iter().position(|r| *r == resource);
        let reply = match (register, known) {
            (true, Some(_)) => ok(q),
            (true, None) if mine.len() >= MAX_PER_RANK => {
                Message::error_reply(Some(q), 1, "too_many_resources")
            }
            (true, None) => {
                mine.push(resource);
                ok(q)
            }
            (false, Some(i)) => {
                mine.remove(i);
                ok(q)
            }
            (false, None) => Message::error_reply(Some(q), 1, "resource_not_registered"),
        };
        if mine.is_empty() {
            registry.remove(&(ns, rank));
        }
        reply_to(out, conn, &reply);
    }
}

fn ok(q: &str) -> Message {
    if q == "resource_register" {
        Message::ResourceRegisterResult { rc: 0, msg: None }
    } else {
        Message::ResourceReleaseResult { rc: 0, msg: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::NamespaceSpec;

    fn server(serve: bool) -> (Server, NsId) {
        let mut s = Server::new();
        let ns = s
            .create_namespace(NamespaceSpec {
                name: "rivet_1_0".into(),
                size: 2,
                appnum: 0,
                appnum_of_rank: Vec::new(),
                universe_size: 2,
                node_of_rank: vec![0, 0],
                attributes: Vec::new(),
                preput: Vec::new(),
            })
            .unwrap();
        s.attach(1, ns, 0);
        s.attach(2, ns, 1);
        if serve {
            s.serve_resources();
        }
        (s, ns)
    }

    fn ask(s: &mut Server, conn: ConnId, line: &str) -> String {
        let mut out = Vec::new();
        s.receive(conn, line.as_bytes(), &mut out);
        out.into_iter()
            .map(|o| match o {
                Output::Send { conn: c, bytes } if c == conn => String::from_utf8(bytes).unwrap(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn registered_resources_are_handed_over_when_the_rank_ends() {
        let (mut s, ns) = server(true);
        let ok = "cmd=resource_register_result rc=0\n";
        for line in [
            "cmd=resource_register kind=shm name=rivet-9-seg\n",
            "cmd=resource_register kind=file name=/tmp/rivet-9/f\n",
            "cmd=resource_register kind=pid name=1234:77\n",
            // Twice is once.
            "cmd=resource_register kind=shm name=rivet-9-seg\n",
        ] {
            assert_eq!(ask(&mut s, 1, line), ok, "{line}");
        }
        assert_eq!(
            ask(&mut s, 2, "cmd=resource_register kind=shm name=other\n"),
            ok
        );
        // Released (freed by the rank itself): not handed over.
        assert_eq!(
            ask(&mut s, 1, "cmd=resource_release kind=pid name=1234:77\n"),
            "cmd=resource_release_result rc=0\n"
        );
        assert_eq!(
            ask(&mut s, 1, "cmd=resource_release kind=pid name=1234:77\n"),
            "cmd=resource_release_result rc=1 msg=resource_not_registered\n"
        );
        let got: Vec<String> = s
            .take_resources(ns, 0)
            .iter()
            .map(|r| r.to_string())
            .collect();
        assert_eq!(got, ["shm rivet-9-seg", "file /tmp/rivet-9/f"]);
        assert!(s.take_resources(ns, 0).is_empty(), "handed over once");
        assert_eq!(s.take_resources(ns, 1).len(), 1);
    }

    #[test]
    fn bad_requests_get_errors_and_the_connection_goes_on() {
        let (mut s, _) = server(true);
        for (line, reply) in [
            (
                "cmd=resource_register kind=file name=relative\n",
                "cmd=resource_register_result rc=-1",
            ),
            (
                "cmd=resource_register kind=sem name=x\n",
                "cmd=resource_register_result rc=-1",
            ),
            (
                "cmd=resource_release kind=shm name=a/b\n",
                "cmd=resource_release_result rc=-1",
            ),
        ] {
            assert!(ask(&mut s, 1, line).starts_with(reply), "{line}");
        }
        for i in 0..MAX_PER_RANK {
            let line = format!("cmd=resource_register kind=shm name=s{i}\n");
            assert_eq!(ask(&mut s, 1, &line), "cmd=resource_register_result rc=0\n");
        }
        assert_eq!(
            ask(&mut s, 1, "cmd=resource_register kind=shm name=one-more\n"),
            "cmd=resource_register_result rc=1 msg=too_many_resources\n"
        );
        let appnum = ask(&mut s, 1, "cmd=get_appnum\n");
        assert!(
            appnum.starts_with("cmd=appnum") && !appnum.contains("rc=-"),
            "{appnum}"
        );
    }

    /// Seed 002: a process manager that does not free resources must
    /// answer with an error, so the rank knows to clean up itself.
    #[test]
    fn a_server_that_does_not_free_resources_answers_with_an_error() {
        let (mut s, ns) = server(false);
        assert_eq!(
            ask(&mut s, 1, "cmd=resource_register kind=shm name=x\n"),
            "cmd=resource_register_result rc=-1 msg=resource_registration_not_served\n"
        );
        assert!(s.take_resources(ns, 0).is_empty());
    }
}
