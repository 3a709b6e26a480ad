//! rivetrun's link to the name server's group hub: group connect across
//! separately started jobs (seed 004; the hub is `rivet_pmi::server::GroupHub`).
//!
//! With `--nameserver`, rivetrun keeps one TCP connection to the name
//! server for the job's life. A thread connects it (bounded by
//! [`nameserver::CONNECT_TIMEOUT`]) and writes what the loop queues: each
//! namespace of the job (`group_job`), the group requests of ranks that
//! name other jobs (`group_relay` + the rank's line), and each process that
//! ends (`group_ended`). A second thread reads what the hub sends back and
//! hands it to the loop as [`LinkEvent`]s through the loop's waker. The
//! loop never blocks on the link. Closing the link (when rivetrun ends)
//! tells the hub that every process of the job has ended.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use mio::Waker;
use rivet_pmi::server::{NsId, Output, Server};
use rivet_pmi::wire::{Frame, Framer, Message};

use crate::nameserver::CONNECT_TIMEOUT;

/// What the hub sent, for the event loop.
#[derive(Debug)]
pub enum LinkEvent {
    /// Lines for process `nspace:rank` (answers and `group_event`s).
    Relay {
        nspace: String,
        rank: u32,
        lines: Vec<Message>,
    },
    /// `nspace:rank` ended still connected to `group` (made without
    /// `early_term`): the job fails.
    Lost {
        nspace: String,
        rank: u32,
        group: String,
    },
    /// The hub refused to register a namespace.
    Refused(String),
    /// The link is gone (or never came up).
    Gone(String),
}

/// The link, as the event loop holds it.
pub struct GroupLink {
    addr: String,
    to_writer: mpsc::Sender<Vec<u8>>,
    events: mpsc::Receiver<LinkEvent>,
    /// The connected stream, for shutting it down on drop.
    stream: Arc<Mutex<Option<TcpStream>>>,
}

impl GroupLink {
    /// Start connecting to the name server at `addr`; `waker` wakes the
    /// loop when events arrive.
    pub fn start(addr: &str, waker: Arc<Waker>) -> std::io::Result<GroupLink> {
        let (to_writer, from_loop) = mpsc::channel::<Vec<u8>>();
        let (tx, events) = mpsc::channel();
        let stream = Arc::new(Mutex::new(None));
        let shared = Arc::clone(&stream);
        let target = addr.to_string();
        std::thread::Builder::new()
            .name("rivetrun-group-link".into())
            .spawn(move || writer(&target, from_loop, tx, waker, shared))?;
        Ok(GroupLink {
            addr: addr.to_string(),
            to_writer,
            events,
            stream,
        })
    }

    /// Start the link for the job of `server` whose namespace is `ns`,
    /// register it, and have `server` forward group requests that name
    /// other jobs. `None` (with a note) if no thread can be started.
    pub fn open(server: &mut Server, ns: NsId, addr: &str, waker: Arc<Waker>) -> Option<GroupLink> {
        match GroupLink::start(addr, waker) {
            Ok(link) => {
                link.register_ns(server, ns);
                server.forward_other_jobs(true);
                Some(link)
            }
            Err(e) => {
                eprintln!(
                    "rivetrun: note: no group connect with other jobs: cannot start a thread: {e}"
                );
                None
            }
        }
    }

    /// Register `server`'s namespace `ns` (the job's, or a spawned one).
    pub fn register_ns(&self, server: &Server, ns: NsId) {
        let result = self.register(
            server.namespace_name(ns),
            server.namespace_size(ns),
            server.cluster(),
        );
        if let Err(why) = result {
            eprintln!("rivetrun: {why}");
        }
    }

    /// Rank `rank` of `server`'s namespace `ns` ended.
    pub fn process_ended(&self, server: &Server, ns: NsId, rank: u32) {
        self.ended(server.namespace_name(ns), rank);
    }

