//! Which OpenPMIx data store (`gds` component) rivetrun's server keeps a
//! job's data in, and what that asks of rivetrun.
//!
//! OpenPMIx's `ds21` store puts each namespace's data in segment files in
//! the server's directory, which the ranks map and read themselves; its
//! `hash` store keeps the data in the server, which then answers every
//! get of a peer's data over the rank's socket. An Open MPI rank gets each
//! local peer's modex data: with `hash`, N(N-1) round trips through the
//! server's one thread (992 at N = 32), none with `ds21`. rivetrun leaves
//! the choice to OpenPMIx (`ds21` where it is built, else `hash`), as
//! Open MPI's `mpirun` does, without `ds12` (the store for clients older
//! than OpenPMIx 3, which would only add its own files).
//!
//! The server keeps its own data in `hash` whatever the list
//! (`PMIx_server_init` asks for it) and is handed whatever store is loaded
//! when `hash` is not: with `PMIX_MCA_gds=ds21` the first client's
//! registration takes ds21's write lock, then reads the server's own data
//! through ds21, whose read lock waits for that write lock for ever; with
//! `ds12` it calls ds12's `fetch_arrays`, which ds12 leaves null. So a
//! user's list that leaves `hash` out gets it back ([`with_hash`]).
//!
//! `ds21`'s segments are 4 MiB each by default (a namespace's metadata and
//! its data), zeroed while the first client waits; rivetrun asks for
//! smaller ones ([`SEGMENT_DEFAULTS`]). The store adds segments as they
//! fill, but one item must fit in one data segment, and a namespace's
//! job-level data, which holds the node's topology, is one item: too big,
//! the first client's registration fails with the write lock still held,
//! and every later client waits for ever. [`topology_fits`] keeps the
//! topology out when it could not fit (the ranks then discover it), and a
//! user's segment below [`MIN_DATA_SEGMENT`] is raised to it.

/// OpenPMIx's `gds` list when the user gives none.
pub const GDS_DEFAULT: &str = "^ds12";

/// The store's segment sizes unless the user set them: 64 KiB of
/// metadata (about 2700 ranks a segment) and 1 MiB of data a segment,
/// instead of OpenPMIx's 4 MiB each (16 M of rivetrun's 32 M instructions
/// in an 8-rank Open MPI hello were the zeroing of those 8 MiB). OpenPMIx
/// reads them from the environment, in the server and in each rank.
pub const SEGMENT_DEFAULTS: [(&str, &str); 2] = [
    ("NS_META_SEG_SIZE", "65536"),
    ("NS_DATA_SEG_SIZE", "1048576"),
];

/// The smallest data segment rivetrun lets the user set: below it a
/// namespace's job-level data may not fit even without the topology, and
/// OpenPMIx 4.2.2 then crashes in the server (a bad `free` under
/// `pmix_common_dstor_store`, seen with `NS_DATA_SEG_SIZE=4096`).
pub const MIN_DATA_SEGMENT: usize = 64 << 10;

/// `value` (an `NS_DATA_SEG_SIZE`) raised to [`MIN_DATA_SEGMENT`] if it
/// is below; `None`: it is not (or is no number, which OpenPMIx reads as
/// its own default).
pub fn data_segment_floor(value: &str) -> Option<String> {
    let n = value.trim().parse::<usize>().ok()?;
    (n < MIN_DATA_SEGMENT).then(|| MIN_DATA_SEGMENT.to_string())
}

/// OpenPMIx's data segment size when `NS_DATA_SEG_SIZE` is not set.
const LIBRARY_DATA_SEGMENT: usize = 4 << 20;

