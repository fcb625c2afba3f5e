/* cuemu: device memory (cudaMalloc, cudaFree, cudaMemGetInfo) and the guard that keeps host code
 * out of it.
 *
 * Why: on a GPU, host code that reads or writes through a device pointer crashes (the first
 * H200 run found two tests doing it: tests/model_testutil.h wrote parameters through
 * model_params()). In an emulator whose device memory is plain host memory such code works,
 * so the parity tests could not see it. Here device memory is inaccessible to the host except
 * while the emulator itself works on it:
 *
 *   arena     one reservation of ARENA_BYTES of address space (PROT_NONE, no swap reserved);
 *             cudaMalloc hands out 256-byte aligned blocks from it (a block freed is reused by an
 *             allocation of the same rounded size; the pages wholly inside it are returned with
 *             MADV_DONTNEED);
 *             fresh blocks are filled with 0xff bytes (NaN as fp32 and bf16), as before
 *   access    cuemu::DeviceAccess is a scope: the first one opened makes [arena, arena + used)
 *             readable and writable, the last one closed makes it PROT_NONE again. Every
 *             emulated call that touches device memory opens one: a kernel launch (run_grid),
 *             cudaMemcpy*, cudaMemset*, cublasLtMatmul, cub::DeviceRadixSort
 *   fault     a SIGSEGV at an arena address outside every scope is host code touching device
 *             memory: the handler prints the address, the allocation it falls in (offset and
 *             size), then aborts (exit by SIGABRT: the test
 *             fails); any other SIGSEGV goes to the previous handler or the default action.
 *
 * CUEMU_HOST_ACCESS=1 (environment) turns the guard off (the old behaviour: the arena stays
 * readable and writable), for debugging only. CUEMU_CHECK_FREED=1 adds a use-after-free check:
 * blocks are whole pages, never reused, and a freed one stays PROT_NONE inside the scopes too
 * (each scope then unprotects the live blocks one by one: slow), so a kernel or copy that
 * touches freed device memory aborts with the address. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <map>
#include <vector>
#include "cuda_runtime.h"

namespace cuemu { extern cudaError_t g_last_error; }
using cuemu::g_last_error;

namespace {
const size_t ARENA_BYTES = (size_t)64 << 30;   /* address space only; the emulated card reports 8 GiB */
const size_t ALIGN = 256;

char *g_arena;                                   /* [ARENA_BYTES], NULL before the first cudaMalloc */
size_t g_used;                                   /* bytes handed out from the bottom so far */
int g_depth;                                     /* open DeviceAccess scopes */
bool g_guard = true;                             /* false with CUEMU_HOST_ACCESS=1 */
bool g_check_freed;                              /* CUEMU_CHECK_FREED=1: freed blocks stay inaccessible */
std::map<char *, size_t> g_dead;                 /* (CUEMU_CHECK_FREED) freed block -> size, never reused */
std::map<char *, size_t> g_live;                 /* block -> rounded size */
std::map<size_t, std::vector<char *>> g_free;    /* rounded size -> freed blocks */
struct sigaction g_prev_segv;

void protect(int prot) {
    if (!g_guard || !g_used) return;
    if (g_check_freed && prot != PROT_NONE) {   /* live blocks only: a freed one stays PROT_NONE */
        for (const auto &b : g_live)
            if (mprotect(b.first, b.second, prot) != 0) { perror("cuemu: mprotect of a device block"); abort(); }
        return;
    }
    if (mprotect(g_arena, g_used, prot) != 0) {
        perror("cuemu: mprotect of the device arena");
        abort();
    }
}

/* The block that holds address a, or NULL. */
char *block_of(const char *a, size_t *size) {
    auto it = g_live.upper_bound((char *)a);
    if (it == g_live.begin()) return NULL;
    --it;
    if (a >= it->first + it->second) return NULL;
    *size = it->second;
    return it->first;
}

