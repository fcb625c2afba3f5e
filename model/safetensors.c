/* safetensors reader and writer (format in model/safetensors.h). The JSON header is built and
 * parsed with cJSON. The reader is strict: the header is a JSON object ending exactly at its
 * stated length (only space padding after it), every table tensor has its dtype, shape and
 * [begin, end] offsets, and the tensors tile the data section exactly (contiguous, in bounds,
 * nothing after the last), so a corrupt length field or header is an error naming the offset. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "model/safetensors.h"
#include "common/errors.h"
#include "common/fsutil.h"
#include "common/json_num.h"

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
    AtomicFile f;
    if (fs_atomic_open(&f, path, err)) { free(json); return -1; }
    uint64_t n = padded;
    const char spaces[8] = "        ";
    int ok = fs_atomic_write(&f, &n, 8, err) == 0 && fs_atomic_write(&f, json, jlen, err) == 0 &&
             fs_atomic_write(&f, spaces, padded - jlen, err) == 0;
    for (int i = 0; ok && i < tt->n; i++)
        ok = fs_atomic_write(&f, host_params + tt->t[i].offset, 4 * tt->t[i].numel, err) == 0;
    free(json);
    if (!ok || fs_atomic_commit(&f, err)) return -1;
    return 0;
}

static float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef struct { uint64_t begin, end; const char *name; } Extent;

static int cmp_extent(const void *a, const void *b) {
    const Extent *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Checks one header entry against the table tensor t: dtype F32/BF16, shape exactly t's,
 * data_offsets [begin, end] with end - begin = numel * element size. Fills *esize and *ext. */
