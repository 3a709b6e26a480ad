/* Business cards straight through OpenPMIx's client library (no MPI), to
 * check what a PMIx server serves across hosts.
 *
 *   pmix_modex collect  every rank puts a card, commits, fences over the
 *                       job collecting data, and reads every rank's card
 *   pmix_modex direct   the same with a fence that collects nothing: cards
 *                       of ranks on other hosts come by direct modex
 *   pmix_modex refused  a fence naming a process of another namespace
 *                       must fail (multi-host proxies do not carry it),
 *                       not hang
 *
 * Prints "pmix_modex MODE rank R of N OK" (for refused, one line per call
 * first: "pmix_modex refused CALL: ERROR").
 */
/* The header uses strdup and strncasecmp without declaring them. */
#define _DEFAULT_SOURCE
#include <string.h>
#include <strings.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>

#define FAIL(what, rc)                                                                     \
    do {                                                                                   \
        fprintf(stderr, "pmix_modex rank %u: %s: %s\n", me.rank, what, PMIx_Error_string(rc)); \
        PMIx_Finalize(NULL, 0);                                                            \
        return 1;                                                                          \
    } while (0)

int main(int argc, char **argv) {
    pmix_proc_t me, wild, peer;
    pmix_value_t v, *val = NULL;
    pmix_info_t info;
    pmix_status_t rc;
    char card[64];
    const char *mode = argc > 1 ? argv[1] : "collect";
    if ((rc = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS) {
        fprintf(stderr, "PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    PMIX_PROC_LOAD(&wild, me.nspace, PMIX_RANK_WILDCARD);
    if ((rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val)) != PMIX_SUCCESS)
        FAIL("PMIx_Get(job size)", rc);
    uint32_t size = val->data.uint32;
    PMIX_VALUE_RELEASE(val);

    if (strcmp(mode, "refused") == 0) {
        /* A fence naming another namespace's process (proxies serve only
         * the job's and their children's): refused, not waited for. */
        pmix_proc_t two[2];
        PMIX_PROC_LOAD(&two[0], me.nspace, me.rank);
        PMIX_PROC_LOAD(&two[1], "rivet-no-such-namespace", 0);
        rc = PMIx_Fence(two, 2, NULL, 0);
        if (rc == PMIX_SUCCESS)
            FAIL("a fence naming another namespace succeeded", rc);
        printf("pmix_modex refused fence: %s\n", PMIx_Error_string(rc));
    } else {
        snprintf(card, sizeof card, "card-of-%u", me.rank);
        v.type = PMIX_STRING;
        v.data.string = card;
        if ((rc = PMIx_Put(PMIX_GLOBAL, "rivet-modex-card", &v)) != PMIX_SUCCESS)
            FAIL("PMIx_Put", rc);
        if ((rc = PMIx_Commit()) != PMIX_SUCCESS)
            FAIL("PMIx_Commit", rc);
        bool collect = strcmp(mode, "collect") == 0;
        PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
        if ((rc = PMIx_Fence(NULL, 0, &info, 1)) != PMIX_SUCCESS)
            FAIL("PMIx_Fence", rc);
        for (uint32_t r = 0; r < size; r++) {
            char want[64];
            PMIX_PROC_LOAD(&peer, me.nspace, r);
            if ((rc = PMIx_Get(&peer, "rivet-modex-card", NULL, 0, &val)) != PMIX_SUCCESS) {
                fprintf(stderr, "pmix_modex rank %u: PMIx_Get(rank %u's card): %s\n", me.rank, r,
                        PMIx_Error_string(rc));
                PMIx_Finalize(NULL, 0);
                return 1;
            }
            snprintf(want, sizeof want, "card-of-%u", r);
            if (val->type != PMIX_STRING || strcmp(val->data.string, want) != 0) {
                fprintf(stderr, "pmix_modex rank %u: rank %u's card is wrong\n", me.rank, r);
                return 1;
            }
            PMIX_VALUE_RELEASE(val);
        }
        /* Everyone has read every card before anyone finalizes. */
        if ((rc = PMIx_Fence(NULL, 0, NULL, 0)) != PMIX_SUCCESS)
            FAIL("PMIx_Fence (last)", rc);
    }
    printf("pmix_modex %s rank %u of %u OK\n", mode, me.rank, size);
    PMIx_Finalize(NULL, 0);
    return 0;
}
