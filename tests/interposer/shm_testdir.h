/*
 * A scratch directory per test for the shared-region tests (test_shm.c,
 * test_shm_open.c): dir under $GV_TEST_TMP (or /tmp), path the region in it.
 * Included by one file of each test program.
 */
#ifndef GV_SHM_TESTDIR_H
#define GV_SHM_TESTDIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];
static char path[300];

/* Removes everything in dir (regions and files built aside). */
static void empty_dir(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            unlinkat(dirfd(d), e->d_name, 0);
    if (d != NULL)
        closedir(d);
}

/* Makes dir and names path in it: 0, or -1 (cmocka's failed setup). */
static int shm_testdir_make(void)
{
    const char *base = getenv("GV_TEST_TMP");
    snprintf(dir, sizeof(dir), "%s/shm.XXXXXX", base ? base : "/tmp");
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(path, sizeof(path), "%s/region.cache", dir);
    return 0;
}

static void shm_testdir_remove(void)
{
    empty_dir();
    rmdir(dir);
}

#endif
