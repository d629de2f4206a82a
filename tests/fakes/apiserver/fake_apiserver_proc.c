#include "fake_apiserver.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/gv_buf.h"

int fake_apiserver_start(struct fake_apiserver *fa, const char *const *args)
{
    memset(fa, 0, sizeof(*fa));
    const char *src = getenv("GV_SRCDIR");
    char script[1024];
    snprintf(script, sizeof(script), "%s/tests/fakes/apiserver/fake_apiserver.py",
             src != NULL ? src : ".");
    int p[2];
    if (pipe(p) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        const char *argv[32];
        int n = 0;
        argv[n++] = "/usr/bin/python3";
        argv[n++] = script;
        argv[n++] = "--port";
        argv[n++] = "0";
        for (int i = 0; args != NULL && args[i] != NULL && n < 31; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    FILE *f = fdopen(p[0], "r");
    char line[480];
    int rc = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        if (strncmp(line, "CONTROL ", 8) == 0) {
            snprintf(fa->ctl_url, sizeof(fa->ctl_url), "%s", line + 8);
            continue;
        }
        if (strncmp(line, "READY ", 6) == 0) {
            snprintf(fa->url, sizeof(fa->url), "%s", line + 6);
            rc = 0;
        }
        break;
    }
    /* Keep the pipe's read end closed: the server prints nothing more. */
    if (f != NULL)
        fclose(f);
    else
        close(p[0]);
    fa->pid = pid;
    if (rc != 0)
        fake_apiserver_stop(fa);
    return rc;
}

long fake_apiserver_ctl(const struct fake_apiserver *fa, const char *op, char **body)
{
    bool get = strncmp(op, "GET ", 4) == 0;
    if (get)
        op += 4;
    char url[1024];
    snprintf(url, sizeof(url), "%s/_fake/%s", fa->ctl_url[0] ? fa->ctl_url : fa->url, op);
    CURL *h = curl_easy_init();
    if (h == NULL)
        return -1;
    struct gv_buf buf = {0};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    if (!get)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, gv_buf_write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &buf);
    long code = -1;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    if (body != NULL)
        *body = buf.data;
    else
        gv_buf_free(&buf);
    return code;
}

void fake_apiserver_stop(struct fake_apiserver *fa)
{
    if (fa->pid <= 0)
        return;
    kill(fa->pid, SIGTERM);
    int status;
    while (waitpid(fa->pid, &status, 0) < 0 && errno == EINTR)
        ;
    fa->pid = 0;
}