    /// Relay a request `server` handed out as [`Output::GroupForward`].
    pub fn forward_output(
        &self,
        server: &mut Server,
        ns: NsId,
        rank: u32,
        message: Message,
        out: &mut Vec<Output>,
    ) {
        let name = server.namespace_name(ns).to_string();
        if let Err(why) = self.forward(&name, rank, message) {
            server.group_hub_lost(&why, out);
        }
    }

    /// Hand what the hub sent to `server`; outputs for the loop go to
    /// `out` (a member lost is [`Output::GroupMemberLost`], as inside one
    /// job). `false` once the link is gone: the loop drops it.
    pub fn deliver(&self, server: &mut Server, out: &mut Vec<Output>) -> bool {
        for event in self.events() {
            match event {
                LinkEvent::Relay {
                    nspace,
                    rank,
                    lines,
                } => {
                    if let Err(why) = server.group_relayed(&nspace, rank, &lines, out) {
                        return self.lost(server, &why, out);
                    }
                }
                LinkEvent::Lost {
                    nspace,
                    rank,
                    group,
                } => {
                    if let Some(ns) = server.namespace_id(&nspace) {
                        out.push(Output::GroupMemberLost { ns, rank, group });
                    }
                }
                LinkEvent::Refused(why) => eprintln!(
                    "rivetrun: the name server {} refused this job's group service: {why}",
                    self.addr
                ),
                LinkEvent::Gone(why) => return self.lost(server, &why, out),
            }
        }
        true
    }

    /// The link is gone: ranks waiting for the hub are answered, and
    /// group requests naming other jobs are refused from now on.
    fn lost(&self, server: &mut Server, why: &str, out: &mut Vec<Output>) -> bool {
        eprintln!(
            "rivetrun: note: group connect with other jobs is off: name server {}: {why}",
            self.addr
        );
        server.forward_other_jobs(false);
        server.group_hub_lost(why, out);
        false
    }

    fn send(&self, msgs: &[Message]) -> Result<(), String> {
        let mut bytes = Vec::new();
        for m in msgs {
            m.encode_into(&mut bytes)
                .map_err(|e| format!("cannot send cmd={} to the name server: {e}", m.cmd()))?;
        }
        // A writer that is gone has reported why through `events`.
        let _ = self.to_writer.send(bytes);
        Ok(())
    }

    /// Register namespace `nspace` of `size` processes on `cluster`.
    pub fn register(&self, nspace: &str, size: u32, cluster: Option<&str>) -> Result<(), String> {
        self.send(&[Message::GroupJob {
            nspace: nspace.to_string(),
            size,
            cluster: cluster.map(str::to_string),
        }])
    }

    /// Relay `message` of process `nspace:rank` to the hub.
    pub fn forward(&self, nspace: &str, rank: u32, message: Message) -> Result<(), String> {
        let header = Message::GroupRelay {
            nspace: nspace.to_string(),
            rank,
            lines: 1,
        };
        self.send(&[header, message])
    }

    /// Process `nspace:rank` ended.
    pub fn ended(&self, nspace: &str, rank: u32) {
        let _ = self.send(&[Message::GroupEnded {
            nspace: nspace.to_string(),
            rank,
        }]);
    }

    /// What arrived since the last call.
    pub fn events(&self) -> Vec<LinkEvent> {
        self.events.try_iter().collect()
    }
}

