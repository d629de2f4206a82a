/*
 * The one list of symbols libgpuvisor.so hooks.  It generates the exported
 * symbol set (libgpuvisor.map, via the preprocessor), the typed table of
 * real driver functions, the dlsym/cuGetProcAddress dispatch table and the
 * hook ids.  This header has no includes so the build can preprocess it
 * into a linker version script.
 *
 * GV_CUDA_HOOKS(X): X(symbol, base name, first CUDA version, per-thread)
 *   symbol      the versioned entry point libcuda.so.1 exports and we export
 *   base        the name cuGetProcAddress callers ask for ("cuMemAlloc")
 *   version     first cudaVersion (major*1000 + minor*10) that maps base to
 *               symbol; newer entries for the same base supersede older ones
 *   per-thread  1 for the _ptsz/_ptds flavour (CU_GET_PROC_ADDRESS_PER_THREAD_
 *               DEFAULT_STREAM), else 0
 * GV_NVML_HOOKS(X): X(symbol)
 * GV_CUDA_USED(X) / GV_NVML_USED(X): real functions we call but do not hook.
 */
#ifndef GV_INTERPOSER_HOOKS_H
#define GV_INTERPOSER_HOOKS_H

#define GV_CUDA_HOOKS(X)                                                                           \
    X(cuInit, cuInit, 2000, 0)                                                                     \
    X(cuGetProcAddress, cuGetProcAddress, 11030, 0)                                                \
    X(cuGetProcAddress_v2, cuGetProcAddress, 12000, 0)                                             \
    X(cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, 0)                                              \
    X(cuMemGetInfo_v2, cuMemGetInfo, 3020, 0)                                                      \
    X(cuCtxCreate_v2, cuCtxCreate, 3020, 0)                                                        \
    X(cuCtxCreate_v3, cuCtxCreate, 11040, 0)                                                       \
    X(cuCtxCreate_v4, cuCtxCreate, 12050, 0)                                                       \
    X(cuCtxDestroy_v2, cuCtxDestroy, 4000, 0)                                                      \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0)                                 \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 7000, 0)                               \
    X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000, 0)                           \
    X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 7000, 0)                                   \
    X(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset, 11000, 0)                               \
    X(cuMemAlloc_v2, cuMemAlloc, 3020, 0)                                                          \
    X(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, 0)                                                \
    X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0)                                               \
    X(cuMemFree_v2, cuMemFree, 3020, 0)                                                            \
    X(cuMemCreate, cuMemCreate, 10020, 0)                                                          \
    X(cuMemRelease, cuMemRelease, 10020, 0)                                                        \
    X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0)                                                  \
    X(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, 1)                                             \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0)                                  \
    X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, 1)                             \
    X(cuMemFreeAsync, cuMemFreeAsync, 11020, 0)                                                    \
    X(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, 1)                                               \
    X(cuMemPoolCreate, cuMemPoolCreate, 11020, 0)                                                  \
    X(cuMemPoolDestroy, cuMemPoolDestroy, 11020, 0)                                                \
    X(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020, 0)                                                  \
    X(cuArrayCreate_v2, cuArrayCreate, 3020, 0)                                                    \
    X(cuArray3DCreate_v2, cuArray3DCreate, 3020, 0)                                                \
    X(cuArrayDestroy, cuArrayDestroy, 2000, 0)                                                     \
    X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000, 0)                                     \
    X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, 0)                                   \
    X(cuImportExternalMemory, cuImportExternalMemory, 10000, 0)                                    \
    X(cuDestroyExternalMemory, cuDestroyExternalMemory, 10000, 0)                                  \
    X(cuLaunchKernel, cuLaunchKernel, 4000, 0)                                                     \
    X(cuLaunchKernel_ptsz, cuLaunchKernel, 7000, 1)                                                \
    X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, 0)                                                \
    X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, 11060, 1)                                           \
    X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, 0)                               \
    X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, 9000, 1)                          \
    X(cuLaunchCooperativeKernelMultiDevice, cuLaunchCooperativeKernelMultiDevice, 9000, 0)         \
    X(cuGraphLaunch, cuGraphLaunch, 10000, 0)                                                      \
    X(cuGraphLaunch_ptsz, cuGraphLaunch, 10000, 1)

#define GV_CUDA_USED(X)                                                                            \
    X(cuCtxGetDevice)                                                                              \
    X(cuDeviceGetUuid)                                                                             \
    X(cuDeviceGetUuid_v2)                                                                          \
    X(cuDeviceGetAttribute)                                                                        \
    X(cuDeviceGetCount)                                                                            \
    X(cuDeviceGetMemPool)                                                                          \
    X(cuDeviceGetDefaultMemPool)                                                                   \
    X(cuStreamSynchronize)                                                                         \
    X(cuStreamSynchronize_ptsz)                                                                    \
    X(cuMemPoolGetAttribute)

#define GV_NVML_HOOKS(X)                                                                           \
    X(nvmlDeviceGetMemoryInfo)                                                                     \
    X(nvmlDeviceGetMemoryInfo_v2)                                                                  \
    X(nvmlDeviceGetComputeRunningProcesses)                                                        \
    X(nvmlDeviceGetComputeRunningProcesses_v2)                                                     \
    X(nvmlDeviceGetComputeRunningProcesses_v3)                                                     \
    X(nvmlDeviceGetGraphicsRunningProcesses)                                                       \
    X(nvmlDeviceGetGraphicsRunningProcesses_v2)                                                    \
    X(nvmlDeviceGetGraphicsRunningProcesses_v3)                                                    \
    X(nvmlDeviceGetMPSComputeRunningProcesses)                                                     \
    X(nvmlDeviceGetMPSComputeRunningProcesses_v2)                                                  \
    X(nvmlDeviceGetMPSComputeRunningProcesses_v3)                                                  \
    X(nvmlDeviceGetProcessUtilization)

#define GV_NVML_USED(X)                                                                            \
    X(nvmlInit_v2)                                                                                 \
    X(nvmlDeviceGetHandleByUUID)                                                                   \
    X(nvmlDeviceGetUUID)                                                                           \
    X(nvmlDeviceGetIndex)                                                                          \
    X(nvmlDeviceGetCount_v2)                                                                       \
    X(nvmlDeviceGetHandleByIndex_v2)                                                               \
    X(nvmlDeviceGetName)

#endif
