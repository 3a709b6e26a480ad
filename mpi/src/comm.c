/* Communicators: the handle table, rank/size, dup, split, free, compare,
 * and intercommunicators' remote groups. Context ids are the engine's
 * (rivet_comm_dup, rivet_comm_split): across IMPI clients those follow
 * seed 003's chapter 4 (cid for user traffic, cid + 1 for collectives,
 * the layer's `coll`), so another IMPI implementation agrees on them. */
#define _GNU_SOURCE
#include "impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

MPI_Comm g_parent = MPI_COMM_NULL;
uint64_t g_my_gid;

/* Which peers of `c` run under another IMPI client (c->foreign). */
static int find_foreign(struct comm *c) {
    int n = c->remote_size >= 0 ? c->remote_size : c->size, any = 0, rc;
    unsigned char *flags = malloc(n ? (size_t)n : 1);
    if (!flags) return MPI_ERR_NO_MEM;
    rc = rivet_comm_foreign_peers(c->p2p, flags, (size_t)n, &any);
    if (rc != RIVET_SUCCESS || !any) {
        free(flags);
        return from_rivet(rc);
    }
    c->foreign = flags;
    return MPI_SUCCESS;
}

MPI_Comm comm_new(rivet_comm_t *p2p, rivet_comm_t *coll, int remote_size) {
    struct comm *c;
    int idx = slot_alloc(&g_comms);
    if (idx < 0) return MPI_COMM_NULL;
    c = slot_at(&g_comms, idx);
    *c = (struct comm){0};
    c->in_use = 1;
    c->p2p = p2p;
    c->coll = coll;
    rivet_comm_rank(p2p, &c->rank);
    rivet_comm_size(p2p, &c->size);
    c->remote_size = remote_size;
    c->eh = MPI_ERRORS_ARE_FATAL;
    if (find_foreign(c) != MPI_SUCCESS) {
        slot_free(&g_comms, idx);
        return MPI_COMM_NULL;
    }
    return KIND_COMM | (idx - 1);
}

void comm_release(MPI_Comm h, int disconnect) {
    struct comm *c = comm_get(h);
    if (!c) return;
    if (c->coll) rivet_comm_free(c->coll);
    if (disconnect)
        rivet_comm_disconnect(c->p2p);
    else
        rivet_comm_free(c->p2p);
    free(c->gids);
    free(c->rgids);
    free(c->foreign);
    if (h == g_parent) g_parent = MPI_COMM_NULL;
    slot_free(&g_comms, (h & ~KIND_MASK) + 1);
}

