/* Attention on the CPU: full causal, or the paper's compressed attention (SPEC.md section 2).
 *
 * A query at position t (head h, KV head g = h / (H/G)) sees
 *   compressed entries j < nvis(t), nvis(t) = #{ j : jS + W - 1 <= t }  (none for full attention)
 *   raw tokens s in [lo(t), t]:  full: lo = 0;  window: lo = t - n_local + 1;
 *                                tail: lo = e_t + 1, e_t = (nvis-1)S + W - 1 (or -1)
 * One softmax over the union (entries first, then raw tokens), scale 1/sqrt(d), and with a
 * sink the denominator gains exp(sink_h):
 *   z_x = q . key_x / sqrt(d),   Z = exp(sink_h) + sum_x exp(z_x),   p_x = exp(z_x) / Z
 *   out = sum_x p_x value_x,     lse = log Z
 * Only visible entries are touched, so the cost per query is nvis + (t - lo + 1) dot products
 * (T*T/S + T*n_local in total for compressed attention).
 *
 * Backward (recomputing p from lse): with dp_x = dout . value_x and D = dout . out,
 *   dz_x = p_x (dp_x - D),  dq = sum_x dz_x key_x / sqrt(d),  dkey_x += dz_x q / sqrt(d),
 *   dvalue_x += p_x dout,   dsink_h += -p_sink D.
 * The backward is parallel over (sequence b, KV head g): every key/value gradient row of that
 * pair is owned by one thread, so there are no races and no order-dependent sums. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "kernels/cpu/cpu_internal.h"

/* The visible set of query t: *nvis compressed entries and raw tokens [*lo, t]. */
static inline void visible_range(const AttnShape *s, int t, int *nvis, int *lo) {
    int n = 0;
    if (s->n_windows > 0 && t >= s->window - 1) {
        n = (t - s->window + 1) / s->stride + 1;
        if (n > s->n_windows) n = s->n_windows;
    }
    *nvis = n;
    switch (s->visibility) {
    case VIS_WINDOW: *lo = t - s->n_local + 1; if (*lo < 0) *lo = 0; break;
    case VIS_TAIL:   *lo = n > 0 ? (n - 1) * s->stride + s->window : 0; break;
    default:         *lo = 0; break;
    }
}

static inline float dotf(const float *a, const float *b, int d) {
    float acc = 0.0f;
    #pragma omp simd reduction(+:acc)
    for (int i = 0; i < d; i++) acc += a[i] * b[i];
    return acc;
}

static inline void axpyf(float *y, float a, const float *x, int d) {
    #pragma omp simd
    for (int i = 0; i < d; i++) y[i] += a * x[i];
}

void cpu_attention_fwd(const AttnShape *s, act_t *out_, float *lse, const act_t *q_, const act_t *k_,
                       const act_t *v_, const act_t *ck_, const act_t *cv_, const float *sink) {
    const int B = s->B, T = s->T, H = s->H, G = s->G, d = s->d, nW = s->n_windows;
    const int group = H / G;
    const float scale = 1.0f / sqrtf((float)d);
    float *out = out_;
    const float *q = q_, *k = k_, *v = v_, *ck = ck_, *cv = cv_;
    #pragma omp parallel
    {
        float *z = malloc(sizeof(float) * (size_t)(nW + T + 1)); /* scores of one query */
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                int nvis, lo;
                visible_range(s, t, &nvis, &lo);
                for (int h = 0; h < H; h++) {
                    int g = h / group;
                    const float *qv = q + (((size_t)b * T + t) * H + h) * d;
                    int n = 0;
                    float mx = -INFINITY;
                    for (int j = 0; j < nvis; j++, n++) {
                        z[n] = dotf(qv, ck + (((size_t)b * nW + j) * G + g) * d, d) * scale;
                        if (z[n] > mx) mx = z[n];
                    }
                    for (int x = lo; x <= t; x++, n++) {
                        z[n] = dotf(qv, k + (((size_t)b * T + x) * G + g) * d, d) * scale;
                        if (z[n] > mx) mx = z[n];
                    }
                    if (sink && sink[h] > mx) mx = sink[h];
                    float sum = sink ? expf(sink[h] - mx) : 0.0f;
                    for (int i = 0; i < n; i++) { z[i] = expf(z[i] - mx); sum += z[i]; }
                    float inv = 1.0f / sum;
                    float *o = out + (((size_t)b * T + t) * H + h) * d;
                    memset(o, 0, sizeof(float) * d);
                    n = 0;
                    for (int j = 0; j < nvis; j++, n++)
                        axpyf(o, z[n] * inv, cv + (((size_t)b * nW + j) * G + g) * d, d);
                    for (int x = lo; x <= t; x++, n++)
                        axpyf(o, z[n] * inv, v + (((size_t)b * T + x) * G + g) * d, d);
                    lse[((size_t)b * T + t) * H + h] = mx + logf(sum);
                }
            }
        free(z);
    }
}