static int check_entry(const char *path, const TensorInfo *t, const cJSON *e, int *esize, Extent *ext, char *err) {
    if (!cJSON_IsObject(e)) return set_err(err, "%s@8: tensor '%s': expected an object {dtype, shape, data_offsets}", path, t->name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype"), *sh = cJSON_GetObjectItemCaseSensitive(e, "shape"),
                *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    *esize = cJSON_IsString(dt) && !strcmp(dt->valuestring, "F32") ? 4
           : cJSON_IsString(dt) && !strcmp(dt->valuestring, "BF16") ? 2 : 0;
    if (!*esize) return set_err(err, "%s@8: tensor '%s': dtype must be F32 or BF16", path, t->name);
    int shape_ok = cJSON_IsArray(sh) && cJSON_GetArraySize(sh) == t->ndim;
    for (int k = 0; shape_ok && k < t->ndim; k++) {
        uint64_t d;
        shape_ok = json_u64_in(cJSON_GetArrayItem(sh, k), 0, JSON_MAX_EXACT, &d) == 0 && d == (uint64_t)t->shape[k];
    }
    if (!shape_ok) {
        char want[128] = "";
        for (int k = 0; k < t->ndim; k++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", k ? ", " : "", (long long)t->shape[k]);
        return set_err(err, "%s@8: tensor '%s': shape differs from the config's [%s]", path, t->name, want);
    }
    uint64_t b, en;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || json_u64_in(cJSON_GetArrayItem(off, 0), 0, JSON_MAX_EXACT, &b) ||
        json_u64_in(cJSON_GetArrayItem(off, 1), 0, JSON_MAX_EXACT, &en))
        return set_err(err, "%s@8: tensor '%s': data_offsets must be [begin, end] (two non-negative integers)", path, t->name);
    if (en < b || en - b != (uint64_t)t->numel * (uint64_t)*esize)
        return set_err(err, "%s@8: tensor '%s': data offsets [%llu, %llu] hold %llu bytes, expected %llu (%zu x %d)",
                       path, t->name, (unsigned long long)b, (unsigned long long)en,
                       (unsigned long long)(en >= b ? en - b : 0), (unsigned long long)t->numel * (uint64_t)*esize,
                       t->numel, *esize);
    *ext = (Extent){b, en, t->name};
    return 0;
}

int safetensors_read(const char *path, const TensorTable *tt, float *host_params, char *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return set_err(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    uint64_t fsize = fstat(fileno(f), &sb) == 0 ? (uint64_t)sb.st_size : 0;
    uint64_t hlen = 0;
    if (fsize < 8 || fread(&hlen, 8, 1, f) != 1 || hlen < 2 || hlen > fsize - 8 || hlen > (1u << 30)) {
        fclose(f);
        return set_err(err, "%s@0: not a safetensors file (header length %llu, file size %llu)", path,
                       (unsigned long long)hlen, (unsigned long long)fsize);
    }
    char *json = malloc(hlen + 1);
    if (!json) { fclose(f); return set_err(err, "%s@0: out of memory for a %llu-byte header", path, (unsigned long long)hlen); }
    if (fread(json, 1, hlen, f) != hlen) { free(json); fclose(f); return set_err(err, "%s@8: truncated header", path); }
    json[hlen] = 0;
    const char *json_end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, hlen, &json_end, 0);
    size_t tail = root ? (size_t)(json_end - json) : 0;
    while (root && tail < hlen && json[tail] == ' ') tail++;          /* the format pads with spaces */
    int rc = 0;
    if (!root) rc = set_err(err, "%s@8: header is not valid JSON", path);
    else if (!cJSON_IsObject(root)) rc = set_err(err, "%s@8: header is not a JSON object", path);
    else if (tail != hlen)
        rc = set_err(err, "%s@%llu: header length %llu does not end at the end of the JSON (byte 0x%02x; header length "
                     "field corrupt?)", path, (unsigned long long)(8 + tail), (unsigned long long)hlen, (unsigned char)json[tail]);
    free(json);
    if (rc) { cJSON_Delete(root); fclose(f); return rc; }
    uint64_t data0 = 8 + hlen, data_bytes = fsize - data0;
    for (cJSON *e = root->child; e && !rc; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        if (tensor_table_find(tt, e->string) < 0)
            rc = set_err(err, "%s@8: unexpected tensor '%s' (not part of this model config)", path, e->string);
    }
    int *esize = calloc((size_t)tt->n + 1, sizeof *esize);
    Extent *ext = calloc((size_t)tt->n + 1, sizeof *ext);
    if (!rc && (!esize || !ext)) rc = set_err(err, "%s: out of memory", path);
    for (int i = 0; i < tt->n && !rc; i++) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, tt->t[i].name);
        if (!e) rc = set_err(err, "%s@8: missing tensor '%s'", path, tt->t[i].name);
        else rc = check_entry(path, &tt->t[i], e, &esize[i], &ext[i], err);
    }
    /* the data section is exactly the tensors, back to back: no gap, overlap or trailing bytes */
    Extent *sorted = rc ? NULL : malloc(((size_t)tt->n + 1) * sizeof *sorted);
    if (!rc && !sorted) rc = set_err(err, "%s: out of memory", path);
    if (!rc) {
        memcpy(sorted, ext, (size_t)tt->n * sizeof *sorted);
        qsort(sorted, (size_t)tt->n, sizeof *sorted, cmp_extent);
        uint64_t at = 0;
        for (int i = 0; i < tt->n && !rc; i++) {
            if (sorted[i].begin != at)
                rc = set_err(err, "%s@%llu: tensor '%s' starts at data offset %llu, expected %llu (tensors must be "
                             "contiguous)", path, (unsigned long long)(data0 + at), sorted[i].name,
                             (unsigned long long)sorted[i].begin, (unsigned long long)at);
            at = sorted[i].end;
        }
        if (!rc && at != data_bytes)
            rc = set_err(err, "%s@%llu: the tensors end at data offset %llu but the file holds %llu data bytes "
                         "(truncated, or a corrupt header length)", path, (unsigned long long)(data0 + at),
                         (unsigned long long)at, (unsigned long long)data_bytes);
    }
    free(sorted);
    for (int i = 0; i < tt->n && !rc; i++) {
        const TensorInfo *t = &tt->t[i];
        float *dst = host_params + t->offset;
        if (fseeko(f, (off_t)(data0 + ext[i].begin), SEEK_SET)) { rc = set_err(err, "%s: cannot seek", path); break; }
        if (esize[i] == 4) {
            if (fread(dst, 4, t->numel, f) != t->numel) rc = set_err(err, "%s: short read of '%s'", path, t->name);
        } else {
            uint16_t *tmp = malloc(2 * t->numel + 2);
            if (!tmp) { rc = set_err(err, "%s: out of memory for '%s'", path, t->name); break; }
            if (fread(tmp, 2, t->numel, f) != t->numel) rc = set_err(err, "%s: short read of '%s'", path, t->name);
            for (size_t j = 0; !rc && j < t->numel; j++) dst[j] = bf16_to_float(tmp[j]);
            free(tmp);
        }
    }
    free(esize);
    free(ext);
    cJSON_Delete(root);
    fclose(f);
    return rc;
}
