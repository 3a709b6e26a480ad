/* Internal state of librivetmpi, shared by its C files. Everything here
 * goes through rivet.h only: this layer is librivet's first C consumer. */
#ifndef RIVETMPI_IMPL_H
#define RIVETMPI_IMPL_H

/* The MPI_* calls are the library's only exports (it is built with
 * -fvisibility=hidden); internal names carry a prefix, so that linking
 * librivetmpi.a cannot clash with a program's own functions. */
#pragma GCC visibility push(default)
#include <mpi.h>
#pragma GCC visibility pop
#include <rivet.h>

#define lock rmpi_lock
#define unlock rmpi_unlock
#define slot_at rmpi_slot_at
#define slot_alloc rmpi_slot_alloc
#define slot_free rmpi_slot_free
#define from_rivet_err rmpi_from_rivet_err
#define raise_fail rmpi_raise_fail
#define comm_get rmpi_comm_get
#define comm_new rmpi_comm_new
#define comm_release rmpi_comm_release
#define comm_setup_world rmpi_comm_setup_world
#define comm_make_inter rmpi_comm_make_inter
#define reduce_apply rmpi_reduce_apply
#define coll_bcast rmpi_coll_bcast
#define coll_reduce rmpi_coll_reduce
#define coll_gather rmpi_coll_gather
#define coll_allgather rmpi_coll_allgather
#define status_from rmpi_status_from
#define status_null rmpi_status_null
#define status_empty rmpi_status_empty
#define req_get rmpi_req_get
#define req_done rmpi_req_done
#define req_comm_grow rmpi_req_comm_grow
#define req_comm rmpi_req_comm
#define req_forget_all rmpi_req_forget_all
#define g_engine rmpi_g_engine
#define g_initialized rmpi_g_initialized
#define g_finalized rmpi_g_finalized
#define g_level rmpi_g_level
#define g_lock rmpi_g_lock
#define g_comms rmpi_g_comms
#define g_reqs rmpi_g_reqs
#define g_msgs rmpi_g_msgs
#define g_parent rmpi_g_parent
#define g_my_gid rmpi_g_my_gid
#define g_ready rmpi_g_ready
#define g_world rmpi_g_world
#define ext32_size rmpi_ext32_size
#define conv_wanted rmpi_conv_wanted
#define coll_converts rmpi_coll_converts
#define ext32_bcast rmpi_ext32_bcast
#define ext32_gather rmpi_ext32_gather
#define ext32_scatter rmpi_ext32_scatter
#define ext32_alltoall rmpi_ext32_alltoall
#define conv_send rmpi_conv_send
#define conv_recv rmpi_conv_recv
#define conv_start rmpi_conv_start
#define conv_settle rmpi_conv_settle
#define conv_cancel rmpi_conv_cancel
#define conv_detach rmpi_conv_detach
#define conv_sendrecv rmpi_conv_sendrecv
#define conv_probed rmpi_conv_probed
#define conv_finalize rmpi_conv_finalize
#define ext32_is_native rmpi_ext32_is_native
#define ext32_pack rmpi_ext32_pack
#define ext32_unpack rmpi_ext32_unpack
#define g_world_p2p rmpi_g_world_p2p
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Everything declared below is the layer's own: hidden, so that the code
 * reaches its globals and functions directly, not through the GOT (a
 * declaration is default-visible under -fvisibility=hidden otherwise). */
#pragma GCC visibility push(hidden)

/* Handle kinds: the top byte of an int handle (MPICH-like values). */
#define KIND_MASK 0xff000000
#define KIND_COMM 0x44000000
#define KIND_TYPE 0x4c000000
#define KIND_OP 0x58000000
#define KIND_REQ 0x2c000000
#define KIND_MSG 0x6c000000

/* Slot tables: fixed chunks, so an entry never moves (other threads may
 * read one while the table grows). Index 0 is never handed out. */
#define CHUNK 1024
#define CHUNKS 1024
struct slots {
    void *chunk[CHUNKS];
    size_t elem;
    int next_unused; /* first index never used */
    int free_head;   /* a free list through the entries' first int */
    int live;        /* entries in use (changed under g_lock; read without) */
};
/* The entry at `idx`, or NULL outside the table (inline: every call with
 * a handle looks one up). */
