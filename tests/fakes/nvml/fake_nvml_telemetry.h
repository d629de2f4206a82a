/*
 * Fake NVML, telemetry block (tests only): per-GPU utilisation, temperature,
 * power and SM clock, and per-process SM utilisation, read from the file
 * named by GV_FAKE_NVML_TELEMETRY (tests rewrite it atomically):
 *
 *   gpu <index> [util=<%>] [temp=<C>] [power=<mW>] [smclock=<MHz>]
 *   proc <pid> sm=<%>
 *
 * Absent values keep the defaults (util 0, temp 40 + index, power 70000 mW,
 * SM clock 1410 MHz, process SM 0); "gpu <index> power=na" answers
 * NVML_ERROR_NOT_SUPPORTED, as boards without a power sensor do.
 */
#ifndef GV_FAKE_NVML_TELEMETRY_H
#define GV_FAKE_NVML_TELEMETRY_H

#include <stdbool.h>

/* Value of key ("util", "temp", "power", "smclock") for GPU index; *na set for "na". */
unsigned fake_telemetry_gpu(unsigned index, const char *key, unsigned dflt, bool *na);
unsigned fake_telemetry_proc_sm(unsigned pid);

#endif
