/* Start-up, finalize, abort, errors and error handlers, the environment
 * queries, attributes, and the slot tables every handle lives in. */
#define _GNU_SOURCE
#include "impl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

rivet_engine_t *g_engine;
int g_initialized, g_finalized, g_level, g_ready;
struct comm *g_world;
rivet_comm_t *g_world_p2p;
pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
struct slots g_comms = {{0}, sizeof(struct comm), 1, 0, 0};
struct slots g_reqs = {{0}, sizeof(struct req), 1, 0, 0};
struct slots g_msgs = {{0}, sizeof(struct msg), 1, 0, 0};

int slot_alloc(struct slots *t) {
    int idx;
    lock();
    if (t->free_head) {
        idx = t->free_head;
        t->free_head = *(int *)slot_at(t, idx);
    } else {
        idx = t->next_unused;
        if (idx / CHUNK >= CHUNKS) {
            unlock();
            return -1;
        }
        if (!t->chunk[idx / CHUNK]) {
            t->chunk[idx / CHUNK] = calloc(CHUNK, t->elem);
            if (!t->chunk[idx / CHUNK]) {
                unlock();
                return -1;
            }
        }
        t->next_unused++;
    }
    __atomic_store_n(&t->live, t->live + 1, __ATOMIC_RELAXED);
    unlock();
    return idx; /* the caller initialises the whole entry */
}

void slot_free(struct slots *t, int idx) {
    lock();
    /* Enough to read as free: the link, then the in-use word (comm's
     * in_use, req's state, msg's handle all lie in the first 16 bytes). */
    memset(slot_at(t, idx), 0, 16);
    *(int *)slot_at(t, idx) = t->free_head;
    t->free_head = idx;
    __atomic_store_n(&t->live, t->live - 1, __ATOMIC_RELAXED);
    unlock();
}

static void slots_drop(struct slots *t) {
    int i;
    for (i = 0; i < CHUNKS; i++) {
        free(t->chunk[i]);
        t->chunk[i] = NULL;
    }
    t->next_unused = 1;
    t->free_head = 0;
    t->live = 0;
}

/* Whether this thread's last failure came from librivet (so that
 * rivet_last_error() describes it, and is not an older failure's). */
static __thread int rivet_failed;

int from_rivet_err(int rc) {
    rivet_failed = 1;
    switch (rc) {
    case RIVET_ERR_INVALID_ARG: return MPI_ERR_ARG;
    case RIVET_ERR_RANK: return MPI_ERR_RANK;
    case RIVET_ERR_TAG: return MPI_ERR_TAG;
    case RIVET_ERR_TRUNCATE: return MPI_ERR_TRUNCATE;
    case RIVET_ERR_PORT: return MPI_ERR_PORT;
    case RIVET_ERR_SPAWN: return MPI_ERR_SPAWN;
    case RIVET_ERR_UNSUPPORTED: return MPI_ERR_UNSUPPORTED_OPERATION;
    case RIVET_ERR_NOT_FOUND: return MPI_ERR_NAME;
    case RIVET_ERR_IN_STATUS: return MPI_ERR_IN_STATUS;
    case RIVET_ERR_PANIC: return MPI_ERR_INTERN;
    default: return MPI_ERR_OTHER;
    }
}

static const char *class_text(int code) {
    switch (code) {
    case MPI_SUCCESS: return "MPI_SUCCESS: no error";
    case MPI_ERR_BUFFER: return "MPI_ERR_BUFFER: invalid buffer pointer";
    case MPI_ERR_COUNT: return "MPI_ERR_COUNT: invalid count";
    case MPI_ERR_TYPE: return "MPI_ERR_TYPE: invalid datatype (only predefined ones)";
    case MPI_ERR_TAG: return "MPI_ERR_TAG: invalid tag";
    case MPI_ERR_COMM: return "MPI_ERR_COMM: invalid communicator";
    case MPI_ERR_RANK: return "MPI_ERR_RANK: invalid rank";
    case MPI_ERR_ROOT: return "MPI_ERR_ROOT: invalid root";
    case MPI_ERR_GROUP: return "MPI_ERR_GROUP: invalid group";
    case MPI_ERR_OP: return "MPI_ERR_OP: invalid operation for this datatype";
    case MPI_ERR_ARG: return "MPI_ERR_ARG: invalid argument";
    case MPI_ERR_UNKNOWN: return "MPI_ERR_UNKNOWN: unknown error";
    case MPI_ERR_TRUNCATE: return "MPI_ERR_TRUNCATE: message truncated";
    case MPI_ERR_OTHER: return "MPI_ERR_OTHER: error in the communication engine";
    case MPI_ERR_INTERN: return "MPI_ERR_INTERN: internal error";
    case MPI_ERR_IN_STATUS: return "MPI_ERR_IN_STATUS: see the statuses";
    case MPI_ERR_PENDING: return "MPI_ERR_PENDING: request pending";
    case MPI_ERR_REQUEST: return "MPI_ERR_REQUEST: invalid request";
    case MPI_ERR_CONVERSION:
        return "MPI_ERR_CONVERSION: a value does not fit its external32 size (IMPI)";
    case MPI_ERR_INFO: return "MPI_ERR_INFO: invalid info (only MPI_INFO_NULL)";
    case MPI_ERR_NAME: return "MPI_ERR_NAME: service name not published";
    case MPI_ERR_NO_MEM: return "MPI_ERR_NO_MEM: out of memory";
    case MPI_ERR_PORT: return "MPI_ERR_PORT: invalid port name or connection failed";
    case MPI_ERR_SERVICE: return "MPI_ERR_SERVICE: invalid service name";
    case MPI_ERR_SPAWN: return "MPI_ERR_SPAWN: spawn failed";
    case MPI_ERR_UNSUPPORTED_OPERATION:
        return "MPI_ERR_UNSUPPORTED_OPERATION: not supported here";
    default: return NULL;
    }
}

