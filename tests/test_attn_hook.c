/* The model's analysis hook (model_set_attn_hook): on a tiny compressed model with random
 * weights, the hook is called once per layer per forward with B rows of H*d values; an identity
 * hook leaves the output unchanged; the rows are taken before W_o: with W_o's columns of the
 * query heads of KV head 0 (layer 1) zeroed, scrambling those heads' z changes nothing, while
 * scrambling the other heads' z changes the predictions; and it acts only at the requested
 * position (a hook is only active inside model_argmax_at). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/model.h"
#include "tests/check.h"
#include "tests/model_testutil.h"

typedef struct { int calls, rows, width, scramble_lo, scramble_hi, layer; } HookCtx;

static void hook(void *ctx, int layer, float *z, int B, int H, int d) {
    HookCtx *h = ctx;
    h->calls++;
    h->rows = B, h->width = H * d;
    if (layer != h->layer) return;
    for (int b = 0; b < B; b++)
        for (int a = h->scramble_lo; a < h->scramble_hi; a++)
            for (int k = 0; k < d; k++) z[(size_t)b * H * d + a * d + k] = (float)(37.0 * ((a + k + b) % 5) - 70.0);
}

int main(void) {
    char err[ERR_LEN];
    ModelConfig c = tu_tiny_config();
    c.attention = ATTN_COMPRESSED;
    const int B = 6, T = 24;
    Model *m = model_create(&c, backend_cpu(1), B, T, err);
    if (!check(m != NULL, "model_create", "%s", err)) return 1;
    tu_random_params(m, 11, 0.5);
    int32_t tokens[6 * 24];
    tu_random_tokens(tokens, B * T, c.vocab_size, 5);
    int pos[6] = {23, 20, 17, 23, 9, 14};
    int32_t base[6], out[6];
    model_argmax_at(m, tokens, B, pos, base);

    HookCtx h = {0, 0, 0, 0, 0, -1};
    model_set_attn_hook(m, hook, &h);
    model_argmax_at(m, tokens, B, pos, out);
    check(h.calls == c.n_layers && h.rows == B && h.width == c.n_heads * c.head_dim, "hook called per layer with B rows of H*d",
          "calls %d rows %d width %d", h.calls, h.rows, h.width);
    check(!memcmp(out, base, sizeof out), "identity hook leaves the output unchanged", "");

    /* zero W_o columns [a*d, (a+1)*d) of the query heads a = 0, 1 (KV head 0) in layer 1 */
    const TensorTable *tt = model_tensors(m);
    int o = tensor_table_find(tt, "model.layers.1.self_attn.o_proj.weight");
    float *p = model_params(m) + tt->t[o].offset;
    int D = c.d_model, Hd = c.n_heads * c.head_dim;
    for (int r = 0; r < D; r++) for (int k = 0; k < 2 * c.head_dim; k++) p[(size_t)r * Hd + k] = 0.0f;
    model_params_updated(m);
    model_set_attn_hook(m, NULL, NULL);
    model_argmax_at(m, tokens, B, pos, base);
    h = (HookCtx){0, 0, 0, 0, 2, 1};
    model_set_attn_hook(m, hook, &h);
    model_argmax_at(m, tokens, B, pos, out);
    check(!memcmp(out, base, sizeof out), "scrambling heads whose W_o columns are zero changes nothing (z is before W_o)", "");
    h = (HookCtx){0, 0, 0, 2, 4, 1};
    model_argmax_at(m, tokens, B, pos, out);
    int changed = 0;
    for (int b = 0; b < B; b++) changed += out[b] != base[b];
    check(changed > 0, "scrambling the other KV head's query heads changes predictions", "no prediction changed");
    /* other positions are untouched: the logits at a position before the hooked one in the
     * same sequence are unchanged (the hook writes only row positions[b]) */
    int pos2[6] = {5, 5, 5, 5, 5, 5};
    model_set_attn_hook(m, NULL, NULL);
    model_argmax_at(m, tokens, B, pos2, base);
    model_set_attn_hook(m, hook, &h);
    double loss_hooked = model_forward(m, tokens, NULL, B, NULL);
    (void)loss_hooked;
    model_set_attn_hook(m, NULL, NULL);
    model_argmax_at(m, tokens, B, pos2, out);
    check(!memcmp(out, base, sizeof out), "the hook is inactive outside model_argmax_at", "");
    model_free(m);
    return check_exit_code();
}
