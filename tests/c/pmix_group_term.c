/* A PMIx group member that ends without leaving, straight through
 * OpenPMIx's client library (no MPI), as any PMIx program sees it under
 * rivetrun (seed 004's termination event).
 *
 *   pmix_group_term [strict]
 *       every rank registers a handler for PMIX_GROUP_MEMBER_FAILED and
 *       constructs group "pmix-term-test" of its whole namespace, with
 *       PMIX_GROUP_NOTIFY_TERMINATION unless "strict" is given; the last
 *       rank then finalizes and exits without destructing. The others wait
 *       (at most 20 s) for an event naming the group and the last rank
 *       (another survivor's end may come too, and is ignored), print
 *       "pmix_group_term rank R heard rank L end OK" and finalize. They do
 *       not destruct: OpenPMIx 4.2's destruct waits for every member, the
 *       ended one too (later versions complete it on the survivors when
 *       PMIX_GROUP_NOTIFY_TERMINATION was given).
 */
/* The header uses strdup and strncasecmp without declaring them. */
#define _DEFAULT_SOURCE
#include <string.h>
#include <strings.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define FAIL(what, rc)                                                                     \
    do {                                                                                   \
        fprintf(stderr, "pmix_group_term rank %u: %s: %s\n", me.rank, what,               \
                PMIx_Error_string(rc));                                                    \
        return 1;                                                                          \
    } while (0)

/* The rank whose end is awaited (the last one), set before the construct. */
static pmix_rank_t last = PMIX_RANK_UNDEF;
/* Set once an event named the group and `last`; later events (another
 * survivor's end) do not touch it. */
static volatile int heard = 0;

static void on_member_failed(size_t id, pmix_status_t status, const pmix_proc_t *source,
                             pmix_info_t info[], size_t ninfo, pmix_info_t *results,
                             size_t nresults, pmix_event_notification_cbfunc_fn_t cbfunc,
                             void *cbdata) {
    (void)id;
    (void)status;
    (void)results;
    (void)nresults;
    pmix_rank_t rank = source ? source->rank : PMIX_RANK_UNDEF;
    int ours = 0;
    for (size_t i = 0; i < ninfo; i++) {
        if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROC) && info[i].value.type == PMIX_PROC)
            rank = info[i].value.data.proc->rank;
        if (PMIX_CHECK_KEY(&info[i], PMIX_GROUP_ID) && info[i].value.type == PMIX_STRING)
            ours = strcmp(info[i].value.data.string, "pmix-term-test") == 0;
    }
    if (ours && rank == last)
        __atomic_store_n(&heard, 1, __ATOMIC_RELEASE);
    if (cbfunc)
        cbfunc(PMIX_SUCCESS, NULL, 0, NULL, NULL, cbdata);
}

int main(int argc, char **argv) {
    pmix_proc_t me, wild;
    pmix_value_t *val = NULL;
    pmix_info_t *results = NULL, dirs[2];
    size_t nresults = 0;
    pmix_status_t rc;
    bool yes = true, notterm = !(argc > 1 && strcmp(argv[1], "strict") == 0);
    if ((rc = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS) {
        fprintf(stderr, "PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    PMIX_PROC_LOAD(&wild, me.nspace, PMIX_RANK_WILDCARD);
    if ((rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val)) != PMIX_SUCCESS)
        FAIL("PMIx_Get(job size)", rc);
    uint32_t size = val->data.uint32;
    PMIX_VALUE_RELEASE(val);
    last = size - 1;
    pmix_status_t code = PMIX_GROUP_MEMBER_FAILED;
    rc = PMIx_Register_event_handler(&code, 1, NULL, 0, on_member_failed, NULL, NULL);
    if (rc < 0)
        FAIL("PMIx_Register_event_handler", rc);

    PMIX_INFO_LOAD(&dirs[0], PMIX_GROUP_ASSIGN_CONTEXT_ID, &yes, PMIX_BOOL);
    PMIX_INFO_LOAD(&dirs[1], PMIX_GROUP_NOTIFY_TERMINATION, &notterm, PMIX_BOOL);
    rc = PMIx_Group_construct("pmix-term-test", &wild, 1, dirs, 2, &results, &nresults);
    if (rc != PMIX_SUCCESS)
        FAIL("PMIx_Group_construct", rc);
    if (results)
        PMIX_INFO_FREE(results, nresults);
    if (me.rank == size - 1) {
        /* Leave without destructing. */
        PMIx_Finalize(NULL, 0);
        return 0;
    }
    struct timespec tick = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 2000 && !__atomic_load_n(&heard, __ATOMIC_ACQUIRE); i++)
        nanosleep(&tick, NULL);
    if (!__atomic_load_n(&heard, __ATOMIC_ACQUIRE)) {
        fprintf(stderr,
                "pmix_group_term rank %u: no PMIX_GROUP_MEMBER_FAILED naming group "
                "pmix-term-test and rank %u in 20 s\n",
                me.rank, last);
        return 1;
    }
    printf("pmix_group_term rank %u heard rank %u end OK\n", me.rank, last);
    fflush(stdout);
    PMIx_Finalize(NULL, 0);
    return 0;
}
