//! The topology queries of seed 002 on any attribute source, and the client's methods for them.

use super::*;

/// What the topology queries need from a PMI client: job attributes and the rank's identity.
/// The client implements it (answering "not found" with `Ok(None)`); tests use a map.
pub trait AttributeSource {
    type Error;
    /// The value of a job attribute (`PMI_...`), or `None` if the process manager has none.
    fn job_attribute(&mut self, key: &str) -> Result<Option<String>, Self::Error>;
    fn rank(&self) -> u32;
    fn size(&self) -> u32;
    /// The error for a published value under `key` that does not parse.
    fn malformed(&self, key: &str, err: TopoFormatError) -> Self::Error;
}

/// The topology queries of seed 002, on any [`AttributeSource`] (the client's methods call
/// these).
pub mod queries {
    use super::super::*;

    fn attribute<S: AttributeSource>(src: &mut S, key: &str) -> Result<Option<String>, S::Error> {
        Ok(src.job_attribute(key)?.filter(|v| !v.is_empty()))
    }

    /// `PMI_Topo_type`: what the launcher published, or [`TopoType::None`].
    pub fn topo_type<S: AttributeSource>(src: &mut S) -> Result<TopoType, S::Error> {
        match attribute(src, KEY_TOPO)? {
            Some(v) => TopoType::parse(&v).map_err(|e| src.malformed(KEY_TOPO, e)),
            None => Ok(TopoType::None),
        }
    }

    /// This rank's placement, or `None` when the launcher published nothing (Hydra,
    /// singleton).
    pub fn my_topology<S: AttributeSource>(src: &mut S) -> Result<Option<RankTopology>, S::Error> {
        let key = rank_key(src.rank());
        match attribute(src, &key)? {
            Some(v) => RankTopology::parse(&v)
                .map(Some)
                .map_err(|e| src.malformed(&key, e)),
            None => Ok(None),
        }
    }

    /// `PMI_Topo_cluster_info`: the published levels; a singleton has one level (node 0,
    /// rank 0); `None` when nothing is known (`PMI_ERR_UNSUPPORTED`).
    pub fn cluster_info<S: AttributeSource>(src: &mut S) -> Result<Option<ClusterInfo>, S::Error> {
        match my_topology(src)? {
            Some(t) => Ok(Some(t.cluster)),
            None if src.size() <= 1 => Ok(Some(ClusterInfo::singleton())),
            None => Ok(None),
        }
    }

    /// `PMI_Topo_mesh_info`: the dimensions when the job is a mesh, else `None`.
    pub fn mesh_info<S: AttributeSource>(src: &mut S) -> Result<Option<MeshInfo>, S::Error> {
        Ok(match topo_type(src)? {
            TopoType::Mesh { dims } => Some(MeshInfo { dims }),
            _ => None,
        })
    }

    /// `PMI_hwloc_xmlfile` as a path; `None` when absent or `unavailable`.
    pub fn hwloc_xmlfile<S: AttributeSource>(
        src: &mut S,
    ) -> Result<Option<std::path::PathBuf>, S::Error> {
        Ok(attribute(src, KEY_HWLOC_XMLFILE)?
            .filter(|v| v != XMLFILE_UNAVAILABLE)
            .map(std::path::PathBuf::from))
    }
}

impl AttributeSource for crate::client::Client {
    type Error = crate::Error;

    fn job_attribute(&mut self, key: &str) -> crate::Result<Option<String>> {
        crate::client::Client::job_attribute(self, key)
    }

    fn rank(&self) -> u32 {
        crate::client::Client::rank(self)
    }

    fn size(&self) -> u32 {
        crate::client::Client::size(self)
    }

    fn malformed(&self, key: &str, err: TopoFormatError) -> crate::Error {
        crate::Error::Malformed {
            reason: format!("job attribute {key}: {err}"),
        }
    }
}

/// The topology queries of seed 002 ("Topology Information").
impl crate::client::Client {
    /// `PMI_Topo_type`: cluster, mesh, or none (singleton, or nothing published).
    pub fn topo_type(&mut self) -> crate::Result<TopoType> {
        queries::topo_type(self)
    }

    /// `PMI_Topo_cluster_info`: `levels.len()`, `my_cluster[]`, `my_rank[]`. A singleton
    /// gets one level (node 0, rank 0); `None` when the launcher published nothing (Hydra).
    pub fn cluster_info(&mut self) -> crate::Result<Option<ClusterInfo>> {
        queries::cluster_info(self)
    }

    /// `PMI_Topo_mesh_info`: the dimensions when the job is a mesh, else `None`.
    pub fn mesh_info(&mut self) -> crate::Result<Option<MeshInfo>> {
        queries::mesh_info(self)
    }

    /// Everything `rivetrun` published about this rank (node, local rank and size, cpuset,
    /// binding, cluster levels); `None` when nothing was published (Hydra, singleton).
    pub fn my_topology(&mut self) -> crate::Result<Option<RankTopology>> {
        queries::my_topology(self)
    }

    /// `PMI_hwloc_xmlfile` as a path; `None` when absent or `unavailable`.
    pub fn hwloc_xmlfile(&mut self) -> crate::Result<Option<std::path::PathBuf>> {
        queries::hwloc_xmlfile(self)
    }
}
