/* Phase jitter's per-sequence shift (the math: trainer/phase_jitter.h, docs/spec.md §6.2). */
#include "trainer/phase_jitter.h"

static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int phase_jitter_shift(uint64_t seed, uint64_t g, int P) {
    if (P <= 1) return 0;
    return (int)(mix64(seed + 0x9E3779B97F4A7C15ull * (g + 1)) % (uint64_t)P);
}
