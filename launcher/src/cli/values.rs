//! Value parsers for `rivetrun`'s options: each refuses what cannot be a
//! value (nan seconds, a bad address) with a message clap prints.

use crate::topology::{BindTo, MapBy};

pub(super) fn parse_map_by(s: &str) -> Result<MapBy, String> {
    s.parse()
        .map_err(|e: crate::topology::TopologyError| e.to_string())
}

pub(super) fn parse_bind_to(s: &str) -> Result<BindTo, String> {
    s.parse()
        .map_err(|e: crate::topology::TopologyError| e.to_string())
}

/// The longest `--kill-grace`, in seconds.
pub const MAX_KILL_GRACE: f64 = 3600.0;

/// `--kill-grace`: a number of seconds from 0 to an hour; nan, infinities
/// and negative values are refused (they cannot be a wait).
pub(super) fn parse_kill_grace(s: &str) -> Result<f64, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !secs.is_finite() || !(0.0..=MAX_KILL_GRACE).contains(&secs) {
        return Err(format!(
            "{s} is not a number of seconds from 0 to {MAX_KILL_GRACE}"
        ));
    }
    Ok(secs)
}

/// The longest `--timeout`: a year, in seconds.
pub const MAX_TIMEOUT: f64 = 366.0 * 24.0 * 3600.0;

/// `--timeout` / `MPIEXEC_TIMEOUT`: seconds from 0 (no limit) to a year.
pub(super) fn parse_timeout(s: &str) -> Result<f64, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !secs.is_finite() || !(0.0..=MAX_TIMEOUT).contains(&secs) {
        return Err(format!(
            "{s} is not a number of seconds from 0 (no limit) to {MAX_TIMEOUT}"
        ));
    }
    Ok(secs)
}

pub(super) fn parse_nameserver(s: &str) -> Result<String, String> {
    crate::nameserver::check_addr(s)
}

pub(super) fn parse_launcher(s: &str) -> Result<crate::remote::start::Kind, String> {
    s.parse()
}

/// `--auth`'s list of IMPI authentication methods, most preferred first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthPreference(pub Vec<u32>);

pub(super) fn parse_auth(s: &str) -> Result<AuthPreference, String> {
    rivet_pmi::impi::auth::parse_preference(s).map(AuthPreference)
}

pub(super) fn parse_impi_size(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of clients"))?;
    let most = rivet_pmi::impi::MAX_CLIENTS;
    if n == 0 || n > most {
        return Err(format!("an IMPI job has 1 to {most} clients, not {n}"));
    }
    Ok(n)
}

pub(super) fn parse_cluster_id(s: &str) -> Result<String, String> {
    rivet_pmi::group::check_cluster_name(s)
        .map(|()| s.to_string())
        .map_err(|e| e.to_string())
}
