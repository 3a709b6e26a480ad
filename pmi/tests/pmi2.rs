//! PMI-2 `Client`s against the `Server` over real sockets, in one job with
//! PMI-1 clients: the server tells the dialects apart per connection.

mod common;

use std::collections::HashMap;
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
        appnum: 2,
        universe_size: 16,
        node_of_rank: nodes.to_vec(),
        attributes: vec![("PMI_hwloc_xmlfile".into(), "/tmp/rivet-topo.xml".into())],
        ..NamespaceSpec::default()
    }
}

/// What a PMI-2 rank spawns: two commands, arguments, info and a pre-put.
fn child_request(rank: u32) -> SpawnRequest {
    SpawnRequest {
        commands: vec![
            SpawnCommand {
                execname: "./child".into(),
                nprocs: 2,
                args: vec!["a".into(), "b c".into()],
                info: vec![("wdir".into(), "/tmp".into())],
            },
            SpawnCommand {
                execname: "other".into(),
                nprocs: 1,
                args: vec![],
                info: vec![],
            },
        ],
        preput: vec![("PARENT_ROOT_PORT_NAME".into(), format!("port-of-{rank}"))],
    }
}

fn work(mut c: Client) -> Result<Vec<String>, Error> {
    let (rank, size) = (c.rank(), c.size());
    c.put(&format!("card-{rank}"), &format!("tcp:10.0.0.{rank}:7 a=b"))?;
    c.barrier()?;
    let mut cards = Vec::new();
    for r in 0..size {
        cards.push(c.get(&format!("card-{r}"))?);
    }
    assert_eq!(
        c.job_attribute("process_mapping")?.as_deref(),
        Some("(vector,(0,1,2),(1,1,1))")
    );
    assert_eq!(c.job_attribute("PMI_nothing")?, None);
    assert!(matches!(c.get("missing"), Err(Error::KeyNotFound { .. })));
    if rank == 1 {
        c.publish_name("ocean", "tag#0$port#7$")?;
    }
    c.barrier()?;
    assert_eq!(c.lookup_name("ocean")?, "tag#0$port#7$");
    c.barrier()?;
    if c.kind() == "pmi2" {
        // PMI-2's spawn reaches the server as PMI-1's request would, and
        // the answer names the new job.
        assert_eq!(
            c.spawn_job(&child_request(rank))?,
            (vec![0; 3], Some(common::SPAWNED_JOB.to_string()))
        );
        match c.spawn(&SpawnRequest::default()) {
            Err(Error::SpawnFailed { errcodes, message }) => {
                assert!(errcodes.is_empty(), "{errcodes:?}");
                assert!(message.contains("ncmds=0"), "{message}");
            }
            other => panic!("an empty spawn: {other:?}"),
        }
    }
    c.finalize()?;
    Ok(cards)
}

#[test]
fn pmi2_and_pmi1_ranks_in_one_job() {
    let (hub, ns) = Hub::new_namespace(spec("rivet_v2_job", &[0, 0, 1]));
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
                    pmi2: rank != 0,
                    jobid: Some("slurm.0".into()),
                })?;
                let want = if rank == 0 { "pmi1" } else { "pmi2" };
                assert_eq!(c.kind(), want);
                assert_eq!(c.kvs_name(), "rivet_v2_job");
                assert_eq!((c.rank(), c.size(), c.appnum()), (rank, 3, 2));
                assert_eq!(c.universe_size(), 16);
                work(c)
            })
        })
        .collect();
    for t in clients {
        let cards = t.join().unwrap().unwrap();
        assert_eq!(
            cards,
            [
                "tcp:10.0.0.0:7 a=b",
                "tcp:10.0.0.1:7 a=b",
                "tcp:10.0.0.2:7 a=b"
            ]
        );
    }
    let server = hub.server.lock().unwrap();
    for rank in 0..3 {
        assert!(server.is_finalized(ns, rank));
    }
    // The PMI-2 ranks' spawns, as they asked (the empty one never left
    // the server).
    let mut spawns: Vec<(u32, SpawnRequest)> = (hub.events.lock().unwrap().iter())
        .filter_map(|o| match o {
            Output::Spawn { rank, request, .. } => Some((*rank, request.clone())),
            _ => None,
        })
        .collect();
    spawns.sort_by_key(|(rank, _)| *rank);
    assert_eq!(
        spawns,
        [(1, child_request(1)), (2, child_request(2))],
        "the spawns the server passed on"
    );
}

#[test]
fn pmi2_over_pmi_port_after_initack() {
    let (hub, ns) = Hub::new_namespace(spec("rivet_v2_port", &[0, 1]));
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
            thread::spawn(move || -> Result<String, Error> {
                let mut c = Client::connect(ClientConfig {
                    transport: Transport::Port {
                        addr,
                        pmiid: Some(id),
                        rank: 0,
                        size: 1,
                    },
                    spawned: false,
                    pmi2: true,
                    jobid: None,
                })?;
                assert_eq!((c.rank(), c.size(), c.kind()), (id as u32, 2, "pmi2"));
                c.put(&format!("k{}", c.rank()), "v")?;
                c.barrier()?;
                let other = c.get(&format!("k{}", 1 - c.rank()))?;
                c.finalize()?;
                Ok(other)
            })
        })
        .collect();
    for t in clients {
        assert_eq!(t.join().unwrap().unwrap(), "v");
    }
    acceptor.join().unwrap();
}

#[test]
fn rivet_pmi_pmi2_from_the_environment_and_abort() {
    let (hub, ns) = Hub::new_namespace(spec("rivet_v2_env", &[0]));
    let fd = hub.socketpair(1, ns, 0).into_raw_fd();
    let vars: HashMap<&str, String> = [
        ("PMI_FD", fd.to_string()),
        ("PMI_RANK", "0".into()),
        ("PMI_SIZE", "1".into()),
        ("PMI_JOBID", "42.0".into()),
        ("RIVET_PMI", "pmi2".into()),
    ]
    .into_iter()
    .collect();
    let config = ClientConfig::from_vars(|k| vars.get(k).cloned()).unwrap();
    assert!(config.pmi2);
    assert_eq!(config.jobid.as_deref(), Some("42.0"));
    let mut c = Client::connect(config).unwrap();
    assert_eq!(c.kind(), "pmi2");
    assert_eq!(c.server_version(), Some((2, 0)));
    c.abort(5, "bye; now").unwrap();
    for _ in 0..200 {
        if !hub.events.lock().unwrap().is_empty() {
            break;
        }
        thread::sleep(std::time::Duration::from_millis(10));
    }
    let events = hub.events.lock().unwrap();
    assert!(
        matches!(
            events.as_slice(),
            [Output::Abort { rank: Some(0), exit_code: 5, message: Some(m), .. }] if m == "bye, now"
        ),
        "{events:?}"
    );
    // pmi2 without a PMI connection is an error, not a singleton.
    let err = ClientConfig::from_vars(|k| (k == "RIVET_PMI").then(|| "pmi2".to_string()));
    assert!(matches!(
        err,
        Err(Error::Env {
            var: "RIVET_PMI",
            ..
        })
    ));
}
