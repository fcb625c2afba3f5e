/* Phase jitter (docs/spec.md §6.2): the per-sequence grid shift u of a training sequence, drawn
 * from the run's seed and the sequence's global sample index g (its place in the data stream,
 * the same on every world size and micro-batch split), so a resumed run draws the same shifts:
 *     z = splitmix64(seed + 0x9E3779B97F4A7C15 * (g + 1))      (unsigned 64-bit arithmetic)
 *     u = z mod P                                              in [0, P)
 * P = S, or with multi-rate strides the lcm of the KV heads' strides (model_grid_shift_period);
 * KV head g's grid then moves by u mod S_g.
 * splitmix64(x): x += 0x9E3779B97F4A7C15; z = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9;
 *                z = (z ^ (z >> 27)) * 0x94D049BB133111EB; return z ^ (z >> 31).
 * Evaluation never shifts (u = 0). */
#ifndef PHASELAB_PHASE_JITTER_H
#define PHASELAB_PHASE_JITTER_H
#include <stdint.h>

/* u in [0, P) for sample g of a run with seed `seed`; P >= 1. */
int phase_jitter_shift(uint64_t seed, uint64_t g, int P);
#endif
