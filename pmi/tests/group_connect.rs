//! Group connect end to end: four `Client`s (a job of two and a "spawned"
//! namespace of two) against one `Server` over socketpairs, the way
//! rivetrun embeds it, including the events the server sends unasked.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::Hub;
use rivet_pmi::client::{GroupConnectRequest, GroupEvent, GroupEventKind, GroupMember, ProcName};
use rivet_pmi::server::{NamespaceSpec, Output};
use rivet_pmi::{Client, ClientConfig, Transport};

fn spec(name: &str, size: u32) -> NamespaceSpec {
    NamespaceSpec {
        name: name.to_string(),
        size,
        universe_size: size,
        node_of_rank: vec![0; size as usize],
        ..NamespaceSpec::default()
    }
}

fn request(id: &str, context: u32, card: String) -> GroupConnectRequest {
    GroupConnectRequest {
        procs: vec![ProcName::wildcard("job_s1"), ProcName::wildcard("job")],
        id: Some(id.to_string()),
        notify_each: true,
        context,
        card,
        ..Default::default()
    }
}

/// Poll until an event comes or 10 s pass.
fn next_events(c: &mut Client) -> Vec<GroupEvent> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = c.poll_events().unwrap();
        if !events.is_empty() || Instant::now() > deadline {
            return events;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn four_processes_of_two_namespaces_connect_and_hear_of_each_other() {
    let (hub, job) = Hub::new_namespace(spec("job", 2));
    let child = hub
        .server
        .lock()
        .unwrap()
        .create_namespace(spec("job_s1", 2))
        .unwrap();
    let procs = [
        (job, "job", 0u32),
        (job, "job", 1),
        (child, "job_s1", 0),
        (child, "job_s1", 1),
    ];
    let workers: Vec<_> = procs
        .iter()
        .enumerate()
        .map(|(i, &(ns, name, rank))| {
            let stream = hub.socketpair(100 + i as u64, ns, rank);
            let name = name.to_string();
            thread::spawn(move || {
                let mut c = Client::connect(ClientConfig {
                    transport: Transport::Stream {
                        stream,
                        rank,
                        size: 2,
                    },
                    spawned: name != "job",
                    pmi2: false,
                    jobid: None,
                })
                .unwrap();
                let card = format!("card-{name}-{rank}");
                let reply = c
                    .group_connect(&request("world", 10 + i as u32, card))
                    .unwrap();
                let members: Vec<GroupMember> = procs
                    .iter()
                    .map(|&(_, n, r)| GroupMember {
                        proc: ProcName::new(n, r),
                        pg_size: 2,
                        card: format!("card-{n}-{r}"),
                    })
                    .collect();
                assert_eq!(reply.members, members);
                assert_eq!(reply.rank, Some(i as u32));
                assert_eq!(reply.context, 13);
                let group = reply.group.clone().unwrap();
                assert_eq!(group, "job_g1");
                c.group_ready(reply.op).unwrap();
                if i == 1 {
                    c.group_disconnect(&group).unwrap();
                }
                // job:1's disconnect reaches the others while they wait here.
                let mut again = request("after", 0, String::new());
                again.xchg_only = true;
                let reply = c.group_connect(&again).unwrap();
                assert_eq!((reply.group, reply.rank), (None, None));
                assert!(reply.members.iter().all(|m| m.card.is_empty()));
                let events = c.poll_events().unwrap();
                if i == 1 {
                    assert!(events.is_empty(), "{events:?}");
                } else {
                    assert_eq!(
                        events,
                        vec![GroupEvent {
                            group: group.clone(),
                            kind: GroupEventKind::Disconnected,
                            proc: ProcName::new("job", 1),
                        }]
                    );
                }
                c
            })
        })
        .collect();
    let mut clients: Vec<Client> = workers.into_iter().map(|w| w.join().unwrap()).collect();

    // The launcher reaps job_s1:1, still connected: the connected members
    // hear of it, and the launcher is told (no early_term).
    drop(clients.pop());
    hub.process_ended(child, 1);
    for i in [0, 2] {
        assert_eq!(
            next_events(&mut clients[i]),
            vec![GroupEvent {
                group: "job_g1".into(),
                kind: GroupEventKind::Terminated,
                proc: ProcName::new("job_s1", 1),
            }],
            "client {i}"
        );
    }
    assert!(clients[1].poll_events().unwrap().is_empty());
    assert!(hub
        .events
        .lock()
        .unwrap()
        .contains(&Output::GroupMemberLost {
            ns: child,
            rank: 1,
            group: "job_g1".into(),
        }));
    for i in [0, 2] {
        clients[i].group_disconnect("job_g1").unwrap();
    }
    assert_eq!(hub.server.lock().unwrap().group_count(), 0);
}
