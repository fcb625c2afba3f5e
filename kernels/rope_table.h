/* The RoPE tables, host helpers every backend's caller uses (model/model.c, model/decode.c, the
 * parity tests): the tables are computed once on the host and uploaded, and the rope op of
 * kernels/ops.def reads them on any backend.
 *
 * Rotate-half RoPE on the LAST r dims of a head of d dims (r even, 0 <= r <= d): with u = d - r,
 * the pair (x[u+i], x[u+i+r/2]), i < r/2, at position p rotates by the angle p w_i,
 *     w_i = theta^(-2i/r),
 *     x1' = x1 cos(p w_i) - x2 sin(p w_i),   x2' = x2 cos(p w_i) + x1 sin(p w_i);
 * dims 0..u-1 pass through (docs/spec.md §1.3).
 *
 * rope_table(positions, r, theta) = tab [positions, r/2, 2]: tab[p][i] = (cos(p w_i), sin(p w_i)),
 * the angle p * w_i computed in double, each value rounded to fp32.
 * entry_rope_table: the table of a compressor's entries on a window grid (docs/spec.md §2b.2, §6.1):
 * entry j of KV head g in sequence b sits at o_{b,g} - o_base + jS = o_g + u_b + jS (o_{b,g} = o_base +
 * o_g + u_b, vis_entry_offset; vis_entry_position, kernels/visibility.h: the static offset moves no
 * rotation), so row (b*n_windows + j)*G + g of the result [B * n_windows * G, r/2, 2] is that row
 * of tab; rows outside [0, positions) (a head's missing last window) are 0.
 * shift = NULL: u_b = 0 (then every sequence's rows are the same and B = 1 suffices).
 * head_stride [G]: S_g per KV head (multi-rate strides, docs/spec.md §6.4: entry j of head g sits at
 * o_{b,g} - o_base + j S_g), or NULL: every head S. */
#ifndef PHASELAB_ROPE_TABLE_H
#define PHASELAB_ROPE_TABLE_H
#include <stdint.h>

/* tab [positions, r/2, 2] (cos, sin), host memory; malloc'd, caller frees; NULL when out of memory */
float *rope_table(int positions, int r, double theta);
/* [B * n_windows * G, r/2, 2] from tab [positions, r/2, 2] for grid GRID_* with stride S, static
 * offset base and per-sequence shifts shift [B] (host memory, or NULL); malloc'd, caller frees;
 * NULL when out of memory */
float *entry_rope_table(const float *tab, int positions, int r, int n_windows, int G, int S, const int *head_stride,
                        int grid, int base, const int32_t *shift, int B);
#endif
