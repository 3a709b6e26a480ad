/* Point to point with peers under another IMPI client: user data goes as
 * external32 (external32.c). A send packs into a temporary buffer (a
 * nonblocking one owned by the request, freed at completion); a receive
 * lands in the user's buffer when the wire form is no larger (converted
 * in place), else in a temporary, and is converted once its source is
 * known, so MPI_ANY_SOURCE works and a peer of this client keeps its raw
 * bytes. The status then counts native bytes. A nonblocking operation
 * here is a layer request (REQ_CONV) around librivet's, completed by
 * request.c through conv_settle. p2p.c takes these paths only for a
 * communicator with such peers (c->foreign), a type of more than one
 * byte, and a foreign peer or MPI_ANY_SOURCE. */
#define _GNU_SOURCE
#include "impl.h"

#include <stdlib.h>
#include <string.h>

/* Layer requests freed by MPI_Request_free while librivet's still runs,
 * and the lock of their sweep (one thread at a time; others skip it). */
static int detached;
static pthread_mutex_t sweep_lock = PTHREAD_MUTEX_INITIALIZER;

int conv_wanted(const struct comm *c, MPI_Datatype t, int peer) {
    if (!c->foreign || type_size(t) < 0 || ext32_is_native(t)) return 0;
    return peer == MPI_ANY_SOURCE || is_foreign(c, peer);
}

/* Where a receive of `count` elements lands, and its length: the user's
 * buffer unless the wire form is larger (then a temporary, or NULL when
 * out of memory). */
static void *landing(void *buf, int count, MPI_Datatype t, size_t *len) {
    size_t ns = (size_t)type_size(t), es = (size_t)ext32_size(t);
    if (es <= ns) {
        *len = (size_t)count * ns;
        return buf;
    }
    *len = (size_t)count * es;
    return malloc(*len ? *len : 1);
}

/* After a receive into `into` (librivet's code `rc`, status `rst`):
 * convert or copy to `buf`, fix the count to native bytes. Returns the
 * MPI error class. */
static int received(const struct comm *c, void *buf, void *into, int count, MPI_Datatype t,
                    int rc, rivet_status_t *rst) {
    size_t ns = (size_t)type_size(t), es = (size_t)ext32_size(t), n;
    int err = from_rivet(rc);
    if (rc != RIVET_SUCCESS && rc != RIVET_ERR_TRUNCATE) return err;
    if (rst->cancelled) return err;
    if (is_foreign(c, rst->source)) {
        n = (size_t)rst->count / es;
        if ((size_t)rst->count % es != 0 || n > (size_t)count) {
            err = MPI_ERR_TRUNCATE;
            if (n > (size_t)count) n = (size_t)count;
        }
        rc = ext32_unpack(t, into, n, buf);
        if (rc != MPI_SUCCESS && err == MPI_SUCCESS) err = rc;
        rst->count = (uint64_t)(n * ns);
    } else {
        n = (size_t)rst->count;
        if (n > (size_t)count * ns) {
            err = MPI_ERR_TRUNCATE;
            n = (size_t)count * ns;
            rst->count = n;
        }
        if (into != buf) memcpy(buf, into, n);
    }
    return err;
}

