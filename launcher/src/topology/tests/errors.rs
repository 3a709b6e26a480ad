//! The mapper's clear errors: impossible bindings, bad requests and
//! topologies that do not load.

use super::*;

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
