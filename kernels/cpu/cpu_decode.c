/* Decode attention on the CPU: one query position t against a KV cache (model/decode.c).
 *
 * For head h (KV head g = h / (H/G)) the visible keys are, in this order (n_entries, raw_first,
 * n_raw of KV head g: decode_head_view, the visibility rule of that head's grid),
 *   compressed entries x = 0..n_entries-1      key ck[x, g], value cv[x, g]
 *   raw tokens x = 0..n_raw-1 of the ring      key k[(raw_first + x) % ring_cap, g], value v[...]
 * and, as in attention_fwd (kernels/cpu/cpu_attention.c):
 *   z_x = q_h . key_x / sqrt(d),   Z = exp(sink_h) + sum_x exp(z_x),   out_h = sum_x exp(z_x) value_x / Z
 * computed in fp32 with the maximum subtracted first. Heads are independent (one thread each). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_expf.h"

void cpu_attention_decode(BackendCtx *ctx, const DecodeAttnShape *s, act_t *out_, const act_t *q_, const act_t *ck_,
                          const act_t *cv_, const act_t *k_, const act_t *v_, const float *sink) {
    const int H = s->H, G = s->G, d = s->d, group = H / G;
    const float scale = 1.0f / sqrtf((float)d);
    float *out = F(out_);
    const float *q = CF(q_), *ck = CF(ck_), *cv = CF(cv_), *k = CF(k_), *v = CF(v_);
    int nk_max = 0;
    for (int g = 0; g < G; g++) {
        int ne, first, nr;
        decode_head_view(s, g, &ne, &first, &nr);
        if (ne + nr > nk_max) nk_max = ne + nr;
    }
    #pragma omp parallel for schedule(static) if (H * (size_t)nk_max * d > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (int h = 0; h < H; h++) {
        const int g = h / group;
        int ne, raw_first, nr;
        decode_head_view(s, g, &ne, &raw_first, &nr);
        const int nk = ne + nr;
        const float *qh = q + (size_t)h * d;
        float zbuf[256], *z = nk <= 256 ? zbuf : cpu_scratch(sizeof(float) * nk, "decode scores");   /* [nk] */
        float mx = sink ? sink[h] : -INFINITY;
        for (int x = 0; x < nk; x++) {
            const float *key = x < ne ? ck + ((size_t)x * G + g) * d
                                      : k + ((size_t)((raw_first + x - ne) % s->ring_cap) * G + g) * d;
            if (x < ne && s->entry_select && !s->entry_select[x]) { z[x] = -INFINITY; continue; }   /* not in the top-k */
            float dot = 0.0f;
            for (int i = 0; i < d; i++) dot += qh[i] * key[i];
            z[x] = dot * scale;
            if (z[x] > mx) mx = z[x];
        }
        float sum = sink ? cpu_expf(sink[h] - mx) : 0.0f;     /* the training forward's exp */
        cpu_exp_shifted(z, z, mx, nk);
        for (int x = 0; x < nk; x++) sum += z[x];
        float inv = 1.0f / sum, *oh = out + (size_t)h * d;
        memset(oh, 0, sizeof(float) * d);
        for (int x = 0; x < nk; x++) {
            const float *val = x < ne ? cv + ((size_t)x * G + g) * d
                                      : v + ((size_t)((raw_first + x - ne) % s->ring_cap) * G + g) * d;
            float p = z[x] * inv;
            for (int i = 0; i < d; i++) oh[i] += p * val[i];
        }
        if (z != zbuf) free(z);
    }
}
