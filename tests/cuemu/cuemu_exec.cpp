/* cuemu: kernel launches — blocks in order, the threads of a block as coroutines (ucontext),
 * barriers and warp collectives (see include/cuemu.h for the model and the checks).
 *
 * Context switches: on x86-64 a 16-instruction switch of the callee-saved registers and the
 * stack pointer (cuemu_switch below; ucontext's swapcontext makes a system call per switch and
 * was 3x slower); elsewhere ucontext.
 *
 * AddressSanitizer (make test-asan): every switch is announced with the sanitizer fiber API
 * (__sanitizer_start_switch_fiber before, __sanitizer_finish_switch_fiber after, see
 * san_switch_begin/san_switch_end), so ASan knows which stack is current and does not take
 * the coroutine stacks for wild writes; a coroutine's stack is 1 MiB there (redzones make
 * frames larger), and the top of a reused stack is unpoisoned before a new thread starts on
 * it (the frame of a finished thread's thread_entry never returns, so its redzones stay).
 *
 * Scheduling of one block: see run_block. A warp split between barriers, or a warp barrier
 * with an exited lane under a full mask, is reported and the program stops. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>
#include <map>
#include <string>
#include <vector>
#include "cuda_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUEMU_ASAN 1
#endif
#endif
#ifdef CUEMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace cuemu {
Thread *g_cur;
uint3 g_block_idx;
dim3 g_block_dim, g_grid_dim;
uint64_t g_warp_slots[32][32];

#ifdef CUEMU_ASAN
static const size_t STACK_BYTES = 1024 * 1024;
#else
static const size_t STACK_BYTES = 256 * 1024;
#endif
static const size_t SMEM_DEFAULT_MAX = 48 * 1024, SMEM_HW_MAX = 227 * 1024;

#if defined(__x86_64__)
/* Saves rbp rbx r12-r15, mxcsr and the x87 control word on the current stack, stores the stack
 * pointer in *from, switches to the stack `to` and restores the same from there. */
extern "C" void cuemu_switch(void **from, void *to);
asm(".text\n.globl cuemu_switch\n.type cuemu_switch,@function\ncuemu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
    ".size cuemu_switch, .-cuemu_switch\n");
#define CUEMU_ASM_SWITCH 1
#endif

struct Coroutine {
#ifdef CUEMU_ASM_SWITCH
    void *sp;
#else
    ucontext_t ctx;
#endif
    char *stack;
};
static std::vector<Thread> g_threads;
static std::vector<Coroutine> g_coros;
/* The stacks live as long as the process; freed at exit (before g_coros goes) so that
 * LeakSanitizer does not report them. */
static struct StackReaper {
    ~StackReaper() {
        for (Coroutine &c : g_coros) free(c.stack);
        g_coros.clear();
    }
} g_stack_reaper;
#ifdef CUEMU_ASM_SWITCH
static void *g_sched_sp;
#else
static ucontext_t g_sched;
#endif
/* the scheduler's stack, as ASan knows it (learnt by the first coroutine that starts) */
static const void *g_sched_stack_bottom;
static size_t g_sched_stack_size;
static const char *g_kernel_name;
static void (*g_body)(void *);
static void *g_body_ctx;
static unsigned char *g_smem;
static size_t g_smem_cap, g_smem_bytes;
static std::map<const void *, int> g_max_dyn_smem;
extern cudaError_t g_last_error;

void fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuemu: ");
    if (g_kernel_name && g_cur)
        fprintf(stderr, "kernel %s, block (%u,%u,%u), thread (%u,%u,%u): ", g_kernel_name, g_block_idx.x, g_block_idx.y,
                g_block_idx.z, g_cur->tid.x, g_cur->tid.y, g_cur->tid.z);
    else if (g_kernel_name)
        fprintf(stderr, "kernel %s, block (%u,%u,%u): ", g_kernel_name, g_block_idx.x, g_block_idx.y, g_block_idx.z);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    abort();
}

cudaError_t set_func_attr(const void *fn, cudaFuncAttribute a, int v) {
    if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (v < 0 || (size_t)v > SMEM_HW_MAX) return cudaErrorInvalidValue;
        g_max_dyn_smem[fn] = v;
    }
    return cudaSuccess;
}

void *dynamic_smem() { return g_smem; }

/* Brackets one stack switch for ASan: begin names the stack about to run (fake_save NULL: the
 * current coroutine ends for good), end runs on the new stack and may report the bounds of
 * the one left behind. No-ops without ASan. */
static inline void san_switch_begin(void **fake_save, const void *bottom, size_t size) {
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(fake_save, bottom, size);
#else
    (void)fake_save; (void)bottom; (void)size;
#endif
}
static inline void san_switch_end(void *fake_save, const void **old_bottom, size_t *old_size) {
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(fake_save, old_bottom, old_size);
#else
    (void)fake_save; (void)old_bottom; (void)old_size;
#endif
}

