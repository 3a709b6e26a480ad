/* An unmodified MPI program for the interop tests: compiled with MPICH's
 * mpicc and run under rivetrun. It checks its own results and exits non-zero
 * (after printing why) when anything is wrong.
 *
 *   mpi_check            rank/size, ring, allreduce, 4 MiB message, barrier
 *   mpi_check abort R C  rank R calls MPI_Abort(MPI_COMM_WORLD, C)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BIG (4 * 1024 * 1024 + 3)

static int fail(int rank, const char *what) {
    fprintf(stderr, "rank %d: FAILED: %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 99);
    return 99;
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    if (argc >= 4 && strcmp(argv[1], "abort") == 0) {
        int who = atoi(argv[2]), code = atoi(argv[3]);
        if (rank == who) {
            printf("rank %d aborting with %d\n", rank, code);
            fflush(stdout);
            MPI_Abort(MPI_COMM_WORLD, code);
        }
        MPI_Barrier(MPI_COMM_WORLD); /* never completes: rank `who` is gone */
        sleep(60);
        MPI_Finalize();
        return 0;
    }

    /* The node map MPICH built from PMI_process_mapping: ranks sharing a node. */
    MPI_Comm node;
    int local_rank, local_size;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);

    printf("hello from rank %d of %d pid %d node-local %d of %d\n", rank, size, (int)getpid(),
           local_rank, local_size);

    /* Ring: every rank passes its token right; each gets its left neighbour's. */
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int token = 1000 + rank, got = -1;
    MPI_Sendrecv(&token, 1, MPI_INT, right, 7, &got, 1, MPI_INT, left, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    if (got != 1000 + left) return fail(rank, "ring token");

    /* Allreduce: sum of ranks and max. */
    long mine[2] = {rank, rank}, all[2] = {0, 0};
    MPI_Allreduce(&mine[0], &all[0], 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&mine[1], &all[1], 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    if (all[0] != (long)size * (size - 1) / 2 || all[1] != size - 1) return fail(rank, "allreduce");

    /* A multi-megabyte message from the last rank to rank 0, byte pattern checked. */
    if (size > 1 && (rank == 0 || rank == size - 1)) {
        unsigned char *buf = malloc(BIG);
        if (!buf) return fail(rank, "malloc");
        if (rank == size - 1) {
            for (int i = 0; i < BIG; i++) buf[i] = (unsigned char)(i * 31 + 7);
            MPI_Send(buf, BIG, MPI_BYTE, 0, 9, MPI_COMM_WORLD);
        } else {
            MPI_Status st;
            int count = 0;
            memset(buf, 0, BIG);
            MPI_Recv(buf, BIG, MPI_BYTE, size - 1, 9, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_BYTE, &count);
            if (count != BIG) return fail(rank, "big message length");
            for (int i = 0; i < BIG; i++)
                if (buf[i] != (unsigned char)(i * 31 + 7)) return fail(rank, "big message content");
        }
        free(buf);
    }

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("mpi_check OK size=%d sum=%ld\n", size, all[0]);
    MPI_Finalize();
    return 0;
}
