/*
 * Replay driver for fuzz targets under the normal toolchain.
 *
 * libFuzzer targets define LLVMFuzzerTestOneInput; this main feeds them every
 * file of tests/fuzz/corpus/<GV_FUZZ_NAME>/ so `make test` (gcc, clang,
 * sanitizers) re-checks each seed and each crash reproducer ever added.
 * Output is TAP, one line per input.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(void)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "tests/fuzz/corpus/%s", GV_FUZZ_NAME);
    DIR *d = opendir(dir);
    if (d == NULL) {
        printf("not ok 1 - corpus directory %s missing\n", dir);
        return 1;
    }
    char *names[4096];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < sizeof(names) / sizeof(names[0])) {
        if (e->d_name[0] != '.')
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof(names[0]), cmp_names);
    printf("1..%zu\n", n);
    for (size_t i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        if (f == NULL) {
            printf("not ok %zu - cannot open %s\n", i + 1, path);
            free(names[i]);
            continue;
        }
        uint8_t *buf = NULL;
        size_t len = 0, cap = 0;
        for (;;) {
            if (len == cap) {
                cap = cap ? cap * 2 : 4096;
                buf = realloc(buf, cap);
                if (buf == NULL)
                    return 1;
            }
            size_t r = fread(buf + len, 1, cap - len, f);
            if (r == 0)
                break;
            len += r;
        }
        fclose(f);
        /* A crash aborts the process: the runner then counts a failure. */
        LLVMFuzzerTestOneInput(buf, len);
        printf("ok %zu - %s/%s\n", i + 1, GV_FUZZ_NAME, names[i]);
        free(buf);
        free(names[i]);
    }
    return 0;
}
