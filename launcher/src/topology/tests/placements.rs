//! The mapper's placements on synthetic topologies: counts, every policy on
//! four ranks, cluster positions, 64 ranks, ppn and map-by-node, cpu lists.

use super::*;

/// `n` ranks, `ppn` to a simulated node.
fn plan_ppn(
    t: &Topology,
    n: usize,
    ppn: usize,
    map_by: MapBy,
    bind_to: Option<BindTo>,
) -> Placement {
    plan(
        t,
        &PlacementRequest {
            ppn: Some(ppn),
            ..req(n, map_by, bind_to)
        },
    )
    .unwrap()
}

/// Each rank's (node, local rank, local size).
fn nodes(p: &Placement) -> Vec<(u32, u32, u32)> {
    p.ranks
        .iter()
        .map(|r| (r.node, r.local_rank, r.local_size))
        .collect()
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
    let p = plan_ppn(&t, 64, 16, MapBy::Core, None);
    assert_eq!(p.nodes, 4);
    assert!(p.simulated);
    let r17 = &p.ranks[17];
    assert_eq!((r17.node, r17.local_rank, r17.local_size), (1, 1, 16));
    assert_eq!(r17.cpuset.as_ref().unwrap().to_string(), "2-3");
    // Ids are job-wide: node 1's objects follow node 0's 2 packages, 4 NUMA nodes, 32 cores.
    assert_eq!(cluster(r17), "node.1.1,package.2.1,numa.4.1,core.33.0");
    assert_eq!(p.node_of_rank()[15..17], [0, 1]);

    // ppn 32, explicit core binding: 32 ranks per node fit 32 cores.
    let p = plan_ppn(&t, 64, 32, MapBy::Core, Some(BindTo::Core));
    assert_eq!(p.nodes, 2);
    assert_eq!(p.ranks[63].cpuset.as_ref().unwrap().to_string(), "62-63");
}

#[test]
fn ppn_block_and_map_by_node() {
    let t = topo(A);
    let p = plan_ppn(&t, 4, 2, MapBy::Core, None);
    assert_eq!(p.nodes, 2);
    assert_eq!(cpusets(&p), ["0-1", "2-3", "0-1", "2-3"]);
    assert_eq!(nodes(&p), [(0, 0, 2), (0, 1, 2), (1, 0, 2), (1, 1, 2)]);
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

    let p = plan_ppn(&t, 4, 2, MapBy::Node, None);
    assert_eq!(nodes(&p), [(0, 0, 2), (1, 0, 2), (0, 1, 2), (1, 1, 2)]);
    assert_eq!(cpusets(&p), ["0-1", "0-1", "2-3", "2-3"]);
    assert_eq!(p.node_of_rank(), [0, 1, 0, 1]);

    // 5 ranks, ppn 2: the last node is partly filled.
    let p = plan_ppn(&t, 5, 2, MapBy::Core, None);
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
