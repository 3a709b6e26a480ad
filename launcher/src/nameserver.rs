//! The name server (`rivetrun --name-server`, Hydra's `hydra_nameserver`)
//! and the launcher's side of using one (`rivetrun --nameserver HOST:PORT`).
//!
//! The server listens on TCP, prints `HOST:PORT` on stdout and answers the
//! PMI-1 lines `publish_name`, `lookup_name` and `unpublish_name` from one
//! table (`rivet_pmi::server::NameServer`, the same `NameService` a job's
//! own PMI server uses) until SIGINT or SIGTERM. A connection may carry one
//! request or many; one that sends anything else is closed.
//!
//! [`ask`] is what a job's rivetrun does with a rank's name request when it
//! uses a name server: one connection per request, bounded waits.

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use rivet_pmi::server::{ConnId, NameRequest, NameServer, Output};
use rivet_pmi::wire::{Frame, Framer, Message};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;

use crate::error::LaunchError;
use crate::nonblocking::{interest, write_unsent};

/// How long [`ask`] waits for the TCP connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long [`ask`] waits for the answer once connected.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// Most connections the name server holds at once; more are refused.
const MAX_CONNS: usize = 1024;
/// Answers a client may leave unread before it is dropped.
const MAX_UNSENT: usize = 1 << 20;

const SIGNALS: Token = Token(0);
const LISTENER: Token = Token(1);

/// Check a `HOST:PORT` name-server address.
pub fn check_addr(addr: &str) -> Result<String, String> {
    match addr.trim().rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Ok(addr.trim().to_string())
        }
        _ => Err(format!(
            "name server address {addr:?} is not HOST:PORT (what `rivetrun --name-server` prints)"
        )),
    }
}

/// Ask the name server at `addr` one question; the answer as sent, or why
/// there is none. Connecting takes at most [`CONNECT_TIMEOUT`] per address,
/// the answer at most [`REPLY_TIMEOUT`] (resolving `HOST` is the system
/// resolver's business).
pub fn ask(addr: &str, request: &NameRequest) -> Result<Message, String> {
    let targets: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve name server address {addr}: {e}"))?
        .collect();
    let mut last = None;
    let mut stream = None;
    for target in &targets {
        match std::net::TcpStream::connect_timeout(target, CONNECT_TIMEOUT) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let mut stream = stream.ok_or_else(|| match last {
        Some(e) if e.kind() == ErrorKind::TimedOut => format!(
            "cannot connect to name server {addr}: no answer within {}s",
            CONNECT_TIMEOUT.as_secs()
        ),
        Some(e) => format!("cannot connect to name server {addr}: {e}"),
        None => format!("name server address {addr} resolves to nothing"),
    })?;
    let _ = stream.set_nodelay(true);
    let bytes = request
        .to_message()
        .encode()
        .map_err(|e| format!("cannot send the request: {e}"))?;
    stream
        .set_write_timeout(Some(REPLY_TIMEOUT))
        .and_then(|()| stream.write_all(&bytes))
        .map_err(|e| format!("sending to name server {addr}: {e}"))?;
    let deadline = Instant::now() + REPLY_TIMEOUT;
    let mut framer = Framer::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "name server {addr} did not answer within {}s",
                REPLY_TIMEOUT.as_secs()
            ));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| format!("reading from name server {addr}: {e}"))?;
        let n = match stream.read(&mut buf) {
            Ok(0) => {
                return Err(format!(
                    "name server {addr} closed the connection without answering"
                ))
            }
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading from name server {addr}: {e}")),
        };
        let mut frames = Vec::new();
        let fed = framer.feed(&buf[..n], &mut frames);
        if let Some(frame) = frames.into_iter().next() {
            return match frame {
                Frame::Message(m) => Ok(m),
                Frame::Invalid { error, .. } => Err(format!(
                    "name server {addr} sent an unreadable answer: {error}"
                )),
            };
        }
        fed.map_err(|e| format!("name server {addr} does not speak PMI: {e}"))?;
    }
}

struct Client {
    stream: TcpStream,
    peer: Option<SocketAddr>,
    unsent: Vec<u8>,
    wants_write: bool,
}

