/* `./train --bench [--profile]`: training-step throughput of the CPU backend on the demo-sized
 * model; with profile, each case's per-op table (kernels/backend_profile.h) after its timed steps. */
#ifndef PHASELAB_BENCH_H
#define PHASELAB_BENCH_H
int run_bench(int threads, int steps, int profile);
#endif
