//! PMI-2's `spawn` query, both ways: a [`SpawnRequest`] written as the
//! pairs MPICH's PMI-2 client sends, and read back by the server.
//!
//! The query is `ncmds`, `preputcount` with `ppkeyI`/`ppvalI`, then per
//! command, in order, `subcmd` (the program), `maxprocs`, `argc` with
//! `argvI`, `infokeycount` with `infokeyI`/`infovalI`. The pairs are read
//! in order: each `subcmd` opens a command. The response is
//! `spawn-response` with `rc`, `jobid` (the new job's id, a string; MPICH's
//! client requires it when its caller asks for the id) on success, `errmsg`
//! on failure, and (Rivet's server, as Slurm's) `errcodes`, one per
//! process, comma-separated.

use super::message::{SpawnCommand, SpawnRequest};
use super::v2::V2Message;
use crate::error::{Error, Result};

/// Most commands or processes one query may name (bounds what a garbled
/// count makes the server allocate).
const MAX_ITEMS: usize = 4096;

/// The `spawn` query for `request`.
pub fn spawn_query(request: &SpawnRequest) -> V2Message {
    let mut q = V2Message::new("spawn")
        .with("ncmds", request.commands.len())
        .with("preputcount", request.preput.len());
    for (i, (k, v)) in request.preput.iter().enumerate() {
        q = q
            .with(&format!("ppkey{i}"), k)
            .with(&format!("ppval{i}"), v);
    }
    for c in &request.commands {
        q = q
            .with("subcmd", &c.execname)
            .with("maxprocs", c.nprocs)
            .with("argc", c.args.len());
        for (i, a) in c.args.iter().enumerate() {
            q = q.with(&format!("argv{i}"), a);
        }
        q = q.with("infokeycount", c.info.len());
        for (i, (k, v)) in c.info.iter().enumerate() {
            q = q
                .with(&format!("infokey{i}"), k)
                .with(&format!("infoval{i}"), v);
        }
    }
    q
}

fn bad(reason: String) -> Error {
    Error::Malformed {
        reason: format!("PMI-2 spawn: {reason}"),
    }
}

/// `key` numbered `prefix<N>`: N.
fn index_of(key: &str, prefix: &str) -> Option<usize> {
    key.strip_prefix(prefix)?.parse().ok()
}

fn count(value: &str, what: &str) -> Result<usize> {
    value
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|&n| n <= MAX_ITEMS)
        .ok_or_else(|| bad(format!("{what}={value:?} is not a count up to {MAX_ITEMS}")))
}

/// Put `value` at `index` of `list`, which must be the next one.
fn place<T>(list: &mut Vec<T>, index: usize, value: T, what: &str) -> Result<()> {
    if index != list.len() {
        return Err(bad(format!("{what}{index} out of order")));
    }
    list.push(value);
    Ok(())
}

