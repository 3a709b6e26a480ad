/* Ping-pong between ranks 0 and 1 (others wait at the barriers), as the
 * anchors' mpi_pingpong.c measures it, with every byte checked: blocking
 * MPI_Send/MPI_Recv for sizes 0, 1, 4, ... 4 MiB, then a window of 64
 * MPI_Isend/MPI_Irecv + MPI_Waitall per size. Rank 0 prints one line per
 * size: "SIZE lat US" and "SIZE window OK". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64
#define MAX (4u << 20)

static int rank;

static void fail(const char *what, size_t len, size_t at) {
    fprintf(stderr, "rank %d: %s wrong (size %zu, byte %zu)\n", rank, what, len, at);
    MPI_Abort(MPI_COMM_WORLD, 6);
}

static unsigned char pattern(size_t i, size_t len, int from) {
    return (unsigned char)(i * 7 + len + (size_t)from * 31);
}

int main(int argc, char **argv) {
    int size, peer, it, iters = 20, w, count;
    size_t len, i;
    unsigned char *out, *in;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0) printf("mpi_pingpong needs 2 ranks, has %d: nothing to do\n", size);
        MPI_Finalize();
        return 0;
    }
    peer = 1 - rank;
    out = malloc(MAX);
    in = malloc(MAX * 2);
    for (len = 0; len <= MAX; len = len ? len * 4 : 1) {
        double t0;
        for (i = 0; i < len; i++) out[i] = pattern(i, len, rank);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        if (rank < 2)
            for (it = 0; it < iters; it++) {
                memset(in, 0, len);
                if (rank == 0) {
                    MPI_Send(out, (int)len, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                    MPI_Recv(in, (int)len, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &st);
                } else {
                    MPI_Recv(in, (int)len, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &st);
                    MPI_Send(out, (int)len, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                }
                MPI_Get_count(&st, MPI_BYTE, &count);
                if ((size_t)count != len || st.MPI_SOURCE != peer) fail("status", len, 0);
                for (i = 0; i < len; i++)
                    if (in[i] != pattern(i, len, peer)) fail("ping-pong data", len, i);
            }
        if (rank == 0) printf("%zu lat %.3f\n", len, (MPI_Wtime() - t0) * 1e6 / (2.0 * iters));
    }
    /* Windows: rank 0 sends 64 messages of each size, rank 1 checks them. */
    for (len = 1; len <= (256u << 10); len *= 16) {
        MPI_Request reqs[WINDOW];
        unsigned char *bufs = malloc(len * WINDOW);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank < 2) {
            for (w = 0; w < WINDOW; w++) {
                unsigned char *b = bufs + (size_t)w * len;
                if (rank == 0) {
                    for (i = 0; i < len; i++) b[i] = pattern(i + (size_t)w, len, 0);
                    MPI_Isend(b, (int)len, MPI_BYTE, 1, 100 + w, MPI_COMM_WORLD, &reqs[w]);
                } else {
                    MPI_Irecv(b, (int)len, MPI_BYTE, 0, 100 + w, MPI_COMM_WORLD, &reqs[w]);
                }
            }
            MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
            if (rank == 1)
                for (w = 0; w < WINDOW; w++)
                    for (i = 0; i < len; i++)
                        if (bufs[(size_t)w * len + i] != pattern(i + (size_t)w, len, 0))
                            fail("window data", len, i);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) printf("%zu window OK\n", len);
        free(bufs);
    }
    free(out);
    free(in);
    MPI_Finalize();
    return 0;
}
