/*
 * A PMI-1 program in C that uses only pmi.h, linked against librivet-pmi.
 * Run by tests/tests/pmi_capi.rs under rivetrun, mpiexec.hydra and alone.
 *
 * pmi_c_check [check]   error codes before init; init; rank, size, appnum,
 *                       universe; KVS limits, put/commit/barrier/get of every
 *                       rank's value and the bad-argument codes; the node's
 *                       ranks (clique); name publish/lookup/unpublish;
 *                       topology queries; the unsupported calls; finalize.
 * pmi_c_check spawn     as check, then rank 0 spawns two copies of this
 *                       program ("child") with a pre-put value.
 * pmi_c_check spawnbad  rank 0 spawns a program that does not exist and
 *                       must get PMI_FAIL with a non-zero error code.
 * pmi_c_check abort     the last rank calls PMI_Abort(7, ...), the others
 *                       wait in a barrier.
 *
 * Every rank prints "pmi_c_check OK rank R of N" at the end; any unexpected
 * return code prints "FAILED" with the line and exits 1.
 */
#include <pmi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int my_rank = -1;

static void fail(int line, const char *what, int got, int want)
{
    fprintf(stderr, "pmi_c_check rank %d: FAILED at line %d: %s returned %d, wanted %d\n",
            my_rank, line, what, got, want);
    exit(1);
}

