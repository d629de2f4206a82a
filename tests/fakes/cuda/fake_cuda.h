/*
 * Internals of the fake libcuda.so.1 (tests only), shared by its two
 * parts: fake_cuda.c (devices, contexts, memory, IPC, proc addresses) and
 * fake_cuda_exec.c (streams, events, modules, launches, graphs, virtual
 * clock; owned by the compute-share work).  Everything here is hidden from
 * the library's exports (see tests/fakes/fake.map).
 */
#ifndef GV_FAKE_CUDA_H
#define GV_FAKE_CUDA_H

#include <stdbool.h>
#include <stdint.h>

#include "common/gv_cuda.h"
#include "fake_gpus.h"

struct CUctx_st {
    int device;      /* CUDA ordinal */
    int phys;        /* index into fake_gpu_get() */
    bool primary;
    int refs;        /* primary contexts: retain count */
    bool destroyed;
};

/* CUDA_ERROR_NOT_INITIALIZED until cuInit succeeded. */
CUresult fake_cuda_check_init(void);
/* Visible device count after CUDA_VISIBLE_DEVICES. */
int fake_cuda_device_count(void);
/* Physical GPU index of CUDA ordinal dev, or -1. */
int fake_cuda_phys(CUdevice dev);
/* The calling thread's current context (NULL when none). */
struct CUctx_st *fake_cuda_current(void);
/* Validates a context handle. */
bool fake_cuda_ctx_valid(const struct CUctx_st *ctx);

/*
 * cuGetProcAddress table: base name, first CUDA version (major*1000 +
 * minor*10) the entry point applies to, per-thread-default-stream flavour,
 * implementing symbol.  The driver picks the newest entry whose version is
 * <= the caller's cudaVersion; the _ptsz/_ptds flavour when the caller asks
 * for per-thread default stream semantics.  Execution entries are resolved
 * weakly, so the table stays valid whichever part of the fake is built.
 */
