/* Strict JSON numbers (see common/json_num.h). */
#include "common/json_num.h"

int json_u64_in(const cJSON *x, uint64_t lo, uint64_t hi, uint64_t *out) {
    if (!cJSON_IsNumber(x)) return -1;
    double v = x->valuedouble;
    if (hi > JSON_MAX_EXACT) hi = JSON_MAX_EXACT;
    if (!(v >= (double)lo && v <= (double)hi)) return -1;      /* also rejects NaN */
    uint64_t u = (uint64_t)v;
    if ((double)u != v) return -1;
    *out = u;
    return 0;
}

int json_get_u64(const cJSON *obj, const char *key, uint64_t lo, uint64_t hi, uint64_t *out) {
    return json_u64_in(cJSON_GetObjectItemCaseSensitive(obj, key), lo, hi, out);
}
