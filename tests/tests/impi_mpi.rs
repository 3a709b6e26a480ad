//! librivetmpi across IMPI clients: a Rivet server with two Rivet clients
//! of 2 ranks each (world ranks 0, 1 under client 0; 2, 3 under client 1)
//! runs tests/c/mpi_impi.c, built with `rivetcc`: typed point to point
//! with every value checked, the wire seen as external32 (bytes of an
//! MPI_INT and an MPI_LONG from the other client), a long beyond 32 bits
//! failing with MPI_ERR_CONVERSION, native bytes within a client,
//! MPI_ANY_SOURCE, nonblocking transfers, and MPI_Comm_dup/split with
//! traffic and collectives on them. Every rank must print its OK line.

use rivet_tests::impi::across_two_clients;
use rivet_tests::{rivetcc, serial, workspace_root};

const NONE: [(&str, &str); 1] = [("IMPI_AUTH_NONE", "")];

#[test]
fn an_mpi_program_across_two_clients_moves_external32() {
    let _serial = serial();
    let src = workspace_root().join("tests/c/mpi_impi.c");
    let exe = rivetcc(&src, "_rivetmpi", None, &["-std=c99", "-pedantic"]);
    let outs = across_two_clients(&[exe.to_str().unwrap()], &NONE);
    for (c, o) in outs.iter().enumerate() {
        assert!(!o.stdout.contains("FAILED"), "{}", o.show());
        for r in [0, 1] {
            let ok = format!("mpi_impi OK rank {}\n", 2 * c + r);
            assert!(o.stdout.contains(&ok), "{ok}: {}", o.show());
        }
    }
}
