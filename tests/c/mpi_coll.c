/* librivetmpi's collectives, results checked: Barrier, Bcast, Reduce
 * (every root), Allreduce (also in place), Gather, Allgather, Scatter,
 * Alltoall (also in place) over several predefined types and every
 * built-in operation that applies to them, on COMM_WORLD and on the
 * halves of a split. Prints "mpi_coll OK rank R of N (K checks)". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <complex.h>
#include <stdbool.h>
#include <stdint.h>

static int wrank, checks;

#define EXPECT(cond)                                                                      \
    do {                                                                                  \
        checks++;                                                                         \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "rank %d: %s:%d: expected %s\n", wrank, __FILE__, __LINE__,  \
                    #cond);                                                               \
            MPI_Abort(MPI_COMM_WORLD, 4);                                                 \
        }                                                                                 \
    } while (0)
#define OK(call) EXPECT((call) == MPI_SUCCESS)

#define N 5 /* elements per rank and reduction */

/* Element i of rank r's contribution (small, so sums and products fit). */
static long val(int r, int i) { return (long)((r * 7 + i * 3) % 11) + 1; }

/* The reduction of `op` over ranks 0..size-1 of val(r, i), for integers. */
static long expect_int(MPI_Op op, int size, int i) {
    long acc = val(0, i);
    int r;
    for (r = 1; r < size; r++) {
        long v = val(r, i);
        if (op == MPI_SUM) acc += v;
        else if (op == MPI_PROD) acc *= v;
        else if (op == MPI_MAX) acc = v > acc ? v : acc;
        else if (op == MPI_MIN) acc = v < acc ? v : acc;
        else if (op == MPI_BAND) acc &= v;
        else if (op == MPI_BOR) acc |= v;
        else if (op == MPI_BXOR) acc ^= v;
        else if (op == MPI_LAND) acc = acc && (v % 3);
        else if (op == MPI_LOR) acc = acc || (v % 3);
        else if (op == MPI_LXOR) acc = !acc != !(v % 3);
    }
    return acc;
}

/* For the logical ops the inputs are val % 3 (some zero). */
static long input(MPI_Op op, int r, int i) {
    return op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR ? val(r, i) % 3 : val(r, i);
}

static long expect_logical_first(MPI_Op op, int size, int i) {
    long acc = input(op, 0, i) != 0;
    int r;
    for (r = 1; r < size; r++) {
        long v = input(op, r, i) != 0;
        if (op == MPI_LAND) acc = acc && v;
        else if (op == MPI_LOR) acc = acc || v;
        else acc = !acc != !v;
    }
    return acc;
}

static long expected(MPI_Op op, int size, int i) {
    if (size == 1) return input(op, 0, i); /* nothing to combine: the input itself */
    if (op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR) return expect_logical_first(op, size, i);
    return expect_int(op, size, i);
}

/* One integer type T through Reduce at every root and Allreduce. */
#define INT_CASE(T, DT, OP)                                                               \
    do {                                                                                  \
        T in[N], out[N];                                                                  \
        int i_, root_;                                                                    \
        for (i_ = 0; i_ < N; i_++) in[i_] = (T)input(OP, rank, i_);                       \
        for (root_ = 0; root_ < size; root_++) {                                          \
            memset(out, 0, sizeof out);                                                   \
            OK(MPI_Reduce(in, out, N, DT, OP, root_, comm));                              \
            if (rank == root_)                                                            \
                for (i_ = 0; i_ < N; i_++) EXPECT(out[i_] == (T)expected(OP, size, i_));  \
        }                                                                                 \
        OK(MPI_Allreduce(in, out, N, DT, OP, comm));                                      \
        for (i_ = 0; i_ < N; i_++) EXPECT(out[i_] == (T)expected(OP, size, i_));          \
        OK(MPI_Allreduce(MPI_IN_PLACE, in, N, DT, OP, comm));                             \
        for (i_ = 0; i_ < N; i_++) EXPECT(in[i_] == (T)expected(OP, size, i_));           \
    } while (0)

