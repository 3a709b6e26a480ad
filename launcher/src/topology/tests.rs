//! Mapper tests on hwloc synthetic topologies, with the expected cpusets written out by hand,
//! plus error cases and real binding on this machine.
//!
//! hwloc numbers synthetic PUs in logical order, so on `pack:2 numa:2 core:8 pu:2` core `c`
//! has PUs `2c` and `2c+1`, NUMA node `m` has cores `8m..8m+7` (PUs `16m..16m+15`) and package
//! `p` has cores `16p..16p+15` (PUs `32p..32p+31`). On `pack:2 numa:2 l3:2 core:4 pu:2`, L3
//! cache `l` has cores `4l..4l+3` (PUs `8l..8l+7`).

use super::*;

const A: &str = "pack:2 numa:2 core:8 pu:2";
const B: &str = "pack:2 numa:2 l3:2 core:4 pu:2";

fn topo(spec: &str) -> Topology {
    Topology::load(spec).unwrap_or_else(|e| panic!("load {spec}: {e}"))
}

fn req(n: usize, map_by: MapBy, bind_to: Option<BindTo>) -> PlacementRequest {
    PlacementRequest {
        nranks: n,
        map_by,
        bind_to,
        ..Default::default()
    }
}

/// Cpusets as strings, "-" for unbound.
fn cpusets(p: &Placement) -> Vec<String> {
    p.ranks
        .iter()
        .map(|r| r.cpuset.as_ref().map_or("-".to_string(), |c| c.to_string()))
        .collect()
}

fn bound(p: &Placement) -> Vec<&str> {
    p.ranks.iter().map(|r| r.bound_to.as_str()).collect()
}

