/*
 * Fuzz helper: a peer on a unix socket that answers each connection with
 * canned bytes, on its own thread, so a client under test (kube LIST
 * paging, the gRPC client) reads hostile responses through its real
 * socket code.  Header-only: each fuzz target includes it once.
 */
#ifndef GV_TESTS_FUZZ_PEER_H
#define GV_TESTS_FUZZ_PEER_H

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define FUZZ_PEER_MAX 10

struct fuzz_peer {
    char path[96];
    int fd;
    pthread_t thread;
    /* answers[i] goes to the i-th connection; after the last, connections
     * are closed unanswered */
    const char *answers[FUZZ_PEER_MAX];
    size_t lens[FUZZ_PEER_MAX];
    size_t n;
    /* what each connection sent first (up to 4 KiB), NUL-terminated */
    char requests[FUZZ_PEER_MAX][4096];
    size_t served;
};

static void *fuzz_peer_run(void *ud)
{
    struct fuzz_peer *p = ud;
    for (size_t i = 0; i < p->n + 2; i++) {
        struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
        if (poll(&pfd, 1, 3000) <= 0)
            break;
        int c = accept(p->fd, NULL, NULL);
        if (c < 0)
            break;
        if (i < p->n) {
            /* Read what the client sends first (its request), briefly. */
            size_t got = 0;
            char *req = p->requests[i];
            struct pollfd cp = {.fd = c, .events = POLLIN};
            while (got < sizeof(p->requests[i]) - 1 && poll(&cp, 1, 200) > 0) {
                ssize_t r = recv(c, req + got, sizeof(p->requests[i]) - 1 - got, 0);
                if (r <= 0)
                    break;
                got += (size_t)r;
                req[got] = '\0';
                if (strstr(req, "\r\n\r\n") != NULL)
                    break;
            }
            size_t off = 0;
            while (off < p->lens[i]) {
                ssize_t w = send(c, p->answers[i] + off, p->lens[i] - off, MSG_NOSIGNAL);
                if (w <= 0)
                    break;
                off += (size_t)w;
            }
            p->served = i + 1;
        }
        shutdown(c, SHUT_WR);
        close(c);
    }
    return NULL;
}

static int fuzz_peer_start(struct fuzz_peer *p)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(p->path, sizeof(p->path), "%s/gvfz-%d-%p.sock", tmp && strlen(tmp) < 40 ? tmp : "/tmp",
             (int)getpid(), (void *)p);
    unlink(p->path);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", p->path);
    p->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (p->fd < 0 || bind(p->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(p->fd, 8) != 0 ||
        pthread_create(&p->thread, NULL, fuzz_peer_run, p) != 0) {
        if (p->fd >= 0)
            close(p->fd);
        unlink(p->path);
        return -1;
    }
    return 0;
}

static void fuzz_peer_stop(struct fuzz_peer *p)
{
    shutdown(p->fd, SHUT_RDWR);
    pthread_join(p->thread, NULL);
    close(p->fd);
    unlink(p->path);
}

#endif
