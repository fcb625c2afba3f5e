/* Tests of the probe's fold by chunk phase (trainer/chunk_phase.c, docs/spec.md §6.5 "Phase
 * fold"): the phase of a token from boundary rows worked out by hand, the identity with t mod S
 * on an aligned W = S chunking, the unpooled bin, the counts, the Wilson intervals against a
 * value computed here, and the homogeneity test over the pooled bins only. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/check.h"
#include "trainer/chunk_phase.h"

int main(void) {
    /* Row of 12 tokens, W = 4: boundaries at 1, 5, 6, 9 -> chunks 0-1, 2-5, 6, 7-9, tail 10-11.
     * By hand: slot = W - 1 - (end - t). */
    const unsigned char bd[12] = {0, 1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0};
    const int want[12] = {2, 3, 0, 1, 2, 3, 3, 1, 2, 3, 4, 4};
    int bad = 0;
    for (int t = 0; t < 12; t++) bad += chunk_phase_of(bd, 12, t, 4) != want[t];
    check(!bad, "chunk_phase_hand_row", "%d of 12 positions differ from the hand-worked slots", bad);

    /* Aligned W = S = 8 chunking (a boundary at every t = 7 mod 8): the phase is t mod 8. */
    unsigned char grid[64];
    for (int t = 0; t < 64; t++) grid[t] = t % 8 == 7;
    bad = 0;
    for (int t = 0; t < 64; t++) bad += chunk_phase_of(grid, 64, t, 8) != t % 8;
    check(!bad, "chunk_phase_aligned_grid_is_t_mod_S", "%d positions differ from t mod 8", bad);

    /* No boundary at all: every token is unpooled (bin W), even where a window's worth follows. */
    unsigned char none[10] = {0};
    bad = 0;
    for (int t = 0; t < 10; t++) bad += chunk_phase_of(none, 10, t, 4) != 4;
    check(!bad, "chunk_phase_no_boundary_unpooled", "%d positions not in the unpooled bin", bad);

    /* Counts: protocol 1, layer 1 of 2, W = 4; prompts with keys at t = 0 (slot 2, right),
     * 4 (slot 2, wrong), 5 (slot 3, right), 10 (unpooled, right). */
    ChunkPhaseCounts c;
    if (chunk_phase_init(&c, 2, 2, 4)) { check(0, "chunk_phase_init", "out of memory"); return check_exit_code(); }
    chunk_phase_add(&c, 1, 1, bd, 12, 0, 1);
    chunk_phase_add(&c, 1, 1, bd, 12, 4, 0);
    chunk_phase_add(&c, 1, 1, bd, 12, 5, 1);
    chunk_phase_add(&c, 1, 1, bd, 12, 10, 1);
    long tot = 0;
    for (long i = 0; i < 2L * 2 * 5; i++) tot += c.total[i];
    const long i2 = chunk_phase_index(&c, 1, 1, 2), i3 = chunk_phase_index(&c, 1, 1, 3), i4 = chunk_phase_index(&c, 1, 1, 4);
    check(tot == 4 && c.total[i2] == 2 && c.correct[i2] == 1 && c.total[i3] == 1 && c.correct[i3] == 1 &&
              c.total[i4] == 1 && c.correct[i4] == 1,
          "chunk_phase_counts", "total %ld; slot 2: %ld/%ld, slot 3: %ld/%ld, unpooled %ld/%ld", tot, c.correct[i2],
          c.total[i2], c.correct[i3], c.total[i3], c.correct[i4], c.total[i4]);
    chunk_phase_finalize(&c);
    /* Wilson 95% for 1 of 2, by hand: z = 1.96, centre = (0.5 + z^2/4) / (1 + z^2/2),
     * half = z sqrt(0.25/2 + z^2/16) / (1 + z^2/2). */
    const double z = 1.959963984540054, den = 1 + z * z / 2;
    const double centre = (0.5 + z * z / 4) / den, half = z * sqrt(0.125 + z * z / 16) / den;
    check(fabs(c.acc[i2] - 50.0) < 1e-12 && fabs(c.lo[i2] - 100 * (centre - half)) < 1e-9 &&
              fabs(c.hi[i2] - 100 * (centre + half)) < 1e-9,
          "chunk_phase_wilson", "acc %.6f lo %.6f hi %.6f, expected 50, %.6f, %.6f", c.acc[i2], c.lo[i2], c.hi[i2],
          100 * (centre - half), 100 * (centre + half));
    check(isnan(c.acc[chunk_phase_index(&c, 0, 0, 0)]), "chunk_phase_empty_bin_nan", "an empty bin gave %g",
          c.acc[chunk_phase_index(&c, 0, 0, 0)]);
    /* The test runs over the pooled bins 0..W-1 only: slots 2 (1/2) and 3 (1/1): two groups, df 1;
     * the unpooled prompt is not in it. */
    const ChiSquare *ts = &c.test[1 * 2 + 1];
    check(ts->df == 1, "chunk_phase_test_pooled_bins_only", "df %d, expected 1 (two pooled bins with prompts)", ts->df);
    check(c.test[0].df == 0 && isnan(c.test[0].p), "chunk_phase_test_empty_undefined", "df %d p %g", c.test[0].df,
          c.test[0].p);
    chunk_phase_free(&c);
    return check_exit_code();
}
