//! [`Message`] → bytes: the one writer for both directions.
//!
//! Queries are spelled exactly as MPICH's client spells them. Responses put
//! `rc` first (as MPICH's `pmi_wire.c` does) and leave it out where Hydra
//! 4.0.2 does (`maxes`, `appnum`, `my_kvsname`, `universe_size`,
//! `barrier_out`, `finalize_ack`, `initack`) unless it is an error. On an
//! error the payload is left out, except the versions of `response_to_init`.

use std::fmt::Display;

use crate::error::{Error, Result};
use crate::group::ProcName;
use crate::wire::escape::{check_encodable, escape_value};
use crate::wire::limits::{MAX_LINE, MAX_SEND_LINE};
use crate::wire::message::Message;
use crate::wire::spawn::write_spawn;

/// A `cmd=` line being assembled.
struct Line(String);

impl Line {
    fn new(cmd: &str) -> Line {
        Line(format!("cmd={cmd}"))
    }

    /// A field whose value needs no escaping (numbers).
    fn num(mut self, key: &str, value: impl Display) -> Line {
        self.0.push(' ');
        self.0.push_str(key);
        self.0.push('=');
        self.0.push_str(&value.to_string());
        self
    }

    /// A text field, escaped.
    fn text(mut self, key: &'static str, value: &str) -> Result<Line> {
        let v = escape_value(key, value)?;
        self.0.push(' ');
        self.0.push_str(key);
        self.0.push('=');
        self.0.push_str(&v);
        Ok(self)
    }

    fn opt_text(self, key: &'static str, value: Option<&str>) -> Result<Line> {
        match value {
            Some(v) => self.text(key, v),
            None => Ok(self),
        }
    }

    /// `rc=` and, on failure, `msg=`; payload goes in between via `body`.
    fn status(
        self,
        rc: i32,
        msg: &Option<String>,
        always_rc: bool,
        body: impl FnOnce(Line) -> Result<Line>,
    ) -> Result<Line> {
        let line = if always_rc || rc != 0 || msg.is_some() {
            self.num("rc", rc)
        } else {
            self
        };
        let line = if rc == 0 { body(line)? } else { line };
        line.opt_text("msg", msg.as_deref())
    }
}

/// A card on the wire: `-` when there is none.
fn card_text(card: &str) -> &str {
    if card.is_empty() {
        "-"
    } else {
        card
    }
}