static inline void *slot_at(struct slots *t, int idx) {
    char *chunk;
    if (idx <= 0 || idx >= t->next_unused) return NULL;
    chunk = t->chunk[idx / CHUNK];
    return chunk ? chunk + (size_t)(idx % CHUNK) * t->elem : NULL;
}
int slot_alloc(struct slots *t); /* -1 when full or out of memory */
void slot_free(struct slots *t, int idx);

/* A communicator: user traffic on `p2p`, the layer's own collectives on
 * `coll` (another context id, so they never match user messages: for
 * communicators the engine made by dup or split, its collective context,
 * the seed's cid + 1). */
struct comm {
    int next_free; /* slot free list; 0 while in use */
    int in_use;
    rivet_comm_t *p2p, *coll;
    int rank, size;
    int remote_size;  /* -1: an intracommunicator */
    /* Per rank sent to (the remote group's of an intercommunicator): 1 if
     * it runs under another IMPI client, whose user data travels as
     * external32 (external32.c); NULL when no peer does. */
    unsigned char *foreign;
    MPI_Errhandler eh;
    uint64_t *gids;   /* process ids of the local group, in rank order */
    uint64_t *rgids;  /* of the remote group (intercommunicators) */
};

/* A request the layer holds itself: one already complete when MPI sees
 * it (MPI_PROC_NULL), or completed by librivet inside MPI_Testall before
 * the others. Every other MPI_Request is librivet's own handle. */
struct req {
    int next_free;
    int state; /* REQ_* */
    MPI_Comm comm; /* whose error handler applies */
    MPI_Status st; /* the completed status */
    /* REQ_CONV (foreign.c): librivet's request, and what to do at its end. */
    MPI_Request inner;
    int what;        /* CONV_* */
    void *buf, *tmp; /* the user's buffer; the wire copy (freed at the end) */
    int count;
    MPI_Datatype type;
};
/* REQ_CONV: converting data to or from another IMPI client, librivet's
 * part running; REQ_DETACHED: the same, freed by MPI_Request_free. */
enum { REQ_FREE = 0, REQ_DONE = 2, REQ_CONV = 3, REQ_DETACHED = 4 };
enum { CONV_SEND, CONV_SSEND, CONV_RECV };

struct msg {
    int next_free;
    MPI_Comm comm;
    rivet_message_t m;
};

/* Global state (init.c). */
extern rivet_engine_t *g_engine;
extern int g_initialized, g_finalized, g_level;
/* 1 from MPI_Init* until MPI_Finalize: the one load every call checks. */
extern int g_ready;
extern pthread_mutex_t g_lock; /* taken around table changes at MULTIPLE */
extern struct slots g_comms, g_reqs, g_msgs;
extern MPI_Comm g_parent;
extern uint64_t g_my_gid;
static inline void lock(void) {
    if (g_level == MPI_THREAD_MULTIPLE) pthread_mutex_lock(&g_lock);
}
static inline void unlock(void) {
    if (g_level == MPI_THREAD_MULTIPLE) pthread_mutex_unlock(&g_lock);
}

/* Errors (init.c): map a rivet code, and raise one on a communicator. */
int from_rivet_err(int rc);
/* librivet's code as an MPI error class (success inline: the hot path). */
static inline int from_rivet(int rc) {
    return rc == RIVET_SUCCESS ? MPI_SUCCESS : from_rivet_err(rc);
}
/* Raise `code` on `comm` (its error handler: return it, or abort). */
int raise_fail(MPI_Comm comm, int code, const char *fn);
/* `code` as the call's return, raised first unless it is success (inline:
 * every call ends here, and success must cost no call). */
static inline int raise_err(MPI_Comm comm, int code, const char *fn) {
    return code == MPI_SUCCESS ? MPI_SUCCESS : raise_fail(comm, code, fn);
}
#define NOT_INIT() (!g_ready)

/* Communicators (comm.c). MPI_COMM_WORLD's entry, set once it exists and
 * cleared at MPI_Finalize: the common handle needs no table walk. */
extern struct comm *g_world;
/* Its user-traffic handle, set and cleared with it: the point-to-point
 * fast paths need this one pointer (one load, not two). */
extern rivet_comm_t *g_world_p2p;
/* The handle's communicator, or NULL if it is not a live one (inline:
 * every call looks one up). */
