/* Point to point: sends, receives, probes and matched probes over a
 * communicator's user context, contiguous buffers of predefined types. */
#define _GNU_SOURCE
#include "impl.h"

void status_from(MPI_Status *out, const rivet_status_t *in) {
    out->MPI_SOURCE = in->source;
    out->MPI_TAG = in->tag;
    out->MPI_ERROR = from_rivet(in->error);
    out->rivet_cancelled = in->cancelled;
    out->rivet_count = (long long)in->count;
}

void status_null(MPI_Status *st) {
    st->MPI_SOURCE = MPI_PROC_NULL;
    st->MPI_TAG = MPI_ANY_TAG;
    st->MPI_ERROR = MPI_SUCCESS;
    st->rivet_cancelled = 0;
    st->rivet_count = 0;
}

void status_empty(MPI_Status *st) {
    status_null(st);
    st->MPI_SOURCE = MPI_ANY_SOURCE;
}

static void put_status(MPI_Status *out, const MPI_Status *st) {
    if (out != MPI_STATUS_IGNORE && out) *out = *st;
}

/* A communicator other than an up MPI_COMM_WORLD (out of line: the fast
 * path is MPI_COMM_WORLD's cached entry). Sets `c`; returns an error class. */
static int __attribute__((noinline)) check_comm(MPI_Comm comm, struct comm **c) {
    if (NOT_INIT()) return MPI_ERR_OTHER;
    *c = comm_get(comm);
    return *c ? MPI_SUCCESS : MPI_ERR_COMM;
}

/* The checks every p2p call makes: engine up, live communicator, buffer
 * size. Sets `c` and `len`; returns an error class. MPI_COMM_WORLD's
 * entry is cached only while the layer is up, so it answers the first
 * two at once; the type and the count are checked by one sign test. */
static inline __attribute__((always_inline)) int check(MPI_Comm comm, struct comm **c,
                                                       const void *buf, int count,
                                                       MPI_Datatype t, size_t *len) {
    int rc, size = type_size(t);
    if (comm == MPI_COMM_WORLD && g_world)
        *c = g_world;
    else if ((rc = check_comm(comm, c)) != MPI_SUCCESS)
        return rc;
    if ((size | count) < 0) return size < 0 ? MPI_ERR_TYPE : MPI_ERR_COUNT;
    *len = (size_t)count * (size_t)size;
    if (!buf && *len > 0) return MPI_ERR_BUFFER;
    return MPI_SUCCESS;
}

/* librivet's *_unchecked entries take no null buffer: an empty one is
 * passed as this dangling pointer, never dereferenced. */
#define EMPTY_BUF ((void *)(uintptr_t)1)

#define CHECKED(fn)                                                                       \
    do {                                                                                  \
        int rc_ = check(comm, &c, buf, count, datatype, &len);                           \
        if (rc_ != MPI_SUCCESS) return raise_err(c ? comm : MPI_COMM_WORLD, rc_, fn);     \
        if (!buf) buf = EMPTY_BUF;                                                        \
    } while (0)

/* The fast path of MPI_Send, MPI_Recv, MPI_Isend and MPI_Irecv: traffic on
 * an up MPI_COMM_WORLD, a predefined type, a count >= 0, a buffer that is
 * there (or empty), a real peer. Those are all the checks MPI asks of the
 * layer, made here once; librivet's *_unchecked entries then skip their
 * own (the engine still checks the rank's range and the tag). Everything
 * else, errors included, takes the general path. On success nothing is
 * left to do after librivet returns, so the call needs no saved state.
 * The buffer to pass is `*out` (`buf`, or EMPTY_BUF for an empty null
 * one: set only on that rare branch, so the common case pays nothing). */
static inline __attribute__((always_inline)) rivet_comm_t *fast(MPI_Comm comm, const void *buf,
                                                                int count, MPI_Datatype t,
                                                                int peer, size_t *len,
                                                                const void **out) {
    rivet_comm_t *p2p = g_world_p2p;
    unsigned idx = (unsigned)t - (unsigned)KIND_TYPE; /* as type_size(), whose sizes are > 0 */
    if (comm != MPI_COMM_WORLD || !p2p || idx - 1u >= (unsigned)NTYPES - 1u || count < 0 ||
        peer == MPI_PROC_NULL)
        return NULL;
    *len = (size_t)(unsigned)count * (size_t)(unsigned)type_sizes[idx];
    *out = buf;
    if (buf) return p2p;
    *out = EMPTY_BUF;
    return *len ? NULL : p2p;
}