#define FAKE_PT 1
#define FAKE_CUDA_PROCS(X)                                                                         \
    X(cuInit, 2000, 0, cuInit)                                                                     \
    X(cuDriverGetVersion, 2020, 0, cuDriverGetVersion)                                             \
    X(cuGetErrorString, 6000, 0, cuGetErrorString)                                                 \
    X(cuGetErrorName, 6000, 0, cuGetErrorName)                                                     \
    X(cuGetProcAddress, 11030, 0, cuGetProcAddress)                                                \
    X(cuGetProcAddress, 12000, 0, cuGetProcAddress_v2)                                             \
    X(cuDeviceGet, 2000, 0, cuDeviceGet)                                                           \
    X(cuDeviceGetCount, 2000, 0, cuDeviceGetCount)                                                 \
    X(cuDeviceGetName, 2000, 0, cuDeviceGetName)                                                   \
    X(cuDeviceGetUuid, 9020, 0, cuDeviceGetUuid)                                                   \
    X(cuDeviceGetUuid, 11040, 0, cuDeviceGetUuid_v2)                                               \
    X(cuDeviceTotalMem, 3020, 0, cuDeviceTotalMem_v2)                                              \
    X(cuDeviceGetAttribute, 2000, 0, cuDeviceGetAttribute)                                         \
    X(cuDeviceGetPCIBusId, 4010, 0, cuDeviceGetPCIBusId)                                           \
    X(cuDeviceGetByPCIBusId, 4010, 0, cuDeviceGetByPCIBusId)                                       \
    X(cuDeviceGetDefaultMemPool, 11020, 0, cuDeviceGetDefaultMemPool)                              \
    X(cuDeviceGetMemPool, 11020, 0, cuDeviceGetMemPool)                                            \
    X(cuDeviceSetMemPool, 11020, 0, cuDeviceSetMemPool)                                            \
    X(cuCtxCreate, 3020, 0, cuCtxCreate_v2)                                                        \
    X(cuCtxCreate, 11040, 0, cuCtxCreate_v3)                                                       \
    X(cuCtxCreate, 12050, 0, cuCtxCreate_v4)                                                       \
    X(cuCtxDestroy, 4000, 0, cuCtxDestroy_v2)                                                      \
    X(cuCtxGetCurrent, 4000, 0, cuCtxGetCurrent)                                                   \
    X(cuCtxSetCurrent, 4000, 0, cuCtxSetCurrent)                                                   \
    X(cuCtxPushCurrent, 4000, 0, cuCtxPushCurrent_v2)                                              \
    X(cuCtxPopCurrent, 4000, 0, cuCtxPopCurrent_v2)                                                \
    X(cuCtxGetDevice, 2000, 0, cuCtxGetDevice)                                                     \
    X(cuCtxSynchronize, 2000, 0, cuCtxSynchronize)                                                 \
    X(cuDevicePrimaryCtxRetain, 7000, 0, cuDevicePrimaryCtxRetain)                                 \
    X(cuDevicePrimaryCtxRelease, 7000, 0, cuDevicePrimaryCtxRelease)                               \
    X(cuDevicePrimaryCtxRelease, 11000, 0, cuDevicePrimaryCtxRelease_v2)                           \
    X(cuDevicePrimaryCtxReset, 7000, 0, cuDevicePrimaryCtxReset)                                   \
    X(cuDevicePrimaryCtxReset, 11000, 0, cuDevicePrimaryCtxReset_v2)                               \
    X(cuMemGetInfo, 3020, 0, cuMemGetInfo_v2)                                                      \
    X(cuMemAlloc, 3020, 0, cuMemAlloc_v2)                                                          \
    X(cuMemAllocPitch, 3020, 0, cuMemAllocPitch_v2)                                                \
    X(cuMemAllocManaged, 6000, 0, cuMemAllocManaged)                                               \
    X(cuMemFree, 3020, 0, cuMemFree_v2)                                                            \
    X(cuMemGetAddressRange, 3020, 0, cuMemGetAddressRange_v2)                                      \
    X(cuMemCreate, 10020, 0, cuMemCreate)                                                          \
    X(cuMemRelease, 10020, 0, cuMemRelease)                                                        \
    X(cuMemAddressReserve, 10020, 0, cuMemAddressReserve)                                          \
    X(cuMemAddressFree, 10020, 0, cuMemAddressFree)                                                \
    X(cuMemMap, 10020, 0, cuMemMap)                                                                \
    X(cuMemUnmap, 10020, 0, cuMemUnmap)                                                            \
    X(cuMemSetAccess, 10020, 0, cuMemSetAccess)                                                    \
    X(cuMemGetAllocationGranularity, 10020, 0, cuMemGetAllocationGranularity)                      \
    X(cuMemAllocAsync, 11020, 0, cuMemAllocAsync)                                                  \
    X(cuMemAllocAsync, 11020, FAKE_PT, cuMemAllocAsync_ptsz)                                       \
    X(cuMemAllocFromPoolAsync, 11020, 0, cuMemAllocFromPoolAsync)                                  \
    X(cuMemAllocFromPoolAsync, 11020, FAKE_PT, cuMemAllocFromPoolAsync_ptsz)                       \
    X(cuMemFreeAsync, 11020, 0, cuMemFreeAsync)                                                    \
    X(cuMemFreeAsync, 11020, FAKE_PT, cuMemFreeAsync_ptsz)                                         \
    X(cuMemPoolCreate, 11020, 0, cuMemPoolCreate)                                                  \
    X(cuMemPoolDestroy, 11020, 0, cuMemPoolDestroy)                                                \
    X(cuMemPoolTrimTo, 11020, 0, cuMemPoolTrimTo)                                                  \
    X(cuMemPoolGetAttribute, 11020, 0, cuMemPoolGetAttribute)                                      \
    X(cuMemPoolSetAttribute, 11020, 0, cuMemPoolSetAttribute)                                      \
    X(cuArrayCreate, 3020, 0, cuArrayCreate_v2)                                                    \
    X(cuArray3DCreate, 3020, 0, cuArray3DCreate_v2)                                                \
    X(cuArrayDestroy, 2000, 0, cuArrayDestroy)                                                     \
    X(cuMipmappedArrayCreate, 5000, 0, cuMipmappedArrayCreate)                                     \
    X(cuMipmappedArrayDestroy, 5000, 0, cuMipmappedArrayDestroy)                                   \
    X(cuIpcGetMemHandle, 4010, 0, cuIpcGetMemHandle)                                               \
    X(cuIpcOpenMemHandle, 11000, 0, cuIpcOpenMemHandle_v2)                                         \
    X(cuIpcCloseMemHandle, 4010, 0, cuIpcCloseMemHandle)                                           \
    X(cuImportExternalMemory, 10000, 0, cuImportExternalMemory)                                    \
    X(cuExternalMemoryGetMappedBuffer, 10000, 0, cuExternalMemoryGetMappedBuffer)                  \
    X(cuDestroyExternalMemory, 10000, 0, cuDestroyExternalMemory)                                  \
    X(cuStreamCreate, 2000, 0, cuStreamCreate)                                                     \
    X(cuStreamCreateWithPriority, 5050, 0, cuStreamCreateWithPriority)                             \
    X(cuStreamDestroy, 4000, 0, cuStreamDestroy_v2)                                                \
    X(cuStreamSynchronize, 2000, 0, cuStreamSynchronize)                                           \
    X(cuStreamSynchronize, 7000, FAKE_PT, cuStreamSynchronize_ptsz)                                \
    X(cuStreamQuery, 2000, 0, cuStreamQuery)                                                       \
    X(cuStreamQuery, 7000, FAKE_PT, cuStreamQuery_ptsz)                                            \
    X(cuStreamWaitEvent, 3020, 0, cuStreamWaitEvent)                                               \
    X(cuStreamWaitEvent, 7000, FAKE_PT, cuStreamWaitEvent_ptsz)                                    \
    X(cuStreamGetCtx, 9020, 0, cuStreamGetCtx)                                                     \
    X(cuStreamGetCtx, 9020, FAKE_PT, cuStreamGetCtx_ptsz)                                          \
    X(cuCtxGetStreamPriorityRange, 5050, 0, cuCtxGetStreamPriorityRange)                           \
    X(cuEventCreate, 2000, 0, cuEventCreate)                                                       \
    X(cuEventDestroy, 4000, 0, cuEventDestroy_v2)                                                  \
    X(cuEventRecord, 2000, 0, cuEventRecord)                                                       \
    X(cuEventRecord, 7000, FAKE_PT, cuEventRecord_ptsz)                                            \
    X(cuEventQuery, 2000, 0, cuEventQuery)                                                         \
    X(cuEventSynchronize, 2000, 0, cuEventSynchronize)                                             \
    X(cuEventElapsedTime, 2000, 0, cuEventElapsedTime)                                             \
    X(cuEventElapsedTime, 12080, 0, cuEventElapsedTime_v2)                                         \
    X(cuModuleLoad, 2000, 0, cuModuleLoad)                                                         \
    X(cuModuleLoadData, 2000, 0, cuModuleLoadData)                                                 \
    X(cuModuleUnload, 2000, 0, cuModuleUnload)                                                     \
    X(cuModuleGetFunction, 2000, 0, cuModuleGetFunction)                                           \
    X(cuLaunchKernel, 4000, 0, cuLaunchKernel)                                                     \
    X(cuLaunchKernel, 7000, FAKE_PT, cuLaunchKernel_ptsz)                                          \
    X(cuLaunchKernelEx, 11060, 0, cuLaunchKernelEx)                                                \
    X(cuLaunchKernelEx, 11060, FAKE_PT, cuLaunchKernelEx_ptsz)                                     \
    X(cuLaunchCooperativeKernel, 9000, 0, cuLaunchCooperativeKernel)                               \
    X(cuLaunchCooperativeKernel, 9000, FAKE_PT, cuLaunchCooperativeKernel_ptsz)                    \
    X(cuLaunchCooperativeKernelMultiDevice, 9000, 0, cuLaunchCooperativeKernelMultiDevice)         \
    X(cuGraphCreate, 10000, 0, cuGraphCreate)                                                      \
    X(cuGraphDestroy, 10000, 0, cuGraphDestroy)                                                    \
    X(cuGraphInstantiate, 12000, 0, cuGraphInstantiateWithFlags)                                   \
    X(cuGraphInstantiateWithFlags, 11040, 0, cuGraphInstantiateWithFlags)                          \
    X(cuGraphExecDestroy, 10000, 0, cuGraphExecDestroy)                                            \
    X(cuGraphLaunch, 10000, 0, cuGraphLaunch)                                                      \
    X(cuGraphLaunch, 10000, FAKE_PT, cuGraphLaunch_ptsz)                                           \
    X(cuStreamBeginCapture, 10010, 0, cuStreamBeginCapture_v2)                                     \
    X(cuStreamBeginCapture, 10010, FAKE_PT, cuStreamBeginCapture_v2_ptsz)                          \
    X(cuStreamEndCapture, 10000, 0, cuStreamEndCapture)                                            \
    X(cuStreamEndCapture, 10000, FAKE_PT, cuStreamEndCapture_ptsz)                                \
    X(cuStreamIsCapturing, 10000, 0, cuStreamIsCapturing)                                          \
    X(cuStreamIsCapturing, 10000, FAKE_PT, cuStreamIsCapturing_ptsz)                               \
    X(cuStreamGetDevice, 12080, 0, cuStreamGetDevice)                                              \
    X(cuStreamGetDevice, 12080, FAKE_PT, cuStreamGetDevice_ptsz)                                   \
    X(cuThreadExchangeStreamCaptureMode, 10010, 0, cuThreadExchangeStreamCaptureMode)

/*
 * Execution half (fake_cuda_exec.c): the virtual clock.  Exported (see
 * tests/fakes/fake.map) as the test seam for libgpuvisor's compute-share
 * module, which looks them up on the driver handle; the real driver has no
 * such symbols.
 */
/* Virtual time in ns (shared by every process using GVFAKE_GPU_STATE). */
uint64_t gvfake_clock_ns(void);
/* Blocks the calling thread for ns of virtual time. */
void gvfake_sleep_ns(uint64_t ns);
/* The calling thread stops taking part in the clock (it will not block). */
void gvfake_actor_leave(void);
/* Kernel time this process has submitted (tests compute shares from it). */
uint64_t gvfake_process_busy_ns(void);
/* Kernel time the physical GPU has run so far (for utilisation views). */
uint64_t gvfake_device_busy_ns(int phys);

#endif
