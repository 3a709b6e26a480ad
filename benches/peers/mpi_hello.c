/*
 * mpi_hello.c: the MPI side of `rivet-bench compare --benches startup`.
 * What a job needs to start and stop: MPI_Init, one MPI_Barrier across the
 * world, MPI_Finalize; rivet-bench times the whole job from outside.
 */
#include <mpi.h>

int main(int argc, char **argv)
{
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS)
        return 1;
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return rc == MPI_SUCCESS ? 0 : 1;
}
