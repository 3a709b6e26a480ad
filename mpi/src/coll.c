/* Collectives on intracommunicators, simple and correct: binomial trees
 * for bcast and reduce, linear gather/scatter/alltoall, and compositions
 * (allreduce = reduce + bcast, allgather = gather + bcast); across IMPI
 * clients their data goes as external32 (coll_ext32.c). They run on
 * the communicator's collective context, never matching user messages;
 * each kind has its own tag. MPI_Barrier is librivet's. */
#define _GNU_SOURCE
#include "impl.h"

#include <stdlib.h>
#include <string.h>

/* Tags above the engine's own on a collective context (1 to 5, and 1001
 * to 1006 across IMPI clients). */
enum { TAG_BCAST = 0x100, TAG_REDUCE, TAG_GATHER, TAG_SCATTER, TAG_ALLTOALL };

int coll_bcast(struct comm *c, void *buf, size_t bytes, int root) {
    int rel = (c->rank - root + c->size) % c->size, mask = 1, rc;
    while (mask < c->size) {
        if (rel & mask) {
            rc = rivet_recv(c->coll, buf, bytes, (rel - mask + root) % c->size, TAG_BCAST, NULL);
            if (rc != RIVET_SUCCESS) return from_rivet(rc);
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (rel + mask < c->size) {
            rc = rivet_send(c->coll, buf, bytes, (rel + mask + root) % c->size, TAG_BCAST);
            if (rc != RIVET_SUCCESS) return from_rivet(rc);
        }
    return MPI_SUCCESS;
}

/* Across IMPI clients (coll_converts) each message is an external32
 * piece behind a flag byte (coll_ext32.c): a rank that could not pack, or
 * got a failed piece, passes a failed one on, and fails. */
int coll_reduce(struct comm *c, const void *in, void *out, size_t count, MPI_Datatype t,
                MPI_Op op, int root) {
    size_t bytes = count * (size_t)type_size(t);
    int conv = coll_converts(c, t), ok = 1;
    size_t wlen = conv ? 1 + count * (size_t)ext32_size(t) : 0;
    int rel = (c->rank - root + c->size) % c->size, mask, rc = MPI_SUCCESS;
    char *acc = malloc(bytes ? bytes : 1), *tmp = malloc(bytes ? bytes : 1);
    unsigned char *wire = conv ? malloc(wlen) : NULL;
    if (!acc || !tmp || (conv && !wire)) {
        free(acc);
        free(tmp);
        free(wire);
        return MPI_ERR_NO_MEM;
    }
    memcpy(acc, in, bytes);
    for (mask = 1; mask < c->size && rc == MPI_SUCCESS; mask <<= 1) {
        if ((rel & mask) == 0) {
            int src = rel | mask;
            if (src >= c->size) continue;
            rc = from_rivet(rivet_recv(c->coll, conv ? (void *)wire : tmp, conv ? wlen : bytes,
                                       (src + root) % c->size, TAG_REDUCE, NULL));
            if (rc == MPI_SUCCESS && conv)
                ok = ok && wire[0] && ext32_unpack(t, wire + 1, count, tmp) == MPI_SUCCESS;
            if (rc == MPI_SUCCESS && ok) rc = reduce_apply(op, t, tmp, acc, count);
        } else {
            if (conv) wire[0] = ok && ext32_pack(t, acc, count, wire + 1) == MPI_SUCCESS;
            if (conv) ok = wire[0];
            rc = from_rivet(rivet_send(c->coll, conv ? (void *)wire : acc, conv ? wlen : bytes,
                                       ((rel & ~mask) + root) % c->size, TAG_REDUCE));
            break;
        }
    }
    if (rc == MPI_SUCCESS && c->rank == root) memcpy(out, acc, bytes);
    if (rc == MPI_SUCCESS && !ok) rc = MPI_ERR_CONVERSION;
    free(acc);
    free(tmp);
    free(wire);
    return rc;
}

/* Every rank's `bytes` at `in` into `out` (rank order) at `root`; at the
 * root `in` may be its own piece of `out`. */
int coll_gather(struct comm *c, const void *in, size_t bytes, void *out, int root) {
    rivet_request_t *reqs;
    int r, rc = RIVET_SUCCESS;
    if (c->rank != root) return from_rivet(rivet_send(c->coll, in, bytes, root, TAG_GATHER));
    reqs = calloc((size_t)c->size, sizeof *reqs);
    if (!reqs) return MPI_ERR_NO_MEM;
    for (r = 0; r < c->size && rc == RIVET_SUCCESS; r++)
        if (r != root)
            rc = rivet_irecv(c->coll, (char *)out + (size_t)r * bytes, bytes, r, TAG_GATHER,
                             &reqs[r]);
    if (in != (char *)out + (size_t)root * bytes) memmove((char *)out + (size_t)root * bytes, in, bytes);
    if (rc != RIVET_SUCCESS)
        for (r = 0; r < c->size; r++)
            if (reqs[r]) rivet_cancel(g_engine, reqs[r]);
    r = rivet_waitall(g_engine, (size_t)c->size, reqs, NULL);
    free(reqs);
    return from_rivet(rc != RIVET_SUCCESS ? rc : r);
}

int coll_allgather(struct comm *c, const void *in, size_t bytes, void *out) {
    int rc = coll_gather(c, in, bytes, out, 0);
    return rc != MPI_SUCCESS ? rc : coll_bcast(c, out, bytes * (size_t)c->size, 0);
}

/* The checks every collective makes; sets `c`. */
static int intra(MPI_Comm comm, struct comm **c) {
    if (NOT_INIT()) return MPI_ERR_OTHER;
    *c = comm_get(comm);
    if (!*c || (*c)->remote_size >= 0) return MPI_ERR_COMM;
    return MPI_SUCCESS;
}

#define FAIL(rc_, fn) return raise_err(c ? comm : MPI_COMM_WORLD, rc_, fn)
#define TRY(expr, fn)                                                                     \
    do {                                                                                  \
        int rc_ = (expr);                                                                 \
        if (rc_ != MPI_SUCCESS) FAIL(rc_, fn);                                            \
    } while (0)

int MPI_Barrier(MPI_Comm comm) {
    struct comm *c = NOT_INIT() ? NULL : comm_get(comm);
    if (!c) FAIL(MPI_ERR_COMM, "MPI_Barrier");
    /* On `p2p`: the engine runs it on the collective context (across IMPI
     * clients as seed 003's 4.10). */
    return raise_err(comm, from_rivet(rivet_comm_barrier(c->p2p)), "MPI_Barrier");
}

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
    struct comm *c = NULL;
    size_t bytes;
    TRY(intra(comm, &c), "MPI_Bcast");
    TRY(bytes_of(count, datatype, &bytes), "MPI_Bcast");
    if (root < 0 || root >= c->size) FAIL(MPI_ERR_ROOT, "MPI_Bcast");
    if (!buffer && bytes) FAIL(MPI_ERR_BUFFER, "MPI_Bcast");
    if (coll_converts(c, datatype))
        return raise_err(comm, ext32_bcast(c, buffer, count, datatype, root, 1), "MPI_Bcast");
    return raise_err(comm, coll_bcast(c, buffer, bytes, root), "MPI_Bcast");
}

static int reduce_args(MPI_Comm comm, struct comm **c, const void *sendbuf, void *recvbuf,
                       int count, MPI_Datatype t, MPI_Op op, int root, int all) {
    size_t bytes;
    int rc;
    if ((rc = intra(comm, c)) != MPI_SUCCESS) return rc;
    if ((rc = bytes_of(count, t, &bytes)) != MPI_SUCCESS) return rc;
    if (root < 0 || root >= (*c)->size) return MPI_ERR_ROOT;
    if ((rc = reduce_apply(op, t, NULL, NULL, 0)) != MPI_SUCCESS) return rc;
    if (bytes && (!sendbuf || ((all || (*c)->rank == root) && !recvbuf))) return MPI_ERR_BUFFER;
    if (sendbuf == MPI_IN_PLACE && !all && (*c)->rank != root) return MPI_ERR_BUFFER;
    return MPI_SUCCESS;
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               int root, MPI_Comm comm) {
    struct comm *c = NULL;
    TRY(reduce_args(comm, &c, sendbuf, recvbuf, count, datatype, op, root, 0), "MPI_Reduce");
    if (sendbuf == MPI_IN_PLACE) sendbuf = recvbuf;
    return raise_err(comm, coll_reduce(c, sendbuf, recvbuf, (size_t)count, datatype, op, root),
                     "MPI_Reduce");
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                  MPI_Op op, MPI_Comm comm) {
    struct comm *c = NULL;
    TRY(reduce_args(comm, &c, sendbuf, recvbuf, count, datatype, op, 0, 1), "MPI_Allreduce");
    if (sendbuf == MPI_IN_PLACE) sendbuf = recvbuf;
    if (coll_converts(c, datatype)) {
        /* The root's failure travels in the broadcast, so none waits. */
        int rc = coll_reduce(c, sendbuf, recvbuf, (size_t)count, datatype, op, 0), brc;
        if (rc != MPI_SUCCESS && rc != MPI_ERR_CONVERSION) FAIL(rc, "MPI_Allreduce");
        brc = ext32_bcast(c, recvbuf, count, datatype, 0, c->rank != 0 || rc == MPI_SUCCESS);
        return raise_err(comm, rc != MPI_SUCCESS ? rc : brc, "MPI_Allreduce");
    }
    TRY(coll_reduce(c, sendbuf, recvbuf, (size_t)count, datatype, op, 0), "MPI_Allreduce");
    return raise_err(comm, coll_bcast(c, recvbuf, (size_t)count * (size_t)type_size(datatype), 0),
                     "MPI_Allreduce");
}

/* Sizes of a rooted gather/scatter: `mine` is what this rank sends (or
 * receives), `each` the root's per-rank piece. */
static int piece_args(MPI_Comm comm, struct comm **c, int count, MPI_Datatype t, int rcount,
                      MPI_Datatype rt, int root, size_t *mine, size_t *each, int rooted) {
    int rc;
    if ((rc = intra(comm, c)) != MPI_SUCCESS) return rc;
    if (rooted && (root < 0 || root >= (*c)->size)) return MPI_ERR_ROOT;
    if ((rc = bytes_of(count, t, mine)) != MPI_SUCCESS) return rc;
    if ((rc = bytes_of(rcount, rt, each)) != MPI_SUCCESS) return rc;
    return MPI_SUCCESS;
}

int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
    struct comm *c = NULL;
    size_t mine = 0, each = 0;
    int at_root;
    if (NOT_INIT() || !comm_get(comm)) FAIL(MPI_ERR_COMM, "MPI_Gather");
    at_root = comm_get(comm)->rank == root;
    /* Only the root's receive arguments matter. */
    TRY(piece_args(comm, &c, sendbuf == MPI_IN_PLACE ? 0 : sendcount, sendbuf == MPI_IN_PLACE ? MPI_BYTE : sendtype,
                   at_root ? recvcount : 0, at_root ? recvtype : MPI_BYTE, root, &mine, &each, 1),
        "MPI_Gather");
    if (at_root) {
        if (!recvbuf && each) FAIL(MPI_ERR_BUFFER, "MPI_Gather");
        if (sendbuf == MPI_IN_PLACE) sendbuf = (char *)recvbuf + (size_t)root * each;
        else if (mine != each) FAIL(MPI_ERR_TRUNCATE, "MPI_Gather");
        if (coll_converts(c, recvtype))
            return raise_err(comm, ext32_gather(c, sendbuf, recvcount, recvtype, recvbuf, root, 0),
                             "MPI_Gather");
        return raise_err(comm, coll_gather(c, sendbuf, each, recvbuf, root), "MPI_Gather");
    }
    if (sendbuf == MPI_IN_PLACE || (!sendbuf && mine)) FAIL(MPI_ERR_BUFFER, "MPI_Gather");
    if (coll_converts(c, sendtype))
        return raise_err(comm, ext32_gather(c, sendbuf, sendcount, sendtype, NULL, root, 0),
                         "MPI_Gather");
    return raise_err(comm, coll_gather(c, sendbuf, mine, NULL, root), "MPI_Gather");
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
    struct comm *c = NULL;
    size_t mine = 0, each = 0;
    int in_place = sendbuf == MPI_IN_PLACE;
    TRY(piece_args(comm, &c, in_place ? 0 : sendcount, in_place ? MPI_BYTE : sendtype, recvcount,
                   recvtype, 0, &mine, &each, 0),
        "MPI_Allgather");
    if (!recvbuf && each) FAIL(MPI_ERR_BUFFER, "MPI_Allgather");
    if (in_place)
        sendbuf = (char *)recvbuf + (size_t)c->rank * each;
    else if (mine != each)
        FAIL(MPI_ERR_TRUNCATE, "MPI_Allgather");
    if (coll_converts(c, recvtype))
        return raise_err(comm, ext32_gather(c, sendbuf, recvcount, recvtype, recvbuf, 0, 1),
                         "MPI_Allgather");
    return raise_err(comm, coll_allgather(c, sendbuf, each, recvbuf), "MPI_Allgather");
}

