/* rng.c: splitmix64 and xoshiro256** (see rng.h). */
#include "base/rng.h"

#include <string.h>

uint64_t rng_splitmix64_below(uint64_t *state, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t v;
    do
        v = rng_splitmix64(state);
    while (v >= limit);
    return v % n;
}

void rng_seed(struct rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = rng_splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
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

uint64_t rng_scaled(struct rng *r, uint64_t n) { return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64); }

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
