/* librivetmpi across IMPI clients (seed 003): run by a Rivet server and
 * two Rivet clients of 2 ranks each (world ranks 0, 1 under client 0; 2,
 * 3 under client 1). Checks typed point to point across clients with
 * every value (MPI_INT, MPI_DOUBLE, MPI_LONG, MPI_SHORT, MPI_DOUBLE_INT,
 * MPI_LONG_DOUBLE), that the wire is external32 (an MPI_INT 0x01020304
 * from the other client read as MPI_BYTE is 01 02 03 04, an MPI_LONG is
 * 4 bytes), that a long beyond 32 bits fails with MPI_ERR_CONVERSION and
 * is not sent, that ranks of one client keep native bytes, MPI_ANY_SOURCE
 * from both clients, nonblocking transfers, a probe's count, and
 * MPI_Comm_dup / MPI_Comm_split with traffic and collectives (Allreduce,
 * Bcast, Allgather, Alltoall, Scatter, Gather, Reduce) on them. Prints "mpi_impi OK rank
 * R" at the end; any failure exits 1 naming it.
 *
 * With the argument `mix`, on world ranks 0 and 1 only, the other client
 * running the engine's `engine_check mixmpi`: MPI_Comm_dup of the world
 * (it dups too: the dup carries traffic only if both chose seed 003's
 * context id), then an MPI_INT each way and an MPI_LONG to rank + 2 on
 * it; the engine side checks the bytes are external32. Then
 * MPI_Comm_split by parity meets the engine's split, an MPI_INT each way. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int me;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            printf("rank %d: FAILED line %d: ", me, __LINE__);                            \
            printf(__VA_ARGS__);                                                           \
            printf("\n");                                                                  \
            fflush(stdout);                                                                \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
#define OK(call) CHECK((call) == MPI_SUCCESS, "%s", #call)

/* The other client's rank paired with `r`. */
static int partner(int r) { return (r + 2) % 4; }

static void typed_p2p(void) {
    int p = partner(me), i, n;
    int ints[3] = {me, -7 - me, 0x7fffffff}, ri[3];
    double dbl[2] = {1.5 + me, -2.25e300}, rd[2];
    long lng[2] = {-123456789L - me, 2147483647L}, rl[2];
    short sh[2] = {(short)(-300 - me), 32767}, rs[2];
    struct { double v; int k; } di = {3.75 + me, me}, rdi;
    long double ld = 1.0L / 3.0L + me, rld;
    MPI_Status st;
    for (i = 0; i < 2; i++) {
        if ((me < 2) == (i == 0)) {
            OK(MPI_Send(ints, 3, MPI_INT, p, 1, MPI_COMM_WORLD));
            OK(MPI_Send(dbl, 2, MPI_DOUBLE, p, 2, MPI_COMM_WORLD));
            OK(MPI_Send(lng, 2, MPI_LONG, p, 3, MPI_COMM_WORLD));
            OK(MPI_Send(sh, 2, MPI_SHORT, p, 4, MPI_COMM_WORLD));
            OK(MPI_Send(&di, 1, MPI_DOUBLE_INT, p, 5, MPI_COMM_WORLD));
            OK(MPI_Send(&ld, 1, MPI_LONG_DOUBLE, p, 6, MPI_COMM_WORLD));
        } else {
            OK(MPI_Recv(ri, 3, MPI_INT, p, 1, MPI_COMM_WORLD, &st));
            OK(MPI_Get_count(&st, MPI_INT, &n));
            CHECK(n == 3 && ri[0] == p && ri[1] == -7 - p && ri[2] == 0x7fffffff,
                  "ints %d: %d %d %d", n, ri[0], ri[1], ri[2]);
            OK(MPI_Recv(rd, 2, MPI_DOUBLE, p, 2, MPI_COMM_WORLD, &st));
            OK(MPI_Get_count(&st, MPI_DOUBLE, &n));
            CHECK(n == 2 && rd[0] == 1.5 + p && rd[1] == -2.25e300, "doubles %g %g", rd[0], rd[1]);
            OK(MPI_Recv(rl, 2, MPI_LONG, p, 3, MPI_COMM_WORLD, &st));
            OK(MPI_Get_count(&st, MPI_LONG, &n));
            CHECK(n == 2 && rl[0] == -123456789L - p && rl[1] == 2147483647L, "longs %d: %ld %ld",
                  n, rl[0], rl[1]);
            OK(MPI_Recv(rs, 2, MPI_SHORT, p, 4, MPI_COMM_WORLD, &st));
            CHECK(rs[0] == -300 - p && rs[1] == 32767, "shorts %d %d", rs[0], rs[1]);
            OK(MPI_Recv(&rdi, 1, MPI_DOUBLE_INT, p, 5, MPI_COMM_WORLD, &st));
            OK(MPI_Get_count(&st, MPI_DOUBLE_INT, &n));
            CHECK(n == 1 && rdi.v == 3.75 + p && rdi.k == p, "double_int %g %d", rdi.v, rdi.k);
            OK(MPI_Recv(&rld, 1, MPI_LONG_DOUBLE, p, 6, MPI_COMM_WORLD, &st));
            CHECK(rld == 1.0L / 3.0L + p, "long double %Lg", rld);
        }
    }
}

