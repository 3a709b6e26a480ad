/* PMIx_Spawn straight through OpenPMIx's client library (no MPI), to
 * check rivetrun's PMIx server spawns.
 *
 *   pmix_spawn N     rank 0 spawns N copies of this program ("child") and
 *                    prints the new namespace
 *   pmix_spawn child (spawned) checks its job size, the variable its app
 *                    carried and its parent, and prints its rank
 *   pmix_spawn talk N ROOT
 *                    every rank puts a business card (ROOT's: the port of a
 *                    loopback listener) and the job fences; ROOT spawns N
 *                    "talk-child"ren, reads each child's card (a get in
 *                    another namespace), connects to it and sends a line,
 *                    then accepts a line from each child; meanwhile the
 *                    other ranks read child 0's card (the namespace from
 *                    ROOT's key) and print "read child 0's card: port:";
 *                    the job fences again before it ends
 *   pmix_spawn talk-child SIZE
 *                    (spawned) puts its own card (a listener's port), reads
 *                    every parent rank's card (the parent job has SIZE
 *                    ranks, some on other hosts: direct modex), then
 *                    connects to its parent and sends a line, then accepts
 *                    the parent's
 *   pmix_spawn abort N ROOT
 *                    ROOT spawns N "block" children, reads each one's card
 *                    (so each is up and served PMIx) and aborts with code 7:
 *                    the job's teardown must reach the children
 *   pmix_spawn block (spawned) puts a card and waits to be killed
 *   pmix_spawn missing ROOT
 *                    ROOT spawns a program that does not exist: the spawn
 *                    must fail
 */
/* The header uses strdup and strncasecmp without declaring them. */
#define _DEFAULT_SOURCE
#include <string.h>
#include <strings.h>
#include <pmix.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CARD "rivet-spawn-card"

static void die(const char *what, pmix_status_t rc) {
    fprintf(stderr, "pmix_spawn: %s: %s\n", what, PMIx_Error_string(rc));
    exit(1);
}

static void die_errno(const char *what) {
    perror(what);
    exit(1);
}

/* A listener on 127.0.0.1; its port in *port. */
static int listener(int *port) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die_errno("socket");
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0)
        die_errno("bind/listen");
    if (getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        die_errno("getsockname");
    *port = ntohs(a.sin_port);
    return fd;
}

/* Connect to a card "port:P" on 127.0.0.1 and send `line`. */
static void send_to(const char *card, const char *line) {
    struct sockaddr_in a;
    int port, fd;
    if (sscanf(card, "port:%d", &port) != 1) {
        fprintf(stderr, "pmix_spawn: not a port card: %s\n", card);
        exit(1);
    }
    fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        die_errno("connect");
    if (write(fd, line, strlen(line)) != (ssize_t)strlen(line))
        die_errno("write");
    close(fd);
}

/* Accept one connection on `lfd` and read its line (until EOF) into buf. */
static void accept_line(int lfd, char *buf, size_t cap) {
    size_t n = 0;
    ssize_t got;
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
        die_errno("accept");
    while (n + 1 < cap && (got = read(fd, buf + n, cap - 1 - n)) > 0)
        n += (size_t)got;
    buf[n] = '\0';
    close(fd);
}

static void put_string(const char *key, const char *card) {
    pmix_value_t v;
    pmix_status_t rc;
    v.type = PMIX_STRING;
    v.data.string = (char *)card;
    if ((rc = PMIx_Put(PMIX_GLOBAL, key, &v)) != PMIX_SUCCESS)
        die("PMIx_Put", rc);
    if ((rc = PMIx_Commit()) != PMIX_SUCCESS)
        die("PMIx_Commit", rc);
}

static void put_card(const char *card) {
    put_string(CARD, card);
}

