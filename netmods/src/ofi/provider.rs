//! Choosing the provider: what Rivet asks libfabric for (`hints`), which
//! of its answers fits, clear errors when none does, and the facts about
//! the choice the netmod needs later (inject size, memory registration
//! rules, whether one-sided reads can be used).

use std::ffi::c_void;
use std::io;

use crate::NetmodError;

use super::config::OfiConfig;
use super::fid::{c_str, tostr, FiError, Info};
use super::sys::*;

/// Capabilities asked for one-sided reads (tried first, then without).
const RMA_CAPS: u64 = FI_RMA | FI_READ | FI_REMOTE_READ;
/// The memory registration rules the netmod can follow (see `RmaMode`).
const MR_MODES: i32 =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

pub(crate) fn fi_err(prov: &str, e: FiError) -> NetmodError {
    NetmodError::Io {
        what: format!("ofi netmod ({prov})"),
        source: io::Error::other(e.to_string()),
    }
}

fn invalid(why: String) -> NetmodError {
    NetmodError::Io {
        what: "ofi netmod".into(),
        source: io::Error::new(io::ErrorKind::NotFound, why),
    }
}

/// How registered memory is named to peers, when reads are possible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RmaMode {
    /// `FI_MR_VIRT_ADDR`: peers name memory by its address; else by the
    /// offset into the region, and our keys carry the region's base.
    pub virt: bool,
    /// `FI_MR_PROV_KEY`: the provider picks keys.
    pub prov_key: bool,
    /// `FI_MR_ENDPOINT`: regions are bound to the endpoint and enabled.
    pub endpoint: bool,
}

/// The facts about the chosen provider the netmod uses.
#[derive(Debug, Clone)]
pub(crate) struct Chosen {
    pub provider: String,
    pub fabric: String,
    pub domain: String,
    pub protocol: String,
    pub protocol_version: u32,
    pub prov_version: u32,
    pub caps: u64,
    pub mr_mode: i32,
    pub inject: usize,
    pub addr_format: u32,
    /// Local buffers are registered (`FI_MR_LOCAL`, or forced).
    pub mr_local: bool,
    /// One-sided reads, or why not.
    pub rma: Result<RmaMode, String>,
}

fn hints(cfg: &OfiConfig, rma: bool) -> Result<Info, FiError> {
    let mut info = Info::alloc()?;
    let mut h = info.hints();
    *h.caps = FI_TAGGED | if rma { RMA_CAPS } else { 0 };
    *h.mode = FI_CONTEXT | FI_CONTEXT2;
    h.ep.type_ = FI_EP_RDM;
    h.tx.msg_order = FI_ORDER_SAS;
    h.rx.msg_order = FI_ORDER_SAS;
    h.domain.threading = FI_THREAD_DOMAIN;
    h.domain.control_progress = FI_PROGRESS_MANUAL;
    h.domain.data_progress = FI_PROGRESS_MANUAL;
    h.domain.resource_mgmt = FI_RM_ENABLED;
    h.domain.av_type = FI_AV_TABLE;
    h.domain.mr_mode = MR_MODES;
    if let Some(p) = &cfg.provider {
        h.set_provider(p)?;
    }
    Ok(info)
}

/// Why entry `i` cannot serve the netmod, if it cannot.
fn unfit(i: &fi_info) -> Option<String> {
    // SAFETY: libfabric fills every attribute pointer of its answers.
    let (ep, tx, rx, dom) = unsafe { (&*i.ep_attr, &*i.tx_attr, &*i.rx_attr, &*i.domain_attr) };
    if ep.mem_tag_format.leading_zeros() != 0 {
        return Some(format!(
            "only {} tag bits (mem_tag_format {:#x}); Rivet needs 64",
            64 - ep.mem_tag_format.leading_zeros(),
            ep.mem_tag_format
        ));
    }
    if tx.msg_order & rx.msg_order & FI_ORDER_SAS == 0 {
        return Some("no send-after-send ordering (FI_ORDER_SAS)".into());
    }
    if dom.mr_mode & !MR_MODES != 0 {
        return Some(format!(
            "memory registration mode {:#x} not supported",
            dom.mr_mode
        ));
    }
    None
}

