/* MPI's name service (MPI_Publish_name / MPI_Lookup_name /
 * MPI_Unpublish_name), results checked; built with Open MPI or MPICH.
 *
 *   mpi_names names SERVICE         (2+ ranks) rank 0 publishes SERVICE;
 *                                   after a barrier rank 1 finds its port,
 *                                   and cannot unpublish it (only the
 *                                   publisher may); rank 0 unpublishes it;
 *                                   rank 1's lookup then fails
 *   mpi_names publish SERVICE PORT  rank 0 publishes SERVICE at PORT and
 *                                   leaves it published
 *   mpi_names lookup SERVICE PORT   rank 0 finds SERVICE at PORT
 *
 * Prints "mpi_names MODE OK rank R of N" on success.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int wrank;

#define EXPECT(cond)                                                                     \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "rank %d: %s:%d: expected %s\n", wrank, __FILE__, __LINE__, \
                    #cond);                                                              \
            MPI_Abort(MPI_COMM_WORLD, 5);                                                \
        }                                                                                \
    } while (0)
#define OK(call) EXPECT((call) == MPI_SUCCESS)

static void names(const char *service, int size) {
    char port[MPI_MAX_PORT_NAME];
    const char *published = "rivet-test-port:42";
    int rc, cls;
    EXPECT(size >= 2);
    if (wrank == 0) {
        OK(MPI_Publish_name(service, MPI_INFO_NULL, published));
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (wrank == 1) {
        memset(port, 0, sizeof port);
        OK(MPI_Lookup_name(service, MPI_INFO_NULL, port));
        EXPECT(strcmp(port, published) == 0);
        /* Not the publisher: refused, and the name stays. */
        rc = MPI_Unpublish_name(service, MPI_INFO_NULL, port);
        EXPECT(rc != MPI_SUCCESS);
        MPI_Error_class(rc, &cls);
        printf("rank 1: unpublish by a non-publisher failed with error class %d\n", cls);
        memset(port, 0, sizeof port);
        OK(MPI_Lookup_name(service, MPI_INFO_NULL, port));
        EXPECT(strcmp(port, published) == 0);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (wrank == 0) {
        OK(MPI_Unpublish_name(service, MPI_INFO_NULL, published));
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (wrank == 1) {
        rc = MPI_Lookup_name(service, MPI_INFO_NULL, port);
        EXPECT(rc != MPI_SUCCESS);
        MPI_Error_class(rc, &cls);
        EXPECT(cls == MPI_ERR_NAME);
        printf("rank 1: lookup after unpublish failed with MPI_ERR_NAME\n");
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
}

int main(int argc, char **argv) {
    int size;
    char port[MPI_MAX_PORT_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (argc >= 3 && strcmp(argv[1], "names") == 0) {
        names(argv[2], size);
    } else if (argc >= 4 && strcmp(argv[1], "publish") == 0) {
        if (wrank == 0) {
            OK(MPI_Publish_name(argv[2], MPI_INFO_NULL, argv[3]));
        }
    } else if (argc >= 4 && strcmp(argv[1], "lookup") == 0) {
        if (wrank == 0) {
            memset(port, 0, sizeof port);
            OK(MPI_Lookup_name(argv[2], MPI_INFO_NULL, port));
            EXPECT(strcmp(port, argv[3]) == 0);
        }
    } else {
        if (wrank == 0) {
            fprintf(stderr, "usage: mpi_names names SERVICE | publish|lookup SERVICE PORT\n");
        }
        MPI_Finalize();
        return 2;
    }
    printf("mpi_names %s OK rank %d of %d\n", argv[1], wrank, size);
    MPI_Finalize();
    return 0;
}