/* librivet's failure on the fast path, raised on MPI_COMM_WORLD. */
static int __attribute__((noinline, cold)) fast_failed(int rc, const char *fn) {
    return raise_fail(MPI_COMM_WORLD, from_rivet_err(rc), fn);
}

enum { SEND, RSEND, SSEND };

/* The general path of the blocking sends: every check, any communicator. */
static int __attribute__((noinline)) send_slow(int what, const void *buf, int count,
                                               MPI_Datatype datatype, int dest, int tag,
                                               MPI_Comm comm, const char *fn) {
    struct comm *c = NULL;
    size_t len;
    CHECKED(fn);
    if (dest == MPI_PROC_NULL) return MPI_SUCCESS;
    if (conv_wanted(c, datatype, dest))
        return raise_err(comm, conv_send(c, what == SSEND, buf, count, datatype, dest, tag), fn);
    return raise_err(comm,
                     from_rivet(what == SSEND ? rivet_ssend(c->p2p, buf, len, dest, tag)
                                              : rivet_send_unchecked(c->p2p, buf, len, dest, tag)),
                     fn);
}

int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
             MPI_Comm comm) {
    size_t len;
    const void *b;
    rivet_comm_t *p2p = fast(comm, buf, count, datatype, dest, &len, &b);
    int rc;
    if (!p2p) return send_slow(SEND, buf, count, datatype, dest, tag, comm, "MPI_Send");
    rc = rivet_send_unchecked(p2p, b, len, dest, tag);
    return rc == RIVET_SUCCESS ? MPI_SUCCESS : fast_failed(rc, "MPI_Send");
}

/* A ready send may be sent as a standard one. */
int MPI_Rsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
              MPI_Comm comm) {
    return send_slow(RSEND, buf, count, datatype, dest, tag, comm, "MPI_Rsend");
}

int MPI_Ssend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
              MPI_Comm comm) {
    return send_slow(SSEND, buf, count, datatype, dest, tag, comm, "MPI_Ssend");
}

/* The general path of MPI_Recv: every check, any communicator. */
static int __attribute__((noinline)) recv_slow(void *buf, int count, MPI_Datatype datatype,
                                               int source, int tag, MPI_Comm comm,
                                               MPI_Status *status) {
    struct comm *c = NULL;
    size_t len;
    rivet_status_t rst;
    MPI_Status st;
    int rc;
    CHECKED("MPI_Recv");
    if (source == MPI_PROC_NULL) {
        status_null(&st);
        put_status(status, &st);
        return MPI_SUCCESS;
    }
    if (conv_wanted(c, datatype, source))
        return raise_err(comm, conv_recv(c, buf, count, datatype, source, tag, NULL, status), "MPI_Recv");
    if (status == MPI_STATUS_IGNORE || !status)
        return raise_err(
            comm, from_rivet(rivet_recv_unchecked(c->p2p, buf, len, source, tag, NULL)),
            "MPI_Recv");
    rc = from_rivet(rivet_recv_unchecked(c->p2p, buf, len, source, tag, &rst));
    /* librivet filled `rst` on success and truncation only. */
    if (rc == MPI_SUCCESS || rc == MPI_ERR_TRUNCATE) status_from(status, &rst);
    return raise_err(comm, rc, "MPI_Recv");
}

/* MPI_Status and rivet_status_t have one layout (this fails to compile
 * otherwise), so librivet fills a wanted status in place; only its error
 * is then turned into an MPI class (RIVET_SUCCESS is MPI_SUCCESS). */