/// Cluster levels as `kind.my_cluster.my_rank,...`.
fn cluster(r: &RankPlacement) -> String {
    r.cluster
        .levels
        .iter()
        .map(|l| format!("{}.{}.{}", l.kind, l.my_cluster, l.my_rank))
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn synthetic_summary_and_counts() {
    let t = topo(A);
    assert!(!t.is_this_system());
    assert_eq!(t.num_cores(), 32);
    assert_eq!(t.num_pus(), 64);
    assert_eq!(
        t.summary(),
        "2 packages, 4 NUMA nodes, 0 L3 caches, 32 cores, 64 PUs (synthetic \"pack:2 numa:2 core:8 pu:2\")"
    );
    assert_eq!(
        topo(B).summary(),
        "2 packages, 4 NUMA nodes, 8 L3 caches, 32 cores, 64 PUs (synthetic \"pack:2 numa:2 l3:2 core:4 pu:2\")"
    );
}

#[test]
fn four_ranks_each_policy() {
    use BindTo as B_;
    use MapBy as M;
    struct Case {
        spec: &'static str,
        map_by: MapBy,
        bind_to: Option<BindTo>,
        cpus: [&'static str; 4],
        bound: [&'static str; 4],
    }
    let cases = [
        Case {
            spec: A,
            map_by: M::Core,
            bind_to: None,
            cpus: ["0-1", "2-3", "4-5", "6-7"],
            bound: ["core 0", "core 1", "core 2", "core 3"],
        },
        Case {
            spec: A,
            map_by: M::Core,
            bind_to: Some(B_::Core),
            cpus: ["0-1", "2-3", "4-5", "6-7"],
            bound: ["core 0", "core 1", "core 2", "core 3"],
        },
        Case {
            spec: A,
            map_by: M::Core,
            bind_to: Some(B_::Hwthread),
            cpus: ["0", "2", "4", "6"],
            bound: ["hwthread 0", "hwthread 2", "hwthread 4", "hwthread 6"],
        },
        Case {
            spec: A,
            map_by: M::Core,
            bind_to: Some(B_::Numa),
            cpus: ["0-15", "0-15", "0-15", "0-15"],
            bound: ["numa 0", "numa 0", "numa 0", "numa 0"],
        },
        Case {
            spec: A,
            map_by: M::Core,
            bind_to: Some(B_::Socket),
            cpus: ["0-31", "0-31", "0-31", "0-31"],
            bound: ["socket 0", "socket 0", "socket 0", "socket 0"],
        },
        Case {
            spec: A,
            map_by: M::Core,
            bind_to: Some(B_::None),
            cpus: ["-", "-", "-", "-"],
            bound: ["none", "none", "none", "none"],
        },
        Case {
            spec: A,
            map_by: M::Hwthread,
            bind_to: None,
            cpus: ["0", "1", "2", "3"],
            bound: ["hwthread 0", "hwthread 1", "hwthread 2", "hwthread 3"],
        },
        Case {
            spec: A,
            map_by: M::Hwthread,
            bind_to: Some(B_::Core),
            cpus: ["0-1", "0-1", "2-3", "2-3"],
            bound: ["core 0", "core 0", "core 1", "core 1"],
        },
        Case {
            spec: A,
            map_by: M::Numa,
            bind_to: None,
            cpus: ["0-1", "16-17", "32-33", "48-49"],
            bound: ["core 0", "core 8", "core 16", "core 24"],
        },
        Case {
            spec: A,
            map_by: M::Numa,
            bind_to: Some(B_::Numa),
            cpus: ["0-15", "16-31", "32-47", "48-63"],
            bound: ["numa 0", "numa 1", "numa 2", "numa 3"],
        },
        Case {
            spec: A,
            map_by: M::Socket,
            bind_to: Some(B_::Core),
            cpus: ["0-1", "32-33", "2-3", "34-35"],
            bound: ["core 0", "core 16", "core 1", "core 17"],
        },
        Case {
            spec: A,
            map_by: M::Socket,
            bind_to: Some(B_::Socket),
            cpus: ["0-31", "32-63", "0-31", "32-63"],
            bound: ["socket 0", "socket 1", "socket 0", "socket 1"],
        },
        Case {
            spec: A,
            map_by: M::Socket,
            bind_to: Some(B_::Numa),
            cpus: ["0-15", "32-47", "0-15", "32-47"],
            bound: ["numa 0", "numa 2", "numa 0", "numa 2"],
        },
        Case {
            spec: A,
            map_by: M::Node,
            bind_to: None,
            cpus: ["0-1", "2-3", "4-5", "6-7"],
            bound: ["core 0", "core 1", "core 2", "core 3"],
        },
        // No L3 in A: the whole node is one L3 domain, so map-by l3cache is map-by core.
        Case {
            spec: A,
            map_by: M::L3cache,
            bind_to: None,
            cpus: ["0-1", "2-3", "4-5", "6-7"],
            bound: ["core 0", "core 1", "core 2", "core 3"],
        },
        Case {
            spec: B,
            map_by: M::L3cache,
            bind_to: None,
            cpus: ["0-1", "8-9", "16-17", "24-25"],
            bound: ["core 0", "core 4", "core 8", "core 12"],
        },
        Case {
            spec: B,
            map_by: M::L3cache,
            bind_to: Some(B_::L3cache),
            cpus: ["0-7", "8-15", "16-23", "24-31"],
            bound: ["l3cache 0", "l3cache 1", "l3cache 2", "l3cache 3"],
        },
        Case {
            spec: B,
            map_by: M::Core,
            bind_to: Some(B_::L3cache),
            cpus: ["0-7", "0-7", "0-7", "0-7"],
            bound: ["l3cache 0", "l3cache 0", "l3cache 0", "l3cache 0"],
        },
        Case {
            spec: B,
            map_by: M::Numa,
            bind_to: Some(B_::L3cache),
            cpus: ["0-7", "16-23", "32-39", "48-55"],
            bound: ["l3cache 0", "l3cache 2", "l3cache 4", "l3cache 6"],
        },
    ];
    for c in &cases {
        let p = plan(&topo(c.spec), &req(4, c.map_by, c.bind_to))
            .unwrap_or_else(|e| panic!("{} map {} bind {:?}: {e}", c.spec, c.map_by, c.bind_to));
        let what = format!("{} map-by {} bind-to {:?}", c.spec, c.map_by, c.bind_to);
        assert_eq!(cpusets(&p), c.cpus, "{what}");
        assert_eq!(bound(&p), c.bound, "{what}");
        assert_eq!(p.nodes, 1, "{what}");
        assert!(p.simulated, "{what}");
        for (i, r) in p.ranks.iter().enumerate() {
            assert_eq!(
                (r.rank, r.node, r.local_rank, r.local_size),
                (i, 0, i as u32, 4),
                "{what}"
            );
        }
    }
}

#[test]
fn cluster_positions() {
    let t = topo(A);
    let cl = |m, b| {
        plan(&t, &req(4, m, b))
            .unwrap()
            .ranks
            .iter()
            .map(cluster)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        cl(MapBy::Core, None),
        [
            "node.0.0,package.0.0,numa.0.0,core.0.0",
            "node.0.1,package.0.1,numa.0.1,core.1.0",
            "node.0.2,package.0.2,numa.0.2,core.2.0",
            "node.0.3,package.0.3,numa.0.3,core.3.0",
        ]
    );
    assert_eq!(
        cl(MapBy::Numa, None),
        [
            "node.0.0,package.0.0,numa.0.0,core.0.0",
            "node.0.1,package.0.1,numa.1.0,core.8.0",
            "node.0.2,package.1.0,numa.2.0,core.16.0",
            "node.0.3,package.1.1,numa.3.0,core.24.0",
        ]
    );
    assert_eq!(
        cl(MapBy::Hwthread, None),
        [
            "node.0.0,package.0.0,numa.0.0,core.0.0",
            "node.0.1,package.0.1,numa.0.1,core.0.1",
            "node.0.2,package.0.2,numa.0.2,core.1.0",
            "node.0.3,package.0.3,numa.0.3,core.1.1",
        ]
    );
    // Bound to a NUMA node: no core level. Bound to a package spanning 2 NUMA nodes: no NUMA.
    assert_eq!(
        cl(MapBy::Numa, Some(BindTo::Numa))[3],
        "node.0.3,package.1.1,numa.3.0"
    );
    assert_eq!(
        cl(MapBy::Socket, Some(BindTo::Socket)),
        [
            "node.0.0,package.0.0",
            "node.0.1,package.1.0",
            "node.0.2,package.0.1",
            "node.0.3,package.1.1"
        ]
    );
    // Unbound: only the node level.
    assert_eq!(
        cl(MapBy::Core, Some(BindTo::None)),
        ["node.0.0", "node.0.1", "node.0.2", "node.0.3"]
    );
}

#[test]
fn sixty_four_ranks() {
    let t = topo(A);
    // Default binding with more ranks than cores: off, with a note.
    let p = plan(&t, &req(64, MapBy::Core, None)).unwrap();
    assert!(p
        .ranks
        .iter()
        .all(|r| r.cpuset.is_none() && r.bound_to == "none"));
    assert!(
        p.notes
            .iter()
            .any(|n| n == "oversubscribed: 64 ranks on 32 cores, binding off"),
        "{:?}",
        p.notes
    );
    assert!(p.ranks.iter().all(|r| r.cluster.levels.len() == 1));

    // map-by core, bind-to hwthread: one round over the cores' first PUs, then their second.
    let p = plan(&t, &req(64, MapBy::Core, Some(BindTo::Hwthread))).unwrap();
    let c = cpusets(&p);
    assert_eq!(
        [&c[0], &c[1], &c[31], &c[32], &c[33], &c[63]],
        ["0", "2", "62", "1", "3", "63"]
    );

    // map-by hwthread: rank r on PU r, bound to it by default.
    let p = plan(&t, &req(64, MapBy::Hwthread, None)).unwrap();
    let expect: Vec<String> = (0..64).map(|r: u32| r.to_string()).collect();
    assert_eq!(cpusets(&p), expect);

    // map-by numa, bind-to hwthread.
    let p = plan(&t, &req(64, MapBy::Numa, Some(BindTo::Hwthread))).unwrap();
    let c = cpusets(&p);
    assert_eq!(
        [&c[0], &c[1], &c[2], &c[3], &c[4], &c[31], &c[32], &c[63]],
        ["0", "16", "32", "48", "2", "62", "1", "63"]
    );

    // map-by socket, bind-to socket: 64 ranks fit the 64 PUs.
    let p = plan(&t, &req(64, MapBy::Socket, Some(BindTo::Socket))).unwrap();
    assert!(p
        .ranks
        .iter()
        .all(|r| r.cpuset.as_ref().unwrap().to_string()
            == if r.rank % 2 == 0 { "0-31" } else { "32-63" }));

    // ppn 16: 4 simulated nodes, block-filled.
    let p = plan(
        &t,
        &PlacementRequest {
            ppn: Some(16),
            ..req(64, MapBy::Core, None)
        },
    )
    .unwrap();
    assert_eq!(p.nodes, 4);
    assert!(p.simulated);
    let r17 = &p.ranks[17];
    assert_eq!((r17.node, r17.local_rank, r17.local_size), (1, 1, 16));
    assert_eq!(r17.cpuset.as_ref().unwrap().to_string(), "2-3");
    // Ids are job-wide: node 1's objects follow node 0's 2 packages, 4 NUMA nodes, 32 cores.
    assert_eq!(cluster(r17), "node.1.1,package.2.1,numa.4.1,core.33.0");
    assert_eq!(p.node_of_rank()[15..17], [0, 1]);

    // ppn 32, explicit core binding: 32 ranks per node fit 32 cores.
    let p = plan(
        &t,
        &PlacementRequest {
            ppn: Some(32),
            ..req(64, MapBy::Core, Some(BindTo::Core))
        },
    )
    .unwrap();
    assert_eq!(p.nodes, 2);
    assert_eq!(p.ranks[63].cpuset.as_ref().unwrap().to_string(), "62-63");
}

#[test]
fn ppn_block_and_map_by_node() {
    let t = topo(A);
    let p = plan(
        &t,
        &PlacementRequest {
            ppn: Some(2),
            ..req(4, MapBy::Core, None)
        },
    )
    .unwrap();
    assert_eq!(p.nodes, 2);
    assert_eq!(cpusets(&p), ["0-1", "2-3", "0-1", "2-3"]);
    let nodes: Vec<_> = p
        .ranks
        .iter()
        .map(|r| (r.node, r.local_rank, r.local_size))
        .collect();
    assert_eq!(nodes, [(0, 0, 2), (0, 1, 2), (1, 0, 2), (1, 1, 2)]);
    assert_eq!(
        cluster(&p.ranks[2]),
        "node.1.0,package.2.0,numa.4.0,core.32.0"
    );
    assert_eq!(p.node_of_rank(), [0, 0, 1, 1]);
    assert!(
        p.notes.iter().any(|n| n.starts_with("2 nodes, simulated")),
        "{:?}",
        p.notes
    );

    let p = plan(
        &t,
        &PlacementRequest {
            ppn: Some(2),
            ..req(4, MapBy::Node, None)
        },
    )
    .unwrap();
    let nodes: Vec<_> = p
        .ranks
        .iter()
        .map(|r| (r.node, r.local_rank, r.local_size))
        .collect();
    assert_eq!(nodes, [(0, 0, 2), (1, 0, 2), (0, 1, 2), (1, 1, 2)]);
    assert_eq!(cpusets(&p), ["0-1", "0-1", "2-3", "2-3"]);
    assert_eq!(p.node_of_rank(), [0, 1, 0, 1]);

    // 5 ranks, ppn 2: the last node is partly filled.
    let p = plan(
        &t,
        &PlacementRequest {
            ppn: Some(2),
            ..req(5, MapBy::Core, None)
        },
    )
    .unwrap();
    assert_eq!(p.nodes, 3);
    assert_eq!(p.node_of_rank(), [0, 0, 1, 1, 2]);
    assert_eq!(p.ranks[4].local_size, 1);
}

#[test]
fn cpu_list() {
    let t = topo(A);
    let with = |n, list: &str| {
        plan(
            &t,
            &PlacementRequest {
                cpu_list: Some(list.into()),
                ..req(n, MapBy::Core, None)
            },
        )
    };
    let p = with(2, "0:1").unwrap();
    assert_eq!(cpusets(&p), ["0", "1"]);
    assert_eq!(bound(&p), ["cpu-list", "cpu-list"]);
    assert_eq!(
        cluster(&p.ranks[1]),
        "node.0.1,package.0.1,numa.0.1,core.0.1"
    );
    let p = with(2, "0-1:2-3").unwrap();
    assert_eq!(cpusets(&p), ["0-1", "2-3"]);
    // One entry applies to every rank; it spans two cores, so there is no core level.
    let p = with(4, "0-3").unwrap();
    assert_eq!(cpusets(&p), ["0-3", "0-3", "0-3", "0-3"]);
    assert_eq!(cluster(&p.ranks[3]), "node.0.3,package.0.3,numa.0.3");
    // Spanning both packages: only the node level.
    assert_eq!(cluster(&with(1, "0,63").unwrap().ranks[0]), "node.0.0");
    // --bind-to is overridden, with a note.
    let p = plan(
        &t,
        &PlacementRequest {
            cpu_list: Some("5".into()),
            ..req(1, MapBy::Core, Some(BindTo::Socket))
        },
    )
    .unwrap();
    assert_eq!(cpusets(&p), ["5"]);
    assert_eq!(p.notes[0], "--cpu-list given: --bind-to socket is ignored");

    assert!(matches!(
        with(4, "0-1:2-3"),
        Err(TopologyError::CpuListCount {
            entries: 2,
            nranks: 4
        })
    ));
    assert!(matches!(
        with(1, "64"),
        Err(TopologyError::CpuNotInTopology { cpu: 64, .. })
    ));
    assert!(matches!(with(1, "3-1"), Err(TopologyError::CpuList { .. })));
    assert!(matches!(
        with(2, "0::1"),
        Err(TopologyError::CpuList { .. })
    ));
    assert!(matches!(with(1, "x"), Err(TopologyError::CpuList { .. })));
}

#[test]
fn binding_errors() {
    let t = topo(A);
    let e = plan(&t, &req(64, MapBy::Core, Some(BindTo::Core))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot bind: 64 ranks but 32 cores: cannot bind one rank per core; use --bind-to none or fewer ranks"
    );
    let e = plan(&t, &req(65, MapBy::Core, Some(BindTo::Hwthread))).unwrap_err();
    assert!(
        e.to_string().contains("65 ranks but 64 hardware threads"),
        "{e}"
    );
    let e = plan(&t, &req(65, MapBy::Socket, Some(BindTo::Socket))).unwrap_err();
    assert!(
        e.to_string()
            .contains("binding to socket would oversubscribe it"),
        "{e}"
    );
    let e = plan(
        &t,
        &PlacementRequest {
            ppn: Some(40),
            ..req(80, MapBy::Core, Some(BindTo::Core))
        },
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("40 ranks per node but 32 cores"),
        "{e}"
    );
    // The 2-core case from the launcher's point of view.
    let small = topo("core:2 pu:1");
    let e = plan(&small, &req(8, MapBy::Core, Some(BindTo::Core))).unwrap_err();
    assert!(
        e.to_string()
            .contains("8 ranks but 2 cores: cannot bind one rank per core"),
        "{e}"
    );
    let p = plan(&small, &req(8, MapBy::Core, None)).unwrap();
    assert_eq!(
        p.notes[0],
        "oversubscribed: 8 ranks on 2 cores, binding off"
    );
}

#[test]
fn request_errors() {
    let t = topo(A);
    assert!(matches!(
        plan(&t, &req(0, MapBy::Core, None)),
        Err(TopologyError::Request(_))
    ));
    let e = plan(
        &t,
        &PlacementRequest {
            ppn: Some(0),
            ..req(4, MapBy::Core, None)
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("ppn"), "{e}");
    let e = plan(
        &t,
        &PlacementRequest {
            mesh_dims: Some(vec![2, 3]),
            ..req(4, MapBy::Core, None)
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("mesh dimensions '2x3'"), "{e}");
    let p = plan(
        &t,
        &PlacementRequest {
            mesh_dims: Some(vec![2, 2]),
            ..req(4, MapBy::Core, None)
        },
    )
    .unwrap();
    assert_eq!(
        p.topo_type(),
        rivet_pmi::topology::TopoType::Mesh { dims: vec![2, 2] }
    );
}

#[test]
fn policy_parsing() {
    for (s, m) in [
        ("core", MapBy::Core),
        ("HWTHREAD", MapBy::Hwthread),
        ("l3cache", MapBy::L3cache),
        ("numa", MapBy::Numa),
        ("socket", MapBy::Socket),
        ("package", MapBy::Socket),
        ("node", MapBy::Node),
    ] {
        assert_eq!(s.parse::<MapBy>().unwrap(), m);
    }
    for (s, b) in [
        ("core", BindTo::Core),
        ("hwthread", BindTo::Hwthread),
        ("l3", BindTo::L3cache),
        ("numa", BindTo::Numa),
        ("socket", BindTo::Socket),
        ("none", BindTo::None),
    ] {
        assert_eq!(s.parse::<BindTo>().unwrap(), b);
    }
    assert_eq!(
        "corez".parse::<MapBy>().unwrap_err().to_string(),
        "unknown --map-by policy 'corez': valid values are core, hwthread, l3cache, numa, socket, node"
    );
    assert_eq!(
        "node".parse::<BindTo>().unwrap_err().to_string(),
        "unknown --bind-to policy 'node': valid values are core, hwthread, l3cache, numa, socket, none"
    );
}

#[test]
fn load_errors() {
    for bad in ["pack:2 bogus:3", "pack:x", "numa:2 pack:2 core:1", ""] {
        assert!(
            matches!(Topology::load(bad), Err(TopologyError::Synthetic { .. })),
            "accepted {bad:?}"
        );
    }
    let e = Topology::load("/nonexistent/rivet-topo.xml").unwrap_err();
    assert!(matches!(e, TopologyError::XmlRead { .. }), "{e}");
    assert!(e.to_string().contains("/nonexistent/rivet-topo.xml"), "{e}");

    let dir = std::env::temp_dir().join(format!("rivet-topo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in [
        ("plain.xml", "hello"),
        ("broken.xml", "<topology><object type=\"Machine\">"),
        ("empty.xml", ""),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let e = Topology::load(path.to_str().unwrap()).unwrap_err();
        assert!(matches!(e, TopologyError::XmlInvalid { .. }), "{name}: {e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn xml_round_trip() {
    let dir = std::env::temp_dir().join(format!("rivet-topo-xml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("a.xml");
    let a = topo(A);
    a.export_xml(&path).unwrap();
    let back = Topology::load(path.to_str().unwrap()).unwrap();
    assert!(!back.is_this_system());
    assert_eq!((back.num_cores(), back.num_pus()), (32, 64));
    let r = req(4, MapBy::Numa, None);
    assert_eq!(
        cpusets(&plan(&back, &r).unwrap()),
        cpusets(&plan(&a, &r).unwrap())
    );
    let e = a.export_xml(&dir.join("no/such/dir/a.xml")).unwrap_err();
    assert!(matches!(e, TopologyError::Export { .. }), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cpuset_forms() {
    let c: CpuSet = "8,0-3".parse().unwrap();
    assert_eq!(c.to_string(), "0-3,8");
    assert_eq!(c.cpus(), [0, 1, 2, 3, 8]);
    assert_eq!(CpuSet::from_libc(&c.to_libc()), c);
    assert!(c.fits_libc());
    assert!(!CpuSet::from_cpus([5000]).fits_libc());
    assert!("".parse::<CpuSet>().is_err());
    assert!("1-".parse::<CpuSet>().is_err());
}

#[test]
fn report_and_pmi_keys() {
    let t = topo(A);
    let p = plan(&t, &req(2, MapBy::Core, None)).unwrap();
    assert_eq!(
        report_line(&p.ranks[1], "h1"),
        "rank 1 on h1 (node 0, local 1 of 2): core 1, cpus 2-3"
    );
    let keys = p.pmi_keys(Some(Path::new("/tmp/t.xml"))).unwrap();
    let keys: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        keys,
        [
            ("PMI_hwloc_xmlfile", "/tmp/t.xml"),
            ("PMI_rivet_topo", "cluster"),
            ("PMI_rivet_rank_0", "node:0/local_rank:0/local_size:2/cpuset:0-1/bound:core.0/cluster:node.0.0,package.0.0,numa.0.0,core.0.0"),
            ("PMI_rivet_rank_1", "node:0/local_rank:1/local_size:2/cpuset:2-3/bound:core.1/cluster:node.0.1,package.0.1,numa.0.1,core.1.0"),
        ]
    );
    let back = rivet_pmi::topology::RankTopology::parse(keys[3].1).unwrap();
    assert_eq!(back, p.ranks[1].to_pmi());
    let p = plan(&t, &req(2, MapBy::Core, Some(BindTo::None))).unwrap();
    assert_eq!(
        report_line(&p.ranks[0], "h1"),
        "rank 0 on h1 (node 0, local 0 of 2): not bound"
    );
    assert_eq!(p.pmi_keys(None).unwrap()[0].1, "unavailable");
}

// --- An affinity mask narrower than the machine ---

#[test]
fn placement_keeps_to_the_affinity_mask() {
    let mut t = topo(A);
    let mask: CpuSet = "1,3,40-47".parse().unwrap();
    t.restrict_to(&mask).unwrap();
    // Cores 0 and 1 keep one PU each; cores 20-23 (package 1, NUMA node 2) both.
    assert_eq!(t.num_cores(), 6);
    assert_eq!(t.num_pus(), 10);
    assert_eq!(t.allowed_cpus(), mask);
    assert!(
        t.summary().ends_with(
            "2 packages, 2 NUMA nodes, 0 L3 caches, 6 cores, 10 PUs (synthetic \"pack:2 numa:2 \
             core:8 pu:2\"; ranks go only on CPUs 1,3,40-47 of 0-63: rivetrun's affinity mask)"
        ),
        "{}",
        t.summary()
    );
    // Logical indices are the machine's, so "core 20" is still lstopo's L#20.
    let p = plan(&t, &req(3, MapBy::Core, None)).unwrap();
    assert_eq!(cpusets(&p), ["1", "3", "40-41"]);
    assert_eq!(bound(&p), ["core 0", "core 1", "core 20"]);
    let p = plan(&t, &req(2, MapBy::Socket, Some(BindTo::Socket))).unwrap();
    assert_eq!(cpusets(&p), ["1,3", "40-47"]);
    let p = plan(&t, &req(2, MapBy::Numa, Some(BindTo::Numa))).unwrap();
    assert_eq!(cpusets(&p), ["1,3", "40-47"]);
    assert_eq!(bound(&p), ["numa 0", "numa 2"]);
    // Capacity is the mask's: 7 ranks on 6 cores are not bound.
    let p = plan(&t, &req(7, MapBy::Core, None)).unwrap();
    assert!(p.ranks.iter().all(|r| r.cpuset.is_none()));
    assert_eq!(
        p.notes[0],
        "oversubscribed: 7 ranks on 6 cores, binding off"
    );
    // A --cpu-list outside the mask is refused, naming it.
    let e = plan(
        &t,
        &PlacementRequest {
            cpu_list: Some("2".into()),
            ..req(1, MapBy::Core, None)
        },
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "CPU 2 of --cpu-list is not in the topology (its CPUs are 1,3,40-47: rivetrun's \
         affinity mask, of 0-63)"
    );
    // Narrowing again keeps the machine's CPUs in the summary.
    t.restrict_to(&"40-41".parse().unwrap()).unwrap();
    assert!(
        t.summary().contains("CPUs 40-41 of 0-63"),
        "{}",
        t.summary()
    );
    // A mask covering everything changes nothing; one with none of the CPUs is an error.
    let mut whole = topo(A);
    whole.restrict_to(&"0-127".parse().unwrap()).unwrap();
    assert_eq!(whole.summary(), topo(A).summary());
    let e = topo(A).restrict_to(&"64-65".parse().unwrap()).unwrap_err();
    assert!(matches!(e, TopologyError::NoAllowedCpu { .. }), "{e}");
    assert!(e
        .to_string()
        .contains("(64-65) holds none of the topology's CPUs (0-63)"));
}

// --- This machine ---

#[test]
fn discover_this_machine() {
    let t = Topology::discover().unwrap();
    assert!(t.is_this_system());
    assert!(t.num_cores() >= 1 && t.num_pus() >= t.num_cores());
    assert!(t.summary().contains("(this machine"), "{}", t.summary());
    // Placement stays inside the mask the test runs under (all CPUs, or a taskset's).
    let mask = current_affinity().unwrap();
    assert!(t.allowed_cpus().is_subset(&mask), "{}", t.summary());
    let p = plan(&t, &req(1, MapBy::Core, None)).unwrap();
    assert!(!p.simulated);
    assert!(p.ranks[0].cpuset.as_ref().unwrap().is_subset(&mask));
    assert!(p.ranks[0].bound_to.starts_with("core "));
}

/// The first core of this machine that the test may run on, as the set to bind to.
fn first_usable_core(t: &Topology) -> Option<CpuSet> {
    let allowed = current_affinity().unwrap();
    let p = plan(t, &req(t.num_cores(), MapBy::Core, Some(BindTo::Core))).unwrap();
    p.ranks
        .into_iter()
        .filter_map(|r| r.cpuset)
        .find(|c| c.is_subset(&allowed))
}

#[test]
fn bind_self_in_a_thread() {
    let t = Topology::discover().unwrap();
    let Some(core) = first_usable_core(&t) else {
        return;
    };
    let set = core.to_libc();
    // sched_setaffinity(0) binds only the calling thread: do it in a thread of its own.
    let got = std::thread::spawn(move || {
        bind_self(&set).unwrap();
        current_affinity().unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(got, core);
}

#[test]
fn bind_self_in_pre_exec() {
    use std::os::unix::process::CommandExt;
    let t = Topology::discover().unwrap();
    let Some(core) = first_usable_core(&t) else {
        return;
    };
    let set = core.to_libc();
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "grep Cpus_allowed_list /proc/self/status"]);
    // SAFETY: bind_self is async-signal-safe (one syscall, no allocation).
    unsafe { cmd.pre_exec(move || bind_self(&set)) };
    let out = cmd.output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.trim(), format!("Cpus_allowed_list:\t{core}"));
}

#[test]
fn pmi_server_accepts_the_keys() {
    use rivet_pmi::server::{NamespaceSpec, Server};
    // 64 ranks bound to hwthreads, and one rank with a long, sparse cpu-list.
    let t = topo(A);
    let even: Vec<String> = (0..64).step_by(2).map(|c: u32| c.to_string()).collect();
    for p in [
        plan(&t, &req(64, MapBy::Numa, Some(BindTo::Hwthread))).unwrap(),
        plan(
            &t,
            &PlacementRequest {
                cpu_list: Some(even.join(",")),
                ..req(1, MapBy::Core, None)
            },
        )
        .unwrap(),
    ] {
        let spec = NamespaceSpec {
            name: "kvs_topo".into(),
            size: p.ranks.len() as u32,
            universe_size: p.ranks.len() as u32,
            node_of_rank: p.node_of_rank(),
            attributes: p.pmi_keys(Some(Path::new("/tmp/rivet-topo.xml"))).unwrap(),
            ..Default::default()
        };
        Server::new().create_namespace(spec).unwrap();
    }
}
