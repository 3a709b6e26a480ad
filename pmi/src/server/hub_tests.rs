//! Group connect across two jobs: each job's `Server` forwarding to the
//! name server's hub, the hub matching the joins, and the answers relayed
//! back, with a launcher's part played by the test (`Pair::pump`).

use std::collections::BTreeMap;

use super::*;
use crate::server::hub::MAX_HUB_CLOSED;

fn spec(name: &str, size: u32) -> NamespaceSpec {
    NamespaceSpec {
        name: name.to_string(),
        size,
        universe_size: size,
        node_of_rank: vec![0; size as usize],
        ..NamespaceSpec::default()
    }
}

/// Job A (`ja`, 2 ranks, cluster `c1`, conns 1 and 2) and job B (`jb`, 1
/// rank, cluster `c2`, conn 1), their links 101 and 102 to one name server.
struct Pair {
    jobs: [Server; 2],
    ns: NameServer,
    /// What each rank was sent, per job.
    got: [BTreeMap<ConnId, String>; 2],
    lost: Vec<(usize, NsId, u32, String)>,
}

const LINK: [ConnId; 2] = [101, 102];

impl Pair {
    fn new() -> Pair {
        let mut jobs = [Server::new(), Server::new()];
        let mut ns = NameServer::new();
        for (i, (name, size, cluster)) in [("ja", 2, "c1"), ("jb", 1, "c2")].into_iter().enumerate()
        {
            let s = &mut jobs[i];
            s.set_cluster(cluster).unwrap();
            s.forward_other_jobs(true);
            let id = s.create_namespace(spec(name, size)).unwrap();
            for r in 0..size {
                s.attach(u64::from(r) + 1, id, r);
            }
            ns.open(LINK[i]);
            let mut out = Vec::new();
            let reg = format!("cmd=group_job nspace={name} size={size} cluster={cluster}\n");
            ns.receive(LINK[i], reg.as_bytes(), &mut out);
            assert_eq!(sent(&out, LINK[i]), "cmd=group_job_result rc=0\n");
        }
        Pair {
            jobs,
            ns,
            got: [BTreeMap::new(), BTreeMap::new()],
            lost: Vec::new(),
        }
    }

    /// Rank `rank` of job `j` sends `line`; everything that follows is
    /// carried until nothing moves.
    fn send(&mut self, j: usize, rank: u32, line: &str) {
        let mut out = Vec::new();
        self.jobs[j].receive(u64::from(rank) + 1, line.as_bytes(), &mut out);
        self.pump(j, out);
    }

    /// Do what a job's launcher does with its server's outputs.
    fn pump(&mut self, j: usize, out: Vec<Output>) {
        for o in out {
            match o {
                Output::Send { conn, bytes } => self.got[j]
                    .entry(conn)
                    .or_default()
                    .push_str(std::str::from_utf8(&bytes).unwrap()),
                Output::SendAll { conns, bytes } => {
                    for conn in conns {
                        self.got[j]
                            .entry(conn)
                            .or_default()
                            .push_str(std::str::from_utf8(&bytes).unwrap());
                    }
                }
                Output::GroupForward { ns, rank, message } => {
                    let header = Message::GroupRelay {
                        nspace: self.jobs[j].namespace_name(ns).to_string(),
                        rank,
                        lines: 1,
                    };
                    let mut bytes = header.encode().unwrap();
                    message.encode_into(&mut bytes).unwrap();
                    let mut hub_out = Vec::new();
                    self.ns.receive(LINK[j], &bytes, &mut hub_out);
                    self.carry_hub(hub_out);
                }
                other => panic!("job {j}: unexpected {other:?}"),
            }
        }
    }

    /// Do what each launcher does with what its link brings.
    fn carry_hub(&mut self, hub_out: Vec<Output>) {
        for o in hub_out {
            let Output::Send { conn, bytes } = o else {
                panic!("hub: unexpected {o:?}");
            };
            let j = LINK.iter().position(|&l| l == conn).unwrap();
            let mut framer = crate::wire::Framer::new();
            let mut frames = Vec::new();
            framer.feed(&bytes, &mut frames).unwrap();
            let mut msgs = frames.into_iter().map(|f| match f {
                crate::wire::Frame::Message(m) => m,
                other => panic!("{other:?}"),
            });
            while let Some(m) = msgs.next() {
                match m {
                    Message::GroupRelay {
                        nspace,
                        rank,
                        lines,
                    } => {
                        let body: Vec<Message> = msgs.by_ref().take(lines as usize).collect();
                        let mut out = Vec::new();
                        self.jobs[j]
                            .group_relayed(&nspace, rank, &body, &mut out)
                            .unwrap();
                        self.pump(j, out);
                    }
                    Message::GroupLost {
                        nspace,
                        rank,
                        group,
                    } => {
                        let ns = self.jobs[j].namespace_id(&nspace).unwrap();
                        self.lost.push((j, ns, rank, group));
                    }
                    other => panic!("link {conn}: unexpected {other:?}"),
                }
            }
        }
    }

