/* KV-cache accounting (see analysis/cache_report.h). The measured column allocates the decoder's
 * cache on a counting backend (alloc returns a dummy pointer and adds the request to a total),
 * so it is exactly what decoder_create asks of a real backend, without the memory. */
#include <string.h>
#include "analysis/cache_report.h"
#include "model/decode.h"
#include "model/dims.h"
#include "model/layer_kinds.h"
#include "kernels/kernels.h"

static size_t measure(const ModelConfig *mc, long context, size_t elem_bytes) {
    Backend *counting = backend_counting(elem_bytes);
    if (!counting) return 0;
    size_t got = decode_cache_measure(mc, counting, context);
    size_t counted = backend_counted(counting);
    backend_counting_free(counting);
    return got == counted ? got : 0;
}

void cache_human_bytes(double bytes, char *out, int len) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (bytes >= 1024 && i < 4) { bytes /= 1024; i++; }
    snprintf(out, len, "%.2f %s", bytes, u[i]);
}

int print_cache_report(FILE *f, const ModelConfig *mc, const long *contexts, int n, size_t elem_bytes) {
    ModelConfig full = *mc;
    full.attention = ATTN_FULL;
    full.layer_attention[0] = 0;                 /* the full-attention control has no schedule */
    const int compressed = mc->attention == ATTN_COMPRESSED && !mc->layer_attention[0];
    int mismatch = 0;
    fprintf(f, "KV cache for incremental decoding, %s elements (%d layers, %d KV heads x head_dim %d",
            elem_bytes == 2 ? "bf16 (CUDA backend)" : "fp32 (CPU backend)", mc->n_layers, mc->n_kv_heads, mc->head_dim);
    if (compressed)
        fprintf(f, "; W%d/S%d, %s; entries + raw %s + last W inputs", mc->window, mc->stride,
                dims_of(mc, 0).tied_kv ? "tied K/V" : "K and V entries", config_local_names[mc->local]);
    fprintf(f, "):\n");
    fprintf(f, "  %9s  %-44s %-12s | %-12s %-12s | %s\n", "context",
            compressed ? "this model per layer (entries+raw+inputs)" : "this model per layer", "all layers",
            "full / layer", "all layers", "full / this");
    for (int i = 0; i < n; i++) {
        DecodeCacheLayout a, b;
        decode_cache_layout(mc, contexts[i], elem_bytes, &a);
        decode_cache_layout(&full, contexts[i], elem_bytes, &b);
        size_t ma = measure(mc, contexts[i], elem_bytes), mb = measure(&full, contexts[i], elem_bytes);
        int ok = ma == a.total_bytes && mb == b.total_bytes;
        mismatch |= !ok;
        char pl[32], e[32], r[32], in[32], tot[32], fpl[32], ft[32], per[160];
        cache_human_bytes((double)a.layer_bytes, pl, 32);
        cache_human_bytes((double)a.entry_bytes, e, 32);
        cache_human_bytes((double)a.raw_bytes, r, 32);
        cache_human_bytes((double)a.input_bytes, in, 32);
        cache_human_bytes((double)a.total_bytes, tot, 32);
        cache_human_bytes((double)b.layer_bytes, fpl, 32);
        cache_human_bytes((double)b.total_bytes, ft, 32);
        if (compressed) snprintf(per, sizeof per, "%s (%s+%s+%s)", pl, e, r, in);
        else snprintf(per, sizeof per, "%s", pl);
        fprintf(f, "  %9ld  %-44s %-12s | %-12s %-12s | %6.1fx%s\n", contexts[i], per, tot, fpl, ft,
                a.total_bytes ? (double)b.total_bytes / a.total_bytes : 0.0,
                ok ? "" : "  MEASURED != FORMULA");
    }
    if (n > 0 && mc->layer_attention[0]) {   /* docs/spec.md §5: the schedule's kinds, per layer, at each context */
        fprintf(f, "  layer schedule %s: \"this model per layer\" is its largest layer; by kind (per layer, bytes per token):\n",
                mc->layer_attention);
        for (int k = 0; k < N_KINDS; k++) {
            int first = -1, count = 0;
            for (int L = 0; L < mc->n_layers; L++) if (layer_kind(mc, L) == k) { if (first < 0) first = L; count++; }
            if (first < 0) continue;
            fprintf(f, "    %-10s x%-3d", layer_kind_names[k], count);
            for (int i = 0; i < n; i++) {
                DecodeCacheLayout l;
                char b[32];
                decode_cache_layout_layer(mc, first, contexts[i], elem_bytes, &l);
                cache_human_bytes((double)l.layer_bytes, b, 32);
                fprintf(f, "  %ld: %s (%.1f B/token)", contexts[i], b, (double)l.layer_bytes / contexts[i]);
            }
            fprintf(f, "\n");
        }
    }
    if (n > 0 && compressed && mc->grid == GRID_STAGGERED && mc->n_kv_heads > 1) {
        /* docs/spec.md §2b: KV head g's windows start at o_g, so it may have one window fewer than head 0;
         * the cache keeps head 0's count of slots for every head (the bytes above) */
        DecodeCacheLayout a;
        decode_cache_layout(mc, contexts[n - 1], elem_bytes, &a);
        fprintf(f, "  (grid = staggered: KV head g's windows start at floor(g*%d/%d); at %ld tokens the heads have %ld entries "
                "in %d x %d slots (a head with one window fewer leaves its last slot unused)%s)\n", mc->stride, mc->n_kv_heads,
                contexts[n - 1], a.head_entries, a.entry_cap, mc->n_kv_heads,
                mc->local == LOCAL_TAIL ? "; the tail ring holds the most raw tokens any head sees, max_g max(o_g + W - 1, S - 1)" : "");
    }
    if (elem_bytes == 2) fprintf(f, "  (the CPU backend stores fp32 activations: twice these figures)\n");
    fprintf(f, "  (every figure measured from the decoder's allocation calls on a counting backend %s the formula)\n",
            mismatch ? "DIFFERS FROM" : "equals");
    return mismatch ? -1 : 0;
}
