//! `Client` against `Server` over real sockets: socketpairs (PMI_FD mode)
//! and TCP on 127.0.0.1 (PMI_PORT/initack mode), using only the public API,
//! the way a launcher embeds the server.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::IntoRawFd;
use std::sync::Arc;
use std::thread;

use common::{Hub, Sock};
use rivet_pmi::server::{NamespaceSpec, Output};
use rivet_pmi::wire::{SpawnCommand, SpawnRequest};
use rivet_pmi::{Client, ClientConfig, Error, Transport};

fn spec(name: &str, nodes: &[u32]) -> NamespaceSpec {
    NamespaceSpec {
        name: name.to_string(),
        size: nodes.len() as u32,
        appnum: 0,
        appnum_of_rank: Vec::new(),
        universe_size: 16,
        node_of_rank: nodes.to_vec(),
        attributes: vec![("PMI_hwloc_xmlfile".into(), "/tmp/rivet-topo.xml".into())],
        preput: vec![],
    }
}

/// What each rank does in the socketpair job.
fn rank_work(mut c: Client) -> Result<Vec<String>, Error> {
    let (rank, size) = (c.rank(), c.size());
    c.put(&format!("card-{rank}"), &format!("addr {rank}\\x"))?;
    c.commit()?;
    c.barrier()?;
    let mut cards = Vec::new();
    for r in 0..size {
        cards.push(c.get(&format!("card-{r}"))?);
    }
    assert_eq!(
        c.job_attribute("process_mapping")?.as_deref(),
        Some("(vector,(0,1,2),(1,1,1))")
    );
    assert_eq!(
        c.job_attribute("PMI_hwloc_xmlfile")?.as_deref(),
        Some("/tmp/rivet-topo.xml")
    );
    assert_eq!(c.job_attribute("PMI_nothing")?, None);
    assert!(matches!(c.get("missing"), Err(Error::KeyNotFound { .. })));
    if rank == 0 {
        c.publish_name("ocean", "tag#0$port#7$")?;
    }
    c.barrier()?;
    assert_eq!(c.lookup_name("ocean")?, "tag#0$port#7$");
    c.barrier()?;
    if rank == 0 {
        let req = SpawnRequest {
            commands: vec![SpawnCommand {
                execname: "./worker".into(),
                nprocs: 2,
                args: vec!["--mode".into(), "two words".into()],
                info: vec![("wdir".into(), "/tmp".into())],
            }],
            preput: vec![("PARENT_ROOT_PORT_NAME".into(), "tag#0$port#7$".into())],
        };
        assert_eq!(c.spawn(&req)?, vec![0, 0]);
        c.unpublish_name("ocean")?;
    }
    c.barrier()?;
    c.finalize()?;
    Ok(cards)
}

#[test]
fn three_ranks_over_socketpairs() {
    let (hub, ns) = Hub::new_namespace(spec("rivet_job_1", &[0, 0, 1]));
    let clients: Vec<_> = (0..3u32)
        .map(|rank| {
            let stream = hub.socketpair(u64::from(rank) + 1, ns, rank);
            thread::spawn(move || {
                let c = Client::connect(ClientConfig {
                    transport: Transport::Stream {
                        stream,
                        rank,
                        size: 3,
                    },
                    spawned: false,
                    pmi2: false,
                    jobid: None,
                })?;
                assert_eq!(c.kvs_name(), "rivet_job_1");
                assert_eq!(c.universe_size(), 16);
                assert_eq!(c.server_version(), Some((1, 2)));
                rank_work(c)
            })
        })
        .collect();
    for t in clients {
        let cards = t.join().unwrap().unwrap();
        assert_eq!(cards, vec!["addr 0\\x", "addr 1\\x", "addr 2\\x"]);
    }
    let server = hub.server.lock().unwrap();
    for rank in 0..3 {
        assert!(server.is_finalized(ns, rank));
    }
    let events = hub.events.lock().unwrap();
    let spawns: Vec<&SpawnRequest> = events
        .iter()
        .filter_map(|e| match e {
            Output::Spawn {
                rank: 0, request, ..
            } => Some(request),
            _ => None,
        })
        .collect();
    assert_eq!(spawns.len(), 1);
    assert_eq!(spawns[0].commands[0].args, vec!["--mode", "two words"]);
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Output::Finalized { .. }))
            .count(),
        3
    );
}

