/* Spawn over librivet: the job's ranks start 2 children (this program
 * again, with the argument "child"), merge the intercommunicator, and
 * rank 0 exchanges a checked message with each child.
 * Run: rivetrun -n 2 ./spawn */
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

#define CHILDREN 2

static int child(rivet_engine_t *engine, rivet_comm_t *parent) {
    rivet_comm_t *world, *all;
    int rank, size, remote, merged_rank;
    long value;
    rivet_status_t st;
    CHECK(rivet_comm_world(engine, &world));
    CHECK(rivet_comm_rank(world, &rank));
    CHECK(rivet_comm_size(world, &size));
    CHECK(rivet_comm_remote_size(parent, &remote));
    CHECK(rivet_comm_merge(parent, 1, &all));
    CHECK(rivet_comm_rank(all, &merged_rank));
    if (size != CHILDREN || merged_rank != remote + rank) {
        fprintf(stderr, "child %d: size %d, merged rank %d with %d parents\n", rank, size,
                merged_rank, remote);
        return 1;
    }
    CHECK(rivet_recv(parent, &value, sizeof value, 0, 7, &st));
    if (value != 100 + rank || st.source != 0) {
        fprintf(stderr, "child %d: got %ld from %d\n", rank, value, st.source);
        return 1;
    }
    value *= 2;
    CHECK(rivet_send(parent, &value, sizeof value, 0, 8));
    CHECK(rivet_comm_barrier(all));
    printf("spawn child %d of %d OK\n", rank, size);
    CHECK(rivet_comm_free(all));
    CHECK(rivet_comm_disconnect(parent));
    CHECK(rivet_comm_free(world));
    return 0;
}

int main(int argc, char **argv) {
    rivet_engine_t *engine;
    rivet_comm_t *world, *parent, *children, *all;
    int provided, rank, size, remote, i, errcodes[CHILDREN];
    const char *child_args[] = {"child", NULL};
    CHECK(rivet_init(RIVET_API_VERSION, RIVET_THREAD_SINGLE, &engine, &provided));
    CHECK(rivet_comm_parent(engine, &parent));
    if (parent != NULL) {
        int rc = child(engine, parent);
        CHECK(rivet_finalize(engine));
        return rc;
    }
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        fprintf(stderr, "started as a child but no parent communicator\n");
        return 1;
    }
    CHECK(rivet_comm_world(engine, &world));
    CHECK(rivet_comm_rank(world, &rank));
    CHECK(rivet_comm_size(world, &size));
    CHECK(rivet_comm_spawn(world, argv[0], child_args, CHILDREN, NULL, NULL, 0, 0, &children,
                           errcodes));
    CHECK(rivet_comm_remote_size(children, &remote));
    if (remote != CHILDREN) {
        fprintf(stderr, "parent %d: %d children, not %d\n", rank, remote, CHILDREN);
        return 1;
    }
    if (rank == 0)
        for (i = 0; i < CHILDREN; i++)
            if (errcodes[i] != 0) {
                fprintf(stderr, "child %d: error code %d\n", i, errcodes[i]);
                return 1;
            }
    CHECK(rivet_comm_merge(children, 0, &all));
    if (rank == 0) {
        for (i = 0; i < CHILDREN; i++) {
            long value = 100 + i, back = 0;
            rivet_status_t st;
            CHECK(rivet_send(children, &value, sizeof value, i, 7));
            CHECK(rivet_recv(children, &back, sizeof back, i, 8, &st));
            if (back != 2 * value || st.source != i) {
                fprintf(stderr, "child %d answered %ld\n", i, back);
                return 1;
            }
        }
    }
    CHECK(rivet_comm_barrier(all));
    printf("spawn parent %d of %d OK\n", rank, size);
    CHECK(rivet_comm_free(all));
    CHECK(rivet_comm_disconnect(children));
    CHECK(rivet_comm_free(world));
    CHECK(rivet_finalize(engine));
    return 0;
}
