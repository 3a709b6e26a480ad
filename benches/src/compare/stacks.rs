//! Which stacks run: each transport's stack list, `--stacks` and
//! `--provider` checked, and what each stack is to the ratios (its role).

use crate::peers::Transport;

/// The stacks of each transport, in the order of the tables.
pub(super) const SHM_STACKS: [&str; 4] = ["rivet", "rivet-mpi", "mpich", "openmpi"];
/// Run only when `--stacks` names them (shm and tcp): Open MPI's programs
/// under rivetrun's PMIx server, a launcher comparison rather than a peer.
pub(super) const ASKED_ONLY_STACKS: [&str; 1] = ["openmpi-rivetrun"];
pub(super) const TCP_STACKS: [&str; 5] =
    ["rivet-uring", "rivet-poll", "raw-tcp", "mpich", "openmpi"];
/// Over ofi, each of these for every provider: `rivet-ofi(shm)`.
pub(super) const OFI_STACKS: [&str; 2] = ["rivet-ofi", "fi_pingpong"];
/// The providers of `--transport ofi` unless `--provider` says otherwise.
pub(super) const DEFAULT_PROVIDERS: [&str; 2] = ["tcp;ofi_rxm", "shm"];

/// A stack's name and, over ofi, its provider: `rivet-ofi(shm)` is
/// (`rivet-ofi`, `shm`).
pub(super) fn split_provider(name: &str) -> (&str, Option<&str>) {
    match name.strip_suffix(')').and_then(|n| n.split_once('(')) {
        Some((base, provider)) => (base, Some(provider)),
        None => (name, None),
    }
}

/// The providers to compare over (`--provider`), checked.
pub(super) fn select_providers(
    transport: Transport,
    asked: Option<&[String]>,
) -> Result<Vec<String>, String> {
    let Some(asked) = asked else {
        return Ok(DEFAULT_PROVIDERS.map(String::from).to_vec());
    };
    if transport != Transport::Ofi {
        return Err("--provider applies to --transport ofi only".into());
    }
    let mut providers: Vec<String> = Vec::new();
    for p in asked.iter().map(|p| p.trim()) {
        if p.is_empty() || p.contains(['(', ')']) {
            return Err(format!(
                "--provider: {p:?} is not a libfabric provider name"
            ));
        }
        if !providers.iter().any(|q| q == p) {
            providers.push(p.to_string());
        }
    }
    Ok(providers)
}

/// The stacks `--stacks` asks for (all of the transport's if not given), in
/// table order; over tcp, `rivet` stands for both Rivet stacks; over ofi,
/// each stack runs for every provider (`rivet` = `rivet-ofi`).
pub(super) fn select_stacks(
    transport: Transport,
    asked: Option<&[String]>,
    providers: &[String],
) -> Result<Vec<String>, String> {
    let known: &[&'static str] = match transport {
        Transport::Shm => &SHM_STACKS,
        Transport::Tcp => &TCP_STACKS,
        Transport::Ofi => &OFI_STACKS,
    };
    let chosen: Vec<&'static str> = match asked {
        None => known.to_vec(),
        Some(asked) => {
            let mut chosen = Vec::new();
            for name in asked.iter().map(|s| s.trim()) {
                let matched: Vec<&'static str> = match (transport, name) {
                    (Transport::Tcp, "rivet") => vec!["rivet-uring", "rivet-poll"],
                    (Transport::Ofi, "rivet") => vec!["rivet-ofi"],
                    (Transport::Shm | Transport::Tcp, _) if ASKED_ONLY_STACKS.contains(&name) => {
                        ASKED_ONLY_STACKS
                            .iter()
                            .copied()
                            .filter(|&k| k == name)
                            .collect()
                    }
                    _ => known.iter().copied().filter(|&k| k == name).collect(),
                };
                if matched.is_empty() {
                    return Err(format!(
                        "unknown stack {name:?} for --transport {}: {}",
                        transport.name(),
                        known.join(", ")
                    ));
                }
                chosen.extend(matched);
            }
            known
                .iter()
                .chain(ASKED_ONLY_STACKS.iter())
                .copied()
                .filter(|k| chosen.contains(k))
                .collect()
        }
    };
    Ok(match transport {
        Transport::Ofi => providers
            .iter()
            .flat_map(|p| chosen.iter().map(move |s| format!("{s}({p})")))
            .collect(),
        _ => chosen.into_iter().map(String::from).collect(),
    })
}

/// What a stack is to the ratios, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// rivet, rivet-uring, rivet-poll, rivet-ofi(P): the numerator of every ratio.
    Rivet,
    /// mpich, openmpi: the best of them is "best peer".
    Peer,
    /// raw-tcp, fi_pingpong(P): the limit, a ratio of its own.
    Raw,
    /// openmpi-rivetrun: measured and shown, in no rivet/best ratio
    /// (startup gives its own over openmpi's: `text::scale_notes`).
    Other,
}

