//! rivet-mpi: librivetmpi, a thin MPI layer written in C on librivet's C
//! ABI (`rivet.h`), plus `rivetcc`, its compiler wrapper. It exists to
//! prove that the ABI carries an MPI runtime, and to run the field's MPI
//! programs and benchmarks on Rivet unchanged. The C sources are in
//! `src/*.c` (`impl.h` the internal state), the public header is
//! `include/mpi.h`; `build.rs` compiles them with the system C compiler
//! into `librivetmpi.so` (soname `librivetmpi.so.0`) and `librivetmpi.a`
//! in the profile directory. This Rust crate only holds tests.
//!
//! Choices: the layer is C built by `build.rs` with the system compiler, not Rust, so that it
//! proves a C runtime can live on `rivet.h` alone. Cargo runs that script before it links
//! librivet, so the `.so` is linked against an empty stand-in with librivet's soname (DT_NEEDED
//! `librivet.so.0`, resolved at run time beside it). Only `MPI_*` is exported
//! (`-fvisibility=hidden`, and `impl.h` declares the internals hidden so they are reached without
//! the GOT; internal names carry `rmpi_`); calls into librivet skip the PLT (`-fno-plt`).
//! `MPI_Send`, `MPI_Recv`, `MPI_Isend` and `MPI_Irecv` on an up `MPI_COMM_WORLD` with a
//! predefined type take a fast path (`p2p.c`'s `fast`): the layer makes MPI's checks once and
//! calls librivet's `rivet_*_unchecked` entries, which skip librivet's own; `MPI_Recv` has
//! librivet fill a wanted `MPI_Status` in place (its layout is `rivet_status_t`'s, checked at
//! compile time). Anything else (another communicator, `MPI_PROC_NULL`, an error, or an
//! `MPI_COMM_WORLD` with ranks under another IMPI client) takes the general path.
//!
//! Module map (`src/`): `impl.h` the state and handle tables; `init.c` init, errors and handlers,
//! attributes; `comm.c` communicators (context ids agreed by librivet's dup and split, seed
//! 003's across IMPI clients); `p2p.c` point-to-point and
//! statuses; `request.c` request completion (an `MPI_Request` is librivet's handle, or the
//! layer's own for requests complete before librivet sees them; a request on a communicator
//! other than `MPI_COMM_WORLD` has its communicator noted by librivet's slot index, kept with
//! the handle so the slot's next request never reads it; `MPI_Waitall` hands the array to
//! librivet untouched while the layer holds no request of its own); `reduce.c` types and built-in
//! ops; `coll.c` collectives on a communicator's collective context; across IMPI clients
//! user data is external32: `external32.c` the conversion, `foreign.c` point-to-point and its
//! requests (layer requests owning the wire copy), `coll_ext32.c` the collectives; `dynamic.c` dynamic
//! processes; `bin/rivetcc.rs` the compiler wrapper; `tests.rs` the crate's tests.

#[cfg(test)]
mod tests;
