//! `rivetrun --impi-server N [--port P] [--auth LIST]`: the IMPI rendezvous
//! server (seed 003, 2.2.1 and 2.3).
//!
//! It listens on TCP (all IPv4 interfaces), prints `IP:PORT` as its first
//! stdout line and nothing else there. Each connection gets a thread that
//! authenticates it (AUTH first; NONE or KEY, chosen by the `--auth` order
//! among what `IMPI_AUTH_NONE` / `IMPI_AUTH_KEY` offer) and then reads its
//! commands; one main thread owns the state (`rivet_pmi::impi::relay`) and
//! every write. A connection that fails AUTH is closed with a message and
//! does not count; a joined client that hangs up before FINI fails the job.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use rivet_pmi::impi::auth::{self, Available, ClientAuth, ServerAuth};
use rivet_pmi::impi::relay::{ConnId, Output, Relay};
use rivet_pmi::impi::{read_command, Command, CMD_AUTH, DEFAULT_MAX_PAYLOAD};

use crate::error::LaunchError;

/// How long a new connection has to complete AUTH.
const AUTH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one write to a client may block (a client that stops reading).
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Most AUTH payload bytes read (32 masks).
const MAX_AUTH_PAYLOAD: usize = 128;
/// Most connections served at once (each has a thread); more are closed.
const MAX_CONNS: usize = 256;
/// A peer host silent this long (no keepalive answer) fails its connection.
pub const KEEPALIVE: Duration = Duration::from_secs(60);

enum Event {
    Open(ConnId, TcpStream, SocketAddr),
    Ready(ConnId),
    Refused(ConnId, String),
    Cmd(ConnId, Command),
    Closed(ConnId, String),
}

/// Run the server; the exit code.
pub fn serve(size: u32, port: u16, preference: Option<Vec<u32>>) -> Result<i32, LaunchError> {
    let available = Available::from_env().map_err(LaunchError::Usage)?;
    available
        .require_some()
        .map_err(|e| LaunchError::Usage(format!("IMPI server: {e}")))?;
    if let Some(list) = &preference {
        if !list.iter().any(|m| available.methods().contains(m)) {
            return Err(LaunchError::Usage(format!(
                "IMPI server: none of the --auth methods {list:?} is available (offered: {:?}; \
                 1 needs {} set, 0 needs {})",
                available.methods(),
                auth::ENV_KEY,
                auth::ENV_NONE
            )));
        }
    }
    let mut relay = Relay::new(size, DEFAULT_MAX_PAYLOAD).map_err(LaunchError::Usage)?;
    let listener = TcpListener::bind(("0.0.0.0", port)).map_err(|e| {
        LaunchError::Usage(format!("IMPI server: cannot listen on port {port}: {e}"))
    })?;
    let bound = listener.local_addr().map_err(LaunchError::Io)?.port();
    {
        let mut out = io::stdout().lock();
        writeln!(out, "{}:{bound}", super::local_ipv4()).map_err(LaunchError::Io)?;
        out.flush().map_err(LaunchError::Io)?;
    }
    let (tx, rx) = mpsc::channel();
    let policy = Arc::new((available, preference));
    std::thread::Builder::new()
        .name("impi-accept".into())
        .spawn(move || accept_loop(listener, tx, policy))
        .map_err(LaunchError::Io)?;

    let mut writers: HashMap<ConnId, (TcpStream, SocketAddr)> = HashMap::new();
    while let Ok(event) = rx.recv() {
        let outputs = match event {
            Event::Open(id, stream, addr) => {
                writers.insert(id, (stream, addr));
                continue;
            }
            Event::Ready(id) => {
                if let Some((_, addr)) = writers.get(&id) {
                    eprintln!("rivetrun: IMPI server: {addr} authenticated");
                }
                continue;
            }
            Event::Refused(id, why) => {
                eprintln!("rivetrun: IMPI server: {why}");
                if let Some((s, _)) = writers.remove(&id) {
                    let _ = s.shutdown(Shutdown::Both);
                }
                continue;
            }
            Event::Cmd(id, cmd) => relay.command(id, &cmd),
            Event::Closed(id, why) => {
                let name = match (relay.rank_of(id), writers.remove(&id)) {
                    (_, Some((_, addr))) => format!("{why}, from {addr}"),
                    _ => why,
                };
                relay.closed(id, &name)
            }
        };
        let mut pending = outputs;
        while !pending.is_empty() {
            let mut next = Vec::new();
            for o in pending {
                match o {
                    Output::Send(id, bytes) => {
                        let failed = match writers.get_mut(&id) {
                            Some((s, _)) => s.write_all(&bytes).err(),
                            None => None,
                        };
                        if let Some(e) = failed {
                            writers.remove(&id);
                            next.extend(relay.closed(id, &format!("write failed: {e}")));
                        }
                    }
                    Output::Close(id) => {
                        if let Some((s, _)) = writers.remove(&id) {
                            let _ = s.shutdown(Shutdown::Both);
                        }
                    }
                    Output::Note(n) => eprintln!("rivetrun: IMPI server: {n}"),
                    Output::Fail(why) => {
                        eprintln!("rivetrun: IMPI server: error: {why}");
                        for (s, _) in writers.values() {
                            let _ = s.shutdown(Shutdown::Both);
                        }
                        return Ok(1);
                    }
                    Output::Finished => return Ok(0),
                }
            }
            pending = next;
        }
    }
    Err(LaunchError::Usage(
        "IMPI server: the listener stopped".into(),
    ))
}