void on_segv(int sig, siginfo_t *info, void *uctx) {
    const char *a = (const char *)info->si_addr;
    if (g_arena && a >= g_arena && a < g_arena + ARENA_BYTES && g_check_freed && g_depth > 0) {
        char msg[256];
        auto it = g_dead.upper_bound((char *)a);
        if (it != g_dead.begin()) --it;
        int n = it != g_dead.end() && a >= it->first && a < it->first + it->second
                    ? snprintf(msg, sizeof msg, "cuemu: device memory used after cudaFree at %p: byte %zu of a freed block of %zu bytes\n",
                               (const void *)a, (size_t)(a - it->first), it->second)
                    : snprintf(msg, sizeof msg, "cuemu: device access at %p outside every live block\n", (const void *)a);
        if (n > 0) { ssize_t w = write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1); (void)w; }
        signal(SIGABRT, SIG_DFL);
        abort();
    }
    if (g_arena && a >= g_arena && a < g_arena + ARENA_BYTES && g_depth == 0) {
        char msg[512];
        size_t size = 0;
        const char *blk = block_of(a, &size);
        int n = blk ? snprintf(msg, sizeof msg,
                               "cuemu: host code touched device memory at %p: byte %zu of a cudaMalloc block of %zu bytes. "
                               "On a GPU this is a crash: read it with cudaMemcpy (Backend.download) or write it with "
                               "Backend.upload (tests/cuemu/cuemu_memory.cpp)\n", (const void *)a, (size_t)(a - blk), size)
                    : snprintf(msg, sizeof msg, "cuemu: host code touched device memory at %p (no live block there: "
                               "freed or never allocated)\n", (const void *)a);
        if (n > 0) { ssize_t w = write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1); (void)w; }
        signal(SIGABRT, SIG_DFL);
        abort();
    }
    /* not ours: the handler that was there before, or the default action on return */
    if (g_prev_segv.sa_flags & SA_SIGINFO) {
        if (g_prev_segv.sa_sigaction) { g_prev_segv.sa_sigaction(sig, info, uctx); return; }
    } else if (g_prev_segv.sa_handler != SIG_DFL && g_prev_segv.sa_handler != SIG_IGN && g_prev_segv.sa_handler) {
        g_prev_segv.sa_handler(sig);
        return;
    }
    signal(SIGSEGV, SIG_DFL);   /* the faulting instruction runs again and takes the default action */
}

bool arena_init() {
    if (g_arena) return true;
    void *p = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        perror("cuemu: reserving the device arena");
        return false;
    }
    g_arena = (char *)p;
    const char *env = getenv("CUEMU_HOST_ACCESS");
    g_guard = !(env && strcmp(env, "1") == 0);
    const char *freed = getenv("CUEMU_CHECK_FREED");
    g_check_freed = g_guard && freed && strcmp(freed, "1") == 0;
    if (!g_guard && mprotect(g_arena, ARENA_BYTES, PROT_READ | PROT_WRITE) != 0) {
        perror("cuemu: mprotect of the device arena");
        return false;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_prev_segv);
    return true;
}
}  // namespace

namespace cuemu {
DeviceAccess::DeviceAccess() { if (g_depth++ == 0) protect(PROT_READ | PROT_WRITE); }
DeviceAccess::~DeviceAccess() { if (--g_depth == 0) protect(PROT_NONE); }
}  // namespace cuemu

cudaError_t cudaMalloc(void **p, size_t bytes) {
    *p = NULL;
    if (!arena_init()) return g_last_error = cudaErrorMemoryAllocation;
    /* CUEMU_CHECK_FREED: whole pages, so that a freed block can be made inaccessible alone */
    const size_t align = g_check_freed ? (size_t)sysconf(_SC_PAGESIZE) : ALIGN;
    const size_t rounded = bytes ? (bytes + align - 1) & ~(align - 1) : align;
    char *blk = NULL;
    auto f = g_free.find(rounded);
    if (!g_check_freed && f != g_free.end() && !f->second.empty()) {
        blk = f->second.back();
        f->second.pop_back();
    } else {
        if (rounded > ARENA_BYTES - g_used) return g_last_error = cudaErrorMemoryAllocation;
        blk = g_arena + g_used;
        g_used += rounded;
        if (g_guard && g_depth > 0 && mprotect(blk, rounded, PROT_READ | PROT_WRITE) != 0) {
            perror("cuemu: mprotect of the device arena");
            abort();
        }
    }
    g_live[blk] = rounded;
    {
        cuemu::DeviceAccess dev;   /* (a new block past the old end is covered: g_used already moved) */
        memset(blk, 0xff, rounded);
    }
    *p = blk;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    auto it = g_live.find((char *)p);
    if (it == g_live.end()) {
        fprintf(stderr, "cuemu: cudaFree(%p): not a block from cudaMalloc (or freed twice)\n", p);
        return g_last_error = cudaErrorInvalidValue;
    }
    /* the pages wholly inside the block go back (a page it shares with a neighbour must not: madvise
     * works on whole pages, and dropping a shared one zeroes the neighbour's bytes) */
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = ((uintptr_t)it->first + page - 1) & ~(page - 1),
                    hi = ((uintptr_t)it->first + it->second) & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    if (g_check_freed) {                             /* never reused, inaccessible from now on */
        mprotect(it->first, it->second, PROT_NONE);
        g_dead[it->first] = it->second;
    } else {
        g_free[it->second].push_back(it->first);
    }
    g_live.erase(it);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *f, size_t *t) { *f = (size_t)8 << 30; *t = (size_t)8 << 30; return cudaSuccess; }

/* For tests/cuemu/test_cuemu_checks.cpp: whether p lies in the device arena. */
extern "C" int cuemu_is_device_memory(const void *p) {
    return g_arena && (const char *)p >= g_arena && (const char *)p < g_arena + ARENA_BYTES;
}
