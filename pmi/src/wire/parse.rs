//! Text → [`Message`]: the one parser for both directions.
//!
//! Tolerant where real peers differ (tuple order, extra spaces, unknown keys,
//! missing `rc`/`msg`, Hydra's `msg=success`, `found=FALSE`), strict on
//! limits and numbers.

use crate::error::{Error, Result};
use crate::group::{GroupEvent, ProcName};
use crate::wire::escape::{tokenize, Token};
use crate::wire::limits::{MAX_KEY, MAX_KVSNAME, MAX_VALUE};
use crate::wire::message::Message;
use crate::wire::spawn::parse_spawn;

impl Message {
    /// Parse one message: a single `cmd=` line (newline optional) or a whole
    /// `mcmd=spawn ... endcmd` block.
    pub fn parse(text: &str) -> Result<Message> {
        if text.trim_start().starts_with("mcmd=") {
            return parse_spawn(text).map(Message::Spawn);
        }
        let line = text.strip_suffix('\n').unwrap_or(text);
        let line = line.strip_suffix('\r').unwrap_or(line);
        parse_line(line)
    }
}

/// The `cmd=` name of a line, if it has one (used to name the error answer
/// for a line that does not parse).
pub fn peek_cmd(text: &str) -> Option<String> {
    let trimmed = text.trim_start();
    if trimmed.starts_with("mcmd=") {
        return Some("spawn".to_string());
    }
    tokenize(text.lines().next().unwrap_or(""))
        .ok()?
        .into_iter()
        .find(|t| t.key == "cmd")
        .and_then(|t| t.value)
}

/// A parsed line: its command name and remaining tokens.
struct Fields {
    cmd: String,
    tokens: Vec<Token>,
}

impl Fields {
    /// First value given for `key` (MPICH's lookup also takes the first).
    fn get(&self, key: &str) -> Option<&str> {
        self.tokens
            .iter()
            .find(|t| t.key == key)
            .and_then(|t| t.value.as_deref())
    }

    fn owned(&self, key: &str) -> Option<String> {
        self.get(key).map(str::to_string)
    }

    fn require(&self, key: &'static str) -> Result<String> {
        self.owned(key).ok_or_else(|| Error::MissingField {
            cmd: self.cmd.clone(),
            field: key,
        })
    }

    fn number<T: std::str::FromStr>(&self, key: &'static str) -> Result<Option<T>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse::<T>()
                .map(Some)
                .map_err(|_| Error::BadNumber {
                    cmd: self.cmd.clone(),
                    field: key,
                    value: v.to_string(),
                }),
        }
    }

    fn require_number<T: std::str::FromStr>(&self, key: &'static str) -> Result<T> {
        self.number(key)?.ok_or_else(|| Error::MissingField {
            cmd: self.cmd.clone(),
            field: key,
        })
    }

    /// `rc`, 0 when missing (MPICH's client rule).
    fn rc(&self) -> Result<i32> {
        Ok(self.number("rc")?.unwrap_or(0))
    }

    fn msg(&self) -> Option<String> {
        self.owned("msg").or_else(|| self.owned("errmsg"))
    }

    /// A payload number: required on success, defaulted after an error.
    fn payload_number<T: std::str::FromStr + Default>(
        &self,
        rc: i32,
        key: &'static str,
    ) -> Result<T> {
        if rc == 0 {
            self.require_number(key)
        } else {
            Ok(self.number(key)?.unwrap_or_default())
        }
    }

    fn payload_string(&self, rc: i32, key: &'static str) -> Result<String> {
        if rc == 0 {
            self.require(key)
        } else {
            Ok(self.owned(key).unwrap_or_default())
        }
    }
}

fn check_len(what: &'static str, value: &str, max: usize) -> Result<()> {
    if value.len() > max {
        return Err(Error::TooLong {
            what,
            len: value.len(),
            max,
        });
    }
    Ok(())
}

fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::Malformed {
            reason: "empty key".to_string(),
        });
    }
    check_len("key", key, MAX_KEY)
}

fn parse_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Some(true),
        "false" | "no" | "0" => Some(false),
        _ => None,
    }
}

fn parse_errcodes(f: &Fields) -> Result<Vec<i32>> {
    let Some(list) = f.get("errcodes") else {
        return Ok(Vec::new());
    };
    if list.trim().is_empty() {
        return Ok(Vec::new());
    }
    list.split(',')
        .map(|s| {
            s.trim().parse::<i32>().map_err(|_| Error::BadNumber {
                cmd: f.cmd.clone(),
                field: "errcodes",
                value: list.to_string(),
            })
        })
        .collect()
}

/// `card=`: `-` stands for no card.
fn parse_card(f: &Fields) -> Result<String> {
    let card = f.require("card")?;
    Ok(if card == "-" { String::new() } else { card })
}

/// `kind=K name=N` of a `resource_*` query, checked for its kind.
fn parse_resource(f: &Fields) -> Result<crate::resource::Resource> {
    let malformed = |reason: String| Error::Malformed { reason };
    let kind = f.require("kind")?.parse().map_err(malformed)?;
    crate::resource::Resource::new(kind, &f.require("name")?).map_err(malformed)
}

