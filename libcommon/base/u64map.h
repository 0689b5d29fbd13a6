/* u64map.h: open-addressing hash map from 64-bit keys to 64-bit values (key UINT64_MAX is reserved).
 * Used for code point -> piece id and (left, right) piece pair -> merge lookups. */
#ifndef NMT_U64MAP_H
#define NMT_U64MAP_H

#include <stddef.h>
#include <stdint.h>

#define U64MAP_EMPTY UINT64_MAX

struct u64map {
    uint64_t *key;             /* (cap) U64MAP_EMPTY marks a free slot */
    uint64_t *val;             /* (cap) */
    size_t n, cap;             /* cap: power of two or 0 */
};

/* Initialises M as empty. */
void u64map_init(struct u64map *m);
/* Frees M's memory and leaves it empty. */
void u64map_free(struct u64map *m);
/* Returns a pointer to KEY's value, or NULL when absent. */
uint64_t *u64map_find(const struct u64map *m, uint64_t key);
/* Returns a pointer to KEY's value, inserting it with value 0 when absent; NULL with the error
 * set when out of memory or KEY is U64MAP_EMPTY. The pointer is valid until the next insertion. */
uint64_t *u64map_get(struct u64map *m, uint64_t key);

static inline uint64_t u64map_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

#endif