/// Run the name server on `port` (0: any free port) until SIGINT/SIGTERM;
/// returns rivetrun's exit code.
pub fn serve(port: u16, hostname: &str) -> Result<i32, LaunchError> {
    let mut poll = Poll::new().map_err(LaunchError::Io)?;
    // Signals first, so one that arrives right after the address is printed is not missed.
    let mut signals = Signals::new([SIGINT, SIGTERM]).map_err(LaunchError::Io)?;
    poll.registry()
        .register(&mut signals, SIGNALS, Interest::READABLE)
        .map_err(LaunchError::Io)?;
    let bind = SocketAddr::from(([0, 0, 0, 0], port));
    let mut listener = TcpListener::bind(bind).map_err(|e| {
        LaunchError::Io(io::Error::new(
            e.kind(),
            format!("name server cannot listen on port {port}: {e}"),
        ))
    })?;
    let port = listener.local_addr().map_err(LaunchError::Io)?.port();
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .map_err(LaunchError::Io)?;
    {
        let mut out = io::stdout().lock();
        // A closed stdout only means nobody reads the address.
        let _ = writeln!(out, "{hostname}:{port}").and_then(|()| out.flush());
    }

    let mut server = NameServer::new();
    let mut clients: HashMap<Token, Client> = HashMap::new();
    let mut next = 2usize;
    let mut events = Events::with_capacity(256);
    let mut buf = vec![0u8; 16384];
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(LaunchError::Io(e));
        }
        for event in events.iter() {
            match event.token() {
                SIGNALS => {
                    if signals.pending().any(|s| s == SIGINT || s == SIGTERM) {
                        return Ok(0);
                    }
                }
                LISTENER => loop {
                    match listener.accept() {
                        Ok((mut stream, peer)) => {
                            if clients.len() >= MAX_CONNS {
                                eprintln!(
                                    "rivetrun: name server: {MAX_CONNS} connections open; \
                                     refusing one from {peer}"
                                );
                                continue;
                            }
                            let token = Token(next);
                            next += 1;
                            if poll
                                .registry()
                                .register(&mut stream, token, Interest::READABLE)
                                .is_err()
                            {
                                continue;
                            }
                            server.open(token.0 as ConnId);
                            clients.insert(
                                token,
                                Client {
                                    stream,
                                    peer: Some(peer),
                                    unsent: Vec::new(),
                                    wants_write: false,
                                },
                            );
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        Err(e) => {
                            // Out of descriptors and the like: the clients we have go on.
                            eprintln!("rivetrun: name server: accept failed: {e}");
                            break;
                        }
                    }
                },
                token => {
                    let mut outputs = Vec::new();
                    let close = serve_client(
                        &poll,
                        &mut server,
                        &mut clients,
                        token,
                        event.is_writable(),
                        &mut buf,
                        &mut outputs,
                    );
                    if let Some(reason) = close {
                        drop_client(
                            &poll,
                            &mut server,
                            &mut clients,
                            token,
                            reason,
                            &mut outputs,
                        );
                    }
                    deliver(&poll, &mut server, &mut clients, outputs);
                }
            }
        }
    }
}

/// Forget a client: the hub hears its job's processes ended.
fn drop_client(
    poll: &Poll,
    server: &mut NameServer,
    clients: &mut HashMap<Token, Client>,
    token: Token,
    reason: Option<String>,
    outputs: &mut Vec<Output>,
) {
    if let Some(mut c) = clients.remove(&token) {
        if let Some(reason) = reason {
            let peer = c.peer.map_or("?".to_string(), |p| p.to_string());
            eprintln!("rivetrun: name server: closing the connection from {peer}: {reason}");
        }
        let _ = poll.registry().deregister(&mut c.stream);
    }
    server.close(token.0 as ConnId, outputs);
}

/// Queue and write what the server sends, to whichever client it is for (a
/// job's link gets the group hub's lines caused by another job); a client
/// that stops reading is dropped, which may send more.
fn deliver(
    poll: &Poll,
    server: &mut NameServer,
    clients: &mut HashMap<Token, Client>,
    mut outputs: Vec<Output>,
) {
    while !outputs.is_empty() {
        let mut more = Vec::new();
        for output in outputs {
            let (token, bytes) = match output {
                Output::Send { conn, bytes } => (Token(conn as usize), bytes),
                _ => continue,
            };
            let Some(c) = clients.get_mut(&token) else {
                continue;
            };
            c.unsent.extend_from_slice(&bytes);
            let drop_why = if c.unsent.len() > MAX_UNSENT {
                Some(Some("the client does not read its answers".to_string()))
            } else if write_unsent(&mut c.stream, &mut c.unsent).is_err() {
                Some(None)
            } else {
                let wants_write = !c.unsent.is_empty();
                if wants_write != c.wants_write {
                    let _ = poll
                        .registry()
                        .reregister(&mut c.stream, token, interest(wants_write));
                    c.wants_write = wants_write;
                }
                None
            };
            if let Some(reason) = drop_why {
                drop_client(poll, server, clients, token, reason, &mut more);
            }
        }
        outputs = more;
    }
}

