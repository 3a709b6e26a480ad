/*
 * pmi.h - the PMI-1 C API, as librivet-pmi implements it on Rivet's PMI-1
 * client (the Rust crate rivet-pmi).
 *
 * Link with: pkg-config --cflags --libs rivet-pmi
 *
 * The functions follow the PMI interface document (seed 002, "Process
 * Management in MPICH") and, where that draft and MPICH's shipped pmi.h
 * differ, MPICH's pmi.h: the names, signatures and return-code values here
 * are MPICH's, so a program compiled against MPICH's pmi.h runs unchanged
 * with this library. Differences from the draft's prototypes, all taken from
 * MPICH's header:
 *   - PMI_Initialized(int *initialized) reports through a pointer;
 *   - PMI_KVS_Get_my_name, PMI_KVS_Get, PMI_KVS_Create and the iterators
 *     take the length of each output buffer;
 *   - the PMI_KVS_Get_*_length_max calls report through a pointer;
 *   - PMI_KVS_Iter_first/next are spelled with a capital I;
 *   - PMI_Spawn_multiple takes info and pre-put key/value vectors.
 *
 * Every call returns a PMI_* code and never crashes the caller: null
 * pointers, bad strings and too-small buffers get error codes, and an
 * internal failure is PMI_FAIL. Before PMI_Init and after PMI_Finalize,
 * every call but PMI_Init, PMI_Initialized and the unsupported ones below
 * returns PMI_ERR_INIT. PMI_Init works once per process (a second call while
 * initialised only reports *spawned).
 *
 * Thread safety: calls may come from any thread; they are serialised (one
 * PMI request at a time, as the PMI-1 wire requires), so a thread in
 * PMI_Barrier holds up the others' PMI calls until the barrier ends.
 *
 * Not supported (they return PMI_ERR_UNSUPPORTED, as the document allows):
 *   - PMI_KVS_Create, PMI_KVS_Destroy, PMI_KVS_Iter_first, PMI_KVS_Iter_next:
 *     the PMI-1 wire that rivetrun and MPICH's Hydra serve has no command to
 *     create, destroy or enumerate a key-value space (the document lets an
 *     implementation omit them);
 *   - PMI_Resource_register, PMI_Resource_release_begin,
 *     PMI_Resource_release_end: no process manager Rivet runs under offers
 *     resource registration, and the document requires the registration call
 *     to fail then, so the program frees its resources itself.
 * PMI_Topo_cluster_info and PMI_Topo_mesh_info also return
 * PMI_ERR_UNSUPPORTED when the process manager published no such topology
 * (e.g. under Hydra, or a mesh query on a cluster topology).
 */

#ifndef PMI_H_INCLUDED
#define PMI_H_INCLUDED

#define PMI_VERSION    1
#define PMI_SUBVERSION 1

/* Longest port name PMI_Lookup_name writes, NUL included (MPICH's value):
 * its port buffer must hold this many bytes. */
#define PMI_MAX_PORT_NAME 1024

