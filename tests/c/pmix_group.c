/* PMIx groups straight through OpenPMIx's client library (no MPI), to
 * check what rivetrun's PMIx server serves of them.
 *
 *   pmix_group    every rank puts a card, constructs group "pmix-group-test"
 *                 of its whole namespace with a context id, reads every
 *                 member's card, fences over the members, then destructs
 *                 the group. Prints "pmix_group rank R ctx C members N OK".
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
        fprintf(stderr, "pmix_group rank %u: %s: %s\n", me.rank, what, PMIx_Error_string(rc)); \
        return 1;                                                                          \
    } while (0)

int main(void) {
    pmix_proc_t me, wild;
    pmix_value_t v, *val = NULL;
    pmix_info_t *results = NULL, dir;
    size_t nresults = 0;
    pmix_status_t rc;
    char card[64];
    bool yes = true;
    if ((rc = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS) {
        fprintf(stderr, "PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    PMIX_PROC_LOAD(&wild, me.nspace, PMIX_RANK_WILDCARD);
    if ((rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val)) != PMIX_SUCCESS)
        FAIL("PMIx_Get(job size)", rc);
    uint32_t size = val->data.uint32;
    PMIX_VALUE_RELEASE(val);

    snprintf(card, sizeof card, "card-of-%u", me.rank);
    PMIX_VALUE_LOAD(&v, card, PMIX_STRING);
    if ((rc = PMIx_Put(PMIX_GLOBAL, "test.card", &v)) != PMIX_SUCCESS)
        FAIL("PMIx_Put", rc);
    PMIX_VALUE_DESTRUCT(&v);
    if ((rc = PMIx_Commit()) != PMIX_SUCCESS)
        FAIL("PMIx_Commit", rc);

    PMIX_INFO_LOAD(&dir, PMIX_GROUP_ASSIGN_CONTEXT_ID, &yes, PMIX_BOOL);
    rc = PMIx_Group_construct("pmix-group-test", &wild, 1, &dir, 1, &results, &nresults);
    if (rc != PMIX_SUCCESS)
        FAIL("PMIx_Group_construct", rc);
    size_t ctx = 0;
    for (size_t i = 0; i < nresults; i++)
        if (PMIX_CHECK_KEY(&results[i], PMIX_GROUP_CONTEXT_ID))
            PMIX_VALUE_GET_NUMBER(rc, &results[i].value, ctx, size_t);
    if (ctx == 0) {
        fprintf(stderr, "pmix_group rank %u: no context id among %zu results\n", me.rank,
                nresults);
        return 1;
    }
    for (uint32_t r = 0; r < size; r++) {
        pmix_proc_t p;
        PMIX_PROC_LOAD(&p, me.nspace, r);
        val = NULL;
        if ((rc = PMIx_Get(&p, "test.card", NULL, 0, &val)) != PMIX_SUCCESS)
            FAIL("PMIx_Get(card)", rc);
        snprintf(card, sizeof card, "card-of-%u", r);
        if (val->type != PMIX_STRING || strcmp(val->data.string, card) != 0) {
            fprintf(stderr, "pmix_group rank %u: rank %u's card is wrong\n", me.rank, r);
            return 1;
        }
        PMIX_VALUE_RELEASE(val);
    }
    if ((rc = PMIx_Fence(&wild, 1, NULL, 0)) != PMIX_SUCCESS)
        FAIL("PMIx_Fence", rc);
    if ((rc = PMIx_Group_destruct("pmix-group-test", NULL, 0)) != PMIX_SUCCESS)
        FAIL("PMIx_Group_destruct", rc);
    printf("pmix_group rank %u ctx %zu members %u OK\n", me.rank, ctx, size);
    PMIx_Finalize(NULL, 0);
    return 0;
}
