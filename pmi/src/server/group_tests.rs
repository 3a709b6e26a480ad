//! Group connect through `Server::receive` and `Server::process_ended`:
//! a job of two ranks (`job`, connections 1 and 2) and a spawned
//! namespace of two (`job_s1`, connections 11 and 12).

use std::collections::BTreeMap;

use super::*;

fn spec(name: &str, size: u32) -> NamespaceSpec {
    NamespaceSpec {
        name: name.to_string(),
        size,
        universe_size: size,
        node_of_rank: vec![0; size as usize],
        ..NamespaceSpec::default()
    }
}

struct Job {
    server: Server,
    job: NsId,
    child: NsId,
}

/// Connection of rank `r` of the job (0, 1) or of the child (10, 11).
fn conn_of(p: u32) -> ConnId {
    u64::from(p) + 1
}

fn two_namespaces() -> Job {
    let mut server = Server::new();
    let job = server.create_namespace(spec("job", 2)).unwrap();
    let child = server.create_namespace(spec("job_s1", 2)).unwrap();
    for r in 0..2 {
        server.attach(conn_of(r), job, r);
        server.attach(conn_of(10 + r), child, r);
    }
    Job { server, job, child }
}

/// Everything sent, per connection, in order (`SendAll` spread out).
fn texts(out: &[Output]) -> BTreeMap<ConnId, String> {
    let mut map: BTreeMap<ConnId, String> = BTreeMap::new();
    for o in out {
        match o {
            Output::Send { conn, bytes } => map
                .entry(*conn)
                .or_default()
                .push_str(std::str::from_utf8(bytes).unwrap()),
            Output::SendAll { conns, bytes } => {
                for c in conns {
                    map.entry(*c)
                        .or_default()
                        .push_str(std::str::from_utf8(bytes).unwrap());
                }
            }
            _ => {}
        }
    }
    map
}

fn lost(out: &[Output]) -> Vec<(NsId, u32, String)> {
    out.iter()
        .filter_map(|o| match o {
            Output::GroupMemberLost { ns, rank, group } => Some((*ns, *rank, group.clone())),
            _ => None,
        })
        .collect()
}

impl Job {
    fn io(&mut self, conn: ConnId, text: &str) -> Vec<Output> {
        let mut out = Vec::new();
        self.server.receive(conn, text.as_bytes(), &mut out);
        out
    }

    /// Send `text` from `conn` and expect no answer yet.
    fn wait(&mut self, conn: ConnId, text: &str) {
        let out = self.io(conn, text);
        assert!(out.is_empty(), "{text:?} gave {out:?}");
    }

    /// Send `text` from `conn`; the one line sent back to `conn` only.
    fn ask(&mut self, conn: ConnId, text: &str) -> String {
        let out = self.io(conn, text);
        let t = texts(&out);
        assert_eq!(t.len(), 1, "{text:?} gave {out:?}");
        assert_eq!(out.len(), 1, "{text:?} gave {out:?}");
        t.get(&conn).cloned().unwrap_or_default()
    }

    fn ended(&mut self, ns: NsId, rank: u32) -> Vec<Output> {
        let mut out = Vec::new();
        self.server.process_ended(ns, rank, &mut out);
        out
    }
}

fn connect(procs: &str, extra: &str, ctx: u32, card: &str) -> String {
    format!("cmd=group_connect procs={procs}{extra} ctx={ctx} card={card}\n")
}

/// All four connect, each spelling the set its own way; the last one in
/// completes it for everyone.
fn connect_all(j: &mut Job, extra: &str) -> BTreeMap<ConnId, String> {
    j.wait(conn_of(11), &connect("job_s1:*,job:*", extra, 4, "C11"));
    j.wait(conn_of(1), &connect("job:0,job:1,job_s1:*", extra, 9, "-"));
    j.wait(
        conn_of(10),
        &connect("job:*,job_s1:1,job_s1:0", extra, 2, "C10"),
    );
    let out = j.io(conn_of(0), &connect("job:*,job_s1:*,job:0", extra, 7, "C0"));
    texts(&out)
}

