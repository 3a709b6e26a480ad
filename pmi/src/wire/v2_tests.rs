//! The PMI-2 codec: framing (padding either side, split reads), fullinit's
//! fields, no escaping, and bad input as errors, never panics.

use super::v2::*;
use crate::error::Error;

fn frames(bytes: &[u8]) -> (Vec<V2Frame>, crate::error::Result<()>) {
    let mut f = V2Framer::new();
    let mut out = Vec::new();
    let r = f.feed(bytes, &mut out);
    (out, r)
}

fn messages(bytes: &[u8]) -> Vec<V2Message> {
    let (out, r) = frames(bytes);
    r.unwrap();
    out.into_iter()
        .map(|f| match f {
            V2Frame::Message(m) => m,
            V2Frame::Invalid { error, .. } => panic!("invalid: {error}"),
        })
        .collect()
}

#[test]
fn the_length_prefix_is_padded_on_either_side() {
    let body = "cmd=kvs-fence;";
    for prefix in [
        format!("{:>6}", body.len()),
        format!("{:<6}", body.len()),
        format!("{:06}", body.len()),
        format!(" {:<5}", body.len()),
    ] {
        let wire = format!("{prefix}{body}");
        let m = messages(wire.as_bytes());
        assert_eq!(m, [V2Message::new("kvs-fence")], "{prefix:?}");
    }
    // What this crate writes: right-aligned, as MPICH does.
    let bytes = V2Message::new("kvs-fence").encode().unwrap();
    assert_eq!(bytes, b"    14cmd=kvs-fence;");
}

#[test]
fn fullinit_carries_what_slurm_wants() {
    // Slurm's pmi2 refuses a fullinit without pmijobid, pmirank and threaded.
    let q = V2Message::new("fullinit")
        .with("pmijobid", "12.0")
        .with("pmirank", 3)
        .with("threaded", "FALSE");
    let bytes = q.encode().unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert_eq!(
        &text[6..],
        "cmd=fullinit;pmijobid=12.0;pmirank=3;threaded=FALSE;"
    );
    let back = messages(&bytes);
    assert_eq!(back, std::slice::from_ref(&q));
    assert_eq!(back[0].number::<u32>("pmirank").unwrap(), Some(3));
    assert_eq!(back[0].flag("threaded"), Some(false));
    assert!(back[0].check_query().is_ok());
    // A response as Slurm writes it (appnum -1, flags in capitals).
    let slurm = "cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=3;size=4;appnum=-1;debugged=FALSE;pmiverbose=FALSE;";
    let wire = format!("{:<6}{slurm}", slurm.len());
    let r = &messages(wire.as_bytes())[0];
    assert_eq!(r.rc().unwrap(), 0);
    assert_eq!(r.number::<i32>("appnum").unwrap(), Some(-1));
    assert_eq!(r.number::<u32>("size").unwrap(), Some(4));
}

#[test]
fn nothing_is_escaped_and_what_cannot_be_carried_is_refused() {
    // Spaces, '=' and newlines in a value travel as they are.
    let q = V2Message::new("kvs-put")
        .with("key", "k")
        .with("value", "a b=c\nd");
    let back = messages(&q.encode().unwrap());
    assert_eq!(back[0].get("value"), Some("a b=c\nd"));
    assert!(matches!(
        V2Message::new("kvs-put")
            .with("key", "k")
            .with("value", "a;b")
            .encode(),
        Err(Error::Unencodable { .. })
    ));
    assert!(V2Message::new("kvs-put").with("k=1", "v").encode().is_err());
    assert!(V2Message::new("kvs-put").with("", "v").encode().is_err());
    let long = "x".repeat(MAX_BODY);
    assert!(matches!(
        V2Message::new("kvs-put").with("value", &long).encode(),
        Err(Error::LineTooLong { .. })
    ));
}

#[test]
fn split_reads_and_several_messages_per_read() {
    let mut wire = V2Message::new("kvs-get")
        .with("jobid", "j")
        .with("srcid", -1)
        .with("key", "card-0")
        .encode()
        .unwrap();
    V2Message::new("finalize").encode_into(&mut wire).unwrap();
    for cut in 0..wire.len() {
        let mut f = V2Framer::new();
        let mut out = Vec::new();
        f.feed(&wire[..cut], &mut out).unwrap();
        f.feed(&wire[cut..], &mut out).unwrap();
        assert_eq!(out.len(), 2, "cut at {cut}");
        assert_eq!(f.pending(), 0);
    }
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    // Bad prefixes close the stream, and keep failing.
    for bad in [
        &b"abcdefcmd=x;"[..],
        b"  1 2 cmd",
        b"-00005cmd=x",
        b"      cmd=x;",
    ] {
        let mut f = V2Framer::new();
        let mut out = Vec::new();
        assert!(f.feed(bad, &mut out).is_err(), "{bad:?}");
        assert!(f.feed(b"    14cmd=kvs-fence;", &mut out).is_err());
        assert!(out.is_empty());
    }
    // A body over the limit is refused before it is buffered.
    let (_, r) = frames(b"999999cmd=");
    assert!(matches!(r, Err(Error::LineTooLong { .. })));
    // Framed but unreadable bodies are answered, the stream goes on.
    let mut wire = Vec::new();
    for body in ["cmd=kvs-put;novalue;", "key=v;", "cmd=;", "cmd=x;=v;"] {
        wire.extend_from_slice(format!("{:>6}{body}", body.len()).as_bytes());
    }
    wire.extend_from_slice(b"     4\xff\xfe;;");
    wire.extend_from_slice(&V2Message::new("finalize").encode().unwrap());
    let (out, r) = frames(&wire);
    r.unwrap();
    assert_eq!(out.len(), 6);
    match &out[0] {
        V2Frame::Invalid { cmd, .. } => assert_eq!(cmd.as_deref(), Some("kvs-put")),
        other => panic!("{other:?}"),
    }
    assert!(out[1..5]
        .iter()
        .all(|f| matches!(f, V2Frame::Invalid { .. })));
    assert!(matches!(&out[5], V2Frame::Message(m) if m.cmd == "finalize"));
    // Queries are checked against the table.
    assert!(matches!(
        V2Message::new("no-such").check_query(),
        Err(Error::UnknownCommand { .. })
    ));
    assert!(matches!(
        V2Message::new("kvs-put").with("key", "k").check_query(),
        Err(Error::MissingField { field: "value", .. })
    ));
    // Numbers that are not numbers.
    let m = V2Message::new("fullinit").with("pmirank", "x");
    assert!(m.number::<u32>("pmirank").is_err());
}

#[test]
fn error_replies_name_the_response_and_echo_thrid() {
    let q = V2Message::new("kvs-get")
        .with("key", "k")
        .with("thrid", "7");
    let r = V2Message::error_reply(&q, 1, "not;found");
    assert_eq!(r.cmd, "kvs-get-response");
    assert_eq!(r.rc().unwrap(), 1);
    assert_eq!(r.get("thrid"), Some("7"));
    assert_eq!(r.errmsg(), Some("not,found"));
    assert!(r.encode().is_ok());
    for c in COMMANDS {
        if let Some(resp) = c.response {
            assert_eq!(resp, format!("{}-response", c.query));
        }
    }
}
