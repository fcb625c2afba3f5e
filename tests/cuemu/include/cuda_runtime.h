/* cuemu (tests/cuemu/include/cuemu.h): the subset of the CUDA runtime API that kernels/cuda/
 * uses, executed on the host. Device memory is host memory in an arena that host code cannot
 * touch outside the emulator's own calls (cuemu_memory.cpp); every stream is synchronous. */
#ifndef CUEMU_CUDA_RUNTIME_H
#define CUEMU_CUDA_RUNTIME_H
#include "cuemu.h"

typedef enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoDevice = 100,
    cudaErrorLaunchOutOfResources = 701,
} cudaError_t;
typedef cudaError_t cudaError;
typedef struct cuemu_stream *cudaStream_t;
typedef enum { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
               cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 } cudaMemcpyKind;
typedef enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
               cudaFuncAttributePreferredSharedMemoryCarveout = 9 } cudaFuncAttribute;
typedef enum { cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrClockRate = 13,
               cudaDevAttrMultiProcessorCount = 16,
               cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 } cudaDeviceAttr;
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01

typedef struct { char bytes[16]; } cudaUUID_t;
struct cudaDeviceProp {
    char name[256];
    cudaUUID_t uuid;
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin;
    int major, minor, multiProcessorCount, maxThreadsPerBlock, warpSize, clockRate;
};

const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **p, size_t bytes);
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
cudaError_t cudaFree(void *p);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s = 0);
cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height, cudaStream_t s = 0);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
namespace cuemu { cudaError_t set_func_attr(const void *fn, cudaFuncAttribute a, int v); }
template <typename F> static inline cudaError_t cudaFuncSetAttribute(F *fn, cudaFuncAttribute a, int v) {
    return cuemu::set_func_attr((const void *)fn, a, v);
}
#endif
