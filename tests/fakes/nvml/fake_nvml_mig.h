/* Fake NVML MIG devices (fake_nvml_mig.c): hooks for the GPU-handle functions. */
#ifndef GV_FAKE_NVML_MIG_H
#define GV_FAKE_NVML_MIG_H

#include <stdbool.h>

#include "common/gv_nvml.h"

/* MIG mode enabled on GPU i by GV_FAKE_MIG_CONFIG (re-read when it changes). */
bool fake_mig_enabled(int gpu);
/* Whether a handle is one of the MIG device handles. */
bool fake_mig_handle(nvmlDevice_t d);
/* nvmlDeviceGetUUID / GetName / GetMemoryInfo of a MIG handle. */
nvmlReturn_t fake_mig_uuid(nvmlDevice_t device, char *uuid, unsigned int length);
nvmlReturn_t fake_mig_name(nvmlDevice_t device, char *name, unsigned int length);
nvmlReturn_t fake_mig_memory(nvmlDevice_t device, nvmlMemory_t *memory);
/* nvmlDeviceGetHandleByUUID of a MIG uuid ("MIG-..."): NOT_FOUND when no live MIG device has it. */
nvmlReturn_t fake_mig_by_uuid(const char *uuid, nvmlDevice_t *device);

#endif
