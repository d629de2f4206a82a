#include "common/gv_log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static _Atomic int log_level = GV_LOG_WARN;
static _Atomic int log_fd = 2;
static char log_component[32] = "gpuvisor";

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

int gv_log_parse_level(const char *text)
{
    if (text == NULL || *text == '\0')
        return -1;
    for (int i = 0; i < (int)(sizeof(level_names) / sizeof(level_names[0])); i++) {
        if (strcasecmp(text, level_names[i]) == 0)
            return i;
    }
    if (strcasecmp(text, "warning") == 0)
        return GV_LOG_WARN;
    if (text[0] >= '0' && text[0] <= '4' && text[1] == '\0')
        return text[0] - '0';
    return -1;
}

void gv_log_init(const char *component, gv_log_level def)
{
    if (component != NULL)
        snprintf(log_component, sizeof(log_component), "%s", component);
    int level = gv_log_parse_level(getenv("GPUVISOR_LOG_LEVEL"));
    atomic_store(&log_level, level >= 0 ? level : (int)def);
}

void gv_log_set_level(gv_log_level level) { atomic_store(&log_level, (int)level); }

gv_log_level gv_log_get_level(void) { return (gv_log_level)atomic_load(&log_level); }

void gv_log_set_fd(int fd) { atomic_store(&log_fd, fd); }

void gv_log_write(gv_log_level level, const char *file, int line, const char *fmt, ...)
{
    char buf[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    int n = snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s %s:%d: ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, log_component, (int)getpid(),
                     level_names[level <= GV_LOG_TRACE ? level : GV_LOG_TRACE], base, line);
    if (n < 0)
        return;
    size_t used = (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + used, sizeof(buf) - used, fmt, ap);
    va_end(ap);
    if (m > 0)
        used += (size_t)m < sizeof(buf) - used ? (size_t)m : sizeof(buf) - used - 1;
    if (used >= sizeof(buf) - 1)
        used = sizeof(buf) - 2;
    buf[used++] = '\n';
    ssize_t w = write(atomic_load(&log_fd), buf, used);
    (void)w; /* nowhere to report a failed log write */
}

/* One lock for every limiter: they are taken only on the rare paths that
 * log a client's doing. */
static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;

int gv_log_limit_pass(struct gv_log_limit *l, long now, unsigned burst, long window_s,
                      unsigned *dropped)
{
    int pass;
    pthread_mutex_lock(&limit_lock);
    if (window_s < 1)
        window_s = 1;
    if (l->window == 0 || now < l->window || now - l->window >= window_s) {
        l->window = now > 0 ? now : 1;
        l->sent = 0;
    }
    pass = l->sent < burst;
    if (pass) {
        l->sent++;
        *dropped = l->dropped;
        l->dropped = 0;
    } else {
        l->dropped++;
    }
    pthread_mutex_unlock(&limit_lock);
    return pass;
}
