//! A minimal launcher for tests: one reader thread per connection around a
//! shared `Server`, performing its outputs over real sockets.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use rivet_pmi::server::{ConnId, NamespaceSpec, NsId, Output, Server, Spawned};

/// The job id the hub answers every spawn with (it starts nothing).
#[allow(dead_code)]
pub const SPAWNED_JOB: &str = "rivet_spawned_job";

/// Either kind of socket, so the hub can write and shut down.
pub enum Sock {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Sock {
    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Sock::Unix(s) => s.write_all(b),
            Sock::Tcp(s) => s.write_all(b),
        }
    }
    fn shutdown(&self) {
        let _ = match self {
            Sock::Unix(s) => s.shutdown(Shutdown::Both),
            Sock::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }
}

/// A minimal launcher: one reader thread per connection, a shared server.
#[derive(Default)]
pub struct Hub {
    pub server: Mutex<Server>,
    pub writers: Mutex<HashMap<ConnId, Sock>>,
    pub events: Mutex<Vec<Output>>,
}

impl Hub {
    pub fn new_namespace(spec: NamespaceSpec) -> (Arc<Hub>, NsId) {
        let hub = Arc::new(Hub::default());
        let ns = hub.server.lock().unwrap().create_namespace(spec).unwrap();
        (hub, ns)
    }

    pub fn dispatch(&self, outputs: Vec<Output>) {
        // Record what the server reports before answering anyone: a
        // client that got its answer (finalize_ack) may return, and the
        // test look at the events, before a later output is handled.
        let (io, reports): (Vec<Output>, Vec<Output>) = outputs.into_iter().partition(|o| {
            matches!(
                o,
                Output::Send { .. }
                    | Output::SendAll { .. }
                    | Output::Close { .. }
                    | Output::Spawn { .. }
            )
        });
        self.events.lock().unwrap().extend(reports);
        for o in io {
            match o {
                Output::Send { conn, bytes } => {
                    if let Some(w) = self.writers.lock().unwrap().get_mut(&conn) {
                        let _ = w.write_all(&bytes);
                    }
                }
                Output::SendAll { conns, bytes } => {
                    let mut writers = self.writers.lock().unwrap();
                    for conn in conns {
                        if let Some(w) = writers.get_mut(&conn) {
                            let _ = w.write_all(&bytes);
                        }
                    }
                }
                Output::Close { conn, .. } => {
                    if let Some(w) = self.writers.lock().unwrap().remove(&conn) {
                        w.shutdown();
                    }
                    self.events.lock().unwrap().push(Output::Close {
                        conn,
                        reason: String::new(),
                    });
                }
                Output::Spawn {
                    conn,
                    ns,
                    rank,
                    request,
                } => {
                    let codes = vec![0; request.total_procs() as usize];
                    self.events.lock().unwrap().push(Output::Spawn {
                        conn,
                        ns,
                        rank,
                        request,
                    });
                    let mut more = Vec::new();
                    self.server.lock().unwrap().spawn_done(
                        conn,
                        Ok(Spawned {
                            jobid: SPAWNED_JOB.into(),
                            errcodes: codes,
                        }),
                        &mut more,
                    );
                    self.dispatch(more);
                }
                other => self.events.lock().unwrap().push(other),
            }
        }
    }

    /// The launcher reaped rank `rank` of `ns`: tell the server, carry out
    /// what follows.
    pub fn process_ended(&self, ns: NsId, rank: u32) {
        let mut out = Vec::new();
        self.server
            .lock()
            .unwrap()
            .process_ended(ns, rank, &mut out);
        self.dispatch(out);
    }

    /// Serve `conn`: `reader` is the server's end, `writer` a clone of it.
    pub fn serve(
        self: &Arc<Self>,
        conn: ConnId,
        mut reader: impl Read + Send + 'static,
        writer: Sock,
    ) -> JoinHandle<()> {
        self.writers.lock().unwrap().insert(conn, writer);
        let hub = Arc::clone(self);
        thread::spawn(move || {
            let mut buf = [0u8; 777]; // odd size: replies and requests split anywhere
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let mut out = Vec::new();
                hub.server
                    .lock()
                    .unwrap()
                    .receive(conn, &buf[..n], &mut out);
                hub.dispatch(out);
            }
            hub.server.lock().unwrap().detach(conn);
        })
    }

    /// PMI_FD mode: a socketpair per rank; returns the client's end.
    pub fn socketpair(self: &Arc<Self>, conn: ConnId, ns: NsId, rank: u32) -> UnixStream {
        let (client_end, server_end) = UnixStream::pair().unwrap();
        self.server.lock().unwrap().attach(conn, ns, rank);
        let writer = Sock::Unix(server_end.try_clone().unwrap());
        self.serve(conn, server_end, writer);
        client_end
    }
}