#[test]
fn port_mode_with_initack_over_tcp() {
    let (hub, ns) = Hub::new_namespace(spec("rivet_port_job", &[0, 1]));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let acceptor = {
        let hub = Arc::clone(&hub);
        thread::spawn(move || {
            for conn in 100..102 {
                let (sock, _) = listener.accept().unwrap();
                hub.server.lock().unwrap().attach_unidentified(conn, ns);
                let writer = Sock::Tcp(sock.try_clone().unwrap());
                hub.serve(conn, sock, writer);
            }
        })
    };
    let clients: Vec<_> = [1, 0]
        .into_iter()
        .map(|id| {
            let addr = addr.clone();
            thread::spawn(move || -> Result<(u32, String), Error> {
                let mut c = Client::connect(ClientConfig {
                    transport: Transport::Port {
                        addr,
                        pmiid: Some(id),
                        rank: 0,
                        size: 1,
                    },
                    spawned: false,
                    pmi2: false,
                    jobid: None,
                })?;
                assert_eq!((c.rank(), c.size()), (id as u32, 2));
                c.put("who", &format!("rank{}", c.rank())).ok();
                c.put(&format!("k{}", c.rank()), "v")?;
                c.barrier()?;
                let other = c.get(&format!("k{}", 1 - c.rank()))?;
                let map = c.job_attribute("process_mapping")?.unwrap_or_default();
                c.finalize()?;
                Ok((id as u32, format!("{other} {map}")))
            })
        })
        .collect();
    for t in clients {
        let (_, seen) = t.join().unwrap().unwrap();
        assert_eq!(seen, "v (vector,(0,2,1))");
    }
    acceptor.join().unwrap();
}

#[test]
fn pmi_fd_from_the_environment_rules() {
    let (hub, ns) = Hub::new_namespace(spec("rivet_fd_job", &[0]));
    let client_end = hub.socketpair(1, ns, 0);
    let fd = client_end.into_raw_fd();
    let vars: HashMap<&str, String> = [
        ("PMI_FD", fd.to_string()),
        ("PMI_RANK", "0".into()),
        ("PMI_SIZE", "1".into()),
        ("PMI_SPAWNED", "1".into()),
    ]
    .into_iter()
    .collect();
    let config = ClientConfig::from_vars(|k| vars.get(k).cloned()).unwrap();
    let mut c = Client::connect(config).unwrap();
    assert!(c.spawned() && !c.is_singleton());
    c.put("x", "1").unwrap();
    c.barrier().unwrap();
    assert_eq!(c.get("x").unwrap(), "1");
    c.abort(5, "bye now").unwrap();
    // Abort has no reply; wait until the hub saw it.
    for _ in 0..200 {
        if !hub.events.lock().unwrap().is_empty() {
            break;
        }
        thread::sleep(std::time::Duration::from_millis(10));
    }
    let events = hub.events.lock().unwrap();
    assert!(matches!(
        events.as_slice(),
        [Output::Abort { rank: Some(0), exit_code: 5, message: Some(m), .. }] if m == "bye now"
    ));
}

#[test]
fn garbage_connection_is_closed_while_others_work() {
    let (hub, ns) = Hub::new_namespace(spec("rivet_mixed", &[0, 0]));
    let mut junk = hub.socketpair(1, ns, 0);
    let good = hub.socketpair(2, ns, 1);
    junk.write_all(b"cmd=get_maxes\n\x16\x03\x01\x00\xa5")
        .unwrap();
    let mut reply = Vec::new();
    // The hub answers the good line, then shuts the socket: read to EOF.
    junk.read_to_end(&mut reply).unwrap();
    assert_eq!(
        reply,
        b"cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n"
    );
    let mut c = Client::connect(ClientConfig {
        transport: Transport::Stream {
            stream: good,
            rank: 1,
            size: 2,
        },
        spawned: false,
        pmi2: false,
        jobid: None,
    })
    .unwrap();
    c.put("alive", "yes").unwrap();
    assert_eq!(c.get("alive").unwrap(), "yes");
    // The hub records the close on its own thread, which may come after
    // the socket's EOF reached us: wait for it, bounded.
    let closed = || {
        hub.events
            .lock()
            .unwrap()
            .iter()
            .any(|e| matches!(e, Output::Close { conn: 1, .. }))
    };
    for _ in 0..500 {
        if closed() {
            break;
        }
        thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(closed(), "the garbage connection was never closed");
}
