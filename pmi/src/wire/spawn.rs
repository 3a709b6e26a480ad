//! The multi-line `mcmd=spawn ... endcmd` form, read and written.
//!
//! Spawn is the one PMI-1 command that does not fit on a line: argv may hold
//! spaces, so each `key=value` sits on its own line and a value runs to the
//! end of that line. One segment per command; `endcmd` closes a segment and
//! the block is complete when `spawnssofar == totspawns`. `argN` is 1-based,
//! `preput_*_N` and `info_*_N` are 0-based. Old clients wrote `argN=` before
//! `argcnt=`, so order within a segment does not matter. The schema's
//! `infonum` is accepted, but `info_num` is what clients really send.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::error::{Error, Result};
use crate::wire::escape::{escape_mcmd_value, unescape};
use crate::wire::limits::{MAX_MCMD_BLOCK, MAX_SPAWN_ITEMS};
use crate::wire::message::{SpawnCommand, SpawnRequest};

fn malformed(reason: impl Into<String>) -> Error {
    Error::Malformed {
        reason: format!("spawn: {}", reason.into()),
    }
}

/// A segment once read: its command, its preput pairs, its `totspawns`.
type Finished = (SpawnCommand, Vec<(String, String)>, Option<u32>);

/// One segment as it is being read.
#[derive(Default)]
struct Segment {
    nprocs: Option<u32>,
    execname: Option<String>,
    totspawns: Option<u32>,
    spawnssofar: Option<u32>,
    argcnt: Option<usize>,
    args: BTreeMap<u32, String>,
    info_num: Option<usize>,
    info_keys: BTreeMap<u32, String>,
    info_vals: BTreeMap<u32, String>,
    preput_num: Option<usize>,
    preput_keys: BTreeMap<u32, String>,
    preput_vals: BTreeMap<u32, String>,
}

fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T> {
    value
        .trim()
        .parse()
        .map_err(|_| malformed(format!("{key}={value:?} is not a valid number")))
}

/// Insert `map[index] = value`, refusing duplicates.
fn put_indexed(
    map: &mut BTreeMap<u32, String>,
    key: &str,
    index: &str,
    value: String,
) -> Result<()> {
    let i: u32 = number(key, index)?;
    if map.len() >= MAX_SPAWN_ITEMS {
        return Err(malformed(format!(
            "more than {MAX_SPAWN_ITEMS} {key} entries"
        )));
    }
    if map.insert(i, value).is_some() {
        return Err(malformed(format!("{key} given twice")));
    }
    Ok(())
}

/// Check that `map` holds exactly indices `base..base+count` and return the values.
fn dense(
    map: BTreeMap<u32, String>,
    count: Option<usize>,
    base: u32,
    what: &str,
) -> Result<Vec<String>> {
    let n = count.unwrap_or(map.len());
    let ok = map.len() == n
        && map
            .keys()
            .enumerate()
            .all(|(i, k)| u64::from(*k) == i as u64 + u64::from(base));
    if !ok {
        return Err(malformed(format!(
            "{what}: expected {n} entries numbered from {base}, got indices {:?}",
            map.keys().take(8).collect::<Vec<_>>()
        )));
    }
    Ok(map.into_values().collect())
}

fn pairs(
    keys: BTreeMap<u32, String>,
    vals: BTreeMap<u32, String>,
    count: Option<usize>,
    what: &str,
) -> Result<Vec<(String, String)>> {
    let count = count.or(Some(keys.len()));
    let keys = dense(keys, count, 0, &format!("{what} keys"))?;
    let vals = dense(vals, count, 0, &format!("{what} values"))?;
    Ok(keys.into_iter().zip(vals).collect())
}

impl Segment {
    fn set(&mut self, key: &str, value: String) -> Result<()> {
        match key {
            "nprocs" => self.nprocs = Some(number(key, &value)?),
            "execname" => self.execname = Some(value),
            "totspawns" => self.totspawns = Some(number(key, &value)?),
            "spawnssofar" => self.spawnssofar = Some(number(key, &value)?),
            "argcnt" => self.argcnt = Some(number(key, &value)?),
            "info_num" | "infonum" => self.info_num = Some(number(key, &value)?),
            "preput_num" => self.preput_num = Some(number(key, &value)?),
            _ => {
                if let Some(i) = key.strip_prefix("preput_key_") {
                    put_indexed(&mut self.preput_keys, "preput_key", i, value)?;
                } else if let Some(i) = key.strip_prefix("preput_val_") {
                    put_indexed(&mut self.preput_vals, "preput_val", i, value)?;
                } else if let Some(i) = key.strip_prefix("info_key_") {
                    put_indexed(&mut self.info_keys, "info_key", i, value)?;
                } else if let Some(i) = key.strip_prefix("info_val_") {
                    put_indexed(&mut self.info_vals, "info_val", i, value)?;
                } else if let Some(i) = key.strip_prefix("arg") {
                    if !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()) {
                        put_indexed(&mut self.args, "arg", i, value)?;
                    }
                }
                // Anything else is an unknown key: ignored, as the peers do.
            }
        }
        Ok(())
    }

    fn finish(self, index: usize) -> Result<Finished> {
        let seg = index + 1;
        let execname = self
            .execname
            .filter(|e| !e.is_empty())
            .ok_or_else(|| malformed(format!("segment {seg} has no execname=")))?;
        let nprocs = self
            .nprocs
            .ok_or_else(|| malformed(format!("segment {seg} has no nprocs=")))?;
        if let Some(sofar) = self.spawnssofar {
            if sofar as usize != seg {
                return Err(malformed(format!("segment {seg} says spawnssofar={sofar}")));
            }
        }
        let args = dense(self.args, self.argcnt, 1, &format!("segment {seg} args"))?;
        let info = pairs(self.info_keys, self.info_vals, self.info_num, "info")?;
        let preput = pairs(
            self.preput_keys,
            self.preput_vals,
            self.preput_num,
            "preput",
        )?;
        let command = SpawnCommand {
            execname,
            nprocs,
            args,
            info,
        };
        Ok((command, preput, self.totspawns))
    }
}