int raise_fail(MPI_Comm comm, int code, const char *fn) {
    struct comm *c;
    MPI_Errhandler eh = MPI_ERRORS_ARE_FATAL;
    const char *text;
    char msg[1024];
    if (code == MPI_SUCCESS) return code;
    c = comm_get(comm);
    if (!c) c = comm_get(MPI_COMM_WORLD);
    if (c) eh = c->eh;
    if (eh == MPI_ERRORS_RETURN) {
        rivet_failed = 0;
        return code;
    }
    text = class_text(code);
    snprintf(msg, sizeof msg, "%s failed: %s%s%s", fn, text ? text : "unknown error code",
             rivet_failed ? "; " : "", rivet_failed ? rivet_last_error() : "");
    rivet_failed = 0;
    fprintf(stderr, "rivet-mpi: %s (MPI_ERRORS_ARE_FATAL)\n", msg);
    fflush(stderr);
    if (g_engine && !g_finalized) rivet_abort(g_engine, code, msg);
    exit(code);
}

/* Started by MPI_Init* (under rivetrun, Hydra, or alone). */
static int init(int required, int *provided) {
    int rc, got = 0;
    if (g_initialized) return raise_err(MPI_COMM_NULL, MPI_ERR_OTHER, "MPI_Init");
    if (required < MPI_THREAD_SINGLE || required > MPI_THREAD_MULTIPLE)
        required = MPI_THREAD_MULTIPLE;
    rc = rivet_init(RIVET_API_VERSION, required, &g_engine, &got);
    if (rc != RIVET_SUCCESS) {
        fprintf(stderr, "rivet-mpi: MPI_Init failed: %s (%s)\n", rivet_strerror(rc),
                rivet_last_error());
        exit(1);
    }
    g_level = got;
    g_initialized = 1;
    g_ready = 1;
    if (provided) *provided = got;
    rc = comm_setup_world();
    if (rc != MPI_SUCCESS) return raise_err(MPI_COMM_WORLD, rc, "MPI_Init");
    g_world = comm_get(MPI_COMM_WORLD);
    /* The point-to-point fast path only while no world peer runs under
     * another IMPI client: data to those is converted (the slow path). */
    g_world_p2p = g_world && !g_world->foreign ? g_world->p2p : NULL;
    return MPI_SUCCESS;
}

int MPI_Init(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return init(MPI_THREAD_SINGLE, NULL);
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    (void)argc;
    (void)argv;
    return init(required, provided);
}

int MPI_Query_thread(int *provided) {
    if (!provided) return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Query_thread");
    *provided = g_level;
    return MPI_SUCCESS;
}

int MPI_Initialized(int *flag) {
    if (!flag) return MPI_ERR_ARG;
    *flag = g_initialized;
    return MPI_SUCCESS;
}

int MPI_Finalized(int *flag) {
    if (!flag) return MPI_ERR_ARG;
    *flag = g_finalized;
    return MPI_SUCCESS;
}

int MPI_Finalize(void) {
    int i, rc;
    if (NOT_INIT()) return raise_err(MPI_COMM_NULL, MPI_ERR_OTHER, "MPI_Finalize");
    g_ready = 0;
    g_world = NULL;
    g_world_p2p = NULL;
    conv_finalize();
    /* Every communicator still held goes (world and self last). */
    for (i = g_comms.next_unused - 1; i >= 1; i--) {
        struct comm *c = slot_at(&g_comms, i);
        if (c && c->in_use) comm_release(KIND_COMM | (i - 1), 0);
    }
    rc = rivet_finalize(g_engine);
    g_engine = NULL;
    g_finalized = 1;
    slots_drop(&g_comms);
    slots_drop(&g_reqs);
    slots_drop(&g_msgs);
    req_forget_all();
    if (rc != RIVET_SUCCESS) {
        fprintf(stderr, "rivet-mpi: MPI_Finalize: %s (%s)\n", rivet_strerror(rc),
                rivet_last_error());
        return MPI_ERR_OTHER;
    }
    return MPI_SUCCESS;
}