/* What crosses clients is external32; within a client, native bytes. */
static void wire_bytes(void) {
    int v = 0x01020304, n, flag;
    long l = 0x0a0b0c0dL, big = 1L << 40;
    unsigned char b[16];
    MPI_Status st;
    MPI_Request r;
    if (me == 0) {
        OK(MPI_Send(&v, 1, MPI_INT, 2, 10, MPI_COMM_WORLD));
        OK(MPI_Send(&l, 1, MPI_LONG, 2, 11, MPI_COMM_WORLD));
        OK(MPI_Send(&l, 1, MPI_LONG, 2, 12, MPI_COMM_WORLD));
        /* A long beyond 32 bits: an error, nothing sent. */
        CHECK(MPI_Send(&big, 1, MPI_LONG, 2, 13, MPI_COMM_WORLD) == MPI_ERR_CONVERSION,
              "a long of 2^40 was sent");
        CHECK(MPI_Isend(&big, 1, MPI_LONG, 2, 13, MPI_COMM_WORLD, &r) == MPI_ERR_CONVERSION,
              "a long of 2^40 was started");
        CHECK(r == MPI_REQUEST_NULL, "a failed start left a request");
        OK(MPI_Send(&v, 1, MPI_INT, 1, 14, MPI_COMM_WORLD)); /* same client */
        OK(MPI_Send(&big, 1, MPI_LONG, 1, 15, MPI_COMM_WORLD));
        OK(MPI_Send(&v, 0, MPI_INT, 2, 16, MPI_COMM_WORLD)); /* the end marker */
    } else if (me == 2) {
        OK(MPI_Recv(b, 16, MPI_BYTE, 0, 10, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_BYTE, &n));
        CHECK(n == 4 && b[0] == 1 && b[1] == 2 && b[2] == 3 && b[3] == 4,
              "MPI_INT on the wire: %d bytes %02x %02x %02x %02x", n, b[0], b[1], b[2], b[3]);
        OK(MPI_Probe(0, 11, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_LONG, &n));
        CHECK(n == 1, "a probed MPI_LONG counts %d", n);
        OK(MPI_Recv(b, 16, MPI_BYTE, 0, 11, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_BYTE, &n));
        CHECK(n == 4 && b[0] == 0x0a && b[1] == 0x0b && b[2] == 0x0c && b[3] == 0x0d,
              "MPI_LONG on the wire: %d bytes %02x %02x %02x %02x", n, b[0], b[1], b[2], b[3]);
        OK(MPI_Recv(&l, 1, MPI_LONG, 0, 12, MPI_COMM_WORLD, &st));
        CHECK(l == 0x0a0b0c0dL, "long %lx", l);
        OK(MPI_Recv(b, 0, MPI_INT, 0, 16, MPI_COMM_WORLD, &st));
        OK(MPI_Iprobe(0, 13, MPI_COMM_WORLD, &flag, &st));
        CHECK(!flag, "the failed long arrived");
    } else if (me == 1) {
        OK(MPI_Recv(b, 16, MPI_BYTE, 0, 14, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_BYTE, &n));
        CHECK(n == 4 && memcmp(b, &v, 4) == 0, "native int within a client: %d bytes", n);
        OK(MPI_Recv(&l, 1, MPI_LONG, 0, 15, MPI_COMM_WORLD, &st));
        CHECK(l == big, "a long within a client: %lx", l);
    }
}

