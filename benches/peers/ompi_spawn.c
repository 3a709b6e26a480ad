/* ompi_spawn.c -- the MPI reference for `rivet-bench dynamic`: the time of
 * MPI_Comm_spawn of N children, and of spawn + disconnect until the
 * children have exited.
 *
 *   mpirun.openmpi -n 1 ompi_spawn 1,4,16 REPS [HANG_SECONDS]   (parent)
 *   (children are this program again, started by MPI_Comm_spawn with the
 *    argument "child")
 *
 * First one warm-up spawn of 1 child (printed as "warmup 1 0 ..."), then
 * for each N in the list, REPS times: a barrier over MPI_COMM_WORLD, then on every parent
 *   t0 = MPI_Wtime(); MPI_Comm_spawn(argv[0], {"child"}, N, ..., root 0);
 *   t1 = MPI_Wtime();                       -- spawn: call to return
 * the root receives each child's pid (one int from every child), all
 * parents MPI_Comm_disconnect, and the root waits until every child pid is
 * gone or a zombie (/proc/PID/stat, polled every 50 us):
 *   t2 = MPI_Wtime();                       -- exited: t0 to all children exited
 * The root prints one line per spawn:
 *   spawn N REP SPAWN_SECONDS EXITED_SECONDS     (warmup 1 0 ... for the first)
 * after a comment header ('#'). Exit code 0 when every spawn succeeded;
 * a failed spawn prints "error ..." and aborts.
 *
 * Hangs: Debian's Open MPI 4.1.4 with its external PMIx 4.2 now and then
 * hangs in MPI_Comm_spawn (the parent waits in PMIx_Lookup, the children
 * in MPI_Init; openpmix/openpmix#2735 lists this pairing as hanging). A
 * spawn cycle (spawn to children exited) still running after HANG_SECONDS
 * (default 60) makes the root print "hang N REP HANG_SECONDS" ("hang
 * warmup 1 ..." for the warm-up) and every parent _exit(3), so mpirun ends
 * the job instead of waiting forever.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#define PID_TAG 77

/* What the alarm handler writes (prepared before each spawn) and when. */
static char hang_msg[96];
static size_t hang_len;
static int hang_seconds = 60;

static void on_alarm(int sig)
{
    (void)sig;
    if (hang_len > 0 && write(STDOUT_FILENO, hang_msg, hang_len) < 0)
        _exit(4);
    _exit(3);
}

/* Arm the hang alarm for one spawn cycle; rep < 0 is the warm-up. */
static void arm(int rank, int n, int rep)
{
    int len = rep < 0 ? snprintf(hang_msg, sizeof hang_msg, "hang warmup %d %d\n", n, hang_seconds)
                      : snprintf(hang_msg, sizeof hang_msg, "hang %d %d %d\n", n, rep, hang_seconds);
    hang_len = rank == 0 && len > 0 ? (size_t)len : 0;
    alarm((unsigned)hang_seconds);
}

static int child_gone(int pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *paren = strrchr(buf, ')');
    if (!paren || paren[1] == 0 || paren[2] == 0)
        return 1;
    return paren[2] == 'Z' || paren[2] == 'X';
}

static void wait_gone(const int *pids, int n)
{
    struct timespec nap = {0, 50000};
    for (int i = 0; i < n; i++)
        while (!child_gone(pids[i]))
            nanosleep(&nap, NULL);
}

static void run_child(MPI_Comm parent)
{
    int rank, pid = (int)getpid();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Send(&pid, 1, MPI_INT, 0, PID_TAG, parent);
    MPI_Comm_disconnect(&parent);
}

/* One spawn of n children; returns 0 and the times, or the MPI error. */
static int one_spawn(const char *self, int n, int rep, int rank, double *spawn_s, double *exited_s)
{
    char *child_argv[] = {"child", NULL};
    int *errcodes = malloc(sizeof(int) * n);
    int *pids = malloc(sizeof(int) * n);
    MPI_Comm inter;
    MPI_Barrier(MPI_COMM_WORLD);
    arm(rank, n, rep);
    double t0 = MPI_Wtime();
    int rc = MPI_Comm_spawn(self, child_argv, n, MPI_INFO_NULL, 0, MPI_COMM_WORLD,
                            &inter, errcodes);
    double t1 = MPI_Wtime();
    if (rc != MPI_SUCCESS) {
        alarm(0);
        free(errcodes);
        free(pids);
        return rc;
    }
    if (rank == 0)
        for (int i = 0; i < n; i++)
            MPI_Recv(&pids[i], 1, MPI_INT, i, PID_TAG, inter, MPI_STATUS_IGNORE);
    MPI_Comm_disconnect(&inter);
    if (rank == 0)
        wait_gone(pids, n);
    double t2 = MPI_Wtime();
    alarm(0);
    *spawn_s = t1 - t0;
    *exited_s = t2 - t0;
    free(errcodes);
    free(pids);
    return MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm parent;
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        run_child(parent);
        MPI_Finalize();
        return 0;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: %s N1,N2,... REPS [HANG_SECONDS]\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int rank, size, reps = atoi(argv[2]);
    if (argc > 3 && atoi(argv[3]) > 0)
        hang_seconds = atoi(argv[3]);
    signal(SIGALRM, on_alarm);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rank == 0) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len;
        MPI_Get_library_version(lib, &len);
        char *nl = strchr(lib, '\n');
        if (nl)
            *nl = 0;
        printf("# Library: %s\n# parents: %d\n", lib, size);
        printf("# spawn N REP SPAWN_SECONDS EXITED_SECONDS\n");
        fflush(stdout);
    }
    double s, e;
    int rc = one_spawn(argv[0], 1, -1, rank, &s, &e); /* warm-up, reported apart */
    if (rc == MPI_SUCCESS && rank == 0) {
        printf("warmup 1 0 %.6f %.6f\n", s, e);
        fflush(stdout);
    }
    char list[256];
    snprintf(list, sizeof list, "%s", argv[1]);
    for (char *tok = strtok(list, ","); rc == MPI_SUCCESS && tok; tok = strtok(NULL, ",")) {
        int n = atoi(tok);
        for (int r = 0; r < reps && rc == MPI_SUCCESS; r++) {
            rc = one_spawn(argv[0], n, r, rank, &s, &e);
            if (rc == MPI_SUCCESS && rank == 0) {
                printf("spawn %d %d %.6f %.6f\n", n, r, s, e);
                fflush(stdout);
            }
        }
    }
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len;
        MPI_Error_string(rc, msg, &len);
        if (rank == 0)
            printf("error MPI_Comm_spawn: %s\n", msg);
        fflush(stdout);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    return 0;
}
