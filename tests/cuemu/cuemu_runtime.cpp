/* cuemu: the CUDA runtime calls of kernels/cuda/ on the host (see include/cuda_runtime.h).
 * One emulated device, "cuemu (CPU emulation)", reported as compute capability 9.0; every stream
 * is synchronous. Device memory (cudaMalloc, filled with 0xff bytes) and the guard that keeps
 * host code out of it: cuemu_memory.cpp. */
#include <stdio.h>
#include <stdlib.h>
#include "cuda_runtime.h"

namespace cuemu { cudaError_t g_last_error = cudaSuccess; }
using cuemu::g_last_error;
static int g_device;
struct cuemu_stream { int dummy; };

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    }
    return "unknown error";
}
cudaError_t cudaGetLastError(void) { cudaError_t e = g_last_error; g_last_error = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError(void) { return g_last_error; }
cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { if (d != 0) return g_last_error = cudaErrorInvalidDevice; g_device = d; return cudaSuccess; }
cudaError_t cudaGetDevice(int *d) { *d = g_device; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (d != 0) return g_last_error = cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuemu (CPU emulation)");
    memcpy(p->uuid.bytes, "cuemu-device-000", 16);
    p->totalGlobalMem = (size_t)8 << 30;
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = 227 * 1024;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    p->maxThreadsPerBlock = 1024;
    p->warpSize = 32;
    p->clockRate = 1000000;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d) {
    switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrClockRate: *v = 1000000; break;
    case cudaDevAttrMultiProcessorCount: *v = 1; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = 227 * 1024; break;
    default: return g_last_error = cudaErrorInvalidValue;
    }
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k) {
    cuemu::DeviceAccess dev;
    if (n) memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t) { return cudaMemcpy(dst, src, n, k); }
cudaError_t cudaMemset(void *p, int v, size_t n) { cuemu::DeviceAccess dev; memset(p, v, n); return cudaSuccess; }
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) { cuemu::DeviceAccess dev; memset(p, v, n); return cudaSuccess; }
cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height, cudaStream_t) {
    if (width > pitch) return g_last_error = cudaErrorInvalidValue;
    cuemu::DeviceAccess dev;
    for (size_t r = 0; r < height; r++) memset((char *)p + r * pitch, v, width);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = new cuemu_stream(); return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { *s = new cuemu_stream(); return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
