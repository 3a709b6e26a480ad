/* Collectives given PMIX_TIMEOUT across hosts, straight through OpenPMIx's
 * client library (no MPI). Run with ranks on two hosts; each mode's
 * collective spans both and passes PMIX_TIMEOUT = 1 s. With "late", the
 * last rank joins it 3 s late, printing "pmix_timeout MODE rank R: calling"
 * first (run one rank per host: the other rank's server then sees its
 * deadline pass while its host still waits):
 *
 *   pmix_timeout fence [late]    PMIx_Fence over the job: succeeds on every
 *                                rank when all are in time; with "late"
 *                                (or "late-untimed") fails on every rank
 *                                with PMIX_ERR_TIMEOUT, the ranks in time
 *                                at the deadline (OpenPMIx 4.2.2 stops its
 *                                own timer once its own clients are in;
 *                                the proxies and rivetrun enforce it across
 *                                hosts)
 *   pmix_timeout subset [late]   PMIx_Fence over ranks 0 and the last
 *                                only (one on each host with two per host:
 *                                gathered by rivetrun, not the tree), as
 *                                fence; the other ranks skip it
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
 * fail at once too rather than wait for the refusing host). With
 * "late-untimed", the last rank is late and passes none, the others pass
 * it (a fence: the late rank fails too, with the others' timeout).
 *
 * After a fence (subset) mode, its ranks fence again over the same
 * processes without a timeout, which must succeed (a failed fence must not
 * spoil the next one). Then every rank fences without a timeout and
 * finalizes. Prints "pmix_timeout MODE rank R: STATUS" for the timed call
 * (a rank not in it: "pmix_timeout MODE rank R: not in it"), then
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
    pmix_status_t rc, want = PMIX_SUCCESS;
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
    const char *how = argc > 2 ? argv[2] : "";
    bool late = strncmp(how, "late", 4) == 0;
    bool last = me.rank == size - 1;
    if (late && last) {
        sleep(3);
        printf("pmix_timeout %s rank %u: calling\n", mode, me.rank);
    }
    /* dirs + skip: the directives this rank passes (PMIX_TIMEOUT first). */
    size_t skip =
        (strcmp(how, "mixed") == 0 && !last) || (strcmp(how, "late-untimed") == 0 && last);
    /* The fence modes' processes: the job, or ranks 0 and the last. */
    pmix_proc_t pair[2];
    PMIX_PROC_LOAD(&pair[0], me.nspace, 0);
    PMIX_PROC_LOAD(&pair[1], me.nspace, size - 1);
    pmix_proc_t *procs = strcmp(mode, "subset") == 0 ? pair : &wild;
    size_t nprocs = procs == pair ? 2 : 1;
    if (procs == pair && me.rank != 0 && !last) {
        printf("pmix_timeout %s rank %u: not in it\n", mode, me.rank);
    } else if (strcmp(mode, "fence") == 0 || strcmp(mode, "subset") == 0) {
        rc = PMIx_Fence(procs, nprocs, dirs + skip, 1 - skip);
        want = late ? PMIX_ERR_TIMEOUT : PMIX_SUCCESS;
        printf("pmix_timeout %s rank %u: %s\n", mode, me.rank, PMIx_Error_string(rc));
        if (rc != want)
            FAIL("the timed fence", rc);
        /* The same processes again, untimed: unaffected by the failure. */
        if ((rc = PMIx_Fence(procs, nprocs, NULL, 0)) != PMIX_SUCCESS)
            FAIL("the same fence again, untimed", rc);
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
    if (strcmp(mode, "connect") == 0 || strcmp(mode, "group") == 0) {
        printf("pmix_timeout %s rank %u: %s\n", mode, me.rank, PMIx_Error_string(rc));
        if (rc != want)
            FAIL("the timed call", rc);
    }
    if ((rc = PMIx_Fence(NULL, 0, NULL, 0)) != PMIX_SUCCESS)
        FAIL("PMIx_Fence (no timeout)", rc);
    printf("pmix_timeout %s rank %u done\n", mode, me.rank);
    PMIx_Finalize(NULL, 0);
    return 0;
}