/// `list` (a `PMIX_MCA_gds` value) with `hash` allowed, if it was not:
/// added to a list of components, dropped from a list to exclude
/// (`^...`). `None`: the list already allows it.
pub fn with_hash(list: &str) -> Option<String> {
    let list = list.trim();
    if list.is_empty() {
        return None;
    }
    let names = |s: &str| -> Vec<String> {
        s.split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect()
    };
    if let Some(excluded) = list.strip_prefix('^') {
        let excluded = names(excluded);
        if !excluded.iter().any(|n| n == "hash") {
            return None;
        }
        let kept: Vec<String> = excluded.into_iter().filter(|n| n != "hash").collect();
        return Some(if kept.is_empty() {
            String::new()
        } else {
            format!("^{}", kept.join(","))
        });
    }
    let mut included = names(list);
    if included.iter().any(|n| n == "hash") {
        return None;
    }
    included.push("hash".into());
    Some(included.join(","))
}

/// Whether a `PMIX_MCA_gds` value may select a shared-memory store
/// (`ds21`, `ds12`): any list but one naming neither.
fn may_use_dstore(list: Option<&str>) -> bool {
    let list = list.map(str::trim).unwrap_or("");
    if list.is_empty() || list.starts_with('^') {
        return true;
    }
    list.split(',')
        .map(str::trim)
        .any(|n| matches!(n, "ds21" | "ds12" | "dstore"))
}

/// Whether a topology of `xml_len` bytes may go into a namespace's
/// job-level data, given the store (`gds`, the `PMIX_MCA_gds` value) and
/// its data segment size (`data_segment`, the `NS_DATA_SEG_SIZE` value):
/// at most half a segment, the rest left for the job's other keys (its
/// node's peer list grows with the ranks).
pub fn topology_fits_in(xml_len: usize, gds: Option<&str>, data_segment: Option<&str>) -> bool {
    if !may_use_dstore(gds) {
        return true;
    }
    let segment = data_segment
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(LIBRARY_DATA_SEGMENT);
    xml_len <= segment / 2
}

/// [`topology_fits_in`] with this process's settings.
pub fn topology_fits(xml_len: usize) -> bool {
    let gds = std::env::var("PMIX_MCA_gds").ok();
    let segment = std::env::var("NS_DATA_SEG_SIZE").ok();
    topology_fits_in(xml_len, gds.as_deref(), segment.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_without_hash_gets_it_back() {
        assert_eq!(with_hash("ds21").as_deref(), Some("ds21,hash"));
        assert_eq!(with_hash(" ds21, ds12 ").as_deref(), Some("ds21,ds12,hash"));
        assert_eq!(with_hash("^hash").as_deref(), Some(""));
        assert_eq!(with_hash("^ds12,hash").as_deref(), Some("^ds12"));
        assert_eq!(with_hash("ds21,hash"), None);
        assert_eq!(with_hash("hash"), None);
        assert_eq!(with_hash("^ds12"), None);
        assert_eq!(with_hash(GDS_DEFAULT), None);
        assert_eq!(with_hash(""), None);
    }

    #[test]
    fn a_data_segment_too_small_is_raised() {
        assert_eq!(data_segment_floor("4096").as_deref(), Some("65536"));
        assert_eq!(data_segment_floor("0").as_deref(), Some("65536"));
        assert_eq!(data_segment_floor("65536"), None);
        assert_eq!(data_segment_floor("1048576"), None);
        assert_eq!(data_segment_floor("4M"), None);
    }

    #[test]
    fn the_topology_is_kept_out_only_where_a_segment_could_not_hold_it() {
        let mib = 1 << 20;
        // rivetrun's defaults: up to half a 1 MiB segment.
        assert!(topology_fits_in(
            mib / 2,
            Some(GDS_DEFAULT),
            Some("1048576")
        ));
        assert!(!topology_fits_in(
            mib / 2 + 1,
            Some(GDS_DEFAULT),
            Some("1048576")
        ));
        // OpenPMIx's own segment size when none is set or it is unreadable.
        assert!(topology_fits_in(2 * mib, None, None));
        assert!(!topology_fits_in(2 * mib + 1, Some("ds21,hash"), Some("x")));
        // The hash store has no segments.
        assert!(topology_fits_in(64 * mib, Some("hash"), Some("4096")));
    }
}