fn names(i: &fi_info) -> (String, String) {
    // SAFETY: libfabric fills these pointers and strings in its answers.
    unsafe {
        (
            c_str((*i.fabric_attr).prov_name),
            c_str((*i.domain_attr).name),
        )
    }
}

/// Picks the provider entry for `cfg`: with one-sided reads if it can,
/// else without.
pub(crate) fn select(cfg: &OfiConfig) -> Result<(Info, Chosen), NetmodError> {
    super::sys::load().map_err(NetmodError::Unavailable)?;
    let want = cfg.provider.as_deref().unwrap_or("libfabric's choice");
    let attempts: &[bool] = if cfg.rma { &[true, false] } else { &[false] };
    let mut why_not = Vec::new();
    for &rma in attempts {
        let h = hints(cfg, rma).map_err(|e| fi_err(want, e))?;
        let Some(list) = Info::get(&h).map_err(|e| fi_err(want, e))? else {
            continue;
        };
        let mut first = None;
        for i in list.iter() {
            let (prov, dom) = names(i);
            if cfg.provider.as_ref().is_some_and(|p| *p != prov)
                || cfg.domain.as_ref().is_some_and(|d| *d != dom)
            {
                continue;
            }
            if let Some(why) = unfit(i) {
                why_not.push(format!("{prov} ({dom}): {why}"));
                continue;
            }
            // The first provider's entries only: a preferred domain does
            // not change the provider libfabric put first.
            if first.as_ref().is_some_and(|(_, p)| *p != prov) {
                break;
            }
            if cfg.domain.is_none() && cfg.prefer_domain.as_ref() == Some(&dom) {
                first = Some((i, prov));
                break;
            }
            first.get_or_insert((i, prov));
        }
        if let Some((i, prov)) = first {
            let info = Info::dup(i).map_err(|e| fi_err(&prov, e))?;
            let chosen = Chosen::of(info.first(), cfg);
            return Ok((info, chosen));
        }
    }
    Err(no_provider(cfg, &why_not))
}

/// Core providers that reach other nodes no faster than Rivet's own tcp
/// netmod (or not at all): `auto` does not choose ofi for them.
const NOT_FASTER_THAN_TCP: [&str; 6] = ["tcp", "sockets", "udp", "shm", "sm2", "net"];

/// A provider whose core (the part before `;`: `verbs` of `verbs;ofi_rxm`)
/// is a real interconnect: verbs, efa, cxi, psm2, psm3, opx, ...
pub fn is_fast(provider: &str) -> bool {
    let core = provider.split(';').next().unwrap_or(provider);
    !NOT_FASTER_THAN_TCP.contains(&core)
}