/// `procs=p1,p2,...`: at least one name.
fn parse_procs(f: &Fields) -> Result<Vec<ProcName>> {
    let list = f.require("procs")?;
    if list.is_empty() {
        return Err(Error::Malformed {
            reason: "group_connect: procs= names no process".to_string(),
        });
    }
    list.split(',').map(str::parse).collect()
}

/// A field naming one process (rank required, no wildcard).
fn parse_one_proc(f: &Fields, key: &'static str) -> Result<ProcName> {
    let proc: ProcName = f.require(key)?.parse()?;
    if proc.rank.is_none() {
        return Err(Error::Malformed {
            reason: format!("{}: {key}={proc} must name one rank, not *", f.cmd),
        });
    }
    Ok(proc)
}

fn parse_group_connect_result(f: &Fields) -> Result<Message> {
    let rc = f.rc()?;
    let group = f.owned("group").filter(|_| rc == 0);
    let rank = if rc == 0 { f.number("rank")? } else { None };
    if group.is_some() != rank.is_some() {
        return Err(Error::Malformed {
            reason: "group_connect_result carries group= without rank= or rank= without group="
                .to_string(),
        });
    }
    Ok(Message::GroupConnectResult {
        rc,
        op: f.payload_number(rc, "op")?,
        ctx: f.payload_number(rc, "ctx")?,
        size: f.payload_number(rc, "size")?,
        group,
        rank,
        msg: f.msg(),
    })
}