/// The [`SpawnRequest`] a `spawn` query asks for, checked: the counts
/// match what follows them, every command has a program and `maxprocs`.
pub fn spawn_request(q: &V2Message) -> Result<SpawnRequest> {
    let ncmds = count(q.require("ncmds")?, "ncmds")?;
    let mut request = SpawnRequest::default();
    let mut keys: Vec<String> = Vec::new();
    let mut vals: Vec<String> = Vec::new();
    let mut info_keys: Vec<String> = Vec::new();
    // Per command: (argc, infokeycount) as announced.
    let mut announced: Vec<(usize, usize)> = Vec::new();
    let mut maxprocs_seen = Vec::new();
    for (k, v) in &q.pairs {
        let current = request.commands.last_mut();
        match (k.as_str(), current) {
            ("ncmds" | "preputcount" | "thrid", _) => {}
            ("subcmd", _) => {
                if let Some(c) = request.commands.last() {
                    if !info_keys.is_empty() {
                        return Err(bad(format!("{}: an info key without a value", c.execname)));
                    }
                }
                if request.commands.len() == ncmds {
                    return Err(bad(format!("more than ncmds={ncmds} commands")));
                }
                request.commands.push(SpawnCommand {
                    execname: v.clone(),
                    ..SpawnCommand::default()
                });
                announced.push((0, 0));
                maxprocs_seen.push(false);
            }
            (key, None) if key.starts_with("ppkey") => {
                let i = index_of(key, "ppkey").ok_or_else(|| bad(format!("key {key}")))?;
                place(&mut keys, i, v.clone(), "ppkey")?;
            }
            (key, None) if key.starts_with("ppval") => {
                let i = index_of(key, "ppval").ok_or_else(|| bad(format!("key {key}")))?;
                place(&mut vals, i, v.clone(), "ppval")?;
            }
            ("maxprocs", Some(c)) => {
                c.nprocs = v
                    .trim()
                    .parse()
                    .ok()
                    .filter(|&n: &u32| n > 0 && n as usize <= MAX_ITEMS)
                    .ok_or_else(|| bad(format!("maxprocs={v:?}")))?;
                *maxprocs_seen.last_mut().expect("a command") = true;
            }
            ("argc", Some(_)) => announced.last_mut().expect("a command").0 = count(v, "argc")?,
            ("infokeycount", Some(_)) => {
                announced.last_mut().expect("a command").1 = count(v, "infokeycount")?
            }
            (key, Some(c)) if key.starts_with("argv") => {
                let i = index_of(key, "argv").ok_or_else(|| bad(format!("key {key}")))?;
                place(&mut c.args, i, v.clone(), "argv")?;
            }
            (key, Some(c)) if key.starts_with("infokey") => {
                let i = index_of(key, "infokey").ok_or_else(|| bad(format!("key {key}")))?;
                if i != c.info.len() || !info_keys.is_empty() {
                    return Err(bad(format!("infokey{i} out of order")));
                }
                info_keys.push(v.clone());
            }
            (key, Some(c)) if key.starts_with("infoval") => {
                let i = index_of(key, "infoval").ok_or_else(|| bad(format!("key {key}")))?;
                let Some(ik) = info_keys.pop().filter(|_| i == c.info.len()) else {
                    return Err(bad(format!("infoval{i} without its infokey")));
                };
                c.info.push((ik, v.clone()));
            }
            // Unknown keys are left alone, as PMI-2 servers do.
            _ => {}
        }
    }
    let preputs = count(q.require("preputcount")?, "preputcount")?;
    if keys.len() != preputs || vals.len() != preputs {
        return Err(bad(format!(
            "preputcount={preputs} but {} ppkey and {} ppval",
            keys.len(),
            vals.len()
        )));
    }
    request.preput = keys.into_iter().zip(vals).collect();
    if request.commands.len() != ncmds || ncmds == 0 {
        return Err(bad(format!(
            "ncmds={ncmds} but {} commands",
            request.commands.len()
        )));
    }
    for ((c, &(argc, infos)), &maxprocs) in
        request.commands.iter().zip(&announced).zip(&maxprocs_seen)
    {
        if !maxprocs || c.execname.is_empty() {
            return Err(bad(format!("command {:?} without maxprocs", c.execname)));
        }
        if c.args.len() != argc || c.info.len() != infos {
            return Err(bad(format!(
                "{}: argc={argc}, infokeycount={infos}, but {} arguments and {} info pairs",
                c.execname,
                c.args.len(),
                c.info.len()
            )));
        }
    }
    Ok(request)
}

/// `errcodes` of a `spawn-response`: comma-separated integers.
pub fn parse_errcodes(value: &str) -> Option<Vec<i32>> {
    value
        .split(',')
        .map(|c| c.trim().parse().ok())
        .collect::<Option<Vec<i32>>>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> SpawnRequest {
        SpawnRequest {
            commands: vec![
                SpawnCommand {
                    execname: "/bin/a".into(),
                    nprocs: 2,
                    args: vec!["x".into(), "y z".into()],
                    info: vec![("wdir".into(), "/tmp".into())],
                },
                SpawnCommand {
                    execname: "b".into(),
                    nprocs: 1,
                    args: vec![],
                    info: vec![("path".into(), "/bin".into()), ("host".into(), "h".into())],
                },
            ],
            preput: vec![("PARENT_ROOT_PORT_NAME".into(), "tag#1$x".into())],
        }
    }

    #[test]
    fn a_request_round_trips_through_the_query_and_the_wire() {
        let q = spawn_query(&request());
        let body = q.encode().unwrap();
        let text = String::from_utf8(body[6..].to_vec()).unwrap();
        let back = V2Message::parse(&text).unwrap();
        assert_eq!(spawn_request(&back).unwrap(), request());
    }

    #[test]
    fn counts_that_do_not_match_what_follows_are_refused() {
        let q = spawn_query(&request());
        let with = |key: &str, value: &str| {
            let mut q = q.clone();
            for (k, v) in q.pairs.iter_mut() {
                if k == key {
                    *v = value.to_string();
                    break;
                }
            }
            q
        };
        for bad in [
            with("ncmds", "3"),
            with("ncmds", "1"),
            with("ncmds", "0"),
            with("preputcount", "2"),
            with("argc", "1"),
            with("infokeycount", "0"),
            with("maxprocs", "0"),
            with("maxprocs", "-1"),
            with("ncmds", "99999999"),
        ] {
            assert!(spawn_request(&bad).is_err(), "{bad:?}");
        }
        let mut no_maxprocs = q.clone();
        no_maxprocs.pairs.retain(|(k, _)| k != "maxprocs");
        assert!(spawn_request(&no_maxprocs).is_err());
        let mut lone_key = q.clone();
        lone_key.pairs.retain(|(k, _)| k != "infoval0");
        assert!(spawn_request(&lone_key).is_err());
        assert!(spawn_request(&V2Message::new("spawn")).is_err());
    }

    #[test]
    fn errcodes_are_comma_separated() {
        assert_eq!(parse_errcodes("0,127,-1"), Some(vec![0, 127, -1]));
        assert_eq!(parse_errcodes("0,x"), None);
    }
}
