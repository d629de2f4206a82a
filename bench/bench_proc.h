/* Process figures shared by the benchmarks (header-only: benches are single files). */
#ifndef GV_BENCH_PROC_H
#define GV_BENCH_PROC_H

#include <stdio.h>
#include <sys/types.h>

/* Resident memory of pid (0: this process) in KiB, -1 when unreadable. */
static inline long bench_rss_kib(pid_t pid)
{
    char path[64], line[256];
    if (pid == 0)
        snprintf(path, sizeof(path), "/proc/self/status");
    else
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kib;
}

#endif