#if defined(__cplusplus)
extern "C" {
#endif

/* Return codes: MPICH's values. */
#define PMI_SUCCESS                  0  /* done */
#define PMI_FAIL                    -1  /* failed (server refused, key not found, I/O, internal) */
#define PMI_ERR_INIT                 1  /* PMI not initialised (or finalised) */
#define PMI_ERR_NOMEM                2  /* an output buffer is too small */
#define PMI_ERR_INVALID_ARG          3  /* a null or out-of-range argument */
#define PMI_ERR_INVALID_KEY          4  /* a null, empty, reserved (PMI_...) or unsendable key */
#define PMI_ERR_INVALID_KEY_LENGTH   5  /* a key longer than PMI_KVS_Get_key_length_max */
#define PMI_ERR_INVALID_VAL          6  /* a null or unsendable value (or value buffer) */
#define PMI_ERR_INVALID_VAL_LENGTH   7  /* a value longer than PMI_KVS_Get_value_length_max */
#define PMI_ERR_INVALID_LENGTH       8  /* an output buffer length too small for the answer */
#define PMI_ERR_INVALID_NUM_ARGS     9
#define PMI_ERR_INVALID_ARGS        10
#define PMI_ERR_INVALID_NUM_PARSED  11
#define PMI_ERR_INVALID_KEYVALP     12
#define PMI_ERR_INVALID_SIZE        13
/* Not in MPICH's header (its documentation names it): Slurm's pmi.h value. */
#define PMI_ERR_INVALID_KVS         14  /* a null or unknown key-value space name */
/* Named by the PMI document, defined by neither MPICH nor Slurm: Rivet's value. */
#define PMI_ERR_UNSUPPORTED         15  /* this implementation or process manager lacks the call */

#define PMI_TRUE  1
#define PMI_FALSE 0

/* ---------------------------------------------------------------- group */

/* Connect to the process manager (PMI_FD, PMI_PORT/PMI_ID, or none: a
 * singleton of size 1). *spawned is PMI_TRUE when this process was started by
 * PMI_Spawn_multiple. A second call while initialised only sets *spawned. */
int PMI_Init(int *spawned);
/* *initialized = PMI_TRUE between PMI_Init and PMI_Finalize, else PMI_FALSE. */
int PMI_Initialized(int *initialized);
/* Tell the process manager this process is done with PMI. */
int PMI_Finalize(void);
int PMI_Get_size(int *size);
int PMI_Get_rank(int *rank);
/* -1 when the process manager does not know. */
int PMI_Get_universe_size(int *size);
/* Which command of the mpiexec (or spawn) line this process runs; -1 alone. */
int PMI_Get_appnum(int *appnum);
/* Collective over the process group; puts made before it are visible after. */
int PMI_Barrier(void);
/* Ask the process manager to end the job with exit_code (error_msg may be
 * NULL), then exit this process with exit_code. Returns only if the request
 * could not be made at all (PMI_ERR_INIT). */
int PMI_Abort(int exit_code, const char error_msg[]);

/* MPICH extras: the ranks of this process group on this node, from the
 * process manager's PMI_process_mapping (without one: this process alone). */
int PMI_Get_clique_size(int *size);
/* length: entries ranks[] holds; PMI_ERR_INVALID_LENGTH if fewer than the
 * clique size. */
int PMI_Get_clique_ranks(int ranks[], int length);

/* ------------------------------------------------------------ names */

/* Server-wide name service (MPI_Publish_name and friends). */
int PMI_Publish_name(const char service_name[], const char port[]);
int PMI_Unpublish_name(const char service_name[]);
/* port must hold PMI_MAX_PORT_NAME bytes; PMI_FAIL if the name is unknown. */
int PMI_Lookup_name(const char service_name[], char port[]);

/* ------------------------------------------------------- key-value space */

/* length: bytes kvsname[] holds (NUL included). */
int PMI_KVS_Get_my_name(char kvsname[], int length);
int PMI_KVS_Get_name_length_max(int *length);
int PMI_KVS_Get_key_length_max(int *length);
int PMI_KVS_Get_value_length_max(int *length);
/* Only this process group's own KVS can be written (else PMI_ERR_INVALID_KVS);
 * keys starting with PMI_ are the process manager's (PMI_ERR_INVALID_KEY). */
int PMI_KVS_Put(const char kvsname[], const char key[], const char value[]);
/* Puts are sent at once; this only checks its argument. */
int PMI_KVS_Commit(const char kvsname[]);
/* length: bytes value[] holds (NUL included). PMI_FAIL if the key is not found. */
int PMI_KVS_Get(const char kvsname[], const char key[], char value[], int length);
/* PMI_ERR_UNSUPPORTED (see the top of this file). */
int PMI_KVS_Create(char kvsname[], int length);
int PMI_KVS_Destroy(const char kvsname[]);
int PMI_KVS_Iter_first(const char kvsname[], char key[], int key_len, char val[], int val_len);
int PMI_KVS_Iter_next(const char kvsname[], char key[], int key_len, char val[], int val_len);

/* ------------------------------------------------------------ spawn */

typedef struct PMI_keyval_t {
    const char *key;
    const char *val;
} PMI_keyval_t;

/* Start sum(maxprocs) processes in a new process group; all or none start.
 * argvs[i] is a NULL-terminated argument list without argv[0] (or NULL);
 * info_keyval_sizesp and info_keyval_vectors may be NULL (no info); errors[]
 * gets one code per started process (0 = started), as MPICH's callers size it.
 * rivetrun honours the info keys wdir, path and host. */
int PMI_Spawn_multiple(int count,
                       const char *cmds[],
                       const char **argvs[],
                       const int maxprocs[],
                       const int info_keyval_sizesp[],
                       const PMI_keyval_t *info_keyval_vectors[],
                       int preput_keyval_size,
                       const PMI_keyval_t preput_keyval_vector[],
                       int errors[]);

/* ------------------------------------------------- resource registration */

/* PMI_ERR_UNSUPPORTED (see the top of this file). The document's draft
 * prototype gives the handlers as (void *()(void *)); here they are
 * pointers to functions taking and returning void *. */
int PMI_Resource_register(const char *name,
                          void *(*at_exit)(void *), void *at_exit_extra_data,
                          void *(*at_abort)(void *), void *at_abort_extra_data);
int PMI_Resource_release_begin(const char *name, int timeout);
int PMI_Resource_release_end(const char *name);

/* -------------------------------------------------------------- topology */

/* A PMI group; the document leaves the type open. The only group a PMI-1
 * process knows is its own process group, PMI_GROUP_WORLD; any other value
 * is PMI_ERR_INVALID_ARG. */
typedef int PMI_Group;
#define PMI_GROUP_WORLD 0

/* Topology kinds (values chosen by Rivet; the document names them only). */
#define PMI_TOPO_NONE    0
#define PMI_TOPO_CLUSTER 1
#define PMI_TOPO_MESH    2

/* *kind = what the process manager published: PMI_TOPO_CLUSTER (rivetrun's
 * default), PMI_TOPO_MESH (rivetrun --mesh-dims), or PMI_TOPO_NONE (nothing
 * published: Hydra, a singleton). */
int PMI_Topo_type(PMI_Group group, int *kind);
/* Cluster levels, outermost first: node, then package, NUMA node and core
 * as far as the process's binding is contained in one object of that kind.
 * In: *levels = entries my_cluster[] and my_rank[] hold. Out: *levels = the
 * number of levels; my_cluster[i] = index of the level-i object holding this
 * process (the node number at level 0), my_rank[i] = this process's position
 * among the group's processes in that object, in rank order. If the arrays
 * are too short: PMI_ERR_INVALID_LENGTH with *levels set to the number
 * needed (pass *levels = 0 and NULL arrays to ask). A singleton has one
 * level (node 0, rank 0). PMI_ERR_UNSUPPORTED when nothing was published. */
int PMI_Topo_cluster_info(PMI_Group group, int *levels, int my_cluster[], int my_rank[]);
/* The mesh's extent in each of ndims dimensions; dims[i] = 1 beyond the
 * mesh's own dimensions. PMI_ERR_INVALID_LENGTH if ndims is less than the
 * mesh's dimensions; PMI_ERR_UNSUPPORTED if the topology is not a mesh. */
int PMI_Topo_mesh_info(PMI_Group group, int ndims, int dims[]);

#if defined(__cplusplus)
}
#endif
#endif /* PMI_H_INCLUDED */
