//! `--pmi-port` on a proxy: its node's ranks are not handed a `PMI_FD` but
//! connect to a TCP port the proxy opens on its host's address (the one
//! facing rivetrun), given to them as `PMI_PORT`, with a `PMI_ID` each and
//! the job secret (`RIVET_PMI_SECRET`). The gate is the PMI server core's
//! (`rivet_pmi::server::PortAuth`, the same as single-host rivetrun's): a
//! connection is served nothing but an `initack` with the id of a rank
//! this proxy placed, once, and the job secret when it carries one (Rivet
//! sends it; MPICH sends its id only); anything else is refused and
//! closed, said on the proxy's stderr. An admitted connection is served
//! like a `PMI_FD` rank's from then on (barriers up the proxy tree, KVS,
//! names, spawn). The port closes once every rank placed here has been
//! admitted, or when rivetrun's connection is lost; strangers still
//! unidentified are bounded (`MAX_STRANGERS` beyond the ranks to come), and the rest close with
//! the proxy.

use std::collections::HashMap;
use std::io::{self, ErrorKind};
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mio::net::TcpListener;
use mio::{Interest, Token};
use rivet_pmi::server::{ConnId, PortAuth, MAX_STRANGERS};

use super::{Conn, Loop, Said};
use crate::nonblocking::{interest, PmiStream};

/// The listener's token: below the ids of port connections, above any rank's (`rank + 1`).
pub(super) const LISTENER: Token = Token(FIRST_CONN as usize - 1);

/// Ids of port connections: above the ranks' (`rank + 1`), below spawned
/// processes' (`proxy::spawn`) and PMIx name queries' (`pmix_names::CONN_BASE`).
const FIRST_CONN: ConnId = 1 << 30;

/// A proxy's PMI port before its loop takes it: the listener, where the
/// ranks reach it (`host:port`), and the ids and secret they are given.
pub struct Opened {
    pub listener: std::net::TcpListener,
    pub addr: String,
    pub auth: PortAuth,
}

/// Listen on `ip` for ranks `ranks` of a job of `size` whose secret is `secret`.
pub fn open(ip: IpAddr, size: u32, ranks: &[u32], secret: &str) -> io::Result<Opened> {
    let listener = std::net::TcpListener::bind((ip, 0))?;
    let addr = listener.local_addr()?.to_string();
    let auth = PortAuth::for_ranks(size, ranks, secret.to_string())?;
    Ok(Opened {
        listener,
        addr,
        auth,
    })
}

/// The loop's side of the port.
pub(super) struct Port {
    /// Open until every rank placed here is admitted.
    listener: Option<TcpListener>,
    /// The node's ranks (what they did over PMI), the ones not yet admitted.
    saids: HashMap<u32, Arc<Said>>,
    waiting: usize,
    /// Each admitted rank's connection.
    pub(super) conn_of: HashMap<u32, ConnId>,
    next: ConnId,
    host: String,
}

impl Port {
    pub(super) fn new(
        listener: std::net::TcpListener,
        saids: HashMap<u32, Arc<Said>>,
        host: String,
    ) -> io::Result<Port> {
        listener.set_nonblocking(true)?;
        Ok(Port {
            listener: Some(TcpListener::from_std(listener)),
            waiting: saids.len(),
            saids,
            conn_of: HashMap::new(),
            next: FIRST_CONN,
            host,
        })
    }
}

impl Loop {
    /// Take over the port: its connections are accepted from now on.
    pub(super) fn open_port(&mut self, mut port: Port) {
        if let Some(l) = port.listener.as_mut() {
            if let Err(e) = self
                .poll
                .registry()
                .register(l, LISTENER, Interest::READABLE)
            {
                eprintln!(
                    "rivetrun: proxy on {}: cannot watch the PMI port: {e}",
                    port.host
                );
                // Closed: the ranks fail to connect rather than wait unheard.
                port.listener = None;
            }
        }
        self.port = Some(port);
    }

    /// Accept what is waiting on the port; each connection is served
    /// nothing until it authenticates (`rivet_pmi::server::PortAuth`).
    pub(super) fn accept(&mut self) {
        loop {
            let Some(port) = self.port.as_mut() else {
                return;
            };
            let Some(listener) = port.listener.as_mut() else {
                return;
            };
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    eprintln!(
                        "rivetrun: proxy on {}: accepting on the PMI port: {e}",
                        port.host
                    );
                    return;
                }
            };
            let unidentified = self.conns.values().filter(|c| c.rank.is_none()).count();
            let cap = MAX_STRANGERS + port.waiting;
            if unidentified >= cap {
                eprintln!(
                    "rivetrun: proxy on {}: {cap} PMI_PORT connections wait \
                     unidentified already; closing another",
                    port.host
                );
                continue; // dropped: closed
            }
            let _ = stream.set_nodelay(true);
            let id = port.next;
            port.next += 1;
            let mut stream = PmiStream::Tcp(stream);
            let token = Token(id as usize);
            if self
                .poll
                .registry()
                .register(stream.source(), token, interest(false))
                .is_err()
            {
                continue;
            }
            self.server.attach_unidentified(id, self.ns);
            self.conns.insert(
                id,
                Conn {
                    stream,
                    rank: None,
                    unsent: Vec::new(),
                    said: None,
                },
            );
        }
    }

    /// Connection `conn` may just have been admitted as one of the node's
    /// ranks: from now on it is that rank's. Once all are, the port closes.
    pub(super) fn identify(&mut self, conn: ConnId) {
        let Some(port) = self.port.as_mut() else {
            return;
        };
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.rank.is_some() {
            return;
        }
        let Some((ns, rank)) = self.server.conn_rank(conn) else {
            return;
        };
        if ns != self.ns {
            return;
        }
        let said = port.saids.get(&rank).cloned().unwrap_or_default();
        said.spoke.store(true, Ordering::Relaxed);
        c.rank = Some(rank);
        c.said = Some(said);
        port.conn_of.insert(rank, conn);
        port.waiting = port.waiting.saturating_sub(1);
        if port.waiting == 0 {
            self.close_port();
        }
    }

    /// Stop listening (every rank is in, or the job is ending).
    pub(super) fn close_port(&mut self) {
        if let Some(mut l) = self.port.as_mut().and_then(|p| p.listener.take()) {
            let _ = self.poll.registry().deregister(&mut l);
        }
    }

    /// Rank `rank`'s connection: its own `PMI_FD`'s (`rank + 1`) or the
    /// port connection it was admitted on.
    pub(super) fn conn_of(&self, rank: u32) -> ConnId {
        match self.port.as_ref().and_then(|p| p.conn_of.get(&rank)) {
            Some(&c) => c,
            None => ConnId::from(rank) + 1,
        }
    }

    /// The host, for messages about a port connection.
    pub(super) fn port_host(&self) -> &str {
        self.port.as_ref().map_or("this host", |p| p.host.as_str())
    }
}