const MEMBERS: &str = "cmd=group_member proc=job:0 pgsize=2 card=C0\n\
                       cmd=group_member proc=job:1 pgsize=2 card=-\n\
                       cmd=group_member proc=job_s1:0 pgsize=2 card=C10\n\
                       cmd=group_member proc=job_s1:1 pgsize=2 card=C11\n";

#[test]
fn connect_over_two_namespaces_sorts_members_and_takes_the_largest_ctx() {
    let mut j = two_namespaces();
    let got = connect_all(&mut j, "");
    assert_eq!(got.len(), 4);
    for (rank, p) in [0, 1, 10, 11].into_iter().enumerate() {
        let want = format!(
            "cmd=group_connect_result rc=0 op=1 ctx=9 size=4 group=job_g1 rank={rank}\n{MEMBERS}"
        );
        assert_eq!(got[&conn_of(p)], want, "proc {p}");
    }
    assert_eq!(j.server.group_count(), 1);
    // The next group gets the next numbers.
    let got = connect_all(&mut j, "");
    assert!(got[&conn_of(0)]
        .starts_with("cmd=group_connect_result rc=0 op=2 ctx=9 size=4 group=job_g2 rank=0\n"));
    assert_eq!(j.server.group_count(), 2);
}

#[test]
fn connect_ids_keep_concurrent_operations_apart() {
    let mut j = two_namespaces();
    let (a, b) = (" id=alpha", " id=beta");
    j.wait(conn_of(0), &connect("job:*", a, 1, "A0"));
    j.wait(conn_of(1), &connect("job:*", b, 2, "B1"));
    // Same procs, no id: a third operation.
    j.wait(conn_of(1), &connect("job:*", "", 3, "N1"));
    let got = texts(&j.io(conn_of(0), &connect("job:*", b, 5, "B0")));
    assert_eq!(
        got[&conn_of(1)],
        "cmd=group_connect_result rc=0 op=1 ctx=5 size=2 group=job_g1 rank=1\n\
         cmd=group_member proc=job:0 pgsize=2 card=B0\n\
         cmd=group_member proc=job:1 pgsize=2 card=B1\n"
    );
    assert_eq!(got.len(), 2);
    let got = texts(&j.io(conn_of(1), &connect("job:1,job:0", a, 0, "A1")));
    assert!(got[&conn_of(0)]
        .starts_with("cmd=group_connect_result rc=0 op=2 ctx=1 size=2 group=job_g2 rank=0\n"));
    assert!(got[&conn_of(0)].contains("card=A0\n"));
    // A process joins one operation once.
    assert_eq!(
        j.ask(conn_of(1), &connect("job:*", "", 3, "N1")),
        "cmd=group_connect_result rc=1 msg=job:1\\ already\\ joined\\ this\\ group\\ connect\\ of\\ job:*\n"
    );
    let got = texts(&j.io(conn_of(0), &connect("job:*", "", 3, "N0")));
    assert_eq!(got.len(), 2);
}

#[test]
fn optional_connect_goes_on_without_processes_that_ended() {
    let mut j = two_namespaces();
    let child = j.child;
    // Ended before the connect started.
    assert!(j.ended(child, 1).is_empty());
    j.wait(
        conn_of(0),
        &connect("job:*,job_s1:*", " flags=optional", 1, "-"),
    );
    j.wait(
        conn_of(10),
        &connect("job:*,job_s1:*", " flags=optional", 1, "-"),
    );
    // Ended while the connect waits: the last missing one.
    let got = texts(&j.io(
        conn_of(1),
        &connect("job:*,job_s1:*", " flags=optional", 1, "-"),
    ));
    assert_eq!(got.len(), 3);
    for (rank, p) in [0, 1, 10].into_iter().enumerate() {
        assert!(
            got[&conn_of(p)].starts_with(&format!(
                "cmd=group_connect_result rc=0 op=1 ctx=1 size=3 group=job_g1 rank={rank}\n"
            )),
            "{}",
            got[&conn_of(p)]
        );
        assert!(!got[&conn_of(p)].contains("job_s1:1"));
    }
    // And the case where the process ends while the others wait.
    let mut j = two_namespaces();
    let job = j.job;
    j.wait(conn_of(0), &connect("job:*", " flags=optional", 1, "-"));
    let got = texts(&j.ended(job, 1));
    assert_eq!(
        got[&conn_of(0)],
        "cmd=group_connect_result rc=0 op=1 ctx=1 size=1 group=job_g1 rank=0\n\
         cmd=group_member proc=job:0 pgsize=2 card=-\n"
    );
}

