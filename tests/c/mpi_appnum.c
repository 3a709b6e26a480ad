/* Prints each rank's MPI_APPNUM (the MPMD section it belongs to), for
 * rivetrun's MPMD test with MPICH: "mpi_appnum rank R appnum A". */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, flag = 0, *app = NULL;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &app, &flag);
    printf("mpi_appnum rank %d appnum %d\n", rank, flag ? *app : -1);
    MPI_Finalize();
    return 0;
}
