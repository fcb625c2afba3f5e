/* Self-test of the CUDA emulator (tests/cuemu/include/cuemu.h): the mistakes it exists to catch
 * must be caught, and correct code must give exact results.
 *   - a block reduction with its __syncthreads gives the exact sum; without it, the sum is wrong
 *     (warps run one at a time, so the race shows);
 *   - a lane reading its neighbour's shared-memory write after __syncwarp reads it; without the
 *     __syncwarp it reads the 0xff poison (NaN);
 *   - WMMA 16x16x16 bf16 product of exact small integers equals the host product; a store by
 *     only half the warp leaves holes;
 *   - a misaligned WMMA pointer, a warp collective with an exited lane and a split warp abort
 *     the program (checked in a child process);
 *   - dynamic shared memory above 48 KiB without cudaFuncSetAttribute fails the launch;
 *   - host code reading or writing device memory outside the emulator aborts (checked in a
 *     child process); cudaMemcpy and kernels reach it. */
#include <signal.h>
#include <vector>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <mma.h>
#include "kernels/cuda/cuda_common.h"
#include "tests/check.h"
using namespace nvcuda;

__global__ void block_sum(float *out, const float *in, bool with_barrier) {
    __shared__ float sh[256];
    sh[threadIdx.x] = in[threadIdx.x];
    if (with_barrier) __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0;
        for (int i = 0; i < 256; i++) s += sh[i];
        *out = s;
    }
}

__global__ void neighbour(float *out, bool with_syncwarp) {
    CU_DYNAMIC_SMEM(smem);
    float *sh = (float *)smem;
    sh[threadIdx.x] = (float)threadIdx.x;
    if (with_syncwarp) __syncwarp();
    out[threadIdx.x] = sh[threadIdx.x ^ 1];
}

__global__ void wmma_product(float *c, const __nv_bfloat16 *a, const __nv_bfloat16 *b, int lanes_storing) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    if ((int)threadIdx.x < lanes_storing) wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

__global__ void wmma_misaligned(const __nv_bfloat16 *a) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a + 1, 16);
}

__global__ void shuffle_after_exit(float *out) {
    if (threadIdx.x == 5) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

__global__ void split_warp(void) {
    if (threadIdx.x < 16) __syncthreads();
    else __syncwarp();
}

__global__ void big_smem(float *out) {
    CU_DYNAMIC_SMEM(smem);
    ((float *)smem)[threadIdx.x] = 1.0f;
    out[threadIdx.x] = ((float *)smem)[threadIdx.x];
}

/* runs f in a child; true when the child was killed by SIGABRT (cuemu::fatal) */
static bool aborts(void (*f)(void)) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        f();
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}
static __nv_bfloat16 *g_a;
static float *g_out;
static void do_misaligned(void) { CU_KERNEL(wmma_misaligned, 1, 32, 0, 0)(g_a); }
static void do_shuffle_after_exit(void) { CU_KERNEL(shuffle_after_exit, 1, 32, 0, 0)(g_out); }
static void do_split_warp(void) { CU_KERNEL(split_warp, 1, 32, 0, 0)(); }
static void do_host_write(void) { g_out[3] = 1.0f; }
static volatile float g_sink;
static void do_host_read(void) { g_sink = g_out[5]; }
extern "C" int cuemu_is_device_memory(const void *p);

