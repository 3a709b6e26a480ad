use super::*;

fn sample() -> RankTopology {
    RankTopology {
        node: 0,
        local_rank: 1,
        local_size: 2,
        cpuset: Some(vec![2, 3]),
        bound: "core 1".into(),
        cluster: ClusterInfo {
            levels: vec![
                Level {
                    kind: LevelKind::Node,
                    my_cluster: 0,
                    my_rank: 1,
                },
                Level {
                    kind: LevelKind::Package,
                    my_cluster: 0,
                    my_rank: 1,
                },
                Level {
                    kind: LevelKind::Numa,
                    my_cluster: 0,
                    my_rank: 1,
                },
                Level {
                    kind: LevelKind::Core,
                    my_cluster: 1,
                    my_rank: 0,
                },
            ],
        },
    }
}

#[test]
fn rank_value_literal_and_round_trip() {
    let v = sample().to_value(1).unwrap();
    assert_eq!(
        v,
        "node:0/local_rank:1/local_size:2/cpuset:2-3/bound:core.1/cluster:node.0.1,package.0.1,numa.0.1,core.1.0"
    );
    assert!(!v.contains(' ') && !v.contains('='));
    assert_eq!(RankTopology::parse(&v).unwrap(), sample());
}

#[test]
fn unbound_rank_round_trip() {
    let r = RankTopology {
        node: 3,
        local_rank: 0,
        local_size: 1,
        cpuset: None,
        bound: "none".into(),
        cluster: ClusterInfo {
            levels: vec![Level {
                kind: LevelKind::Node,
                my_cluster: 3,
                my_rank: 0,
            }],
        },
    };
    let v = r.to_value(7).unwrap();
    assert_eq!(
        v,
        "node:3/local_rank:0/local_size:1/cpuset:none/bound:none/cluster:node.3.0"
    );
    assert_eq!(RankTopology::parse(&v).unwrap(), r);
}

#[test]
fn long_cpuset_falls_back_to_mask_then_errors() {
    let mut r = sample();
    r.cpuset = Some((0..1600).step_by(2).collect());
    let v = r.to_value(1).unwrap();
    assert!(v.contains("cpuset:0x5555"), "{v}");
    assert!(v.len() <= MAX_VALUE_LEN);
    assert_eq!(RankTopology::parse(&v).unwrap(), r);
    r.cpuset = Some((0..20000).step_by(2).collect());
    assert!(matches!(
        r.to_value(1),
        Err(TopoFormatError::TooLong { rank: 1, .. })
    ));
}

#[test]
fn unknown_fields_ignored() {
    let v = "node:0;local_rank:0;local_size:1;cpuset:0;bound:core.0;future:xyz;cluster:node.0.0";
    let r = RankTopology::parse(v).unwrap();
    assert_eq!(r.cpuset, Some(vec![0]));
    assert_eq!(r.cluster.levels.len(), 1);
}