static inline struct comm *comm_get(MPI_Comm h) {
    struct comm *c;
    if (h == MPI_COMM_WORLD && g_world) return g_world;
    if ((h & KIND_MASK) != KIND_COMM) return NULL;
    c = (struct comm *)slot_at(&g_comms, (h & ~KIND_MASK) + 1);
    return c && c->in_use ? c : NULL;
}
MPI_Comm comm_new(rivet_comm_t *p2p, rivet_comm_t *coll, int remote_size);
void comm_release(MPI_Comm h, int disconnect);
int comm_setup_world(void);
int comm_make_inter(MPI_Comm local, rivet_comm_t *p2p, MPI_Comm *out);
/* Whether user data to `peer` of `c` travels as external32. */
static inline int is_foreign(const struct comm *c, int peer) {
    return c->foreign && peer >= 0 && c->foreign[peer];
}

/* Datatypes and operations (reduce.c). The native layout of the pair
 * types (MPI_FLOAT_INT, MPI_DOUBLE_INT, ...), for reductions and external32. */
struct pair_f { float v; int k; };
struct pair_d { double v; int k; };
struct pair_l { long v; int k; };
struct pair_i { int v; int k; };
struct pair_s { short v; int k; };
struct pair_ld { long double v; int k; };
#define NTYPES 0x25
#define type_sizes rmpi_type_sizes
extern const int type_sizes[NTYPES];
/* Bytes of one element, or -1 if `t` is not a predefined type. One
 * compare: the kind and the index range at once (index 0 wraps high). */
static inline int type_size(MPI_Datatype t) {
    unsigned idx = (unsigned)t - (unsigned)KIND_TYPE;
    if (idx - 1u >= (unsigned)NTYPES - 1u) return -1;
    return type_sizes[idx];
}
int reduce_apply(MPI_Op op, MPI_Datatype t, const void *in, void *inout, size_t n);

/* external32, user data to and from other IMPI clients (external32.c). */
int ext32_size(MPI_Datatype t);      /* wire bytes of one element; -1: no type */
int ext32_is_native(MPI_Datatype t); /* 1: one byte, the same either way */
/* `n` elements of `t` from native `in` to wire `out` (MPI_ERR_CONVERSION
 * for a value that does not fit its wire size, nothing truncated). */
int ext32_pack(MPI_Datatype t, const void *in, size_t n, void *out);
/* From wire `in` to native `out`; `in` may be `out` (in place). */
int ext32_unpack(MPI_Datatype t, const void *in, size_t n, void *out);

/* Collectives over `coll` (coll.c), also used by the layer itself. */
int coll_bcast(struct comm *c, void *buf, size_t bytes, int root);
int coll_reduce(struct comm *c, const void *in, void *out, size_t count, MPI_Datatype t,
                MPI_Op op, int root);
int coll_gather(struct comm *c, const void *in, size_t bytes, void *out, int root);
int coll_allgather(struct comm *c, const void *in, size_t bytes, void *out);

/* The same across IMPI clients, as external32 (coll_ext32.c). */
int coll_converts(const struct comm *c, MPI_Datatype t); /* 1: convert `t` on `c` */
/* `ok` 0 at the root: fail everywhere (the root could not produce it). */
int ext32_bcast(struct comm *c, void *buf, int count, MPI_Datatype t, int root, int ok);
/* Gather (or, with `all`, all-gather) `n` elements per rank. */
int ext32_gather(struct comm *c, const void *sendbuf, int n, MPI_Datatype t, void *recvbuf,
                 int root, int all);
int ext32_scatter(struct comm *c, MPI_Comm comm, const void *sendbuf, void *recvbuf, int n,
                  MPI_Datatype t, int root);
int ext32_alltoall(struct comm *c, MPI_Comm comm, const void *sendbuf, void *recvbuf, int n,
                   MPI_Datatype t);

/* Statuses and requests (p2p.c, request.c). */
void status_from(MPI_Status *out, const rivet_status_t *in);
void status_null(MPI_Status *st);  /* of an operation with MPI_PROC_NULL */
void status_empty(MPI_Status *st); /* of MPI_REQUEST_NULL */
/* MPI_Request values: 0 is null; librivet's handles have a non-zero low
 * word (slot index + 1, or all ones: complete at once); the layer's own
 * are its slot index in the high word, the low word 0. */
