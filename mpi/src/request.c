/* Completing requests: wait, test and their any/all/some forms, cancel,
 * free. An MPI_Request is librivet's own handle (so a window of requests
 * goes to librivet as it is, untranslated), or one the layer holds: a
 * request complete from the start (MPI_PROC_NULL), or one librivet
 * completed inside MPI_Testall while others were not yet done (MPI hands
 * nothing back until all are), with its status saved. */
#define _GNU_SOURCE
#include "impl.h"

#include <stdlib.h>
#include <string.h>

/* The communicator of each librivet request not on MPI_COMM_WORLD, by
 * librivet's slot index (the inline fast path is in impl.h). */
struct rc_entry *rc_chunk[RC_CHUNKS];

void req_comm_grow(MPI_Request h, MPI_Comm comm) {
    uint64_t idx = (h & 0xffffffffu) - 1;
    struct rc_entry *chunk;
    lock();
    chunk = rc_chunk[idx / RC_CHUNK];
    if (!chunk && (chunk = calloc(RC_CHUNK, sizeof *chunk)) != NULL)
        __atomic_store_n(&rc_chunk[idx / RC_CHUNK], chunk, __ATOMIC_RELEASE);
    unlock();
    if (chunk) {
        chunk[idx % RC_CHUNK].comm = comm;
        chunk[idx % RC_CHUNK].h = h;
    }
}

void req_forget_all(void) {
    int i;
    for (i = 0; i < RC_CHUNKS; i++) {
        free(rc_chunk[i]);
        rc_chunk[i] = NULL;
    }
}

MPI_Comm req_comm(MPI_Request h) {
    uint64_t idx = (h & 0xffffffffu) - 1;
    struct rc_entry *chunk;
    struct req *r = req_get(h);
    if (r) return r->comm;
    if (req_is_layer(h) || idx >= (uint64_t)RC_CHUNK * RC_CHUNKS) return MPI_COMM_WORLD;
    chunk = __atomic_load_n(&rc_chunk[idx / RC_CHUNK], __ATOMIC_ACQUIRE);
    return chunk && chunk[idx % RC_CHUNK].h == h ? chunk[idx % RC_CHUNK].comm : MPI_COMM_WORLD;
}

MPI_Request req_done(MPI_Comm comm, const MPI_Status *st) {
    struct req *r;
    int idx = slot_alloc(&g_reqs);
    if (idx < 0) return MPI_REQUEST_NULL;
    r = slot_at(&g_reqs, idx);
    *r = (struct req){0};
    r->state = REQ_DONE;
    r->comm = comm;
    r->st = *st;
    return (MPI_Request)idx << 32;
}

static int ignored(const MPI_Status *st) {
    return st == MPI_STATUS_IGNORE || !st;
}

static void put_status(MPI_Status *out, const MPI_Status *st) {
    if (!ignored(out)) *out = *st;
}

static MPI_Status *nth(MPI_Status *array, int i) {
    return ignored(array) ? MPI_STATUS_IGNORE : &array[i];
}

/* Hand back a layer request: its status to `out`, the slot freed, the
 * handle nulled. Returns its error class. */
static int finish(MPI_Request *h, MPI_Status *out) {
    struct req *r = req_get(*h);
    int rc = r->st.MPI_ERROR;
    put_status(out, &r->st);
    slot_free(&g_reqs, (int)(*h >> 32));
    *h = MPI_REQUEST_NULL;
    return rc;
}

/* librivet's answer about a handle: a stale or foreign one is MPI's
 * "invalid request". */
static int request_rc(int rc) {
    return rc == RIVET_ERR_INVALID_ARG ? MPI_ERR_REQUEST : from_rivet(rc);
}

static int bad(const char *fn) {
    return raise_err(MPI_COMM_WORLD, MPI_ERR_REQUEST, fn);
}

