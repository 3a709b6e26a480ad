//! rivet-mpi: librivetmpi, a thin MPI layer written in C on librivet's C
//! ABI (`rivet.h`), plus `rivetcc`, its compiler wrapper. It exists to
//! prove that the ABI carries an MPI runtime, and to run the field's MPI
//! programs and benchmarks on Rivet unchanged. The C sources are in
//! `src/*.c` (`impl.h` the internal state), the public header is
//! `include/mpi.h`; `build.rs` compiles them with the system C compiler
//! into `librivetmpi.so` (soname `librivetmpi.so.0`) and `librivetmpi.a`
//! in the profile directory. This Rust crate only holds tests.

#[cfg(test)]
mod tests;
