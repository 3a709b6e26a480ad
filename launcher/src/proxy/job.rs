//! The job as rivetrun describes it to a proxy (`remote::wire` lists the
//! words), read after the job secret the proxy proves itself with.

use std::ffi::OsString;
use std::io::BufRead;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use super::SECRET_ENV;
use crate::remote::wire;

/// One program of the job (an MPMD section).
#[derive(Debug, Default)]
pub(super) struct App {
    pub(super) program: PathBuf,
    pub(super) argv0: OsString,
    pub(super) args: Vec<OsString>,
    pub(super) env: Vec<(OsString, OsString)>,
    pub(super) wdir: Option<PathBuf>,
}

/// The job as rivetrun describes it.
#[derive(Debug, Default)]
pub(super) struct Job {
    pub(super) size: u32,
    pub(super) kvsname: String,
    /// Variables every app's ranks get (before the app's own).
    pub(super) env: Vec<(OsString, OsString)>,
    pub(super) apps: Vec<App>,
    /// This node's ranks and the app of each.
    pub(super) ranks: Vec<u32>,
    pub(super) appnums: Vec<u32>,
    /// Whether our tree parent is a proxy, and our children.
    pub(super) has_parent: bool,
    pub(super) children: Vec<u32>,
    pub(super) attrs: Vec<(String, String)>,
    pub(super) label: bool,
    pub(super) map_by: Option<String>,
    pub(super) bind_to: Option<String>,
    pub(super) grace: f64,
    /// `--report-bindings`: one line per rank on stderr before it starts.
    pub(super) report: bool,
    /// `--pmi-port`: the ranks connect to a TCP port of the proxy's.
    pub(super) pmi_port: bool,
    /// Every node's name, as rivetrun has it (the PMIx node map).
    pub(super) hosts: Vec<String>,
}

pub(super) fn read_secret() -> Result<String, String> {
    if let Ok(s) = std::env::var(SECRET_ENV) {
        return Ok(s);
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| format!("reading the job secret from stdin: {e}"))?;
    let s = line.trim().to_string();
    if s.is_empty() {
        return Err(format!("no job secret on stdin or in {SECRET_ENV}"));
    }
    Ok(s)
}

pub(super) fn receive_job(reader: &mut impl BufRead) -> Result<Job, String> {
    let mut job = Job {
        grace: 3.0,
        ..Job::default()
    };
    loop {
        let msg = wire::recv(reader)
            .map_err(|e| format!("reading the job: {e}"))?
            .ok_or("rivetrun closed the connection (wrong secret?)")?;
        let w = |i: usize| msg.get(i).cloned().unwrap_or_default();
        let t = |i: usize| wire::text(&w(i));
        let num = |i: usize| {
            t(i).parse::<u32>()
                .map_err(|_| format!("bad number in {msg:?}"))
        };
        match t(0).as_str() {
            "job" => {
                job.size = num(1)?;
                job.kvsname = t(2);
            }
            "app" => job.apps.push(App::default()),
            "prog" | "arg" | "wdir" if job.apps.is_empty() => {
                return Err(format!("{:?} before any app in the job description", t(0)))
            }
            "prog" => {
                let app = job.apps.last_mut().expect("checked above");
                app.program = PathBuf::from(OsString::from_vec(w(1)));
                app.argv0 = OsString::from_vec(w(2));
            }
            "arg" => {
                (job.apps.last_mut().expect("checked above").args).push(OsString::from_vec(w(1)))
            }
            "wdir" => {
                job.apps.last_mut().expect("checked above").wdir =
                    Some(PathBuf::from(OsString::from_vec(w(1))))
            }
            "env" => {
                let pair = (OsString::from_vec(w(1)), OsString::from_vec(w(2)));
                match job.apps.last_mut() {
                    Some(app) => app.env.push(pair),
                    None => job.env.push(pair),
                }
            }
            "rank" => {
                job.ranks.push(num(1)?);
                job.appnums.push(num(2)?);
            }
            "tree" => {
                job.has_parent = t(1) == "1";
                for i in 2..msg.len() {
                    job.children.push(num(i)?);
                }
            }
            "attr" => job.attrs.push((t(1), t(2))),
            "nodes" => job.hosts = (1..msg.len()).map(t).collect(),
            "label" => job.label = true,
            "report-bindings" => job.report = true,
            "pmi-port" => job.pmi_port = true,
            "map-by" => job.map_by = Some(t(1)),
            "bind-to" => job.bind_to = Some(t(1)),
            "grace" => job.grace = t(1).parse().unwrap_or(3.0),
            "start" => break,
            other => return Err(format!("unexpected {other:?} in the job description")),
        }
    }
    if job.appnums.iter().any(|&a| a as usize >= job.apps.len()) {
        return Err(format!("an appnum past the {} apps", job.apps.len()));
    }
    if job.ranks.is_empty() || job.ranks.iter().any(|&r| r >= job.size) {
        return Err(format!(
            "bad rank list {:?} for size {}",
            job.ranks, job.size
        ));
    }
    Ok(job)
}