/* `count` elements of `t` as external32 in a new buffer (`*out`, `*len`). */
static int packed(const void *buf, int count, MPI_Datatype t, void **out, size_t *len) {
    int rc;
    *len = (size_t)count * (size_t)ext32_size(t);
    *out = malloc(*len ? *len : 1);
    if (!*out) return MPI_ERR_NO_MEM;
    if ((rc = ext32_pack(t, buf, (size_t)count, *out)) != MPI_SUCCESS) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

int conv_send(struct comm *c, int sync, const void *buf, int count, MPI_Datatype t, int dest,
              int tag) {
    void *wire;
    size_t len;
    int rc = packed(buf, count, t, &wire, &len);
    if (rc != MPI_SUCCESS) return rc;
    rc = from_rivet(sync ? rivet_ssend(c->p2p, wire, len, dest, tag)
                         : rivet_send(c->p2p, wire, len, dest, tag));
    free(wire);
    return rc;
}

/* A blocking receive from a foreign client: `m` is a matched message
 * (MPI_Mrecv) or NULL for a receive by `source` and `tag`. */
int conv_recv(struct comm *c, void *buf, int count, MPI_Datatype t, int source, int tag,
              rivet_message_t *m, MPI_Status *status) {
    rivet_status_t rst;
    size_t len;
    void *into = landing(buf, count, t, &len);
    int rc;
    if (!into) return MPI_ERR_NO_MEM;
    memset(&rst, 0, sizeof rst);
    rc = m ? rivet_mrecv(g_engine, into, len, m, &rst)
           : rivet_recv(c->p2p, into, len, source, tag, &rst);
    rc = received(c, buf, into, count, t, rc, &rst);
    if (into != buf) free(into);
    if (status && status != MPI_STATUS_IGNORE && (rc == MPI_SUCCESS || rc == MPI_ERR_TRUNCATE ||
                                                  rc == MPI_ERR_CONVERSION)) {
        status_from(status, &rst);
        status->MPI_ERROR = rc;
    }
    return rc;
}

/* Free completed detached requests (their sends' buffers; their
 * receives are converted as they complete). */
static void sweep(void) {
    int i, flag;
    if (!__atomic_load_n(&detached, __ATOMIC_RELAXED) || pthread_mutex_trylock(&sweep_lock))
        return;
    for (i = 1; i < g_reqs.next_unused; i++) {
        struct req *r = slot_at(&g_reqs, i);
        if (r && r->state == REQ_DETACHED && conv_settle(r, 0, &flag) == MPI_SUCCESS && flag) {
            slot_free(&g_reqs, i);
            __atomic_fetch_sub(&detached, 1, __ATOMIC_RELAXED);
        }
    }
    pthread_mutex_unlock(&sweep_lock);
}

int conv_start(struct comm *c, MPI_Comm comm, int what, void *buf, int count, MPI_Datatype t,
               int peer, int tag, MPI_Request *request) {
    struct req *r;
    void *tmp = NULL;
    size_t len;
    int idx, rc;
    sweep();
    if (what != CONV_RECV) {
        if ((rc = packed(buf, count, t, &tmp, &len)) != MPI_SUCCESS) return rc;
    } else if (!(tmp = landing(buf, count, t, &len))) {
        return MPI_ERR_NO_MEM;
    }
    idx = slot_alloc(&g_reqs);
    if (idx < 0) {
        if (tmp != buf) free(tmp);
        return MPI_ERR_NO_MEM;
    }
    r = slot_at(&g_reqs, idx);
    *r = (struct req){0};
    r->comm = comm;
    r->what = what;
    r->buf = buf;
    r->tmp = tmp == buf ? NULL : tmp;
    r->count = count;
    r->type = t;
    if (what == CONV_SEND)
        rc = rivet_isend(c->p2p, tmp, len, peer, tag, &r->inner);
    else if (what == CONV_SSEND)
        rc = rivet_issend(c->p2p, tmp, len, peer, tag, &r->inner);
    else
        rc = rivet_irecv(c->p2p, tmp, len, peer, tag, &r->inner);
    if (rc != RIVET_SUCCESS) {
        free(r->tmp);
        slot_free(&g_reqs, idx);
        return from_rivet(rc);
    }
    r->state = REQ_CONV;
    *request = (MPI_Request)idx << 32;
    return MPI_SUCCESS;
}

int conv_settle(struct req *r, int block, int *flag) {
    rivet_status_t rst;
    struct comm *c;
    int rc;
    *flag = 1;
    if (r->state != REQ_CONV && r->state != REQ_DETACHED) return MPI_SUCCESS;
    memset(&rst, 0, sizeof rst);
    rc = block ? rivet_wait(g_engine, &r->inner, &rst)
               : rivet_test(g_engine, &r->inner, flag, &rst);
    if (!*flag) return MPI_SUCCESS;
    c = comm_get(r->comm);
    if (r->what == CONV_RECV && c) {
        rc = received(c, r->buf, r->tmp ? r->tmp : r->buf, r->count, r->type, rc, &rst);
        status_from(&r->st, &rst);
        r->st.MPI_ERROR = rc;
    } else {
        status_from(&r->st, &rst);
        if (rc != RIVET_SUCCESS) r->st.MPI_ERROR = from_rivet(rc);
    }
    free(r->tmp);
    r->tmp = NULL;
    if (r->state == REQ_CONV) r->state = REQ_DONE;
    return MPI_SUCCESS;
}

int conv_cancel(struct req *r) {
    return r->state == REQ_CONV ? from_rivet(rivet_cancel(g_engine, r->inner)) : MPI_SUCCESS;
}

void conv_detach(struct req *r) {
    r->state = REQ_DETACHED;
    __atomic_fetch_add(&detached, 1, __ATOMIC_RELAXED);
}

int conv_sendrecv(struct comm *c, MPI_Comm comm, const void *sendbuf, int sendcount,
                  MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf, int recvcount,
                  MPI_Datatype recvtype, int source, int recvtag, MPI_Status *status) {
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Status st;
    int rc = MPI_SUCCESS, wrc;
    (void)c;
    status_null(&st);
    /* The public calls convert (they raise on their own names). */
    if (source != MPI_PROC_NULL)
        rc = MPI_Irecv(recvbuf, recvcount, recvtype, source, recvtag, comm, &r);
    if (rc == MPI_SUCCESS && dest != MPI_PROC_NULL)
        rc = MPI_Send(sendbuf, sendcount, sendtype, dest, sendtag, comm);
    if (r != MPI_REQUEST_NULL) {
        if (rc != MPI_SUCCESS) MPI_Cancel(&r);
        wrc = MPI_Wait(&r, &st);
        if (rc == MPI_SUCCESS) rc = wrc;
    }
    if (status && status != MPI_STATUS_IGNORE) *status = st;
    return rc;
}

void conv_probed(const struct comm *c, MPI_Status *st) {
    if (c->foreign && is_foreign(c, st->MPI_SOURCE)) st->rivet_cancelled |= STATUS_EXT32;
}

/* At MPI_Finalize: what completed is freed; the rest goes with the
 * request table (a freed request still running then is the program's
 * error, as in MPI). */
void conv_finalize(void) {
    sweep();
    __atomic_store_n(&detached, 0, __ATOMIC_RELAXED);
}