int main(void) {
    float *in, *out;
    cudaMalloc(&in, 256 * sizeof(float));
    cudaMalloc(&out, 256 * sizeof(float));
    __nv_bfloat16 *a, *b;
    float *c;
    cudaMalloc(&a, 256 * 2);
    cudaMalloc(&b, 256 * 2);
    cudaMalloc(&c, 256 * 4);
    {
    /* these checks read and write device memory from the host, which only an open scope allows */
    cuemu::DeviceAccess host_view;
    for (int i = 0; i < 256; i++) in[i] = (float)(i + 1);
    CU_KERNEL(block_sum, 1, 256, 0, 0)(out, in, true);
    check(out[0] == 256.0f * 257.0f / 2.0f, "cuemu self: block reduction with __syncthreads is exact", "sum %g", out[0]);
    /* new inputs: static __shared__ arrays keep the previous launch's values (they are not
     * poisoned), so a racy read of unchanged data would go unnoticed */
    for (int i = 0; i < 256; i++) in[i] = 2.0f * (float)(i + 1);
    CU_KERNEL(block_sum, 1, 256, 0, 0)(out, in, false);
    check(out[0] != 256.0f * 257.0f, "cuemu self: block reduction without __syncthreads is wrong (race caught)",
          "sum %g is right although the barrier is missing", out[0]);

    CU_KERNEL(neighbour, 1, 64, 64 * sizeof(float), 0)(out, true);
    bool ok = true;
    for (int i = 0; i < 64; i++) ok &= out[i] == (float)(i ^ 1);
    check(ok, "cuemu self: neighbour read after __syncwarp", "wrong values");
    CU_KERNEL(neighbour, 1, 64, 64 * sizeof(float), 0)(out, false);
    check(out[0] != out[0], "cuemu self: neighbour read without __syncwarp reads the NaN poison", "lane 0 read %g", out[0]);

    for (int i = 0; i < 256; i++) { a[i] = __float2bfloat16((float)(i % 7 - 3)); b[i] = __float2bfloat16((float)(i % 5 - 2)); }
    CU_KERNEL(wmma_product, 1, 32, 0, 0)(c, a, b, 32);
    ok = true;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float r = 0;
            for (int k = 0; k < 16; k++) r += (float)(((i * 16 + k) % 7) - 3) * (float)(((k * 16 + j) % 5) - 2);
            ok &= c[i * 16 + j] == r;
        }
    check(ok, "cuemu self: WMMA product equals the host product", "mismatch");
    cudaMemset(c, 0xff, 256 * 4);
    CU_KERNEL(wmma_product, 1, 32, 0, 0)(c, a, b, 16);
    int holes = 0;
    for (int i = 0; i < 256; i++) holes += c[i] != c[i];
    check(holes == 128, "cuemu self: WMMA store by half a warp leaves half the tile unwritten", "%d holes", holes);

    g_a = a;
    g_out = out;
    check(aborts(do_misaligned), "cuemu self: misaligned WMMA pointer aborts", "did not abort");
    check(aborts(do_shuffle_after_exit), "cuemu self: full-mask shuffle with an exited lane aborts", "did not abort");
    check(aborts(do_split_warp), "cuemu self: warp split between __syncthreads and __syncwarp aborts", "did not abort");

    cudaGetLastError();
    CU_KERNEL(big_smem, 1, 32, 64 * 1024, 0)(out);
    check(cudaGetLastError() != cudaSuccess, "cuemu self: 64 KiB dynamic shared memory without the attribute fails",
          "launch succeeded");
    cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
    out[0] = 0;
    CU_KERNEL(big_smem, 1, 32, 64 * 1024, 0)(out);
    check(cudaGetLastError() == cudaSuccess && out[0] == 1.0f, "cuemu self: 64 KiB after cudaFuncSetAttribute runs",
          "failed");
    /* the refused launch above is not counted; names match by prefix */
    check(cuemu_launch_count("big_smem") == 1 && cuemu_launch_count("big_") == 1 && cuemu_launch_count("big_smemx") == 0,
          "cuemu self: cuemu_launch_count counts the valid launches of a kernel", "big_smem %ld", cuemu_launch_count("big_smem"));
    }

    /* host code outside a scope: device memory faults and the program aborts (cuemu_memory.cpp);
     * through cudaMemcpy and kernels it works */
    g_out = out;
    check(aborts(do_host_write), "cuemu self: a host write through a device pointer aborts", "did not abort");
    check(aborts(do_host_read), "cuemu self: a host read through a device pointer aborts", "did not abort");
    float host[256], back[256];
    for (int i = 0; i < 256; i++) host[i] = (float)(3 * i);
    cudaMemcpy(in, host, sizeof host, cudaMemcpyHostToDevice);
    CU_KERNEL(block_sum, 1, 256, 0, 0)(out, in, true);
    cudaMemcpy(back, out, sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(host, in, sizeof host, cudaMemcpyDeviceToHost);
    check(back[0] == 3.0f * 255 * 256 / 2 && host[255] == 765.0f, "cuemu self: cudaMemcpy and kernels reach device memory",
          "sum %g, in[255] %g", back[0], host[255]);
    check(!cuemu_is_device_memory(host) && cuemu_is_device_memory(out), "cuemu self: device blocks come from the arena",
          "host %d device %d", cuemu_is_device_memory(host), cuemu_is_device_memory(out));
    /* freeing a block gives back only the pages wholly inside it: a page-aligned 256-byte block
     * shares its page with the next block, whose bytes must survive (they did not, once) */
    {
        std::vector<void *> pad;
        void *x = NULL, *y = NULL;
        for (int i = 0; i < 64; i++) {
            cudaMalloc(&x, 256);
            if (((uintptr_t)x & 4095) == 0) break;
            pad.push_back(x);
            x = NULL;
        }
        cudaMalloc(&y, 256);
        float pattern[64], after[64];
        for (int i = 0; i < 64; i++) pattern[i] = (float)i + 0.5f;
        cudaMemcpy(y, pattern, sizeof pattern, cudaMemcpyHostToDevice);
        cudaFree(x);
        cudaMemcpy(after, y, sizeof after, cudaMemcpyDeviceToHost);
        check(x && (char *)y == (char *)x + 256 && !memcmp(pattern, after, sizeof after),
              "cuemu self: freeing a block keeps its page neighbour's bytes", "x %p y %p, equal %d", x, y,
              !memcmp(pattern, after, sizeof after));
        cudaFree(y);
        for (void *p : pad) cudaFree(p);
    }
    cudaFree(in);
    cudaFree(out);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    return check_exit_code();
}
