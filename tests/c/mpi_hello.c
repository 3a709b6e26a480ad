/* Start-up probe (as the anchors' hello_mpi.c): MPI_Init, a barrier,
 * MPI_Finalize; each rank says who it is. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("hello from rank %d of %d\n", rank, size);
    MPI_Finalize();
    return 0;
}