static void yield_to_scheduler() {
    Thread *t = g_cur;
    void *fake_save = NULL;
    san_switch_begin(&fake_save, g_sched_stack_bottom, g_sched_stack_size);
#ifdef CUEMU_ASM_SWITCH
    cuemu_switch(&g_coros[t->linear].sp, g_sched_sp);
#else
    swapcontext(&g_coros[t->linear].ctx, &g_sched);
#endif
    san_switch_end(fake_save, NULL, NULL);
    g_cur = t;
}

void syncthreads() {
    g_cur->state = WAIT_BLOCK;
    yield_to_scheduler();
}

void syncwarp(unsigned mask) {
    g_cur->warp_mask = mask;
    g_cur->state = WAIT_WARP;
    yield_to_scheduler();
}

static void thread_entry() {
    san_switch_end(NULL, &g_sched_stack_bottom, &g_sched_stack_size);  /* first run on this stack */
    g_body(g_body_ctx);
    g_cur->state = DONE;
    san_switch_begin(NULL, g_sched_stack_bottom, g_sched_stack_size);   /* this coroutine ends */
#ifdef CUEMU_ASM_SWITCH
    void *dead;
    cuemu_switch(&dead, g_sched_sp);  /* never resumed */
    __builtin_unreachable();
#endif
    /* ucontext: returning switches to uc_link (the scheduler) */
}

/* prepares coroutine c to start in thread_entry at its next resume */
static void coro_start(Coroutine &c) {
#ifdef CUEMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(c.stack + STACK_BYTES - 16384, 16384);
#endif
#ifdef CUEMU_ASM_SWITCH
    uintptr_t top = ((uintptr_t)c.stack + STACK_BYTES) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 72);          /* sp = 8 mod 16: thread_entry starts as if called */
    uint32_t csr[2];
    asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
    memcpy(&sp[0], csr, 8);                          /* mxcsr, x87 control word */
    for (int i = 1; i <= 6; i++) sp[i] = 0;          /* r15 r14 r13 r12 rbx rbp */
    sp[7] = (uint64_t)(uintptr_t)thread_entry;       /* return address of cuemu_switch */
    c.sp = sp;
#else
    getcontext(&c.ctx);
    c.ctx.uc_stack.ss_sp = c.stack;
    c.ctx.uc_stack.ss_size = STACK_BYTES;
    c.ctx.uc_link = &g_sched;
    makecontext(&c.ctx, thread_entry, 0);
#endif
}

static void resume(int i) {
    void *fake_save = NULL;
    san_switch_begin(&fake_save, g_coros[i].stack, STACK_BYTES);
#ifdef CUEMU_ASM_SWITCH
    cuemu_switch(&g_sched_sp, g_coros[i].sp);
#else
    swapcontext(&g_sched, &g_coros[i].ctx);
#endif
    san_switch_end(fake_save, NULL, NULL);
}

/* Runs one block. Warps run one at a time, each as far as it can go on its own (through its warp
 * barriers) until it waits at __syncthreads or exits; warp order alternates between ascending
 * and descending from one __syncthreads phase to the next. This is as adversarial as a GPU's
 * scheduler may legally be: a warp that overwrites shared memory other warps still need without
 * a __syncthreads in between clobbers it here, so a missing block barrier shows up as a wrong
 * result; lanes running one after another do the same for a missing __syncwarp. */
static void run_block(int n) {
    for (int i = 0; i < n; i++) {
        g_threads[i].state = RUNNABLE;
        coro_start(g_coros[i]);
    }
    int n_warps = (n + 31) / 32;
    for (int phase = 0;; phase++) {
        for (int wi = 0; wi < n_warps; wi++) {
            int w = phase % 2 ? n_warps - 1 - wi : wi;
            int lo = w * 32, hi = lo + 32 < n ? lo + 32 : n;
            for (;;) {
                for (int i = lo; i < hi; i++) {
                    if (g_threads[i].state != RUNNABLE) continue;
                    g_cur = &g_threads[i];
                    resume(i);
                }
                g_cur = NULL;
                int at_warp = 0, at_block = 0;
                unsigned mask_union = 0;
                for (int i = lo; i < hi; i++) {
                    if (g_threads[i].state == WAIT_WARP) { at_warp++; mask_union |= g_threads[i].warp_mask; }
                    if (g_threads[i].state == WAIT_BLOCK) at_block++;
                }
                if (at_warp == 0) break;  /* the warp waits at __syncthreads or has exited */
                if (at_block)
                    fatal("warp %d is split: %d lanes wait at __syncthreads, %d at a warp barrier (block (%u,%u,%u) of "
                          "kernel %s)", w, at_block, at_warp, g_block_idx.x, g_block_idx.y, g_block_idx.z, g_kernel_name);
                for (int i = lo; i < lo + 32; i++) {
                    bool in_mask = (mask_union >> (i - lo)) & 1u;
                    if (in_mask && (i >= hi || g_threads[i].state == DONE))
                        fatal("warp collective (mask 0x%08x) in warp %d of block (%u,%u,%u) of kernel %s, but lane %d %s",
                              mask_union, w, g_block_idx.x, g_block_idx.y, g_block_idx.z, g_kernel_name, i - lo,
                              i >= hi ? "does not exist (blockDim not a multiple of 32)" : "has exited");
                }
                for (int i = lo; i < hi; i++)
                    if (g_threads[i].state == WAIT_WARP) g_threads[i].state = RUNNABLE;
            }
        }
        int live = 0, at_block = 0;
        for (int i = 0; i < n; i++) {
            live += g_threads[i].state != DONE;
            at_block += g_threads[i].state == WAIT_BLOCK;
        }
        if (live == 0) return;
        if (at_block != live) fatal("internal: %d live threads, %d at __syncthreads", live, at_block);
        for (int i = 0; i < n; i++)
            if (g_threads[i].state == WAIT_BLOCK) g_threads[i].state = RUNNABLE;
    }
}