#define EXPECT(call, want)                                  \
    do {                                                    \
        int rc_ = (call);                                   \
        if (rc_ != (want))                                  \
            fail(__LINE__, #call, rc_, (want));             \
    } while (0)

#define OK(call) EXPECT(call, PMI_SUCCESS)

#define CHECK(cond)                                         \
    do {                                                    \
        if (!(cond))                                        \
            fail(__LINE__, #cond, 0, 1);                    \
    } while (0)

static void before_init(void)
{
    int flag = -1, x = 0;
    OK(PMI_Initialized(&flag));
    CHECK(flag == PMI_FALSE);
    EXPECT(PMI_Initialized(NULL), PMI_ERR_INVALID_ARG);
    EXPECT(PMI_Get_rank(&x), PMI_ERR_INIT);
    EXPECT(PMI_Get_size(&x), PMI_ERR_INIT);
    EXPECT(PMI_Barrier(), PMI_ERR_INIT);
    EXPECT(PMI_Finalize(), PMI_ERR_INIT);
    EXPECT(PMI_KVS_Put("kvs", "key", "value"), PMI_ERR_INIT);
    EXPECT(PMI_Init(NULL), PMI_ERR_INVALID_ARG);
}

static void kvs(int rank, int size, const char *kvsname, int keymax, int valmax)
{
    char key[64], want[64];
    char *value = malloc((size_t)valmax + 1);
    char *long_key = malloc((size_t)keymax + 2);
    char *long_val = malloc((size_t)valmax + 2);
    CHECK(value && long_key && long_val);
    memset(long_key, 'k', (size_t)keymax + 1);
    long_key[keymax + 1] = '\0';
    memset(long_val, 'v', (size_t)valmax + 1);
    long_val[valmax + 1] = '\0';

    snprintf(key, sizeof key, "capi-%d", rank);
    snprintf(want, sizeof want, "value-of-rank-%d", rank);
    OK(PMI_KVS_Put(kvsname, key, want));
    EXPECT(PMI_KVS_Put(NULL, key, want), PMI_ERR_INVALID_KVS);
    EXPECT(PMI_KVS_Put("no-such-kvs", key, want), PMI_ERR_INVALID_KVS);
    EXPECT(PMI_KVS_Put(kvsname, NULL, want), PMI_ERR_INVALID_KEY);
    EXPECT(PMI_KVS_Put(kvsname, "", want), PMI_ERR_INVALID_KEY);
    EXPECT(PMI_KVS_Put(kvsname, "PMI_mine", want), PMI_ERR_INVALID_KEY);
    EXPECT(PMI_KVS_Put(kvsname, "bad\nkey", want), PMI_ERR_INVALID_KEY);
    EXPECT(PMI_KVS_Put(kvsname, key, NULL), PMI_ERR_INVALID_VAL);
    EXPECT(PMI_KVS_Put(kvsname, key, "two\nlines"), PMI_ERR_INVALID_VAL);
    EXPECT(PMI_KVS_Put(kvsname, long_key, want), PMI_ERR_INVALID_KEY_LENGTH);
    EXPECT(PMI_KVS_Put(kvsname, key, long_val), PMI_ERR_INVALID_VAL_LENGTH);
    OK(PMI_KVS_Commit(kvsname));
    EXPECT(PMI_KVS_Commit(NULL), PMI_ERR_INVALID_ARG);
    OK(PMI_Barrier());

    for (int r = 0; r < size; r++) {
        snprintf(key, sizeof key, "capi-%d", r);
        snprintf(want, sizeof want, "value-of-rank-%d", r);
        OK(PMI_KVS_Get(kvsname, key, value, valmax));
        if (strcmp(value, want) != 0) {
            fprintf(stderr, "pmi_c_check rank %d: FAILED: %s is '%s', wanted '%s'\n",
                    rank, key, value, want);
            exit(1);
        }
    }
    snprintf(key, sizeof key, "capi-%d", (rank + 1) % size);
    EXPECT(PMI_KVS_Get(kvsname, key, value, 4), PMI_ERR_INVALID_LENGTH);
    EXPECT(PMI_KVS_Get(kvsname, key, value, 0), PMI_ERR_INVALID_LENGTH);
    EXPECT(PMI_KVS_Get(kvsname, key, NULL, valmax), PMI_ERR_INVALID_VAL);
    EXPECT(PMI_KVS_Get(kvsname, NULL, value, valmax), PMI_ERR_INVALID_KEY);
    EXPECT(PMI_KVS_Get(kvsname, "", value, valmax), PMI_ERR_INVALID_KEY);
    EXPECT(PMI_KVS_Get(NULL, key, value, valmax), PMI_ERR_INVALID_KVS);
    EXPECT(PMI_KVS_Get(kvsname, "capi-never-put", value, valmax), PMI_FAIL);
    EXPECT(PMI_KVS_Get(kvsname, long_key, value, valmax), PMI_ERR_INVALID_KEY_LENGTH);

    OK(PMI_KVS_Get(kvsname, "PMI_process_mapping", value, valmax));
    printf("mapping rank %d %s\n", rank, value);
    free(value);
    free(long_key);
    free(long_val);
}

static void clique(int rank)
{
    int n = 0, ranks[64];
    OK(PMI_Get_clique_size(&n));
    CHECK(n >= 1 && n <= 64);
    EXPECT(PMI_Get_clique_size(NULL), PMI_ERR_INVALID_ARG);
    EXPECT(PMI_Get_clique_ranks(ranks, n - 1), PMI_ERR_INVALID_LENGTH);
    EXPECT(PMI_Get_clique_ranks(NULL, n), PMI_ERR_INVALID_ARG);
    OK(PMI_Get_clique_ranks(ranks, 64));
    int mine = 0;
    printf("clique rank %d size %d ranks", rank, n);
    for (int i = 0; i < n; i++) {
        printf("%s%d", i ? "," : " ", ranks[i]);
        mine += ranks[i] == rank;
    }
    printf("\n");
    CHECK(mine == 1);
}

static void names(int rank, const char *kvsname)
{
    char service[512], want[512], port[PMI_MAX_PORT_NAME];
    snprintf(service, sizeof service, "pmi-c-check-%s", kvsname);
    snprintf(want, sizeof want, "port-of-%s", kvsname);
    if (rank == 0) {
        OK(PMI_Publish_name(service, want));
        EXPECT(PMI_Publish_name(NULL, want), PMI_ERR_INVALID_ARG);
        EXPECT(PMI_Publish_name(service, NULL), PMI_ERR_INVALID_ARG);
    }
    OK(PMI_Barrier());
    OK(PMI_Lookup_name(service, port));
    CHECK(strcmp(port, want) == 0);
    EXPECT(PMI_Lookup_name(service, NULL), PMI_ERR_INVALID_ARG);
    EXPECT(PMI_Lookup_name(NULL, port), PMI_ERR_INVALID_ARG);
    OK(PMI_Barrier());
    if (rank == 0) {
        OK(PMI_Unpublish_name(service));
        EXPECT(PMI_Unpublish_name(NULL), PMI_ERR_INVALID_ARG);
    }
    OK(PMI_Barrier());
    EXPECT(PMI_Lookup_name(service, port), PMI_FAIL);
}

static void topology(int rank, int size)
{
    int kind = -1, levels = 0, cluster[8], ranks[8], dims[8];
    OK(PMI_Topo_type(PMI_GROUP_WORLD, &kind));
    CHECK(kind == PMI_TOPO_NONE || kind == PMI_TOPO_CLUSTER || kind == PMI_TOPO_MESH);
    EXPECT(PMI_Topo_type(PMI_GROUP_WORLD, NULL), PMI_ERR_INVALID_ARG);
    EXPECT(PMI_Topo_type(PMI_GROUP_WORLD + 5, &kind), PMI_ERR_INVALID_ARG);
    printf("topo rank %d type %d", rank, kind);

    int rc = PMI_Topo_cluster_info(PMI_GROUP_WORLD, &levels, NULL, NULL);
    if (rc == PMI_ERR_UNSUPPORTED) {
        printf(" cluster unsupported");
    } else {
        EXPECT(rc, PMI_ERR_INVALID_LENGTH); /* asked for the count */
        CHECK(levels >= 1 && levels <= 8);
        int need = levels;
        levels = need - 1;
        EXPECT(PMI_Topo_cluster_info(PMI_GROUP_WORLD, &levels, cluster, ranks),
               PMI_ERR_INVALID_LENGTH);
        CHECK(levels == need);
        levels = 8;
        EXPECT(PMI_Topo_cluster_info(PMI_GROUP_WORLD, &levels, NULL, ranks),
               PMI_ERR_INVALID_ARG);
        EXPECT(PMI_Topo_cluster_info(PMI_GROUP_WORLD, NULL, cluster, ranks),
               PMI_ERR_INVALID_ARG);
        levels = 8;
        OK(PMI_Topo_cluster_info(PMI_GROUP_WORLD, &levels, cluster, ranks));
        CHECK(levels == need);
        printf(" cluster");
        for (int i = 0; i < levels; i++)
            printf("%s%d/%d", i ? "," : " ", cluster[i], ranks[i]);
    }

    rc = PMI_Topo_mesh_info(PMI_GROUP_WORLD, 8, dims);
    if (rc == PMI_ERR_UNSUPPORTED) {
        CHECK(kind != PMI_TOPO_MESH);
        printf(" mesh unsupported");
    } else {
        OK(rc);
        CHECK(kind == PMI_TOPO_MESH);
        int product = 1;
        for (int i = 0; i < 8; i++)
            product *= dims[i];
        CHECK(product == size);
        EXPECT(PMI_Topo_mesh_info(PMI_GROUP_WORLD, 0, dims), PMI_ERR_INVALID_LENGTH);
        EXPECT(PMI_Topo_mesh_info(PMI_GROUP_WORLD, 8, NULL), PMI_ERR_INVALID_ARG);
        printf(" mesh %dx%dx%d", dims[0], dims[1], dims[2]);
    }
    printf("\n");
}

static void unsupported(const char *kvsname)
{
    char a[64], b[64];
    EXPECT(PMI_KVS_Create(a, sizeof a), PMI_ERR_UNSUPPORTED);
    EXPECT(PMI_KVS_Destroy(kvsname), PMI_ERR_UNSUPPORTED);
    EXPECT(PMI_KVS_Iter_first(kvsname, a, sizeof a, b, sizeof b), PMI_ERR_UNSUPPORTED);
    EXPECT(PMI_KVS_Iter_next(kvsname, a, sizeof a, b, sizeof b), PMI_ERR_UNSUPPORTED);
    EXPECT(PMI_Resource_register("shm", NULL, NULL, NULL, NULL), PMI_ERR_UNSUPPORTED);
    EXPECT(PMI_Resource_release_begin("shm", 10), PMI_ERR_UNSUPPORTED);
    EXPECT(PMI_Resource_release_end("shm"), PMI_ERR_UNSUPPORTED);
}

static void spawn_bad_args(void)
{
    const char *cmds[1] = {"/bin/true"};
    int maxprocs[1] = {1}, errors[1] = {0};
    EXPECT(PMI_Spawn_multiple(0, cmds, NULL, maxprocs, NULL, NULL, 0, NULL, errors),
           PMI_ERR_INVALID_ARG);
    EXPECT(PMI_Spawn_multiple(1, NULL, NULL, maxprocs, NULL, NULL, 0, NULL, errors),
           PMI_ERR_INVALID_ARG);
    EXPECT(PMI_Spawn_multiple(1, cmds, NULL, NULL, NULL, NULL, 0, NULL, errors),
           PMI_ERR_INVALID_ARG);
    EXPECT(PMI_Spawn_multiple(1, cmds, NULL, maxprocs, NULL, NULL, 0, NULL, NULL),
           PMI_ERR_INVALID_ARG);
    maxprocs[0] = -1;
    EXPECT(PMI_Spawn_multiple(1, cmds, NULL, maxprocs, NULL, NULL, 0, NULL, errors),
           PMI_ERR_INVALID_ARG);
}

static void spawn_children(const char *self, int good)
{
    const char *child_args[] = {"child", NULL};
    const char **argvs[1] = {child_args};
    const char *cmds[1] = {good ? self : "/nonexistent/pmi_c_check_child"};
    int maxprocs[1] = {2}, errors[2] = {-5, -5};
    PMI_keyval_t info[1] = {{"wdir", "/"}};
    const PMI_keyval_t *infos[1] = {info};
    int info_sizes[1] = {1};
    PMI_keyval_t preput[1] = {{"capi_parent_said", "hello-child"}};
    int rc = PMI_Spawn_multiple(1, cmds, argvs, maxprocs, info_sizes, infos, 1, preput, errors);
    if (good) {
        OK(rc);
        CHECK(errors[0] == 0 && errors[1] == 0);
        printf("spawned 2 children\n");
    } else {
        EXPECT(rc, PMI_FAIL);
        CHECK(errors[0] != 0 && errors[1] != 0 && errors[0] != -5);
        printf("spawn refused, error codes %d %d\n", errors[0], errors[1]);
    }
}

static int child(void)
{
    int spawned = 0, rank = -1, size = 0, valmax = 0;
    char kvsname[256], value[256];
    OK(PMI_Init(&spawned));
    CHECK(spawned == PMI_TRUE);
    OK(PMI_Get_rank(&rank));
    my_rank = rank;
    OK(PMI_Get_size(&size));
    CHECK(size == 2);
    OK(PMI_KVS_Get_value_length_max(&valmax));
    OK(PMI_KVS_Get_my_name(kvsname, sizeof kvsname));
    OK(PMI_KVS_Get(kvsname, "capi_parent_said", value, sizeof value));
    CHECK(strcmp(value, "hello-child") == 0);
    OK(PMI_Barrier());
    printf("pmi_c_check child rank %d of %d parent said %s\n", rank, size, value);
    OK(PMI_Finalize());
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "check";
    int spawned = -1, rank = -1, size = 0, appnum = -2, universe = -2, again = -1;
    int namemax = 0, keymax = 0, valmax = 0, flag = -1;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(mode, "child") == 0)
        return child();

    before_init();
    OK(PMI_Init(&spawned));
    CHECK(spawned == PMI_FALSE);
    OK(PMI_Init(&again)); /* a second init only reports spawned */
    CHECK(again == PMI_FALSE);
    OK(PMI_Initialized(&flag));
    CHECK(flag == PMI_TRUE);
    OK(PMI_Get_rank(&rank));
    my_rank = rank;
    OK(PMI_Get_size(&size));
    CHECK(rank >= 0 && rank < size);
    OK(PMI_Get_appnum(&appnum));
    OK(PMI_Get_universe_size(&universe));
    EXPECT(PMI_Get_rank(NULL), PMI_ERR_INVALID_ARG);
    EXPECT(PMI_Get_size(NULL), PMI_ERR_INVALID_ARG);
    EXPECT(PMI_Get_appnum(NULL), PMI_ERR_INVALID_ARG);
    EXPECT(PMI_Get_universe_size(NULL), PMI_ERR_INVALID_ARG);

    OK(PMI_KVS_Get_name_length_max(&namemax));
    OK(PMI_KVS_Get_key_length_max(&keymax));
    OK(PMI_KVS_Get_value_length_max(&valmax));
    EXPECT(PMI_KVS_Get_name_length_max(NULL), PMI_ERR_INVALID_ARG);
    CHECK(namemax >= 16 && keymax >= 32 && valmax >= 64); /* the document's minima */
    char *kvsname = malloc((size_t)namemax);
    CHECK(kvsname != NULL);
    OK(PMI_KVS_Get_my_name(kvsname, namemax));
    EXPECT(PMI_KVS_Get_my_name(kvsname, 1), PMI_ERR_INVALID_LENGTH);
    EXPECT(PMI_KVS_Get_my_name(NULL, namemax), PMI_ERR_INVALID_ARG);
    printf("pmi_c_check rank %d of %d appnum %d universe %d kvs %s maxes %d %d %d\n",
           rank, size, appnum, universe, kvsname, namemax, keymax, valmax);

    if (strcmp(mode, "abort") == 0) {
        if (rank == size - 1)
            PMI_Abort(7, "pmi_c_check aborts on purpose");
        PMI_Barrier(); /* interrupted: the job ends */
        return 3;
    }

    kvs(rank, size, kvsname, keymax, valmax);
    clique(rank);
    names(rank, kvsname);
    topology(rank, size);
    unsupported(kvsname);
    spawn_bad_args();
    if (rank == 0 && strcmp(mode, "spawn") == 0)
        spawn_children(argv[0], 1);
    if (rank == 0 && strcmp(mode, "spawnbad") == 0)
        spawn_children(argv[0], 0);

    OK(PMI_Barrier());
    OK(PMI_Finalize());
    OK(PMI_Initialized(&flag));
    CHECK(flag == PMI_FALSE);
    EXPECT(PMI_Finalize(), PMI_ERR_INIT);
    EXPECT(PMI_Get_rank(&rank), PMI_ERR_INIT);
    EXPECT(PMI_Init(&spawned), PMI_FAIL); /* once per process */
    printf("pmi_c_check OK rank %d of %d\n", my_rank, size);
    free(kvsname);
    return 0;
}
