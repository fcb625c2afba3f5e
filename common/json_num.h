/* Strict numbers from parsed JSON (cJSON stores every number as a double): a value is accepted
 * only when it is a number, a whole number, and inside [lo, hi]; hi <= 2^53 so that every
 * accepted value is exact. Used by every reader of a state or header file. */
#ifndef PHASELAB_JSON_NUM_H
#define PHASELAB_JSON_NUM_H
#include <stdint.h>
#include <cjson/cJSON.h>

#define JSON_MAX_EXACT 9007199254740992ull      /* 2^53 */

/* 0 and *out set, or -1 when x is NULL, not a number, fractional or outside [lo, hi]. */
int json_u64_in(const cJSON *x, uint64_t lo, uint64_t hi, uint64_t *out);
/* The same for the member `key` of obj. */
int json_get_u64(const cJSON *obj, const char *key, uint64_t lo, uint64_t hi, uint64_t *out);
#endif
