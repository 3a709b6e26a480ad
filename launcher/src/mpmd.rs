//! MPMD: several programs in one job, as mpiexec writes it:
//! `rivetrun [global options] -n 2 prog1 ARGS : -n 3 -env K V prog2 ARGS`,
//! or `-configfile FILE` (Hydra's format: one section per line, `#`
//! comments, arguments split on whitespace).
//!
//! Ranks are numbered consecutively over the sections; each section is
//! one "app" (PMI's appnum, 0, 1, ...). A section after the first takes
//! the local options `-n`/`-np N`, `-env K V` and `-wdir DIR` before its
//! program; the first section's come from the command line as usual.
//! A lone `:` separates sections, also inside what would otherwise be the
//! first program's arguments (as Hydra reads it).

use std::ffi::OsString;
use std::path::PathBuf;

/// One program of the job and what is its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub nprocs: u32,
    /// `-env` of this section (on top of the global variables).
    pub env: Vec<(String, String)>,
    pub wdir: Option<PathBuf>,
    /// Program and arguments.
    pub command: Vec<OsString>,
}

/// Most ranks over all sections (as `-n`).
pub const MAX_RANKS: u32 = 4096;

/// Split `rest` (what follows the first program, separators included) at
/// `:` and parse each later section.
pub fn later_sections(rest: &[OsString]) -> Result<Vec<Section>, String> {
    rest.split(|a| a == ":")
        .skip(1)
        .map(|args| parse_section(args, None))
        .collect()
}

/// `[-n N] [-env K V]... [-wdir DIR] PROGRAM ARGS...`. `first`: defaults
/// for a section whose options rivetrun's own parser already took.
pub fn parse_section(args: &[OsString], first: Option<&Section>) -> Result<Section, String> {
    let mut s = first.cloned().unwrap_or(Section {
        nprocs: 1,
        env: Vec::new(),
        wdir: None,
        command: Vec::new(),
    });
    let mut i = 0;
    let text = |a: &OsString| a.to_string_lossy().into_owned();
    let value = |i: usize, opt: &str| -> Result<String, String> {
        args.get(i)
            .map(text)
            .ok_or_else(|| format!("{opt} in an MPMD section needs a value"))
    };
    while let Some(arg) = args.get(i) {
        let a = text(arg);
        match a.trim_start_matches('-') {
            _ if !a.starts_with('-') => break,
            "n" | "np" => {
                let v = value(i + 1, &a)?;
                s.nprocs = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_RANKS).contains(n))
                    .ok_or_else(|| format!("{a} {v}: a section needs 1 to {MAX_RANKS} ranks"))?;
                i += 2;
            }
            "env" => {
                let (k, v) = (value(i + 1, &a)?, value(i + 2, &a)?);
                s.env.push((k, v));
                i += 3;
            }
            "wdir" => {
                s.wdir = Some(PathBuf::from(value(i + 1, &a)?));
                i += 2;
            }
            _ => {
                return Err(format!(
                    "unknown option '{a}' in an MPMD section (a section takes -n, -env and \
                     -wdir before its program; global options go before the first program)"
                ))
            }
        }
    }
    s.command = args[i..].to_vec();
    if s.command.is_empty() {
        return Err("an MPMD section (between ':') has no program".into());
    }
    Ok(s)
}

/// The sections of a Hydra config file: each line one section, `#`
/// starting a comment line, blank lines skipped.
pub fn read_configfile(path: &std::path::Path) -> Result<Vec<Section>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("-configfile {}: {e}", path.display()))?;
    let sections: Vec<Section> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .flat_map(|l| {
            // A line may itself hold several sections joined by ':'.
            let args: Vec<OsString> = l.split_whitespace().map(OsString::from).collect();
            args.split(|a| a == ":")
                .map(|a| parse_section(a, None))
                .collect::<Vec<_>>()
        })
        .collect::<Result<_, _>>()
        .map_err(|e| format!("-configfile {}: {e}", path.display()))?;
    if sections.is_empty() {
        return Err(format!(
            "-configfile {}: no section (a line such as `-n 2 ./prog`)",
            path.display()
        ));
    }
    Ok(sections)
}

/// The app (section index) of every rank, and the total.
pub fn appnums(sections: &[Section]) -> Result<Vec<u32>, String> {
    let total: u64 = sections.iter().map(|s| u64::from(s.nprocs)).sum();
    if total > u64::from(MAX_RANKS) {
        return Err(format!(
            "{total} ranks over all MPMD sections; at most {MAX_RANKS}"
        ));
    }
    Ok(sections
        .iter()
        .enumerate()
        .flat_map(|(app, s)| std::iter::repeat_n(app as u32, s.nprocs as usize))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn sections_after_colons() {
        let rest = os(&[
            "a", "x", ":", "-n", "3", "-env", "K", "V", "-wdir", "/tmp", "b", "-n", "9", ":", "c",
        ]);
        let s = later_sections(&rest).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].nprocs, 3);
        assert_eq!(s[0].env, [("K".to_string(), "V".to_string())]);
        assert_eq!(s[0].wdir, Some(PathBuf::from("/tmp")));
        assert_eq!(s[0].command, os(&["b", "-n", "9"]));
        assert_eq!((s[1].nprocs, s[1].command.clone()), (1, os(&["c"])));
        assert_eq!(appnums(&s).unwrap(), [0, 0, 0, 1]);
        for bad in [
            &["a", ":"][..],
            &["a", ":", "-n"],
            &["a", ":", "-n", "0", "b"],
            &["a", ":", "-bogus", "b"],
            &["a", ":", "-env", "K"],
        ] {
            assert!(later_sections(&os(bad)).is_err(), "{bad:?}");
        }
        let big = os(&["a", ":", "-n", "4096", "b", ":", "-n", "1", "c"]);
        assert!(appnums(&later_sections(&big).unwrap()).is_err());
    }

    #[test]
    fn hydra_config_files() {
        let path = std::env::temp_dir().join(format!("rivet-configfile-{}", std::process::id()));
        std::fs::write(
            &path,
            "# two programs\n-n 2 ./a one\n\n  -np 1 -env X 1 ./b : -n 2 c\n",
        )
        .unwrap();
        let s = read_configfile(&path).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].command, os(&["./a", "one"]));
        assert_eq!(s[1].env, [("X".to_string(), "1".to_string())]);
        assert_eq!(appnums(&s).unwrap(), [0, 0, 1, 2, 2]);
        std::fs::write(&path, "# nothing\n").unwrap();
        assert!(read_configfile(&path).is_err());
        std::fs::write(&path, "-n 2\n").unwrap();
        assert!(read_configfile(&path).is_err());
        std::fs::remove_file(&path).unwrap();
        assert!(read_configfile(&path).unwrap_err().contains("-configfile"));
    }
}
