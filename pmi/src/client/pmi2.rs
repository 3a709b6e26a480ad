//! The rank side of PMI-2 (`RIVET_PMI=pmi2`), over the same `PMI_FD` or
//! `PMI_PORT` connection PMI-1 would use.
//!
//! Start-up as MPICH's PMI-2 client: the PMI-1 line `cmd=init
//! pmi_version=2 pmi_subversion=0`, its `response_to_init`, then PMI-2
//! framing (`wire/v2.rs`): `fullinit` (with `pmijobid`, `pmirank` and
//! `threaded`, which Slurm requires), `job-getid`, and the `universeSize`
//! job attribute. Then one request, one response, like PMI-1. Puts are
//! sent at once; `kvs-fence` is the barrier; `PMI_` keys are job
//! attributes (`info-getjobattr`), others KVS keys (`kvs-get`); `spawn`
//! as `wire/v2_spawn.rs` writes it.

use std::io::{ErrorKind, Read, Write};

use crate::client::conn::Duplex;
use crate::error::{Error, Result};
use crate::wire::limits::MAX_LINE;
use crate::wire::v2::{V2Frame, V2Framer, V2Message};
use crate::wire::v2_spawn::{parse_errcodes, spawn_query};
use crate::wire::Message;
use crate::wire::SpawnRequest;

/// What `fullinit` and its follow-ups told the client.
#[derive(Debug)]
pub(crate) struct Started {
    pub rank: u32,
    pub size: u32,
    pub appnum: i32,
    pub jobid: String,
    pub universe_size: i32,
}

pub(crate) struct Pmi2 {
    stream: Box<dyn Duplex>,
    framer: V2Framer,
    frames: std::collections::VecDeque<V2Frame>,
}

impl std::fmt::Debug for Pmi2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pmi2").finish_non_exhaustive()
    }
}

fn closed(e: std::io::Error, during: String) -> Error {
    match e.kind() {
        ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof => {
            Error::ConnectionClosed { during }
        }
        _ => Error::io(during, e),
    }
}

