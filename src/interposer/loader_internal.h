/*
 * Private to loader.c (the exported dlsym/dlvsym and cuGetProcAddress, which
 * point callers at the hooks) and real.c (the real functions behind them).
 */
#ifndef GV_INTERPOSER_LOADER_INTERNAL_H
#define GV_INTERPOSER_LOADER_INTERNAL_H

#include <stdbool.h>

#include "common/gv_sanitizer.h"

typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);

/*
 * dlsym is called by sanitizer runtimes while they initialise, before their
 * shadow memory exists: the dlsym path must not be instrumented.
 */
#if GV_ASAN
#define GV_NO_ASAN __attribute__((no_sanitize_address))
#else
#define GV_NO_ASAN
#endif
/* clang can guarantee a tail call; gcc makes one at -O1 and above. */
#if defined(__clang__) && defined(__has_attribute)
#if __has_attribute(musttail)
#define GV_TAIL __attribute__((musttail))
#endif
#endif
#ifndef GV_TAIL
#define GV_TAIL
#endif

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Set while real.c dlopens the real libraries (why initial-exec: there). */
extern _Thread_local int in_loader __attribute__((tls_model("initial-exec")));

/* glibc's dlsym and dlvsym (real.c); NULL when not found. */
GV_NO_ASAN dlsym_fn real_dlsym(void);
GV_NO_ASAN dlvsym_fn real_dlvsym(void);
/* strcmp() == 0 in plain loops: sanitizer runtimes call dlsym before their
 * string interceptors work. */
GV_NO_ASAN bool same_name(const char *a, const char *b);

#endif