impl Drop for GroupLink {
    fn drop(&mut self) {
        if let Ok(guard) = self.stream.lock() {
            if let Some(s) = guard.as_ref() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

fn connect(addr: &str) -> Result<TcpStream, String> {
    let targets: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve name server address {addr}: {e}"))?
        .collect();
    let mut why = format!("name server address {addr} resolves to nothing");
    for t in &targets {
        match TcpStream::connect_timeout(t, CONNECT_TIMEOUT) {
            Ok(s) => return Ok(s),
            Err(e) => why = format!("cannot connect to name server {addr}: {e}"),
        }
    }
    Err(why)
}

/// The writer thread: connect, start the reader, write what the loop
/// queues until the loop drops the link.
fn writer(
    addr: &str,
    from_loop: mpsc::Receiver<Vec<u8>>,
    tx: mpsc::Sender<LinkEvent>,
    waker: Arc<Waker>,
    shared: Arc<Mutex<Option<TcpStream>>>,
) {
    let gone = |why: String| {
        let _ = tx.send(LinkEvent::Gone(why));
        let _ = waker.wake();
    };
    let mut stream = match connect(addr) {
        Ok(s) => s,
        Err(why) => return gone(why),
    };
    let _ = stream.set_nodelay(true);
    let reading = match stream.try_clone() {
        Ok(r) => r,
        Err(e) => return gone(format!("name server link: {e}")),
    };
    if let Ok(mut g) = shared.lock() {
        *g = stream.try_clone().ok();
    }
    let (rtx, rwaker) = (tx.clone(), Arc::clone(&waker));
    let spawned = std::thread::Builder::new()
        .name("rivetrun-group-read".into())
        .spawn(move || reader(reading, rtx, rwaker));
    if let Err(e) = spawned {
        return gone(format!("rivetrun cannot start a thread: {e}"));
    }
    for bytes in from_loop {
        if let Err(e) = stream.write_all(&bytes) {
            return gone(format!("writing to name server {addr}: {e}"));
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// The reader thread: the hub's lines, as events.
fn reader(mut stream: TcpStream, tx: mpsc::Sender<LinkEvent>, waker: Arc<Waker>) {
    let mut framer = Framer::new();
    let mut buf = vec![0u8; 16384];
    // The process the next lines are for, and how many are still to come.
    let mut relay: Option<(String, u32, u32, Vec<Message>)> = None;
    let why = loop {
        let n = match stream.read(&mut buf) {
            Ok(0) => break "the name server closed the connection".to_string(),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => break format!("reading from the name server: {e}"),
        };
        let mut frames = Vec::new();
        let fed = framer.feed(&buf[..n], &mut frames);
        let mut events = Vec::new();
        let mut bad = None;
        for frame in frames {
            let msg = match frame {
                Frame::Message(m) => m,
                Frame::Invalid { error, .. } => {
                    bad = Some(format!("the name server sent an unreadable line: {error}"));
                    break;
                }
            };
            if let Some((_, _, left, lines)) = relay.as_mut() {
                lines.push(msg);
                *left -= 1;
                if *left == 0 {
                    if let Some((nspace, rank, _, lines)) = relay.take() {
                        events.push(LinkEvent::Relay {
                            nspace,
                            rank,
                            lines,
                        });
                    }
                }
                continue;
            }
            match msg {
                Message::GroupRelay {
                    nspace,
                    rank,
                    lines,
                } if lines > 0 => relay = Some((nspace, rank, lines, Vec::new())),
                Message::GroupLost {
                    nspace,
                    rank,
                    group,
                } => events.push(LinkEvent::Lost {
                    nspace,
                    rank,
                    group,
                }),
                Message::GroupJobResult { rc: 0, .. } => {}
                Message::GroupJobResult { msg, .. } | Message::Error { msg, .. } => {
                    events.push(LinkEvent::Refused(msg.unwrap_or_default()))
                }
                other => {
                    bad = Some(format!("the name server sent cmd={}", other.cmd()));
                    break;
                }
            }
        }
        if let (None, Err(e)) = (&bad, fed) {
            bad = Some(format!("the name server does not speak PMI: {e}"));
        }
        let any = !events.is_empty();
        for e in events {
            let _ = tx.send(e);
        }
        if let Some(why) = bad {
            break why;
        }
        if any {
            let _ = waker.wake();
        }
    };
    let _ = tx.send(LinkEvent::Gone(why));
    let _ = waker.wake();
}