fn accept_loop(
    listener: TcpListener,
    tx: mpsc::Sender<Event>,
    policy: Arc<(Available, Option<Vec<u32>>)>,
) {
    let mut next: ConnId = 0;
    let live = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let stream = match conn {
            Ok(s) => s,
            Err(_) => {
                // Out of descriptors and the like: do not spin on it.
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if live.load(Ordering::Relaxed) >= MAX_CONNS {
            eprintln!("rivetrun: IMPI server: {MAX_CONNS} connections open; one more refused");
            continue;
        }
        let _ = rivet_netmods::tcp::set_keepalive(&stream, KEEPALIVE);
        let Ok(addr) = stream.peer_addr() else {
            continue;
        };
        let Ok(writer) = stream.try_clone() else {
            continue;
        };
        let _ = writer.set_write_timeout(Some(WRITE_TIMEOUT));
        let _ = stream.set_nodelay(true);
        next += 1;
        let id = next;
        if tx.send(Event::Open(id, writer, addr)).is_err() {
            return;
        }
        let conn_tx = tx.clone();
        let policy = policy.clone();
        let conn_live = live.clone();
        conn_live.fetch_add(1, Ordering::Relaxed);
        let started = std::thread::Builder::new()
            .name(format!("impi-conn-{id}"))
            .spawn(move || {
                serve_conn(id, stream, addr, &conn_tx, &policy);
                conn_live.fetch_sub(1, Ordering::Relaxed);
            });
        if let Err(e) = started {
            live.fetch_sub(1, Ordering::Relaxed);
            let _ = tx.send(Event::Refused(
                id,
                format!("{addr}: no thread to serve it ({e}); closed"),
            ));
        }
    }
}

fn serve_conn(
    id: ConnId,
    mut stream: TcpStream,
    addr: SocketAddr,
    tx: &mpsc::Sender<Event>,
    policy: &(Available, Option<Vec<u32>>),
) {
    let _ = stream.set_read_timeout(Some(AUTH_TIMEOUT));
    if let Err(why) = authenticate(&mut stream, addr, &policy.0, policy.1.as_deref()) {
        let _ = tx.send(Event::Refused(id, why));
        return;
    }
    let _ = stream.set_read_timeout(None);
    let _ = tx.send(Event::Ready(id));
    loop {
        match read_command(&mut stream, DEFAULT_MAX_PAYLOAD) {
            Ok(Some(cmd)) => {
                if tx.send(Event::Cmd(id, cmd)).is_err() {
                    return;
                }
            }
            Ok(None) => {
                let _ = tx.send(Event::Closed(id, "connection closed".into()));
                return;
            }
            Err(e) => {
                let _ = tx.send(Event::Closed(id, e.to_string()));
                return;
            }
        }
    }
}

/// The AUTH exchange of 2.3.3, server side; why the connection is refused.
fn authenticate(
    stream: &mut TcpStream,
    addr: SocketAddr,
    available: &Available,
    preference: Option<&[u32]>,
) -> Result<(), String> {
    let cmd = match read_command(stream, MAX_AUTH_PAYLOAD) {
        Ok(Some(c)) => c,
        Ok(None) => return Err(format!("{addr} closed before AUTH")),
        Err(e) => return Err(format!("{addr}: {e} (before AUTH); closed")),
    };
    if cmd.cmd != CMD_AUTH {
        return Err(format!(
            "{addr} sent {} before AUTH; closed",
            rivet_pmi::impi::command_name(cmd.cmd)
        ));
    }
    let offered = ClientAuth::decode(&cmd.payload).map_err(|e| format!("{addr}: {e}; closed"))?;
    let Some(which) = auth::choose(available, preference, &offered) else {
        return Err(format!(
            "{addr} offers no authentication method this server accepts (client mask {:?}, \
             server methods {:?}); closed",
            offered.masks,
            preference
                .map(|p| p.to_vec())
                .unwrap_or_else(|| available.methods())
        ));
    };
    let reply = ServerAuth {
        which: which as i32,
        len: 0,
    };
    stream
        .write_all(&reply.encode())
        .map_err(|e| format!("{addr}: {e} (during AUTH); closed"))?;
    match which {
        auth::AUTH_NONE => {
            eprintln!(
                "rivetrun: IMPI server: warning: {addr} has authenticated with IMPI_AUTH_NONE"
            );
            Ok(())
        }
        _ => {
            let mut key = [0u8; 8];
            stream
                .read_exact(&mut key)
                .map_err(|e| format!("{addr}: no key ({e}); closed"))?;
            if Some(u64::from_be_bytes(key)) == available.key {
                Ok(())
            } else {
                Err(format!(
                    "{addr} sent a wrong {} key; connection closed",
                    auth::ENV_KEY
                ))
            }
        }
    }
}
