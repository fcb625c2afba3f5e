/* Growable arrays (see common/grow.h): capacity doubling from min_cap up to at least need. */
#include <stdint.h>
#include <stdlib.h>
#include "common/grow.h"

void *grow_array(void *items, size_t *cap, size_t need, size_t elem_size, size_t min_cap) {
    if (need <= *cap) return items;
    size_t c = *cap ? *cap : (min_cap ? min_cap : 1);
    while (c < need) {
        if (c > SIZE_MAX / 2) return NULL;
        c *= 2;
    }
    if (elem_size && c > SIZE_MAX / elem_size) return NULL;
    void *grown = realloc(items, c * elem_size);
    if (!grown) return NULL;
    *cap = c;
    return grown;
}
