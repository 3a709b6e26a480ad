/* Whether this process's connection to its PMIx server has Nagle off
 * (TCP_NODELAY): OpenPMIx's client never sets it, rivetrun sets it on its
 * clients' end once they connect, so that messages the server does not
 * answer (event deregistrations in MPI_Finalize) are not held until the
 * server's delayed ACK.
 *
 * After PMIx_Init, finds the TCP socket whose peer is the server's address
 * (PMIX_SERVER_URI41, ...: "name;tcp4://IP:PORT") and prints
 * "pmix_nodelay rank R nodelay=0|1"; it waits up to 5 s for a 1 (rivetrun
 * may set it just after the connection). "no-socket" if none is found.
 */
#define _DEFAULT_SOURCE
#include <string.h>
#include <strings.h>
#include <pmix.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

/* The server's IPv4 address and port from the first PMIX_SERVER_URI*
 * variable naming one; 0 if none. */
static int server_addr(struct sockaddr_in *out) {
    const char *vars[] = {"PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3",
                          "PMIX_SERVER_URI21", "PMIX_SERVER_URI2"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *uri = getenv(vars[i]);
        const char *at = uri ? strstr(uri, "tcp4://") : NULL;
        if (!at)
            continue;
        char ip[64];
        unsigned port;
        if (sscanf(at + 7, "%63[0-9.]:%u", ip, &port) != 2)
            continue;
        memset(out, 0, sizeof *out);
        out->sin_family = AF_INET;
        out->sin_port = htons((unsigned short)port);
        if (inet_pton(AF_INET, ip, &out->sin_addr) == 1)
            return 1;
    }
    return 0;
}

/* The fd of this process's socket connected to `server`, or -1. */
static int server_socket(const struct sockaddr_in *server) {
    for (int fd = 0; fd < 1024; fd++) {
        struct sockaddr_in peer;
        socklen_t len = sizeof peer;
        if (getpeername(fd, (struct sockaddr *)&peer, &len) != 0 || peer.sin_family != AF_INET)
            continue;
        if (peer.sin_port == server->sin_port && peer.sin_addr.s_addr == server->sin_addr.s_addr)
            return fd;
    }
    return -1;
}

int main(void) {
    pmix_proc_t me;
    pmix_status_t rc;
    if ((rc = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS) {
        fprintf(stderr, "PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    struct sockaddr_in server;
    int fd = server_addr(&server) ? server_socket(&server) : -1;
    if (fd < 0) {
        printf("pmix_nodelay rank %u no-socket\n", me.rank);
        PMIx_Finalize(NULL, 0);
        return 0;
    }
    int on = 0;
    for (int tries = 0; tries < 500; tries++) {
        socklen_t len = sizeof on;
        if (getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, &len) != 0 || on)
            break;
        usleep(10000);
    }
    printf("pmix_nodelay rank %u nodelay=%d\n", me.rank, on ? 1 : 0);
    PMIx_Finalize(NULL, 0);
    return 0;
}
