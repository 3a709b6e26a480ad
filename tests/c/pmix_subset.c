/* PMIx collectives over some of a job's ranks, straight through OpenPMIx's
 * client library (no MPI), to check what a server serves across hosts.
 * Run with an even number N >= 4 of ranks, N/2 on each of two hosts: the
 * pairs below then each span both hosts.
 *
 *   pmix_subset   1. every rank puts a card and commits; ranks 0 and N-1
 *                    fence over the two of them collecting data, and so do
 *                    ranks 1 and N-2 at the same time; each then reads its
 *                    partner's card with PMIX_IMMEDIATE (so it must have
 *                    come with the fence, not by direct modex); the pairs
 *                    fence a second time (no data).
 *                 2. every rank constructs group "pmix-subset-all" of the
 *                    whole namespace with a context id, reads every
 *                    member's card, destructs it.
 *                 3. ranks 0 and N-1 construct "pmix-subset-pair" of the
 *                    two of them, ranks 1 and N-2 "pmix-subset-other", both
 *                    with context ids, then destruct them.
 *                 4. a fence over the job.
 *
 * Prints "pmix_subset rank R of N all ctx C pair ctx D OK" (D the context
 * of the pair group the rank was in, 0 for ranks in none).
 */
/* The header uses strdup and strncasecmp without declaring them. */
#define _DEFAULT_SOURCE
#include <string.h>
#include <strings.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>

#define FAIL(what, rc)                                                                      \
    do {                                                                                    \
        fprintf(stderr, "pmix_subset rank %u: %s: %s\n", me.rank, what, PMIx_Error_string(rc)); \
        return 1;                                                                           \
    } while (0)

static pmix_proc_t me;

/* Rank r's card, checked; `immediate`: without asking other servers. */
static int check_card(uint32_t r, bool immediate) {
    pmix_proc_t p;
    pmix_value_t *val = NULL;
    pmix_info_t info;
    char want[64];
    pmix_status_t rc;
    PMIX_PROC_LOAD(&p, me.nspace, r);
    PMIX_INFO_LOAD(&info, PMIX_IMMEDIATE, &immediate, PMIX_BOOL);
    if ((rc = PMIx_Get(&p, "test.card", &info, 1, &val)) != PMIX_SUCCESS) {
        fprintf(stderr, "pmix_subset rank %u: PMIx_Get(rank %u's card%s): %s\n", me.rank, r,
                immediate ? ", immediate" : "", PMIx_Error_string(rc));
        return 1;
    }
    snprintf(want, sizeof want, "card-of-%u", r);
    if (val->type != PMIX_STRING || strcmp(val->data.string, want) != 0) {
        fprintf(stderr, "pmix_subset rank %u: rank %u's card is wrong\n", me.rank, r);
        return 1;
    }
    PMIX_VALUE_RELEASE(val);
    return 0;
}

/* Construct group `name` of `procs` with a context id into `ctx`. */
static pmix_status_t construct(const char *name, pmix_proc_t *procs, size_t n, size_t *ctx) {
    pmix_info_t dir, *results = NULL;
    size_t nresults = 0;
    bool yes = true;
    pmix_status_t rc;
    PMIX_INFO_LOAD(&dir, PMIX_GROUP_ASSIGN_CONTEXT_ID, &yes, PMIX_BOOL);
    rc = PMIx_Group_construct(name, procs, n, &dir, 1, &results, &nresults);
    if (rc != PMIX_SUCCESS)
        return rc;
    *ctx = 0;
    for (size_t i = 0; i < nresults; i++)
        if (PMIX_CHECK_KEY(&results[i], PMIX_GROUP_CONTEXT_ID))
            PMIX_VALUE_GET_NUMBER(rc, &results[i].value, *ctx, size_t);
    if (results != NULL)
        PMIX_INFO_FREE(results, nresults);
    return *ctx == 0 ? PMIX_ERR_NOT_FOUND : PMIX_SUCCESS;
}

int main(void) {
    pmix_proc_t wild, pair[2];
    pmix_value_t v, *val = NULL;
    pmix_info_t collect;
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
    if (size < 4 || size % 2 != 0) {
        fprintf(stderr, "pmix_subset: needs an even number of ranks >= 4, not %u\n", size);
        return 1;
    }

    snprintf(card, sizeof card, "card-of-%u", me.rank);
    PMIX_VALUE_LOAD(&v, card, PMIX_STRING);
    if ((rc = PMIx_Put(PMIX_GLOBAL, "test.card", &v)) != PMIX_SUCCESS)
        FAIL("PMIx_Put", rc);
    PMIX_VALUE_DESTRUCT(&v);
    if ((rc = PMIx_Commit()) != PMIX_SUCCESS)
        FAIL("PMIx_Commit", rc);

    /* 1. The pairs (0, N-1) and (1, N-2) fence, each over itself. */
    uint32_t partner = size - 1 - me.rank;
    bool paired = me.rank <= 1 || me.rank >= size - 2;
    if (paired) {
        PMIX_PROC_LOAD(&pair[0], me.nspace, me.rank < partner ? me.rank : partner);
        PMIX_PROC_LOAD(&pair[1], me.nspace, me.rank < partner ? partner : me.rank);
        PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
        if ((rc = PMIx_Fence(pair, 2, &collect, 1)) != PMIX_SUCCESS)
            FAIL("PMIx_Fence(pair, collecting)", rc);
        if (check_card(partner, true) != 0)
            return 1;
        if ((rc = PMIx_Fence(pair, 2, NULL, 0)) != PMIX_SUCCESS)
            FAIL("PMIx_Fence(pair, again)", rc);
    }

    /* 2. A group of the whole namespace. */
    size_t all_ctx = 0, pair_ctx = 0;
    if ((rc = construct("pmix-subset-all", &wild, 1, &all_ctx)) != PMIX_SUCCESS)
        FAIL("PMIx_Group_construct(all)", rc);
    for (uint32_t r = 0; r < size; r++)
        if (check_card(r, false) != 0)
            return 1;
    if ((rc = PMIx_Group_destruct("pmix-subset-all", NULL, 0)) != PMIX_SUCCESS)
        FAIL("PMIx_Group_destruct(all)", rc);

    /* 3. A group of each pair. */
    if (paired) {
        const char *name = me.rank == 0 || me.rank == size - 1 ? "pmix-subset-pair"
                                                               : "pmix-subset-other";
        if ((rc = construct(name, pair, 2, &pair_ctx)) != PMIX_SUCCESS)
            FAIL("PMIx_Group_construct(pair)", rc);
        if ((rc = PMIx_Group_destruct(name, NULL, 0)) != PMIX_SUCCESS)
            FAIL("PMIx_Group_destruct(pair)", rc);
    }

    /* 4. Everyone is done before anyone finalizes. */
    if ((rc = PMIx_Fence(NULL, 0, NULL, 0)) != PMIX_SUCCESS)
        FAIL("PMIx_Fence (last)", rc);
    printf("pmix_subset rank %u of %u all ctx %zu pair ctx %zu OK\n", me.rank, size, all_ctx,
           pair_ctx);
    PMIx_Finalize(NULL, 0);
    return 0;
}
