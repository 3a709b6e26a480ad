//! Placement within an affinity mask narrower than the machine, and
//! discovery and binding on this machine.

use super::*;

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