impl Pmi2 {
    /// Switch `stream` to PMI-2 and run the start-up; `rank` is this
    /// process's rank as the environment (or `initack`) says, `jobid`
    /// `PMI_JOBID` if set.
    pub fn start(
        stream: Box<dyn Duplex>,
        rank: u32,
        jobid: Option<&str>,
    ) -> Result<(Pmi2, Started)> {
        let mut p = Pmi2 {
            stream,
            framer: V2Framer::new(),
            frames: Default::default(),
        };
        p.init_line()?;
        let full = p.request(
            V2Message::new("fullinit")
                .with("pmijobid", jobid.unwrap_or_default())
                .with("pmirank", rank)
                .with("threaded", "FALSE"),
        )?;
        let number = |key: &'static str| -> Result<i64> {
            full.number::<i64>(key)?.ok_or(Error::MissingField {
                cmd: full.cmd.clone(),
                field: key,
            })
        };
        let (rank, size) = (number("rank")?, number("size")?);
        let (Ok(rank), Ok(size)) = (u32::try_from(rank), u32::try_from(size)) else {
            return Err(Error::Malformed {
                reason: format!("fullinit-response with rank={rank} size={size}"),
            });
        };
        if rank >= size {
            return Err(Error::Malformed {
                reason: format!("fullinit-response with rank={rank} not below size={size}"),
            });
        }
        let appnum = full.number::<i32>("appnum")?.unwrap_or(0);
        let id = p.request(V2Message::new("job-getid"))?;
        let jobid = id.require("jobid")?.to_string();
        let universe_size = p
            .job_attr("universeSize")?
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| i32::try_from(size).unwrap_or(i32::MAX));
        Ok((
            p,
            Started {
                rank,
                size,
                appnum,
                jobid,
                universe_size,
            },
        ))
    }

    /// The PMI-1 `init` asking for version 2, and its answer, read a byte
    /// at a time so nothing of what follows is taken.
    fn init_line(&mut self) -> Result<()> {
        let init = Message::Init {
            version: 2,
            subversion: 0,
        };
        let during = || "sending cmd=init pmi_version=2".to_string();
        self.stream
            .write_all(&init.encode()?)
            .map_err(|e| closed(e, during()))?;
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while line.last() != Some(&b'\n') {
            if line.len() >= MAX_LINE {
                return Err(Error::LineTooLong {
                    len: line.len(),
                    max: MAX_LINE,
                });
            }
            match self.stream.read(&mut byte) {
                Ok(0) => {
                    return Err(Error::ConnectionClosed {
                        during: "waiting for cmd=response_to_init".into(),
                    })
                }
                Ok(_) => line.push(byte[0]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(closed(e, "waiting for cmd=response_to_init".into())),
            }
        }
        let text = String::from_utf8(line).map_err(|_| Error::NotUtf8)?;
        match Message::parse(&text)? {
            Message::InitResponse {
                rc: 0, version: 2, ..
            } => Ok(()),
            Message::InitResponse {
                version,
                subversion,
                rc: 0,
                ..
            } => Err(Error::VersionMismatch {
                version,
                subversion,
            }),
            Message::InitResponse { rc, msg, .. } => Err(Error::Server {
                cmd: "init pmi_version=2".into(),
                rc,
                msg,
            }),
            other => Err(Error::UnexpectedReply {
                expected: "response_to_init",
                got: format!("cmd={}", other.cmd()),
            }),
        }
    }

    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.stream.as_raw_fd()
    }

    fn send(&mut self, q: &V2Message) -> Result<()> {
        let bytes = q.encode()?;
        self.stream
            .write_all(&bytes)
            .and_then(|()| self.stream.flush())
            .map_err(|e| closed(e, format!("sending cmd={}", q.cmd)))
    }

    /// Send `q` and read its response; a response of another command, or
    /// one with `rc≠0`, is an error.
    pub fn request(&mut self, q: V2Message) -> Result<V2Message> {
        let cmd = q.cmd.clone();
        let reply = self.exchange(q)?;
        match reply.rc()? {
            0 => Ok(reply),
            rc => Err(Error::Server {
                cmd,
                rc,
                msg: reply.errmsg().map(str::to_string),
            }),
        }
    }

    /// Send `q` and read its response, whatever its `rc`.
    fn exchange(&mut self, q: V2Message) -> Result<V2Message> {
        self.send(&q)?;
        let expected = crate::wire::v2::command(&q.cmd)
            .and_then(|c| c.response)
            .unwrap_or("a response");
        let reply = self.recv(expected)?;
        if reply.cmd != expected {
            return Err(Error::UnexpectedReply {
                expected,
                got: format!("cmd={}", reply.cmd),
            });
        }
        Ok(reply)
    }

    /// `spawn` (`wire/v2_spawn.rs`): one code per process, all 0 unless
    /// the server sent `errcodes`, and the new job's `jobid` if the server
    /// sent one; a refusal is [`Error::SpawnFailed`] with the server's
    /// codes (or its `rc` for each process) and message.
    pub fn spawn(&mut self, request: &SpawnRequest) -> Result<(Vec<i32>, Option<String>)> {
        let total = usize::try_from(request.total_procs()).unwrap_or(usize::MAX);
        let reply = self.exchange(spawn_query(request))?;
        let codes = reply
            .get("errcodes")
            .and_then(parse_errcodes)
            .filter(|c| c.len() == total);
        match reply.rc()? {
            0 => Ok((
                codes.unwrap_or_else(|| vec![0; total]),
                reply.get("jobid").map(str::to_string),
            )),
            rc => Err(Error::SpawnFailed {
                errcodes: codes.unwrap_or_else(|| vec![rc; total]),
                message: reply.errmsg().map_or_else(
                    || format!("the process manager answered rc={rc}"),
                    str::to_string,
                ),
            }),
        }
    }

    fn recv(&mut self, expected: &'static str) -> Result<V2Message> {
        let mut buf = [0u8; 4096];
        loop {
            match self.frames.pop_front() {
                Some(V2Frame::Message(m)) => return Ok(m),
                Some(V2Frame::Invalid { error, .. }) => {
                    return Err(Error::UnexpectedReply {
                        expected,
                        got: format!("an unreadable PMI-2 message ({error})"),
                    })
                }
                None => {}
            }
            let n = loop {
                match self.stream.read(&mut buf) {
                    Ok(0) => {
                        return Err(Error::ConnectionClosed {
                            during: format!("waiting for cmd={expected}"),
                        })
                    }
                    Ok(n) => break n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(closed(e, format!("waiting for cmd={expected}"))),
                }
            };
            let mut out = Vec::new();
            let fed = self.framer.feed(&buf[..n], &mut out);
            self.frames.extend(out);
            if let (Err(e), true) = (fed, self.frames.is_empty()) {
                return Err(e);
            }
        }
    }

    /// A `found=TRUE` value of a lookup response, `None` when not found.
    fn found(reply: &V2Message) -> Option<String> {
        match reply.flag("found") {
            Some(false) => None,
            _ => reply.get("value").map(str::to_string),
        }
    }

    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        self.request(
            V2Message::new("kvs-put")
                .with("key", key)
                .with("value", value),
        )
        .map(|_| ())
    }

    pub fn fence(&mut self) -> Result<()> {
        self.request(V2Message::new("kvs-fence")).map(|_| ())
    }

    /// `key` from the KVS of job `jobid`.
    pub fn get(&mut self, jobid: &str, key: &str) -> Result<Option<String>> {
        let reply = self.request(
            V2Message::new("kvs-get")
                .with("jobid", jobid)
                .with("srcid", -1)
                .with("key", key),
        )?;
        Ok(Pmi2::found(&reply))
    }

    /// A job attribute (`PMI_process_mapping`, `universeSize`, ...).
    pub fn job_attr(&mut self, key: &str) -> Result<Option<String>> {
        let reply = self.request(V2Message::new("info-getjobattr").with("key", key))?;
        Ok(Pmi2::found(&reply))
    }

    /// `abort`: no answer comes.
    pub fn abort(&mut self, exit_code: i32, message: &str) -> Result<()> {
        let msg = message.replace(';', ",");
        self.send(
            &V2Message::new("abort")
                .with("isworld", 1)
                .with("exitcode", exit_code)
                .with("msg", msg),
        )
    }

    pub fn finalize(&mut self) -> Result<()> {
        self.request(V2Message::new("finalize")).map(|_| ())
    }

    pub fn publish(&mut self, service: &str, port: &str) -> Result<()> {
        self.request(
            V2Message::new("name-publish")
                .with("name", service)
                .with("port", port),
        )
        .map(|_| ())
    }

    pub fn lookup(&mut self, service: &str) -> Result<String> {
        let reply = self.request(V2Message::new("name-lookup").with("name", service))?;
        // Hydra answers `port=`, this crate's server both `port=` and `value=`.
        let port = reply.get("port").map(str::to_string);
        port.or_else(|| Pmi2::found(&reply))
            .ok_or_else(|| Error::Server {
                cmd: "name-lookup".into(),
                rc: 1,
                msg: Some(format!("{service} is not published")),
            })
    }

    pub fn unpublish(&mut self, service: &str) -> Result<()> {
        self.request(V2Message::new("name-unpublish").with("name", service))
            .map(|_| ())
    }
}