int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
    struct comm *c = NULL;
    size_t mine = 0, each = 0;
    rivet_request_t *reqs;
    int at_root, r, rc = RIVET_SUCCESS, in_place = recvbuf == MPI_IN_PLACE;
    if (NOT_INIT() || !comm_get(comm)) FAIL(MPI_ERR_COMM, "MPI_Scatter");
    at_root = comm_get(comm)->rank == root;
    TRY(piece_args(comm, &c, at_root ? sendcount : 0, at_root ? sendtype : MPI_BYTE,
                   in_place ? 0 : recvcount, in_place ? MPI_BYTE : recvtype, root, &each, &mine,
                   1),
        "MPI_Scatter");
    if (!at_root) {
        if (in_place || (!recvbuf && mine)) FAIL(MPI_ERR_BUFFER, "MPI_Scatter");
        if (coll_converts(c, recvtype))
            return raise_err(comm, ext32_scatter(c, comm, NULL, recvbuf, recvcount, recvtype, root),
                             "MPI_Scatter");
        return raise_err(comm, from_rivet(rivet_recv(c->coll, recvbuf, mine, root, TAG_SCATTER, NULL)),
                         "MPI_Scatter");
    }
    if (!sendbuf && each) FAIL(MPI_ERR_BUFFER, "MPI_Scatter");
    if (!in_place && mine != each) FAIL(MPI_ERR_TRUNCATE, "MPI_Scatter");
    if (coll_converts(c, sendtype))
        return raise_err(comm, ext32_scatter(c, comm, sendbuf, recvbuf, sendcount, sendtype, root),
                         "MPI_Scatter");
    if (!(reqs = calloc((size_t)c->size, sizeof *reqs))) FAIL(MPI_ERR_NO_MEM, "MPI_Scatter");
    for (r = 0; r < c->size && rc == RIVET_SUCCESS; r++)
        if (r != root)
            rc = rivet_isend(c->coll, (const char *)sendbuf + (size_t)r * each, each, r,
                             TAG_SCATTER, &reqs[r]);
    if (!in_place) memmove(recvbuf, (const char *)sendbuf + (size_t)root * each, each);
    r = rivet_waitall(g_engine, (size_t)c->size, reqs, NULL);
    free(reqs);
    return raise_err(comm, from_rivet(rc != RIVET_SUCCESS ? rc : r), "MPI_Scatter");
}

