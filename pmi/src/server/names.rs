//! The name service behind `MPI_Publish_name` / `MPI_Lookup_name`.
//!
//! One table per server, shared by all namespaces, so a spawned job can look
//! up what its parent published. Like Hydra, publishing a taken name and
//! unpublishing or looking up a missing one are errors, not overwrites.
//! Unlike Hydra, a name published by a known process (the PMI server
//! knows each rank's namespace and rank) can be unpublished only by that
//! process: nobody else can take a service away.
//!
//! [`NameRequest`] is one of the three name queries; [`NameService::answer`]
//! answers it from a table. [`NameServer`] is the sans-IO core of a
//! standalone name server (Hydra's `hydra_nameserver`, `rivetrun
//! --name-server`): the same table behind the PMI-1 line subset
//! `publish_name` / `lookup_name` / `unpublish_name`, for many connections.

use std::collections::HashMap;

use crate::server::{reply_to, ConnId, GroupHub, Output};
use crate::wire::{response_name, Frame, Framer, Message};

/// Most names one server holds; bounds memory against a runaway client.
pub const MAX_NAMES: usize = 65536;

/// Why a name-service request failed; `code()` is the wire `msg=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameError {
    /// `publish_name` of a service that is already published.
    AlreadyPublished,
    /// `lookup_name`/`unpublish_name` of an unknown service.
    NotFound,
    /// The table is full.
    Full,
    /// `unpublish_name` by a process other than the publisher.
    NotPublisher,
}

impl NameError {
    /// The `msg=` token sent to the client (Hydra's wording where it has one).
    pub fn code(self) -> &'static str {
        match self {
            NameError::AlreadyPublished => "key_already_present",
            NameError::NotFound => "service_not_found",
            NameError::Full => "name_table_full",
            NameError::NotPublisher => "not_the_publisher",
        }
    }
}

/// Service name → port name, and who published it (`None`: someone the
/// server cannot tell apart, as a standalone name server's clients).
#[derive(Debug, Default)]
pub struct NameService {
    ports: HashMap<String, (String, Option<String>)>,
}

impl NameService {
    /// An empty table.
    pub fn new() -> NameService {
        NameService::default()
    }

    /// Publish `service` at `port`; a taken name is refused.
    pub fn publish(&mut self, service: &str, port: &str) -> Result<(), NameError> {
        self.publish_by(service, port, None)
    }

    /// Publish on behalf of `owner`, who alone may unpublish it.
    pub fn publish_by(
        &mut self,
        service: &str,
        port: &str,
        owner: Option<&str>,
    ) -> Result<(), NameError> {
        if self.ports.contains_key(service) {
            return Err(NameError::AlreadyPublished);
        }
        if self.ports.len() >= MAX_NAMES {
            return Err(NameError::Full);
        }
        self.ports.insert(
            service.to_string(),
            (port.to_string(), owner.map(str::to_string)),
        );
        Ok(())
    }

    /// Remove `service` (published by nobody in particular).
    pub fn unpublish(&mut self, service: &str) -> Result<(), NameError> {
        self.unpublish_by(service, None)
    }

    /// Remove `service` on behalf of `caller`: refused unless the name was
    /// published by nobody in particular or by `caller`.
    pub fn unpublish_by(&mut self, service: &str, caller: Option<&str>) -> Result<(), NameError> {
        let (_, owner) = self.ports.get(service).ok_or(NameError::NotFound)?;
        if owner.is_some() && owner.as_deref() != caller {
            return Err(NameError::NotPublisher);
        }
        self.ports.remove(service);
        Ok(())
    }

    /// Who published `service` (the `owner` given to [`Self::publish_by`]).
    pub fn publisher(&self, service: &str) -> Option<&str> {
        self.ports
            .get(service)
            .and_then(|(_, owner)| owner.as_deref())
    }

    /// Remove every name `owner` published (PMIx's unpublish without keys);
    /// how many there were.
    pub fn unpublish_all_by(&mut self, owner: &str) -> usize {
        let before = self.ports.len();
        self.ports.retain(|_, (_, o)| o.as_deref() != Some(owner));
        before - self.ports.len()
    }

    /// The port `service` was published at.
    pub fn lookup(&self, service: &str) -> Result<&str, NameError> {
        self.ports
            .get(service)
            .map(|(port, _)| port.as_str())
            .ok_or(NameError::NotFound)
    }

    /// Carry out `request` and return the wire answer (`rc=1` with Hydra's
    /// `msg` token on a refusal).
    pub fn answer(&mut self, request: &NameRequest) -> Message {
        self.answer_for(request, None)
    }

