/* librivet started without its own process manager: this program owns PMI
 * (through librivet-pmi's PMI-1 API, as a runtime with its own PMI would),
 * publishes the engine's address blob in the KVS, gathers everyone's, and
 * hands them to rivet_bootstrap_add_peers. Then a ring exchange of checked
 * messages over the engine. Prints "capi_external OK rank R of N". */
#include <pmi.h>
#include <rivet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                \
    do {                                                                           \
        int rc_ = (call);                                                          \
        if (rc_ != 0) {                                                            \
            fprintf(stderr, "FAILED line %d: %s: %d %s\n", __LINE__, #call, rc_,   \
                    rivet_last_error());                                           \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static void hex(const unsigned char *in, size_t len, char *out) {
    size_t i;
    for (i = 0; i < len; i++) sprintf(out + 2 * i, "%02x", in[i]);
    out[2 * len] = 0;
}

static size_t unhex(const char *in, unsigned char *out) {
    size_t i, n = strlen(in) / 2;
    for (i = 0; i < n; i++) {
        unsigned v;
        sscanf(in + 2 * i, "%2x", &v);
        out[i] = (unsigned char)v;
    }
    return n;
}

int main(void) {
    int spawned, rank, size, provided, i, next, prev;
    char kvs[256], key[64], value[1024];
    rivet_bootstrap_t *boot;
    rivet_engine_t *engine;
    rivet_comm_t *world;
    const void *mine;
    size_t mine_len;
    const void **addresses;
    size_t *lens;
    unsigned char *blobs;
    long token, got;
    rivet_status_t st;

    CHECK(PMI_Init(&spawned));
    CHECK(PMI_Get_rank(&rank));
    CHECK(PMI_Get_size(&size));
    CHECK(PMI_KVS_Get_my_name(kvs, sizeof kvs));

    CHECK(rivet_init_external(RIVET_API_VERSION, RIVET_THREAD_SINGLE, kvs, rank, size, &boot,
                              &provided));
    CHECK(rivet_bootstrap_address(boot, &mine, &mine_len));
    if (2 * mine_len + 1 > sizeof value) {
        fprintf(stderr, "address of %zu bytes does not fit a PMI value\n", mine_len);
        return 1;
    }
    hex(mine, mine_len, value);
    sprintf(key, "rivet-addr-%d", rank);
    CHECK(PMI_KVS_Put(kvs, key, value));
    CHECK(PMI_KVS_Commit(kvs));
    CHECK(PMI_Barrier());

    addresses = malloc(sizeof *addresses * (size_t)size);
    lens = malloc(sizeof *lens * (size_t)size);
    blobs = malloc(512 * (size_t)size);
    for (i = 0; i < size; i++) {
        sprintf(key, "rivet-addr-%d", i);
        CHECK(PMI_KVS_Get(kvs, key, value, sizeof value));
        lens[i] = unhex(value, blobs + 512 * i);
        addresses[i] = blobs + 512 * i;
    }
    CHECK(rivet_bootstrap_add_peers(boot, addresses, lens, (size_t)size, &engine));
    free(blobs);
    free(lens);
    free(addresses);

    CHECK(rivet_comm_world(engine, &world));
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;
    token = 1000 * rank + 7;
    if (size > 1) {
        rivet_request_t r;
        CHECK(rivet_irecv(world, &got, sizeof got, prev, 11, &r));
        CHECK(rivet_send(world, &token, sizeof token, next, 11));
        CHECK(rivet_wait(engine, &r, &st));
        if (got != 1000 * prev + 7 || st.source != prev) {
            fprintf(stderr, "rank %d: got %ld from %d\n", rank, got, st.source);
            return 1;
        }
    }
    /* What needs a process manager says so. */
    if (rivet_publish_name(engine, "svc", "port") != RIVET_ERR_UNSUPPORTED) {
        fprintf(stderr, "publish without a process manager did not fail as unsupported\n");
        return 1;
    }
    {
        /* The transports chosen, for the test to check (shm between local ranks). */
        static char info[16384];
        char *line;
        CHECK(rivet_info(engine, info, sizeof info, NULL));
        for (line = strtok(info, "\n"); line; line = strtok(NULL, "\n"))
            if (strncmp(line, "transport.", 10) == 0 || strncmp(line, "bootstrap", 9) == 0)
                printf("info rank %d: %s\n", rank, line);
    }
    CHECK(rivet_comm_barrier(world));
    printf("capi_external OK rank %d of %d\n", rank, size);
    CHECK(rivet_comm_free(world));
    CHECK(rivet_finalize(engine));
    CHECK(PMI_Finalize());
    return 0;
}
