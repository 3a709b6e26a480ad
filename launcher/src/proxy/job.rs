//! The job as rivetrun describes it to a proxy (`remote::commands` lists the
//! words), read after the job secret the proxy proves itself with.

use std::ffi::OsString;
use std::io::BufRead;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use super::SECRET_ENV;
use crate::remote::commands as cmd;
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
    /// How many ranks each app has (apps take consecutive ranks).
    pub(super) app_sizes: Vec<u32>,
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
            cmd::JOB => {
                job.size = num(1)?;
                job.kvsname = t(2);
            }
            cmd::APP => job.apps.push(App::default()),
            cmd::PROG | cmd::ARG | cmd::WDIR if job.apps.is_empty() => {
                return Err(format!("{:?} before any app in the job description", t(0)))
            }
            cmd::PROG => {
                let app = job.apps.last_mut().expect("checked above");
                app.program = PathBuf::from(OsString::from_vec(w(1)));
                app.argv0 = OsString::from_vec(w(2));
            }
            cmd::ARG => {
                (job.apps.last_mut().expect("checked above").args).push(OsString::from_vec(w(1)))
            }
            cmd::WDIR => {
                job.apps.last_mut().expect("checked above").wdir =
                    Some(PathBuf::from(OsString::from_vec(w(1))))
            }
            cmd::ENV => {
                let pair = (OsString::from_vec(w(1)), OsString::from_vec(w(2)));
                match job.apps.last_mut() {
                    Some(app) => app.env.push(pair),
                    None => job.env.push(pair),
                }
            }
            cmd::APP_SIZES => {
                job.app_sizes = (1..msg.len()).map(num).collect::<Result<_, _>>()?;
            }
            cmd::RANK => {
                job.ranks.push(num(1)?);
                job.appnums.push(num(2)?);
            }
            cmd::TREE => {
                job.has_parent = t(1) == "1";
                for i in 2..msg.len() {
                    job.children.push(num(i)?);
                }
            }
            cmd::ATTR => job.attrs.push((t(1), t(2))),
            cmd::NODES => job.hosts = (1..msg.len()).map(t).collect(),
            cmd::LABEL => job.label = true,
            cmd::REPORT_BINDINGS => job.report = true,
            cmd::PMI_PORT => job.pmi_port = true,
            cmd::MAP_BY => job.map_by = Some(t(1)),
            cmd::BIND_TO => job.bind_to = Some(t(1)),
            cmd::GRACE => job.grace = t(1).parse().unwrap_or(3.0),
            cmd::START => break,
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
    job.all_appnums()?;
    Ok(job)
}

impl Job {
    /// The app of every rank of the job, from `app_sizes` (empty if it
    /// was not given); an error if the sizes do not add up to the job or
    /// disagree with this node's ranks' apps.
    pub(super) fn all_appnums(&self) -> Result<Vec<u32>, String> {
        if self.app_sizes.is_empty() {
            return Ok(Vec::new());
        }
        let total: u64 = self.app_sizes.iter().map(|&n| u64::from(n)).sum();
        if total != u64::from(self.size) || self.app_sizes.len() != self.apps.len() {
            return Err(format!(
                "app sizes {:?} for {} apps of {} ranks",
                self.app_sizes,
                self.apps.len(),
                self.size
            ));
        }
        let all: Vec<u32> = (self.app_sizes.iter().enumerate())
            .flat_map(|(app, &n)| std::iter::repeat_n(app as u32, n as usize))
            .collect();
        for (&r, &a) in self.ranks.iter().zip(&self.appnums) {
            if all[r as usize] != a {
                return Err(format!(
                    "rank {r} is in app {a}, but app sizes {:?} put it in app {}",
                    self.app_sizes, all[r as usize]
                ));
            }
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job of 4 ranks in two apps, this node holding ranks 1 and 3,
    /// with `app_sizes` as given.
    fn job_with(app_sizes: &[&str], rank3_app: &str) -> Result<Job, String> {
        let mut lines = vec![wire::line(&[cmd::JOB, "4", "kvs"])];
        for _ in 0..2 {
            lines.push(wire::line(&[cmd::APP]));
            lines.push(wire::line(&[cmd::PROG, "/bin/true", "true"]));
        }
        let mut sizes = vec![cmd::APP_SIZES];
        sizes.extend(app_sizes);
        lines.push(wire::line(&sizes));
        lines.push(wire::line(&[cmd::RANK, "1", "1"]));
        lines.push(wire::line(&[cmd::RANK, "3", rank3_app]));
        lines.push(wire::line(&[cmd::START]));
        receive_job(&mut std::io::Cursor::new(lines.concat()))
    }

    #[test]
    fn the_app_of_every_rank_comes_from_the_app_sizes() {
        let job = job_with(&["1", "3"], "1").unwrap();
        assert_eq!(job.all_appnums().unwrap(), [0, 1, 1, 1]);
        // Sizes that miss ranks, name more apps than the job has, or put
        // this node's rank in another app are refused.
        for (sizes, rank3) in [
            (&["1", "2"][..], "1"),
            (&["1", "1", "2"], "1"),
            (&["2", "2"], "1"),
        ] {
            let e = job_with(sizes, rank3).err().unwrap_or_default();
            assert!(e.contains("app"), "{sizes:?}: {e}");
        }
    }
}