#[test]
fn a_process_that_ends_without_joining_fails_everyone_without_optional() {
    let mut j = two_namespaces();
    let child = j.child;
    j.wait(conn_of(0), &connect("job:*,job_s1:*", " id=x", 1, "-"));
    j.wait(conn_of(1), &connect("job:*,job_s1:*", " id=x", 1, "-"));
    let got = texts(&j.ended(child, 1));
    let fail = "cmd=group_connect_result rc=1 msg=job_s1:1\\ ended\\ before\\ joining\\ group\\ \
                connect\\ x;\\ pass\\ optional\\ to\\ go\\ on\\ without\\ it\n";
    assert_eq!(got.len(), 2);
    assert_eq!(got[&conn_of(0)], fail);
    assert_eq!(got[&conn_of(1)], fail);
    // A late joiner is told at once, not left waiting.
    assert_eq!(
        j.ask(conn_of(10), &connect("job:*,job_s1:*", " id=x", 1, "-")),
        fail
    );
}

#[test]
fn different_flags_fail_the_operation_for_everyone() {
    let mut j = two_namespaces();
    j.wait(
        conn_of(0),
        &connect("job:*,job_s1:*", " flags=optional", 1, "-"),
    );
    j.wait(
        conn_of(10),
        &connect("job:*,job_s1:*", " flags=optional", 1, "-"),
    );
    let got = texts(&j.io(conn_of(1), &connect("job:*,job_s1:*", "", 1, "-")));
    assert_eq!(got.len(), 3);
    let fail = &got[&conn_of(1)];
    assert!(
        fail.starts_with("cmd=group_connect_result rc=1 msg=the\\ participants\\ of\\ group\\ connect\\ of\\ job:*,job_s1:*\\ passed\\ different\\ flags\\ (job:0\\ passed\\ optional,\\ job:1\\ passed\\ no\\ flags)"),
        "{fail}"
    );
    assert_eq!(&got[&conn_of(0)], fail);
    assert_eq!(&got[&conn_of(10)], fail);
    // The one that had not joined yet gets the same answer at once...
    assert_eq!(
        &j.ask(
            conn_of(11),
            &connect("job:*,job_s1:*", " flags=optional", 1, "-")
        ),
        fail
    );
    // ...and a retry after that is a new operation.
    j.wait(conn_of(0), &connect("job:*,job_s1:*", "", 1, "-"));
    j.wait(conn_of(1), &connect("job:*,job_s1:*", "", 1, "-"));
    j.wait(conn_of(10), &connect("job:*,job_s1:*", "", 1, "-"));
    let got = texts(&j.io(conn_of(11), &connect("job:*,job_s1:*", "", 1, "-")));
    assert_eq!(got.len(), 4);
    assert!(got[&conn_of(11)].starts_with("cmd=group_connect_result rc=0 op=1 "));
}

