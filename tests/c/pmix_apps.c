/* What a PMIx server says about the job's apps (MPMD sections), straight
 * through OpenPMIx's client library: the number of apps, the appnum of
 * every rank, and of this rank's app its size and lowest rank, and this
 * rank's rank within it.
 *
 * Prints "pmix_apps rank R napps N appnums A0,A1,... app_size S app_leader
 * L app_rank X local_rank Y".
 */
/* The header uses strdup and strncasecmp without declaring them. */
#define _DEFAULT_SOURCE
#include <string.h>
#include <strings.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>

static pmix_proc_t me;

/* The value of KEY for PROC (with INFO), as a number; exits on failure. */
static unsigned long get(const pmix_proc_t *proc, const char *key, pmix_info_t *info, size_t n) {
    pmix_value_t *val = NULL;
    pmix_status_t rc = PMIx_Get(proc, key, info, n, &val);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "pmix_apps rank %u: PMIx_Get(%s, rank %u): %s\n", me.rank, key,
                proc->rank, PMIx_Error_string(rc));
        PMIx_Finalize(NULL, 0);
        exit(1);
    }
    unsigned long out;
    switch (val->type) {
    case PMIX_UINT32: out = val->data.uint32; break;
    case PMIX_UINT16: out = val->data.uint16; break;
    case PMIX_PROC_RANK: out = val->data.rank; break;
    default:
        fprintf(stderr, "pmix_apps rank %u: %s has type %d\n", me.rank, key, val->type);
        PMIx_Finalize(NULL, 0);
        exit(1);
    }
    PMIX_VALUE_RELEASE(val);
    return out;
}

int main(void) {
    pmix_proc_t wild, peer;
    pmix_status_t rc;
    if ((rc = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS) {
        fprintf(stderr, "PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    PMIX_PROC_LOAD(&wild, me.nspace, PMIX_RANK_WILDCARD);
    unsigned long size = get(&wild, PMIX_JOB_SIZE, NULL, 0);
    unsigned long napps = get(&wild, PMIX_JOB_NUM_APPS, NULL, 0);
    char appnums[4096] = "";
    for (unsigned long r = 0; r < size && strlen(appnums) < sizeof appnums - 16; r++) {
        PMIX_PROC_LOAD(&peer, me.nspace, r);
        char one[16];
        snprintf(one, sizeof one, "%s%lu", r ? "," : "", get(&peer, PMIX_APPNUM, NULL, 0));
        strcat(appnums, one);
    }
    uint32_t appnum = get(&me, PMIX_APPNUM, NULL, 0);
    pmix_info_t app[2];
    bool yes = true;
    PMIX_INFO_LOAD(&app[0], PMIX_APP_INFO, &yes, PMIX_BOOL);
    PMIX_INFO_LOAD(&app[1], PMIX_APPNUM, &appnum, PMIX_UINT32);
    unsigned long app_size = get(&wild, PMIX_APP_SIZE, app, 2);
    printf("pmix_apps rank %u napps %lu appnums %s app_size %lu app_leader %lu app_rank %lu "
           "local_rank %lu\n",
           me.rank, napps, appnums, app_size, get(&me, PMIX_APPLDR, NULL, 0),
           get(&me, PMIX_APP_RANK, NULL, 0), get(&me, PMIX_LOCAL_RANK, NULL, 0));
    PMIx_Finalize(NULL, 0);
    return 0;
}
