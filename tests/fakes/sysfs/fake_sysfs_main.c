/*
 * fake_sysfs: the fake sysfs generator as a command for script tests.
 *   fake_sysfs build ROOT SPEC.json    build the tree (see fake_sysfs.c)
 *   fake_sysfs remove ROOT BDF         hot-remove a PCI function
 *   fake_sysfs remove-mdev ROOT UUID   remove a mediated device
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_sysfs.h"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (len + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    fclose(f);
    if (buf)
        buf[len] = '\0';
    return buf;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "build") == 0) {
        char *spec = slurp(argv[3]);
        if (!spec) {
            fprintf(stderr, "fake_sysfs: cannot read %s\n", argv[3]);
            return 1;
        }
        int rc = fake_sysfs_build(argv[2], spec);
        free(spec);
        return rc == 0 ? 0 : 1;
    }
    if (argc == 4 && strcmp(argv[1], "remove") == 0)
        return fake_sysfs_remove(argv[2], argv[3]) == 0 ? 0 : 1;
    if (argc == 4 && strcmp(argv[1], "remove-mdev") == 0)
        return fake_sysfs_remove_mdev(argv[2], argv[3]) == 0 ? 0 : 1;
    fprintf(stderr, "usage: fake_sysfs build ROOT SPEC | remove ROOT BDF | remove-mdev ROOT UUID\n");
    return 2;
}
