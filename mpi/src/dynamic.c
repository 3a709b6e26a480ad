/* Dynamic processes: spawn and the parent, ports with accept/connect,
 * the name service, disconnect, and merging an intercommunicator. Only
 * MPI_INFO_NULL is accepted (this layer has no info objects). */
#define _GNU_SOURCE
#include "impl.h"

#include <stdlib.h>
#include <string.h>

int MPI_Comm_spawn(const char *command, char *argv[], int maxprocs, MPI_Info info, int root,
                   MPI_Comm comm, MPI_Comm *intercomm, int array_of_errcodes[]) {
    struct comm *c = NOT_INIT() ? NULL : comm_get(comm);
    rivet_comm_t *p2p = NULL;
    int *codes = NULL, rc, i, at_root;
    if (!c || c->remote_size >= 0) return raise_err(MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Comm_spawn");
    if (root < 0 || root >= c->size) return raise_err(comm, MPI_ERR_ROOT, "MPI_Comm_spawn");
    if (!intercomm) return raise_err(comm, MPI_ERR_ARG, "MPI_Comm_spawn");
    at_root = c->rank == root;
    if (at_root && info != MPI_INFO_NULL) return raise_err(comm, MPI_ERR_INFO, "MPI_Comm_spawn");
    if (at_root && (!command || maxprocs <= 0))
        return raise_err(comm, MPI_ERR_ARG, "MPI_Comm_spawn");
    if (at_root && array_of_errcodes && !(codes = calloc((size_t)maxprocs, sizeof *codes)))
        return raise_err(comm, MPI_ERR_NO_MEM, "MPI_Comm_spawn");
    rc = rivet_comm_spawn(c->p2p, at_root ? command : NULL,
                          at_root ? (const char *const *)argv : NULL, at_root ? maxprocs : 0,
                          NULL, NULL, 0, root, &p2p, codes);
    if (codes) {
        for (i = 0; i < maxprocs; i++) array_of_errcodes[i] = from_rivet(codes[i]);
        free(codes);
    }
    if (rc != RIVET_SUCCESS) return raise_err(comm, from_rivet(rc), "MPI_Comm_spawn");
    if (!at_root && array_of_errcodes)
        for (i = 0; i < maxprocs; i++) array_of_errcodes[i] = MPI_SUCCESS;
    return raise_err(comm, comm_make_inter(comm, p2p, intercomm), "MPI_Comm_spawn");
}

int MPI_Comm_get_parent(MPI_Comm *parent) {
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (!parent) return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Comm_get_parent");
    *parent = g_parent;
    return MPI_SUCCESS;
}

int MPI_Open_port(MPI_Info info, char *port_name) {
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (info != MPI_INFO_NULL) return raise_err(MPI_COMM_WORLD, MPI_ERR_INFO, "MPI_Open_port");
    if (!port_name) return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Open_port");
    return raise_err(MPI_COMM_WORLD,
                     from_rivet(rivet_open_port(g_engine, port_name, MPI_MAX_PORT_NAME)),
                     "MPI_Open_port");
}

int MPI_Close_port(const char *port_name) {
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (!port_name) return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Close_port");
    return raise_err(MPI_COMM_WORLD, from_rivet(rivet_close_port(g_engine, port_name)),
                     "MPI_Close_port");
}

static int attach(int accept, const char *port, MPI_Info info, int root, MPI_Comm comm,
                  MPI_Comm *newcomm, const char *fn) {
    struct comm *c = NOT_INIT() ? NULL : comm_get(comm);
    rivet_comm_t *p2p = NULL;
    int rc, at_root;
    if (!c || c->remote_size >= 0) return raise_err(MPI_COMM_WORLD, MPI_ERR_COMM, fn);
    if (root < 0 || root >= c->size) return raise_err(comm, MPI_ERR_ROOT, fn);
    if (!newcomm) return raise_err(comm, MPI_ERR_ARG, fn);
    at_root = c->rank == root;
    if (at_root && info != MPI_INFO_NULL) return raise_err(comm, MPI_ERR_INFO, fn);
    if (at_root && !port) return raise_err(comm, MPI_ERR_PORT, fn);
    rc = accept ? rivet_comm_accept(c->p2p, at_root ? port : NULL, root, &p2p)
                : rivet_comm_connect(c->p2p, at_root ? port : NULL, root, &p2p);
    if (rc != RIVET_SUCCESS) return raise_err(comm, from_rivet(rc), fn);
    return raise_err(comm, comm_make_inter(comm, p2p, newcomm), fn);
}

int MPI_Comm_accept(const char *port_name, MPI_Info info, int root, MPI_Comm comm,
                    MPI_Comm *newcomm) {
    return attach(1, port_name, info, root, comm, newcomm, "MPI_Comm_accept");
}

int MPI_Comm_connect(const char *port_name, MPI_Info info, int root, MPI_Comm comm,
                     MPI_Comm *newcomm) {
    return attach(0, port_name, info, root, comm, newcomm, "MPI_Comm_connect");
}

int MPI_Comm_disconnect(MPI_Comm *comm) {
    if (NOT_INIT() || !comm || !comm_get(*comm) || *comm == MPI_COMM_WORLD ||
        *comm == MPI_COMM_SELF)
        return raise_err(MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Comm_disconnect");
    comm_release(*comm, 1);
    *comm = MPI_COMM_NULL;
    return MPI_SUCCESS;
}

static int names_args(MPI_Info info, const char *service, const void *port, const char *fn) {
    if (NOT_INIT()) return MPI_ERR_OTHER;
    if (info != MPI_INFO_NULL) return raise_err(MPI_COMM_WORLD, MPI_ERR_INFO, fn);
    if (!service || !port) return raise_err(MPI_COMM_WORLD, MPI_ERR_ARG, fn);
    return MPI_SUCCESS;
}

int MPI_Publish_name(const char *service_name, MPI_Info info, const char *port_name) {
    int rc = names_args(info, service_name, port_name, "MPI_Publish_name");
    if (rc != MPI_SUCCESS) return rc;
    rc = from_rivet(rivet_publish_name(g_engine, service_name, port_name));
    return raise_err(MPI_COMM_WORLD, rc == MPI_ERR_NAME ? MPI_ERR_SERVICE : rc,
                     "MPI_Publish_name");
}

int MPI_Lookup_name(const char *service_name, MPI_Info info, char *port_name) {
    int rc = names_args(info, service_name, port_name, "MPI_Lookup_name");
    if (rc != MPI_SUCCESS) return rc;
    return raise_err(MPI_COMM_WORLD,
                     from_rivet(rivet_lookup_name(g_engine, service_name, port_name,
                                                  MPI_MAX_PORT_NAME)),
                     "MPI_Lookup_name");
}

int MPI_Unpublish_name(const char *service_name, MPI_Info info, const char *port_name) {
    int rc = names_args(info, service_name, port_name, "MPI_Unpublish_name");
    if (rc != MPI_SUCCESS) return rc;
    rc = from_rivet(rivet_unpublish_name(g_engine, service_name));
    return raise_err(MPI_COMM_WORLD, rc == MPI_ERR_NAME ? MPI_ERR_SERVICE : rc,
                     "MPI_Unpublish_name");
}

int MPI_Intercomm_merge(MPI_Comm intercomm, int high, MPI_Comm *newintracomm) {
    struct comm *c = NOT_INIT() ? NULL : comm_get(intercomm), *n;
    rivet_comm_t *p2p, *coll;
    MPI_Comm h;
    int rc;
    if (!c || c->remote_size < 0)
        return raise_err(MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Intercomm_merge");
    if (!newintracomm) return raise_err(intercomm, MPI_ERR_ARG, "MPI_Intercomm_merge");
    if ((rc = rivet_comm_merge(c->p2p, high != 0, &p2p)) != RIVET_SUCCESS)
        return raise_err(intercomm, from_rivet(rc), "MPI_Intercomm_merge");
    if ((rc = rivet_comm_dup(p2p, &coll)) != RIVET_SUCCESS) {
        rivet_comm_free(p2p);
        return raise_err(intercomm, from_rivet(rc), "MPI_Intercomm_merge");
    }
    h = comm_new(p2p, coll, -1);
    if (h == MPI_COMM_NULL) {
        rivet_comm_free(coll);
        rivet_comm_free(p2p);
        return raise_err(intercomm, MPI_ERR_NO_MEM, "MPI_Intercomm_merge");
    }
    n = comm_get(h);
    n->eh = c->eh;
    /* The merged order is librivet's: learn it by asking every member. */
    n->gids = malloc(sizeof(uint64_t) * (size_t)n->size);
    rc = n->gids ? coll_allgather(n, &g_my_gid, sizeof g_my_gid, n->gids) : MPI_ERR_NO_MEM;
    if (rc != MPI_SUCCESS) {
        comm_release(h, 0);
        return raise_err(intercomm, rc, "MPI_Intercomm_merge");
    }
    *newintracomm = h;
    return MPI_SUCCESS;
}
