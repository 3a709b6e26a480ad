//! Inside a Slurm allocation: the hosts come from `SLURM_JOB_NODELIST`
//! (`n[1-3,07],gpu2` expanded) with `SLURM_TASKS_PER_NODE` (`2(x3),1`) as
//! their slots, and one `srun` starts one proxy per node, which learns its
//! node index from `SLURM_NODEID` (Hydra's slurm bootstrap does the same).

use std::ffi::OsString;

use crate::hosts::HostEntry;

/// Whether rivetrun runs inside an allocation (not inside a job step).
pub fn in_allocation() -> bool {
    std::env::var_os("SLURM_JOB_NODELIST").is_some() && std::env::var_os("SLURM_STEP_ID").is_none()
}

/// The allocation's hosts and slots.
pub fn hosts() -> Result<Vec<HostEntry>, String> {
    let list = std::env::var("SLURM_JOB_NODELIST")
        .or_else(|_| std::env::var("SLURM_NODELIST"))
        .map_err(|_| "--launcher slurm outside a Slurm allocation (no SLURM_JOB_NODELIST)")?;
    let names = expand_nodelist(&list)?;
    let tasks = std::env::var("SLURM_TASKS_PER_NODE").unwrap_or_default();
    let slots = expand_tasks(&tasks, names.len()).unwrap_or_else(|_| vec![1; names.len()]);
    Ok(names
        .into_iter()
        .zip(slots)
        .map(|(name, slots)| HostEntry {
            name,
            slots: slots.max(1),
        })
        .collect())
}

/// `a[1-3,07],b` → a1 a2 a3 a07 b (zero padding kept).
pub fn expand_nodelist(list: &str) -> Result<Vec<String>, String> {
    let bad = || format!("bad Slurm node list {list:?}");
    let mut out = Vec::new();
    let mut rest = list.trim();
    while !rest.is_empty() {
        // One item: a prefix, optionally a [ranges] part, up to the next top-level comma.
        let end = match (rest.find(','), rest.find('[')) {
            (Some(c), Some(b)) if b < c => {
                rest[b..].find(']').map(|e| b + e + 1).ok_or_else(bad)?
            }
            (Some(c), _) => c,
            (None, Some(b)) => rest[b..].find(']').map(|e| b + e + 1).ok_or_else(bad)?,
            (None, None) => rest.len(),
        };
        let item = &rest[..end];
        rest = rest[end..].trim_start_matches(',');
        match item.find('[') {
            None if !item.is_empty() => out.push(item.to_string()),
            None => {}
            Some(b) => {
                let prefix = &item[..b];
                let inner = item[b + 1..].strip_suffix(']').ok_or_else(bad)?;
                for range in inner.split(',') {
                    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                    let width = lo.len();
                    let (l, h): (u64, u64) = (
                        lo.parse().map_err(|_| bad())?,
                        hi.parse().map_err(|_| bad())?,
                    );
                    if h < l || h - l > 100_000 {
                        return Err(bad());
                    }
                    out.extend((l..=h).map(|n| format!("{prefix}{n:0width$}")));
                }
            }
        }
    }
    if out.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

/// `2(x3),1` → 2 2 2 1, for `n` nodes.
pub fn expand_tasks(spec: &str, n: usize) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in spec.split(',').filter(|p| !p.is_empty()) {
        let (count, times) = match part.split_once("(x") {
            Some((c, t)) => (c, t.trim_end_matches(')')),
            None => (part, "1"),
        };
        let c: u32 = count.parse().map_err(|_| format!("bad {spec:?}"))?;
        let t: usize = times.parse().map_err(|_| format!("bad {spec:?}"))?;
        out.extend(std::iter::repeat_n(c, t));
    }
    if out.len() != n {
        return Err(format!("{spec:?} does not describe {n} nodes"));
    }
    Ok(out)
}

/// The one `srun` that starts a proxy on each of `hosts` (in allocation order).
pub fn srun_argv(hosts: &[&str], proxy: &[String]) -> Vec<OsString> {
    let n = hosts.len().to_string();
    let mut v: Vec<String> = vec![
        "srun".into(),
        "--nodelist".into(),
        hosts.join(","),
        "-N".into(),
        n.clone(),
        "-n".into(),
        n,
        "--ntasks-per-node=1".into(),
        "--mpi=none".into(),
        "--cpu-bind=none".into(),
        "--input=none".into(),
        "--kill-on-bad-exit=1".into(),
    ];
    v.extend(proxy.iter().cloned());
    v.into_iter().map(OsString::from).collect()
}

/// What ranks must not inherit from rivetrun's environment under Slurm.
pub fn is_slurm_variable(name: &[u8]) -> bool {
    name.starts_with(b"SLURM_") || name.starts_with(b"SLURMD_") || name.starts_with(b"SBATCH_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists_expand() {
        assert_eq!(expand_nodelist("localhost").unwrap(), ["localhost"]);
        assert_eq!(
            expand_nodelist("n[1-3,07],gpu2,c[9]").unwrap(),
            ["n1", "n2", "n3", "n07", "gpu2", "c9"]
        );
        assert_eq!(expand_nodelist("a[08-10]").unwrap(), ["a08", "a09", "a10"]);
        for bad in ["", "a[1-", "a[3-1]", "a[x]"] {
            assert!(expand_nodelist(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tasks_per_node_expand() {
        assert_eq!(expand_tasks("2(x3),1", 4).unwrap(), [2, 2, 2, 1]);
        assert_eq!(expand_tasks("4", 1).unwrap(), [4]);
        assert!(expand_tasks("2(x3)", 2).is_err());
        assert!(expand_tasks("z", 1).is_err());
    }
}