int MPI_Abort(MPI_Comm comm, int errorcode) {
    char msg[64];
    (void)comm;
    snprintf(msg, sizeof msg, "MPI_Abort with code %d", errorcode);
    fflush(stdout);
    if (g_engine && !g_finalized) rivet_abort(g_engine, errorcode, msg);
    fprintf(stderr, "rivet-mpi: %s\n", msg);
    exit(errorcode);
}

int MPI_Get_version(int *version, int *subversion) {
    if (!version || !subversion) return MPI_ERR_ARG;
    *version = MPI_VERSION;
    *subversion = MPI_SUBVERSION;
    return MPI_SUCCESS;
}

static int put_string(const char *s, char *out, int max, int *len) {
    int n = (int)strlen(s);
    if (!out || !len) return MPI_ERR_ARG;
    if (n > max - 1) n = max - 1;
    memcpy(out, s, (size_t)n);
    out[n] = 0;
    *len = n;
    return MPI_SUCCESS;
}

int MPI_Get_library_version(char *version, int *resultlen) {
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    snprintf(text, sizeof text,
             "Rivet MPI layer (librivetmpi) " RIVETMPI_VERSION
             ", MPI %d.%d subset, on librivet API %d",
             MPI_VERSION, MPI_SUBVERSION, RIVET_API_VERSION);
    return put_string(text, version, MPI_MAX_LIBRARY_VERSION_STRING, resultlen);
}

int MPI_Get_processor_name(char *name, int *resultlen) {
    char host[MPI_MAX_PROCESSOR_NAME];
    if (gethostname(host, sizeof host) != 0) strcpy(host, "unknown");
    host[sizeof host - 1] = 0;
    return put_string(host, name, MPI_MAX_PROCESSOR_NAME, resultlen);
}

double MPI_Wtime(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

double MPI_Wtick(void) {
    struct timespec t;
    if (clock_getres(CLOCK_MONOTONIC, &t) != 0) return 1e-9;
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int MPI_Error_string(int errorcode, char *string, int *resultlen) {
    const char *text = class_text(errorcode);
    if (!text) {
        if (string && resultlen)
            put_string("unknown error code", string, MPI_MAX_ERROR_STRING, resultlen);
        return MPI_ERR_ARG;
    }
    return put_string(text, string, MPI_MAX_ERROR_STRING, resultlen);
}

int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler) {
    struct comm *c;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    c = comm_get(comm);
    if (!c) return raise_err(MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Comm_set_errhandler");
    if (errhandler != MPI_ERRORS_RETURN && errhandler != MPI_ERRORS_ARE_FATAL)
        return raise_err(comm, MPI_ERR_ARG, "MPI_Comm_set_errhandler");
    c->eh = errhandler;
    return MPI_SUCCESS;
}

int MPI_Comm_get_attr(MPI_Comm comm, int keyval, void *attribute_val, int *flag) {
    static int tag_ub = INT_MAX, universe = -1, appnum = -1, wtime_global = 0;
    int a, u, rc;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (!comm_get(comm)) return raise_err(MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Comm_get_attr");
    if (!attribute_val || !flag) return raise_err(comm, MPI_ERR_ARG, "MPI_Comm_get_attr");
    *flag = 1;
    switch (keyval) {
    case MPI_TAG_UB: *(int **)attribute_val = &tag_ub; break;
    case MPI_WTIME_IS_GLOBAL: *(int **)attribute_val = &wtime_global; break;
    case MPI_UNIVERSE_SIZE:
    case MPI_APPNUM:
        rc = rivet_job_attrs(g_engine, &a, &u);
        if (rc != RIVET_SUCCESS) return raise_err(comm, from_rivet(rc), "MPI_Comm_get_attr");
        universe = u;
        appnum = a;
        /* -1: the process manager has no value; the attribute is unset. */
        if ((keyval == MPI_APPNUM ? a : u) < 0) {
            *flag = 0;
            break;
        }
        *(int **)attribute_val = keyval == MPI_APPNUM ? &appnum : &universe;
        break;
    default: *flag = 0; return raise_err(comm, MPI_ERR_ARG, "MPI_Comm_get_attr");
    }
    return MPI_SUCCESS;
}

int MPI_Alloc_mem(MPI_Aint size, MPI_Info info, void *baseptr) {
    void *p;
    if (info != MPI_INFO_NULL) return raise_err(MPI_COMM_WORLD, MPI_ERR_INFO, "MPI_Alloc_mem");
    if (size < 0 || !baseptr) return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Alloc_mem");
    p = malloc(size ? (size_t)size : 1);
    if (!p) return raise_err(MPI_COMM_WORLD, MPI_ERR_NO_MEM, "MPI_Alloc_mem");
    *(void **)baseptr = p;
    return MPI_SUCCESS;
}

int MPI_Free_mem(void *base) {
    free(base);
    return MPI_SUCCESS;
}
