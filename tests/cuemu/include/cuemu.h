/* cuemu: a CPU emulator for the CUDA C of kernels/cuda/, used only by tests.
 *
 * Why: the CUDA backend must be correct on machines we cannot always reach. cuemu compiles the
 * backend's own .cu files with g++ (-DPHASELAB_CUEMU, these headers instead of the toolkit's)
 * and runs every kernel on the CPU, so the GPU parity tests (tests/gpu/) exercise the real
 * kernel code — indexing, tiling, masking, online softmax, reductions, cuBLASLt layouts — on
 * every `make test`, GPU or not.
 *
 * Execution model (what is emulated, and how strictly):
 *   - A launch runs its blocks one after another. The threads of a block are coroutines
 *     (ucontext) on one OS thread; each runs until it reaches a barrier or returns.
 *   - __syncthreads(): a thread waits until every live thread of its block waits there too.
 *     __syncwarp() and the warp shuffles wait for every lane of the warp. A warp collective
 *     with a full mask while a lane of that warp has exited (or does not exist: blockDim not a
 *     multiple of 32), threads of one warp waiting at different barriers, or a barrier nobody
 *     else reaches, stop the program with a message naming the kernel and the block.
 *   - Lanes do NOT run in lock step: lane 0 runs to its next barrier before lane 1 starts, so
 *     code that reads another lane's shared-memory writes without a barrier reads stale data
 *     and fails its parity test (stricter than a GPU, where such code sometimes works).
 *   - WMMA: every lane holds the whole tile in its fragment (a valid choice: the fragment
 *     layout is opaque); mma_sync is fp32 accumulation of exact bf16 products; store_matrix_sync
 *     writes only the elements e with e % 32 == lane, so a store that is not executed by all 32
 *     lanes, or read back by other lanes before __syncwarp, leaves holes. load/store check the
 *     32-byte pointer alignment and the ldm multiple that the hardware requires.
 *   - Launch checks: block size <= 1024, grid y/z <= 65535, dynamic shared memory <= 48 KiB
 *     unless cudaFuncSetAttribute(MaxDynamicSharedMemorySize) raised it for that kernel, and
 *     <= 227 KiB. Dynamic shared memory and fresh cudaMalloc memory are filled with 0xff bytes
 *     (NaN in fp32 and bf16), so reading what was never written shows up as NaN. Static
 *     __shared__ arrays are plain statics: they keep the previous block's values (not poisoned).
 *   - Device memory: cudaMalloc blocks come from one arena that is PROT_NONE except inside the
 *     emulator's own calls (launches, cudaMemcpy/Memset, cuBLASLt, CUB): host code that reads or
 *     writes through a device pointer aborts with the address and its block, as it would crash
 *     on a GPU (cuemu_memory.cpp; found missing by the first H200 run).
 *   - Streams are synchronous; cuBLASLt and CUB's radix sort are emulated on the host.
 *   Not emulated: timing, memory ordering between blocks, float atomics, cuDNN.
 *   Introspection for tests: cuemu_launch_count(name) counts the valid launches of the kernels
 *   whose name (as written at CU_KERNEL, e.g. "attn_bwd_dkv_reduce_kernel") starts with name,
 *   so a test can tell which path an op took (no such counter exists on a GPU).
 */
#ifndef CUEMU_H
#define CUEMU_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <tuple>
#include <type_traits>
#include <utility>

/* ---- vector types ---- */
struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct int2 { int x, y; };
struct int4 { int x, y, z, w; };
struct uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
static inline int2 make_int2(int x, int y) { return int2{x, y}; }

/* ---- qualifiers ---- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static
#define __constant__ static

namespace cuemu {
/* one emulated thread */
struct Thread {
    uint3 tid;
    int linear, warp, lane;
    int state;  /* RUNNABLE, WAIT_BLOCK, WAIT_WARP, DONE */
    unsigned warp_mask;
};
enum { RUNNABLE = 0, WAIT_BLOCK = 1, WAIT_WARP = 2, DONE = 3 };
extern Thread *g_cur;
extern uint3 g_block_idx;
extern dim3 g_block_dim, g_grid_dim;
extern uint64_t g_warp_slots[32][32];  /* shuffle exchange: [warp][lane] */

/* Device memory is readable and writable only inside such a scope (cuemu_memory.cpp): every
 * emulated call that touches it opens one; host code outside them faults and is reported. */
