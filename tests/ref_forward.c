/* Test tool: the C forward pass on given weights, for the independent NumPy reference
 * (tests/test_reference_model.py).
 *   build/tests/ref_forward CONFIG.ini WEIGHTS.safetensors TOKENS.i32 B T OUT.f32
 * reads the config, loads every parameter by name, reads B*T int32 tokens, and writes the
 * logits [B, T, V] as float32. With PHASELAB_REF_COVERAGE=PATH it also writes to PATH (text) the
 * gate-coverage penalty of docs/spec.md §2b without lambda, mean over the B sequences. */
#include <stdio.h>
#include <stdlib.h>
#include "kernels/kernels.h"
#include "trainer/run_config.h"
#include "common/errors.h"
#include "model/model.h"
#include "model/safetensors.h"


int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s CONFIG.ini WEIGHTS.safetensors TOKENS.i32 B T OUT.f32\n", argv[0]);
        return 2;
    }
    char err[ERR_LEN];
    Config cfg;
    if (config_load(&cfg, argv[1], 0, NULL, err)) { fprintf(stderr, "phaselab: %s\n", err); return 2; }
    int B = atoi(argv[4]), T = atoi(argv[5]);
    const Backend *be = backend_cpu(0);
    Model *m = model_create(&cfg.model, be, B, T, err);
    if (!m) { fprintf(stderr, "phaselab: %s\n", err); return 1; }
    const TensorTable *tt = model_tensors(m);
    if (safetensors_read(argv[2], tt, model_params(m), err)) { fprintf(stderr, "phaselab: %s\n", err); return 1; }
    model_params_updated(m);
    int32_t *tok = malloc(sizeof(int32_t) * B * T);
    FILE *f = fopen(argv[3], "rb");
    if (!f || fread(tok, 4, (size_t)B * T, f) != (size_t)B * T) { fprintf(stderr, "phaselab: %s: cannot read %d tokens\n", argv[3], B * T); return 1; }
    fclose(f);
    int D = cfg.model.d_model, V = cfg.model.vocab_size;
    float *hidden = malloc(sizeof(float) * (size_t)B * T * D);
    model_debug_final_hidden(m, tok, B, hidden);
    if (getenv("PHASELAB_REF_COVERAGE")) {
        FILE *cf = fopen(getenv("PHASELAB_REF_COVERAGE"), "w");
        if (!cf) { fprintf(stderr, "phaselab: %s: cannot create\n", getenv("PHASELAB_REF_COVERAGE")); return 1; }
        fprintf(cf, "%.17g\n", model_gate_coverage(m, B) / B);
        fclose(cf);
    }
    const float *E = model_params(m) + tt->t[tensor_table_find(tt, cfg.model.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight")].offset;
    FILE *o = fopen(argv[6], "wb");
    if (!o) { fprintf(stderr, "phaselab: %s: cannot create\n", argv[6]); return 1; }
    float *row = malloc(sizeof(float) * V);
    for (long n = 0; n < (long)B * T; n++) {
        for (int v = 0; v < V; v++) {
            double acc = 0;
            for (int k = 0; k < D; k++) acc += (double)hidden[n * D + k] * E[(size_t)v * D + k];
            row[v] = (float)acc;
        }
        fwrite(row, 4, V, o);
    }
    fclose(o);
    model_free(m);
    return 0;
}
