//! The topology queries of the PMI document ("Topology Information"),
//! answered from what the process manager published (`rivet_pmi::topology`).

use std::ffi::c_int;

use rivet_pmi::topology::TopoType;

use crate::strings::write_array;
use crate::{
    put_out, to_int, with_up, PMI_ERR_INVALID_ARG, PMI_ERR_INVALID_LENGTH, PMI_ERR_UNSUPPORTED,
    PMI_SUCCESS,
};

/// `PMI_Group`: the only group a PMI-1 process knows, its own.
pub const PMI_GROUP_WORLD: c_int = 0;

pub const PMI_TOPO_NONE: c_int = 0;
pub const PMI_TOPO_CLUSTER: c_int = 1;
pub const PMI_TOPO_MESH: c_int = 2;

/// # Safety
/// `kind` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn PMI_Topo_type(group: c_int, kind: *mut c_int) -> c_int {
    with_up(|up| {
        if group != PMI_GROUP_WORLD {
            return PMI_ERR_INVALID_ARG;
        }
        let k = match up.client.topo_type() {
            Ok(TopoType::Cluster) => PMI_TOPO_CLUSTER,
            Ok(TopoType::Mesh { .. }) => PMI_TOPO_MESH,
            Ok(TopoType::None) => PMI_TOPO_NONE,
            Err(e) => return crate::code(&e),
        };
        // SAFETY: null or writable, as the caller guarantees.
        unsafe { put_out(kind, k) }
    })
}

/// In: `*levels` = room in both arrays; out: the number of levels.
///
/// # Safety
/// `levels` is null or a readable and writable int; the arrays are null or
/// hold `*levels` ints each.
#[no_mangle]
pub unsafe extern "C" fn PMI_Topo_cluster_info(
    group: c_int,
    levels: *mut c_int,
    my_cluster: *mut c_int,
    my_rank: *mut c_int,
) -> c_int {
    with_up(|up| {
        if group != PMI_GROUP_WORLD || levels.is_null() {
            return PMI_ERR_INVALID_ARG;
        }
        let info = match up.client.cluster_info() {
            Ok(Some(info)) => info,
            Ok(None) => return PMI_ERR_UNSUPPORTED,
            Err(e) => return crate::code(&e),
        };
        let clusters: Vec<c_int> = info.my_cluster().into_iter().map(to_int).collect();
        let ranks: Vec<c_int> = info.my_rank().into_iter().map(to_int).collect();
        // SAFETY: not null; readable and writable (the caller's contract).
        let room = unsafe { levels.read() };
        // SAFETY: not null; writable (the caller's contract).
        unsafe { levels.write(to_int(clusters.len())) };
        if usize::try_from(room).map_or(true, |r| r < clusters.len()) {
            return PMI_ERR_INVALID_LENGTH;
        }
        // SAFETY: null or `room` writable ints each (the caller's contract).
        let rc = unsafe { write_array(my_cluster, room, &clusters, PMI_ERR_INVALID_ARG) };
        if rc != PMI_SUCCESS {
            return rc;
        }
        // SAFETY: as above.
        unsafe { write_array(my_rank, room, &ranks, PMI_ERR_INVALID_ARG) }
    })
}

/// # Safety
/// `dims` is null or holds `ndims` writable ints.
#[no_mangle]
pub unsafe extern "C" fn PMI_Topo_mesh_info(group: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
    with_up(|up| {
        if group != PMI_GROUP_WORLD {
            return PMI_ERR_INVALID_ARG;
        }
        let mesh = match up.client.mesh_info() {
            Ok(Some(mesh)) => mesh,
            Ok(None) => return PMI_ERR_UNSUPPORTED,
            Err(e) => return crate::code(&e),
        };
        let Ok(n) = usize::try_from(ndims) else {
            return PMI_ERR_INVALID_LENGTH;
        };
        if n < mesh.dims.len() {
            return PMI_ERR_INVALID_LENGTH;
        }
        let mut all: Vec<c_int> = mesh.dims.iter().map(|&d| to_int(d)).collect();
        all.resize(n, 1);
        // SAFETY: null or `ndims` writable ints (the caller's contract).
        unsafe { write_array(dims, ndims, &all, PMI_ERR_INVALID_ARG) }
    })
}