    /// [`Self::answer`] for a request from `caller` (who publishes, or may
    /// unpublish only its own names).
    pub fn answer_for(&mut self, request: &NameRequest, caller: Option<&str>) -> Message {
        let query = request.query();
        let refused = |e: NameError| Message::error_reply(Some(query), 1, e.code());
        match request {
            NameRequest::Publish { service, port } => {
                match self.publish_by(service, port, caller) {
                    Ok(()) => Message::PublishResult { rc: 0, msg: None },
                    Err(e) => refused(e),
                }
            }
            NameRequest::Unpublish { service } => match self.unpublish_by(service, caller) {
                Ok(()) => Message::UnpublishResult { rc: 0, msg: None },
                Err(e) => refused(e),
            },
            NameRequest::Lookup { service } => match self.lookup(service) {
                Ok(port) => Message::LookupResult {
                    rc: 0,
                    port: Some(port.to_string()),
                    msg: None,
                },
                Err(e) => refused(e),
            },
        }
    }
}

/// One name-service query, as a rank sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameRequest {
    /// `cmd=publish_name service=S port=P`
    Publish { service: String, port: String },
    /// `cmd=lookup_name service=S`
    Lookup { service: String },
    /// `cmd=unpublish_name service=S`
    Unpublish { service: String },
}

impl NameRequest {
    /// The name query in `msg`, if it is one.
    pub fn from_message(msg: Message) -> Result<NameRequest, Message> {
        match msg {
            Message::PublishName { service, port } => Ok(NameRequest::Publish { service, port }),
            Message::LookupName { service } => Ok(NameRequest::Lookup { service }),
            Message::UnpublishName { service } => Ok(NameRequest::Unpublish { service }),
            other => Err(other),
        }
    }

    /// The query as a wire message.
    pub fn to_message(&self) -> Message {
        match self {
            NameRequest::Publish { service, port } => Message::PublishName {
                service: service.clone(),
                port: port.clone(),
            },
            NameRequest::Lookup { service } => Message::LookupName {
                service: service.clone(),
            },
            NameRequest::Unpublish { service } => Message::UnpublishName {
                service: service.clone(),
            },
        }
    }

    /// The query's `cmd=` name.
    pub fn query(&self) -> &'static str {
        match self {
            NameRequest::Publish { .. } => "publish_name",
            NameRequest::Lookup { .. } => "lookup_name",
            NameRequest::Unpublish { .. } => "unpublish_name",
        }
    }

    /// The `cmd=` of the answer this query waits for.
    pub fn response(&self) -> &'static str {
        response_name(self.query()).unwrap_or("error")
    }

    /// The service the query is about.
    pub fn service(&self) -> &str {
        match self {
            NameRequest::Publish { service, .. }
            | NameRequest::Lookup { service }
            | NameRequest::Unpublish { service } => service,
        }
    }

    /// True if `reply` is a well-formed answer to this query (a successful
    /// lookup must carry a port).
    pub fn accepts(&self, reply: &Message) -> bool {
        if reply.cmd() != self.response() || reply.is_query() {
            return false;
        }
        !matches!(
            reply,
            Message::LookupResult {
                rc: 0,
                port: None,
                ..
            }
        )
    }
}

/// The sans-IO core of a standalone name server: one [`NameService`] served
/// to many connections over the PMI-1 lines `publish_name`, `lookup_name`
/// and `unpublish_name`, and the [`GroupHub`] for group connects across
/// jobs (`group_job`, `group_relay`, `group_ended`; see `hub.rs`).
///
/// The launcher accepts connections ([`NameServer::open`]), feeds their
/// bytes to [`NameServer::receive`] and performs the [`Output`]s: `Send`
/// answers (to any connection: the hub's answers and events go to the
/// links of the jobs concerned), `Close` for a stream that is not PMI text,
/// a line that does not parse, or a command outside the subset (answered
/// with `cmd=error` first). A connection may send one request or many; one
/// that closes is reported with [`NameServer::close`].
#[derive(Debug, Default)]
pub struct NameServer {
    names: NameService,
    conns: HashMap<ConnId, NsConn>,
    hub: GroupHub,
}

/// One connection to the name server.
#[derive(Debug, Default)]
struct NsConn {
    framer: Framer,
    /// After `cmd=group_relay`: the process the next line is from.
    relay: Option<(String, u32)>,
}

impl NameServer {
    /// An empty name server.
    pub fn new() -> NameServer {
        NameServer::default()
    }