#define ALL_INT_OPS(T, DT)                                                                \
    do {                                                                                  \
        INT_CASE(T, DT, MPI_SUM);                                                         \
        INT_CASE(T, DT, MPI_PROD);                                                        \
        INT_CASE(T, DT, MPI_MAX);                                                         \
        INT_CASE(T, DT, MPI_MIN);                                                         \
        INT_CASE(T, DT, MPI_BAND);                                                        \
        INT_CASE(T, DT, MPI_BOR);                                                         \
        INT_CASE(T, DT, MPI_BXOR);                                                        \
        INT_CASE(T, DT, MPI_LAND);                                                        \
        INT_CASE(T, DT, MPI_LOR);                                                         \
        INT_CASE(T, DT, MPI_LXOR);                                                        \
    } while (0)

static void reductions(MPI_Comm comm) {
    int rank, size, i;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    ALL_INT_OPS(int, MPI_INT);
    ALL_INT_OPS(long, MPI_LONG);
    ALL_INT_OPS(unsigned, MPI_UNSIGNED);
    ALL_INT_OPS(short, MPI_SHORT);
    ALL_INT_OPS(long long, MPI_LONG_LONG);
    ALL_INT_OPS(int64_t, MPI_INT64_T);
    ALL_INT_OPS(uint8_t, MPI_UINT8_T);
    INT_CASE(unsigned char, MPI_BYTE, MPI_BXOR);
    INT_CASE(unsigned char, MPI_BYTE, MPI_BOR);
    INT_CASE(double, MPI_DOUBLE, MPI_SUM);
    INT_CASE(double, MPI_DOUBLE, MPI_PROD);
    INT_CASE(double, MPI_DOUBLE, MPI_MAX);
    INT_CASE(float, MPI_FLOAT, MPI_MIN);
    INT_CASE(float, MPI_FLOAT, MPI_SUM);
    INT_CASE(long double, MPI_LONG_DOUBLE, MPI_SUM);
    {   /* Complex sum: real parts rank, imaginary parts 2*rank. */
        double _Complex z = (double)rank + 2.0 * (double)rank * I, sum = 0;
        double s = (double)size * (size - 1) / 2;
        OK(MPI_Allreduce(&z, &sum, 1, MPI_C_DOUBLE_COMPLEX, MPI_SUM, comm));
        EXPECT(creal(sum) == s && cimag(sum) == 2 * s);
    }
    {   /* Booleans: LAND true only if all are; LOR if any is. */
        bool b = rank != 0, all = true, any = false;
        OK(MPI_Allreduce(&b, &all, 1, MPI_C_BOOL, MPI_LAND, comm));
        OK(MPI_Allreduce(&b, &any, 1, MPI_C_BOOL, MPI_LOR, comm));
        EXPECT(all == false && any == (size > 1));
    }
    {   /* MINLOC / MAXLOC on (value, rank) pairs, ties to the lower index. */
        struct { double v; int k; } d = {(double)((rank * 5) % 3), rank}, dmin, dmax;
        struct { int v; int k; } p = {rank / 2, rank}, pmax;
        double lo = 1e9, hi = -1e9;
        int lo_k = -1, hi_k = -1, r;
        for (r = 0; r < size; r++) {
            double v = (double)((r * 5) % 3);
            if (v < lo) { lo = v; lo_k = r; }
            if (v > hi) { hi = v; hi_k = r; }
        }
        OK(MPI_Allreduce(&d, &dmin, 1, MPI_DOUBLE_INT, MPI_MINLOC, comm));
        OK(MPI_Allreduce(&d, &dmax, 1, MPI_DOUBLE_INT, MPI_MAXLOC, comm));
        EXPECT(dmin.v == lo && dmin.k == lo_k && dmax.v == hi && dmax.k == hi_k);
        OK(MPI_Allreduce(&p, &pmax, 1, MPI_2INT, MPI_MAXLOC, comm));
        EXPECT(pmax.v == (size - 1) / 2 && pmax.k == ((size - 1) / 2) * 2);
    }
    {   /* An operation that does not apply to the type is refused. */
        double x = 1, y;
        MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
        EXPECT(MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_BXOR, comm) == MPI_ERR_OP);
        MPI_Comm_set_errhandler(comm, MPI_ERRORS_ARE_FATAL);
    }
    (void)i;
}

