//! Getting a topology from hwloc (this machine, an XML file, or a synthetic description),
//! exporting it as XML, and reducing it to a [`Summary`].

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use hwlocality::object::types::ObjectType;
use hwlocality::object::TopologyObject;
use hwlocality::topology::export::xml::XMLExportFlags;
use hwlocality::topology::Topology as HwTopology;

use super::error::TopologyError;
use super::summary::{Pu, RawCore, Summary};

/// hwlocality answers a few "impossible" hwloc errors with a panic; turn one into an error so
/// the launcher never aborts on a topology.
///
/// (hwloc's plugins, loaded on first use, are kept out by `own_env`, first
/// thing in `main`: setting `HWLOC_PLUGINS_PATH` here, for the call, raced
/// with the PMIx server's thread reading the environment, and `getenv`
/// crashed rivetrun now and then. The environment is changed only before
/// any thread starts.)
fn no_panic<T>(
    f: impl FnOnce() -> Result<T, TopologyError>,
    on_panic: impl FnOnce() -> TopologyError,
) -> Result<T, TopologyError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| Err(on_panic()))
}

/// This machine, without hwloc's `x86` component: it binds the calling
/// thread to every PU in turn to read its CPUID, which on a busy node waits
/// for each CPU in turn, and adds only cache `Inclusive` attributes to what
/// the Linux component reads from sysfs (the placement uses neither).
pub(super) fn this_system() -> Result<HwTopology, TopologyError> {
    no_panic(
        || {
            let err = |e: String| TopologyError::Discover(e);
            HwTopology::builder()
                .without_component("x86")
                .map_err(|e| err(e.to_string()))?
                .build()
                .map_err(|e| err(e.to_string()))
        },
        || TopologyError::Discover("hwloc failed unexpectedly".into()),
    )
}

/// hwloc's own view: false when `HWLOC_XMLFILE`/`HWLOC_SYNTHETIC` replaced discovery.
pub(super) fn hw_is_this_system(hw: &HwTopology) -> bool {
    catch_unwind(AssertUnwindSafe(|| hw.is_this_system())).unwrap_or(false)
}

pub(super) fn synthetic(spec: &str) -> Result<HwTopology, TopologyError> {
    let err = |reason: String| TopologyError::Synthetic {
        spec: spec.to_string(),
        reason,
    };
    no_panic(
        || {
            HwTopology::builder()
                .from_synthetic(spec)
                .map_err(|e| err(e.to_string()))?
                .build()
                .map_err(|e| err(e.to_string()))
        },
        || err("hwloc failed unexpectedly".into()),
    )
}

/// Loads an XML file. The file is read here (not by hwloc) so a missing or unreadable file
/// gets an I/O error with its path.
pub(super) fn xml_file(path: &Path) -> Result<HwTopology, TopologyError> {
    let text = std::fs::read(path).map_err(|source| TopologyError::XmlRead {
        path: path.to_path_buf(),
        source,
    })?;
    let invalid = |reason: Option<String>| TopologyError::XmlInvalid {
        path: path.to_path_buf(),
        reason,
    };
    let text = String::from_utf8(text).map_err(|_| invalid(Some("not UTF-8 text".into())))?;
    if !text.trim_start().starts_with('<') {
        return Err(invalid(Some("not XML".into())));
    }
    no_panic(
        || {
            HwTopology::builder()
                .from_xml(&text)
                .map_err(|e| invalid(Some(e.to_string())))?
                .build()
                .map_err(|e| invalid(Some(e.to_string())))
        },
        || invalid(None),
    )
}

pub(super) fn export_xml(hw: &HwTopology, path: &Path) -> Result<(), TopologyError> {
    let err = |reason: String| TopologyError::Export {
        path: path.to_path_buf(),
        reason,
    };
    no_panic(
        || {
            hw.export_xml_file(Some(path), XMLExportFlags::empty())
                .map_err(|e| err(e.to_string()))
        },
        || err("hwloc failed unexpectedly".into()),
    )
}

fn logical_of(obj: &TopologyObject, ty: ObjectType) -> Option<usize> {
    if obj.object_type() == ty {
        return Some(obj.logical_index());
    }
    obj.first_ancestor_with_type(ty)
        .map(TopologyObject::logical_index)
}

/// Reduces an hwloc topology to the mapper's [`Summary`].
pub(super) fn summarize(hw: &HwTopology) -> Result<Summary, TopologyError> {
    // NUMA nodes are memory children in hwloc 2; a PU belongs to the first (logical order)
    // NUMA node whose cpuset holds it. CPU-less NUMA nodes (HBM, CXL) hold no PU.
    let mut numa_of_pu: HashMap<usize, usize> = HashMap::new();
    for node in hw.objects_with_type(ObjectType::NUMANode) {
        if let Some(cs) = node.cpuset() {
            for bit in cs.iter_set() {
                numa_of_pu
                    .entry(usize::from(bit))
                    .or_insert(node.logical_index());
            }
        }
    }
    // Cores in the order of their first PU (logical order). A PU without a Core ancestor
    // (some virtual machines) counts as a core of its own.
    #[derive(PartialEq, Eq, Hash, Clone, Copy)]
    enum Key {
        Core(usize),
        Lone(usize),
    }
    let mut order: Vec<Key> = Vec::new();
    let mut raw: HashMap<Key, RawCore> = HashMap::new();
    for pu in hw.objects_with_type(ObjectType::PU) {
        let Some(os) = pu.os_index() else { continue };
        let os = u32::try_from(os)
            .map_err(|_| TopologyError::Discover(format!("PU OS index {os} is too large")))?;
        let core = pu.first_ancestor_with_type(ObjectType::Core);
        let key = core.map_or(Key::Lone(pu.logical_index()), |c| {
            Key::Core(c.logical_index())
        });
        let anchor = core.unwrap_or(pu);
        let entry = raw.entry(key).or_insert_with(|| {
            order.push(key);
            RawCore {
                logical: anchor.logical_index(),
                pus: Vec::new(),
                package: logical_of(anchor, ObjectType::Package),
                numa: numa_of_pu.get(&(os as usize)).copied(),
                l3: logical_of(anchor, ObjectType::L3Cache),
            }
        });
        entry.pus.push(Pu {
            os,
            logical: pu.logical_index(),
        });
    }
    if order.is_empty() {
        return Err(TopologyError::Discover(
            "the topology has no processing units".into(),
        ));
    }
    let cores = order.iter().filter_map(|k| raw.remove(k)).collect();
    Ok(Summary::from_raw(cores))
}
