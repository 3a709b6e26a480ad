//! What the topology reads and writes: policy names, XML, cpuset forms, the
//! report and PMI keys.

use super::*;

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
