/* SplitMix64 (Steele, Lea, Flood 2014): the 64-bit generator of every bootstrap here (a fixed seed
 * gives the same draws on every machine). state advances by the golden-ratio increment; the output
 * is the state mixed by two multiply-xorshift rounds. */
#ifndef PHASELAB_SPLITMIX_H
#define PHASELAB_SPLITMIX_H
#include <stdint.h>
static inline uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}
#endif
