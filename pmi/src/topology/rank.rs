//! One rank's placement value (`PMI_rivet_rank_<r>`): writing and parsing it.

use super::*;

/// Everything the launcher tells one rank about its placement (`PMI_rivet_rank_<r>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankTopology {
    /// Node number within the job (0-based).
    pub node: u32,
    pub local_rank: u32,
    pub local_size: u32,
    /// PU OS indices the rank is bound to, sorted; `None` = not bound.
    pub cpuset: Option<Vec<u32>>,
    /// What it is bound to, human form: `core 1`, `numa 0`, `cpu-list`, `none`.
    pub bound: String,
    pub cluster: ClusterInfo,
}

impl RankTopology {
    /// The value for [`rank_key`]; `rank` is only used in the error message.
    pub fn to_value(&self, rank: u32) -> Result<String, TopoFormatError> {
        if self.bound.is_empty() || self.bound.contains([';', '/', ':', '.', '=', '\n']) {
            return Err(malformed(
                &self.bound,
                "bound description must be non-empty and contain no ';', '/', ':', '.', '=' or newline",
            ));
        }
        let head = format!(
            "node:{}/local_rank:{}/local_size:{}/cpuset:",
            self.node, self.local_rank, self.local_size
        );
        let tail = format!(
            "/bound:{}/cluster:{}",
            self.bound.replace(' ', "."),
            self.cluster.to_value()
        );
        let list = match &self.cpuset {
            None => "none".to_string(),
            Some(cpus) => format_cpu_list(cpus),
        };
        let mut v = format!("{head}{list}{tail}");
        if v.len() > MAX_VALUE_LEN {
            if let Some(cpus) = &self.cpuset {
                v = format!("{head}{}{tail}", format_cpu_mask(cpus));
            }
        }
        if v.len() > MAX_VALUE_LEN {
            return Err(TopoFormatError::TooLong {
                rank,
                len: v.len(),
                max: MAX_VALUE_LEN,
            });
        }
        Ok(v)
    }

    /// Parses a [`rank_key`] value. `node`, `local_rank` and `local_size` are required.
    pub fn parse(value: &str) -> Result<RankTopology, TopoFormatError> {
        let (mut node, mut local_rank, mut local_size) = (None, None, None);
        let mut cpuset = None;
        let mut bound = None;
        let mut cluster = ClusterInfo::default();
        for field in value.trim_end_matches('\n').split([';', '/']) {
            let Some((k, v)) = field.split_once(':') else {
                return Err(malformed(
                    value,
                    format!("field '{field}' is not name:value"),
                ));
            };
            let num = |v: &str| {
                v.parse::<u32>()
                    .map_err(|_| malformed(value, format!("{k} '{v}' is not a number")))
            };
            match k {
                "node" => node = Some(num(v)?),
                "local_rank" => local_rank = Some(num(v)?),
                "local_size" => local_size = Some(num(v)?),
                "cpuset" => {
                    cpuset = match v {
                        "none" => None,
                        _ if v.starts_with("0x") => {
                            Some(parse_cpu_mask(v).map_err(|r| malformed(value, r))?)
                        }
                        _ => Some(parse_cpu_list(v).map_err(|r| malformed(value, r))?),
                    }
                }
                "bound" => {
                    if v.is_empty() {
                        return Err(malformed(value, "empty bound"));
                    }
                    bound = Some(v.replace('.', " "));
                }
                "cluster" => cluster = ClusterInfo::parse(v).map_err(|r| malformed(value, r))?,
                _ => {} // a newer writer's field
            }
        }
        let (Some(node), Some(local_rank), Some(local_size)) = (node, local_rank, local_size)
        else {
            return Err(malformed(
                value,
                "node, local_rank and local_size are required",
            ));
        };
        if local_rank >= local_size {
            return Err(malformed(value, "local_rank must be below local_size"));
        }
        Ok(RankTopology {
            node,
            local_rank,
            local_size,
            bound: bound
                .unwrap_or_else(|| if cpuset.is_some() { "cpu-list" } else { "none" }.into()),
            cpuset,
            cluster,
        })
    }
}
