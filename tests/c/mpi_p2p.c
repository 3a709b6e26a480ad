/* librivetmpi, point to point and the environment: every call in the
 * layer's p2p scope, statuses, requests, communicators and their
 * contexts, attributes, and error codes under MPI_ERRORS_RETURN. Built
 * with rivetcc, run under rivetrun on 1, 2 or 4 ranks.
 *
 *   mpi_p2p [LEVEL]   checks; prints "mpi_p2p OK rank R of N level L"
 *   mpi_p2p fatal     rank 0 sends to rank N (ERRORS_ARE_FATAL ends the job)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

#define EXPECT(cond)                                                                      \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "rank %d: %s:%d: expected %s\n", rank, __FILE__, __LINE__,   \
                    #cond);                                                               \
            MPI_Abort(MPI_COMM_WORLD, 3);                                                 \
        }                                                                                 \
    } while (0)
#define OK(call) EXPECT((call) == MPI_SUCCESS)
#define RC(call, code) EXPECT((call) == (code))

static void environment(int level) {
    int flag, v, sv, len, provided, *attr;
    char text[MPI_MAX_LIBRARY_VERSION_STRING], name[MPI_MAX_PROCESSOR_NAME];
    char err[MPI_MAX_ERROR_STRING];
    double t0, t1;
    void *mem = NULL;
    OK(MPI_Initialized(&flag));
    EXPECT(flag == 1);
    OK(MPI_Finalized(&flag));
    EXPECT(flag == 0);
    OK(MPI_Query_thread(&provided));
    EXPECT(provided >= level);
    OK(MPI_Get_version(&v, &sv));
    EXPECT(v == MPI_VERSION && sv == MPI_SUBVERSION);
    OK(MPI_Get_library_version(text, &len));
    EXPECT(len == (int)strlen(text) && strstr(text, "Rivet") != NULL);
    OK(MPI_Get_processor_name(name, &len));
    EXPECT(len > 0 && len == (int)strlen(name));
    t0 = MPI_Wtime();
    t1 = MPI_Wtime();
    EXPECT(t1 >= t0 && MPI_Wtick() > 0 && MPI_Wtick() < 1);
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &flag));
    EXPECT(flag && *attr >= 32767);
    /* Set by a launcher (the first and only application is 0); a
     * singleton, started without one, has no APPNUM. */
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &attr, &flag));
    if (getenv("PMI_FD") || getenv("PMI_PORT"))
        EXPECT(flag && *attr == 0);
    else
        EXPECT(!flag);
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &attr, &flag));
    EXPECT(!flag || *attr >= size);
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &attr, &flag));
    EXPECT(flag && (*attr == 0 || *attr == 1));
    OK(MPI_Error_string(MPI_ERR_RANK, err, &len));
    EXPECT(strstr(err, "MPI_ERR_RANK") != NULL);
    OK(MPI_Alloc_mem(4096, MPI_INFO_NULL, &mem));
    EXPECT(mem != NULL);
    memset(mem, 1, 4096);
    OK(MPI_Free_mem(mem));
}