/// Parse a whole `mcmd=spawn ... endcmd` block (one or more segments).
pub(crate) fn parse_spawn(text: &str) -> Result<SpawnRequest> {
    let mut request = SpawnRequest::default();
    let mut current: Option<Segment> = None;
    let mut totspawns: Option<u32> = None;
    for raw in text.split('\n') {
        let line = raw.strip_suffix('\r').unwrap_or(raw).trim_start();
        if line.trim_end().is_empty() {
            continue;
        }
        if line.trim_end() == "endcmd" {
            let seg = current
                .take()
                .ok_or_else(|| malformed("endcmd without a preceding mcmd=spawn"))?;
            let (command, preput, tot) = seg.finish(request.commands.len())?;
            if let Some(tot) = tot {
                if totspawns.is_some_and(|t| t != tot) {
                    return Err(malformed("segments disagree on totspawns"));
                }
                totspawns = Some(tot);
            }
            request.commands.push(command);
            request.preput.extend(preput);
            if request.commands.len() > MAX_SPAWN_ITEMS || request.preput.len() > MAX_SPAWN_ITEMS {
                return Err(malformed(format!("more than {MAX_SPAWN_ITEMS} entries")));
            }
            continue;
        }
        let (key, value) = match line.split_once('=') {
            Some((k, v)) => (k.trim_end(), unescape(v).into_owned()),
            None => (line.trim_end(), String::new()),
        };
        if key == "mcmd" {
            if value.trim() != "spawn" {
                return Err(malformed(format!("unknown mcmd={value:?}")));
            }
            if current.is_some() {
                return Err(malformed("mcmd=spawn before the previous segment's endcmd"));
            }
            current = Some(Segment::default());
            continue;
        }
        let seg = current
            .as_mut()
            .ok_or_else(|| malformed(format!("{key}= outside mcmd=spawn ... endcmd")))?;
        seg.set(key, value)?;
    }
    if current.is_some() {
        return Err(malformed("block ends without endcmd"));
    }
    if request.commands.is_empty() {
        return Err(malformed("block holds no segment"));
    }
    if let Some(tot) = totspawns {
        if tot as usize != request.commands.len() {
            return Err(malformed(format!(
                "totspawns={tot} but {} segments were sent",
                request.commands.len()
            )));
        }
    }
    Ok(request)
}

/// Write a spawn request the way MPICH's client does (argcnt before args,
/// preput in the first segment only).
pub(crate) fn write_spawn(request: &SpawnRequest, out: &mut Vec<u8>) -> Result<()> {
    if request.commands.is_empty() {
        return Err(malformed("a spawn request needs at least one command"));
    }
    let total = request.commands.len();
    let mut s = String::new();
    for (i, cmd) in request.commands.iter().enumerate() {
        // `write!` into a String cannot fail.
        let _ = write!(
            s,
            "mcmd=spawn\nnprocs={}\nexecname={}\ntotspawns={}\nspawnssofar={}\nargcnt={}\n",
            cmd.nprocs,
            escape_mcmd_value("execname", &cmd.execname)?,
            total,
            i + 1,
            cmd.args.len()
        );
        for (j, arg) in cmd.args.iter().enumerate() {
            let _ = writeln!(
                s,
                "arg{}={}",
                j + 1,
                escape_mcmd_value("spawn argument", arg)?
            );
        }
        if i == 0 {
            let _ = writeln!(s, "preput_num={}", request.preput.len());
            for (j, (k, v)) in request.preput.iter().enumerate() {
                let _ = writeln!(s, "preput_key_{j}={}", escape_mcmd_value("preput key", k)?);
                let _ = writeln!(
                    s,
                    "preput_val_{j}={}",
                    escape_mcmd_value("preput value", v)?
                );
            }
        }
        let _ = writeln!(s, "info_num={}", cmd.info.len());
        for (j, (k, v)) in cmd.info.iter().enumerate() {
            let _ = writeln!(s, "info_key_{j}={}", escape_mcmd_value("info key", k)?);
            let _ = writeln!(s, "info_val_{j}={}", escape_mcmd_value("info value", v)?);
        }
        s.push_str("endcmd\n");
    }
    if s.len() > MAX_MCMD_BLOCK {
        return Err(Error::BlockTooLong {
            len: s.len(),
            max: MAX_MCMD_BLOCK,
        });
    }
    out.extend_from_slice(s.as_bytes());
    Ok(())
}