/* MPI_ANY_SOURCE from both clients, and nonblocking transfers. */
static void any_source_and_nonblocking(void) {
    int i, v, n, got[4] = {0};
    double out[3] = {me + 0.5, me * 2.0, -1.0 * me}, in[3];
    MPI_Request reqs[2];
    MPI_Status sts[2], st;
    if (me == 3) {
        for (i = 0; i < 3; i++) {
            OK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 20, MPI_COMM_WORLD, &st));
            OK(MPI_Get_count(&st, MPI_INT, &n));
            CHECK(n == 1 && v == 1000 + st.MPI_SOURCE, "any source: %d from %d", v,
                  st.MPI_SOURCE);
            got[st.MPI_SOURCE]++;
        }
        CHECK(got[0] == 1 && got[1] == 1 && got[2] == 1, "senders %d %d %d", got[0], got[1],
              got[2]);
        OK(MPI_Irecv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 21, MPI_COMM_WORLD, &reqs[0]));
        OK(MPI_Wait(&reqs[0], &st));
        CHECK(v == 2000 && st.MPI_SOURCE == 0, "irecv any source: %d from %d", v, st.MPI_SOURCE);
    } else {
        v = 1000 + me;
        OK(MPI_Send(&v, 1, MPI_INT, 3, 20, MPI_COMM_WORLD));
        if (me == 0) {
            v = 2000;
            OK(MPI_Send(&v, 1, MPI_INT, 3, 21, MPI_COMM_WORLD));
        }
    }
    OK(MPI_Irecv(in, 3, MPI_DOUBLE, partner(me), 22, MPI_COMM_WORLD, &reqs[0]));
    OK(MPI_Isend(out, 3, MPI_DOUBLE, partner(me), 22, MPI_COMM_WORLD, &reqs[1]));
    OK(MPI_Waitall(2, reqs, sts));
    OK(MPI_Get_count(&sts[0], MPI_DOUBLE, &n));
    i = partner(me);
    CHECK(n == 3 && in[0] == i + 0.5 && in[1] == i * 2.0 && in[2] == -1.0 * i,
          "nonblocking doubles %d: %g %g %g", n, in[0], in[1], in[2]);
    OK(MPI_Sendrecv(out, 3, MPI_DOUBLE, partner(me), 23, in, 3, MPI_DOUBLE, partner(me), 23,
                    MPI_COMM_WORLD, &st));
    CHECK(in[0] == i + 0.5, "sendrecv %g", in[0]);
    /* Waitany, Testall and a freed send, converting. */
    {
        int idx, k, flag = 0;
        long lo = 40L + me, li = 0;
        MPI_Request fr;
        OK(MPI_Irecv(in, 3, MPI_DOUBLE, partner(me), 24, MPI_COMM_WORLD, &reqs[0]));
        OK(MPI_Isend(out, 3, MPI_DOUBLE, partner(me), 24, MPI_COMM_WORLD, &reqs[1]));
        for (k = 0; k < 2; k++) {
            OK(MPI_Waitany(2, reqs, &idx, &st));
            CHECK(idx >= 0 && idx < 2 && reqs[idx] == MPI_REQUEST_NULL, "waitany %d", idx);
        }
        CHECK(in[1] == i * 2.0, "waitany doubles %g", in[1]);
        OK(MPI_Irecv(&li, 1, MPI_LONG, partner(me), 25, MPI_COMM_WORLD, &reqs[0]));
        OK(MPI_Isend(&lo, 1, MPI_LONG, partner(me), 25, MPI_COMM_WORLD, &fr));
        OK(MPI_Request_free(&fr));
        while (!flag) OK(MPI_Testall(1, reqs, &flag, sts));
        OK(MPI_Get_count(&sts[0], MPI_LONG, &n));
        CHECK(n == 1 && li == 40L + i, "testall long %d: %ld", n, li);
    }
    /* A matched probe, then its receive, converting. */
    {
        MPI_Message msg;
        double md[2] = {0};
        OK(MPI_Isend(out, 2, MPI_DOUBLE, partner(me), 26, MPI_COMM_WORLD, &reqs[1]));
        OK(MPI_Mprobe(MPI_ANY_SOURCE, 26, MPI_COMM_WORLD, &msg, &st));
        OK(MPI_Mrecv(md, 2, MPI_DOUBLE, &msg, &st));
        OK(MPI_Wait(&reqs[1], MPI_STATUS_IGNORE));
        OK(MPI_Get_count(&st, MPI_DOUBLE, &n));
        CHECK(msg == MPI_MESSAGE_NULL && n == 2 && st.MPI_SOURCE == i && md[0] == i + 0.5 &&
                  md[1] == i * 2.0,
              "mrecv %d from %d: %g %g", n, st.MPI_SOURCE, md[0], md[1]);
    }
}

