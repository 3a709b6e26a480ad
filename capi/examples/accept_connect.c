/* Accept/connect over librivet between two halves of one job: rank 0 opens
 * a port and accepts on its own COMM_SELF; rank 1 connects to it. The port
 * name travels by the name service ("names": publish/lookup; rivetrun
 * serves it) or by a message over COMM_WORLD (the default, any process
 * manager). They exchange checked messages both ways, then disconnect.
 * Run: rivetrun -n 2 ./accept_connect [names] */
#include <rivet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                \
    do {                                                                           \
        int rc_ = (call);                                                          \
        if (rc_ != RIVET_SUCCESS) {                                                \
            fprintf(stderr, "%s failed: %s (%s)\n", #call, rivet_strerror(rc_),    \
                    rivet_last_error());                                           \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

#define SERVICE "rivet-capi-example"

int main(int argc, char **argv) {
    rivet_engine_t *engine;
    rivet_comm_t *world, *self, *inter;
    int provided, rank, size, remote, names = argc > 1 && strcmp(argv[1], "names") == 0;
    char port[RIVET_PORT_NAME_MAX];
    int value, back;
    rivet_status_t st;
    CHECK(rivet_init(RIVET_API_VERSION, RIVET_THREAD_SINGLE, &engine, &provided));
    CHECK(rivet_comm_world(engine, &world));
    CHECK(rivet_comm_self(engine, &self));
    CHECK(rivet_comm_rank(world, &rank));
    CHECK(rivet_comm_size(world, &size));
    if (size != 2) {
        fprintf(stderr, "accept_connect needs exactly 2 ranks\n");
        return 2;
    }
    if (rank == 0) {
        CHECK(rivet_open_port(engine, port, sizeof port));
        if (names)
            CHECK(rivet_publish_name(engine, SERVICE, port));
        else
            CHECK(rivet_send(world, port, strlen(port) + 1, 1, 1));
        /* Tell rank 1 the name is there (publish) or sent. */
        CHECK(rivet_comm_barrier(world));
        CHECK(rivet_comm_accept(self, port, 0, &inter));
        if (names)
            CHECK(rivet_unpublish_name(engine, SERVICE));
        CHECK(rivet_close_port(engine, port));
    } else {
        if (!names)
            CHECK(rivet_recv(world, port, sizeof port, 0, 1, &st));
        CHECK(rivet_comm_barrier(world));
        if (names)
            CHECK(rivet_lookup_name(engine, SERVICE, port, sizeof port));
        CHECK(rivet_comm_connect(self, port, 0, &inter));
    }
    CHECK(rivet_comm_remote_size(inter, &remote));
    if (remote != 1) {
        fprintf(stderr, "rank %d: remote group of %d\n", rank, remote);
        return 1;
    }
    /* Across the intercommunicator the other side is rank 0. */
    value = 1000 + rank;
    if (rank == 0) {
        CHECK(rivet_send(inter, &value, sizeof value, 0, 3));
        CHECK(rivet_recv(inter, &back, sizeof back, 0, 4, &st));
    } else {
        CHECK(rivet_recv(inter, &back, sizeof back, 0, 3, &st));
        CHECK(rivet_send(inter, &value, sizeof value, 0, 4));
    }
    if (back != 1000 + (1 - rank) || st.source != 0 || st.count != sizeof back) {
        fprintf(stderr, "rank %d: got %d from %d\n", rank, back, st.source);
        return 1;
    }
    CHECK(rivet_comm_disconnect(inter));
    printf("accept_connect rank %d OK (%s)\n", rank, names ? "names" : "message");
    CHECK(rivet_comm_free(self));
    CHECK(rivet_comm_free(world));
    CHECK(rivet_finalize(engine));
    return 0;
}
