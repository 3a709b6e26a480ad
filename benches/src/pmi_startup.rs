//! The rank side of the launch benchmark: what every MPI_Init does with PMI
//! (publish one business card, barrier, read every peer's card), and nothing
//! else, so the launch time measured is the process manager's.

use rivet_pmi::client::Client;

pub fn run() -> Result<(), String> {
    let mut pmi = Client::init().map_err(|e| format!("PMI init: {e}"))?;
    let rank = pmi.rank();
    pmi.put(&format!("card-{rank}"), &format!("{:0>64}", rank))
        .map_err(|e| format!("put: {e}"))?;
    pmi.commit().map_err(|e| format!("commit: {e}"))?;
    pmi.barrier().map_err(|e| format!("barrier: {e}"))?;
    for peer in 0..pmi.size() {
        let card = pmi
            .get(&format!("card-{peer}"))
            .map_err(|e| format!("get card-{peer}: {e}"))?;
        if card != format!("{:0>64}", peer) {
            return Err(format!("card-{peer} is {card:?}"));
        }
    }
    pmi.finalize().map_err(|e| format!("finalize: {e}"))
}
