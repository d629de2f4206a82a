/*
 * Starts and drives tests/fakes/apiserver/fake_apiserver.py (the
 * kube-apiserver stand-in) from C tests.  Any test may link
 * tests/fakes/apiserver/fake_apiserver_proc.c (needs libcurl).
 */
#ifndef GV_FAKE_APISERVER_H
#define GV_FAKE_APISERVER_H

#include <sys/types.h>

struct fake_apiserver {
    pid_t pid;
    char url[512]; /* "http://127.0.0.1:PORT" (or "unix:/path", "https://...") */
    /* Plain-HTTP /_fake/ endpoint when started with --control-port, else "":
     * lets fake_apiserver_ctl drive an HTTPS stand-in. */
    char ctl_url[512];
};

/*
 * Starts the stand-in with extra command-line arguments (NULL-terminated
 * list, may be NULL) and waits for its READY line.  Returns 0 on success.
 * The script is found at $GV_SRCDIR/tests/fakes/apiserver/ (default: the
 * current directory, which is the repo root under `make test`).
 */
int fake_apiserver_start(struct fake_apiserver *fa, const char *const *args);
/* POSTs (or GETs when op starts with "GET ") a /_fake/ control (on
 * ctl_url when set, else url), e.g.
 * "fail?code=503&count=2".  Returns the HTTP status, -1 on transport error;
 * body (if non-NULL, caller frees) receives the answer. */
long fake_apiserver_ctl(const struct fake_apiserver *fa, const char *op, char **body);
/* Stops the process and reaps it. */
void fake_apiserver_stop(struct fake_apiserver *fa);

#endif
