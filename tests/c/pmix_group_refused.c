/* A PMIx group construct that fails across hosts, straight through
 * OpenPMIx's client library (no MPI). Run with 4 ranks, 2 on each of two
 * hosts (ranks 0 and 1 on the first).
 *
 *   pmix_group_refused [retry]
 *       1. every rank constructs group "pmix-refused-test" of its whole
 *          namespace, without PMIX_GROUP_NOTIFY_TERMINATION, with a context
 *          id (under OpenPMIx 4.2.2 a construct asking for none never
 *          reached the host's upcall in our runs); ranks 2 and 3 mark it optional
 *          (PMIX_GROUP_OPTIONAL), which their proxy refuses over several
 *          hosts. The construct must fail on every rank:
 *          "pmix_group_refused rank R construct failed: STATUS".
 *       2. with "retry": every rank constructs the same group again, plain,
 *          with a context id, which must succeed ("pmix_group_refused rank
 *          R retry ctx C"), then destructs it.
 *       Then every rank finalizes and exits. No group is live then, so no
 *       rank's end may fail the job.
 */
/* The header uses strdup and strncasecmp without declaring them. */
#define _DEFAULT_SOURCE
#include <string.h>
#include <strings.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>

#define GROUP "pmix-refused-test"

static pmix_proc_t me;

#define FAIL(what, rc)                                                                     \
    do {                                                                                   \
        fprintf(stderr, "pmix_group_refused rank %u: %s: %s\n", me.rank, what,            \
                PMIx_Error_string(rc));                                                    \
        return 1;                                                                          \
    } while (0)

int main(int argc, char **argv) {
    pmix_proc_t wild;
    pmix_info_t *results = NULL, dirs[2];
    size_t nresults = 0;
    pmix_status_t rc;
    bool yes = true, optional;
    int retry = argc > 1 && strcmp(argv[1], "retry") == 0;
    if ((rc = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS) {
        fprintf(stderr, "PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    PMIX_PROC_LOAD(&wild, me.nspace, PMIX_RANK_WILDCARD);

    optional = me.rank >= 2;
    PMIX_INFO_LOAD(&dirs[0], PMIX_GROUP_ASSIGN_CONTEXT_ID, &yes, PMIX_BOOL);
    PMIX_INFO_LOAD(&dirs[1], PMIX_GROUP_OPTIONAL, &optional, PMIX_BOOL);
    rc = PMIx_Group_construct(GROUP, &wild, 1, dirs, 2, &results, &nresults);
    if (rc == PMIX_SUCCESS)
        FAIL("the refused construct", rc);
    if (results)
        PMIX_INFO_FREE(results, nresults);
    printf("pmix_group_refused rank %u construct failed: %s\n", me.rank, PMIx_Error_string(rc));
    fflush(stdout);

    if (retry) {
        results = NULL;
        nresults = 0;
        PMIX_INFO_LOAD(&dirs[0], PMIX_GROUP_ASSIGN_CONTEXT_ID, &yes, PMIX_BOOL);
        rc = PMIx_Group_construct(GROUP, &wild, 1, dirs, 1, &results, &nresults);
        if (rc != PMIX_SUCCESS)
            FAIL("the retried construct", rc);
        size_t ctx = 0;
        for (size_t i = 0; i < nresults; i++)
            if (PMIX_CHECK_KEY(&results[i], PMIX_GROUP_CONTEXT_ID))
                ctx = results[i].value.data.size;
        if (results)
            PMIX_INFO_FREE(results, nresults);
        if (ctx == 0)
            FAIL("the retried construct gave no context id", PMIX_ERR_NOT_FOUND);
        printf("pmix_group_refused rank %u retry ctx %zu\n", me.rank, ctx);
        fflush(stdout);
        if ((rc = PMIx_Group_destruct(GROUP, NULL, 0)) != PMIX_SUCCESS)
            FAIL("PMIx_Group_destruct", rc);
    }
    PMIx_Finalize(NULL, 0);
    return 0;
}
