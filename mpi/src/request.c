/* Completing requests: wait, test and their any/all/some forms, cancel,
 * free. A request is a slot holding librivet's handle while active, or
 * the saved status once librivet has completed it but MPI has not yet
 * handed it back (MPI_Testall completes nothing until all are done). */
#define _GNU_SOURCE
#include "impl.h"

#include <stdlib.h>

static void put_status(MPI_Status *out, const MPI_Status *st) {
    if (out != MPI_STATUS_IGNORE && out) *out = *st;
}

/* Hand back a completed request: its status to `out`, the slot freed,
 * the caller's handle nulled. Returns its error class. */
static int finish(MPI_Request *h, MPI_Status *out) {
    struct req *r = req_get(*h);
    int rc = r->st.MPI_ERROR;
    put_status(out, &r->st);
    slot_free(&g_reqs, *h & ~KIND_MASK);
    *h = MPI_REQUEST_NULL;
    return rc;
}

/* librivet completed the active request `r` (its handle is now null). */
static void done(struct req *r, const rivet_status_t *rst) {
    status_from(&r->st, rst);
    r->state = REQ_DONE;
}

static int bad(const char *fn) {
    return raise_err(MPI_COMM_WORLD, MPI_ERR_REQUEST, fn);
}

int MPI_Wait(MPI_Request *request, MPI_Status *status) {
    struct req *r;
    rivet_status_t rst;
    MPI_Comm comm;
    MPI_Status st;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (!request) return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Wait");
    if (*request == MPI_REQUEST_NULL) {
        status_empty(&st);
        put_status(status, &st);
        return MPI_SUCCESS;
    }
    if (!(r = req_get(*request))) return bad("MPI_Wait");
    comm = r->comm;
    if (r->state == REQ_ACTIVE) {
        rivet_wait(g_engine, &r->r, &rst);
        done(r, &rst);
    }
    return raise_err(comm, finish(request, status), "MPI_Wait");
}

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
    struct req *r;
    rivet_status_t rst;
    MPI_Comm comm;
    MPI_Status st;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (!request || !flag) return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Test");
    if (*request == MPI_REQUEST_NULL) {
        *flag = 1;
        status_empty(&st);
        put_status(status, &st);
        return MPI_SUCCESS;
    }
    if (!(r = req_get(*request))) return bad("MPI_Test");
    comm = r->comm;
    if (r->state == REQ_ACTIVE) {
        int got = 0;
        rivet_test(g_engine, &r->r, &got, &rst);
        if (!got) {
            *flag = 0;
            return MPI_SUCCESS;
        }
        done(r, &rst);
    }
    *flag = 1;
    return raise_err(comm, finish(request, status), "MPI_Test");
}

/* Test `h` without handing it back: 1 if it is (now) complete or null. */
static int settle(MPI_Request h, int *err) {
    struct req *r;
    rivet_status_t rst;
    int got = 0;
    if (h == MPI_REQUEST_NULL) return 1;
    if (!(r = req_get(h))) {
        *err = MPI_ERR_REQUEST;
        return 0;
    }
    if (r->state == REQ_DONE) return 1;
    rivet_test(g_engine, &r->r, &got, &rst);
    if (got) done(r, &rst);
    return got;
}

static MPI_Status *nth(MPI_Status *array, int i) {
    return array == MPI_STATUSES_IGNORE || !array ? MPI_STATUS_IGNORE : &array[i];
}

