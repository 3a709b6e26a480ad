//! The job description rivetrun sends each proxy (`wire.rs` lists the
//! words): the environment, the programs (MPMD apps) and the ranks of
//! each, the node's ranks and their apps, the proxy's place in the barrier tree, the job attributes.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use super::commands as cmd;
use super::{slurm, start, wire, Options};
use crate::hosts::Node;
use crate::launch::JobSpec;

/// What differs between the proxies' job descriptions.
pub(super) struct Place<'a> {
    pub apps: &'a [JobSpec],
    pub appnums: &'a [u32],
    pub mapping: &'a str,
    pub has_parent: bool,
    pub children: Vec<u32>,
    /// Every node's name (the PMIx node map).
    pub hosts: &'a [&'a str],
}

/// The proxy tree's fan-out (`RIVET_PROXY_FANOUT`, at least 1).
pub(super) fn fanout() -> u32 {
    match rivet_settings::var("RIVET_PROXY_FANOUT") {
        Some(v) => match v.trim().parse::<u32>() {
            Ok(k) if k >= 1 => k,
            _ => {
                eprintln!(
                    "rivetrun: warning: RIVET_PROXY_FANOUT={v:?} is not a number >= 1; using 8"
                );
                8
            }
        },
        None => 8,
    }
}

/// The job description one proxy gets: the environment, the programs,
/// its node's ranks and their apps, its place in the tree, the job
/// attributes (process mapping, cluster id).
pub(super) fn describe(job: &JobSpec, node: &Node, opts: &Options, place: &Place) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut put = |words: &[&[u8]]| out.push(wire::line(words));
    put(&[
        cmd::JOB.as_bytes(),
        job.size.to_string().as_bytes(),
        job.kvsname.as_bytes(),
    ]);
    // Hydra's default (-genvall): the ranks see rivetrun's environment,
    // then -genv/-env on top, wherever they run.
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    if !opts.genvnone {
        let slurm = opts.launcher == start::Kind::Slurm;
        env.extend(
            std::env::vars_os().filter(|(k, _)| !(slurm && slurm::is_slurm_variable(k.as_bytes()))),
        );
    }
    if let Some(name) = &opts.iface {
        if rivet_settings::var("RIVET_TCP_IFACE").is_none() {
            env.push(("RIVET_TCP_IFACE".into(), name.into()));
        }
    }
    for (k, v) in &env {
        put(&[cmd::ENV.as_bytes(), k.as_bytes(), v.as_bytes()]);
    }
    for app in place.apps {
        put(&[cmd::APP.as_bytes()]);
        put(&[
            cmd::PROG.as_bytes(),
            app.program.as_os_str().as_bytes(),
            app.argv0.as_bytes(),
        ]);
        for a in &app.args {
            put(&[cmd::ARG.as_bytes(), a.as_bytes()]);
        }
        for (k, v) in &app.env {
            put(&[cmd::ENV.as_bytes(), k.as_bytes(), v.as_bytes()]);
        }
        if let Some(d) = &app.wdir {
            let d = std::env::current_dir()
                .map(|c| c.join(d))
                .unwrap_or(d.clone());
            put(&[cmd::WDIR.as_bytes(), d.as_os_str().as_bytes()]);
        }
    }
    // How many ranks each app has (apps take consecutive ranks): the
    // proxy's PMIx server registers every rank's app, not just its node's.
    let mut sizes = vec![0u32; place.apps.len()];
    for &a in place.appnums {
        if let Some(n) = sizes.get_mut(a as usize) {
            *n += 1;
        }
    }
    let sizes: Vec<String> = sizes.iter().map(u32::to_string).collect();
    let mut words: Vec<&[u8]> = vec![cmd::APP_SIZES.as_bytes()];
    words.extend(sizes.iter().map(|w| w.as_bytes()));
    put(&words);
    for &r in &node.ranks {
        let app = place.appnums.get(r as usize).copied().unwrap_or(0);
        put(&[
            cmd::RANK.as_bytes(),
            r.to_string().as_bytes(),
            app.to_string().as_bytes(),
        ]);
    }
    let mut tree = vec![if place.has_parent { "1" } else { "0" }.to_string()];
    tree.extend(place.children.iter().map(u32::to_string));
    let mut words: Vec<&[u8]> = vec![cmd::TREE.as_bytes()];
    words.extend(tree.iter().map(|w| w.as_bytes()));
    put(&words);
    put(&[
        cmd::ATTR.as_bytes(),
        rivet_pmi::server::PROCESS_MAPPING_KEY.as_bytes(),
        place.mapping.as_bytes(),
    ]);
    let mut nodes: Vec<&[u8]> = vec![cmd::NODES.as_bytes()];
    nodes.extend(place.hosts.iter().map(|h| h.as_bytes()));
    put(&nodes);
    put(&[
        cmd::ATTR.as_bytes(),
        rivet_pmi::group::KEY_CLUSTER.as_bytes(),
        opts.cluster.as_bytes(),
    ]);
    if opts.label {
        put(&[cmd::LABEL.as_bytes()]);
    }
    if opts.report_bindings {
        put(&[cmd::REPORT_BINDINGS.as_bytes()]);
    }
    if opts.pmi_port {
        put(&[cmd::PMI_PORT.as_bytes()]);
    }
    put(&[cmd::MAP_BY.as_bytes(), opts.map_by.as_bytes()]);
    if let Some(b) = &opts.bind_to {
        put(&[cmd::BIND_TO.as_bytes(), b.as_bytes()]);
    }
    put(&[cmd::GRACE.as_bytes(), opts.grace.to_string().as_bytes()]);
    put(&[cmd::START.as_bytes()]);
    out
}
