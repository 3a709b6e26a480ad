/* Collectives given PMIX_TIMEOUT across hosts, straight through OpenPMIx's
 * client library (no MPI). Run with ranks on two hosts; each mode's
 * collective spans both and passes PMIX_TIMEOUT = 1 s. With "late", the
 * last rank joins it 3 s late (run one rank per host: the other rank's
 * server then sees its deadline pass while its host still waits):
 *
 *   pmix_timeout fence [late]    PMIx_Fence over the job: must succeed on
 *                                every rank (OpenPMIx 4.2.2 stops its timer
 *                                once its own clients are in; the host's
 *                                answer, however late, completes the fence)
 *   pmix_timeout connect [late]  PMIx_Connect over the job: must fail at
 *                                once on every rank with
 *                                PMIX_ERR_NOT_SUPPORTED (a node's server
 *                                refuses it: OpenPMIx 4.2.2 would complete
 *                                it a second time when the host answered
 *                                after its timer)
 *   pmix_timeout group [late]    PMIx_Group_construct over the job, with a
 *                                context id so that it reaches the host:
 *                                must fail at once as connect does
 *                                (OpenPMIx 4.2.2's timer for a group
 *                                misreads its own tracker)
 *
 * With "mixed" instead of "late", only the last rank passes PMIX_TIMEOUT
 * (for connect and group: the other host's ranks, which passed none, must
 * fail at once too rather than wait for the refusing host).
 *
 * Then every rank fences without a timeout and finalizes. Prints
 * "pmix_timeout MODE rank R: STATUS" for the timed call, then
 * "pmix_timeout MODE rank R done".
 */
/* The header uses strdup and strncasecmp without declaring them. */
#define _DEFAULT_SOURCE
#include <string.h>
#include <strings.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pmix_proc_t me;

#define FAIL(what, rc)                                                                    \
    do {                                                                                  \
        fprintf(stderr, "pmix_timeout rank %u: %s: %s\n", me.rank, what,                  \
                PMIx_Error_string(rc));                                                   \
        PMIx_Finalize(NULL, 0);                                                           \
        return 1;                                                                         \
    } while (0)

int main(int argc, char **argv) {
    pmix_proc_t wild;
    pmix_value_t *val = NULL;
    pmix_info_t dirs[2];
    pmix_status_t rc, want;
    int secs = 1;
    bool yes = true;
    const char *mode = argc > 1 ? argv[1] : "fence";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if ((rc = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS) {
        fprintf(stderr, "PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    PMIX_PROC_LOAD(&wild, me.nspace, PMIX_RANK_WILDCARD);
    PMIX_INFO_LOAD(&dirs[0], PMIX_TIMEOUT, &secs, PMIX_INT);
    PMIX_INFO_LOAD(&dirs[1], PMIX_GROUP_ASSIGN_CONTEXT_ID, &yes, PMIX_BOOL);
    if ((rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val)) != PMIX_SUCCESS)
        FAIL("PMIx_Get(job size)", rc);
    uint32_t size = val->data.uint32;
    PMIX_VALUE_RELEASE(val);
    if (argc > 2 && strcmp(argv[2], "late") == 0 && me.rank == size - 1)
        sleep(3);
    /* dirs + skip: the directives this rank passes (PMIX_TIMEOUT first). */
    size_t skip = argc > 2 && strcmp(argv[2], "mixed") == 0 && me.rank != size - 1;
    if (strcmp(mode, "fence") == 0) {
        rc = PMIx_Fence(&wild, 1, dirs + skip, 1 - skip);
        want = PMIX_SUCCESS;
    } else if (strcmp(mode, "connect") == 0) {
        rc = PMIx_Connect(&wild, 1, dirs + skip, 1 - skip);
        want = PMIX_ERR_NOT_SUPPORTED;
    } else if (strcmp(mode, "group") == 0) {
        pmix_info_t *results = NULL;
        size_t nresults = 0;
        rc = PMIx_Group_construct("pmix-timeout-test", &wild, 1, dirs + skip, 2 - skip, &results,
                                  &nresults);
        if (results != NULL)
            PMIX_INFO_FREE(results, nresults);
        want = PMIX_ERR_NOT_SUPPORTED;
    } else {
        FAIL("unknown mode", PMIX_ERR_BAD_PARAM);
    }
    printf("pmix_timeout %s rank %u: %s\n", mode, me.rank, PMIx_Error_string(rc));
    if (rc != want)
        FAIL("the timed call", rc);
    if ((rc = PMIx_Fence(NULL, 0, NULL, 0)) != PMIX_SUCCESS)
        FAIL("PMIx_Fence (no timeout)", rc);
    printf("pmix_timeout %s rank %u done\n", mode, me.rank);
    PMIx_Finalize(NULL, 0);
    return 0;
}