fn parse_line(line: &str) -> Result<Message> {
    let mut tokens = tokenize(line)?;
    let cmd_pos = tokens.iter().position(|t| t.key == "cmd");
    let cmd = match cmd_pos.map(|i| tokens.remove(i)) {
        Some(Token {
            value: Some(cmd), ..
        }) if !cmd.is_empty() => cmd,
        _ => {
            return Err(Error::MissingCmd {
                line: line.chars().take(80).collect(),
            })
        }
    };
    let f = Fields { cmd, tokens };
    use Message as M;
    let msg = match f.cmd.as_str() {
        // ---- queries ----
        "init" => M::Init {
            version: f.require_number("pmi_version")?,
            subversion: f.require_number("pmi_subversion")?,
        },
        "get_maxes" => M::GetMaxes,
        "get_appnum" => M::GetAppnum,
        "get_my_kvsname" => M::GetMyKvsname,
        "get_universe_size" => M::GetUniverseSize,
        "put" => {
            let kvsname = f.owned("kvsname").unwrap_or_default();
            let key = f.require("key")?;
            let value = f.require("value")?;
            check_len("kvsname", &kvsname, MAX_KVSNAME)?;
            check_key(&key)?;
            check_len("value", &value, MAX_VALUE)?;
            M::Put {
                kvsname,
                key,
                value,
            }
        }
        "get" => {
            let kvsname = f.owned("kvsname");
            let key = f.require("key")?;
            if let Some(k) = &kvsname {
                check_len("kvsname", k, MAX_KVSNAME)?;
            }
            check_key(&key)?;
            M::Get { kvsname, key }
        }
        "barrier_in" => M::BarrierIn {
            group: f.owned("group"),
        },
        "finalize" => M::Finalize,
        "abort" => M::Abort {
            exitcode: f.number("exitcode")?.unwrap_or(1),
            message: f.owned("message"),
        },
        "publish_name" => {
            let service = f.require("service")?;
            let port = f.require("port")?;
            check_len("service name", &service, MAX_VALUE)?;
            check_len("port", &port, MAX_VALUE)?;
            M::PublishName { service, port }
        }
        "unpublish_name" => M::UnpublishName {
            service: f.require("service")?,
        },
        "lookup_name" => M::LookupName {
            service: f.require("service")?,
        },
        "initack" if f.get("pmiid").is_some() => M::InitAck {
            pmiid: f.require_number("pmiid")?,
            secret: f.owned("secret"),
        },
        "group_connect" => {
            let id = f.owned("id");
            if id.as_deref() == Some("") {
                return Err(Error::Malformed {
                    reason: "group_connect: empty id= (leave it out for no connect id)".to_string(),
                });
            }
            M::GroupConnect {
                procs: parse_procs(&f)?,
                id,
                flags: f.get("flags").unwrap_or_default().parse()?,
                ctx: f.require_number("ctx")?,
                card: parse_card(&f)?,
            }
        }
        "group_ready" => M::GroupReady {
            op: f.require_number("op")?,
        },
        "group_disconnect" => M::GroupDisconnect {
            group: f.require("group")?,
        },
        "resource_register" => M::ResourceRegister(parse_resource(&f)?),
        "resource_release" => M::ResourceRelease(parse_resource(&f)?),
        "group_job" => M::GroupJob {
            nspace: f.require("nspace")?,
            size: f.require_number("size")?,
            cluster: f.owned("cluster"),
        },
        "group_relay" => M::GroupRelay {
            nspace: f.require("nspace")?,
            rank: f.require_number("rank")?,
            lines: f.require_number("lines")?,
        },
        "group_ended" => M::GroupEnded {
            nspace: f.require("nspace")?,
            rank: f.require_number("rank")?,
        },
        "group_lost" => M::GroupLost {
            nspace: f.require("nspace")?,
            rank: f.require_number("rank")?,
            group: f.require("group")?,
        },
        "group_job_result" => M::GroupJobResult {
            rc: f.rc()?,
            msg: f.msg(),
        },
        // ---- responses ----
        "initack" => M::InitAckResponse {
            rc: f.rc()?,
            msg: f.msg(),
        },
        "response_to_init" => {
            let rc = f.rc()?;
            M::InitResponse {
                rc,
                version: f.payload_number(rc, "pmi_version")?,
                subversion: f.payload_number(rc, "pmi_subversion")?,
                msg: f.msg(),
            }
        }
        "maxes" => {
            let rc = f.rc()?;
            M::Maxes {
                rc,
                kvsname_max: f.payload_number(rc, "kvsname_max")?,
                keylen_max: f.payload_number(rc, "keylen_max")?,
                vallen_max: f.payload_number(rc, "vallen_max")?,
                msg: f.msg(),
            }
        }
        "appnum" => {
            let rc = f.rc()?;
            M::Appnum {
                rc,
                appnum: f.payload_number(rc, "appnum")?,
                msg: f.msg(),
            }
        }
        "my_kvsname" => {
            let rc = f.rc()?;
            let kvsname = f.payload_string(rc, "kvsname")?;
            check_len("kvsname", &kvsname, MAX_KVSNAME)?;
            M::MyKvsname {
                rc,
                kvsname,
                msg: f.msg(),
            }
        }
        "universe_size" => {
            let rc = f.rc()?;
            M::UniverseSize {
                rc,
                size: f.payload_number(rc, "size")?,
                msg: f.msg(),
            }
        }
        "put_result" => M::PutResult {
            rc: f.rc()?,
            msg: f.msg(),
        },
        "get_result" => {
            let rc = f.rc()?;
            let found = f.get("found").and_then(parse_bool).unwrap_or(true);
            // Hydra 4.0.2 sends `value=unknown` with a failing rc: not a value.
            let value = if found && rc == 0 {
                f.owned("value")
            } else {
                None
            };
            if let Some(v) = &value {
                check_len("value", v, MAX_VALUE)?;
            }
            M::GetResult {
                rc,
                value,
                msg: f.msg(),
            }
        }
        "barrier_out" => M::BarrierOut {
            rc: f.rc()?,
            tag: f.number("tag")?,
            msg: f.msg(),
        },
        "finalize_ack" => M::FinalizeAck {
            rc: f.rc()?,
            msg: f.msg(),
        },
        "publish_result" => M::PublishResult {
            rc: f.rc()?,
            msg: f.msg(),
        },
        "unpublish_result" => M::UnpublishResult {
            rc: f.rc()?,
            msg: f.msg(),
        },
        "lookup_result" => {
            let rc = f.rc()?;
            let port = if rc == 0 { f.owned("port") } else { None };
            if let Some(p) = &port {
                check_len("port", p, MAX_VALUE)?;
            }
            M::LookupResult {
                rc,
                port,
                msg: f.msg(),
            }
        }
        "spawn_result" => M::SpawnResult {
            rc: f.rc()?,
            errcodes: parse_errcodes(&f)?,
            msg: f.msg(),
        },
        "set" => {
            let t = f
                .tokens
                .first()
                .ok_or_else(|| Error::MissingField {
                    cmd: "set".to_string(),
                    field: "size|rank|debug",
                })?
                .clone();
            M::Set {
                key: t.key,
                value: t.value.unwrap_or_default(),
            }
        }
        "group_connect_result" => parse_group_connect_result(&f)?,
        "group_member" => M::GroupMember {
            proc: parse_one_proc(&f, "proc")?,
            pg_size: f.require_number("pgsize")?,
            card: parse_card(&f)?,
        },
        "group_ready_result" => M::GroupReadyResult {
            rc: f.rc()?,
            msg: f.msg(),
        },
        "group_disconnect_result" => M::GroupDisconnectResult {
            rc: f.rc()?,
            msg: f.msg(),
        },
        "resource_register_result" => M::ResourceRegisterResult {
            rc: f.rc()?,
            msg: f.msg(),
        },
        "resource_release_result" => M::ResourceReleaseResult {
            rc: f.rc()?,
            msg: f.msg(),
        },
        "group_event" => M::GroupEvent(GroupEvent {
            group: f.require("group")?,
            kind: f.require("event")?.parse()?,
            proc: parse_one_proc(&f, "proc")?,
        }),
        "error" => M::Error {
            rc: f.number("rc")?.unwrap_or(-1),
            msg: f.msg(),
        },
        _ => return Err(Error::UnknownCommand { cmd: f.cmd }),
    };
    Ok(msg)
}