int MPI_Waitall(int count, MPI_Request *array_of_requests, MPI_Status *array_of_statuses) {
    rivet_request_t small[64], *handles = small;
    rivet_status_t small_st[64], *rst = small_st;
    int i, failed = 0, rc = MPI_SUCCESS, ignore;
    MPI_Comm comm = MPI_COMM_WORLD;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (count < 0 || (count > 0 && !array_of_requests))
        return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Waitall");
    ignore = array_of_statuses == MPI_STATUSES_IGNORE || !array_of_statuses;
    if (count > 64) {
        handles = malloc(sizeof *handles * (size_t)count);
        rst = malloc(sizeof *rst * (size_t)count);
        if (!handles || !rst) {
            free(handles);
            free(rst);
            return raise_err(MPI_COMM_WORLD, MPI_ERR_NO_MEM, "MPI_Waitall");
        }
    }
    for (i = 0; i < count; i++) {
        struct req *r = req_get(array_of_requests[i]);
        if (!r && array_of_requests[i] != MPI_REQUEST_NULL) {
            if (handles != small) {
                free(handles);
                free(rst);
            }
            return bad("MPI_Waitall");
        }
        handles[i] = r && r->state == REQ_ACTIVE ? r->r : RIVET_REQUEST_NULL;
    }
    if (ignore) {
        /* Nobody wants statuses (the common case, a window of sends or
         * receives): wait, free, and say only whether some failed. */
        if (rivet_waitall(g_engine, (size_t)count, handles, NULL) != RIVET_SUCCESS) failed = 1;
        for (i = 0; i < count; i++) {
            struct req *r = req_get(array_of_requests[i]);
            if (!r) continue;
            if (r->state == REQ_DONE && r->st.MPI_ERROR != MPI_SUCCESS) failed = 1;
            comm = r->comm;
            slot_free(&g_reqs, array_of_requests[i] & ~KIND_MASK);
            array_of_requests[i] = MPI_REQUEST_NULL;
        }
    } else {
        rivet_waitall(g_engine, (size_t)count, handles, rst);
        for (i = 0; i < count; i++) {
            struct req *r = req_get(array_of_requests[i]);
            if (!r) {
                status_empty(&array_of_statuses[i]);
                continue;
            }
            if (r->state == REQ_ACTIVE) {
                r->r = RIVET_REQUEST_NULL;
                done(r, &rst[i]);
            }
            comm = r->comm;
            if (finish(&array_of_requests[i], &array_of_statuses[i]) != MPI_SUCCESS) failed = 1;
        }
    }
    if (handles != small) {
        free(handles);
        free(rst);
    }
    if (failed) rc = MPI_ERR_IN_STATUS;
    return raise_err(comm, rc, "MPI_Waitall");
}

int MPI_Waitany(int count, MPI_Request *array_of_requests, int *index, MPI_Status *status) {
    rivet_request_t small[64], *handles = small;
    rivet_status_t rst;
    size_t which = 0;
    int i, active = 0;
    MPI_Comm comm;
    MPI_Status st;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (count < 0 || !index || (count > 0 && !array_of_requests))
        return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Waitany");
    for (i = 0; i < count; i++) {
        struct req *r;
        if (array_of_requests[i] == MPI_REQUEST_NULL) continue;
        if (!(r = req_get(array_of_requests[i]))) return bad("MPI_Waitany");
        if (r->state == REQ_DONE) {
            *index = i;
            return raise_err(r->comm, finish(&array_of_requests[i], status), "MPI_Waitany");
        }
        active++;
    }
    if (!active) {
        *index = MPI_UNDEFINED;
        status_empty(&st);
        put_status(status, &st);
        return MPI_SUCCESS;
    }
    if (count > 64 && !(handles = malloc(sizeof *handles * (size_t)count)))
        return raise_err(MPI_COMM_WORLD, MPI_ERR_NO_MEM, "MPI_Waitany");
    for (i = 0; i < count; i++) {
        struct req *r = req_get(array_of_requests[i]);
        handles[i] = r ? r->r : RIVET_REQUEST_NULL;
    }
    rivet_waitany(g_engine, (size_t)count, handles, &which, &rst);
    if (handles != small) free(handles);
    {
        struct req *r = req_get(array_of_requests[which]);
        r->r = RIVET_REQUEST_NULL;
        done(r, &rst);
        comm = r->comm;
    }
    *index = (int)which;
    return raise_err(comm, finish(&array_of_requests[which], status), "MPI_Waitany");
}

/* Hand back every settled request; how many went. */
static int harvest(int count, MPI_Request reqs[], int *outcount, int indices[],
                   MPI_Status statuses[], int *failed) {
    int i, n = 0, err = MPI_SUCCESS;
    for (i = 0; i < count; i++) {
        MPI_Status *st;
        if (reqs[i] == MPI_REQUEST_NULL || !settle(reqs[i], &err)) continue;
        st = statuses == MPI_STATUSES_IGNORE || !statuses ? MPI_STATUS_IGNORE : &statuses[n];
        indices[n] = i;
        if (finish(&reqs[i], st) != MPI_SUCCESS) *failed = 1;
        n++;
    }
    *outcount = n;
    return err;
}