/* The string `key` of `rank` of `nspace` (malloc'd). */
static char *string_of(const char *nspace, pmix_rank_t rank, const char *key) {
    pmix_proc_t p;
    pmix_value_t *val = NULL;
    pmix_status_t rc;
    char *out;
    PMIX_PROC_LOAD(&p, nspace, rank);
    rc = PMIx_Get(&p, key, NULL, 0, &val);
    if (rc != PMIX_SUCCESS || val == NULL || val->type != PMIX_STRING) {
        fprintf(stderr, "pmix_spawn: PMIx_Get(%s:%u %s): %s\n", nspace, rank, key,
                PMIx_Error_string(rc));
        exit(1);
    }
    out = strdup(val->data.string);
    PMIX_VALUE_RELEASE(val);
    return out;
}

static char *card_of(const char *nspace, pmix_rank_t rank) {
    return string_of(nspace, rank, CARD);
}

static void fence_all(const pmix_proc_t *me) {
    pmix_proc_t wild;
    pmix_status_t rc;
    PMIX_PROC_LOAD(&wild, me->nspace, PMIX_RANK_WILDCARD);
    if ((rc = PMIx_Fence(&wild, 1, NULL, 0)) != PMIX_SUCCESS)
        die("PMIx_Fence", rc);
}

static pmix_status_t spawn(const char *cmd, char **argv, int n, char *nspace) {
    pmix_app_t app;
    pmix_status_t rc;
    PMIX_APP_CONSTRUCT(&app);
    app.cmd = strdup(cmd);
    app.argv = argv;
    app.maxprocs = n;
    rc = PMIx_Spawn(NULL, 0, &app, 1, nspace);
    app.argv = NULL;
    PMIX_APP_DESTRUCT(&app);
    return rc;
}

/* The parent job's side of "talk". */
static void talk(const pmix_proc_t *me, char **argv, int n, pmix_rank_t root, uint32_t size) {
    char card[64], line[128], size_arg[16];
    char nspace[PMIX_MAX_NSLEN + 1];
    int port = 0, lfd = -1;
    pmix_status_t rc;
    if (me->rank == root) {
        lfd = listener(&port);
        snprintf(card, sizeof card, "port:%d", port);
    } else {
        snprintf(card, sizeof card, "rank-%u", me->rank);
    }
    put_card(card);
    fence_all(me);
    if (me->rank == root) {
        char *args[] = {argv[0], "talk-child", size_arg, NULL};
        snprintf(size_arg, sizeof size_arg, "%u", size);
        if ((rc = spawn(argv[0], args, n, nspace)) != PMIX_SUCCESS)
            die("PMIx_Spawn", rc);
        printf("pmix_spawn talk parent %s:%u spawned %s\n", me->nspace, me->rank, nspace);
        put_string("rivet-spawn-ns", nspace);
    }
    /* The other parent ranks read child 0's card too (on another host:
     * direct modex from the spawner's proxy), while the children wait. */
    fence_all(me);
    if (me->rank != root) {
        char *ns = string_of(me->nspace, root, "rivet-spawn-ns");
        char *theirs = card_of(ns, 0);
        printf("pmix_spawn talk rank %u read child 0's card: %.5s\n", me->rank, theirs);
        free(theirs);
        free(ns);
    }
    fence_all(me);
    if (me->rank == root) {
        for (int i = 0; i < n; i++) {
            char *theirs = card_of(nspace, (pmix_rank_t)i);
            snprintf(line, sizeof line, "parent to child %d", i);
            send_to(theirs, line);
            free(theirs);
        }
        for (int i = 0; i < n; i++) {
            accept_line(lfd, line, sizeof line);
            printf("pmix_spawn talk parent heard: %s\n", line);
        }
        close(lfd);
    }
    fence_all(me);
    printf("pmix_spawn talk rank %u OK\n", me->rank);
}