#[test]
fn malformed_rank_values() {
    for bad in [
        "",
        "garbage",
        "node:0;local_rank:0",                             // missing local_size
        "node:x;local_rank:0;local_size:1",                // not a number
        "node:0;local_rank:2;local_size:2",                // rank beyond size
        "node:0;local_rank:0;local_size:1;cpuset:3-1",     // backwards range
        "node:0;local_rank:0;local_size:1;cpuset:",        // empty list
        "node:0;local_rank:0;local_size:1;cpuset:0xzz",    // bad mask
        "node:0;local_rank:0;local_size:1;cluster:node.0", // short level
        "node:0;local_rank:0;local_size:1;cluster:rack.0.0", // unknown level
        "node:0;local_rank:0;local_size:1;cluster:core.0.0,node.0.0", // out of order
        "node:0;local_rank:0;local_size:1;bound:",
    ] {
        assert!(RankTopology::parse(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn bad_bound_is_refused_when_writing() {
    let mut r = sample();
    r.bound = "core;1".into();
    assert!(r.to_value(0).is_err());
}

#[test]
fn topo_type_round_trip() {
    for (t, s) in [
        (TopoType::Cluster, "cluster"),
        (TopoType::None, "none"),
        (TopoType::Mesh { dims: vec![2, 4] }, "mesh:2x4"),
        (TopoType::Mesh { dims: vec![8] }, "mesh:8"),
    ] {
        assert_eq!(t.to_value(), s);
        assert_eq!(TopoType::parse(s).unwrap(), t);
    }
    assert_eq!(
        TopoType::parse("mesh dims=2x4").unwrap(),
        TopoType::Mesh { dims: vec![2, 4] }
    );
    for bad in ["", "torus", "mesh:", "mesh:2x0", "mesh:2xx4", "mesh:-1"] {
        assert!(TopoType::parse(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn cpu_list_forms() {
    assert_eq!(format_cpu_list(&[0, 1, 2, 3, 8]), "0-3,8");
    assert_eq!(format_cpu_list(&[5]), "5");
    assert_eq!(format_cpu_list(&[1, 3, 4]), "1,3-4");
    assert_eq!(parse_cpu_list("8,0-3,2").unwrap(), vec![0, 1, 2, 3, 8]);
    assert!(parse_cpu_list("0-4294967295").is_err());
    assert!(parse_cpu_list("1,,2").is_err());
    assert_eq!(format_cpu_mask(&[0, 1, 2, 3, 8]), "0x10f");
    assert_eq!(parse_cpu_mask("0x10f").unwrap(), vec![0, 1, 2, 3, 8]);
    assert!(parse_cpu_mask("0x0").is_err());
    assert_eq!(
        parse_cpu_list("60-130,64").unwrap(),
        (60..=130).collect::<Vec<_>>()
    );
}

/// A list repeating the widest range costs its text, not its width
/// times its items (which held 4 MiB per 9 bytes of text before).
#[test]
fn repeated_wide_ranges_stay_small() {
    let wide = vec![format!("0-{MAX_CPU}"); 4000].join(",");
    let cpus = parse_cpu_list(&wide).unwrap();
    assert_eq!(cpus.len(), MAX_CPU as usize + 1);
}

#[test]
fn rank_key_name() {
    assert_eq!(rank_key(12), "PMI_rivet_rank_12");
}

/// A process manager's job attributes, as a map.
struct Attrs {
    map: std::collections::HashMap<String, String>,
    rank: u32,
    size: u32,
}

impl AttributeSource for Attrs {
    type Error = String;
    fn job_attribute(&mut self, key: &str) -> Result<Option<String>, String> {
        Ok(self.map.get(key).cloned())
    }
    fn rank(&self) -> u32 {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn malformed(&self, key: &str, err: TopoFormatError) -> String {
        format!("{key}: {err}")
    }
}

fn attrs(rank: u32, size: u32, kv: &[(&str, &str)]) -> Attrs {
    Attrs {
        map: kv
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        rank,
        size,
    }
}

#[test]
fn queries_with_published_keys() {
    let v = sample().to_value(1).unwrap();
    let mut a = attrs(
        1,
        2,
        &[
            ("PMI_rivet_topo", "mesh:2x1"),
            ("PMI_rivet_rank_1", &v),
            ("PMI_hwloc_xmlfile", "/tmp/x.xml"),
        ],
    );
    assert_eq!(
        queries::topo_type(&mut a).unwrap(),
        TopoType::Mesh { dims: vec![2, 1] }
    );
    assert_eq!(
        queries::mesh_info(&mut a).unwrap(),
        Some(MeshInfo { dims: vec![2, 1] })
    );
    assert_eq!(queries::my_topology(&mut a).unwrap(), Some(sample()));
    let c = queries::cluster_info(&mut a).unwrap().unwrap();
    assert_eq!(c.my_cluster(), [0, 0, 0, 1]);
    assert_eq!(c.my_rank(), [1, 1, 1, 0]);
    assert_eq!(
        queries::hwloc_xmlfile(&mut a).unwrap(),
        Some(std::path::PathBuf::from("/tmp/x.xml"))
    );
}

#[test]
fn queries_with_nothing_published() {
    // Singleton: no topology, one level.
    let mut a = attrs(0, 1, &[]);
    assert_eq!(queries::topo_type(&mut a).unwrap(), TopoType::None);
    assert_eq!(queries::my_topology(&mut a).unwrap(), None);
    assert_eq!(
        queries::cluster_info(&mut a).unwrap(),
        Some(ClusterInfo::singleton())
    );
    assert_eq!(queries::mesh_info(&mut a).unwrap(), None);
    // Under Hydra (keys unknown): nothing known.
    let mut a = attrs(3, 8, &[("PMI_hwloc_xmlfile", "unavailable")]);
    assert_eq!(queries::topo_type(&mut a).unwrap(), TopoType::None);
    assert_eq!(queries::cluster_info(&mut a).unwrap(), None);
    assert_eq!(queries::hwloc_xmlfile(&mut a).unwrap(), None);
}

#[test]
fn queries_reject_malformed_values() {
    let mut a = attrs(
        0,
        2,
        &[("PMI_rivet_topo", "torus"), ("PMI_rivet_rank_0", "node:0")],
    );
    let e = queries::topo_type(&mut a).unwrap_err();
    assert!(e.starts_with("PMI_rivet_topo: malformed"), "{e}");
    assert!(queries::my_topology(&mut a).is_err());
    assert!(queries::cluster_info(&mut a).is_err());
}

#[test]
fn singleton_client_queries() {
    let mut c = crate::Client::connect(crate::ClientConfig::singleton()).unwrap();
    assert_eq!(c.topo_type().unwrap(), TopoType::None);
    assert_eq!(c.my_topology().unwrap(), None);
    assert_eq!(c.cluster_info().unwrap(), Some(ClusterInfo::singleton()));
    assert_eq!(c.mesh_info().unwrap(), None);
    assert_eq!(c.hwloc_xmlfile().unwrap(), None);
}

/// The launcher's keys served by the real server core, read by the real client.
#[test]
fn client_reads_what_the_server_serves() {
    use crate::server::{NamespaceSpec, Output, Server};
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    let mut attributes = vec![
        (
            KEY_HWLOC_XMLFILE.to_string(),
            "/tmp/rivet-topo.xml".to_string(),
        ),
        (
            KEY_TOPO.to_string(),
            TopoType::Mesh { dims: vec![2, 1] }.to_value(),
        ),
    ];
    attributes.push((rank_key(1), sample().to_value(1).unwrap()));
    let mut server = Server::new();
    let ns = server
        .create_namespace(NamespaceSpec {
            name: "kvs_topo_test".into(),
            size: 2,
            appnum: 0,
            appnum_of_rank: Vec::new(),
            universe_size: 2,
            node_of_rank: vec![0, 0],
            attributes,
            preput: vec![],
        })
        .unwrap();
    server.attach(7, ns, 1);
    let (client_end, mut server_end) = UnixStream::pair().unwrap();
    let pm = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            let n = match server_end.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let mut out = Vec::new();
            server.receive(7, &buf[..n], &mut out);
            for o in out {
                if let Output::Send { bytes, .. } = o {
                    if server_end.write_all(&bytes).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut c = crate::Client::connect(crate::ClientConfig {
        transport: crate::Transport::Stream {
            stream: client_end,
            rank: 1,
            size: 2,
        },
        spawned: false,
        pmi2: false,
        jobid: None,
    })
    .unwrap();
    assert_eq!(c.topo_type().unwrap(), TopoType::Mesh { dims: vec![2, 1] });
    assert_eq!(c.mesh_info().unwrap(), Some(MeshInfo { dims: vec![2, 1] }));
    assert_eq!(c.my_topology().unwrap(), Some(sample()));
    assert_eq!(c.cluster_info().unwrap().unwrap().my_rank(), [1, 1, 1, 0]);
    assert_eq!(
        c.hwloc_xmlfile().unwrap(),
        Some(std::path::PathBuf::from("/tmp/rivet-topo.xml"))
    );
    drop(c);
    pm.join().unwrap();
}
