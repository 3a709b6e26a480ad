/* librivetmpi's dynamic processes, results checked.
 *
 *   mpi_dynamic spawn [ROOT]
 *                       the job spawns 2 copies of itself ("child"), rank
 *                       ROOT (default 0) the spawn's root; each
 *                       side checks messages over the intercommunicator,
 *                       its dup and compare, its merge (parents first) and
 *                       a disconnect, after which a child has no parent
 *   mpi_dynamic ports   (2+ ranks) the job splits in two halves: one opens a
 *                       port and publishes it, the other looks it up and
 *                       connects; then merge, unpublish (lookup now fails
 *                       with MPI_ERR_NAME), close, disconnect
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int wrank;

#define EXPECT(cond)                                                                      \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "rank %d: %s:%d: expected %s\n", wrank, __FILE__, __LINE__,  \
                    #cond);                                                               \
            MPI_Abort(MPI_COMM_WORLD, 5);                                                 \
        }                                                                                 \
    } while (0)
#define OK(call) EXPECT((call) == MPI_SUCCESS)

#define CHILDREN 2

/* Dup and compare, then merge: this process is rank `expect_rank` of
 * `total`; every member sums the merged ranks. */
static void merged(MPI_Comm inter, int high, int expect_rank, int total) {
    MPI_Comm all, dup;
    int r, s, sum = -1, result;
    OK(MPI_Comm_dup(inter, &dup));
    OK(MPI_Comm_compare(inter, dup, &result));
    EXPECT(result == MPI_CONGRUENT);
    OK(MPI_Comm_free(&dup));
    OK(MPI_Intercomm_merge(inter, high, &all));
    OK(MPI_Comm_rank(all, &r));
    OK(MPI_Comm_size(all, &s));
    EXPECT(s == total && r == expect_rank);
    OK(MPI_Allreduce(&r, &sum, 1, MPI_INT, MPI_SUM, all));
    EXPECT(sum == total * (total - 1) / 2);
    OK(MPI_Comm_free(&all));
}

/* The parents' root: it sends each child its line. */
static int root;

static void child(void) {
    MPI_Comm parent;
    int size, psize, got[2] = {-1, -1};
    MPI_Status st;
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    OK(MPI_Comm_get_parent(&parent));
    EXPECT(parent != MPI_COMM_NULL && size == CHILDREN);
    OK(MPI_Comm_size(parent, &psize));
    EXPECT(psize == size); /* the local group */
    /* From the parents' root: 100 + this rank, and how many parents. */
    OK(MPI_Recv(got, 2, MPI_INT, root, 7, parent, &st));
    EXPECT(got[0] == 100 + wrank && st.MPI_SOURCE == root && st.MPI_TAG == 7);
    got[0] *= 2;
    OK(MPI_Send(got, 1, MPI_INT, root, 8, parent));
    merged(parent, 1, got[1] + wrank, got[1] + size);
    OK(MPI_Comm_disconnect(&parent));
    EXPECT(parent == MPI_COMM_NULL);
    OK(MPI_Comm_get_parent(&parent));
    EXPECT(parent == MPI_COMM_NULL);
    printf("spawn child %d of %d OK\n", wrank, size);
}

static void spawn(const char *self, int size) {
    MPI_Comm inter, parent;
    char root_word[16];
    char *args[] = {"child", root_word, NULL};
    snprintf(root_word, sizeof root_word, "%d", root);
    int codes[CHILDREN] = {-1, -1}, i, csize;
    OK(MPI_Comm_get_parent(&parent));
    EXPECT(parent == MPI_COMM_NULL);
    OK(MPI_Comm_spawn(self, args, CHILDREN, MPI_INFO_NULL, root, MPI_COMM_WORLD, &inter, codes));
    for (i = 0; i < CHILDREN; i++) EXPECT(codes[i] == MPI_SUCCESS);
    OK(MPI_Comm_size(inter, &csize));
    EXPECT(csize == size);
    if (wrank == root)
        for (i = 0; i < CHILDREN; i++) {
            int out[2] = {100 + i, size}, back = -1;
            MPI_Status st;
            OK(MPI_Send(out, 2, MPI_INT, i, 7, inter));
            OK(MPI_Recv(&back, 1, MPI_INT, i, 8, inter, &st));
            EXPECT(back == 2 * (100 + i) && st.MPI_SOURCE == i);
        }
    merged(inter, 0, wrank, size + CHILDREN);
    OK(MPI_Comm_disconnect(&inter));
    printf("spawn parent %d of %d OK\n", wrank, size);
}

static void ports(int size) {
    MPI_Comm half, inter;
    char port[MPI_MAX_PORT_NAME] = {0}, found[MPI_MAX_PORT_NAME] = {0}, service[64];
    int server = wrank < size / 2, hrank, hsize, pid = (int)getpid(), x, result;
    EXPECT(size >= 2);
    /* A service name unique to this job: rank 0's pid. */
    OK(MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD));
    snprintf(service, sizeof service, "rivet-mpi-test-%d", pid);
    OK(MPI_Comm_split(MPI_COMM_WORLD, server, wrank, &half));
    OK(MPI_Comm_rank(half, &hrank));
    OK(MPI_Comm_size(half, &hsize));
    if (server && hrank == 0) {
        OK(MPI_Open_port(MPI_INFO_NULL, port));
        EXPECT(strlen(port) > 0);
        OK(MPI_Publish_name(service, MPI_INFO_NULL, port));
    }
    OK(MPI_Barrier(MPI_COMM_WORLD)); /* published before anyone looks */
    if (server) {
        OK(MPI_Comm_accept(port, MPI_INFO_NULL, 0, half, &inter));
    } else {
        if (hrank == 0) OK(MPI_Lookup_name(service, MPI_INFO_NULL, found));
        OK(MPI_Comm_connect(found, MPI_INFO_NULL, 0, half, &inter));
    }
    /* Rank 0 of each side swaps a value with the other's rank 0. */
    if (hrank == 0) {
        MPI_Status st;
        OK(MPI_Sendrecv(&wrank, 1, MPI_INT, 0, 3, &x, 1, MPI_INT, 0, 3, inter, &st));
        EXPECT(x == (server ? size / 2 : 0) && st.MPI_SOURCE == 0);
    }
    OK(MPI_Comm_compare(inter, half, &result));
    EXPECT(result == MPI_UNEQUAL);
    /* Servers (the low world ranks) first. */
    merged(inter, !server, wrank, size);
    if (server && hrank == 0) {
        OK(MPI_Unpublish_name(service, MPI_INFO_NULL, port));
        OK(MPI_Close_port(port));
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (!server && hrank == 0) {
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        EXPECT(MPI_Lookup_name(service, MPI_INFO_NULL, found) == MPI_ERR_NAME);
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    }
    OK(MPI_Comm_disconnect(&inter));
    OK(MPI_Comm_free(&half));
    printf("ports rank %d of %d OK (%s)\n", wrank, size, server ? "accept" : "connect");
}

int main(int argc, char **argv) {
    int size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 2 && (strcmp(argv[1], "child") == 0 || strcmp(argv[1], "spawn") == 0))
        root = atoi(argv[2]);
    if (argc > 1 && strcmp(argv[1], "child") == 0)
        child();
    else if (argc > 1 && strcmp(argv[1], "ports") == 0)
        ports(size);
    else
        spawn(argv[0], size);
    MPI_Finalize();
    return 0;
}