pub(super) fn role(name: &str) -> Role {
    if ASKED_ONLY_STACKS.contains(&name) {
        Role::Other
    } else if name.starts_with("rivet") {
        Role::Rivet
    } else if name.starts_with("raw") || name.starts_with("fi_pingpong") {
        Role::Raw
    } else {
        Role::Peer
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::OFI_NAMES;
    use super::*;

    #[test]
    fn stacks_per_transport() {
        let given = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            select_stacks(Transport::Shm, None, &[]).unwrap(),
            SHM_STACKS
        );
        assert_eq!(
            select_stacks(Transport::Tcp, None, &[]).unwrap(),
            TCP_STACKS
        );
        // Table order whatever the order asked; `rivet` = both Rivet stacks over tcp.
        assert_eq!(
            select_stacks(
                Transport::Tcp,
                Some(&given(&["openmpi", "raw-tcp", "rivet"])),
                &[]
            )
            .unwrap(),
            ["rivet-uring", "rivet-poll", "raw-tcp", "openmpi"]
        );
        assert_eq!(
            select_stacks(Transport::Tcp, Some(&given(&["rivet-poll", " mpich"])), &[]).unwrap(),
            ["rivet-poll", "mpich"]
        );
        assert_eq!(
            select_stacks(Transport::Shm, Some(&given(&["mpich", "rivet"])), &[]).unwrap(),
            ["rivet", "mpich"]
        );
        let err = select_stacks(Transport::Shm, Some(&given(&["rivet-uring"])), &[]).unwrap_err();
        assert!(err.contains("--transport shm"), "{err}");
        assert!(select_stacks(Transport::Shm, Some(&given(&["raw-tcp"])), &[]).is_err());
        assert!(select_stacks(Transport::Tcp, Some(&given(&["ucx"])), &[]).is_err());
        assert_eq!(role("rivet"), Role::Rivet);
        assert_eq!(role("rivet-poll"), Role::Rivet);
        assert_eq!(role("raw-tcp"), Role::Raw);
        assert_eq!(role("openmpi"), Role::Peer);
        assert_eq!(role("openmpi-rivetrun"), Role::Other);
        // Only when asked, after the transport's own stacks.
        assert!(!select_stacks(Transport::Shm, None, &[])
            .unwrap()
            .contains(&"openmpi-rivetrun".to_string()));
        assert_eq!(
            select_stacks(
                Transport::Shm,
                Some(&["openmpi-rivetrun".to_string(), "openmpi".to_string()]),
                &[]
            )
            .unwrap(),
            ["openmpi", "openmpi-rivetrun"]
        );
        assert!(
            select_stacks(Transport::Ofi, Some(&["openmpi-rivetrun".to_string()]), &[]).is_err()
        );
    }

    #[test]
    fn ofi_stacks_and_providers() {
        let given = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let both = select_providers(Transport::Ofi, None).unwrap();
        assert_eq!(both, DEFAULT_PROVIDERS);
        assert_eq!(
            select_stacks(Transport::Ofi, None, &both).unwrap(),
            OFI_NAMES
        );
        let shm = select_providers(Transport::Ofi, Some(&given(&["shm", " shm"]))).unwrap();
        assert_eq!(shm, ["shm"]);
        // Table order whatever the order asked; `rivet` = rivet-ofi.
        assert_eq!(
            select_stacks(
                Transport::Ofi,
                Some(&given(&["fi_pingpong", "rivet"])),
                &shm
            )
            .unwrap(),
            ["rivet-ofi(shm)", "fi_pingpong(shm)"]
        );
        assert!(select_stacks(Transport::Ofi, Some(&given(&["mpich"])), &shm).is_err());
        assert!(select_stacks(Transport::Tcp, Some(&given(&["rivet-ofi"])), &shm).is_err());
        // --provider is for ofi only, and takes provider names.
        let err = select_providers(Transport::Tcp, Some(&given(&["shm"]))).unwrap_err();
        assert!(err.contains("--transport ofi"), "{err}");
        assert!(select_providers(Transport::Ofi, Some(&given(&[" "]))).is_err());
        assert!(select_providers(Transport::Ofi, Some(&given(&["a(b)"]))).is_err());
        assert_eq!(
            split_provider("rivet-ofi(tcp;ofi_rxm)"),
            ("rivet-ofi", Some("tcp;ofi_rxm"))
        );
        assert_eq!(split_provider("raw-tcp"), ("raw-tcp", None));
        assert_eq!(role("fi_pingpong(shm)"), Role::Raw);
        assert_eq!(role("rivet-ofi(shm)"), Role::Rivet);
    }
}