struct DeviceAccess {
    DeviceAccess();
    ~DeviceAccess();
    DeviceAccess(const DeviceAccess &) = delete;
    DeviceAccess &operator=(const DeviceAccess &) = delete;
};
void syncthreads();
void syncwarp(unsigned mask);
void *dynamic_smem();
[[noreturn]] void fatal(const char *fmt, ...);
void count_mma();   /* one warp-level wmma::mma_sync of the running kernel (lane 0 counts) */
void run_grid(const char *name, const void *fn, dim3 grid, dim3 block, size_t smem, void (*body)(void *), void *ctx);
}  // namespace cuemu
/* launches so far of the kernels whose name starts with name (C linkage: tests/gpu/ are C) */
extern "C" long cuemu_launch_count(const char *name);
/* warp-level wmma::mma_sync calls so far in the kernels whose name starts with name */
extern "C" long cuemu_mma_count(const char *name);
namespace cuemu {

/* launcher(kernel, name, grid, block, smem)(args...): converts the arguments to the kernel's
 * parameter types (as a launch does) and runs the grid. */
template <typename... P>
struct Launcher {
    void (*kernel)(P...);
    const char *name;
    dim3 grid, block;
    size_t smem;
    template <typename... A>
    void operator()(A &&...a) const {
        typedef std::tuple<typename std::decay<P>::type...> Args;
        Args args(std::forward<A>(a)...);
        struct Ctx { void (*k)(P...); Args *args; } c{kernel, &args};
        run_grid(name, (const void *)kernel, grid, block, smem,
                 [](void *p) { Ctx *c = (Ctx *)p; std::apply(c->k, *c->args); }  /* by-value params: one copy per thread */, &c);
    }
};
template <typename... P>
Launcher<P...> launcher(void (*k)(P...), const char *name, dim3 grid, dim3 block, size_t smem) {
    return Launcher<P...>{k, name, grid, block, smem};
}

/* The warp collectives below: every lane of the warp publishes v, and each reads the value of
 * lane src (its own when src < 0); barriers before and after the read, so no lane overwrites
 * its slot before all have read. */
template <typename T>
T warp_exchange(unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
    Thread *t = g_cur;
    memcpy(&g_warp_slots[t->warp][t->lane], &v, sizeof v);
    syncwarp(mask);
    T r = v;
    if (src >= 0) memcpy(&r, &g_warp_slots[t->warp][src], sizeof r);
    syncwarp(mask);
    return r;
}
template <typename T>
T shfl_xor(unsigned mask, T v, int lane_mask, int width) {
    int lane = g_cur->lane;
    return warp_exchange(mask, v, (lane & ~(width - 1)) | ((lane ^ lane_mask) & (width - 1)));
}
template <typename T>
T shfl_idx(unsigned mask, T v, int src_lane, int width) {
    return warp_exchange(mask, v, (g_cur->lane & ~(width - 1)) | (src_lane & (width - 1)));
}
template <typename T>
T shfl_down(unsigned mask, T v, unsigned delta, int width) {
    int lane = g_cur->lane, off = (lane & (width - 1)) + (int)delta;
    return warp_exchange(mask, v, off < width ? (lane & ~(width - 1)) + off : -1);
}
}  // namespace cuemu

#define threadIdx (cuemu::g_cur->tid)
#define blockIdx (cuemu::g_block_idx)
#define blockDim (cuemu::g_block_dim)
#define gridDim (cuemu::g_grid_dim)
#define __syncthreads() cuemu::syncthreads()
static inline void __syncwarp(unsigned mask = 0xffffffffu) { cuemu::syncwarp(mask); }
template <typename T> static inline T __shfl_xor_sync(unsigned m, T v, int lm, int w = 32) { return cuemu::shfl_xor(m, v, lm, w); }
template <typename T> static inline T __shfl_sync(unsigned m, T v, int src, int w = 32) { return cuemu::shfl_idx(m, v, src, w); }
template <typename T> static inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) { return cuemu::shfl_down(m, v, d, w); }

/* ---- device math ---- */
#define __expf(x) expf(x)
#define __logf(x) logf(x)
static const int warpSize = 32;
static inline float __fdividef(float a, float b) { return a / b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
template <typename T> static inline T __ldg(const T *p) { return *p; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
static inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }

#endif
