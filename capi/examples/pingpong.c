/* Ping-pong between ranks 0 and 1 over librivet, checking every byte.
 * Build: cc pingpong.c $(pkg-config --cflags --libs rivet)
 * Run:   rivetrun -n 2 ./a.out [ITERS]
 * Prints one line per size: bytes, round trips, one-way latency in us. */
#define _POSIX_C_SOURCE 200112L /* clock_gettime under -std=c99 */
#include <rivet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                \
    do {                                                                           \
        int rc_ = (call);                                                          \
        if (rc_ != RIVET_SUCCESS) {                                                \
            fprintf(stderr, "%s failed: %s (%s)\n", #call, rivet_strerror(rc_),    \
                    rivet_last_error());                                           \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    rivet_engine_t *engine;
    rivet_comm_t *world;
    int provided, rank, size, iters = argc > 1 ? atoi(argv[1]) : 1000;
    size_t len;
    CHECK(rivet_init(RIVET_API_VERSION, RIVET_THREAD_SINGLE, &engine, &provided));
    CHECK(rivet_comm_world(engine, &world));
    CHECK(rivet_comm_rank(world, &rank));
    CHECK(rivet_comm_size(world, &size));
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "pingpong needs exactly 2 ranks, got %d\n", size);
        rivet_comm_free(world);
        rivet_finalize(engine);
        return 2;
    }
    for (len = 0; len <= (1u << 20); len = len ? len * 4 : 1) {
        unsigned char *out = malloc(len + 1), *in = malloc(len + 1);
        size_t i;
        int it;
        double t0;
        rivet_status_t st;
        for (i = 0; i < len; i++) out[i] = (unsigned char)(i * 7 + len + (size_t)rank);
        CHECK(rivet_comm_barrier(world));
        t0 = now();
        for (it = 0; it < iters; it++) {
            if (rank == 0) {
                CHECK(rivet_send(world, out, len, 1, 5));
                CHECK(rivet_recv(world, in, len, 1, 5, &st));
            } else {
                CHECK(rivet_recv(world, in, len, 0, 5, &st));
                CHECK(rivet_send(world, out, len, 0, 5));
            }
        }
        /* The last message received is the peer's pattern. */
        if (st.count != len || st.source != 1 - rank || st.tag != 5) {
            fprintf(stderr, "rank %d: bad status count=%llu source=%d tag=%d\n", rank,
                    (unsigned long long)st.count, st.source, st.tag);
            return 1;
        }
        for (i = 0; i < len; i++)
            if (in[i] != (unsigned char)(i * 7 + len + (size_t)(1 - rank))) {
                fprintf(stderr, "rank %d: byte %zu of %zu wrong\n", rank, i, len);
                return 1;
            }
        if (rank == 0)
            printf("%zu %d %.3f\n", len, iters, (now() - t0) * 1e6 / (2.0 * iters));
        free(out);
        free(in);
    }
    CHECK(rivet_comm_free(world));
    CHECK(rivet_finalize(engine));
    return 0;
}