/* Traffic and collectives on `comm` (size 2 or 4; `world` its ranks). */
static void use_comm(MPI_Comm comm, const char *what) {
    int r, n, i, v[4], all[4];
    long l, lsum;
    double d, dsum, bc[2];
    short s[4], sr[4];
    MPI_Status st;
    OK(MPI_Comm_rank(comm, &r));
    OK(MPI_Comm_size(comm, &n));
    l = 100000L * (me + 1);
    OK(MPI_Sendrecv(&l, 1, MPI_LONG, (r + 1) % n, 30, &lsum, 1, MPI_LONG, (r + n - 1) % n, 30,
                    comm, &st));
    OK(MPI_Allreduce(&l, &lsum, 1, MPI_LONG, MPI_SUM, comm));
    d = 0.25 * me;
    OK(MPI_Allreduce(&d, &dsum, 1, MPI_DOUBLE, MPI_SUM, comm));
    {
        int w[4];
        long want = 0;
        double dwant = 0;
        OK(MPI_Allgather(&me, 1, MPI_INT, w, 1, MPI_INT, comm));
        for (i = 0; i < n; i++) {
            want += 100000L * (w[i] + 1);
            dwant += 0.25 * w[i];
        }
        CHECK(lsum == want && dsum == dwant, "%s: allreduce %ld (want %ld) %g (want %g)", what,
              lsum, want, dsum, dwant);
        bc[0] = 1e10 + w[n - 1];
        bc[1] = -3.5;
        if (r != n - 1) bc[0] = bc[1] = 0;
        OK(MPI_Bcast(bc, 2, MPI_DOUBLE, n - 1, comm));
        CHECK(bc[0] == 1e10 + w[n - 1] && bc[1] == -3.5, "%s: bcast %g %g", what, bc[0], bc[1]);
        for (i = 0; i < n; i++) s[i] = (short)(-100 * me - i);
        OK(MPI_Alltoall(s, 1, MPI_SHORT, sr, 1, MPI_SHORT, comm));
        for (i = 0; i < n; i++)
            CHECK(sr[i] == (short)(-100 * w[i] - r), "%s: alltoall from %d: %d", what, i, sr[i]);
        for (i = 0; i < n; i++) v[i] = 7 * i + 1;
        OK(MPI_Scatter(v, 1, MPI_INT, all, 1, MPI_INT, 0, comm));
        CHECK(all[0] == 7 * r + 1, "%s: scatter %d", what, all[0]);
        {
            long g[4] = {0}, red = 0;
            l = -70000L * me;
            OK(MPI_Gather(&l, 1, MPI_LONG, g, 1, MPI_LONG, 1, comm));
            if (r == 1)
                for (i = 0; i < n; i++)
                    CHECK(g[i] == -70000L * w[i], "%s: gather from %d: %ld", what, i, g[i]);
            OK(MPI_Reduce(&l, &red, 1, MPI_LONG, MPI_MIN, n - 1, comm));
            if (r == n - 1) {
                long want_min = 0;
                for (i = 0; i < n; i++)
                    if (-70000L * w[i] < want_min) want_min = -70000L * w[i];
                CHECK(red == want_min, "%s: reduce min %ld (want %ld)", what, red, want_min);
            }
        }
    }
}