/* A child's side of "talk". */
static void talk_child(const pmix_proc_t *me, uint32_t parent_size) {
    pmix_proc_t wild, parent;
    pmix_value_t *val = NULL;
    pmix_status_t rc;
    char card[64], line[128];
    int port, lfd = listener(&port);
    snprintf(card, sizeof card, "port:%d", port);
    put_card(card);
    PMIX_PROC_LOAD(&wild, me->nspace, PMIX_RANK_WILDCARD);
    rc = PMIx_Get(&wild, PMIX_PARENT_ID, NULL, 0, &val);
    if (rc != PMIX_SUCCESS || val == NULL || val->type != PMIX_PROC)
        die("PMIx_Get(parent)", rc);
    PMIX_PROC_LOAD(&parent, val->data.proc->nspace, val->data.proc->rank);
    PMIX_VALUE_RELEASE(val);
    /* Every card first: the parent job ends once its root heard every
     * child, and a card of an ended rank on another host is gone. */
    char *parents = NULL;
    for (uint32_t r = 0; r < parent_size; r++) {
        char *theirs = card_of(parent.nspace, r);
        printf("pmix_spawn talk child %u card of parent rank %u: %s\n", me->rank, r,
               r == parent.rank ? "(the parent's port)" : theirs);
        if (r == parent.rank)
            parents = theirs;
        else
            free(theirs);
    }
    if (parents == NULL) {
        fprintf(stderr, "pmix_spawn: the parent's rank is past its job\n");
        exit(1);
    }
    snprintf(line, sizeof line, "child %u to parent", me->rank);
    send_to(parents, line);
    free(parents);
    accept_line(lfd, line, sizeof line);
    printf("pmix_spawn talk child %u heard: %s\n", me->rank, line);
    close(lfd);
}

int main(int argc, char **argv) {
    pmix_proc_t me, wild;
    pmix_value_t *val = NULL;
    pmix_status_t rc;
    if ((rc = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS) {
        fprintf(stderr, "PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    if (argc >= 4 && strcmp(argv[1], "talk") == 0) {
        PMIX_PROC_LOAD(&wild, me.nspace, PMIX_RANK_WILDCARD);
        if ((rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val)) != PMIX_SUCCESS)
            die("PMIx_Get(job size)", rc);
        uint32_t size = val->data.uint32;
        PMIX_VALUE_RELEASE(val);
        talk(&me, argv, atoi(argv[2]), (pmix_rank_t)atoi(argv[3]), size);
    } else if (argc >= 4 && strcmp(argv[1], "abort") == 0) {
        if (me.rank == (pmix_rank_t)atoi(argv[3])) {
            char nspace[PMIX_MAX_NSLEN + 1];
            char *args[] = {argv[0], "block", NULL};
            int n = atoi(argv[2]);
            if ((rc = spawn(argv[0], args, n, nspace)) != PMIX_SUCCESS)
                die("PMIx_Spawn", rc);
            for (int i = 0; i < n; i++)
                free(card_of(nspace, (pmix_rank_t)i));
            printf("pmix_spawn abort: %d children up in %s\n", n, nspace);
            fflush(stdout);
            PMIx_Abort(7, "pmix_spawn aborts with children running", NULL, 0);
            return 1;
        }
        /* The others wait for the teardown. */
        for (;;)
            pause();
    } else if (argc >= 2 && strcmp(argv[1], "block") == 0) {
        put_card("blocked");
        for (;;)
            pause();
    } else if (argc >= 3 && strcmp(argv[1], "talk-child") == 0) {
        talk_child(&me, (uint32_t)atoi(argv[2]));
    } else if (argc >= 3 && strcmp(argv[1], "missing") == 0) {
        if (me.rank == (pmix_rank_t)atoi(argv[2])) {
            char nspace[PMIX_MAX_NSLEN + 1];
            char *args[] = {"rivet-no-such-program", NULL};
            rc = spawn("rivet-no-such-program", args, 2, nspace);
            if (rc == PMIX_SUCCESS) {
                fprintf(stderr, "pmix_spawn: spawning a missing program succeeded\n");
                return 1;
            }
            printf("pmix_spawn missing refused: %s\n", PMIx_Error_string(rc));
        }
    } else if (argc >= 2 && strcmp(argv[1], "child") == 0) {
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
        fprintf(stderr, "usage: pmix_spawn N | child | talk N ROOT | talk-child SIZE | abort N ROOT | block | missing ROOT\n");
        return 2;
    }
    PMIx_Finalize(NULL, 0);
    return 0;
}