static uint64_t fnv(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* A process id unique across jobs: its job's name hashed, plus its rank. */
static uint64_t gid_of(uint64_t job, int rank) {
    return job ^ ((uint64_t)(unsigned)rank * 0x9e3779b97f4a7c15ull);
}

int comm_setup_world(void) {
    rivet_comm_t *p2p, *coll, *parent;
    struct comm *w;
    char ns[512];
    uint64_t job;
    int i, rc;
    /* The world's collectives on its collective context (1, the seed's);
     * COMM_SELF's on caller id 1, which no agreed id meets. */
    if ((rc = rivet_comm_world(g_engine, &p2p)) != RIVET_SUCCESS) return from_rivet(rc);
    if ((rc = rivet_comm_collective(p2p, &coll)) != RIVET_SUCCESS) return from_rivet(rc);
    if (comm_new(p2p, coll, -1) != MPI_COMM_WORLD) return MPI_ERR_INTERN;
    if ((rc = rivet_comm_self(g_engine, &p2p)) != RIVET_SUCCESS) return from_rivet(rc);
    if ((rc = rivet_comm_dup_with_context(p2p, 1, &coll)) != RIVET_SUCCESS) return from_rivet(rc);
    if (comm_new(p2p, coll, -1) != MPI_COMM_SELF) return MPI_ERR_INTERN;

    w = comm_get(MPI_COMM_WORLD);
    if (rivet_nspace(g_engine, ns, sizeof ns) != RIVET_SUCCESS) {
        /* No name from the process manager: the pid and host tell apart. */
        snprintf(ns, sizeof ns, "pid%ld-host%ld", (long)getpid(), (long)gethostid());
    }
    job = fnv(ns);
    w->gids = malloc(sizeof(uint64_t) * (size_t)w->size);
    if (!w->gids) return MPI_ERR_NO_MEM;
    for (i = 0; i < w->size; i++) w->gids[i] = gid_of(job, i);
    g_my_gid = w->gids[w->rank];
    comm_get(MPI_COMM_SELF)->gids = malloc(sizeof(uint64_t));
    if (!comm_get(MPI_COMM_SELF)->gids) return MPI_ERR_NO_MEM;
    comm_get(MPI_COMM_SELF)->gids[0] = g_my_gid;

    if ((rc = rivet_comm_parent(g_engine, &parent)) != RIVET_SUCCESS) return from_rivet(rc);
    if (parent) return comm_make_inter(MPI_COMM_WORLD, parent, &g_parent);
    return MPI_SUCCESS;
}

/* The intercommunicator over `p2p` (just made by accept, connect or spawn;
 * its local group is `local`'s, in order): a collective context, and the
 * remote group's process ids, swapped by the two rank 0s. */
int comm_make_inter(MPI_Comm local, rivet_comm_t *p2p, MPI_Comm *out) {
    struct comm *l = comm_get(local), *c;
    rivet_comm_t *coll;
    rivet_request_t req = RIVET_REQUEST_NULL;
    int remote, rc;
    MPI_Comm h;
    if ((rc = rivet_comm_remote_size(p2p, &remote)) != RIVET_SUCCESS) goto fail;
    if ((rc = rivet_comm_dup(p2p, &coll)) != RIVET_SUCCESS) goto fail;
    h = comm_new(p2p, coll, remote);
    if (h == MPI_COMM_NULL) {
        rivet_comm_free(coll);
        rivet_comm_free(p2p);
        return MPI_ERR_NO_MEM;
    }
    c = comm_get(h);
    c->gids = malloc(sizeof(uint64_t) * (size_t)c->size);
    c->rgids = malloc(sizeof(uint64_t) * (size_t)remote);
    if (!c->gids || !c->rgids) {
        comm_release(h, 0);
        return MPI_ERR_NO_MEM;
    }
    memcpy(c->gids, l->gids, sizeof(uint64_t) * (size_t)c->size);
    if (c->rank == 0) {
        size_t rbytes = sizeof(uint64_t) * (size_t)remote;
        rc = rivet_irecv(coll, c->rgids, rbytes, 0, 7, &req);
        if (rc == RIVET_SUCCESS)
            rc = rivet_send(coll, c->gids, sizeof(uint64_t) * (size_t)c->size, 0, 7);
        if (rc == RIVET_SUCCESS) rc = rivet_wait(g_engine, &req, NULL);
        if (rc != RIVET_SUCCESS) {
            comm_release(h, 0);
            return from_rivet(rc);
        }
    }
    rc = coll_bcast(l, c->rgids, sizeof(uint64_t) * (size_t)remote, 0);
    if (rc != MPI_SUCCESS) {
        comm_release(h, 0);
        return rc;
    }
    *out = h;
    return MPI_SUCCESS;
fail:
    rivet_comm_free(p2p);
    return from_rivet(rc);
}

int MPI_Comm_rank(MPI_Comm comm, int *rank) {
    struct comm *c = comm_get(comm);
    if (NOT_INIT() || !c) return raise_err(MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Comm_rank");
    if (!rank) return raise_err(comm, MPI_ERR_ARG, "MPI_Comm_rank");
    *rank = c->rank;
    return MPI_SUCCESS;
}

int MPI_Comm_size(MPI_Comm comm, int *size) {
    struct comm *c = comm_get(comm);
    if (NOT_INIT() || !c) return raise_err(MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Comm_size");
    if (!size) return raise_err(comm, MPI_ERR_ARG, "MPI_Comm_size");
    *size = c->size;
    return MPI_SUCCESS;
}

/* A communicator the engine made (dup or split: context id agreed),
 * with its collective context as `coll`. */
static int wrap(rivet_comm_t *p2p, int remote_size, MPI_Comm *out) {
    rivet_comm_t *coll;
    int rc = from_rivet(remote_size < 0 ? rivet_comm_collective(p2p, &coll)
                                        : rivet_comm_dup(p2p, &coll));
    if (rc != MPI_SUCCESS) {
        rivet_comm_free(p2p);
        return rc;
    }
    *out = comm_new(p2p, coll, remote_size);
    if (*out == MPI_COMM_NULL) {
        rivet_comm_free(coll);
        rivet_comm_free(p2p);
        return MPI_ERR_NO_MEM;
    }
    return MPI_SUCCESS;
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm) {
    struct comm *c = comm_get(comm), *n;
    rivet_comm_t *p2p;
    int rc;
    MPI_Comm h;
    if (NOT_INIT() || !c) return raise_err(MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Comm_dup");
    if (!newcomm) return raise_err(comm, MPI_ERR_ARG, "MPI_Comm_dup");
    /* An intercommunicator's `coll` is a dup of its own (both groups agree
     * through the engine), as accept, connect and spawn make it. */
    if ((rc = rivet_comm_dup(c->p2p, &p2p)) != RIVET_SUCCESS)
        return raise_err(comm, from_rivet(rc), "MPI_Comm_dup");
    if ((rc = wrap(p2p, c->remote_size, &h)) != MPI_SUCCESS)
        return raise_err(comm, rc, "MPI_Comm_dup");
    n = comm_get(h);
    n->eh = c->eh;
    n->gids = malloc(sizeof(uint64_t) * (size_t)c->size);
    if (c->remote_size >= 0) n->rgids = malloc(sizeof(uint64_t) * (size_t)c->remote_size);
    if (!n->gids || (c->remote_size >= 0 && !n->rgids)) {
        comm_release(h, 0);
        return raise_err(comm, MPI_ERR_NO_MEM, "MPI_Comm_dup");
    }
    memcpy(n->gids, c->gids, sizeof(uint64_t) * (size_t)c->size);
    if (n->rgids) memcpy(n->rgids, c->rgids, sizeof(uint64_t) * (size_t)c->remote_size);
    *newcomm = h;
    return MPI_SUCCESS;
}

/* The engine's split (seed 003's 4.7 across IMPI clients, no other
 * message, so another IMPI implementation's split meets it); the
 * members' ranks in `comm` name its process ids as this process knows
 * them. */
static int split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm, const char *fn) {
    struct comm *c = comm_get(comm), *n;
    rivet_comm_t *p2p = NULL;
    int *ranks = NULL, rc, i;
    MPI_Comm h;
    if (NOT_INIT() || !c || c->remote_size >= 0)
        return raise_err(c ? comm : MPI_COMM_WORLD, MPI_ERR_COMM, fn);
    if (!newcomm || (color < 0 && color != MPI_UNDEFINED)) return raise_err(comm, MPI_ERR_ARG, fn);
    rc = from_rivet(rivet_comm_split(c->p2p, color == MPI_UNDEFINED ? -1 : color, key, &p2p));
    if (rc != MPI_SUCCESS) return raise_err(comm, rc, fn);
    if (!p2p) {
        *newcomm = MPI_COMM_NULL;
        return MPI_SUCCESS;
    }
    if ((rc = wrap(p2p, -1, &h)) != MPI_SUCCESS) return raise_err(comm, rc, fn);
    n = comm_get(h);
    n->eh = c->eh;
    n->gids = malloc(sizeof(uint64_t) * (size_t)n->size);
    ranks = malloc(sizeof(int) * (size_t)n->size);
    rc = !n->gids || !ranks ? MPI_ERR_NO_MEM
                            : from_rivet(rivet_comm_translate_ranks(n->p2p, c->p2p, ranks,
                                                                    (size_t)n->size));
    for (i = 0; rc == MPI_SUCCESS && i < n->size; i++) {
        if (ranks[i] < 0 || ranks[i] >= c->size) rc = MPI_ERR_INTERN;
        else n->gids[i] = c->gids[ranks[i]];
    }
    free(ranks);
    if (rc != MPI_SUCCESS) {
        comm_release(h, 0);
        return raise_err(comm, rc, fn);
    }
    *newcomm = h;
    return MPI_SUCCESS;
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm) {
    return split(comm, color, key, newcomm, "MPI_Comm_split");
}

/* MPI_COMM_TYPE_SHARED: the ranks on this host (by name) form one
 * communicator. Outside the list, but tests/c/mpi_check.c (an
 * unmodified MPI program) asks for it. */
int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info,
                        MPI_Comm *newcomm) {
    struct comm *c = comm_get(comm);
    char host[256] = {0};
    uint64_t mine, *all;
    int color = MPI_UNDEFINED, i, rc;
    if (NOT_INIT() || !c || c->remote_size >= 0)
        return raise_err(c ? comm : MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Comm_split_type");
    if (info != MPI_INFO_NULL) return raise_err(comm, MPI_ERR_INFO, "MPI_Comm_split_type");
    if (split_type != MPI_COMM_TYPE_SHARED && split_type != MPI_UNDEFINED)
        return raise_err(comm, MPI_ERR_ARG, "MPI_Comm_split_type");
    gethostname(host, sizeof host - 1);
    mine = fnv(host);
    all = malloc(sizeof(uint64_t) * (size_t)c->size);
    if (!all) return raise_err(comm, MPI_ERR_NO_MEM, "MPI_Comm_split_type");
    rc = coll_allgather(c, &mine, sizeof mine, all);
    if (rc != MPI_SUCCESS) {
        free(all);
        return raise_err(comm, rc, "MPI_Comm_split_type");
    }
    if (split_type == MPI_COMM_TYPE_SHARED)
        for (i = 0; i < c->size; i++)
            if (all[i] == mine) {
                color = i;
                break;
            }
    free(all);
    return split(comm, color, key, newcomm, "MPI_Comm_split_type");
}

int MPI_Comm_free(MPI_Comm *comm) {
    if (NOT_INIT() || !comm || !comm_get(*comm) || *comm == MPI_COMM_WORLD ||
        *comm == MPI_COMM_SELF)
        return raise_err(MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Comm_free");
    comm_release(*comm, 0);
    *comm = MPI_COMM_NULL;
    return MPI_SUCCESS;
}

static int in(uint64_t id, const uint64_t *set, int n) {
    int i;
    for (i = 0; i < n; i++)
        if (set[i] == id) return 1;
    return 0;
}

static int compare_groups(const uint64_t *a, int na, const uint64_t *b, int nb) {
    int i;
    if (na != nb) return MPI_UNEQUAL;
    if (memcmp(a, b, sizeof(uint64_t) * (size_t)na) == 0) return MPI_CONGRUENT;
    for (i = 0; i < na; i++)
        if (!in(a[i], b, nb)) return MPI_UNEQUAL;
    return MPI_SIMILAR;
}

int MPI_Comm_compare(MPI_Comm comm1, MPI_Comm comm2, int *result) {
    struct comm *a = comm_get(comm1), *b = comm_get(comm2);
    int r;
    if (NOT_INIT() || !a || !b) return raise_err(MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Comm_compare");
    if (!result) return raise_err(comm1, MPI_ERR_ARG, "MPI_Comm_compare");
    if (comm1 == comm2) {
        *result = MPI_IDENT;
        return MPI_SUCCESS;
    }
    if ((a->remote_size < 0) != (b->remote_size < 0)) {
        *result = MPI_UNEQUAL;
        return MPI_SUCCESS;
    }
    r = compare_groups(a->gids, a->size, b->gids, b->size);
    if (a->remote_size >= 0 && r != MPI_UNEQUAL) {
        int rr = compare_groups(a->rgids, a->remote_size, b->rgids, b->remote_size);
        if (rr > r) r = rr;
    }
    *result = r;
    return MPI_SUCCESS;
}