    /// What rank `rank` of job `j` was sent since the last call.
    fn take(&mut self, j: usize, rank: u32) -> String {
        self.got[j]
            .remove(&(u64::from(rank) + 1))
            .unwrap_or_default()
    }
}

fn sent(out: &[Output], conn: ConnId) -> String {
    out.iter()
        .filter_map(|o| match o {
            Output::Send { conn: c, bytes } if *c == conn => {
                Some(String::from_utf8(bytes.clone()).unwrap())
            }
            _ => None,
        })
        .collect()
}

const MEMBERS: &str = "cmd=group_member proc=ja:0 pgsize=2 card=A0\n\
                       cmd=group_member proc=ja:1 pgsize=2 card=A1\n\
                       cmd=group_member proc=jb:0 pgsize=1 card=B0\n";

/// All three join `g` (flags `extra`): A names B qualified, B names A so.
fn connect_all(p: &mut Pair, extra: &str) {
    p.send(
        0,
        0,
        &format!("cmd=group_connect procs=ja:*,c2:jb:0 id=g{extra} ctx=4 card=A0\n"),
    );
    p.send(
        0,
        1,
        &format!("cmd=group_connect procs=c2:jb:*,c1:ja:* id=g{extra} ctx=9 card=A1\n"),
    );
    assert_eq!(p.take(0, 0), "", "nobody answered before B joined");
    p.send(
        1,
        0,
        &format!("cmd=group_connect procs=c1:ja:*,jb:0 id=g{extra} ctx=2 card=B0\n"),
    );
}

#[test]
fn two_jobs_form_one_group_through_the_hub() {
    let mut p = Pair::new();
    connect_all(&mut p, "");
    let op = HUB_OP_BASE + 1;
    let group = format!("{HUB_GROUP_PREFIX}1");
    for (j, r, rank) in [(0, 0, 0), (0, 1, 1), (1, 0, 2)] {
        assert_eq!(
            p.take(j, r),
            format!(
                "cmd=group_connect_result rc=0 op={op} ctx=9 size=3 group={group} \
                 rank={rank}\n{MEMBERS}"
            ),
            "job {j} rank {r}"
        );
    }
    // The ready phase is a barrier across both jobs.
    p.send(0, 0, &format!("cmd=group_ready op={op}\n"));
    p.send(1, 0, &format!("cmd=group_ready op={op}\n"));
    assert_eq!(p.take(0, 0), "");
    p.send(0, 1, &format!("cmd=group_ready op={op}\n"));
    for (j, r) in [(0, 0), (0, 1), (1, 0)] {
        assert_eq!(p.take(j, r), "cmd=group_ready_result rc=0\n", "{j} {r}");
    }
    // Disconnect, routed by the group id; the hub forgets the group.
    for (j, r) in [(0, 0), (0, 1), (1, 0)] {
        p.send(j, r, &format!("cmd=group_disconnect group={group}\n"));
        assert_eq!(p.take(j, r), "cmd=group_disconnect_result rc=0\n");
    }
    assert_eq!(p.ns.hub().group_count(), 0);
    // A job's own groups are untouched by all this.
    p.send(0, 0, "cmd=group_connect procs=ja:0 ctx=1 card=-\n");
    assert!(p
        .take(0, 0)
        .starts_with("cmd=group_connect_result rc=0 op=1 ctx=1 size=1 group=ja_g1 rank=0\n"),);
}

#[test]
fn events_and_ends_cross_jobs() {
    let mut p = Pair::new();
    connect_all(&mut p, " flags=notify_each");
    let group = format!("{HUB_GROUP_PREFIX}1");
    for (j, r) in [(0, 0), (0, 1), (1, 0)] {
        p.take(j, r);
    }
    // A disconnect is told to the other job's member.
    p.send(1, 0, &format!("cmd=group_disconnect group={group}\n"));
    p.take(1, 0);
    let event = format!("cmd=group_event group={group} event=disconnected proc=jb:0\n");
    assert_eq!(p.take(0, 0), event);
    assert_eq!(p.take(0, 1), event);
    // A:1 ends connected (no early_term): A:0 hears of it, and A's own
    // launcher is told to fail its job.
    let mut out = Vec::new();
    p.ns.receive(LINK[0], b"cmd=group_ended nspace=ja rank=1\n", &mut out);
    p.carry_hub(out);
    assert_eq!(
        p.take(0, 0),
        format!("cmd=group_event group={group} event=terminated proc=ja:1\n")
    );
    assert_eq!(p.lost, vec![(0, 0, 1, group.clone())]);
}

