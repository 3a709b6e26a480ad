/*
 * mpi_p2p.c: the MPI side of `rivet-bench compare` (latency, bw, mr).
 *
 * Built by rivet-bench with each stack's mpicc (mpicc.mpich, mpicc.openmpi)
 * and run on 2 ranks (ranks above 1 only join the barriers). It does the same
 * work as rivet-bench's own latency, bw and mr, with the same iteration
 * counts (benches/src/sizes.rs), so the stacks are compared like for like:
 *
 *   lat  blocking MPI_Send / MPI_Recv ping-pong, sizes 0, 1, 2, 4 .. MAX;
 *        half a round trip, us
 *   bw   per iteration WINDOW MPI_Isend (the receiver WINDOW MPI_Irecv),
 *        MPI_Waitall, then a 4-byte ack back; sizes 1 .. MAX; MB/s (1e6 B/s)
 *   mr   as bw with 8-byte messages only; messages/s
 *
 * Usage: mpi_p2p lat|bw|mr [-m MAX] [-i ITERS] [-x WARMUP] [-W WINDOW]
 * MAXSIZE=N in the environment sets MAX too (the option wins); the default
 * is 4 MiB. Output on rank 0: '#' comment lines, then one "SIZE VALUE" row
 * per size (bw and mr rows add MB/s or nothing; readers take two columns).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum bench { LAT, BW, MR };

struct opts {
    enum bench bench;
    size_t max;
    long iters;  /* < 0: by size */
    long warmup; /* < 0: a tenth of iters, or by size */
    int window;
};

static int me, nranks;
static unsigned char *tx, *rx;
static MPI_Request *reqs;

/* (warm-up, timed) iterations for one size: rivet-bench's sizes.rs. */
static void default_iters(enum bench b, size_t size, long *warm, long *timed)
{
    if (b == LAT) {
        *timed = size <= 8192 ? 10000 : size <= 262144 ? 1000 : 100;
    } else if (b == MR && size <= 8192) {
        *timed = 10000;
    } else {
        *timed = size <= 8192 ? 500 : size <= 262144 ? 100 : 20;
    }
    *warm = (b == MR && size <= 8192) ? 500 : *timed / 10;
}

/* One ping-pong round trip between ranks 0 and 1. */
static void lat_step(size_t size, int window)
{
    (void)window;
    if (me == 0) {
        MPI_Send(tx, (int)size, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
        MPI_Recv(rx, (int)size, MPI_BYTE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (me == 1) {
        MPI_Recv(rx, (int)size, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(tx, (int)size, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
    }
}

/* One window 0 -> 1 and its ack 1 -> 0. */
static void window_step(size_t size, int window)
{
    if (me == 0) {
        for (int k = 0; k < window; k++)
            MPI_Isend(tx, (int)size, MPI_BYTE, 1, 8, MPI_COMM_WORLD, &reqs[k]);
        MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
        MPI_Recv(rx, 4, MPI_BYTE, 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (me == 1) {
        for (int k = 0; k < window; k++)
            MPI_Irecv(rx, (int)size, MPI_BYTE, 0, 8, MPI_COMM_WORLD, &reqs[k]);
        MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
        MPI_Send(tx, 4, MPI_BYTE, 0, 9, MPI_COMM_WORLD);
    }
}

/* Seconds for `timed` steps after `warm` untimed ones, all ranks in step. */
static double timed_loop(void (*step)(size_t, int), size_t size, int window, long warm, long timed)
{
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < warm; i++)
        step(size, window);
    double start = MPI_Wtime();
    for (long i = 0; i < timed; i++)
        step(size, window);
    return MPI_Wtime() - start;
}

static void usage(void)
{
    if (me == 0)
        fprintf(stderr, "usage: mpi_p2p lat|bw|mr [-m MAX] [-i ITERS] [-x WARMUP] [-W WINDOW]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static long number(const char *text)
{
    char *end;
    long long v = strtoll(text, &end, 0);
    if (*text == '\0' || *end != '\0' || v < 0 || v > INT32_MAX)
        usage();
    return (long)v;
}

static struct opts parse(int argc, char **argv)
{
    struct opts o = {LAT, 4u << 20, -1, -1, 64};
    const char *env = getenv("MAXSIZE");
    if (env)
        o.max = (size_t)number(env);
    if (argc < 2)
        usage();
    if (!strcmp(argv[1], "lat") || !strcmp(argv[1], "latency"))
        o.bench = LAT;
    else if (!strcmp(argv[1], "bw"))
        o.bench = BW;
    else if (!strcmp(argv[1], "mr"))
        o.bench = MR;
    else
        usage();
    for (int i = 2; i < argc; i++) {
        if (i + 1 >= argc || strlen(argv[i]) != 2 || argv[i][0] != '-')
            usage();
        long v = number(argv[++i]);
        switch (argv[i - 1][1]) {
        case 'm': o.max = (size_t)v; break;
        case 'i': o.iters = v; break;
        case 'x': o.warmup = v; break;
        case 'W': o.window = (int)v; break;
        default: usage();
        }
    }
    if (o.window < 1 || o.iters == 0)
        usage();
    return o;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    struct opts o = parse(argc, argv);
    if (nranks < 2) {
        if (me == 0)
            fprintf(stderr, "mpi_p2p: needs at least 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    size_t room = (o.max > 4 ? o.max : 4) + 64;
    /* Page-aligned, as rivet-bench's buffers. */
    void *t = NULL, *r = NULL;
    int bad = posix_memalign(&t, 4096, room) | posix_memalign(&r, 4096, room);
    tx = t;
    rx = r;
    reqs = calloc((size_t)o.window, sizeof *reqs);
    if (bad || !reqs) {
        fprintf(stderr, "mpi_p2p: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(tx, 0x5a, room);
    memset(rx, 0, room);

    if (me == 0) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len;
        MPI_Get_library_version(lib, &len);
        lib[strcspn(lib, "\n")] = '\0';
        printf("# mpi_p2p over %s, %d ranks\n", lib, nranks);
        if (o.bench == LAT)
            printf("# ping-pong latency, half round trip\n# Size  Latency (us)\n");
        else if (o.bench == BW)
            printf("# bandwidth, window %d + 4-byte ack\n# Size  Bandwidth (MB/s)\n", o.window);
        else
            printf("# message rate, window %d + 4-byte ack\n# Size  Messages/s\n", o.window);
        fflush(stdout);
    }

    size_t first = o.bench == LAT ? 0 : o.bench == MR ? 8 : 1;
    size_t last = o.bench == MR ? 8 : o.max;
    for (size_t size = first; size <= last; size = size ? size * 2 : 1) {
        long warm, timed;
        default_iters(o.bench, size, &warm, &timed);
        if (o.iters > 0) {
            timed = o.iters;
            warm = o.iters / 10;
        }
        if (o.warmup >= 0)
            warm = o.warmup;
        double secs = o.bench == LAT ? timed_loop(lat_step, size, 1, warm, timed)
                                     : timed_loop(window_step, size, o.window, warm, timed);
        if (me != 0)
            continue;
        if (o.bench == LAT)
            printf("%zu %.3f\n", size, secs * 1e6 / (2.0 * (double)timed));
        else if (o.bench == BW)
            printf("%zu %.2f\n", size, (double)size * o.window * (double)timed / secs / 1e6);
        else
            printf("%zu %.0f\n", size, (double)o.window * (double)timed / secs);
        fflush(stdout);
    }
    free(reqs);
    free(tx);
    free(rx);
    MPI_Finalize();
    return 0;
}