#[test]
fn bad_requests_are_refused_at_once() {
    let mut j = two_namespaces();
    for (procs, msg) in [
        (
            "job_s1:*",
            "job:0\\ is\\ not\\ among\\ the\\ procs\\ of\\ its\\ own\\ group\\ connect\\ \
             (job_s1:*);\\ a\\ process\\ connects\\ only\\ to\\ groups\\ it\\ is\\ part\\ of",
        ),
        ("job:*,other:0", "unknown\\ namespace\\ other"),
        (
            "job:2",
            "job:2\\ does\\ not\\ exist:\\ namespace\\ job\\ has\\ 2\\ processes",
        ),
        (
            "clA:job:*",
            "procs\\ of\\ cluster\\ clA:\\ this\\ process\\ manager\\ has\\ no\\ cluster\\ id;\\ \
             give\\ rivetrun\\ --nameserver\\ to\\ connect\\ with\\ other\\ jobs",
        ),
    ] {
        assert_eq!(
            j.ask(conn_of(0), &connect(procs, "", 1, "-")),
            format!("cmd=group_connect_result rc=1 msg={msg}\n"),
            "{procs}"
        );
    }
    // Lines that do not parse get the matching answer.
    assert_eq!(
        j.ask(conn_of(0), "cmd=group_connect procs=job:x ctx=1 card=-\n"),
        "cmd=group_connect_result rc=-1 msg=malformed:\\ process\\ name\\ \"job:x\":\\ the\\ rank\\ \
         is\\ neither\\ a\\ number\\ nor\\ *;\\ expected\\ [cluster:]nspace:rank\\ or\\ \
         [cluster:]nspace:*\n"
    );
    assert_eq!(
        j.ask(conn_of(0), "cmd=group_ready op=x\n"),
        "cmd=group_ready_result rc=-1 msg=bad_number_op\n"
    );
    // A card that fits the request but not a member line.
    let card = "c".repeat(982);
    let reply = j.ask(conn_of(0), &connect("job:*", "", 1, &card));
    assert!(
        reply
            .starts_with("cmd=group_connect_result rc=1 msg=the\\ business\\ card\\ (982\\ bytes)"),
        "{reply}"
    );
    // PMI_PORT connections must identify first.
    j.server.attach_unidentified(50, j.job);
    for (q, a) in [
        (
            connect("job:*", "", 1, "-"),
            "cmd=group_connect_result rc=-1 msg=initack_required_before_group_connect\n",
        ),
        (
            "cmd=group_ready op=1\n".to_string(),
            "cmd=group_ready_result rc=-1 msg=initack_required_before_group_ready\n",
        ),
        (
            "cmd=group_disconnect group=g\n".to_string(),
            "cmd=group_disconnect_result rc=-1 msg=initack_required_before_group_disconnect\n",
        ),
    ] {
        assert_eq!(j.ask(50, &q), a);
    }
    // Nothing was left pending: the job's own connect still works.
    j.wait(conn_of(0), &connect("job:*", "", 1, "-"));
    assert_eq!(
        texts(&j.io(conn_of(1), &connect("job:*", "", 1, "-"))).len(),
        2
    );
}

#[test]
fn cluster_qualified_names_of_our_cluster_only() {
    let mut j = two_namespaces();
    assert!(j.server.set_cluster("bad:name").is_err());
    assert_eq!(j.server.cluster(), None);
    j.server.set_cluster("clA").unwrap();
    assert_eq!(j.server.cluster(), Some("clA"));
    assert_eq!(
        j.ask(conn_of(0), &connect("clB:job:*", "", 1, "-")),
        "cmd=group_connect_result rc=1 msg=procs\\ of\\ cluster\\ clB:\\ this\\ process\\ \
         manager\\ serves\\ cluster\\ clA\\ only;\\ give\\ rivetrun\\ --nameserver\\ to\\ \
         connect\\ with\\ other\\ jobs\n"
    );
    // Qualified and unqualified names of the same processes are one operation.
    j.wait(conn_of(0), &connect("clA:job:*", "", 1, "-"));
    let got = texts(&j.io(conn_of(1), &connect("job:0,clA:job:1", "", 1, "-")));
    assert_eq!(got.len(), 2);
    assert!(got[&conn_of(0)].contains("cmd=group_member proc=job:1 pgsize=2 card=-\n"));
}

