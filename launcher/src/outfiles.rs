//! `-outfile-pattern` / `-errfile-pattern`: each process's stdout or
//! stderr goes to a file named by a pattern, as mpiexec.hydra does.
//!
//! Substitutions (Hydra's): `%r` the rank, `%g` the process group (0 for
//! the job's ranks, N for the processes of spawn N), `%p` the proxy (0:
//! rivetrun is the only one), `%h` this host's name, `%t` whole seconds
//! since rivetrun started; `%%` is `%`. Any other `%x` is refused before
//! anything starts. Each file is created (truncated) once per job and
//! shared by every process whose pattern names it; rivetrun writes whole
//! lines into it (with `-l`, labelled), so lines never interleave.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

/// A checked file-name pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(String);

impl std::str::FromStr for Pattern {
    type Err = String;

    fn from_str(s: &str) -> Result<Pattern, String> {
        if s.is_empty() {
            return Err("an empty file name pattern".into());
        }
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '%' {
                match chars.next() {
                    Some('r' | 'g' | 'p' | 'h' | 't' | '%') => {}
                    Some(x) => {
                        return Err(format!(
                            "%{x} in {s:?} is not a substitution (%r rank, %g process group, \
                             %p proxy, %h host, %t seconds since start, %% a %)"
                        ))
                    }
                    None => return Err(format!("{s:?} ends with a lone %")),
                }
            }
        }
        Ok(Pattern(s.to_string()))
    }
}

/// What the substitutions stand for, for one process.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    pub rank: u32,
    pub pgid: u32,
    pub host: &'a str,
    pub secs: u64,
}

impl Pattern {
    /// The file name for one process.
    pub fn resolve(&self, at: Place<'_>) -> PathBuf {
        let mut out = String::new();
        let mut chars = self.0.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('r') => out.push_str(&at.rank.to_string()),
                Some('g') => out.push_str(&at.pgid.to_string()),
                Some('p') => out.push('0'),
                Some('h') => out.push_str(at.host),
                Some('t') => out.push_str(&at.secs.to_string()),
                Some(other) => out.push(other), // `%%` (others refused by parse)
                None => {}
            }
        }
        PathBuf::from(out)
    }
}

/// The job's output files, opened as processes start.
#[derive(Debug)]
pub struct OutFiles {
    out: Option<Pattern>,
    err: Option<Pattern>,
    host: String,
    started: Instant,
    /// `%t` of each process group, fixed when its first process starts.
    times: HashMap<u32, u64>,
    open: HashMap<PathBuf, Rc<File>>,
}

/// A process's stdout and stderr files (`None`: forwarded as usual).
pub type Files = (Option<Rc<File>>, Option<Rc<File>>);

impl OutFiles {
    pub fn new(out: Option<Pattern>, err: Option<Pattern>, host: String) -> OutFiles {
        OutFiles {
            out,
            err,
            host,
            started: Instant::now(),
            times: HashMap::new(),
            open: HashMap::new(),
        }
    }

    /// The files of rank `rank` of process group `pgid`, created on first use.
    pub fn files_for(&mut self, pgid: u32, rank: u32) -> io::Result<Files> {
        let started = self.started;
        let secs = *self
            .times
            .entry(pgid)
            .or_insert_with(|| started.elapsed().as_secs());
        let host = self.host.clone();
        let at = Place {
            rank,
            pgid,
            host: &host,
            secs,
        };
        let out = self
            .out
            .clone()
            .map(|p| self.file(p.resolve(at)))
            .transpose()?;
        let err = self
            .err
            .clone()
            .map(|p| self.file(p.resolve(at)))
            .transpose()?;
        Ok((out, err))
    }

    fn file(&mut self, path: PathBuf) -> io::Result<Rc<File>> {
        if let Some(f) = self.open.get(&path) {
            return Ok(Rc::clone(f));
        }
        let f = File::create(&path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create output file {}: {e}", path.display()),
            )
        })?;
        let f = Rc::new(f);
        self.open.insert(path, Rc::clone(&f));
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hydras_substitutions() {
        let p: Pattern = "out.%r.%g.%p.%h.%t.%%".parse().unwrap();
        let at = Place {
            rank: 3,
            pgid: 1,
            host: "node7",
            secs: 12,
        };
        assert_eq!(p.resolve(at), PathBuf::from("out.3.1.0.node7.12.%"));
        for bad in ["", "x.%x", "x%", "%R"] {
            assert!(bad.parse::<Pattern>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_file_is_created_once_and_shared() {
        let dir = std::env::temp_dir().join(format!("rivet-outfiles-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("all.txt"), "old contents\n").unwrap();
        let all: Pattern = format!("{}/all.txt", dir.display()).parse().unwrap();
        let each: Pattern = format!("{}/err.%r", dir.display()).parse().unwrap();
        let mut files = OutFiles::new(Some(all), Some(each), "h".into());
        let (o0, e0) = files.files_for(0, 0).unwrap();
        let (o1, e1) = files.files_for(0, 1).unwrap();
        assert!(Rc::ptr_eq(o0.as_ref().unwrap(), o1.as_ref().unwrap()));
        assert!(!Rc::ptr_eq(e0.as_ref().unwrap(), e1.as_ref().unwrap()));
        assert_eq!(
            std::fs::read(dir.join("all.txt")).unwrap(),
            b"",
            "truncated"
        );
        assert!(dir.join("err.1").exists());
        let mut bad = OutFiles::new(
            Some("/nonexistent/dir/%r".parse().unwrap()),
            None,
            "h".into(),
        );
        let e = bad.files_for(0, 0).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/dir/0"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