int MPI_Wait(MPI_Request *request, MPI_Status *status) {
    rivet_status_t rst;
    MPI_Comm comm;
    MPI_Status st;
    int rc;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (!request) return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Wait");
    if (*request == MPI_REQUEST_NULL) {
        status_empty(&st);
        put_status(status, &st);
        return MPI_SUCCESS;
    }
    if (req_is_layer(*request)) {
        int flag;
        if (!req_get(*request)) return bad("MPI_Wait");
        comm = req_comm(*request);
        conv_settle(req_get(*request), 1, &flag);
        return raise_err(comm, finish(request, status), "MPI_Wait");
    }
    comm = req_comm(*request);
    if (ignored(status)) return raise_err(comm, request_rc(rivet_wait(g_engine, request, NULL)), "MPI_Wait");
    rc = request_rc(rivet_wait(g_engine, request, &rst));
    if (rc != MPI_ERR_REQUEST) status_from(status, &rst);
    return raise_err(comm, rc, "MPI_Wait");
}

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
    rivet_status_t rst;
    MPI_Comm comm;
    MPI_Status st;
    int rc;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (!request || !flag) return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Test");
    if (*request == MPI_REQUEST_NULL) {
        *flag = 1;
        status_empty(&st);
        put_status(status, &st);
        return MPI_SUCCESS;
    }
    if (req_is_layer(*request)) {
        if (!req_get(*request)) return bad("MPI_Test");
        comm = req_comm(*request);
        conv_settle(req_get(*request), 0, flag);
        if (!*flag) return MPI_SUCCESS;
        return raise_err(comm, finish(request, status), "MPI_Test");
    }
    comm = req_comm(*request);
    rc = request_rc(rivet_test(g_engine, request, flag, &rst));
    if (rc == MPI_ERR_REQUEST) return raise_err(comm, rc, "MPI_Test");
    if (*flag) {
        status_from(&st, &rst);
        put_status(status, &st);
    }
    return raise_err(comm, rc, "MPI_Test");
}

/* Checks the array; hands back the layer's requests (they are complete),
 * statuses to `statuses` (may be ignored), nulling them; sets `*failed`
 * if one of those failed. Returns MPI_ERR_REQUEST for a bad handle. */
static int take_layer(int count, MPI_Request *reqs, MPI_Status *statuses, int *failed,
                      MPI_Comm *comm) {
    int i;
    for (i = 0; i < count; i++) {
        if (!req_is_layer(reqs[i])) continue;
        int flag;
        if (!req_get(reqs[i])) return MPI_ERR_REQUEST;
        *comm = req_comm(reqs[i]);
        conv_settle(req_get(reqs[i]), 1, &flag);
        if (finish(&reqs[i], nth(statuses, i)) != MPI_SUCCESS) *failed = 1;
    }
    return MPI_SUCCESS;
}

