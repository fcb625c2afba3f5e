/* libFuzzer harness: the safetensors reader (model/safetensors.c, safetensors_read) as used to
 * load checkpoints (trainer/checkpoint.c).
 *
 * Input: a whole .safetensors file (u64 header length, JSON header, tensor data). It is read
 * against the tensor tables of two tiny models, one with full and one with compressed
 * attention, so both families of tensor names are reachable. Any sanitizer report or crash is
 * a finding; a rejected file is the normal outcome.
 *
 * FUZZ_WRITE_SEEDS=DIR: writes valid files for both tables (safetensors_write) to DIR and
 * exits (how tests/fuzz/corpus/safetensors/ was made). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trainer/run_config.h"
#include "common/errors.h"
#include "model/safetensors.h"
#include "model/tensors.h"
#include "tests/fuzz/fuzz_util.h"

static TensorTable tables[2];
static float *params[2];

static void build_table(int compressed, TensorTable *tt) {
    char *ov[] = {"model.d_model=8", "model.n_layers=1", "model.n_heads=2", "model.n_kv_heads=1",
                  "model.head_dim=4", "model.d_ff=8", "model.vocab_size=8",
                  compressed ? "model.attention=compressed" : "model.attention=full",
                  "model.window=2", "model.stride=2", "model.n_local=2", "data.seq_len=8",
                  "model.rope_dims=4"};
    Config cfg;
    char err[ERR_LEN];
    if (config_load(&cfg, NULL, (int)(sizeof ov / sizeof ov[0]), ov, err) != 0 ||
        tensor_table_build(tt, &cfg.model, err) != 0) {
        fprintf(stderr, "fuzz_safetensors: tiny model config: %s\n", err);
        abort();
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    for (int c = 0; c < 2; c++) {
        build_table(c, &tables[c]);
        params[c] = calloc(tables[c].n_floats, sizeof(float));
    }
    const char *seeds = getenv("FUZZ_WRITE_SEEDS");
    if (seeds) {
        for (int c = 0; c < 2; c++) {
            char path[1024], err[ERR_LEN];
            for (size_t i = 0; i < tables[c].n_floats; i++) params[c][i] = (float)i * 0.25f;
            snprintf(path, sizeof path, "%s/tiny_%s.safetensors", seeds, c ? "compressed" : "full");
            const char *meta[] = {"phaselab", "seed", NULL};
            if (safetensors_write(path, &tables[c], params[c], meta, err) != 0) {
                fprintf(stderr, "%s\n", err);
                exit(1);
            }
            printf("wrote %s (%d tensors)\n", path, tables[c].n);
        }
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("model.safetensors", data, size);
    char err[ERR_LEN];
    for (int c = 0; c < 2; c++) safetensors_read(path, &tables[c], params[c], err);
    return 0;
}
