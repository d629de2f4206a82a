/* Fake NVML, telemetry block: see fake_nvml_telemetry.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_nvml.h"
#include "fake_nvml_telemetry.h"

/*
 * Reads the file on every call, like the faults file: the tests change it
 * between scrapes and a real NVML reading is always current too.
 */
static bool lookup(const char *kind, unsigned id, const char *key, char *val, size_t cap)
{
    const char *path = getenv("GV_FAKE_NVML_TELEMETRY");
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    bool found = false;
    char line[512];
    while (f && fgets(line, sizeof(line), f)) {
        char k[16];
        unsigned n;
        int off = 0;
        if (sscanf(line, "%15s %u%n", k, &n, &off) != 2 || strcmp(k, kind) != 0 || n != id)
            continue;
        char *tok = strtok(line + off, " \t\n");
        for (; tok; tok = strtok(NULL, " \t\n")) {
            char *eq = strchr(tok, '=');
            if (eq && (size_t)(eq - tok) == strlen(key) && strncmp(tok, key, strlen(key)) == 0) {
                snprintf(val, cap, "%s", eq + 1);
                found = true;
            }
        }
    }
    if (f)
        fclose(f);
    return found;
}

unsigned fake_telemetry_gpu(unsigned index, const char *key, unsigned dflt, bool *na)
{
    char v[32];
    if (na)
        *na = false;
    if (!lookup("gpu", index, key, v, sizeof(v)))
        return dflt;
    if (strcmp(v, "na") == 0) {
        if (na)
            *na = true;
        return dflt;
    }
    return (unsigned)strtoul(v, NULL, 10);
}

unsigned fake_telemetry_proc_sm(unsigned pid)
{
    char v[32];
    return lookup("proc", pid, "sm", v, sizeof(v)) ? (unsigned)strtoul(v, NULL, 10) : 0;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    unsigned idx;
    nvmlReturn_t r = nvmlDeviceGetIndex(device, &idx);
    if (r != NVML_SUCCESS)
        return r;
    if (power == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    bool na;
    *power = fake_telemetry_gpu(idx, "power", 70000, &na);
    return na ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    unsigned idx;
    nvmlReturn_t r = nvmlDeviceGetIndex(device, &idx);
    if (r != NVML_SUCCESS)
        return r;
    if (clock == NULL || type > NVML_CLOCK_VIDEO)
        return NVML_ERROR_INVALID_ARGUMENT;
    bool na;
    *clock = type == NVML_CLOCK_SM || type == NVML_CLOCK_GRAPHICS
                 ? fake_telemetry_gpu(idx, "smclock", 1410, &na)
                 : (type == NVML_CLOCK_MEM ? 1215 : 1275);
    return NVML_SUCCESS;
}
