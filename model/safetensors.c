/* safetensors reader and writer (format in model/safetensors.h). The JSON header is built and
 * parsed with cJSON; data offsets are checked against the file size before anything is read. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "model/safetensors.h"
#include "model/errors.h"

int safetensors_write(const char *path, const TensorTable *tt, const float *host_params,
                      const char *const *metadata, char *err) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    for (int i = 0; metadata && metadata[i] && metadata[i + 1]; i += 2)
        cJSON_AddStringToObject(meta, metadata[i], metadata[i + 1]);
    size_t at = 0;
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        cJSON_AddStringToObject(e, "dtype", "F32");
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int k = 0; k < t->ndim; k++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[k]));
        cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(at + t->numel * 4)));
        at += t->numel * 4;
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    size_t jlen = strlen(json), padded = (jlen + 7) & ~(size_t)7;
    FILE *f = fopen(path, "wb");
    if (!f) { free(json); return set_err(err, "%s: cannot create: %s", path, strerror(errno)); }
    uint64_t n = padded;
    int ok = fwrite(&n, 8, 1, f) == 1 && fwrite(json, 1, jlen, f) == jlen;
    for (size_t i = jlen; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    for (int i = 0; ok && i < tt->n; i++)
        ok = fwrite(host_params + tt->t[i].offset, 4, tt->t[i].numel, f) == tt->t[i].numel;
    free(json);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok) return set_err(err, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

static float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* data_offsets[i] of a header entry: a whole number of bytes in [0, 2^53), or -1 when it is
 * missing, not a number or out of range (converting 1e300 or -1 to an integer is undefined). */
static int64_t data_offset(const cJSON *off, int i) {
    const cJSON *x = cJSON_IsArray(off) && cJSON_GetArraySize(off) == 2 ? cJSON_GetArrayItem(off, i) : NULL;
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble < 9007199254740992.0) ||
        x->valuedouble != floor(x->valuedouble))
        return -1;
    return (int64_t)x->valuedouble;
}

int safetensors_read(const char *path, const TensorTable *tt, float *host_params, char *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return set_err(err, "%s: cannot open: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long fsize = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint64_t hlen = 0;
    if (fsize < 8 || fread(&hlen, 8, 1, f) != 1 || hlen > (uint64_t)fsize - 8 || hlen > (1u << 30)) {
        fclose(f);
        return set_err(err, "%s@0: not a safetensors file (header length %llu, file size %ld)", path,
                       (unsigned long long)hlen, fsize);
    }
    char *json = malloc(hlen + 1);
    if (fread(json, 1, hlen, f) != hlen) { free(json); fclose(f); return set_err(err, "%s@8: truncated header", path); }
    json[hlen] = 0;
    cJSON *root = cJSON_Parse(json);
    free(json);
    if (!root) { fclose(f); return set_err(err, "%s@8: header is not valid JSON", path); }
    int rc = 0;
    uint64_t data0 = 8 + hlen;
    for (cJSON *e = root->child; e && !rc; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        if (tensor_table_find(tt, e->string) < 0)
            rc = set_err(err, "%s: unexpected tensor '%s' (not part of this model config)", path, e->string);
    }
    for (int i = 0; i < tt->n && !rc; i++) {
        const TensorInfo *t = &tt->t[i];
        cJSON *e = cJSON_GetObjectItemCaseSensitive(root, t->name);
        if (!e) { rc = set_err(err, "%s: missing tensor '%s'", path, t->name); break; }
        cJSON *dt = cJSON_GetObjectItem(e, "dtype"), *sh = cJSON_GetObjectItem(e, "shape"),
              *off = cJSON_GetObjectItem(e, "data_offsets");
        int esize = cJSON_IsString(dt) && !strcmp(dt->valuestring, "F32") ? 4
                  : cJSON_IsString(dt) && !strcmp(dt->valuestring, "BF16") ? 2 : 0;
        if (!esize) { rc = set_err(err, "%s: tensor '%s': dtype must be F32 or BF16", path, t->name); break; }
        int shape_ok = cJSON_IsArray(sh) && cJSON_GetArraySize(sh) == t->ndim;
        for (int k = 0; shape_ok && k < t->ndim; k++)
            shape_ok = cJSON_IsNumber(cJSON_GetArrayItem(sh, k)) &&   /* compared as doubles: no conversion of 1e300 */
                       cJSON_GetArrayItem(sh, k)->valuedouble == (double)t->shape[k];
        if (!shape_ok) {
            char want[128] = "";
            for (int k = 0; k < t->ndim; k++)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", k ? ", " : "", (long long)t->shape[k]);
            rc = set_err(err, "%s: tensor '%s': shape differs from the config's [%s]", path, t->name, want);
            break;
        }
        int64_t b = data_offset(off, 0), en = data_offset(off, 1);
        if (b < 0 || en < b || (uint64_t)(en - b) != t->numel * esize || data0 + (uint64_t)en > (uint64_t)fsize) {
            rc = set_err(err, "%s@%llu: tensor '%s': data offsets [%lld, %lld] do not fit the file (%ld bytes; "
                         "expected two byte offsets %zu bytes apart)", path, (unsigned long long)(data0 + (b > 0 ? b : 0)),
                         t->name, (long long)b, (long long)en, fsize, t->numel * esize);
            break;
        }
        fseek(f, (long)(data0 + b), SEEK_SET);
        float *dst = host_params + t->offset;
        if (esize == 4) {
            if (fread(dst, 4, t->numel, f) != t->numel) rc = set_err(err, "%s: short read of '%s'", path, t->name);
        } else {
            uint16_t *tmp = malloc(2 * t->numel);
            if (fread(tmp, 2, t->numel, f) != t->numel) rc = set_err(err, "%s: short read of '%s'", path, t->name);
            for (size_t j = 0; j < t->numel; j++) dst[j] = bf16_to_float(tmp[j]);
            free(tmp);
        }
    }
    cJSON_Delete(root);
    fclose(f);
    return rc;
}