static void errors(void) {
    int x = 0, flag;
    MPI_Request r;
    MPI_Comm bad = (MPI_Comm)0x44000fff;
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    RC(MPI_Send(&x, 1, MPI_INT, size, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    RC(MPI_Send(&x, 1, MPI_INT, 0, -5, MPI_COMM_WORLD), MPI_ERR_TAG);
    RC(MPI_Send(&x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    RC(MPI_Send(&x, 1, (MPI_Datatype)12345, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    RC(MPI_Send(&x, 1, MPI_INT, 0, 0, bad), MPI_ERR_COMM);
    RC(MPI_Send(NULL, 1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    RC(MPI_Irecv(&x, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD, &r), MPI_ERR_RANK);
    RC(MPI_Bcast(&x, 1, MPI_INT, size, MPI_COMM_WORLD), MPI_ERR_ROOT);
    RC(MPI_Allreduce(&x, &flag, 1, MPI_DOUBLE, MPI_BAND, MPI_COMM_WORLD), MPI_ERR_OP);
    {   /* A request handed back already is no longer valid. */
        MPI_Request again;
        OK(MPI_Irecv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r));
        again = r;
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        EXPECT(r == MPI_REQUEST_NULL);
        RC(MPI_Wait(&again, MPI_STATUS_IGNORE), MPI_ERR_REQUEST);
    }
    RC(MPI_Comm_set_errhandler(MPI_COMM_WORLD, (MPI_Errhandler)77), MPI_ERR_ARG);
    /* A message longer than the buffer: the first bytes, and TRUNCATE. */
    if (size >= 2 && rank < 2) {
        int big[4] = {1, 2, 3, 4}, small[2] = {0, 0};
        MPI_Status st;
        if (rank == 0) {
            OK(MPI_Send(big, 4, MPI_INT, 1, 40, MPI_COMM_WORLD));
        } else {
            RC(MPI_Recv(small, 2, MPI_INT, 0, 40, MPI_COMM_WORLD, &st), MPI_ERR_TRUNCATE);
            EXPECT(st.MPI_ERROR == MPI_ERR_TRUNCATE && small[0] == 1 && small[1] == 2);
        }
    }
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

static void communicators(void) {
    MPI_Comm dup, rev, half, none, dup2;
    int result, r, s, x;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, &result));
    EXPECT(result == MPI_IDENT);
    OK(MPI_Comm_compare(MPI_COMM_WORLD, dup, &result));
    EXPECT(result == MPI_CONGRUENT);
    OK(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev));
    OK(MPI_Comm_rank(rev, &r));
    EXPECT(r == size - 1 - rank);
    OK(MPI_Comm_compare(MPI_COMM_WORLD, rev, &result));
    EXPECT(result == (size > 1 ? MPI_SIMILAR : MPI_CONGRUENT));
    OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half));
    OK(MPI_Comm_size(half, &s));
    OK(MPI_Comm_rank(half, &r));
    EXPECT(s == (size + 1 - rank % 2) / 2 && r == rank / 2);
    OK(MPI_Comm_compare(MPI_COMM_WORLD, half, &result));
    EXPECT(result == (size > 1 ? MPI_UNEQUAL : MPI_CONGRUENT));
    OK(MPI_Comm_split(MPI_COMM_WORLD, MPI_UNDEFINED, 0, &none));
    EXPECT(none == MPI_COMM_NULL);
    OK(MPI_Comm_compare(MPI_COMM_SELF, MPI_COMM_SELF, &result));
    EXPECT(result == MPI_IDENT);
    OK(MPI_Comm_dup(half, &dup2));
    /* Each communicator its own context: the same tag on two of them,
     * received in the opposite order, matches by communicator. */
    if (size >= 2 && rank < 2) {
        int a = 100 + rank, b = 200 + rank;
        if (rank == 0) {
            OK(MPI_Send(&a, 1, MPI_INT, 1, 9, MPI_COMM_WORLD));
            OK(MPI_Send(&b, 1, MPI_INT, 1, 9, dup));
        } else {
            OK(MPI_Recv(&x, 1, MPI_INT, 0, 9, dup, MPI_STATUS_IGNORE));
            EXPECT(x == 200);
            OK(MPI_Recv(&x, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            EXPECT(x == 100);
        }
    }
    /* A ring on the half communicator. */
    {
        int right = (r + 1) % s, left = (r + s - 1) % s, got = -1;
        MPI_Status st;
        OK(MPI_Sendrecv(&rank, 1, MPI_INT, right, 3, &got, 1, MPI_INT, left, 3, dup2, &st));
        EXPECT(got == (left * 2 + rank % 2) && st.MPI_SOURCE == left && st.MPI_TAG == 3);
    }
    OK(MPI_Comm_free(&dup2));
    OK(MPI_Comm_free(&half));
    OK(MPI_Comm_free(&rev));
    OK(MPI_Comm_free(&dup));
    EXPECT(dup == MPI_COMM_NULL);
}

/* Ranks 0 and 1 (the others only take part in the barriers). */
static void point_to_point(void) {
    int peer = 1 - rank, i, x, flag, count, index, outcount, indices[4];
    int buf[4][64], in[4][64];
    MPI_Request reqs[4];
    MPI_Status st, sts[4];
    MPI_Message msg;
    if (size < 2 || rank > 1) return;
    for (i = 0; i < 4; i++)
        for (x = 0; x < 64; x++) buf[i][x] = rank * 10000 + i * 100 + x;

    /* Isend/Irecv + Waitall, statuses per request. */
    for (i = 0; i < 4; i++) OK(MPI_Irecv(in[i], 64, MPI_INT, peer, i, MPI_COMM_WORLD, &reqs[i]));
    for (i = 0; i < 4; i++) OK(MPI_Send(buf[i], 64 - i, MPI_INT, peer, i, MPI_COMM_WORLD));
    OK(MPI_Waitall(4, reqs, sts));
    for (i = 0; i < 4; i++) {
        EXPECT(reqs[i] == MPI_REQUEST_NULL);
        EXPECT(sts[i].MPI_SOURCE == peer && sts[i].MPI_TAG == i);
        OK(MPI_Get_count(&sts[i], MPI_INT, &count));
        EXPECT(count == 64 - i && in[i][0] == peer * 10000 + i * 100);
        OK(MPI_Get_count(&sts[i], MPI_DOUBLE, &count));
        EXPECT(count == ((64 - i) * 4 % 8 ? MPI_UNDEFINED : (64 - i) / 2));
    }

    /* Ssend + Issend + Rsend (after the receive is posted) + Waitany/Waitsome. */
    OK(MPI_Irecv(in[0], 64, MPI_INT, peer, 20, MPI_COMM_WORLD, &reqs[0]));
    OK(MPI_Irecv(in[1], 64, MPI_INT, peer, 21, MPI_COMM_WORLD, &reqs[1]));
    /* Both have posted tag 20 before either sends it (a ready send). */
    OK(MPI_Sendrecv(&rank, 1, MPI_INT, peer, 19, &x, 1, MPI_INT, peer, 19, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE));
    OK(MPI_Irecv(in[2], 64, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &reqs[2]));
    OK(MPI_Rsend(buf[0], 8, MPI_INT, peer, 20, MPI_COMM_WORLD));
    OK(MPI_Issend(buf[1], 8, MPI_INT, peer, 21, MPI_COMM_WORLD, &reqs[3]));
    OK(MPI_Waitany(4, reqs, &index, &st));
    EXPECT(index >= 0 && index < 4 && reqs[index] == MPI_REQUEST_NULL);
    OK(MPI_Ssend(buf[2], 5, MPI_INT, peer, 22, MPI_COMM_WORLD));
    for (x = 1; x < 4;) {
        OK(MPI_Waitsome(4, reqs, &outcount, indices, sts));
        EXPECT(outcount >= 1 && outcount != MPI_UNDEFINED);
        x += outcount;
    }
    OK(MPI_Waitsome(4, reqs, &outcount, indices, sts));
    EXPECT(outcount == MPI_UNDEFINED);
    EXPECT(in[2][0] == peer * 10000 + 200 && in[0][7] == peer * 10000 + 7);

    /* Test until done; Testall / Testany. */
    OK(MPI_Irecv(&x, 1, MPI_INT, peer, 30, MPI_COMM_WORLD, &reqs[0]));
    OK(MPI_Send(&rank, 1, MPI_INT, peer, 30, MPI_COMM_WORLD));
    do OK(MPI_Test(&reqs[0], &flag, &st));
    while (!flag);
    EXPECT(x == peer && st.MPI_SOURCE == peer && reqs[0] == MPI_REQUEST_NULL);
    OK(MPI_Irecv(&in[0][0], 1, MPI_INT, peer, 31, MPI_COMM_WORLD, &reqs[0]));
    OK(MPI_Irecv(&in[0][1], 1, MPI_INT, peer, 32, MPI_COMM_WORLD, &reqs[1]));
    OK(MPI_Send(&rank, 1, MPI_INT, peer, 31, MPI_COMM_WORLD));
    OK(MPI_Testall(2, reqs, &flag, MPI_STATUSES_IGNORE));
    /* The peer sends tag 32 only after this rank's "go" (tag 34). */
    EXPECT(!flag && reqs[0] != MPI_REQUEST_NULL && reqs[1] != MPI_REQUEST_NULL);
    OK(MPI_Sendrecv(&rank, 1, MPI_INT, peer, 34, &x, 1, MPI_INT, peer, 34, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE));
    OK(MPI_Send(&rank, 1, MPI_INT, peer, 32, MPI_COMM_WORLD));
    do OK(MPI_Testall(2, reqs, &flag, sts));
    while (!flag);
    EXPECT(reqs[0] == MPI_REQUEST_NULL && sts[1].MPI_TAG == 32 && in[0][1] == peer);
    OK(MPI_Irecv(&x, 1, MPI_INT, peer, 33, MPI_COMM_WORLD, &reqs[1]));
    reqs[0] = MPI_REQUEST_NULL;
    OK(MPI_Send(&rank, 1, MPI_INT, peer, 33, MPI_COMM_WORLD));
    do OK(MPI_Testany(2, reqs, &index, &flag, &st));
    while (!flag);
    EXPECT(index == 1 && st.MPI_TAG == 33);
    OK(MPI_Testany(2, reqs, &index, &flag, &st));
    EXPECT(flag && index == MPI_UNDEFINED);

    /* Probe, Iprobe, Mprobe + Mrecv. */
    OK(MPI_Send(buf[3], 17, MPI_INT, peer, 40, MPI_COMM_WORLD));
    OK(MPI_Probe(peer, 40, MPI_COMM_WORLD, &st));
    OK(MPI_Get_count(&st, MPI_INT, &count));
    EXPECT(count == 17 && st.MPI_SOURCE == peer);
    OK(MPI_Recv(in[3], count, MPI_INT, peer, 40, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    EXPECT(in[3][16] == peer * 10000 + 316);
    OK(MPI_Send(buf[3], 3, MPI_INT, peer, 41, MPI_COMM_WORLD));
    do OK(MPI_Iprobe(MPI_ANY_SOURCE, 41, MPI_COMM_WORLD, &flag, &st));
    while (!flag);
    EXPECT(st.MPI_TAG == 41);
    OK(MPI_Mprobe(peer, 41, MPI_COMM_WORLD, &msg, &st));
    EXPECT(msg != MPI_MESSAGE_NULL);
    OK(MPI_Iprobe(peer, 41, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
    EXPECT(!flag); /* taken out of matching */
    OK(MPI_Mrecv(in[3], 3, MPI_INT, &msg, &st));
    EXPECT(msg == MPI_MESSAGE_NULL && in[3][2] == peer * 10000 + 302);

    /* Cancel an unmatched receive; free a send request. */
    OK(MPI_Irecv(&x, 1, MPI_INT, peer, 99, MPI_COMM_WORLD, &reqs[0]));
    OK(MPI_Cancel(&reqs[0]));
    OK(MPI_Wait(&reqs[0], &st));
    OK(MPI_Test_cancelled(&st, &flag));
    EXPECT(flag == 1);
    OK(MPI_Isend(&rank, 1, MPI_INT, peer, 50, MPI_COMM_WORLD, &reqs[0]));
    OK(MPI_Request_free(&reqs[0]));
    EXPECT(reqs[0] == MPI_REQUEST_NULL);
    OK(MPI_Recv(&x, 1, MPI_INT, peer, 50, MPI_COMM_WORLD, &st));
    OK(MPI_Test_cancelled(&st, &flag));
    EXPECT(x == peer && flag == 0);

    /* Collectives never match user messages: a wildcard receive stays
     * pending across a broadcast. */
    OK(MPI_Irecv(&x, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &reqs[0]));
    x = -1;
    count = rank == 0 ? 77 : 0;
    OK(MPI_Bcast(&count, 1, MPI_INT, 0, MPI_COMM_WORLD));
    EXPECT(count == 77);
    OK(MPI_Test(&reqs[0], &flag, MPI_STATUS_IGNORE));
    EXPECT(!flag);
    OK(MPI_Cancel(&reqs[0]));
    OK(MPI_Wait(&reqs[0], &st));
    OK(MPI_Test_cancelled(&st, &flag));
    EXPECT(flag == 1);
}

static void proc_null(void) {
    int x = 5;
    MPI_Status st;
    MPI_Request r;
    MPI_Message m;
    OK(MPI_Send(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD));
    OK(MPI_Recv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
    EXPECT(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG && x == 5);
    OK(MPI_Irecv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r));
    OK(MPI_Wait(&r, &st));
    EXPECT(st.MPI_SOURCE == MPI_PROC_NULL);
    OK(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &m, &st));
    EXPECT(m == MPI_MESSAGE_NO_PROC);
    OK(MPI_Mrecv(&x, 1, MPI_INT, &m, &st));
    EXPECT(m == MPI_MESSAGE_NULL);
    r = MPI_REQUEST_NULL;
    OK(MPI_Wait(&r, &st));
}

/* A request's failure is raised on the handler of the communicator it was
 * started on, not MPI_COMM_WORLD's, in MPI_Wait and MPI_Waitall; and a
 * request on MPI_COMM_WORLD that reuses the engine's slot of one on
 * another communicator is not taken for it (the layer notes only requests
 * off MPI_COMM_WORLD, by the engine's slot). Ranks 0 and 1; rank 1
 * receives 4 ints into room for 2. */
static void request_handlers(void) {
    MPI_Comm dup;
    MPI_Request r[2];
    int big[4] = {1, 2, 3, 4}, small[2], x = 7, i;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    if (size >= 2 && rank < 2) {
        if (rank == 0) {
            for (i = 0; i < 2; i++) OK(MPI_Send(big, 4, MPI_INT, 1, 60 + i, dup));
            OK(MPI_Send(&x, 1, MPI_INT, 1, 62, dup));
            for (i = 0; i < 2; i++) OK(MPI_Send(big, 4, MPI_INT, 1, 63 + i, MPI_COMM_WORLD));
        } else {
            /* World fatal, dup returns: the failures come back from dup. */
            OK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
            OK(MPI_Irecv(small, 2, MPI_INT, 0, 60, dup, &r[0]));
            RC(MPI_Wait(&r[0], MPI_STATUS_IGNORE), MPI_ERR_TRUNCATE);
            EXPECT(r[0] == MPI_REQUEST_NULL && small[1] == 2);
            OK(MPI_Irecv(small, 2, MPI_INT, 0, 61, dup, &r[0]));
            RC(MPI_Waitall(1, r, MPI_STATUSES_IGNORE), MPI_ERR_IN_STATUS);
            /* Now the other way round: a request on dup that succeeds
             * leaves its slot to the next one, on MPI_COMM_WORLD, whose
             * failure must come back from MPI_COMM_WORLD. */
            OK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_ARE_FATAL));
            OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
            OK(MPI_Irecv(&x, 1, MPI_INT, 0, 62, dup, &r[0]));
            OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
            EXPECT(x == 7);
            OK(MPI_Irecv(small, 2, MPI_INT, 0, 63, MPI_COMM_WORLD, &r[0]));
            RC(MPI_Wait(&r[0], MPI_STATUS_IGNORE), MPI_ERR_TRUNCATE);
            /* And in MPI_Waitall, with a request the layer holds itself
             * (MPI_PROC_NULL's) beside librivet's. */
            OK(MPI_Irecv(small, 2, MPI_INT, 0, 64, MPI_COMM_WORLD, &r[0]));
            OK(MPI_Irecv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, dup, &r[1]));
            RC(MPI_Waitall(2, r, MPI_STATUSES_IGNORE), MPI_ERR_IN_STATUS);
            EXPECT(r[0] == MPI_REQUEST_NULL && r[1] == MPI_REQUEST_NULL);
            OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
        }
    }
    OK(MPI_Comm_free(&dup));
}

int main(int argc, char **argv) {
    int level = MPI_THREAD_SINGLE, provided, flag;
    if (argc > 1 && strcmp(argv[1], "fatal") != 0) level = atoi(argv[1]);
    OK(MPI_Init_thread(&argc, &argv, level, &provided));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (argc > 1 && strcmp(argv[1], "fatal") == 0) {
        int x = 1;
        if (rank == 0) {
            printf("rank 0 sends to rank %d\n", size);
            fflush(stdout);
            MPI_Send(&x, 1, MPI_INT, size, 0, MPI_COMM_WORLD);
            printf("MPI_Send returned\n");
        }
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
        return 0;
    }
    environment(level);
    errors();
    request_handlers();
    communicators();
    point_to_point();
    proc_null();
    OK(MPI_Barrier(MPI_COMM_WORLD));
    printf("mpi_p2p OK rank %d of %d level %d\n", rank, size, provided);
    OK(MPI_Finalize());
    OK(MPI_Finalized(&flag));
    EXPECT(flag == 1);
    return 0;
}