#[test]
fn a_job_that_goes_away_fails_a_strict_connect_and_optional_goes_on() {
    let mut p = Pair::new();
    p.send(
        0,
        0,
        "cmd=group_connect procs=ja:*,jb:* id=s ctx=1 card=A0\n",
    );
    p.send(
        0,
        0,
        "cmd=group_connect procs=ja:*,jb:* id=s ctx=1 card=A0\n",
    );
    assert_eq!(
        p.take(0, 0),
        "cmd=group_connect_result rc=-1 msg=group_request_already_pending\n",
        "one group request at a time per rank"
    );
    p.send(
        0,
        1,
        "cmd=group_connect procs=ja:*,jb:* id=s ctx=1 card=A1\n",
    );
    // Job B's rivetrun goes away: its link closes.
    let mut out = Vec::new();
    p.ns.close(LINK[1], &mut out);
    p.carry_hub(out);
    for r in 0..2 {
        let got = p.take(0, r);
        assert!(
            got.starts_with("cmd=group_connect_result rc=1 msg=jb:0\\ ended\\ before\\ joining"),
            "{got}"
        );
    }
    // With optional, the gone job is skipped (a new hub state: B re-registers
    // under another name).
    let mut out = Vec::new();
    p.ns.open(LINK[1]);
    p.ns.receive(LINK[1], b"cmd=group_job nspace=jb2 size=1\n", &mut out);
    assert_eq!(sent(&out, LINK[1]), "cmd=group_job_result rc=0\n");
    p.ns.close(LINK[1], &mut Vec::new());
    p.send(
        0,
        0,
        "cmd=group_connect procs=ja:*,jb2:* flags=optional ctx=1 card=A0\n",
    );
    p.send(
        0,
        1,
        "cmd=group_connect procs=ja:*,jb2:* flags=optional ctx=1 card=A1\n",
    );
    assert!(p.take(0, 0).starts_with("cmd=group_connect_result rc=0 "));
}

#[test]
fn the_hub_refuses_what_a_link_may_not_say() {
    let mut ns = NameServer::new();
    ns.open(1);
    ns.open(2);
    let mut out = Vec::new();
    ns.receive(1, b"cmd=group_job nspace=ja size=2\n", &mut out);
    ns.receive(2, b"cmd=group_job nspace=ja size=1\n", &mut out);
    assert!(
        sent(&out, 2).starts_with("cmd=group_job_result rc=1 msg="),
        "duplicate name"
    );
    out.clear();
    ns.receive(2, b"cmd=group_job nspace=big size=99999999\n", &mut out);
    assert!(
        sent(&out, 2).starts_with("cmd=group_job_result rc=1 msg="),
        "{out:?}"
    );
    for (conn, bytes) in [
        // Speaking for another job's namespace.
        (
            2,
            &b"cmd=group_relay nspace=ja rank=0 lines=1\ncmd=group_ready op=1\n"[..],
        ),
        // A query that is not a group request.
        (
            1,
            &b"cmd=group_relay nspace=ja rank=0 lines=1\ncmd=get key=x\n"[..],
        ),
        // A rank the namespace does not have.
        (
            1,
            &b"cmd=group_relay nspace=ja rank=5 lines=1\ncmd=group_ready op=1\n"[..],
        ),
    ] {
        let mut out = Vec::new();
        ns.open(conn);
        if conn == 1 {
            // Reopened connections lost their namespaces: register again.
            ns.close(1, &mut Vec::new());
            ns.open(1);
            ns.receive(1, b"cmd=group_job nspace=ja size=2\n", &mut Vec::new());
        }
        ns.receive(conn, bytes, &mut out);
        assert!(
            out.iter()
                .any(|o| matches!(o, Output::Close { conn: c, .. } if *c == conn)),
            "{bytes:?}: {out:?}"
        );
    }
}

#[test]
fn without_a_hub_the_rank_is_answered_when_the_link_goes() {
    let mut s = Server::new();
    s.forward_other_jobs(true);
    let ns = s.create_namespace(spec("ja", 1)).unwrap();
    s.attach(1, ns, 0);
    let mut out = Vec::new();
    s.receive(
        1,
        b"cmd=group_connect procs=ja:0,other:0 ctx=1 card=-\n",
        &mut out,
    );
    assert!(
        matches!(&out[..], [Output::GroupForward { rank: 0, .. }]),
        "{out:?}"
    );
    // A job's own op numbers and group ids are not forwarded.
    out.clear();
    s.group_hub_lost("connection refused", &mut out);
    assert_eq!(
        sent(&out, 1),
        "cmd=group_connect_result rc=1 msg=the\\ name\\ server's\\ group\\ service\\ is\\ \
         gone:\\ connection\\ refused\n"
    );
    out.clear();
    s.receive(1, b"cmd=group_ready op=3\n", &mut out);
    assert!(
        sent(&out, 1).starts_with("cmd=group_ready_result rc=1"),
        "{out:?}"
    );
    // Lines the hub may not send are refused.
    let bad = [Message::GetMaxes];
    assert!(s.group_relayed("ja", 0, &bad, &mut Vec::new()).is_err());
}

