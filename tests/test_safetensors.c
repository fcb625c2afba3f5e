/* The safetensors reader is strict (issue 19): a header that is not a JSON object, data_offsets
 * that are not two integers, a header length off by one either way, trailing bytes, gaps or
 * overlaps between tensors and wrong dtypes or shapes are each an error naming the file (and
 * offset), never a crash and never weights read from the wrong place. Each case edits the
 * header of a file written by safetensors_write and re-frames it (length prefix, space padding). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "model/safetensors.h"
#include "tests/check.h"
#include "tests/model_testutil.h"

static const char *DIR_ = "build/scratch/test_safetensors";

typedef struct { char *json; size_t jlen; unsigned char *data; size_t dlen; } Parts;

static Parts split_file(const char *path) {
    Parts p = {0};
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(n);
    if (fread(buf, 1, n, f) != n) abort();
    fclose(f);
    uint64_t h;
    memcpy(&h, buf, 8);
    p.jlen = (size_t)h;
    while (p.jlen && buf[8 + p.jlen - 1] == ' ') p.jlen--;
    p.json = malloc(p.jlen + 1);
    memcpy(p.json, buf + 8, p.jlen);
    p.json[p.jlen] = 0;
    p.dlen = n - 8 - (size_t)h;
    p.data = malloc(p.dlen + 1);
    memcpy(p.data, buf + 8 + h, p.dlen);
    free(buf);
    return p;
}

/* writes length prefix (hlen_delta added to the true padded length), json, padding, data, extra */
static void write_file(const char *path, const char *json, const unsigned char *data, size_t dlen, long hlen_delta,
                       const char *extra) {
    size_t jlen = strlen(json), padded = (jlen + 7) & ~(size_t)7;
    uint64_t h = (uint64_t)((long)padded + hlen_delta);
    FILE *f = fopen(path, "wb");
    fwrite(&h, 8, 1, f);
    fwrite(json, 1, jlen, f);
    for (size_t i = jlen; i < padded; i++) fputc(' ', f);
    fwrite(data, 1, dlen, f);
    if (extra) fwrite(extra, 1, strlen(extra), f);
    fclose(f);
}

/* json with the first occurrence of `from` replaced by `to` (malloc'd) */
static char *replace(const char *json, const char *from, const char *to) {
    const char *at = strstr(json, from);
    if (!at) { fprintf(stderr, "test bug: '%s' not in the header\n", from); abort(); }
    size_t a = (size_t)(at - json), fl = strlen(from), tl = strlen(to);
    char *out = malloc(strlen(json) - fl + tl + 1);
    memcpy(out, json, a);
    memcpy(out + a, to, tl);
    strcpy(out + a + tl, at + fl);
    return out;
}

static int expect_error(const char *name, const TensorTable *tt, float *buf, const char *path, const char *needle) {
    char err[ERR_LEN] = "";
    int rc = safetensors_read(path, tt, buf, err);
    return check(rc != 0 && strstr(err, path) && strstr(err, needle), name, "rc %d, error '%s' (expected one naming "
                 "the file and '%s')", rc, err, needle);
}