#[test]
fn xchg_only_makes_no_group() {
    let mut j = two_namespaces();
    let job = j.job;
    j.wait(conn_of(0), &connect("job:*", " flags=xchg_only", 3, "A"));
    let got = texts(&j.io(conn_of(1), &connect("job:*", " flags=xchg_only", 1, "B")));
    assert_eq!(
        got[&conn_of(0)],
        "cmd=group_connect_result rc=0 op=1 ctx=3 size=2\n\
         cmd=group_member proc=job:0 pgsize=2 card=A\n\
         cmd=group_member proc=job:1 pgsize=2 card=B\n"
    );
    assert_eq!(j.server.group_count(), 0);
    // Its ready phase still works; ending later yields no group events.
    j.wait(conn_of(0), "cmd=group_ready op=1\n");
    assert_eq!(texts(&j.io(conn_of(1), "cmd=group_ready op=1\n")).len(), 2);
    assert!(j.ended(job, 0).is_empty());
}

#[test]
fn ready_phase_is_a_barrier_over_the_members() {
    let mut j = two_namespaces();
    let (job, child) = (j.job, j.child);
    connect_all(&mut j, "");
    j.wait(conn_of(0), "cmd=group_ready op=1\n");
    assert_eq!(
        j.ask(conn_of(0), "cmd=group_ready op=1\n"),
        "cmd=group_ready_result rc=1 msg=job:0\\ sent\\ group_ready\\ for\\ op\\ 1\\ twice\n"
    );
    assert!(j
        .ask(conn_of(1), "cmd=group_ready op=9\n")
        .starts_with("cmd=group_ready_result rc=1 msg=unknown\\ group_ready\\ op\\ 9"));
    j.wait(conn_of(1), "cmd=group_ready op=1\n");
    j.wait(conn_of(10), "cmd=group_ready op=1\n");
    let got = texts(&j.io(conn_of(11), "cmd=group_ready op=1\n"));
    assert_eq!(got.len(), 4);
    assert!(got.values().all(|t| t == "cmd=group_ready_result rc=0\n"));
    // Answered, then forgotten.
    assert!(j
        .ask(conn_of(0), "cmd=group_ready op=1\n")
        .starts_with("cmd=group_ready_result rc=1 msg=unknown"));

    // Op 2 among the job's ranks only: a child is not a member.
    j.wait(conn_of(0), &connect("job:*", " flags=early_term", 1, "-"));
    j.io(conn_of(1), &connect("job:*", " flags=early_term", 1, "-"));
    assert_eq!(
        j.ask(conn_of(10), "cmd=group_ready op=2\n"),
        "cmd=group_ready_result rc=1 msg=job_s1:0\\ is\\ not\\ a\\ member\\ of\\ group\\ connect\\ op\\ 2\n"
    );
    // A member ending before group_ready fails the waiting ones...
    j.wait(conn_of(0), "cmd=group_ready op=2\n");
    let got = texts(&j.ended(job, 1));
    assert!(
        got[&conn_of(0)].starts_with(
            "cmd=group_ready_result rc=1 msg=job:1\\ ended\\ before\\ sending\\ group_ready\\ \
             for\\ group\\ connect\\ op\\ 2\n"
        ),
        "{}",
        got[&conn_of(0)]
    );
    // ...and with optional it is no longer waited for.
    j.wait(
        conn_of(10),
        &connect("job_s1:*", " flags=optional,early_term", 1, "-"),
    );
    j.io(
        conn_of(11),
        &connect("job_s1:*", " flags=optional,early_term", 1, "-"),
    );
    j.wait(conn_of(11), "cmd=group_ready op=3\n");
    let got = texts(&j.ended(child, 0));
    assert!(got[&conn_of(11)].starts_with("cmd=group_ready_result rc=0\n"));
}

