/* Tests of the safetensors reader (model/safetensors.c): a file written by safetensors_write
 * reads back exactly; header entries whose shape or data_offsets are not in-range whole numbers
 * (1e300, -1, 4.5, strings, one offset, three) are rejected with an error naming the tensor,
 * never converted (regression: fuzz_safetensors, UBSan: a double outside the range of
 * uint64_t/int64_t converted). Scratch files live in build/scratch/test_safetensors_ranges/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "trainer/run_config.h"
#include "common/errors.h"
#include "model/safetensors.h"
#include "model/tensors.h"
#include "tests/check.h"

#define DIR "build/scratch/test_safetensors_ranges"

static char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(*size);
    if (fread(buf, 1, *size, f) != *size) *size = 0;
    fclose(f);
    return buf;
}

/* Writes DIR/bad.safetensors: the valid file's header with tensor `name`'s key `key` replaced
 * by the JSON value `value`, the same tensor data after it. */
static const char *with_entry(const char *valid, const char *name, const char *key, const char *value) {
    size_t size;
    char *buf = read_file(valid, &size);
    uint64_t hlen;
    memcpy(&hlen, buf, 8);
    cJSON *root = cJSON_ParseWithLength(buf + 8, hlen);
    cJSON *e = cJSON_GetObjectItem(root, name);
    cJSON_ReplaceItemInObject(e, key, cJSON_Parse(value));
    char *json = cJSON_PrintUnformatted(root);
    uint64_t n = (strlen(json) + 7) & ~(uint64_t)7;
    static const char *path = DIR "/bad.safetensors";
    FILE *f = fopen(path, "wb");
    fwrite(&n, 8, 1, f);
    fwrite(json, 1, strlen(json), f);
    for (size_t i = strlen(json); i < n; i++) fputc(' ', f);
    fwrite(buf + 8 + hlen, 1, size - 8 - hlen, f);
    fclose(f);
    free(json);
    cJSON_Delete(root);
    free(buf);
    return path;
}

int main(void) {
    mkdir("build", 0755);
    mkdir("build/scratch", 0755);
    mkdir(DIR, 0755);
    char *ov[] = {"model.d_model=8", "model.n_layers=1", "model.n_heads=2", "model.n_kv_heads=1", "model.head_dim=4",
                  "model.d_ff=8", "model.vocab_size=8", "model.attention=full", "model.rope_dims=4", "data.seq_len=8"};
    Config cfg;
    TensorTable tt;
    char err[ERR_LEN] = "";
    if (!check(config_load(&cfg, NULL, 10, ov, err) == 0 && tensor_table_build(&tt, &cfg.model, err) == 0,
               "safetensors: tiny model table", "%s", err))
        return check_exit_code();
    float *p = calloc(tt.n_floats, sizeof(float)), *q = calloc(tt.n_floats, sizeof(float));
    for (size_t i = 0; i < tt.n_floats; i++) p[i] = (float)i * 0.5f - 3.0f;
    const char *valid = DIR "/valid.safetensors";
    int rc = safetensors_write(valid, &tt, p, NULL, err);
    if (!rc) rc = safetensors_read(valid, &tt, q, err);
    int same = 1;
    for (int i = 0; i < tt.n && !rc; i++)
        same &= memcmp(p + tt.t[i].offset, q + tt.t[i].offset, tt.t[i].numel * sizeof(float)) == 0;
    check(rc == 0 && same, "safetensors: write then read gives the same tensors", "rc %d: %s", rc, err);

    const char *name = tt.t[0].name;      /* the embedding, [8, 8]: 256 bytes of F32 */
    struct { const char *what, *key, *value, *want; } bad[] = {
        {"shape 1e300", "shape", "[1e300, 8]", "shape differs"},
        {"shape -inf", "shape", "[8, -1e999]", "shape differs"},
        {"shape as strings", "shape", "[\"8\", \"8\"]", "shape differs"},
        {"data_offsets 1e300", "data_offsets", "[1e300, 1e300]", "data"},
        {"data_offsets negative", "data_offsets", "[-256, 0]", "data"},
        {"data_offsets fractional", "data_offsets", "[0.5, 256.5]", "data"},
        {"data_offsets 2^64", "data_offsets", "[18446744073709551616, 18446744073709551872]", "data"},
        {"data_offsets reversed", "data_offsets", "[256, 0]", "data"},
        {"data_offsets as strings", "data_offsets", "[\"0\", \"256\"]", "data"},
        {"three data_offsets", "data_offsets", "[0, 256, 512]", "data"},
        {"one data_offset", "data_offsets", "[0]", "data"},
        {"data_offsets an object", "data_offsets", "{\"a\": 0, \"b\": 256}", "data"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char check_name[200];
        err[0] = 0;
        rc = safetensors_read(with_entry(valid, name, bad[i].key, bad[i].value), &tt, q, err);
        snprintf(check_name, sizeof check_name, "safetensors: %s is rejected", bad[i].what);
        check(rc != 0 && strstr(err, bad[i].want) && strstr(err, name), check_name, "rc %d, err \"%s\"", rc, err);
    }
    /* and the control: an unchanged entry written the same way still reads */
    rc = safetensors_read(with_entry(valid, name, "data_offsets", "[0, 256]"), &tt, q, err);
    check(rc == 0, "safetensors: the rewritten file with the original offsets reads", "%s", err);
    free(p);
    free(q);
    tensor_table_free(&tt);
    return check_exit_code();
}