static inline int req_is_layer(MPI_Request h) {
    return h != 0 && (h & 0xffffffffu) == 0;
}

/* The layer's request behind `h`, or NULL. */
static inline struct req *req_get(MPI_Request h) {
    struct req *r;
    if (!req_is_layer(h) || (h >> 32) > 0x7fffffffu) return NULL;
    r = (struct req *)slot_at(&g_reqs, (int)(h >> 32));
    return r && r->state != REQ_FREE ? r : NULL;
}

/* A complete request the layer holds, with status `st`
 * (MPI_REQUEST_NULL when out of memory). */
MPI_Request req_done(MPI_Comm comm, const MPI_Status *st);

/* The communicator a librivet request was started on (its error handler
 * applies), by librivet's slot index. Only requests on another
 * communicator than MPI_COMM_WORLD are recorded, with their handle: an
 * entry counts only for the very handle it holds (librivet's handles are
 * generation-checked, so the slot's next request never matches it), and a
 * request without one is on MPI_COMM_WORLD. So the common case, traffic
 * on MPI_COMM_WORLD, costs one compare here. */
struct rc_entry {
    MPI_Request h;
    MPI_Comm comm;
};
void req_comm_grow(MPI_Request h, MPI_Comm comm); /* allocates the chunk */
#define RC_CHUNK 4096
#define RC_CHUNKS 256
#define rc_chunk rmpi_rc_chunk
extern struct rc_entry *rc_chunk[RC_CHUNKS];
/* Inline: every isend and irecv records its communicator. */
static inline void req_comm_set(MPI_Request h, MPI_Comm comm) {
    uint64_t idx = (h & 0xffffffffu) - 1;
    struct rc_entry *chunk;
    if (comm == MPI_COMM_WORLD) return;
    if (idx >= (uint64_t)RC_CHUNK * RC_CHUNKS) return; /* complete at once, or huge */
    chunk = __atomic_load_n(&rc_chunk[idx / RC_CHUNK], __ATOMIC_ACQUIRE);
    if (chunk) {
        chunk[idx % RC_CHUNK].comm = comm;
        chunk[idx % RC_CHUNK].h = h;
    } else {
        req_comm_grow(h, comm);
    }
}
MPI_Comm req_comm(MPI_Request h);
void req_forget_all(void); /* at MPI_Finalize */
/* Point to point with peers under other IMPI clients (foreign.c). */
/* 1 if data of `t` to or from `peer` (or MPI_ANY_SOURCE) of `c` converts. */
int conv_wanted(const struct comm *c, MPI_Datatype t, int peer);
int conv_send(struct comm *c, int sync, const void *buf, int count, MPI_Datatype t, int dest,
              int tag);
/* A blocking receive, of matched message `m` when it is not NULL. */
int conv_recv(struct comm *c, void *buf, int count, MPI_Datatype t, int source, int tag,
              rivet_message_t *m, MPI_Status *status);
/* A nonblocking CONV_* as a layer request (REQ_CONV) in `*request`. */
int conv_start(struct comm *c, MPI_Comm comm, int what, void *buf, int count, MPI_Datatype t,
               int peer, int tag, MPI_Request *request);
/* Complete a REQ_CONV request if librivet's has (or, with `block`, once
 * it has): `*flag` 1 and the request REQ_DONE; any other request is done. */
int conv_settle(struct req *r, int block, int *flag);
int conv_cancel(struct req *r);
void conv_detach(struct req *r); /* MPI_Request_free: completed later */
int conv_sendrecv(struct comm *c, MPI_Comm comm, const void *sendbuf, int sendcount,
                  MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf, int recvcount,
                  MPI_Datatype recvtype, int source, int recvtag, MPI_Status *status);
/* A probe's status from another client counts wire bytes: marked so in
 * its cancelled word, which MPI_Get_count reads. */
#define STATUS_EXT32 2
void conv_probed(const struct comm *c, MPI_Status *st);
void conv_finalize(void);

/* Bytes of `count` elements of `t`, or an error class. */
static inline int bytes_of(int count, MPI_Datatype t, size_t *out) {
    int size = type_size(t);
    if (size < 0) return MPI_ERR_TYPE;
    if (count < 0) return MPI_ERR_COUNT;
    *out = (size_t)count * (size_t)size;
    return MPI_SUCCESS;
}

#pragma GCC visibility pop
#endif