int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
    struct comm *c = NULL;
    size_t mine = 0, each = 0;
    rivet_request_t *reqs;
    char *copy = NULL;
    int r, rc = RIVET_SUCCESS, wrc, in_place = sendbuf == MPI_IN_PLACE;
    TRY(piece_args(comm, &c, in_place ? recvcount : sendcount, in_place ? recvtype : sendtype,
                   recvcount, recvtype, 0, &mine, &each, 0),
        "MPI_Alltoall");
    if (mine != each) FAIL(MPI_ERR_TRUNCATE, "MPI_Alltoall");
    if (each && (!recvbuf || !sendbuf)) FAIL(MPI_ERR_BUFFER, "MPI_Alltoall");
    if (coll_converts(c, recvtype))
        return raise_err(comm, ext32_alltoall(c, comm, sendbuf, recvbuf, recvcount, recvtype),
                         "MPI_Alltoall");
    if (in_place) {
        /* Send from a copy: the receives overwrite the buffer. */
        if (!(copy = malloc(each * (size_t)c->size + 1))) FAIL(MPI_ERR_NO_MEM, "MPI_Alltoall");
        memcpy(copy, recvbuf, each * (size_t)c->size);
        sendbuf = copy;
    }
    if (!(reqs = calloc(2 * (size_t)c->size, sizeof *reqs))) {
        free(copy);
        FAIL(MPI_ERR_NO_MEM, "MPI_Alltoall");
    }
    for (r = 0; r < c->size && rc == RIVET_SUCCESS; r++)
        if (r != c->rank)
            rc = rivet_irecv(c->coll, (char *)recvbuf + (size_t)r * each, each, r, TAG_ALLTOALL,
                             &reqs[r]);
    for (r = 0; r < c->size && rc == RIVET_SUCCESS; r++)
        if (r != c->rank)
            rc = rivet_isend(c->coll, (const char *)sendbuf + (size_t)r * each, each, r,
                             TAG_ALLTOALL, &reqs[c->size + r]);
    memmove((char *)recvbuf + (size_t)c->rank * each,
            (const char *)sendbuf + (size_t)c->rank * each, each);
    if (rc != RIVET_SUCCESS)
        for (r = 0; r < c->size; r++)
            if (reqs[r]) rivet_cancel(g_engine, reqs[r]);
    wrc = rivet_waitall(g_engine, 2 * (size_t)c->size, reqs, NULL);
    free(reqs);
    free(copy);
    return raise_err(comm, from_rivet(rc != RIVET_SUCCESS ? rc : wrc), "MPI_Alltoall");
}