/// The providers that could serve the netmod here, in libfabric's order
/// of preference, without duplicates; or why libfabric cannot be used.
pub fn providers() -> Result<Vec<String>, String> {
    super::sys::load()?;
    let h = hints(&OfiConfig::default(), false).map_err(|e| e.to_string())?;
    let mut out: Vec<String> = Vec::new();
    if let Some(list) = Info::get(&h).map_err(|e| e.to_string())? {
        for i in list.iter().filter(|i| unfit(i).is_none()) {
            let (p, _) = names(i);
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// Every provider the ofi netmod could use, each with its domains, in
/// libfabric's order (for `rivetrun --info`).
pub fn provider_domains() -> Result<Vec<(String, Vec<String>)>, String> {
    super::sys::load()?;
    let h = hints(&OfiConfig::default(), false).map_err(|e| e.to_string())?;
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    if let Some(list) = Info::get(&h).map_err(|e| e.to_string())? {
        for i in list.iter().filter(|i| unfit(i).is_none()) {
            let (p, d) = names(i);
            match out.iter_mut().find(|(q, _)| *q == p) {
                Some((_, ds)) if !ds.contains(&d) => ds.push(d),
                Some(_) => {}
                None => out.push((p, vec![d])),
            }
        }
    }
    Ok(out)
}

/// The error for a provider (or domain) that is not there, listing what is.
fn no_provider(cfg: &OfiConfig, why_not: &[String]) -> NetmodError {
    let any = OfiConfig {
        provider: None,
        ..cfg.clone()
    };
    let mut provs: Vec<String> = Vec::new();
    let mut domains: Vec<String> = Vec::new();
    if let Ok(Some(list)) = hints(&any, false).and_then(|h| Info::get(&h)) {
        for i in list.iter() {
            let (p, d) = names(i);
            if cfg.provider.as_ref().is_none_or(|want| *want == p) && !domains.contains(&d) {
                domains.push(d);
            }
            if !provs.contains(&p) {
                provs.push(p);
            }
        }
    }
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    let what = "FI_EP_RDM with FI_TAGGED (API 1.17)";
    let mut msg = match (&cfg.provider, &cfg.domain) {
        (Some(p), Some(d)) if provs.contains(p) => format!(
            "libfabric provider {p:?} has no domain {d:?} offering {what}; its domains: {}",
            list(&domains)
        ),
        (Some(p), _) => format!(
            "no libfabric provider {p:?} offers {what}; available: {}",
            list(&provs)
        ),
        (None, Some(d)) => format!(
            "no libfabric domain {d:?} offers {what}; domains: {}",
            list(&domains)
        ),
        (None, None) => format!("no libfabric provider offers {what}"),
    };
    if !why_not.is_empty() {
        msg.push_str(&format!("; unsuitable: {}", why_not.join("; ")));
    }
    if let Ok(f) = std::env::var("FI_PROVIDER") {
        msg.push_str(&format!(" (FI_PROVIDER={f} limits what libfabric offers)"));
    }
    invalid(msg)
}

impl Chosen {
    fn of(i: &fi_info, cfg: &OfiConfig) -> Chosen {
        let (provider, domain) = names(i);
        // SAFETY: libfabric fills every attribute pointer of its answers;
        // `protocol` is the u32 fi_tostr's FI_TYPE_PROTOCOL expects.
        let (ep, tx, dom, fab, protocol) = unsafe {
            let ep = &*i.ep_attr;
            let protocol = tostr(
                std::ptr::addr_of!(ep.protocol) as *const c_void,
                FI_TYPE_PROTOCOL,
            );
            (ep, &*i.tx_attr, &*i.domain_attr, &*i.fabric_attr, protocol)
        };
        let rma = if !cfg.rma {
            Err("not asked for: RIVET_OFI_RMA=0".to_string())
        } else if i.caps & RMA_CAPS != RMA_CAPS {
            Err(format!("provider {provider} lacks FI_RMA"))
        } else {
            rma_mode(dom.mr_mode, dom.mr_key_size)
        };
        Chosen {
            provider,
            // SAFETY: as above.
            fabric: unsafe { c_str(fab.name) },
            domain,
            protocol: protocol.trim().to_string(),
            protocol_version: ep.protocol_version,
            prov_version: fab.prov_version,
            caps: i.caps,
            mr_mode: dom.mr_mode,
            inject: tx.inject_size,
            addr_format: i.addr_format,
            mr_local: dom.mr_mode & FI_MR_LOCAL != 0 || cfg.force_mr_local,
            rma,
        }
    }
}

/// Whether regions can be named to peers under `mr_mode`.
pub(crate) fn rma_mode(mr_mode: i32, key_size: usize) -> Result<RmaMode, String> {
    let m = RmaMode {
        virt: mr_mode & FI_MR_VIRT_ADDR != 0,
        prov_key: mr_mode & FI_MR_PROV_KEY != 0,
        endpoint: mr_mode & FI_MR_ENDPOINT != 0,
    };
    if mr_mode & (FI_MR_RAW | FI_MR_MMU_NOTIFY | FI_MR_RMA_EVENT | FI_MR_HMEM) != 0 {
        return Err(format!("mr_mode {} is not supported", mr_mode_str(mr_mode)));
    }
    if !m.virt && m.prov_key {
        // Offsets need the region's base at the reader, and a provider key
        // leaves no room to carry it.
        return Err("mr_mode FI_MR_PROV_KEY without FI_MR_VIRT_ADDR".into());
    }
    if !m.virt && key_size < 8 {
        return Err(format!(
            "mr_key_size {key_size} cannot carry a region's base"
        ));
    }
    Ok(m)
}

/// `FI_TAGGED | FI_RMA | ...` for the capability bits the netmod cares about.
pub(crate) fn caps_str(caps: u64) -> String {
    let names = [
        (FI_TAGGED, "FI_TAGGED"),
        (FI_MSG, "FI_MSG"),
        (FI_RMA, "FI_RMA"),
        (FI_READ, "FI_READ"),
        (FI_REMOTE_READ, "FI_REMOTE_READ"),
        (FI_MULTI_RECV, "FI_MULTI_RECV"),
        (FI_DIRECTED_RECV, "FI_DIRECTED_RECV"),
        (FI_SOURCE, "FI_SOURCE"),
        (FI_HMEM, "FI_HMEM"),
        (FI_LOCAL_COMM, "FI_LOCAL_COMM"),
        (FI_REMOTE_COMM, "FI_REMOTE_COMM"),
    ];
    let v: Vec<&str> = names
        .iter()
        .filter(|(b, _)| caps & b != 0)
        .map(|(_, n)| *n)
        .collect();
    v.join(" | ")
}

pub(crate) fn mr_mode_str(mode: i32) -> String {
    let names = [
        (FI_MR_BASIC, "FI_MR_BASIC"),
        (FI_MR_SCALABLE, "FI_MR_SCALABLE"),
        (FI_MR_LOCAL, "FI_MR_LOCAL"),
        (FI_MR_RAW, "FI_MR_RAW"),
        (FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"),
        (FI_MR_ALLOCATED, "FI_MR_ALLOCATED"),
        (FI_MR_PROV_KEY, "FI_MR_PROV_KEY"),
        (FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"),
        (FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"),
        (FI_MR_ENDPOINT, "FI_MR_ENDPOINT"),
        (FI_MR_HMEM, "FI_MR_HMEM"),
    ];
    let v: Vec<&str> = names
        .iter()
        .filter(|(b, _)| mode & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if v.is_empty() {
        "none (offsets, keys of our choosing)".into()
    } else {
        v.join(" | ")
    }
}

/// `major.minor` of a libfabric version number.
pub(crate) fn version_str(v: u32) -> String {
    format!("{}.{}", v >> 16, v & 0xffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mr_modes() {
        let m = rma_mode(FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_LOCAL, 8).unwrap();
        assert!(m.virt && m.prov_key && !m.endpoint);
        let m = rma_mode(0, 8).unwrap();
        assert!(!m.virt && !m.prov_key);
        assert!(rma_mode(FI_MR_PROV_KEY, 8).is_err());
        assert!(rma_mode(0, 4).is_err());
        assert!(rma_mode(FI_MR_VIRT_ADDR, 4).is_ok());
        assert!(rma_mode(FI_MR_VIRT_ADDR | FI_MR_RAW, 8).is_err());
        assert_eq!(
            mr_mode_str(FI_MR_VIRT_ADDR | FI_MR_ENDPOINT),
            "FI_MR_VIRT_ADDR | FI_MR_ENDPOINT"
        );
        assert_eq!(caps_str(FI_TAGGED | FI_RMA), "FI_TAGGED | FI_RMA");
        assert_eq!(version_str(FI_VERSION_1_17), "1.17");
        assert!(is_fast("verbs;ofi_rxm") && is_fast("efa") && is_fast("cxi") && is_fast("psm3"));
        assert!(
            !is_fast("tcp;ofi_rxm")
                && !is_fast("shm")
                && !is_fast("tcp")
                && !is_fast("udp;ofi_rxd")
        );
    }
}