#[test]
fn a_huge_namespace_ends_with_its_link_in_one_step() {
    // A link may register a namespace of up to 2^20 processes; its end
    // must not walk them one by one (found by fuzzing the name server),
    // and every one of them, named or not, counts as ended afterwards.
    let mut p = Pair::new();
    let mut out = Vec::new();
    p.ns.open(LINK[1] + 1);
    let reg = format!("cmd=group_job nspace=big size={MAX_HUB_NAMESPACE} cluster=c3\n");
    p.ns.receive(LINK[1] + 1, reg.as_bytes(), &mut out);
    assert_eq!(sent(&out, LINK[1] + 1), "cmd=group_job_result rc=0\n");
    p.ns.close(LINK[1] + 1, &mut Vec::new());
    let last = MAX_HUB_NAMESPACE - 1;
    let line = format!("cmd=group_connect procs=ja:0,big:{last} id=h ctx=1 card=A0\n");
    p.send(0, 0, &line);
    let got = p.take(0, 0);
    assert!(
        got.starts_with(&format!(
            "cmd=group_connect_result rc=1 msg=big:{last}\\ ended\\ before\\ joining"
        )),
        "{got}"
    );
}

#[test]
fn a_long_lived_name_server_forgets_old_closed_jobs_but_not_recent_or_named_ones() {
    // Each registration used to keep 21 bytes per process for ever: a
    // link registering and closing 2^20-process namespaces in a loop grew
    // the name server by 21 MiB a time. Now a namespace costs the same
    // whatever its size, and closed ones are remembered only for the
    // last MAX_HUB_CLOSED closes.
    let mut p = Pair::new();
    // An optional connect of ja:* and held:1 that waits for ja:1: the
    // pending operation keeps naming "held" after its link closed.
    let link = LINK[1] + 1;
    p.ns.open(link);
    let mut out = Vec::new();
    p.ns.receive(
        link,
        b"cmd=group_job nspace=held size=2 cluster=c3\n",
        &mut out,
    );
    assert_eq!(sent(&out, link), "cmd=group_job_result rc=0\n");
    let held = "cmd=group_connect procs=ja:*,held:1 id=k flags=optional ctx=1";
    p.send(0, 0, &format!("{held} card=A0\n"));
    p.ns.close(link, &mut Vec::new());
    let cycles = MAX_HUB_CLOSED as u64 + 20;
    for i in 0..cycles {
        let link = 1000 + i;
        p.ns.open(link);
        let mut out = Vec::new();
        let reg = format!("cmd=group_job nspace=old{i} size={MAX_HUB_NAMESPACE} cluster=c3\n");
        p.ns.receive(link, reg.as_bytes(), &mut out);
        assert_eq!(sent(&out, link), "cmd=group_job_result rc=0\n", "cycle {i}");
        p.ns.close(link, &mut Vec::new());
    }
    let hub = p.ns.hub();
    // Open links: ja and jb. Closed: the newest MAX_HUB_CLOSED.
    assert_eq!(hub.namespaces_kept(), (2, MAX_HUB_CLOSED));
    assert!(
        hub.namespace_slots() <= 2 + MAX_HUB_CLOSED + 1,
        "{} slots",
        hub.namespace_slots()
    );
    // The held namespace was the oldest, but is still known as ended: the
    // connect completes without it.
    p.send(0, 1, &format!("{held} card=A1\n"));
    let got = p.take(0, 0);
    assert!(got.starts_with("cmd=group_connect_result rc=0 "), "{got}");
    // A recent closed job still counts as ended; the oldest unnamed one is
    // forgotten.
    let last = cycles - 1;
    p.send(
        0,
        0,
        &format!("cmd=group_connect procs=ja:0,old{last}:7 id=r ctx=1 card=A0\n"),
    );
    let got = p.take(0, 0);
    assert!(
        got.starts_with(&format!(
            "cmd=group_connect_result rc=1 msg=old{last}:7\\ ended\\ before\\ joining"
        )),
        "{got}"
    );
    p.send(
        0,
        0,
        "cmd=group_connect procs=ja:0,old0:7 id=o ctx=1 card=A0\n",
    );
    let got = p.take(0, 0);
    assert!(
        got.starts_with("cmd=group_connect_result rc=1 msg=unknown\\ namespace\\ old0"),
        "{got}"
    );
}