    /// A new connection.
    pub fn open(&mut self, conn: ConnId) {
        self.conns.insert(conn, NsConn::default());
    }

    /// The connection is gone: if it was a job's link, the job's processes
    /// have ended (the hub tells the groups they were in).
    pub fn close(&mut self, conn: ConnId, out: &mut Vec<Output>) {
        self.conns.remove(&conn);
        self.hub.link_closed(conn, out);
    }

    /// Connections currently open.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// The table, for inspection.
    pub fn names(&self) -> &NameService {
        &self.names
    }

    /// The group hub, for inspection.
    pub fn hub(&self) -> &GroupHub {
        &self.hub
    }

    /// Bytes read from `conn`, at any split point.
    pub fn receive(&mut self, conn: ConnId, bytes: &[u8], out: &mut Vec<Output>) {
        let Some(c) = self.conns.get_mut(&conn) else {
            out.push(Output::Close {
                conn,
                reason: "bytes from a connection that was never opened".to_string(),
            });
            return;
        };
        let mut frames = Vec::new();
        let fed = c.framer.feed(bytes, &mut frames);
        for frame in frames {
            if let Err(reason) = self.frame(conn, frame, out) {
                return self.refuse(conn, reason, out);
            }
        }
        if let Err(e) = fed {
            self.refuse(conn, e.to_string(), out);
        }
    }

    /// Forget `conn` (a job's link: its processes have ended) and have the
    /// launcher close it.
    fn refuse(&mut self, conn: ConnId, reason: String, out: &mut Vec<Output>) {
        self.conns.remove(&conn);
        self.hub.link_closed(conn, out);
        out.push(Output::Close { conn, reason });
    }