int MPI_Waitall(int count, MPI_Request *array_of_requests, MPI_Status *array_of_statuses) {
    rivet_status_t small[64], *rst = small;
    int i, rc, failed = 0, flag;
    MPI_Comm comm = MPI_COMM_NULL; /* the first request's, once found */
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (count < 0 || (count > 0 && !array_of_requests))
        return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Waitall");
    if (ignored(array_of_statuses) && __atomic_load_n(&g_reqs.live, __ATOMIC_RELAXED) == 0) {
        /* The common case, a window of sends or receives while the layer
         * holds no request of its own: every handle is librivet's (or
         * null, or stale: complete, as librivet counts one), so the array
         * goes to it as it is. Only the first request's communicator
         * (whose handler applies) is looked up, before librivet nulls it. */
        MPI_Request first = MPI_REQUEST_NULL;
        for (i = 0; i < count && first == MPI_REQUEST_NULL; i++) first = array_of_requests[i];
        comm = first == MPI_REQUEST_NULL ? MPI_COMM_WORLD : req_comm(first);
        rc = rivet_waitall(g_engine, (size_t)count, array_of_requests, NULL);
        if (rc == RIVET_SUCCESS) return MPI_SUCCESS;
        return raise_err(comm, rc == RIVET_ERR_IN_STATUS ? MPI_ERR_IN_STATUS : request_rc(rc),
                         "MPI_Waitall");
    }
    if (ignored(array_of_statuses)) {
        /* The same with some of the layer's own requests about: one pass
         * finds the first request's communicator and hands back the
         * layer's own; librivet's go to it as they are. */
        for (i = 0; i < count; i++) {
            MPI_Request h = array_of_requests[i];
            if (h == MPI_REQUEST_NULL) continue;
            if (!req_is_layer(h)) {
                if (comm == MPI_COMM_NULL) comm = req_comm(h);
                continue;
            }
            if (!req_get(h)) return bad("MPI_Waitall");
            if (comm == MPI_COMM_NULL) comm = req_comm(h);
            conv_settle(req_get(h), 1, &flag);
            if (finish(&array_of_requests[i], MPI_STATUS_IGNORE) != MPI_SUCCESS) failed = 1;
        }
        if (comm == MPI_COMM_NULL) comm = MPI_COMM_WORLD;
        rc = rivet_waitall(g_engine, (size_t)count, array_of_requests, NULL);
        if (rc == RIVET_ERR_IN_STATUS) failed = 1;
        else if (rc != RIVET_SUCCESS) return raise_err(comm, request_rc(rc), "MPI_Waitall");
        return raise_err(comm, failed ? MPI_ERR_IN_STATUS : MPI_SUCCESS, "MPI_Waitall");
    }
    /* Statuses wanted: null requests get the empty one. */
    for (i = 0; i < count; i++)
        if (array_of_requests[i] == MPI_REQUEST_NULL)
            status_empty(&array_of_statuses[i]);
        else if (comm == MPI_COMM_NULL)
            comm = req_comm(array_of_requests[i]);
    if (comm == MPI_COMM_NULL) comm = MPI_COMM_WORLD;
    if (take_layer(count, array_of_requests, array_of_statuses, &failed, &comm))
        return bad("MPI_Waitall");
    if (count > 64 && !(rst = malloc(sizeof *rst * (size_t)count)))
        return raise_err(comm, MPI_ERR_NO_MEM, "MPI_Waitall");
    /* The entries still set are librivet's, whose statuses it fills. */
    {
        int *mine = malloc(sizeof(int) * (size_t)(count ? count : 1));
        if (!mine) {
            if (rst != small) free(rst);
            return raise_err(comm, MPI_ERR_NO_MEM, "MPI_Waitall");
        }
        for (i = 0; i < count; i++) mine[i] = array_of_requests[i] != MPI_REQUEST_NULL;
        rc = rivet_waitall(g_engine, (size_t)count, array_of_requests, rst);
        if (rc != RIVET_SUCCESS && rc != RIVET_ERR_IN_STATUS) {
            free(mine);
            if (rst != small) free(rst);
            return raise_err(comm, request_rc(rc), "MPI_Waitall");
        }
        for (i = 0; i < count; i++)
            if (mine[i]) {
                status_from(&array_of_statuses[i], &rst[i]);
                if (array_of_statuses[i].MPI_ERROR != MPI_SUCCESS) failed = 1;
            }
        free(mine);
    }
    if (rst != small) free(rst);
    return raise_err(comm, failed ? MPI_ERR_IN_STATUS : MPI_SUCCESS, "MPI_Waitall");
}

/* librivet's waitany over the array (no layer requests in it). */
static int rivet_any(int count, MPI_Request *reqs, int *index, MPI_Status *status,
                     MPI_Comm *comm) {
    rivet_status_t rst;
    size_t which = 0;
    MPI_Request *copy, small[64];
    int rc;
    memset(&rst, 0, sizeof rst);
    *index = -1; /* stays so if nothing completed */
    /* Which communicator the finished one was on: known before it is nulled. */
    copy = count > 64 ? malloc(sizeof *copy * (size_t)count) : small;
    if (!copy) return MPI_ERR_NO_MEM;
    memcpy(copy, reqs, sizeof *copy * (size_t)count);
    rc = rivet_waitany(g_engine, (size_t)count, reqs, &which, &rst);
    if (rc == RIVET_SUCCESS || rc == rst.error) {
        MPI_Status st;
        *index = (int)which;
        *comm = req_comm(copy[which]);
        status_from(&st, &rst);
        put_status(status, &st);
        rc = from_rivet(rc);
    } else {
        rc = request_rc(rc);
    }
    if (copy != small) free(copy);
    return rc;
}