/// Read what a client sent and hand the server's answers to `outputs`.
/// `Some(reason)` when the connection must be closed (`Some(None)`: the
/// client simply left).
fn serve_client(
    poll: &Poll,
    server: &mut NameServer,
    clients: &mut HashMap<Token, Client>,
    token: Token,
    writable: bool,
    buf: &mut [u8],
    outputs: &mut Vec<Output>,
) -> Option<Option<String>> {
    let c = clients.get_mut(&token)?;
    let conn = token.0 as ConnId;
    let start = outputs.len();
    let mut eof = false;
    loop {
        match c.stream.read(buf) {
            Ok(0) => {
                eof = true;
                break;
            }
            Ok(n) => server.receive(conn, &buf[..n], outputs),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => {
                eof = true;
                break;
            }
        }
        if outputs[start..]
            .iter()
            .any(|o| matches!(o, Output::Close { conn: x, .. } if *x == conn))
        {
            break;
        }
        // Bounded per read: a client that sends requests faster than it
        // reads answers is cut off before its answers pile up.
        let answers: usize = outputs[start..]
            .iter()
            .map(|o| match o {
                Output::Send { conn: x, bytes } if *x == conn => bytes.len(),
                _ => 0,
            })
            .sum();
        if c.unsent.len() + answers > MAX_UNSENT {
            return Some(Some("the client does not read its answers".into()));
        }
    }
    let close = outputs[start..].iter().find_map(|o| match o {
        Output::Close { conn: x, reason } if *x == conn => Some(Some(reason.clone())),
        _ => None,
    });
    if writable {
        if write_unsent(&mut c.stream, &mut c.unsent).is_err() {
            return Some(None);
        }
        if c.unsent.is_empty() && c.wants_write {
            let _ = poll
                .registry()
                .reregister(&mut c.stream, token, interest(false));
            c.wants_write = false;
        }
    }
    if let Some(close) = close {
        // The refusal answer goes out best-effort before the close.
        let mut refusal = Vec::new();
        for o in &outputs[start..] {
            if let Output::Send { conn: x, bytes } = o {
                if *x == conn {
                    refusal.extend_from_slice(bytes);
                }
            }
        }
        c.unsent.extend_from_slice(&refusal);
        let _ = write_unsent(&mut c.stream, &mut c.unsent);
        return Some(close);
    }
    if eof {
        return Some(None);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_host_colon_port() {
        assert_eq!(check_addr("node1:4000").unwrap(), "node1:4000");
        assert_eq!(check_addr("[::1]:80").unwrap(), "[::1]:80");
        for bad in [
            "node1",
            ":80",
            "node1:",
            "node1:0",
            "node1:99999",
            "node1:x",
        ] {
            assert!(check_addr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_unreachable_name_server_is_an_error_not_a_hang() {
        // A port nobody listens on: bind, learn the port, close.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let req = NameRequest::Lookup {
            service: "x".into(),
        };
        let err = ask(&format!("127.0.0.1:{port}"), &req).unwrap_err();
        assert!(err.contains("cannot connect to name server"), "{err}");
    }

    #[test]
    fn a_silent_or_rude_peer_is_an_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            // First client: closed without an answer. Second: garbage.
            let (mut s, _) = listener.accept().unwrap();
            let _ = s.read(&mut [0u8; 256]);
            drop(s);
            let (mut s, _) = listener.accept().unwrap();
            let _ = s.read(&mut [0u8; 256]);
            let _ = s.write_all(b"\x00\x01\x02\n");
            std::thread::sleep(Duration::from_millis(100));
        });
        let req = NameRequest::Lookup {
            service: "x".into(),
        };
        let err = ask(&addr, &req).unwrap_err();
        assert!(err.contains("without answering"), "{err}");
        let err = ask(&addr, &req).unwrap_err();
        assert!(err.contains("does not speak PMI"), "{err}");
        server.join().unwrap();
    }
}
