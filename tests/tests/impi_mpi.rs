//! librivetmpi across IMPI clients: a Rivet server with two Rivet clients
//! of 2 ranks each (world ranks 0, 1 under client 0; 2, 3 under client 1)
//! runs tests/c/mpi_impi.c, built with `rivetcc`: typed point to point
//! with every value checked, the wire seen as external32 (bytes of an
//! MPI_INT and an MPI_LONG from the other client), a long beyond 32 bits
//! failing with MPI_ERR_CONVERSION, native bytes within a client,
//! MPI_ANY_SOURCE, nonblocking transfers, and MPI_Comm_dup/split with
//! traffic and collectives on them. Every rank must print its OK line.
//! Then a job whose client 0 runs librivetmpi and client 1 the engine
//! alone (`engine_check mixmpi`): an `MPI_Comm_dup` carries traffic to the
//! engine's own dup (both chose seed 003's context id, 4 after the world's
//! 0 and COMM_SELF's 2, 3), whose side sees external32 bytes; then an
//! `MPI_Comm_split` meets the engine's split on id 6 likewise.

use std::path::PathBuf;

use rivet_tests::impi::{across_two_clients, across_two_clients_running};
use rivet_tests::{bin, rivetcc, serial, workspace_root};

const NONE: [(&str, &str); 1] = [("IMPI_AUTH_NONE", "")];

#[test]
fn an_mpi_program_across_two_clients_moves_external32() {
    let _serial = serial();
    let exe = program();
    let outs = across_two_clients(&[exe.to_str().unwrap()], &NONE);
    for (c, o) in outs.iter().enumerate() {
        assert!(!o.stdout.contains("FAILED"), "{}", o.show());
        for r in [0, 1] {
            let ok = format!("mpi_impi OK rank {}\n", 2 * c + r);
            assert!(o.stdout.contains(&ok), "{ok}: {}", o.show());
        }
    }
}

fn program() -> PathBuf {
    let src = workspace_root().join("tests/c/mpi_impi.c");
    rivetcc(&src, "_rivetmpi", None, &["-std=c99", "-pedantic"])
}

#[test]
fn librivetmpi_and_the_engine_agree_on_a_dup_across_clients() {
    let _serial = serial();
    let exe = program();
    let check = bin("engine_check");
    let outs = across_two_clients_running(
        2,
        [
            &[exe.to_str().unwrap(), "mix"],
            &[check.to_str().unwrap(), "mixmpi"],
        ],
        &NONE,
    );
    for r in [0, 1] {
        let ok = format!("mpi_impi mix OK rank {r}\n");
        assert!(outs[0].stdout.contains(&ok), "{ok}: {}", outs[0].show());
        let ok = format!(
            "engine_check mixmpi OK rank {}: dup context id 4, split 6\n",
            r + 2
        );
        assert!(outs[1].stdout.contains(&ok), "{ok}: {}", outs[1].show());
    }
}