#[test]
fn disconnect_is_immediate_and_notify_each_tells_the_others() {
    let mut j = two_namespaces();
    connect_all(&mut j, " flags=notify_each");
    let got = texts(&j.io(conn_of(1), "cmd=group_disconnect group=job_g1\n"));
    assert_eq!(got[&conn_of(1)], "cmd=group_disconnect_result rc=0\n");
    for p in [0, 10, 11] {
        assert_eq!(
            got[&conn_of(p)],
            "cmd=group_event group=job_g1 event=disconnected proc=job:1\n"
        );
    }
    assert_eq!(got.len(), 4);
    assert_eq!(
        j.ask(conn_of(1), "cmd=group_disconnect group=job_g1\n"),
        "cmd=group_disconnect_result rc=1 msg=job:1\\ is\\ not\\ connected\\ to\\ group\\ job_g1\n"
    );
    assert!(j
        .ask(conn_of(1), "cmd=group_disconnect group=nope\n")
        .starts_with("cmd=group_disconnect_result rc=1 msg=unknown\\ group\\ nope"));
    // A closed connection is skipped.
    j.server.detach(conn_of(11));
    let got = texts(&j.io(conn_of(0), "cmd=group_disconnect group=job_g1\n"));
    assert_eq!(got.len(), 2);
    assert!(got[&conn_of(10)].contains("proc=job:0"));
    j.io(conn_of(10), "cmd=group_disconnect group=job_g1\n");
    assert_eq!(j.server.group_count(), 1);
    // The last member leaving forgets the group.
    j.server.attach(conn_of(11), j.child, 1);
    assert_eq!(
        j.ask(conn_of(11), "cmd=group_disconnect group=job_g1\n"),
        "cmd=group_disconnect_result rc=0\n"
    );
    assert_eq!(j.server.group_count(), 0);

    // Without notify_each nobody else hears of it.
    let mut j = two_namespaces();
    connect_all(&mut j, "");
    assert_eq!(
        j.ask(conn_of(1), "cmd=group_disconnect group=job_g1\n"),
        "cmd=group_disconnect_result rc=0\n"
    );
}

#[test]
fn a_member_that_ends_connected_is_reported() {
    let mut j = two_namespaces();
    let (job, child) = (j.job, j.child);
    connect_all(&mut j, "");
    // A member that disconnected first ends quietly.
    j.io(conn_of(11), "cmd=group_disconnect group=job_g1\n");
    assert!(j.ended(child, 1).is_empty());
    let out = j.ended(job, 1);
    assert_eq!(lost(&out), vec![(job, 1, "job_g1".to_string())]);
    let got = texts(&out);
    assert_eq!(got.len(), 2);
    for p in [0, 10] {
        assert_eq!(
            got[&conn_of(p)],
            "cmd=group_event group=job_g1 event=terminated proc=job:1\n"
        );
    }
    // Reported once.
    assert!(j.ended(job, 1).is_empty());
    // Unknown processes are ignored.
    assert!(j.ended(job, 7).is_empty());
    assert!(j.ended(99, 0).is_empty());

    // With early_term: events, but no loss for the launcher.
    let mut j = two_namespaces();
    let job = j.job;
    connect_all(&mut j, " flags=early_term");
    let out = j.ended(job, 0);
    assert!(lost(&out).is_empty());
    assert_eq!(texts(&out).len(), 3);
}

#[test]
fn a_member_that_ends_after_joining_is_reported_when_the_group_is_made() {
    let mut j = two_namespaces();
    let job = j.job;
    j.wait(conn_of(0), &connect("job:*", "", 1, "A"));
    j.server.detach(conn_of(0));
    assert!(j.ended(job, 0).is_empty());
    let out = j.io(conn_of(1), &connect("job:*", "", 1, "B"));
    let got = texts(&out);
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[&conn_of(1)],
        "cmd=group_connect_result rc=0 op=1 ctx=1 size=2 group=job_g1 rank=1\n\
         cmd=group_member proc=job:0 pgsize=2 card=A\n\
         cmd=group_member proc=job:1 pgsize=2 card=B\n\
         cmd=group_event group=job_g1 event=terminated proc=job:0\n"
    );
    assert_eq!(lost(&out), vec![(job, 0, "job_g1".to_string())]);
    // Its ready phase cannot complete: the survivor is told.
    assert_eq!(
        j.ask(conn_of(1), "cmd=group_ready op=1\n"),
        "cmd=group_ready_result rc=1 msg=job:0\\ ended\\ before\\ sending\\ group_ready\\ for\\ \
         group\\ connect\\ op\\ 1\n"
    );
}