typedef char rmpi_status_layout[(sizeof(MPI_Status) == sizeof(rivet_status_t) &&
                                 offsetof(MPI_Status, MPI_SOURCE) ==
                                     offsetof(rivet_status_t, source) &&
                                 offsetof(MPI_Status, MPI_TAG) == offsetof(rivet_status_t, tag) &&
                                 offsetof(MPI_Status, MPI_ERROR) ==
                                     offsetof(rivet_status_t, error) &&
                                 offsetof(MPI_Status, rivet_cancelled) ==
                                     offsetof(rivet_status_t, cancelled) &&
                                 offsetof(MPI_Status, rivet_count) ==
                                     offsetof(rivet_status_t, count) &&
                                 sizeof(long long) == sizeof(uint64_t) && RIVET_SUCCESS == 0 &&
                                 MPI_SUCCESS == 0)
                                    ? 1
                                    : -1];

/* MPI_Recv's fast path with a status wanted (out of line: the status
 * pointer, live across the call, would cost the ignored case a saved
 * register). */
static int __attribute__((noinline)) recv_status(rivet_comm_t *p2p, void *buf, size_t len,
                                                 int source, int tag, MPI_Status *status) {
    int rc = rivet_recv_unchecked(p2p, buf, len, source, tag, (rivet_status_t *)(void *)status);
    /* Filled on success and on truncation only (other failures leave it
     * untouched). */
    if (rc == RIVET_ERR_TRUNCATE) status->MPI_ERROR = from_rivet(status->MPI_ERROR);
    return rc == RIVET_SUCCESS ? MPI_SUCCESS : fast_failed(rc, "MPI_Recv");
}

int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
             MPI_Status *status) {
    size_t len;
    const void *b;
    rivet_comm_t *p2p = fast(comm, buf, count, datatype, source, &len, &b);
    int rc;
    if (!p2p) return recv_slow(buf, count, datatype, source, tag, comm, status);
    if (status != MPI_STATUS_IGNORE && status)
        return recv_status(p2p, (void *)(uintptr_t)b, len, source, tag, status);
    rc = rivet_recv_unchecked(p2p, (void *)(uintptr_t)b, len, source, tag, NULL);
    return rc == RIVET_SUCCESS ? MPI_SUCCESS : fast_failed(rc, "MPI_Recv");
}

enum { ISEND, ISSEND, IRECV };

/* The general path of the nonblocking starts: every check, any
 * communicator, MPI_PROC_NULL. */
static int __attribute__((noinline)) start_slow(int what, void *buf, int count,
                                                MPI_Datatype datatype, int peer, int tag,
                                                MPI_Comm comm, MPI_Request *request,
                                                const char *fn) {
    struct comm *c = NULL;
    size_t len;
    int rc;
    CHECKED(fn);
    if (!request) return raise_err(comm, MPI_ERR_ARG, fn);
    if (peer == MPI_PROC_NULL) {
        MPI_Status st;
        status_null(&st);
        *request = req_done(comm, &st);
        return *request == MPI_REQUEST_NULL ? raise_err(comm, MPI_ERR_NO_MEM, fn) : MPI_SUCCESS;
    }
    if (conv_wanted(c, datatype, peer)) {
        *request = MPI_REQUEST_NULL;
        return raise_err(comm,
                         conv_start(c, comm, what == IRECV ? CONV_RECV : what == ISSEND ? CONV_SSEND : CONV_SEND,
                                    buf, count, datatype, peer, tag, request),
                         fn);
    }
    /* The MPI request is librivet's handle itself (null if it failed). */
    if (what == ISEND)
        rc = rivet_isend_unchecked(c->p2p, buf, len, peer, tag, request);
    else if (what == ISSEND)
        rc = rivet_issend(c->p2p, buf, len, peer, tag, request);
    else
        rc = rivet_irecv_unchecked(c->p2p, buf, len, peer, tag, request);
    if (rc != RIVET_SUCCESS) {
        *request = MPI_REQUEST_NULL;
        return raise_err(comm, from_rivet(rc), fn);
    }
    if (comm != MPI_COMM_WORLD) req_comm_set(*request, comm); /* world's need no note */
    return MPI_SUCCESS;
}

int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
              MPI_Comm comm, MPI_Request *request) {
    size_t len;
    const void *b;
    rivet_comm_t *p2p = fast(comm, buf, count, datatype, dest, &len, &b);
    int rc;
    if (!p2p || !request)
        return start_slow(ISEND, (void *)(uintptr_t)buf, count, datatype, dest, tag, comm,
                          request, "MPI_Isend");
    /* The MPI request is librivet's handle itself (null if it failed). */
    rc = rivet_isend_unchecked(p2p, b, len, dest, tag, request);
    return rc == RIVET_SUCCESS ? MPI_SUCCESS : fast_failed(rc, "MPI_Isend");
}

