/* The host RoPE tables shared by every backend (the math: kernels/rope_table.h):
 * rope_table [positions, r/2, 2] = (cos, sin) of p * theta^(-2i/r), the angle in double, and
 * entry_rope_table, the rows o_{b,g} - o_base + jS of it for entry j of KV head g of sequence b on a window grid. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/rope_table.h"
#include "kernels/visibility.h"

float *rope_table(int positions, int r, double theta) {
    int half = r / 2;
    float *t = malloc(sizeof(float) * 2 * (size_t)(positions > 0 ? positions : 1) * (half > 0 ? half : 1));
    if (!t) return NULL;
    for (int p = 0; p < positions; p++)
        for (int i = 0; i < half; i++) {
            double inv_freq = pow(theta, -2.0 * i / r);
            double ang = p * inv_freq;
            t[((size_t)p * half + i) * 2] = (float)cos(ang);
            t[((size_t)p * half + i) * 2 + 1] = (float)sin(ang);
        }
    return t;
}

float *entry_rope_table(const float *tab, int positions, int r, int n_windows, int G, int S, const int *head_stride,
                        int grid, int base, const int32_t *shift, int B) {
    const size_t row = (size_t)(r / 2) * 2;              /* floats per position */
    const size_t rows = (size_t)(B > 0 ? B : 1) * (n_windows > 0 ? n_windows : 1) * G;
    float *t = calloc(rows * (row > 0 ? row : 1), sizeof(float));
    if (!t) return NULL;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < n_windows; j++)
            for (int g = 0; g < G; g++) {
                const int Sg = vis_head_stride(head_stride, g, S);
                const long long pos = vis_entry_position(j, Sg, vis_entry_offset(grid, g, Sg, G, base, shift ? shift[b] : 0), base);
                if (pos >= 0 && pos < positions)
                    memcpy(t + (((size_t)b * n_windows + j) * G + g) * row, tab + (size_t)pos * row, sizeof(float) * row);
            }
    return t;
}
