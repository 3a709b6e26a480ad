/*
 * mpi.h: Rivet's thin MPI layer (librivetmpi), a C library on librivet's
 * C ABI (rivet.h). It covers a fixed subset of MPI-3.1, listed below; any
 * other MPI call is absent, so a program using one fails to link.
 *
 * Build programs with `rivetcc` (like mpicc) and run them under rivetrun.
 *
 * Handles are ints (like MPICH's): communicators, datatypes, operations,
 * requests, messages, error handlers and info objects. MPI_Status has the
 * public fields MPI_SOURCE, MPI_TAG and MPI_ERROR.
 */
#ifndef RIVET_MPI_H
#define RIVET_MPI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MPI_VERSION 3
#define MPI_SUBVERSION 1

typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Op;
/* librivet's 64-bit request handle, so that most requests need no
 * translation (MPI leaves the type of a handle to the implementation). */
typedef uint64_t MPI_Request;
typedef int MPI_Message;
typedef int MPI_Errhandler;
typedef int MPI_Info;
typedef intptr_t MPI_Aint;
typedef long long MPI_Offset;
typedef long long MPI_Count;
typedef int MPI_Fint;

typedef struct MPI_Status {
    int MPI_SOURCE;
    int MPI_TAG;
    int MPI_ERROR;
    /* Private to the library: cancelled flag and bytes received. */
    int rivet_cancelled;
    long long rivet_count;
} MPI_Status;

/* Communicators. */
#define MPI_COMM_NULL ((MPI_Comm)0)
#define MPI_COMM_WORLD ((MPI_Comm)0x44000000)
#define MPI_COMM_SELF ((MPI_Comm)0x44000001)

/* Predefined datatypes (contiguous C types). */
#define MPI_DATATYPE_NULL ((MPI_Datatype)0)
#define MPI_CHAR ((MPI_Datatype)0x4c000001)
#define MPI_SIGNED_CHAR ((MPI_Datatype)0x4c000002)
#define MPI_UNSIGNED_CHAR ((MPI_Datatype)0x4c000003)
#define MPI_BYTE ((MPI_Datatype)0x4c000004)
#define MPI_SHORT ((MPI_Datatype)0x4c000005)
#define MPI_UNSIGNED_SHORT ((MPI_Datatype)0x4c000006)
#define MPI_INT ((MPI_Datatype)0x4c000007)
#define MPI_UNSIGNED ((MPI_Datatype)0x4c000008)
#define MPI_LONG ((MPI_Datatype)0x4c000009)
#define MPI_UNSIGNED_LONG ((MPI_Datatype)0x4c00000a)
#define MPI_LONG_LONG_INT ((MPI_Datatype)0x4c00000b)
#define MPI_LONG_LONG MPI_LONG_LONG_INT
#define MPI_UNSIGNED_LONG_LONG ((MPI_Datatype)0x4c00000c)
#define MPI_FLOAT ((MPI_Datatype)0x4c00000d)
#define MPI_DOUBLE ((MPI_Datatype)0x4c00000e)
#define MPI_LONG_DOUBLE ((MPI_Datatype)0x4c00000f)
#define MPI_WCHAR ((MPI_Datatype)0x4c000010)
#define MPI_C_BOOL ((MPI_Datatype)0x4c000011)
#define MPI_INT8_T ((MPI_Datatype)0x4c000012)
#define MPI_INT16_T ((MPI_Datatype)0x4c000013)
#define MPI_INT32_T ((MPI_Datatype)0x4c000014)
#define MPI_INT64_T ((MPI_Datatype)0x4c000015)
#define MPI_UINT8_T ((MPI_Datatype)0x4c000016)
#define MPI_UINT16_T ((MPI_Datatype)0x4c000017)
#define MPI_UINT32_T ((MPI_Datatype)0x4c000018)
#define MPI_UINT64_T ((MPI_Datatype)0x4c000019)
#define MPI_C_FLOAT_COMPLEX ((MPI_Datatype)0x4c00001a)
#define MPI_C_COMPLEX MPI_C_FLOAT_COMPLEX
#define MPI_C_DOUBLE_COMPLEX ((MPI_Datatype)0x4c00001b)
#define MPI_AINT ((MPI_Datatype)0x4c00001c)
#define MPI_OFFSET ((MPI_Datatype)0x4c00001d)
#define MPI_COUNT ((MPI_Datatype)0x4c00001e)
/* Pairs for MPI_MINLOC / MPI_MAXLOC. */
#define MPI_FLOAT_INT ((MPI_Datatype)0x4c00001f)
#define MPI_DOUBLE_INT ((MPI_Datatype)0x4c000020)
#define MPI_LONG_INT ((MPI_Datatype)0x4c000021)
#define MPI_2INT ((MPI_Datatype)0x4c000022)
#define MPI_SHORT_INT ((MPI_Datatype)0x4c000023)
#define MPI_LONG_DOUBLE_INT ((MPI_Datatype)0x4c000024)