    /// One frame from `conn`; `Err` closes the connection.
    fn frame(&mut self, conn: ConnId, frame: Frame, out: &mut Vec<Output>) -> Result<(), String> {
        let msg = match frame {
            Frame::Message(msg) => msg,
            Frame::Invalid { error, .. } => return Err(format!("unreadable request: {error}")),
        };
        let relay = self.conns.get_mut(&conn).and_then(|c| c.relay.take());
        if let Some((nspace, rank)) = relay {
            return self.hub.relay(conn, &nspace, rank, &msg, out);
        }
        let msg = match NameRequest::from_message(msg) {
            Ok(request) => {
                let reply = self.names.answer(&request);
                reply_to(out, conn, &reply);
                return Ok(());
            }
            Err(other) => other,
        };
        match msg {
            Message::GroupJob {
                nspace,
                size,
                cluster,
            } => {
                let reply = self.hub.register(conn, &nspace, size, cluster.as_deref());
                reply_to(out, conn, &reply);
                Ok(())
            }
            Message::GroupRelay {
                nspace,
                rank,
                lines: 1,
            } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.relay = Some((nspace, rank));
                }
                Ok(())
            }
            Message::GroupEnded { nspace, rank } => self.hub.ended(conn, &nspace, rank, out),
            other => {
                let msg = format!("unsupported_command_{}", other.cmd());
                reply_to(out, conn, &Message::error_reply(None, -1, msg));
                Err(format!(
                    "cmd={} is not served here (a name server answers publish_name, \
                     lookup_name, unpublish_name and the group_job, group_relay lines=1 \
                     and group_ended of a job's rivetrun)",
                    other.cmd()
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_publishers_and_drops_all_of_ones_names() {
        let mut n = NameService::new();
        n.publish_by("a", "p1", Some("0:1")).unwrap();
        n.publish_by("b", "p2", Some("0:1")).unwrap();
        n.publish_by("c", "p3", Some("0:2")).unwrap();
        n.publish("d", "p4").unwrap();
        assert_eq!(n.publisher("a"), Some("0:1"));
        assert_eq!(n.publisher("d"), None);
        assert_eq!(n.unpublish_all_by("0:1"), 2);
        assert_eq!(n.lookup("a"), Err(NameError::NotFound));
        assert_eq!(n.lookup("c"), Ok("p3"));
        assert_eq!(n.lookup("d"), Ok("p4"));
        assert_eq!(n.unpublish_all_by("0:1"), 0);
    }

    #[test]
    fn publish_lookup_unpublish() {
        let mut n = NameService::new();
        assert_eq!(n.lookup("a"), Err(NameError::NotFound));
        n.publish("a", "port-a").unwrap();
        assert_eq!(n.publish("a", "other"), Err(NameError::AlreadyPublished));
        assert_eq!(n.lookup("a"), Ok("port-a"));
        n.unpublish("a").unwrap();
        assert_eq!(n.unpublish("a"), Err(NameError::NotFound));
        n.publish("a", "again").unwrap();
        assert_eq!(n.lookup("a"), Ok("again"));
    }

    #[test]
    fn only_the_publisher_may_unpublish() {
        let mut n = NameService::new();
        n.publish_by("ocean", "port-1", Some("0:1")).unwrap();
        for stranger in [None, Some("0:2"), Some("1:1")] {
            assert_eq!(
                n.unpublish_by("ocean", stranger),
                Err(NameError::NotPublisher),
                "{stranger:?}"
            );
        }
        assert_eq!(n.lookup("ocean"), Ok("port-1"));
        n.unpublish_by("ocean", Some("0:1")).unwrap();
        assert_eq!(n.lookup("ocean"), Err(NameError::NotFound));
        // A name nobody in particular published: anyone may remove it.
        n.publish_by("sea", "port-2", None).unwrap();
        n.unpublish_by("sea", Some("3:3")).unwrap();
    }

    fn sent(out: &[Output]) -> String {
        out.iter()
            .map(|o| match o {
                Output::Send { bytes, .. } => String::from_utf8(bytes.clone()).unwrap(),
                Output::Close { .. } => "<close>\n".to_string(),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[test]
    fn name_server_answers_the_subset_to_many_connections() {
        let mut ns = NameServer::new();
        ns.open(1);
        ns.open(2);
        let mut out = Vec::new();
        // Split anywhere; two requests in one read.
        ns.receive(1, b"cmd=publish_name service=ocean po", &mut out);
        assert!(out.is_empty());
        ns.receive(
            1,
            b"rt=tag#0$port#7$\ncmd=lookup_name service=ocean\n",
            &mut out,
        );
        assert_eq!(
            sent(&out),
            "cmd=publish_result rc=0\ncmd=lookup_result rc=0 port=tag#0$port#7$\n"
        );
        for (q, a) in [
            (
                "cmd=publish_name service=ocean port=x\n",
                "cmd=publish_result rc=1 msg=key_already_present\n",
            ),
            (
                "cmd=lookup_name service=sea\n",
                "cmd=lookup_result rc=1 msg=service_not_found\n",
            ),
            (
                "cmd=unpublish_name service=ocean\n",
                "cmd=unpublish_result rc=0\n",
            ),
            (
                "cmd=unpublish_name service=ocean\n",
                "cmd=unpublish_result rc=1 msg=service_not_found\n",
            ),
        ] {
            out.clear();
            ns.receive(2, q.as_bytes(), &mut out);
            assert_eq!(sent(&out), a, "{q}");
        }
        assert_eq!(ns.connections(), 2);
    }

    #[test]
    fn name_server_closes_garbage_and_other_commands() {
        let mut ns = NameServer::new();
        for (conn, bytes, want) in [
            (1, &b"hello there\n"[..], "<close>\n"),
            (2, &b"\xff\xfe\n"[..], "<close>\n"),
            (
                3,
                &b"cmd=get key=x\n"[..],
                "cmd=error rc=-1 msg=unsupported_command_get\n<close>\n",
            ),
            (4, &b"cmd=lookup_name\n"[..], "<close>\n"),
            (5, &b"\x00"[..], "<close>\n"),
        ] {
            ns.open(conn);
            let mut out = Vec::new();
            ns.receive(conn, bytes, &mut out);
            assert_eq!(sent(&out), want, "{bytes:?}");
        }
        assert_eq!(ns.connections(), 0);
        // Unknown connections are closed, never a panic.
        let mut out = Vec::new();
        ns.receive(77, b"cmd=lookup_name service=a\n", &mut out);
        assert_eq!(sent(&out), "<close>\n");
    }

    #[test]
    fn name_requests_round_trip_and_check_answers() {
        let r = NameRequest::Publish {
            service: "s".into(),
            port: "p".into(),
        };
        assert_eq!(NameRequest::from_message(r.to_message()), Ok(r.clone()));
        assert!(r.accepts(&Message::PublishResult { rc: 1, msg: None }));
        assert!(!r.accepts(&Message::LookupResult {
            rc: 0,
            port: Some("p".into()),
            msg: None
        }));
        let l = NameRequest::Lookup {
            service: "s".into(),
        };
        assert!(!l.accepts(&Message::LookupResult {
            rc: 0,
            port: None,
            msg: None
        }));
        assert_eq!(l.response(), "lookup_result");
    }
}
