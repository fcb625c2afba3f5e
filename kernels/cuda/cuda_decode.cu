/* Decode attention on the CUDA backend: one query position t against a KV cache (model/decode.c),
 * the same math as kernels/cpu/cpu_decode.c (n_entries, raw_first, n_raw of KV head g from
 * decode_head_view, the visibility rule of that head's grid):
 *   keys x = 0..n_entries-1: compressed entries ck[x, g] / cv[x, g];
 *   then x = n_entries..nk-1: raw ring slots (raw_first + x - n_entries) % ring_cap of k / v;
 *   z_x = q_h . key_x / sqrt(d),  Z = exp(sink_h) + sum_x exp(z_x),  out_h = sum_x exp(z_x) value_x / Z.
 *   An entry x with entry_select[x] == 0 (not in the lightning indexer's top-k, docs/spec.md §5.4) has z_x = -inf.
 * One block of DEC_THREADS threads per query head h (KV head g = h / (H/G)). The scores live in a
 * workspace [H, nk_max] (fp32; nk_max the most keys any head sees); max and sum are block-tree reductions of fixed shape and the output
 * dims are summed over x in index order by one thread each, so the result is deterministic.
 * Three phases separated by __syncthreads: scores + max, exp + sum, weighted values.
 * Multi-rate strides (docs/spec.md §6.4): decode_head_view reads head g's stride S_g from
 * s.head_stride, which the kernel gets as a device copy of the G strides (WS_DEC_HSTRIDE; NULL:
 * every head s.stride, no copy). */
#include <math.h>
#include "kernels/cuda/cuda_common.h"

#define DEC_THREADS 128

__global__ void __launch_bounds__(DEC_THREADS) attention_decode_kernel(DecodeAttnShape s, int nk_max, bf16 *out, const bf16 *q,
                                                                       const bf16 *ck, const bf16 *cv, const bf16 *k,
                                                                       const bf16 *v, const float *sink, float *zbuf) {
    CU_DYNAMIC_SMEM(smem);
    const int H = s.H, G = s.G, d = s.d, ring_cap = s.ring_cap;
    float *qs = (float *)smem;            /* [d] the query, fp32 */
    float *red = qs + d;                  /* [DEC_THREADS] reduction tree */
    const int h = blockIdx.x, tid = threadIdx.x, g = h / (H / G);
    int ne, raw_first, nr;
    decode_head_view(&s, g, &ne, &raw_first, &nr);
    const int nk = ne + nr;
    const float scale = 1.0f / sqrtf((float)d);
    for (int i = tid; i < d; i += DEC_THREADS) qs[i] = bf(q[(size_t)h * d + i]);
    __syncthreads();
    float *z = zbuf + (size_t)h * nk_max;
    float mx = -INFINITY;
    for (int x = tid; x < nk; x += DEC_THREADS) {
        const bf16 *key = x < ne ? ck + ((size_t)x * G + g) * d : k + ((size_t)((raw_first + x - ne) % ring_cap) * G + g) * d;
        float dot = 0.0f;
        for (int i = 0; i < d; i++) dot += qs[i] * bf(key[i]);
        dot *= scale;
        if (x < ne && s.entry_select && !s.entry_select[x]) dot = -INFINITY;   /* not in the indexer's top-k */
        z[x] = dot;
        mx = fmaxf(mx, dot);
    }
    red[tid] = mx;
    __syncthreads();
    for (int o = DEC_THREADS / 2; o > 0; o >>= 1) {
        if (tid < o) red[tid] = fmaxf(red[tid], red[tid + o]);
        __syncthreads();
    }
    mx = red[0];
    if (sink) mx = fmaxf(mx, sink[h]);
    __syncthreads();                      /* every thread has read red[0] before it is reused */
    float sum = 0.0f;
    for (int x = tid; x < nk; x += DEC_THREADS) {
        float p = expf(z[x] - mx);
        z[x] = p;
        sum += p;
    }
    red[tid] = sum;
    __syncthreads();
    for (int o = DEC_THREADS / 2; o > 0; o >>= 1) {
        if (tid < o) red[tid] += red[tid + o];
        __syncthreads();
    }
    const float inv = 1.0f / (red[0] + (sink ? expf(sink[h] - mx) : 0.0f));
    for (int i = tid; i < d; i += DEC_THREADS) {
        float acc = 0.0f;
        for (int x = 0; x < nk; x++) {
            const bf16 *val = x < ne ? cv + ((size_t)x * G + g) * d : v + ((size_t)((raw_first + x - ne) % ring_cap) * G + g) * d;
            acc += z[x] * bf(val[i]);
        }
        out[(size_t)h * d + i] = tobf(acc * inv);
    }
}

void cu_attention_decode(BackendCtx *ctx, const DecodeAttnShape *s, act_t *out, const act_t *q, const act_t *ck, const act_t *cv,
                         const act_t *k, const act_t *v, const float *sink) {
    int nk = 0;
    for (int g = 0; g < s->G; g++) {
        int ne, first, nr;
        decode_head_view(s, g, &ne, &first, &nr);
        if (ne + nr > nk) nk = ne + nr;
    }
    if (nk <= 0 || s->H <= 0) return;
    float *z = (float *)cu_workspace(ctx, WS_DEC, (size_t)s->H * nk * sizeof(float));
    size_t smem = (size_t)(s->d + DEC_THREADS) * sizeof(float);
    DecodeAttnShape ks = *s;   /* decode_head_view above read the host strides; the kernel reads the device copy */
    ks.head_stride = (const int *)cu_device_ints(ctx, WS_DEC_HSTRIDE, (const int32_t *)s->head_stride, s->G);
    if (s->entry_ends)      /* learned chunk boundaries (docs/spec.md §6.5); one int at least, so the copy is not NULL */
        ks.entry_ends = cu_device_ints(ctx, WS_DEC_ENDS, s->entry_ends, s->entry_count > 0 ? s->entry_count : 1);
    CU_KERNEL(attention_decode_kernel, s->H, DEC_THREADS, smem, ctx->stream)(
        ks, nk, (bf16 *)out, (const bf16 *)q,
        (const bf16 *)ck, (const bf16 *)cv, (const bf16 *)k, (const bf16 *)v, sink, z);
    CU_LAUNCH();
}
