/*
 * Leveled logging to stderr (or a file) for the daemons and the CLI.
 *
 * Never writes to stdout: the CLI's stdout is for results, and programs parse
 * it.  The level comes from GPUVISOR_LOG_LEVEL (error|warn|info|debug|trace
 * or 0..4) unless a program sets it explicitly.  Thread-safe: each message
 * is formatted into one buffer and written with a single write(2).
 */
#ifndef GV_LOG_H
#define GV_LOG_H

#include <time.h>

typedef enum {
    GV_LOG_ERROR = 0,
    GV_LOG_WARN,
    GV_LOG_INFO,
    GV_LOG_DEBUG,
    GV_LOG_TRACE,
} gv_log_level;

/* Parses "warn", "WARN", "1", ...; returns -1 when the text is not a level. */
int gv_log_parse_level(const char *text);
/* Reads GPUVISOR_LOG_LEVEL (default: def); call once at start-up. */
void gv_log_init(const char *component, gv_log_level def);
void gv_log_set_level(gv_log_level level);
gv_log_level gv_log_get_level(void);
/* Sends logs to fd (default 2).  The caller keeps ownership of fd. */
void gv_log_set_fd(int fd);

void gv_log_write(gv_log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define GV_LOG(level, ...)                                                     \
    do {                                                                       \
        if ((level) <= gv_log_get_level())                                     \
            gv_log_write((level), __FILE__, __LINE__, __VA_ARGS__);            \
    } while (0)
/*
 * Rate limit for messages whose cause a client controls (a tenant patching
 * its own pod in a loop with a forged annotation): without one, every update
 * writes a line and the log's disk is the tenant's to fill.  Each call site
 * of GV_LOG_LIMITED passes at most GV_LOG_LIMIT_BURST messages per
 * GV_LOG_LIMIT_WINDOW_S seconds; the next message that passes first says
 * how many were dropped.  (Metrics keep the exact counts.)
 */
#define GV_LOG_LIMIT_BURST 10
#define GV_LOG_LIMIT_WINDOW_S 60

struct gv_log_limit {
    long window;       /* start of the current window (seconds), 0: none yet */
    unsigned sent;     /* messages passed in that window */
    unsigned dropped;  /* dropped since the last one passed */
};

/* Whether a message at time now passes l (burst per window_s seconds);
 * *dropped gets the count dropped before it when it does.  Thread-safe. */
int gv_log_limit_pass(struct gv_log_limit *l, long now, unsigned burst, long window_s,
                      unsigned *dropped);

#define GV_LOG_LIMITED(level, ...)                                             \
    do {                                                                       \
        static struct gv_log_limit gv_lim_;                                    \
        unsigned gv_dropped_ = 0;                                              \
        if ((level) <= gv_log_get_level() &&                                   \
            gv_log_limit_pass(&gv_lim_, (long)time(NULL), GV_LOG_LIMIT_BURST,  \
                              GV_LOG_LIMIT_WINDOW_S, &gv_dropped_)) {          \
            if (gv_dropped_ > 0)                                               \
                gv_log_write((level), __FILE__, __LINE__,                      \
                             "%u message(s) like the next one dropped "        \
                             "(at most %d a minute)",                          \
                             gv_dropped_, GV_LOG_LIMIT_BURST);                 \
            gv_log_write((level), __FILE__, __LINE__, __VA_ARGS__);            \
        }                                                                      \
    } while (0)
#define gv_warn_limited(...) GV_LOG_LIMITED(GV_LOG_WARN, __VA_ARGS__)

#define gv_error(...) GV_LOG(GV_LOG_ERROR, __VA_ARGS__)
#define gv_warn(...) GV_LOG(GV_LOG_WARN, __VA_ARGS__)
#define gv_info(...) GV_LOG(GV_LOG_INFO, __VA_ARGS__)
#define gv_debug(...) GV_LOG(GV_LOG_DEBUG, __VA_ARGS__)
#define gv_trace(...) GV_LOG(GV_LOG_TRACE, __VA_ARGS__)

#endif