/* `mix`: this client is librivetmpi, the other the engine alone. */
static void mix(void) {
    MPI_Comm dup;
    MPI_Status st;
    int v = 0x55667700 + me, got = 0, n;
    long l = -5L - me;
    CHECK(me < 2, "mix runs on world ranks 0 and 1, not %d", me);
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Recv(&got, 1, MPI_INT, me + 2, 40, dup, &st));
    OK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(n == 1 && got == 0x11223300 + me + 2, "an int from the engine: %d %x", n, got);
    OK(MPI_Send(&v, 1, MPI_INT, me + 2, 41, dup));
    OK(MPI_Send(&l, 1, MPI_LONG, me + 2, 42, dup));
    OK(MPI_Comm_free(&dup));
    /* Parity, keys descending: {2, 0} and {3, 1}, as the engine splits. */
    OK(MPI_Comm_split(MPI_COMM_WORLD, me % 2, -me, &dup));
    OK(MPI_Comm_rank(dup, &n));
    CHECK(n == 1, "split: rank %d", n);
    v = 0x01020304 + me;
    OK(MPI_Send(&v, 1, MPI_INT, 0, 43, dup));
    OK(MPI_Recv(&got, 1, MPI_INT, 0, 44, dup, &st));
    CHECK(got == 0x0a0b0c00 + me + 2, "an int on the split: %x", got);
    OK(MPI_Comm_free(&dup));
}

int main(int argc, char **argv) {
    int size, r, n, rc;
    long big = 1L << 40, one = 1, out;
    MPI_Comm dup, half;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size == 4, "world size %d", size);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    if (argc > 1 && strcmp(argv[1], "mix") == 0) {
        mix();
        OK(MPI_Barrier(MPI_COMM_WORLD));
        printf("mpi_impi mix OK rank %d\n", me);
        fflush(stdout);
        MPI_Finalize();
        return 0;
    }
    typed_p2p();
    wire_bytes();
    any_source_and_nonblocking();
    use_comm(MPI_COMM_WORLD, "world");

    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    use_comm(dup, "dup");
    /* Parity, keys descending: {2, 0} and {3, 1}, each across clients. */
    OK(MPI_Comm_split(MPI_COMM_WORLD, me % 2, -me, &half));
    OK(MPI_Comm_rank(half, &r));
    OK(MPI_Comm_size(half, &n));
    CHECK(n == 2 && r == (me < 2 ? 1 : 0), "split: rank %d of %d", r, n);
    use_comm(half, "split");

    /* A long beyond 32 bits in a reduction across clients: every rank
     * fails alike, none waits. */
    OK(MPI_Comm_set_errhandler(half, MPI_ERRORS_RETURN));
    rc = MPI_Allreduce(me == 1 ? &big : &one, &out, 1, MPI_LONG, MPI_SUM, half);
    CHECK(me % 2 == 1 ? rc == MPI_ERR_CONVERSION : rc == MPI_SUCCESS,
          "allreduce with 2^40: %d", rc);
    if (me % 2 == 0) CHECK(out == 2, "allreduce of ones: %ld", out);

    OK(MPI_Comm_free(&half));
    OK(MPI_Comm_free(&dup));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    printf("mpi_impi OK rank %d\n", me);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
