/* `./train --bench [--profile] [--case all|demo|vocab|probe]`: training-step throughput of the CPU
 * backend on the demo-sized model (demo: six variants), on the real-vocabulary tiny shape (vocab:
 * d_model 128, vocabulary 151,936, T 256, 4 sequences a step) and the probe evaluation's rate
 * (probe); with profile, each case's per-op table (kernels/backend_profile.h) after its timed steps. */
#ifndef PHASELAB_BENCH_H
#define PHASELAB_BENCH_H
int run_bench(int threads, int steps, int profile, const char *cases);
#endif
