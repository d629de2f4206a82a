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
#define gv_error(...) GV_LOG(GV_LOG_ERROR, __VA_ARGS__)
#define gv_warn(...) GV_LOG(GV_LOG_WARN, __VA_ARGS__)
#define gv_info(...) GV_LOG(GV_LOG_INFO, __VA_ARGS__)
#define gv_debug(...) GV_LOG(GV_LOG_DEBUG, __VA_ARGS__)
#define gv_trace(...) GV_LOG(GV_LOG_TRACE, __VA_ARGS__)

#endif