int MPI_Issend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
               MPI_Comm comm, MPI_Request *request) {
    return start_slow(ISSEND, (void *)(uintptr_t)buf, count, datatype, dest, tag, comm, request,
                      "MPI_Issend");
}

int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag,
              MPI_Comm comm, MPI_Request *request) {
    size_t len;
    const void *b;
    rivet_comm_t *p2p = fast(comm, buf, count, datatype, source, &len, &b);
    int rc;
    if (!p2p || !request)
        return start_slow(IRECV, buf, count, datatype, source, tag, comm, request, "MPI_Irecv");
    rc = rivet_irecv_unchecked(p2p, (void *)(uintptr_t)b, len, source, tag, request);
    return rc == RIVET_SUCCESS ? MPI_SUCCESS : fast_failed(rc, "MPI_Irecv");
}

int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest,
                 int sendtag, void *recvbuf, int recvcount, MPI_Datatype recvtype, int source,
                 int recvtag, MPI_Comm comm, MPI_Status *status) {
    struct comm *c = NULL;
    size_t slen, rlen;
    rivet_request_t r = RIVET_REQUEST_NULL;
    rivet_status_t rst;
    MPI_Status st;
    int rc;
    if ((rc = check(comm, &c, sendbuf, sendcount, sendtype, &slen)) != MPI_SUCCESS ||
        (rc = check(comm, &c, recvbuf, recvcount, recvtype, &rlen)) != MPI_SUCCESS)
        return raise_err(c ? comm : MPI_COMM_WORLD, rc, "MPI_Sendrecv");
    if (conv_wanted(c, sendtype, dest) || conv_wanted(c, recvtype, source))
        return raise_err(comm,
                         conv_sendrecv(c, comm, sendbuf, sendcount, sendtype, dest, sendtag, recvbuf,
                                       recvcount, recvtype, source, recvtag, status),
                         "MPI_Sendrecv");
    status_null(&st);
    if (source != MPI_PROC_NULL)
        rc = from_rivet(rivet_irecv(c->p2p, recvbuf, rlen, source, recvtag, &r));
    if (rc == MPI_SUCCESS && dest != MPI_PROC_NULL)
        rc = from_rivet(rivet_send(c->p2p, sendbuf, slen, dest, sendtag));
    if (r != RIVET_REQUEST_NULL) {
        if (rc != MPI_SUCCESS) rivet_cancel(g_engine, r);
        int wrc = from_rivet(rivet_wait(g_engine, &r, &rst));
        if (rc == MPI_SUCCESS) {
            rc = wrc;
            status_from(&st, &rst);
        }
    }
    put_status(status, &st);
    return raise_err(comm, rc, "MPI_Sendrecv");
}

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status *status) {
    struct comm *c = comm_get(comm);
    rivet_status_t rst;
    MPI_Status st;
    int rc;
    if (NOT_INIT() || !c) return raise_err(MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Probe");
    if (source == MPI_PROC_NULL) {
        status_null(&st);
        put_status(status, &st);
        return MPI_SUCCESS;
    }
    rc = from_rivet(rivet_probe(c->p2p, source, tag, &rst));
    if (rc == MPI_SUCCESS) {
        status_from(&st, &rst);
        conv_probed(c, &st);
        put_status(status, &st);
    }
    return raise_err(comm, rc, "MPI_Probe");
}

int MPI_Iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status) {
    struct comm *c = comm_get(comm);
    rivet_status_t rst;
    MPI_Status st;
    int rc;
    if (NOT_INIT() || !c) return raise_err(MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Iprobe");
    if (!flag) return raise_err(comm, MPI_ERR_ARG, "MPI_Iprobe");
    if (source == MPI_PROC_NULL) {
        *flag = 1;
        status_null(&st);
        put_status(status, &st);
        return MPI_SUCCESS;
    }
    rc = from_rivet(rivet_iprobe(c->p2p, source, tag, flag, &rst));
    if (rc == MPI_SUCCESS && *flag) {
        status_from(&st, &rst);
        conv_probed(c, &st);
        put_status(status, &st);
    }
    return raise_err(comm, rc, "MPI_Iprobe");
}

int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status) {
    struct comm *c = comm_get(comm);
    struct msg *m;
    rivet_status_t rst;
    MPI_Status st;
    int rc, idx;
    if (NOT_INIT() || !c) return raise_err(MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Mprobe");
    if (!message) return raise_err(comm, MPI_ERR_ARG, "MPI_Mprobe");
    if (source == MPI_PROC_NULL) {
        *message = MPI_MESSAGE_NO_PROC;
        status_null(&st);
        put_status(status, &st);
        return MPI_SUCCESS;
    }
    idx = slot_alloc(&g_msgs);
    if (idx < 0) return raise_err(comm, MPI_ERR_NO_MEM, "MPI_Mprobe");
    m = slot_at(&g_msgs, idx);
    *m = (struct msg){0};
    m->comm = comm;
    rc = from_rivet(rivet_mprobe(c->p2p, source, tag, &m->m, &rst));
    if (rc != MPI_SUCCESS) {
        slot_free(&g_msgs, idx);
        return raise_err(comm, rc, "MPI_Mprobe");
    }
    status_from(&st, &rst);
    conv_probed(c, &st);
    put_status(status, &st);
    *message = KIND_MSG | idx;
    return MPI_SUCCESS;
}

int MPI_Mrecv(void *buf, int count, MPI_Datatype datatype, MPI_Message *message,
              MPI_Status *status) {
    struct msg *m;
    rivet_status_t rst;
    MPI_Status st;
    MPI_Comm comm;
    size_t len;
    int rc, idx;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (!message) return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Mrecv");
    if (*message == MPI_MESSAGE_NO_PROC) {
        *message = MPI_MESSAGE_NULL;
        status_null(&st);
        put_status(status, &st);
        return MPI_SUCCESS;
    }
    idx = *message & ~KIND_MASK;
    m = (*message & KIND_MASK) == KIND_MSG ? slot_at(&g_msgs, idx) : NULL;
    if (!m || !m->m) return raise_err(MPI_COMM_WORLD, MPI_ERR_REQUEST, "MPI_Mrecv");
    comm = m->comm;
    if ((rc = bytes_of(count, datatype, &len)) != MPI_SUCCESS)
        return raise_err(comm, rc, "MPI_Mrecv");
    if (!buf && len > 0) return raise_err(comm, MPI_ERR_BUFFER, "MPI_Mrecv");
    if (comm_get(comm) && conv_wanted(comm_get(comm), datatype, MPI_ANY_SOURCE)) {
        status_null(&st);
        rc = conv_recv(comm_get(comm), buf, count, datatype, MPI_ANY_SOURCE, MPI_ANY_TAG, &m->m,
                       &st);
        slot_free(&g_msgs, idx);
        *message = MPI_MESSAGE_NULL;
        put_status(status, &st);
        return raise_err(comm, rc, "MPI_Mrecv");
    }
    rc = from_rivet(rivet_mrecv(g_engine, buf, len, &m->m, &rst));
    slot_free(&g_msgs, idx);
    *message = MPI_MESSAGE_NULL;
    status_from(&st, &rst);
    put_status(status, &st);
    return raise_err(comm, rc, "MPI_Mrecv");
}

int MPI_Get_count(const MPI_Status *status, MPI_Datatype datatype, int *count) {
    int size = type_size(datatype);
    if (size < 0) return raise_err(MPI_COMM_WORLD, MPI_ERR_TYPE, "MPI_Get_count");
    if (!status || status == MPI_STATUS_IGNORE || !count)
        return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Get_count");
    if (status->rivet_cancelled & STATUS_EXT32) size = ext32_size(datatype); /* a probe's */
    if (status->rivet_count % size != 0 || status->rivet_count / size > 0x7fffffff)
        *count = MPI_UNDEFINED;
    else
        *count = (int)(status->rivet_count / size);
    return MPI_SUCCESS;
}

int MPI_Test_cancelled(const MPI_Status *status, int *flag) {
    if (!status || status == MPI_STATUS_IGNORE || !flag)
        return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Test_cancelled");
    *flag = status->rivet_cancelled & 1;
    return MPI_SUCCESS;
}