static void movement(MPI_Comm comm) {
    int rank, size, root, i, r;
    size_t big = 1 << 20; /* past the eager limit: rendezvous inside bcast */
    unsigned char *b = malloc(big);
    int *all, *mine, *back;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    all = malloc(sizeof(int) * N * (size_t)size);
    back = malloc(sizeof(int) * N * (size_t)size);
    mine = malloc(sizeof(int) * N * (size_t)size);
    OK(MPI_Barrier(comm));
    for (root = 0; root < size; root++) {
        size_t k;
        for (k = 0; k < big; k++) b[k] = rank == root ? (unsigned char)(k * 13 + root) : 0;
        OK(MPI_Bcast(b, (int)big, MPI_BYTE, root, comm));
        for (k = 0; k < big; k += 4093) EXPECT(b[k] == (unsigned char)(k * 13 + root));
        /* Gather N ints from each rank at root. */
        for (i = 0; i < N; i++) mine[i] = rank * 100 + i;
        memset(all, 0xff, sizeof(int) * N * (size_t)size);
        OK(MPI_Gather(mine, N, MPI_INT, all, N, MPI_INT, root, comm));
        if (rank == root)
            for (r = 0; r < size; r++)
                for (i = 0; i < N; i++) EXPECT(all[r * N + i] == r * 100 + i);
        /* In place at the root. */
        if (rank == root) {
            for (i = 0; i < N; i++) all[root * N + i] = -i;
            OK(MPI_Gather(MPI_IN_PLACE, N, MPI_INT, all, N, MPI_INT, root, comm));
            EXPECT(all[root * N + 1] == -1);
        } else {
            OK(MPI_Gather(mine, N, MPI_INT, NULL, 0, MPI_INT, root, comm));
        }
        /* Scatter: rank r gets piece r. */
        if (rank == root)
            for (r = 0; r < size; r++)
                for (i = 0; i < N; i++) all[r * N + i] = r * 1000 + i + root;
        OK(MPI_Scatter(all, N, MPI_INT, mine, N, MPI_INT, root, comm));
        for (i = 0; i < N; i++) EXPECT(mine[i] == rank * 1000 + i + root);
    }
    /* Allgather (and in place). */
    for (i = 0; i < N; i++) mine[i] = rank * 10 + i;
    OK(MPI_Allgather(mine, N, MPI_INT, all, N, MPI_INT, comm));
    for (r = 0; r < size; r++)
        for (i = 0; i < N; i++) EXPECT(all[r * N + i] == r * 10 + i);
    memset(all, 0, sizeof(int) * N * (size_t)size);
    for (i = 0; i < N; i++) all[rank * N + i] = rank * 10 + i;
    OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, N, MPI_INT, comm));
    for (r = 0; r < size; r++) EXPECT(all[r * N + N - 1] == r * 10 + N - 1);
    /* Alltoall: piece r of rank s is s*100+r, lands at piece s of rank r. */
    for (r = 0; r < size; r++)
        for (i = 0; i < N; i++) mine[r * N + i] = rank * 100 + r + i * 10000;
    OK(MPI_Alltoall(mine, N, MPI_INT, back, N, MPI_INT, comm));
    for (r = 0; r < size; r++)
        for (i = 0; i < N; i++) EXPECT(back[r * N + i] == r * 100 + rank + i * 10000);
    OK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, mine, N, MPI_INT, comm));
    for (r = 0; r < size; r++) EXPECT(mine[r * N] == r * 100 + rank);
    free(b);
    free(all);
    free(back);
    free(mine);
}

int main(int argc, char **argv) {
    int size;
    MPI_Comm half;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    reductions(MPI_COMM_WORLD);
    movement(MPI_COMM_WORLD);
    OK(MPI_Comm_split(MPI_COMM_WORLD, wrank % 2, -wrank, &half));
    reductions(half);
    movement(half);
    OK(MPI_Comm_free(&half));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    printf("mpi_coll OK rank %d of %d (%d checks)\n", wrank, size, checks);
    MPI_Finalize();
    return 0;
}
