/* Collectives on a communicator with processes under other IMPI clients
 * (c->foreign), for types of more than one byte: the data is packed as
 * external32 (external32.c) around the byte collectives of coll.c, so
 * whatever crosses clients is external32 and every rank reads native
 * values. Each packed piece opens with one byte, 1 if its sender could
 * pack it and 0 if a value did not fit (say a long beyond 32 bits): the
 * collective still completes everywhere (no rank waits for a piece that
 * never comes) and every rank given such a piece fails with
 * MPI_ERR_CONVERSION. Reductions convert per message in coll_reduce and
 * reduce native values. */
#define _GNU_SOURCE
#include "impl.h"

#include <stdlib.h>
#include <string.h>

int coll_converts(const struct comm *c, MPI_Datatype t) {
    return c && c->remote_size < 0 && c->foreign && type_size(t) > 0 && !ext32_is_native(t);
}

/* One piece: the flag byte, then `n` elements of `t` packed from `in`. */
static size_t piece_len(MPI_Datatype t, int n) {
    return 1 + (size_t)n * (size_t)ext32_size(t);
}

static void pack_piece(MPI_Datatype t, const void *in, int n, unsigned char *out, int ok) {
    out[0] = ok && ext32_pack(t, in, (size_t)n, out + 1) == MPI_SUCCESS;
}

/* Unpack a piece into `out`; MPI_ERR_CONVERSION if its sender failed. */
static int unpack_piece(MPI_Datatype t, const unsigned char *in, int n, void *out) {
    if (!in[0]) return MPI_ERR_CONVERSION;
    return ext32_unpack(t, in + 1, (size_t)n, out);
}

int ext32_bcast(struct comm *c, void *buf, int count, MPI_Datatype t, int root, int ok) {
    size_t len = piece_len(t, count);
    unsigned char *w = malloc(len);
    int rc;
    if (!w) return MPI_ERR_NO_MEM;
    if (c->rank == root) pack_piece(t, buf, count, w, ok);
    rc = coll_bcast(c, w, len, root);
    if (rc == MPI_SUCCESS)
        rc = c->rank == root ? (w[0] ? MPI_SUCCESS : MPI_ERR_CONVERSION)
                             : unpack_piece(t, w, count, buf);
    free(w);
    return rc;
}

int ext32_gather(struct comm *c, const void *sendbuf, int n, MPI_Datatype t, void *recvbuf,
                 int root, int all) {
    size_t len = piece_len(t, n), ns = (size_t)type_size(t) * (size_t)n;
    unsigned char *mine = malloc(len), *every = NULL;
    int r, rc, bad = 0, wants = all || c->rank == root;
    if (mine && wants) every = malloc(len * (size_t)c->size);
    if (!mine || (wants && !every)) {
        free(mine);
        return MPI_ERR_NO_MEM;
    }
    if (sendbuf == MPI_IN_PLACE) sendbuf = (char *)recvbuf + (size_t)c->rank * ns;
    pack_piece(t, sendbuf, n, mine, 1);
    bad = !mine[0];
    rc = all ? coll_allgather(c, mine, len, every) : coll_gather(c, mine, len, every, root);
    for (r = 0; rc == MPI_SUCCESS && wants && r < c->size; r++) {
        int e = unpack_piece(t, every + (size_t)r * len, n, (char *)recvbuf + (size_t)r * ns);
        if (e != MPI_SUCCESS) bad = 1;
    }
    free(mine);
    free(every);
    return rc != MPI_SUCCESS ? rc : bad ? MPI_ERR_CONVERSION : MPI_SUCCESS;
}

int ext32_scatter(struct comm *c, MPI_Comm comm, const void *sendbuf, void *recvbuf, int n,
                  MPI_Datatype t, int root) {
    size_t len = piece_len(t, n), ns = (size_t)type_size(t) * (size_t)n;
    unsigned char *every = NULL, *mine = malloc(len);
    int r, rc;
    if (mine && c->rank == root) every = malloc(len * (size_t)c->size);
    if (!mine || (c->rank == root && !every)) {
        free(mine);
        return MPI_ERR_NO_MEM;
    }
    if (c->rank == root)
        for (r = 0; r < c->size; r++)
            pack_piece(t, (const char *)sendbuf + (size_t)r * ns, n, every + (size_t)r * len, 1);
    /* MPI_BYTE: the byte path, converting nothing again. */
    rc = MPI_Scatter(every, (int)len, MPI_BYTE, mine, (int)len, MPI_BYTE, root, comm);
    if (rc == MPI_SUCCESS && recvbuf != MPI_IN_PLACE) rc = unpack_piece(t, mine, n, recvbuf);
    if (rc == MPI_SUCCESS && c->rank == root)
        for (r = 0; r < c->size; r++)
            if (!every[(size_t)r * len]) rc = MPI_ERR_CONVERSION;
    free(mine);
    free(every);
    return rc;
}

int ext32_alltoall(struct comm *c, MPI_Comm comm, const void *sendbuf, void *recvbuf, int n,
                   MPI_Datatype t) {
    size_t len = piece_len(t, n), ns = (size_t)type_size(t) * (size_t)n;
    unsigned char *out = malloc(len * (size_t)c->size), *in = malloc(len * (size_t)c->size);
    int r, rc, bad = 0;
    if (!out || !in) {
        free(out);
        free(in);
        return MPI_ERR_NO_MEM;
    }
    if (sendbuf == MPI_IN_PLACE) sendbuf = recvbuf;
    for (r = 0; r < c->size; r++) {
        pack_piece(t, (const char *)sendbuf + (size_t)r * ns, n, out + (size_t)r * len, 1);
        if (!out[(size_t)r * len]) bad = 1;
    }
    rc = MPI_Alltoall(out, (int)len, MPI_BYTE, in, (int)len, MPI_BYTE, comm);
    for (r = 0; rc == MPI_SUCCESS && r < c->size; r++)
        if (unpack_piece(t, in + (size_t)r * len, n, (char *)recvbuf + (size_t)r * ns) !=
            MPI_SUCCESS)
            bad = 1;
    free(out);
    free(in);
    return rc != MPI_SUCCESS ? rc : bad ? MPI_ERR_CONVERSION : MPI_SUCCESS;
}
