/* The model summary of `./train --dry-run` and `--summary`: tensor table, exact parameter count,
 * FLOPs per token at the configured sequence length, the memory plan (per rank) and the step's
 * work per op; and the FLOP rate --dry-run's wall-time estimate assumes. */
#ifndef PHASELAB_SUMMARY_H
#define PHASELAB_SUMMARY_H
#include <stdio.h>
#include "trainer/run_config.h"
int print_model_summary(FILE *f, const Config *cfg, int world, char *err);
/* The step's work per op (the end of print_model_summary): one micro-batch's forward and
 * backward (micro_batch x seq_len) and the optimizer step run through the timing wrapper
 * (kernels/backend_profile.h) on a backend whose ops do nothing (backend_counting_nop), so the
 * rows are the model's own calls with their own shapes, counted by the wrapper's formulas: calls,
 * GFLOP, GB (bf16 activations: the CUDA backend's least traffic) and FLOP/byte per op, the
 * matmuls grouped by projection (q|k|v, o, MLP gate/up, down; fwd and bwd). The same op names
 * and formulas as a device run's per-op table (`bench_cuda` with BENCH_PROFILE=1), so each op's
 * time there compares with its roofline: max(FLOP / peak, bytes / bandwidth). */
int print_step_work(FILE *f, const Config *cfg, int world, char *err);

struct Backend;
/* The FLOP rate assumed for a training step on be: one matmul of the step's own MLP shape
 * ([micro_batch * seq_len, d_model] x [d_model, d_ff], each dimension capped to keep it under
 * a second) timed on the backend, best of 3, times the share of that rate a whole training step
 * reaches (CPU: 0.6, docs/performance.md measures 48-89% of the step's own GEMM rate; CUDA: 0.4,
 * an assumption). Writes what was timed and assumed into how; returns 0 when nothing could be
 * timed (how says why). */
double step_rate_estimate(const struct Backend *be, const Config *cfg, char *how, size_t len);
#endif