int MPI_Waitany(int count, MPI_Request *array_of_requests, int *index, MPI_Status *status) {
    int i, active = 0, rc;
    MPI_Comm comm = MPI_COMM_WORLD;
    MPI_Status st;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (count < 0 || !index || (count > 0 && !array_of_requests))
        return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Waitany");
    for (i = 0; i < count; i++) {
        if (array_of_requests[i] == MPI_REQUEST_NULL) continue;
        if (req_is_layer(array_of_requests[i])) {
            if (!req_get(array_of_requests[i])) return bad("MPI_Waitany");
            if (req_get(array_of_requests[i])->state == REQ_CONV) {
                /* Converting: librivet cannot wait on it with the others. */
                int flag = 0;
                do rc = MPI_Testany(count, array_of_requests, index, &flag, status);
                while (rc == MPI_SUCCESS && !flag);
                return rc;
            }
            *index = i;
            comm = req_comm(array_of_requests[i]);
            return raise_err(comm, finish(&array_of_requests[i], status), "MPI_Waitany");
        }
        active++;
    }
    if (!active) {
        *index = MPI_UNDEFINED;
        status_empty(&st);
        put_status(status, &st);
        return MPI_SUCCESS;
    }
    rc = rivet_any(count, array_of_requests, index, status, &comm);
    return raise_err(comm, rc, "MPI_Waitany");
}

/* Test every librivet request once; those done become layer requests
 * (status saved). Returns 1 if every request is now done or null. */
static int settle_all(int count, MPI_Request *reqs, int *err) {
    int i, all = 1;
    for (i = 0; i < count; i++) {
        rivet_status_t rst;
        MPI_Status st;
        MPI_Comm comm;
        int flag = 0, rc;
        if (reqs[i] == MPI_REQUEST_NULL) continue;
        if (req_is_layer(reqs[i])) {
            if (!req_get(reqs[i])) *err = MPI_ERR_REQUEST;
            else if (conv_settle(req_get(reqs[i]), 0, &flag), !flag) all = 0;
            continue;
        }
        comm = req_comm(reqs[i]);
        rc = rivet_test(g_engine, &reqs[i], &flag, &rst);
        if (rc == RIVET_ERR_INVALID_ARG) {
            *err = MPI_ERR_REQUEST;
            continue;
        }
        if (!flag) {
            all = 0;
            continue;
        }
        status_from(&st, &rst);
        reqs[i] = req_done(comm, &st);
        if (reqs[i] == MPI_REQUEST_NULL) *err = MPI_ERR_NO_MEM;
    }
    return all;
}

int MPI_Waitsome(int incount, MPI_Request *array_of_requests, int *outcount,
                 int array_of_indices[], MPI_Status *array_of_statuses) {
    int i, n = 0, active = 0, failed = 0, err = MPI_SUCCESS;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (incount < 0 || !outcount || (incount > 0 && (!array_of_requests || !array_of_indices)))
        return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Waitsome");
    for (i = 0; i < incount; i++) active += array_of_requests[i] != MPI_REQUEST_NULL;
    if (!active) {
        *outcount = MPI_UNDEFINED;
        return MPI_SUCCESS;
    }
    for (;;) {
        int converting = 0;
        settle_all(incount, array_of_requests, &err);
        if (err != MPI_SUCCESS) return raise_err(MPI_COMM_WORLD, err, "MPI_Waitsome");
        for (i = 0; i < incount; i++)
            if (req_is_layer(array_of_requests[i])) {
                if (req_get(array_of_requests[i])->state == REQ_DONE) break;
                converting = 1;
            }
        /* Some converting (librivet cannot wait on them): test again. */
        if (i < incount || !converting) break;
    }
    if (i == incount) {
        /* None done yet: block for one (librivet's only, here). */
        MPI_Comm comm = MPI_COMM_WORLD;
        MPI_Status st;
        int index = -1, rc = rivet_any(incount, array_of_requests, &index, &st, &comm);
        if (index < 0) return raise_err(comm, rc, "MPI_Waitsome");
        array_of_requests[index] = req_done(comm, &st);
        if (array_of_requests[index] == MPI_REQUEST_NULL)
            return raise_err(comm, MPI_ERR_NO_MEM, "MPI_Waitsome");
    }
    for (i = 0; i < incount; i++) {
        if (!req_is_layer(array_of_requests[i]) ||
            req_get(array_of_requests[i])->state != REQ_DONE)
            continue;
        array_of_indices[n] = i;
        if (finish(&array_of_requests[i], nth(array_of_statuses, n)) != MPI_SUCCESS) failed = 1;
        n++;
    }
    *outcount = n;
    return raise_err(MPI_COMM_WORLD, failed ? MPI_ERR_IN_STATUS : MPI_SUCCESS, "MPI_Waitsome");
}

