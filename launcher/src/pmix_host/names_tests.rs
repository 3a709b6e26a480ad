//! The name upcalls' answers, from a table of our own.

use super::*;
use crate::pmix_host::values::Data;
use rivet_pmi::server::NameService;

/// A bare table; `down` makes every question fail as an unreachable
/// name server's would.
#[derive(Default)]
struct Fake {
    names: NameService,
    down: bool,
}

impl Table for Fake {
    fn ask(&mut self, request: &NameRequest) -> Result<Message, String> {
        if self.down {
            return Err("cannot connect".into());
        }
        Ok(self.names.answer_for(request, Some("me")))
    }
    fn publisher(&self, service: &str) -> Option<(String, u32)> {
        self.names.publisher(service).map(|o| (o.to_string(), 7))
    }
    fn unpublish_all(&mut self) -> Option<usize> {
        Some(self.names.unpublish_all_by("me"))
    }
    fn take(&mut self, service: &str) {
        let _ = self.names.unpublish_by(service, Some("me"));
    }
}

fn run(op: NameOp, t: &mut Fake) -> Option<Answer> {
    let mut warnings = Vec::new();
    let a = answer(&op, t, &mut |w| warnings.push(w.to_string()));
    assert_eq!(t.down, !warnings.is_empty(), "{warnings:?}");
    a
}

fn lookup(keys: &[&str], wait: Option<Wait>) -> NameOp {
    NameOp::Lookup {
        keys: keys.iter().map(|k| k.to_string()).collect(),
        wait,
    }
}

#[test]
fn publish_lookup_unpublish_map_onto_pmix_statuses() {
    let mut t = Fake::default();
    let publish = NameOp::Publish(vec![("svc".into(), "port".into())]);
    assert_eq!(run(publish.clone(), &mut t).unwrap().status, PMIX_SUCCESS);
    assert_eq!(run(publish, &mut t).unwrap().status, PMIX_ERR_DUPLICATE_KEY);
    let found = run(lookup(&["svc"], None), &mut t).unwrap();
    assert_eq!(found.status, PMIX_SUCCESS);
    assert_eq!(
        found.found,
        vec![Found {
            key: "svc".into(),
            port: "port".into(),
            publisher: Some(("me".into(), 7)),
        }]
    );
    let partial = run(lookup(&["svc", "nope"], None), &mut t).unwrap();
    assert_eq!(partial.status, PMIX_ERR_PARTIAL_SUCCESS);
    assert_eq!(partial.found.len(), 1);
    // Someone else's name may not be taken away.
    t.names.publish_by("theirs", "p", Some("other")).unwrap();
    let theirs = NameOp::Unpublish(Some(vec!["theirs".into()]));
    assert_eq!(run(theirs, &mut t).unwrap().status, PMIX_ERR_NO_PERMISSIONS);
    // Without keys: all of mine, and only mine.
    assert_eq!(
        run(NameOp::Unpublish(None), &mut t).unwrap().status,
        PMIX_SUCCESS
    );
    assert_eq!(
        run(lookup(&["svc"], None), &mut t).unwrap().status,
        PMIX_ERR_NOT_FOUND
    );
    assert_eq!(t.names.lookup("theirs"), Ok("p"));
    let gone = NameOp::Unpublish(Some(vec!["svc".into()]));
    assert_eq!(run(gone, &mut t).unwrap().status, PMIX_ERR_NOT_FOUND);
}

#[test]
fn a_lookup_waits_only_when_asked_and_until_its_timeout() {
    let mut t = Fake::default();
    // No PMIX_WAIT (Open MPI 4.1's MPI_Lookup_name): not found, now.
    let a = run(lookup(&["later"], None), &mut t).unwrap();
    assert_eq!((a.status, a.found.len()), (PMIX_ERR_NOT_FOUND, 0));
    // PMIX_WAIT without a timeout: no answer until it is published.
    let forever = Some(Wait {
        count: 0,
        until: None,
    });
    assert_eq!(run(lookup(&["later"], forever), &mut t), None);
    // A timeout that has passed: answered with what there is.
    let past = Some(Wait {
        count: 0,
        until: Some(Instant::now()),
    });
    let a = run(lookup(&["later"], past), &mut t).unwrap();
    assert_eq!(a.status, PMIX_ERR_NOT_FOUND);
    // Waiting for one of two keys: answered once one is there.
    let one = Some(Wait {
        count: 1,
        until: None,
    });
    assert_eq!(run(lookup(&["later", "x"], one), &mut t), None);
    t.names.publish("later", "p").unwrap();
    let a = run(lookup(&["later", "x"], one), &mut t).unwrap();
    assert_eq!(a.status, PMIX_ERR_PARTIAL_SUCCESS);
    assert_eq!(run(lookup(&["later"], forever), &mut t).unwrap().status, 0);
}

#[test]
fn an_unreachable_name_server_fails_the_call_and_does_not_wait() {
    let mut t = Fake {
        down: true,
        ..Fake::default()
    };
    let publish = NameOp::Publish(vec![("svc".into(), "port".into())]);
    assert_eq!(run(publish, &mut t).unwrap().status, PMIX_ERR_UNREACH);
    let forever = Some(Wait {
        count: 0,
        until: None,
    });
    assert_eq!(
        run(lookup(&["svc"], forever), &mut t).unwrap().status,
        PMIX_ERR_UNREACH
    );
}

/// Open MPI's id agreement: a byte object published to be read once is
/// found by the first lookup, which removes it; a kept one stays.
#[test]
fn a_value_published_to_be_read_once_goes_with_its_first_lookup() {
    let mut t = Fake::default();
    let once = Stored {
        data: Data::Bytes(vec![1, 2, 3]),
        once: true,
    }
    .encode();
    let publish = NameOp::Publish(vec![("cid:send:0".into(), once.clone())]);
    assert_eq!(run(publish, &mut t).unwrap().status, PMIX_SUCCESS);
    let found = run(lookup(&["cid:send:0"], None), &mut t).unwrap();
    assert_eq!(found.status, PMIX_SUCCESS);
    assert_eq!(found.found[0].port, once);
    assert_eq!(
        Stored::decode(&found.found[0].port).data,
        Data::Bytes(vec![1, 2, 3])
    );
    let again = run(lookup(&["cid:send:0"], None), &mut t).unwrap();
    assert_eq!(again.status, PMIX_ERR_NOT_FOUND);
    // The next round may publish the same key again.
    let publish = NameOp::Publish(vec![("cid:send:0".into(), once)]);
    assert_eq!(run(publish, &mut t).unwrap().status, PMIX_SUCCESS);

    let kept = NameOp::Publish(vec![("port".into(), "tcp://x".into())]);
    assert_eq!(run(kept, &mut t).unwrap().status, PMIX_SUCCESS);
    for _ in 0..2 {
        let found = run(lookup(&["port"], None), &mut t).unwrap();
        assert_eq!(found.status, PMIX_SUCCESS);
    }
}