/* Built-in reduction operations. */
#define MPI_OP_NULL ((MPI_Op)0)
#define MPI_MAX ((MPI_Op)0x58000001)
#define MPI_MIN ((MPI_Op)0x58000002)
#define MPI_SUM ((MPI_Op)0x58000003)
#define MPI_PROD ((MPI_Op)0x58000004)
#define MPI_LAND ((MPI_Op)0x58000005)
#define MPI_BAND ((MPI_Op)0x58000006)
#define MPI_LOR ((MPI_Op)0x58000007)
#define MPI_BOR ((MPI_Op)0x58000008)
#define MPI_LXOR ((MPI_Op)0x58000009)
#define MPI_BXOR ((MPI_Op)0x5800000a)
#define MPI_MINLOC ((MPI_Op)0x5800000b)
#define MPI_MAXLOC ((MPI_Op)0x5800000c)

#define MPI_REQUEST_NULL ((MPI_Request)0)
#define MPI_MESSAGE_NULL ((MPI_Message)0)
#define MPI_MESSAGE_NO_PROC ((MPI_Message)0x6c000000)
#define MPI_ERRHANDLER_NULL ((MPI_Errhandler)0)
#define MPI_ERRORS_ARE_FATAL ((MPI_Errhandler)0x54000000)
#define MPI_ERRORS_RETURN ((MPI_Errhandler)0x54000001)
#define MPI_INFO_NULL ((MPI_Info)0)

/* Ranks, tags, special buffers and arrays. */
#define MPI_ANY_SOURCE (-1)
#define MPI_PROC_NULL (-2)
#define MPI_ROOT (-4)
#define MPI_ANY_TAG (-1)
#define MPI_UNDEFINED (-32766)
#define MPI_BOTTOM ((void *)0)
#define MPI_IN_PLACE ((void *)-1)
#define MPI_STATUS_IGNORE ((MPI_Status *)1)
#define MPI_STATUSES_IGNORE ((MPI_Status *)1)
#define MPI_ERRCODES_IGNORE ((int *)0)
#define MPI_ARGV_NULL ((char **)0)

#define MPI_MAX_PROCESSOR_NAME 256
#define MPI_MAX_ERROR_STRING 512
#define MPI_MAX_LIBRARY_VERSION_STRING 256
#define MPI_MAX_PORT_NAME 1024

/* Thread levels. */
#define MPI_THREAD_SINGLE 0
#define MPI_THREAD_FUNNELED 1
#define MPI_THREAD_SERIALIZED 2
#define MPI_THREAD_MULTIPLE 3

/* MPI_Comm_compare results. */
#define MPI_IDENT 0
#define MPI_CONGRUENT 1
#define MPI_SIMILAR 2
#define MPI_UNEQUAL 3

/* MPI_Comm_split_type. */
#define MPI_COMM_TYPE_SHARED 1

/* Predefined attribute keys (MPI_Comm_get_attr). */
#define MPI_TAG_UB 0x64400001
#define MPI_UNIVERSE_SIZE 0x64400002
#define MPI_APPNUM 0x64400003
#define MPI_WTIME_IS_GLOBAL 0x64400004

/* Error classes (every code this library returns is a class). */
#define MPI_SUCCESS 0
#define MPI_ERR_BUFFER 1
#define MPI_ERR_COUNT 2
#define MPI_ERR_TYPE 3
#define MPI_ERR_TAG 4
#define MPI_ERR_COMM 5
#define MPI_ERR_RANK 6
#define MPI_ERR_ROOT 7
#define MPI_ERR_GROUP 8
#define MPI_ERR_OP 9
#define MPI_ERR_ARG 12
#define MPI_ERR_UNKNOWN 13
#define MPI_ERR_TRUNCATE 14
#define MPI_ERR_OTHER 15
#define MPI_ERR_INTERN 16
#define MPI_ERR_IN_STATUS 17
#define MPI_ERR_PENDING 18
#define MPI_ERR_REQUEST 19
#define MPI_ERR_CONVERSION 23
#define MPI_ERR_INFO 28
#define MPI_ERR_NAME 33
#define MPI_ERR_NO_MEM 34
#define MPI_ERR_PORT 38
#define MPI_ERR_SERVICE 41
#define MPI_ERR_SPAWN 42
#define MPI_ERR_UNSUPPORTED_OPERATION 44
#define MPI_ERR_LASTCODE 0x3fffffff

