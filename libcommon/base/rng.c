/* rng.c: splitmix64 and xoshiro256** (see rng.h). */
#include "base/rng.h"

#include <string.h>

void rng_seed(struct rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = rng_splitmix64(&seed);
}

uint64_t rng_below(struct rng *r, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t v;
    do
        v = rng_next(r);
    while (v >= limit);
    return v % n;
}

void rng_shuffle(struct rng *r, void *base, size_t n, size_t size)
{
    unsigned char *p = base, tmp[64];
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)rng_below(r, i);
        memcpy(tmp, p + (i - 1) * size, size);
        memcpy(p + (i - 1) * size, p + j * size, size);
        memcpy(p + j * size, tmp, size);
    }
}
