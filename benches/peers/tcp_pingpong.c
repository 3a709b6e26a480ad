/*
 * tcp_pingpong.c: the raw-tcp reference of `rivet-bench compare --transport
 * tcp`, what one loopback TCP connection gives without any library.
 *
 * The program forks: the child echoes on CPU 1, the parent measures on CPU 0,
 * over 127.0.0.1 with TCP_NODELAY. Receives spin on recv(MSG_DONTWAIT), as a
 * polling engine's would.
 *
 *   lat  ping-pong of whole messages, 1 B .. 64 KiB (8 sizes); half a round
 *        trip, us (title mentions "busy-poll")
 *   bw   one stream of back-to-back messages, 64 KiB .. 4 MiB (4 sizes), then
 *        a 1-byte ack; MB/s (1e6 B/s) (title mentions "bandwidth")
 *
 * Usage: tcp_pingpong lat|bw [-i ITERS]  (ITERS: round trips for lat, or
 * messages for bw, per size; default by size). Output: '#' comment lines,
 * then one "SIZE VALUE" row per size.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const size_t LAT_SIZES[] = {1, 8, 64, 512, 1024, 4096, 16384, 65536};
static const size_t BW_SIZES[] = {65536, 262144, 1 << 20, 4 << 20};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define BIGGEST (4 << 20)

static void fail(const char *what)
{
    perror(what);
    exit(1);
}

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void on_cpu(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        fprintf(stderr, "tcp_pingpong: cannot bind to CPU %d (running unbound)\n", cpu);
}

static void put(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            fail("send");
        p += k;
        n -= (size_t)k;
    }
}

/* Spin until n bytes are in. */
static void take(int fd, unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            continue;
        if (k < 0)
            fail("recv");
        if (k == 0) {
            fprintf(stderr, "tcp_pingpong: connection closed early\n");
            exit(1);
        }
        p += k;
        n -= (size_t)k;
    }
}

static void no_delay(int fd)
{
    int on = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) != 0)
        fail("TCP_NODELAY");
}

static long lat_rounds(size_t size, long asked) { return asked > 0 ? asked : size <= 4096 ? 20000 : 5000; }

static long bw_messages(size_t size, long asked)
{
    if (asked > 0)
        return asked;
    long n = (long)((2UL << 30) / size); /* about 2 GiB per size */
    return n < 64 ? 64 : n;
}

/* The echo side: mirrors the measuring side's loops exactly. */
static void echo(int fd, int lat, long asked, unsigned char *buf)
{
    if (lat) {
        for (size_t s = 0; s < COUNT(LAT_SIZES); s++) {
            long rounds = lat_rounds(LAT_SIZES[s], asked);
            for (long i = 0; i < rounds + rounds / 10; i++) {
                take(fd, buf, LAT_SIZES[s]);
                put(fd, buf, LAT_SIZES[s]);
            }
        }
    } else {
        for (size_t s = 0; s < COUNT(BW_SIZES); s++) {
            long msgs = bw_messages(BW_SIZES[s], asked);
            for (long i = 0; i < msgs + msgs / 10; i++)
                take(fd, buf, BW_SIZES[s]);
            put(fd, buf, 1);
        }
    }
}

int main(int argc, char **argv)
{
    int lat;
    long asked = 0;
    if (argc >= 2 && !strcmp(argv[1], "lat"))
        lat = 1;
    else if (argc >= 2 && !strcmp(argv[1], "bw"))
        lat = 0;
    else
        goto usage;
    if (argc == 4 && !strcmp(argv[2], "-i")) {
        char *end;
        asked = strtol(argv[3], &end, 10);
        if (*end != '\0' || asked < 1)
            goto usage;
    } else if (argc != 2) {
        goto usage;
    }

    int listener = socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0)
        fail("socket");
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(listener, 1) != 0 ||
        getsockname(listener, (struct sockaddr *)&addr, &len) != 0)
        fail("listen");
    unsigned char *buf = malloc(BIGGEST);
    if (!buf)
        fail("malloc");
    memset(buf, 0x3c, BIGGEST);

    pid_t child = fork();
    if (child < 0)
        fail("fork");
    if (child == 0) {
        on_cpu(1);
        int fd = accept(listener, NULL, NULL);
        if (fd < 0)
            fail("accept");
        no_delay(fd);
        echo(fd, lat, asked, buf);
        close(fd);
        _exit(0);
    }
    close(listener);
    on_cpu(0);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0)
        fail("connect");
    no_delay(fd);

    if (lat) {
        printf("# raw TCP loopback, busy-poll recv, ping-pong latency (half round trip)\n");
        printf("# Size  Latency (us)\n");
        for (size_t s = 0; s < COUNT(LAT_SIZES); s++) {
            size_t size = LAT_SIZES[s];
            long rounds = lat_rounds(size, asked), warm = rounds / 10;
            for (long i = 0; i < warm; i++) {
                put(fd, buf, size);
                take(fd, buf, size);
            }
            double start = seconds();
            for (long i = 0; i < rounds; i++) {
                put(fd, buf, size);
                take(fd, buf, size);
            }
            printf("%zu %.3f\n", size, (seconds() - start) * 1e6 / (2.0 * (double)rounds));
            fflush(stdout);
        }
    } else {
        printf("# raw TCP loopback, one stream, bandwidth\n# Size  Bandwidth (MB/s)\n");
        for (size_t s = 0; s < COUNT(BW_SIZES); s++) {
            size_t size = BW_SIZES[s];
            long msgs = bw_messages(size, asked), warm = msgs / 10;
            for (long i = 0; i < warm; i++)
                put(fd, buf, size);
            double start = seconds();
            for (long i = 0; i < msgs; i++)
                put(fd, buf, size);
            unsigned char ack;
            take(fd, &ack, 1);
            printf("%zu %.2f\n", size, (double)size * (double)msgs / (seconds() - start) / 1e6);
            fflush(stdout);
        }
    }
    close(fd);
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "tcp_pingpong: the echo process failed\n");
        return 1;
    }
    free(buf);
    return 0;
usage:
    fprintf(stderr, "usage: tcp_pingpong lat|bw [-i ITERS]\n");
    return 2;
}