/* valid launches per kernel name (cuemu_launch_count) */
static std::map<std::string, long> g_launches;
/* warp-level wmma::mma_sync calls per kernel name (counted by lane 0 of each warp) */
static std::map<std::string, long> g_mmas;
static long *g_mma_counter;
void count_mma() {
    if (g_mma_counter) ++*g_mma_counter;
}

void run_grid(const char *name, const void *fn, dim3 grid, dim3 block, size_t smem, void (*body)(void *), void *ctx) {
    unsigned long long nthreads = (unsigned long long)block.x * block.y * block.z;
    const char *bad = NULL;
    if (nthreads == 0 || nthreads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64) bad = "block size";
    else if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) bad = "grid size";
    if (bad) {
        fprintf(stderr, "cuemu: launch of %s: invalid %s: grid (%u,%u,%u) block (%u,%u,%u)\n", name, bad, grid.x, grid.y,
                grid.z, block.x, block.y, block.z);
        g_last_error = cudaErrorInvalidConfiguration;
        return;
    }
    size_t smem_max = SMEM_DEFAULT_MAX;
    auto it = g_max_dyn_smem.find(fn);
    if (it != g_max_dyn_smem.end()) smem_max = (size_t)it->second;
    if (smem > smem_max) {
        fprintf(stderr, "cuemu: launch of %s: %zu bytes of dynamic shared memory, above the kernel's limit of %zu "
                "(cudaFuncSetAttribute MaxDynamicSharedMemorySize)\n", name, smem, smem_max);
        g_last_error = cudaErrorInvalidValue;
        return;
    }
    g_launches[name]++;
    g_mma_counter = &g_mmas[name];
    DeviceAccess dev;   /* the kernel reads and writes device memory (cuemu_memory.cpp) */
    if (g_smem_cap < smem) {
        free(g_smem);
        g_smem_cap = smem;
        g_smem = (unsigned char *)aligned_alloc(256, (smem + 255) & ~(size_t)255);
    }
    g_smem_bytes = smem;
    if (g_coros.size() < nthreads) {
        size_t old = g_coros.size();
        g_coros.resize(nthreads);
        g_threads.resize(nthreads);
        for (size_t i = old; i < nthreads; i++) g_coros[i].stack = (char *)malloc(STACK_BYTES);
    }
    g_kernel_name = name;
    g_body = body;
    g_body_ctx = ctx;
    g_block_dim = block;
    g_grid_dim = grid;
    int n = (int)nthreads;
    for (int i = 0; i < n; i++) {
        Thread &t = g_threads[i];
        t.linear = i;
        t.tid = uint3{(unsigned)(i % block.x), (unsigned)((i / block.x) % block.y), (unsigned)(i / (block.x * block.y))};
        t.warp = i / 32;
        t.lane = i % 32;
    }
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                g_block_idx = uint3{bx, by, bz};
                if (smem) memset(g_smem, 0xff, smem);
                run_block(n);
            }
    g_kernel_name = NULL;
}
}  // namespace cuemu

/* the sum of the counts of the kernels whose name starts with prefix */
static long count_by_prefix(const std::map<std::string, long> &counts, const char *prefix) {
    long n = 0;
    size_t len = strlen(prefix);
    for (const auto &e : counts)
        if (e.first.compare(0, len, prefix) == 0) n += e.second;
    return n;
}

/* warp-level mma_sync calls so far in the kernels whose name starts with name */
extern "C" long cuemu_mma_count(const char *name) { return count_by_prefix(cuemu::g_mmas, name); }

/* launches so far of the kernels whose name starts with name */
extern "C" long cuemu_launch_count(const char *name) { return count_by_prefix(cuemu::g_launches, name); }
