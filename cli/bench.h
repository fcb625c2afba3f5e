/* `./train --bench`: training-step throughput of the CPU backend on the demo-sized model. */
#ifndef PHASELAB_BENCH_H
#define PHASELAB_BENCH_H
int run_bench(int threads, int steps);
#endif