int main(void) {
    mkdir("build/scratch", 0777);
    mkdir(DIR_, 0777);
    ModelConfig mc = tu_tiny_config();
    TensorTable tt;
    char err[ERR_LEN], path[512], good[512], path_json[512];
    if (tensor_table_build(&tt, &mc, err)) { printf("not ok - tensor table: %s\n", err); return 1; }
    float *params = malloc(tt.n_floats * sizeof(float)), *back = malloc(tt.n_floats * sizeof(float));
    for (size_t i = 0; i < tt.n_floats; i++) params[i] = (float)i * 0.25f - 3.0f;
    snprintf(good, sizeof good, "%s/good.safetensors", DIR_);
    check(safetensors_write(good, &tt, params, NULL, err) == 0, "write", "%s", err);
    int rc = safetensors_read(good, &tt, back, err), same = 1;
    for (int i = 0; i < tt.n; i++)
        same = same && memcmp(params + tt.t[i].offset, back + tt.t[i].offset, tt.t[i].numel * sizeof(float)) == 0;
    check(rc == 0 && same, "round trip", "%s", rc ? err : "values differ");

    Parts p = split_file(good);
    snprintf(path, sizeof path, "%s/bad.safetensors", DIR_);
    /* header length field one too large: the first data byte becomes part of the "header" */
    write_file(path, p.json, p.data, p.dlen, 8, NULL);
    {   /* (a length that is not a multiple of 8 but one more than the JSON + padding) */
        size_t jlen = strlen(p.json), padded = (jlen + 7) & ~(size_t)7;
        FILE *f = fopen(path, "r+b");
        uint64_t h = padded + 1;
        fwrite(&h, 8, 1, f);
        fclose(f);
    }
    expect_error("header length + 1", &tt, back, path, "@");
    write_file(path, p.json, p.data, p.dlen, -1, NULL);
    expect_error("header length - 1", &tt, back, path, "@");
    write_file(path, p.json, p.data, p.dlen, 0, "x");
    expect_error("trailing byte after the data", &tt, back, path, "data bytes");
    write_file(path, "[1, 2, 3]", p.data, p.dlen, 0, NULL);
    expect_error("JSON root is an array", &tt, back, path, "not a JSON object");
    snprintf(path_json, sizeof path_json, "{\"%s\": 5}", tt.t[0].name);
    write_file(path, path_json, p.data, p.dlen, 0, NULL);
    expect_error("tensor entry is not an object", &tt, back, path, "expected an object");

    /* edits of the first tensor's entry (the writer starts the data at offset 0) */
    const char *first = tt.t[0].name;
    char from[256], to[256];
    snprintf(from, sizeof from, "\"data_offsets\":[0,%zu]", tt.t[0].numel * 4);
    char *j = replace(p.json, from, "\"data_offsets\":[0]");
    write_file(path, j, p.data, p.dlen, 0, NULL);
    expect_error("data_offsets with one element", &tt, back, path, "data_offsets");
    free(j);
    j = replace(p.json, from, "\"data_offsets\":[]");
    write_file(path, j, p.data, p.dlen, 0, NULL);
    expect_error("data_offsets empty", &tt, back, path, "data_offsets");
    free(j);
    j = replace(p.json, from, "\"data_offsets\":\"0\"");
    write_file(path, j, p.data, p.dlen, 0, NULL);
    expect_error("data_offsets not an array", &tt, back, path, "data_offsets");
    free(j);
    snprintf(to, sizeof to, "\"data_offsets\":[0.5,%zu.5]", tt.t[0].numel * 4);
    j = replace(p.json, from, to);
    write_file(path, j, p.data, p.dlen, 0, NULL);
    expect_error("fractional data_offsets", &tt, back, path, "data_offsets");
    free(j);
    /* shifted by 4 bytes: right size, but a gap at the start and an overlap with the next tensor */
    snprintf(to, sizeof to, "\"data_offsets\":[4,%zu]", tt.t[0].numel * 4 + 4);
    j = replace(p.json, from, to);
    write_file(path, j, p.data, p.dlen, 0, NULL);
    expect_error("tensors not contiguous", &tt, back, path, "contiguous");
    free(j);
    j = replace(p.json, "\"dtype\":\"F32\"", "\"dtype\":\"F16\"");
    write_file(path, j, p.data, p.dlen, 0, NULL);
    expect_error("unsupported dtype", &tt, back, path, "dtype");
    free(j);
    j = replace(p.json, "\"dtype\":\"F32\"", "\"dtype\":7");
    write_file(path, j, p.data, p.dlen, 0, NULL);
    expect_error("dtype not a string", &tt, back, path, "dtype");
    free(j);
    snprintf(from, sizeof from, "\"%s\":{\"dtype\":\"F32\",\"shape\":[", first);
    snprintf(to, sizeof to, "\"%s\":{\"dtype\":\"F32\",\"shape\":[\"x\",", first);
    j = replace(p.json, from, to);
    write_file(path, j, p.data, p.dlen, 0, NULL);
    expect_error("shape with a non-number", &tt, back, path, "shape");
    free(j);
    write_file(path, p.json, p.data, p.dlen - 4, 0, NULL);
    expect_error("data section truncated", &tt, back, path, "data");

    free(p.json); free(p.data);
    free(params); free(back);
    tensor_table_free(&tt);
    return check_failures ? 1 : 0;
}