impl Message {
    /// Append this message's wire form (newline included) to `out`.
    ///
    /// Fails if a value cannot be carried (line breaks, control characters)
    /// or the line would be longer than the peer reads: [`MAX_LINE`] for
    /// queries, [`MAX_SEND_LINE`] for responses (MPICH 4.0.2's limit).
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<()> {
        use Message as M;
        let no_body = |l: Line| -> Result<Line> { Ok(l) };
        let line = match self {
            M::Spawn(request) => return write_spawn(request, out),
            M::Init {
                version,
                subversion,
            } => Line::new("init")
                .num("pmi_version", version)
                .num("pmi_subversion", subversion),
            M::GetMaxes | M::GetAppnum | M::GetMyKvsname | M::GetUniverseSize | M::Finalize => {
                Line::new(self.cmd())
            }
            M::Put {
                kvsname,
                key,
                value,
            } => Line::new("put")
                .text("kvsname", kvsname)?
                .text("key", key)?
                .text("value", value)?,
            M::Get { kvsname, key } => Line::new("get")
                .opt_text("kvsname", kvsname.as_deref())?
                .text("key", key)?,
            M::BarrierIn { group } => {
                Line::new("barrier_in").opt_text("group", group.as_deref())?
            }
            M::Abort { exitcode, message } => Line::new("abort")
                .num("exitcode", exitcode)
                .opt_text("message", message.as_deref().filter(|m| !m.is_empty()))?,
            M::PublishName { service, port } => Line::new("publish_name")
                .text("service", service)?
                .text("port", port)?,
            M::UnpublishName { service } => Line::new("unpublish_name").text("service", service)?,
            M::LookupName { service } => Line::new("lookup_name").text("service", service)?,
            M::InitAck { pmiid, secret } => Line::new("initack")
                .num("pmiid", pmiid)
                .opt_text("secret", secret.as_deref())?,
            M::GroupConnect {
                procs,
                id,
                flags,
                ctx,
                card,
            } => {
                let list: Vec<String> = procs.iter().map(ProcName::to_string).collect();
                let mut l = Line::new("group_connect")
                    .text("procs", &list.join(","))?
                    .opt_text("id", id.as_deref())?;
                if !flags.is_empty() {
                    l = l.num("flags", flags);
                }
                l.num("ctx", ctx).text("card", card_text(card))?
            }
            M::GroupReady { op } => Line::new("group_ready").num("op", op),
            M::GroupDisconnect { group } => Line::new("group_disconnect").text("group", group)?,
            M::ResourceRegister(r) | M::ResourceRelease(r) => Line::new(self.cmd())
                .num("kind", r.kind().as_str())
                .text("name", r.name())?,

            M::InitResponse {
                rc,
                version,
                subversion,
                msg,
            } => Line::new("response_to_init")
                .num("rc", rc)
                .num("pmi_version", version)
                .num("pmi_subversion", subversion)
                .opt_text("msg", msg.as_deref())?,
            M::Maxes {
                rc,
                kvsname_max,
                keylen_max,
                vallen_max,
                msg,
            } => Line::new("maxes").status(*rc, msg, false, |l| {
                Ok(l.num("kvsname_max", kvsname_max)
                    .num("keylen_max", keylen_max)
                    .num("vallen_max", vallen_max))
            })?,
            M::Appnum { rc, appnum, msg } => {
                Line::new("appnum").status(*rc, msg, false, |l| Ok(l.num("appnum", appnum)))?
            }
            M::MyKvsname { rc, kvsname, msg } => {
                Line::new("my_kvsname").status(*rc, msg, false, |l| l.text("kvsname", kvsname))?
            }
            M::UniverseSize { rc, size, msg } => {
                Line::new("universe_size").status(*rc, msg, false, |l| Ok(l.num("size", size)))?
            }
            M::PutResult { rc, msg } => Line::new("put_result").status(*rc, msg, true, no_body)?,
            M::GetResult { rc, value, msg } => {
                Line::new("get_result")
                    .status(*rc, msg, true, |l| l.opt_text("value", value.as_deref()))?
            }
            M::BarrierOut { rc, tag, msg } => {
                let l = Line::new("barrier_out").status(*rc, msg, false, no_body)?;
                match tag {
                    Some(t) => l.num("tag", t),
                    None => l,
                }
            }
            M::FinalizeAck { rc, msg } => {
                Line::new("finalize_ack").status(*rc, msg, false, no_body)?
            }
            M::PublishResult { rc, msg } => {
                Line::new("publish_result").status(*rc, msg, true, no_body)?
            }
            M::UnpublishResult { rc, msg } => {
                Line::new("unpublish_result").status(*rc, msg, true, no_body)?
            }
            M::LookupResult { rc, port, msg } => {
                Line::new("lookup_result")
                    .status(*rc, msg, true, |l| l.opt_text("port", port.as_deref()))?
            }
            M::SpawnResult { rc, errcodes, msg } => {
                let mut l = Line::new("spawn_result").num("rc", rc);
                if !errcodes.is_empty() {
                    let list: Vec<String> = errcodes.iter().map(i32::to_string).collect();
                    l = l.num("errcodes", list.join(","));
                }
                l.opt_text("msg", msg.as_deref())?
            }
            M::InitAckResponse { rc, msg } => {
                Line::new("initack").status(*rc, msg, false, no_body)?
            }
            M::Set { key, value } => {
                let mut l = Line::new("set");
                // A key is read verbatim up to `=` or a space (no
                // unescaping), so it is written verbatim, or refused.
                check_encodable("set key", key)?;
                if key.is_empty() || key.contains(['=', ' ', '\t']) {
                    return Err(Error::Unencodable {
                        field: "set key",
                        what: "an empty key, '=', a space or a tab",
                    });
                }
                let k = key;
                let v = escape_value("set value", value)?;
                l.0.push_str(&format!(" {k}={v}"));
                l
            }
            M::Error { rc, msg } => Line::new("error")
                .num("rc", rc)
                .opt_text("msg", msg.as_deref())?,
            M::GroupConnectResult {
                rc,
                op,
                ctx,
                size,
                group,
                rank,
                msg,
            } => Line::new("group_connect_result").status(*rc, msg, true, |l| {
                let l = l.num("op", op).num("ctx", ctx).num("size", size);
                match (group, rank) {
                    (Some(g), Some(r)) => Ok(l.text("group", g)?.num("rank", r)),
                    _ => Ok(l),
                }
            })?,
            M::GroupMember {
                proc,
                pg_size,
                card,
            } => Line::new("group_member")
                .text("proc", &proc.to_string())?
                .num("pgsize", pg_size)
                .text("card", card_text(card))?,
            M::GroupReadyResult { rc, msg } => {
                Line::new("group_ready_result").status(*rc, msg, true, no_body)?
            }
            M::GroupDisconnectResult { rc, msg } => {
                Line::new("group_disconnect_result").status(*rc, msg, true, no_body)?
            }
            M::ResourceRegisterResult { rc, msg } | M::ResourceReleaseResult { rc, msg } => {
                Line::new(self.cmd()).status(*rc, msg, true, no_body)?
            }
            M::GroupJob {
                nspace,
                size,
                cluster,
            } => Line::new("group_job")
                .text("nspace", nspace)?
                .num("size", size)
                .opt_text("cluster", cluster.as_deref())?,
            M::GroupRelay {
                nspace,
                rank,
                lines,
            } => Line::new("group_relay")
                .text("nspace", nspace)?
                .num("rank", rank)
                .num("lines", lines),
            M::GroupEnded { nspace, rank } => Line::new("group_ended")
                .text("nspace", nspace)?
                .num("rank", rank),
            M::GroupLost {
                nspace,
                rank,
                group,
            } => Line::new("group_lost")
                .text("nspace", nspace)?
                .num("rank", rank)
                .text("group", group)?,
            M::GroupJobResult { rc, msg } => {
                Line::new("group_job_result").status(*rc, msg, true, no_body)?
            }
            M::GroupEvent(event) => Line::new("group_event")
                .text("group", &event.group)?
                .num("event", event.kind.as_str())
                .text("proc", &event.proc.to_string())?,
        };
        let mut text = line.0;
        text.push('\n');
        let max = if self.is_query() {
            MAX_LINE
        } else {
            MAX_SEND_LINE
        };
        if text.len() > max {
            return Err(Error::LineTooLong {
                len: text.len(),
                max,
            });
        }
        out.extend_from_slice(text.as_bytes());
        Ok(())
    }

    /// This message's wire form as a new buffer.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.encode_into(&mut out)?;
        Ok(out)
    }
}
