/* Start-up probe for launcher timing: MPI_Init and MPI_Finalize, nothing
 * between them that polls (no MPI_Barrier), so hundreds of ranks on two
 * cores wait in PMI reads instead of spinning; each rank says who it is. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("hello from rank %d of %d\n", rank, size);
    MPI_Finalize();
    return 0;
}