void cpu_attention_bwd(const AttnShape *s, act_t *dq_, act_t *dk_, act_t *dv_, act_t *dck_, act_t *dcv_,
                       float *dsink, const act_t *dout_, const act_t *out_, const float *lse,
                       const act_t *q_, const act_t *k_, const act_t *v_, const act_t *ck_,
                       const act_t *cv_, const float *sink) {
    const int B = s->B, T = s->T, H = s->H, G = s->G, d = s->d, nW = s->n_windows;
    const int group = H / G;
    const float scale = 1.0f / sqrtf((float)d);
    float *dq = dq_, *dk = dk_, *dv = dv_, *dck = dck_, *dcv = dcv_;
    const float *dout = dout_, *out = out_, *q = q_, *k = k_, *v = v_, *ck = ck_, *cv = cv_;
    memset(dk, 0, sizeof(float) * (size_t)B * T * G * d);
    memset(dv, 0, sizeof(float) * (size_t)B * T * G * d);
    if (nW > 0) {
        memset(dck, 0, sizeof(float) * (size_t)B * nW * G * d);
        memset(dcv, 0, sizeof(float) * (size_t)B * nW * G * d);
    }
    float *dsink_part = sink ? calloc((size_t)B * H, sizeof(float)) : NULL; /* [B, H] */
    #pragma omp parallel
    {
        float *p = malloc(sizeof(float) * (size_t)(nW + T + 1));
        #pragma omp for collapse(2) schedule(dynamic, 1)
        for (int b = 0; b < B; b++)
            for (int g = 0; g < G; g++)
                for (int t = 0; t < T; t++) {
                    int nvis, lo;
                    visible_range(s, t, &nvis, &lo);
                    for (int h = g * group; h < (g + 1) * group; h++) {
                        size_t row = ((size_t)b * T + t) * H + h;
                        const float *qv = q + row * d, *dov = dout + row * d, *ov = out + row * d;
                        float *dqv = dq + row * d;
                        float L = lse[row];
                        float D = dotf(dov, ov, d);
                        memset(dqv, 0, sizeof(float) * d);
                        int n = 0;
                        for (int j = 0; j < nvis; j++, n++) {
                            size_t e = (((size_t)b * nW + j) * G + g) * d;
                            float pj = expf(dotf(qv, ck + e, d) * scale - L);
                            float dz = pj * (dotf(dov, cv + e, d) - D) * scale;
                            axpyf(dqv, dz, ck + e, d);
                            axpyf(dck + e, dz, qv, d);
                            axpyf(dcv + e, pj, dov, d);
                        }
                        for (int x = lo; x <= t; x++, n++) {
                            size_t e = (((size_t)b * T + x) * G + g) * d;
                            float px = expf(dotf(qv, k + e, d) * scale - L);
                            float dz = px * (dotf(dov, v + e, d) - D) * scale;
                            axpyf(dqv, dz, k + e, d);
                            axpyf(dk + e, dz, qv, d);
                            axpyf(dv + e, px, dov, d);
                        }
                        if (sink) dsink_part[(size_t)b * H + h] -= expf(sink[h] - L) * D;
                    }
                }
        free(p);
    }
    if (sink) {
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) dsink[h] += dsink_part[(size_t)b * H + h];
        free(dsink_part);
    }
}
