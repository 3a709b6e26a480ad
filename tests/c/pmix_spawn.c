/* PMIx_Spawn straight through OpenPMIx's client library (no MPI), to
 * check rivetrun's PMIx server spawns.
 *
 *   pmix_spawn N     rank 0 spawns N copies of this program ("child") and
 *                    prints the new namespace
 *   pmix_spawn child (spawned) checks its job size, the variable its app
 *                    carried and its parent, and prints its rank
 */
/* The header uses strdup and strncasecmp without declaring them. */
#define _DEFAULT_SOURCE
#include <string.h>
#include <strings.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    pmix_proc_t me, wild;
    pmix_value_t *val = NULL;
    pmix_status_t rc;
    if ((rc = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS) {
        fprintf(stderr, "PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    if (argc >= 2 && strcmp(argv[1], "child") == 0) {
        PMIX_PROC_CONSTRUCT(&wild);
        PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
        rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val);
        if (rc != PMIX_SUCCESS || val == NULL) {
            fprintf(stderr, "child: PMIx_Get(job size): %s\n", PMIx_Error_string(rc));
            return 1;
        }
        printf("pmix_spawn child rank %u of %u in %s\n", me.rank, val->data.uint32, me.nspace);
        PMIX_VALUE_RELEASE(val);
        printf("pmix_spawn child %u env PMIX_SPAWN_TEST=%s\n", me.rank,
               getenv("PMIX_SPAWN_TEST") ? getenv("PMIX_SPAWN_TEST") : "(unset)");
        val = NULL;
        rc = PMIx_Get(&wild, PMIX_PARENT_ID, NULL, 0, &val);
        if (rc != PMIX_SUCCESS || val == NULL || val->type != PMIX_PROC) {
            fprintf(stderr, "child: PMIx_Get(parent): %s\n", PMIx_Error_string(rc));
            return 1;
        }
        printf("pmix_spawn child %u parent %s:%u\n", me.rank, val->data.proc->nspace,
               val->data.proc->rank);
        PMIX_VALUE_RELEASE(val);
    } else if (argc >= 2) {
        if (me.rank == 0) {
            pmix_app_t app;
            char nspace[PMIX_MAX_NSLEN + 1];
            char *args[] = {argv[0], "child", NULL};
            char *env[] = {"PMIX_SPAWN_TEST=from-the-app", NULL};
            PMIX_APP_CONSTRUCT(&app);
            app.cmd = strdup(argv[0]);
            app.argv = args;
            app.env = env;
            app.maxprocs = atoi(argv[1]);
            rc = PMIx_Spawn(NULL, 0, &app, 1, nspace);
            app.argv = NULL;
            app.env = NULL;
            free(app.cmd);
            app.cmd = NULL;
            if (rc != PMIX_SUCCESS) {
                fprintf(stderr, "PMIx_Spawn: %s\n", PMIx_Error_string(rc));
                return 1;
            }
            printf("pmix_spawn parent %s:%u spawned %s\n", me.nspace, me.rank, nspace);
        }
    } else {
        fprintf(stderr, "usage: pmix_spawn N | child\n");
        return 2;
    }
    PMIx_Finalize(NULL, 0);
    return 0;
}
