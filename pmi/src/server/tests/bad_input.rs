//! The server against bad input: invalid namespaces, unexpressible
//! mappings, random bytes and a full KVS.

use super::*;

#[test]
fn namespaces_are_validated_and_shared_for_gets() {
    let mut server = Server::new();
    let parent = server.create_namespace(spec("parent", &[0])).unwrap();
    let child = server.create_namespace(spec("child", &[0, 0])).unwrap();
    assert_eq!(server.namespace_id("child"), Some(child));
    let bad = |f: &dyn Fn(&mut NamespaceSpec)| {
        let mut sp = spec("x", &[0, 0]);
        f(&mut sp);
        sp
    };
    for sp in [
        spec("parent", &[0]),
        spec("", &[0]),
        spec("has space", &[0]),
        bad(&|s| s.size = 3),
        bad(&|s| s.size = 0),
        bad(&|s| s.name = "n".repeat(257)),
        bad(&|s| s.attributes.push(("PMI_big".into(), "v".repeat(1000)))),
        bad(&|s| s.attributes.push(("PMI_nl".into(), "a\nb".into()))),
        bad(&|s| s.preput.push(("k".repeat(65), "v".into()))),
    ] {
        assert!(matches!(
            server.create_namespace(sp),
            Err(Error::InvalidNamespace { .. })
        ));
    }
    // Unknown namespace ids never panic.
    assert_eq!(server.namespace_name(42), "");
    server.set_attribute(42, "PMI_a", "b");
    assert!(server.try_set_attribute(42, "PMI_a", "b").is_err());
    assert!(server
        .try_set_attribute(child, "PMI_a", &"v".repeat(2000))
        .is_err());
    server.set_attribute(child, "PMI_topo_node", "3");
    let mut s = Session { server };
    s.server.attach(1, parent, 0);
    s.server.attach(2, child, 1);
    assert_eq!(
        s.ask(1, "cmd=put kvsname=parent key=port value=P\n"),
        "cmd=put_result rc=0\n"
    );
    assert_eq!(
        s.ask(2, "cmd=get kvsname=parent key=port\n"),
        "cmd=get_result rc=0 value=P\n"
    );
    assert_eq!(
        s.ask(2, "cmd=get key=PMI_topo_node\n"),
        "cmd=get_result rc=0 value=3\n"
    );
    assert_eq!(
        s.ask(2, "cmd=get key=PMI_process_mapping\n"),
        "cmd=get_result rc=0 value=(vector,(0,1,2))\n"
    );
    // Attaching to an unknown namespace: every query is answered with an error.
    s.server.attach(3, 77, 0);
    assert_eq!(
        s.ask(3, "cmd=get key=a\n"),
        "cmd=get_result rc=-1 msg=unknown_namespace\n"
    );
}

#[test]
fn unexpressible_mapping_is_a_miss_not_an_empty_value() {
    let nodes: Vec<u32> = (0..3000u32).map(|r| (r * r / 7) % 97).collect();
    let mut server = Server::new();
    let ns = server.create_namespace(spec("big", &nodes)).unwrap();
    server.attach(1, ns, 0);
    let mut s = Session { server };
    assert_eq!(
        s.ask(1, "cmd=get key=PMI_process_mapping\n"),
        "cmd=get_result rc=1 msg=key_not_found\n"
    );
}

#[test]
fn random_bytes_never_panic_the_server() {
    let (mut s, ns) = three_rank_session();
    s.server.attach_unidentified(9, ns);
    let mut x: u64 = 0xDEADBEEF;
    let pieces: [&[u8]; 19] = [
        b"cmd=",
        b"mcmd=spawn\n",
        b"endcmd\n",
        b"barrier_in",
        b"\n",
        b" key=",
        b"initack pmiid=1",
        b"put kvsname=rivet_1_0 value=",
        b"get",
        b"\xff",
        b"\x00",
        b"totspawns=2\nspawnssofar=",
        b"lookup_name service=s\n",
        b"publish_name service=s port=p\n",
        b"group_connect procs=rivet_1_0:* ctx=1 card=-\n",
        b"group_connect procs=rivet_1_0:0,rivet_1_0:2 flags=optional ctx=2 card=",
        b"group_ready op=1\n",
        b"group_disconnect group=rivet_1_0_g1\n",
        b"group_connect procs=rivet_1_0:1,x:y:z:1 ctx=9 card=c\n",
    ];
    for _ in 0..5000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let conn = 1 + x % 4;
        let conn = if conn == 4 { 9 } else { conn };
        let mut bytes = Vec::new();
        for i in 0..(x >> 50) % 6 {
            bytes.extend_from_slice(pieces[((x >> (i * 4)) % pieces.len() as u64) as usize]);
        }
        let mut out = Vec::new();
        s.server.receive(conn, &bytes, &mut out);
        if out.iter().any(|o| matches!(o, Output::Close { .. })) {
            if conn == 9 {
                s.server.attach_unidentified(9, ns);
            } else {
                s.server.attach(conn, ns, conn as u32 - 1);
            }
        }
        if x % 97 == 0 {
            s.server.spawn_done(conn, Ok(spawned(vec![1])), &mut out);
        }
        if x % 89 == 0 {
            s.server.forward_names(x % 2 == 0);
            s.server.name_done(conn, Err("x".into()), &mut out);
        }
        if x % 1013 == 0 {
            s.server.process_ended(ns, (x % 4) as u32, &mut out);
        }
    }
}

/// A rank putting keys in a loop fills its namespace's KVS up to the cap
/// and then gets a clear error answer; overwriting a key still works, the
/// connection goes on, and the other ranks read what is there.
#[test]
fn a_full_kvs_answers_an_error_and_the_job_goes_on() {
    let (mut s, ns) = three_rank_session();
    let cap = max_entries(3);
    // The preput pair is an entry too.
    let mut batch = String::new();
    for i in 0..cap - 1 {
        batch.push_str(&format!("cmd=put kvsname=rivet_1_0 key=k{i} value=v{i}\n"));
    }
    let answers = s.ask(1, &batch);
    assert_eq!(answers.matches("cmd=put_result rc=0\n").count(), cap - 1);
    assert_eq!(
        s.ask(1, "cmd=put kvsname=rivet_1_0 key=one_more value=x\n"),
        "cmd=put_result rc=1 msg=kvs_full\n"
    );
    assert_eq!(
        s.ask(2, "cmd=put kvsname=rivet_1_0 key=k7 value=again\n"),
        "cmd=put_result rc=0\n",
        "an overwrite is not a new entry"
    );
    assert_eq!(
        s.ask(3, "cmd=get kvsname=rivet_1_0 key=k7\n"),
        "cmd=get_result rc=0 value=again\n"
    );
    assert!(
        s.server.conn_rank(1).is_some(),
        "the putter stays connected"
    );
    let _ = ns;
}
