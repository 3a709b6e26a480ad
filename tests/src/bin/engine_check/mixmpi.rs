//! `mixmpi` (4 ranks, world ranks 2 and 3 of two IMPI clients): the
//! engine's side of a job whose other client runs librivetmpi
//! (tests/c/mpi_impi.c `mix`, world ranks 0 and 1). Both dup the world (the
//! C side by `MPI_Comm_dup`), so the dup carries traffic only if both chose
//! seed 003's context id; then each rank here swaps with rank - 2 on it,
//! reading and writing external32 bytes: the C side's `MPI_INT` and
//! `MPI_LONG` arrive as 4 big-endian bytes each, and the `MPI_INT` it
//! receives is sent here as 4 big-endian bytes. Then both split the world
//! by parity (keys reversed) and swap an `MPI_INT` on the split.

use rivet::{Comm, Threading};
use rivet_tests::ensure;
use rivet_tests::rank_check::{die, OrDie};

pub fn mixmpi<T: Threading>(world: &Comm<T>) {
    let me = world.rank();
    ensure!(me >= 2, "mixmpi runs on world ranks 2 and 3, not {me}");
    let peer = me - 2;
    let dup = world.dup().or_die("dup");
    let mine = (0x1122_3300 + me as i32).to_be_bytes();
    dup.send(&mine, peer, 40).or_die("send an int");
    let mut b = [0u8; 8];
    let st = dup.recv(&mut b, peer as i32, 41).or_die("recv an int");
    let want = (0x5566_7700 + peer as i32).to_be_bytes();
    ensure!(
        st.count == 4 && b[..4] == want,
        "an MPI_INT from rank {peer}: {} bytes {:02x?}",
        st.count,
        &b[..st.count.min(8)]
    );
    let st = dup.recv(&mut b, peer as i32, 42).or_die("recv a long");
    let want = (-5_i32 - peer as i32).to_be_bytes();
    ensure!(
        st.count == 4 && b[..4] == want,
        "an MPI_LONG from rank {peer}: {} bytes {:02x?}",
        st.count,
        &b[..st.count.min(8)]
    );
    // MPI_Comm_split by parity, keys reversed: {2, 0} and {3, 1}.
    let half = world
        .split(Some(me % 2), -(me as i32))
        .or_die("split")
        .unwrap_or_else(|| die("split: no communicator"));
    ensure!(
        half.rank() == 0 && half.size() == 2,
        "split: rank {} of {}",
        half.rank(),
        half.size()
    );
    let mut b = [0u8; 8];
    let st = half.recv(&mut b, 1, 43).or_die("recv on the split");
    let want = (0x0102_0304 + peer as i32).to_be_bytes();
    ensure!(
        st.count == 4 && b[..4] == want,
        "an MPI_INT on the split: {} bytes {:02x?}",
        st.count,
        &b[..st.count.min(8)]
    );
    let mine = (0x0a0b_0c00 + me as i32).to_be_bytes();
    half.send(&mine, 1, 44).or_die("send on the split");
    world.barrier().or_die("barrier");
    println!(
        "engine_check mixmpi OK rank {me}: dup context id {}, split {}",
        dup.context_id(),
        half.context_id()
    );
}
