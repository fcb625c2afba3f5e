/* Growable arrays: the one capacity rule. An array of elements of elem_size bytes with capacity
 * *cap grows to hold at least `need` elements: the new capacity is the old one (min_cap when
 * it is 0) doubled until it reaches need, so n appends cost O(n) copies in all.
 *
 *   uint32_t *ids = grow_array(t->ids, &t->cap, t->n + 1, sizeof *ids, 256);
 *   if (!ids) return -1;            // out of memory: t->ids and t->cap are unchanged
 *   t->ids = ids;
 *
 * Returns the (possibly moved) array, itself when *cap >= need already, or NULL when memory
 * runs out or the size overflows (the old array is then still valid, *cap unchanged). need is
 * at least 1. */
#ifndef PHASELAB_GROW_H
#define PHASELAB_GROW_H
#include <stddef.h>

void *grow_array(void *items, size_t *cap, size_t need, size_t elem_size, size_t min_cap);
#endif