int MPI_Waitsome(int incount, MPI_Request *array_of_requests, int *outcount,
                 int array_of_indices[], MPI_Status *array_of_statuses) {
    int i, active = 0, failed = 0, err;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (incount < 0 || !outcount || (incount > 0 && (!array_of_requests || !array_of_indices)))
        return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Waitsome");
    for (i = 0; i < incount; i++)
        if (array_of_requests[i] != MPI_REQUEST_NULL) {
            if (!req_get(array_of_requests[i])) return bad("MPI_Waitsome");
            active++;
        }
    if (!active) {
        *outcount = MPI_UNDEFINED;
        return MPI_SUCCESS;
    }
    err = harvest(incount, array_of_requests, outcount, array_of_indices, array_of_statuses,
                  &failed);
    if (err != MPI_SUCCESS) return bad("MPI_Waitsome");
    if (*outcount == 0) {
        /* None yet: block for one (its error goes into its status), then
         * hand back every request done by then. */
        rivet_request_t small[64], *handles = small;
        rivet_status_t rst;
        size_t which = 0;
        struct req *r;
        if (incount > 64 && !(handles = malloc(sizeof *handles * (size_t)incount)))
            return raise_err(MPI_COMM_WORLD, MPI_ERR_NO_MEM, "MPI_Waitsome");
        for (i = 0; i < incount; i++) {
            struct req *q = req_get(array_of_requests[i]);
            handles[i] = q && q->state == REQ_ACTIVE ? q->r : RIVET_REQUEST_NULL;
        }
        rivet_waitany(g_engine, (size_t)incount, handles, &which, &rst);
        if (handles != small) free(handles);
        r = req_get(array_of_requests[which]);
        r->r = RIVET_REQUEST_NULL;
        done(r, &rst);
        harvest(incount, array_of_requests, outcount, array_of_indices, array_of_statuses,
                &failed);
    }
    return raise_err(MPI_COMM_WORLD, failed ? MPI_ERR_IN_STATUS : MPI_SUCCESS, "MPI_Waitsome");
}

int MPI_Testall(int count, MPI_Request *array_of_requests, int *flag,
                MPI_Status *array_of_statuses) {
    int i, all = 1, failed = 0, err = MPI_SUCCESS;
    MPI_Status st;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (count < 0 || !flag || (count > 0 && !array_of_requests))
        return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Testall");
    for (i = 0; i < count; i++)
        if (!settle(array_of_requests[i], &err)) all = 0;
    if (err != MPI_SUCCESS) return bad("MPI_Testall");
    *flag = all;
    if (!all) return MPI_SUCCESS;
    for (i = 0; i < count; i++) {
        if (array_of_requests[i] == MPI_REQUEST_NULL) {
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
    int i, active = 0, err = MPI_SUCCESS;
    MPI_Status st;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (count < 0 || !index || !flag || (count > 0 && !array_of_requests))
        return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Testany");
    for (i = 0; i < count; i++) {
        if (array_of_requests[i] == MPI_REQUEST_NULL) continue;
        active++;
        if (settle(array_of_requests[i], &err)) {
            MPI_Comm comm = req_get(array_of_requests[i])->comm;
            *flag = 1;
            *index = i;
            return raise_err(comm, finish(&array_of_requests[i], status), "MPI_Testany");
        }
        if (err != MPI_SUCCESS) return bad("MPI_Testany");
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
    struct req *r;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (!request || !(r = req_get(*request))) return bad("MPI_Cancel");
    if (r->state != REQ_ACTIVE) return MPI_SUCCESS;
    return raise_err(r->comm, from_rivet(rivet_cancel(g_engine, r->r)), "MPI_Cancel");
}

int MPI_Request_free(MPI_Request *request) {
    struct req *r;
    int rc = RIVET_SUCCESS;
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (!request || !(r = req_get(*request))) return bad("MPI_Request_free");
    if (r->state == REQ_ACTIVE) rc = rivet_request_free(g_engine, &r->r);
    slot_free(&g_reqs, *request & ~KIND_MASK);
    *request = MPI_REQUEST_NULL;
    return raise_err(MPI_COMM_WORLD, from_rivet(rc), "MPI_Request_free");
}