int MPI_Testall(int count, MPI_Request *array_of_requests, int *flag,
                MPI_Status *array_of_statuses) {
    int i, failed = 0, err = MPI_SUCCESS;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (count < 0 || !flag || (count > 0 && !array_of_requests))
        return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Testall");
    *flag = settle_all(count, array_of_requests, &err);
    if (err != MPI_SUCCESS) return raise_err(MPI_COMM_WORLD, err, "MPI_Testall");
    if (!*flag) return MPI_SUCCESS;
    for (i = 0; i < count; i++) {
        if (array_of_requests[i] == MPI_REQUEST_NULL) {
            MPI_Status st;
            status_empty(&st);
            put_status(nth(array_of_statuses, i), &st);
        } else if (finish(&array_of_requests[i], nth(array_of_statuses, i)) != MPI_SUCCESS) {
            failed = 1;
        }
    }
    return raise_err(MPI_COMM_WORLD, failed ? MPI_ERR_IN_STATUS : MPI_SUCCESS, "MPI_Testall");
}

int MPI_Testany(int count, MPI_Request *array_of_requests, int *index, int *flag,
                MPI_Status *status) {
    int i, active = 0;
    MPI_Status st;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (count < 0 || !index || !flag || (count > 0 && !array_of_requests))
        return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Testany");
    for (i = 0; i < count; i++) {
        rivet_status_t rst;
        MPI_Comm comm;
        int got = 0, rc;
        if (array_of_requests[i] == MPI_REQUEST_NULL) continue;
        active++;
        comm = req_comm(array_of_requests[i]);
        if (req_is_layer(array_of_requests[i])) {
            if (!req_get(array_of_requests[i])) return bad("MPI_Testany");
            conv_settle(req_get(array_of_requests[i]), 0, &got);
            if (!got) continue;
            *flag = 1;
            *index = i;
            return raise_err(comm, finish(&array_of_requests[i], status), "MPI_Testany");
        }
        rc = rivet_test(g_engine, &array_of_requests[i], &got, &rst);
        if (rc == RIVET_ERR_INVALID_ARG) return bad("MPI_Testany");
        if (got) {
            *flag = 1;
            *index = i;
            status_from(&st, &rst);
            put_status(status, &st);
            return raise_err(comm, from_rivet(rc), "MPI_Testany");
        }
    }
    *index = MPI_UNDEFINED;
    *flag = !active;
    if (!active) {
        status_empty(&st);
        put_status(status, &st);
    }
    return MPI_SUCCESS;
}

int MPI_Cancel(MPI_Request *request) {
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (!request || *request == MPI_REQUEST_NULL) return bad("MPI_Cancel");
    if (req_is_layer(*request))
        return req_get(*request) ? raise_err(req_comm(*request), conv_cancel(req_get(*request)),
                                             "MPI_Cancel")
                                 : bad("MPI_Cancel");
    return raise_err(req_comm(*request), request_rc(rivet_cancel(g_engine, *request)),
                     "MPI_Cancel");
}

int MPI_Request_free(MPI_Request *request) {
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (!request || *request == MPI_REQUEST_NULL) return bad("MPI_Request_free");
    if (req_is_layer(*request)) {
        if (!req_get(*request)) return bad("MPI_Request_free");
        if (req_get(*request)->state == REQ_CONV)
            conv_detach(req_get(*request)); /* freed once librivet's completes */
        else
            slot_free(&g_reqs, (int)(*request >> 32));
        *request = MPI_REQUEST_NULL;
        return MPI_SUCCESS;
    }
    return raise_err(req_comm(*request), request_rc(rivet_request_free(g_engine, request)),
                     "MPI_Request_free");
}