/* Initialisation and the environment. */
int MPI_Init(int *argc, char ***argv);
int MPI_Init_thread(int *argc, char ***argv, int required, int *provided);
int MPI_Query_thread(int *provided);
int MPI_Initialized(int *flag);
int MPI_Finalize(void);
int MPI_Finalized(int *flag);
int MPI_Abort(MPI_Comm comm, int errorcode);
int MPI_Get_version(int *version, int *subversion);
int MPI_Get_library_version(char *version, int *resultlen);
int MPI_Get_processor_name(char *name, int *resultlen);
double MPI_Wtime(void);
double MPI_Wtick(void);
int MPI_Error_string(int errorcode, char *string, int *resultlen);
int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler);
int MPI_Alloc_mem(MPI_Aint size, MPI_Info info, void *baseptr);
int MPI_Free_mem(void *base);

/* Communicators. */
int MPI_Comm_rank(MPI_Comm comm, int *rank);
int MPI_Comm_size(MPI_Comm comm, int *size);
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm);
int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info,
                        MPI_Comm *newcomm);
int MPI_Comm_free(MPI_Comm *comm);
int MPI_Comm_compare(MPI_Comm comm1, MPI_Comm comm2, int *result);
int MPI_Comm_get_attr(MPI_Comm comm, int comm_keyval, void *attribute_val, int *flag);

/* Point to point. */
int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
             MPI_Comm comm);
int MPI_Ssend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
              MPI_Comm comm);
int MPI_Rsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
              MPI_Comm comm);
int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag,
             MPI_Comm comm, MPI_Status *status);
int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest,
                 int sendtag, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                 int source, int recvtag, MPI_Comm comm, MPI_Status *status);
int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
              MPI_Comm comm, MPI_Request *request);
int MPI_Issend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
               MPI_Comm comm, MPI_Request *request);
int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag,
              MPI_Comm comm, MPI_Request *request);
int MPI_Wait(MPI_Request *request, MPI_Status *status);
int MPI_Waitall(int count, MPI_Request *array_of_requests,
                MPI_Status *array_of_statuses);
int MPI_Waitany(int count, MPI_Request *array_of_requests, int *index,
                MPI_Status *status);
int MPI_Waitsome(int incount, MPI_Request *array_of_requests, int *outcount,
                 int array_of_indices[], MPI_Status *array_of_statuses);
int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status);
int MPI_Testall(int count, MPI_Request *array_of_requests, int *flag,
                MPI_Status *array_of_statuses);
int MPI_Testany(int count, MPI_Request *array_of_requests, int *index, int *flag,
                MPI_Status *status);
int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status *status);
int MPI_Iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status);
int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message *message,
               MPI_Status *status);
int MPI_Mrecv(void *buf, int count, MPI_Datatype datatype, MPI_Message *message,
              MPI_Status *status);
int MPI_Get_count(const MPI_Status *status, MPI_Datatype datatype, int *count);
int MPI_Cancel(MPI_Request *request);
int MPI_Test_cancelled(const MPI_Status *status, int *flag);
int MPI_Request_free(MPI_Request *request);

/* Collectives (intracommunicators; MPI_Barrier also on intercommunicators). */
int MPI_Barrier(MPI_Comm comm);
int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm);
int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
               MPI_Op op, int root, MPI_Comm comm);
int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                  MPI_Op op, MPI_Comm comm);
int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                  void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                 void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm);

/* Dynamic processes. */
int MPI_Comm_spawn(const char *command, char *argv[], int maxprocs, MPI_Info info,
                   int root, MPI_Comm comm, MPI_Comm *intercomm, int array_of_errcodes[]);
int MPI_Comm_get_parent(MPI_Comm *parent);
int MPI_Open_port(MPI_Info info, char *port_name);
int MPI_Close_port(const char *port_name);
int MPI_Comm_accept(const char *port_name, MPI_Info info, int root, MPI_Comm comm,
                    MPI_Comm *newcomm);
int MPI_Comm_connect(const char *port_name, MPI_Info info, int root, MPI_Comm comm,
                     MPI_Comm *newcomm);
int MPI_Comm_disconnect(MPI_Comm *comm);
int MPI_Publish_name(const char *service_name, MPI_Info info, const char *port_name);
int MPI_Lookup_name(const char *service_name, MPI_Info info, char *port_name);
int MPI_Unpublish_name(const char *service_name, MPI_Info info, const char *port_name);
int MPI_Intercomm_merge(MPI_Comm intercomm, int high, MPI_Comm *newintracomm);

#ifdef __cplusplus
}
#endif

#endif /* RIVET_MPI_H */
