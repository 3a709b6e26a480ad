/* librivet's C API, call by call, with checked results: argument errors
 * come back as codes (never a crash), and each operation does what
 * rivet.h says. Run on 2 ranks: rivetrun -n 2 capi_check [LEVEL]
 * (LEVEL: 0..3, RIVET_THREAD_*; default 0). Prints "capi_check OK rank R". */
#include <rivet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank = -1;

#define CHECK(call)                                                                \
    do {                                                                           \
        int rc_ = (call);                                                          \
        if (rc_ != RIVET_SUCCESS) {                                                \
            fprintf(stderr, "rank %d: FAILED line %d: %s: %s (%s)\n", rank, __LINE__, #call, \
                    rivet_strerror(rc_), rivet_last_error());                      \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

#define EXPECT(cond)                                                               \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "rank %d: FAILED line %d: %s\n", rank, __LINE__, #cond);  \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

#define EXPECT_RC(call, code)                                                      \
    do {                                                                           \
        int rc_ = (call);                                                          \
        if (rc_ != (code)) {                                                       \
            fprintf(stderr, "rank %d: FAILED line %d: %s gave %d (%s), not %s\n", rank, \
                    __LINE__, #call, rc_, rivet_last_error(), #code);              \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

int main(int argc, char **argv) {
    rivet_engine_t *engine = NULL;
    rivet_comm_t *world, *dup, *mine, *sub;
    rivet_request_t reqs[4], req;
    rivet_message_t msg;
    rivet_status_t st, sts[4];
    int level = argc > 1 ? atoi(argv[1]) : RIVET_THREAD_SINGLE;
    int provided = -1, size, peer, flag, i, q, r, ranks[2];
    size_t index, needed = 0;
    char small[4], info[8192], text[64];

    /* Before init: a wrong API version and a bad level are refused with a reason. */
    EXPECT_RC(rivet_init(RIVET_API_VERSION + 1, level, &engine, &provided), RIVET_ERR_INVALID_ARG);
    EXPECT(strstr(rivet_last_error(), "API version") != NULL);
    EXPECT_RC(rivet_init(RIVET_API_VERSION, 7, &engine, &provided), RIVET_ERR_INVALID_ARG);
    EXPECT(engine == NULL);
    EXPECT(strcmp(rivet_strerror(RIVET_ERR_TRUNCATE), "message truncated") == 0);
    EXPECT(rivet_strerror(12345) != NULL);

    CHECK(rivet_init(RIVET_API_VERSION, level, &engine, &provided));
    EXPECT(provided >= level);
    CHECK(rivet_query_thread(engine, &q));
    EXPECT(q == provided);
    CHECK(rivet_comm_world(engine, &world));
    CHECK(rivet_comm_rank(world, &rank));
    CHECK(rivet_comm_size(world, &size));
    EXPECT(size == 2);
    peer = 1 - rank;
    {
        int appnum = -7, universe = -7;
        CHECK(rivet_job_attrs(engine, &appnum, &universe));
        EXPECT(appnum == 0);
        EXPECT(universe == -1 || universe >= size);
        EXPECT_RC(rivet_job_attrs(engine, NULL, &universe), RIVET_ERR_INVALID_ARG);
    }

    /* Null handles and pointers are errors, not crashes. */
    EXPECT_RC(rivet_comm_rank(NULL, &r), RIVET_ERR_INVALID_ARG);
    EXPECT_RC(rivet_comm_rank(world, NULL), RIVET_ERR_INVALID_ARG);
    EXPECT_RC(rivet_send(world, NULL, 8, peer, 1), RIVET_ERR_INVALID_ARG);
    EXPECT_RC(rivet_wait(NULL, &req, &st), RIVET_ERR_INVALID_ARG);
    EXPECT_RC(rivet_comm_free(NULL), RIVET_ERR_INVALID_ARG);
    /* Ranks and tags out of range. */
    EXPECT_RC(rivet_send(world, small, 1, 2, 1), RIVET_ERR_RANK);
    EXPECT_RC(rivet_send(world, small, 1, -5, 1), RIVET_ERR_RANK);
    EXPECT_RC(rivet_isend(world, small, 1, peer, -3, &req), RIVET_ERR_TAG);
    EXPECT_RC(rivet_comm_dup_with_context(world, RIVET_CONTEXT_ID_MAX + 1u, &dup),
              RIVET_ERR_INVALID_ARG);
    /* An output buffer too small is refused, nothing written past it. */
    EXPECT_RC(rivet_info(engine, small, sizeof small, &needed), RIVET_ERR_INVALID_ARG);
    EXPECT(needed > sizeof small);
    CHECK(rivet_info(engine, info, sizeof info, NULL));
    EXPECT(strstr(info, "thread_level: ") != NULL);

    /* Truncation: status says so, the call says so. */
    if (rank == 0) {
        char big[16] = "0123456789abcde";
        CHECK(rivet_send(world, big, sizeof big, 1, 2));
    } else {
        memset(small, 0, sizeof small);
        EXPECT_RC(rivet_recv(world, small, sizeof small, 0, 2, &st), RIVET_ERR_TRUNCATE);
        EXPECT(st.error == RIVET_ERR_TRUNCATE && st.count == sizeof small);
        EXPECT(memcmp(small, "0123", 4) == 0);
    }

    /* Nonblocking exchange with waitall, then waitany and test. */
    {
        long out[2] = {10 + rank, 20 + rank}, in[2] = {0, 0};
        CHECK(rivet_irecv(world, &in[0], sizeof(long), peer, 3, &reqs[0]));
        CHECK(rivet_irecv(world, &in[1], sizeof(long), peer, 4, &reqs[1]));
        CHECK(rivet_isend(world, &out[1], sizeof(long), peer, 4, &reqs[2]));
        CHECK(rivet_issend(world, &out[0], sizeof(long), peer, 3, &reqs[3]));
        CHECK(rivet_waitall(engine, 4, reqs, sts));
        for (i = 0; i < 4; i++) EXPECT(reqs[i] == RIVET_REQUEST_NULL);
        EXPECT(in[0] == 10 + peer && in[1] == 20 + peer);
        EXPECT(sts[0].source == peer && sts[0].tag == 3 && sts[0].count == sizeof(long));
        EXPECT(sts[1].tag == 4);
        /* All null: waitany says none. */
        CHECK(rivet_waitany(engine, 4, reqs, &index, &st));
        EXPECT(index == (size_t)-1);
        CHECK(rivet_irecv(world, &in[0], sizeof(long), RIVET_ANY_SOURCE, RIVET_ANY_TAG, &reqs[2]));
        CHECK(rivet_send(world, &out[0], sizeof(long), peer, 9));
        CHECK(rivet_waitany(engine, 4, reqs, &index, &st));
        EXPECT(index == 2 && st.source == peer && st.tag == 9 && reqs[2] == RIVET_REQUEST_NULL);
        /* A waited request handle is null; waiting on null is immediate. */
        CHECK(rivet_wait(engine, &reqs[2], &st));
    }

    /* The MPI layer's unchecked entries: the engine's own checks still
     * answer, a failed start leaves a null request, and they carry the
     * same traffic. A window of sends (those complete at once are nulled
     * by waitall's first pass), a null handle and a live receive, waited
     * with statuses: the sends' and the null one's are empty. */
    {
        long out[4], in[4];
        rivet_request_t w[6];
        rivet_status_t ws[6], empty;
        memset(&empty, 0, sizeof empty);
        req = 77;
        EXPECT_RC(rivet_isend_unchecked(world, small, 1, 2, 1, &req), RIVET_ERR_RANK);
        EXPECT(req == RIVET_REQUEST_NULL);
        req = 77;
        EXPECT_RC(rivet_irecv_unchecked(world, small, 1, peer, -5, &req), RIVET_ERR_TAG);
        EXPECT(req == RIVET_REQUEST_NULL);
        EXPECT_RC(rivet_send_unchecked(world, small, 1, -1, 1), RIVET_ERR_RANK);
        EXPECT_RC(rivet_recv_unchecked(world, small, 1, 5, 1, NULL), RIVET_ERR_RANK);
        for (i = 0; i < 4; i++) {
            out[i] = 100 * rank + i;
            CHECK(rivet_isend_unchecked(world, &out[i], sizeof(long), peer, 20 + i, &w[i]));
        }
        w[4] = RIVET_REQUEST_NULL;
        /* An empty buffer is a dangling pointer here, never null. */
        CHECK(rivet_irecv_unchecked(world, (void *)1, 0, peer, 30, &w[5]));
        CHECK(rivet_send_unchecked(world, (void *)1, 0, peer, 30));
        memset(ws, 0xff, sizeof ws);
        CHECK(rivet_waitall(engine, 6, w, ws));
        for (i = 0; i < 6; i++) EXPECT(w[i] == RIVET_REQUEST_NULL);
        for (i = 0; i < 5; i++) EXPECT(memcmp(&ws[i], &empty, sizeof empty) == 0);
        EXPECT(ws[5].source == peer && ws[5].tag == 30 && ws[5].count == 0 && ws[5].error == 0);
        for (i = 0; i < 4; i++)
            CHECK(rivet_recv_unchecked(world, &in[i], sizeof(long), peer, 20 + i, i ? NULL : &st));
        EXPECT(st.source == peer && st.tag == 20 && st.count == sizeof(long));
        for (i = 0; i < 4; i++) EXPECT(in[i] == 100 * peer + i);
        /* Truncation as in rivet_recv: the code, and the status filled. */
        CHECK(rivet_send_unchecked(world, out, 2 * sizeof(long), peer, 31));
        EXPECT_RC(rivet_recv_unchecked(world, in, sizeof(long), peer, 31, &st), RIVET_ERR_TRUNCATE);
        EXPECT(st.error == RIVET_ERR_TRUNCATE && st.count == sizeof(long) && in[0] == 100 * peer);
    }

    /* Cancel a receive nothing matches. */
    {
        char buf[8];
        CHECK(rivet_irecv(world, buf, sizeof buf, peer, 999, &req));
        CHECK(rivet_cancel(engine, req));
        flag = 0;
        while (!flag) CHECK(rivet_test(engine, &req, &flag, &st));
        EXPECT(st.cancelled == 1 && req == RIVET_REQUEST_NULL);
        EXPECT_RC(rivet_cancel(engine, RIVET_REQUEST_NULL), RIVET_ERR_INVALID_ARG);
    }

    /* Probe, iprobe, matched probe. */
    {
        int v = 77 + rank, got = 0;
        CHECK(rivet_send(world, &v, sizeof v, peer, 5));
        CHECK(rivet_probe(world, peer, 5, &st));
        EXPECT(st.source == peer && st.count == sizeof v);
        CHECK(rivet_iprobe(world, peer, 5, &flag, &st));
        EXPECT(flag == 1);
        CHECK(rivet_mprobe(world, RIVET_ANY_SOURCE, 5, &msg, &st));
        EXPECT(msg != RIVET_MESSAGE_NULL && st.count == sizeof v);
        /* Taken out of matching: iprobe no longer sees it. */
        CHECK(rivet_iprobe(world, peer, 5, &flag, NULL));
        EXPECT(flag == 0);
        CHECK(rivet_mrecv(engine, &got, sizeof got, &msg, &st));
        EXPECT(got == 77 + peer && msg == RIVET_MESSAGE_NULL);
        EXPECT_RC(rivet_mrecv(engine, &got, sizeof got, &msg, &st), RIVET_ERR_INVALID_ARG);
        CHECK(rivet_improbe(world, peer, 6, &flag, &msg, &st));
        EXPECT(flag == 0);
    }

    /* Communicators: agreed dup, caller context ids, a one-rank subset. */
    {
        int a = rank, b = -1;
        CHECK(rivet_comm_dup(world, &dup));
        CHECK(rivet_comm_dup_with_context(world, 42, &mine));
        ranks[0] = rank;
        CHECK(rivet_comm_create(world, ranks, 1, 100 + rank, &sub));
        CHECK(rivet_comm_size(sub, &r));
        EXPECT(r == 1);
        CHECK(rivet_comm_rank(sub, &r));
        EXPECT(r == 0);
        ranks[0] = peer;
        EXPECT_RC(rivet_comm_create(world, ranks, 1, 7, &sub), RIVET_ERR_INVALID_ARG);
        /* The same tag on three communicators: each message stays on its own. */
        CHECK(rivet_send(mine, &a, sizeof a, peer, 1));
        a += 10;
        CHECK(rivet_send(dup, &a, sizeof a, peer, 1));
        CHECK(rivet_recv(dup, &b, sizeof b, peer, 1, &st));
        EXPECT(b == peer + 10);
        CHECK(rivet_recv(mine, &b, sizeof b, peer, 1, &st));
        EXPECT(b == peer);
        CHECK(rivet_comm_barrier(dup));
        CHECK(rivet_comm_free(sub));
        CHECK(rivet_comm_free(mine));
        CHECK(rivet_comm_free(dup));
    }

    /* Agreed split and create, the collective context, foreign peers
     * (none outside IMPI). */
    {
        rivet_comm_t *coll = NULL, *none = NULL;
        unsigned char flags[2] = {9, 9};
        int a = 5 + rank, b = -1, any = -1;
        /* Colours by rank: each alone; keys reversed do not matter. */
        CHECK(rivet_comm_split(world, rank, -rank, &sub));
        EXPECT(sub != NULL);
        CHECK(rivet_comm_size(sub, &r));
        EXPECT(r == 1);
        CHECK(rivet_comm_free(sub));
        /* One colour, keys reversed: rank 1 first. */
        CHECK(rivet_comm_split(world, 3, -rank, &sub));
        CHECK(rivet_comm_rank(sub, &r));
        EXPECT(r == 1 - rank);
        CHECK(rivet_comm_translate_ranks(sub, world, ranks, 2));
        EXPECT(ranks[0] == 1 && ranks[1] == 0);
        EXPECT_RC(rivet_comm_translate_ranks(sub, world, ranks, 1), RIVET_ERR_INVALID_ARG);
        CHECK(rivet_comm_free(sub));
        CHECK(rivet_comm_split(world, rank, 0, &sub));
        CHECK(rivet_comm_translate_ranks(world, sub, ranks, 2));
        EXPECT(ranks[rank] == 0 && ranks[1 - rank] == -1);
        CHECK(rivet_comm_free(sub));
        CHECK(rivet_comm_split(world, -1, 0, &sub));
        EXPECT(sub == NULL);
        ranks[0] = 1;
        CHECK(rivet_comm_create_agreed(world, ranks, 1, &sub));
        EXPECT(rank == 1 ? sub != NULL : sub == NULL);
        if (sub) CHECK(rivet_comm_free(sub));
        ranks[0] = 0;
        ranks[1] = 0;
        EXPECT_RC(rivet_comm_create_agreed(world, ranks, 2, &none), RIVET_ERR_INVALID_ARG);
        CHECK(rivet_comm_foreign_peers(world, flags, 2, &any));
        EXPECT(flags[0] == 0 && flags[1] == 0 && any == 0);
        EXPECT_RC(rivet_comm_foreign_peers(world, flags, 1, &any), RIVET_ERR_INVALID_ARG);
        EXPECT_RC(rivet_comm_foreign_peers(world, flags, 2, NULL), RIVET_ERR_INVALID_ARG);
        /* The collective context is apart from the user one. */
        CHECK(rivet_comm_collective(world, &coll));
        CHECK(rivet_send(coll, &a, sizeof a, peer, 77));
        CHECK(rivet_iprobe(world, peer, 77, &flag, NULL));
        EXPECT(flag == 0);
        CHECK(rivet_recv(coll, &b, sizeof b, peer, 77, &st));
        EXPECT(b == 5 + peer);
        CHECK(rivet_comm_free(coll));
    }

    CHECK(rivet_progress(engine, NULL));
    CHECK(rivet_nspace(engine, text, sizeof text));
    EXPECT(strlen(text) > 0);
    printf("capi_check OK rank %d level %d provided %d\n", rank, level, provided);
    CHECK(rivet_comm_free(world));
    CHECK(rivet_finalize(engine));
    return 0;
}
