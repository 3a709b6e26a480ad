//! rivetrun's part in PMIx under the proxies: passing a direct modex
//! between the asking node's proxy and the target rank's (`proxy/pmix.rs`
//! has the whole exchange). Fences need nothing here: they are barriers.

use super::{wire, Proxy};
use rivet_pmi::pmix_ffi::PMIX_ERR_UNREACH;

/// `dmodex ID NS RANK` from proxy `from`: asked of the proxy of `RANK`
/// (`dmodex_ask FROM ID NS RANK`), or answered at once with an error if
/// that proxy is gone or the rank is not the job's.
pub(super) fn ask(from: u32, msg: &[Vec<u8>], node_of_rank: &[u32], proxies: &mut [Proxy]) {
    let word = |i: usize| msg.get(i).map(|w| wire::text(w)).unwrap_or_default();
    let (id, ns, rank) = (word(1), word(2), word(3));
    let target = rank
        .parse::<usize>()
        .ok()
        .and_then(|r| node_of_rank.get(r).copied());
    let asked = target
        .and_then(|t| proxies.get_mut(t as usize))
        .and_then(|p| p.conn.as_mut())
        .is_some_and(|c| {
            wire::send(c, &["dmodex_ask", &from.to_string(), &id, &ns, &rank]).is_ok()
        });
    if !asked {
        let failed = ["dmodex_done", &id, &PMIX_ERR_UNREACH.to_string(), ""];
        if let Some(c) = proxies.get_mut(from as usize).and_then(|p| p.conn.as_mut()) {
            let _ = wire::send(c, &failed);
        }
    }
}

/// `dmodex_data FROM ID STATUS HEX` from the target's proxy: to the asker
/// as `dmodex_done ID STATUS HEX`.
pub(super) fn answer(msg: &[Vec<u8>], proxies: &mut [Proxy]) {
    let Some(from) = msg.get(1).and_then(|w| wire::text(w).parse::<usize>().ok()) else {
        return;
    };
    let mut words = vec![b"dmodex_done".to_vec()];
    words.extend(msg.iter().skip(2).take(3).cloned());
    if let Some(c) = proxies.get_mut(from).and_then(|p| p.conn.as_mut()) {
        let _ = wire::send(c, &words);
    }
}
