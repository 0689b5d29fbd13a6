/* rng.h: the one random number generator of the host: splitmix64 (a counter-based stream and the
 * seeder) and xoshiro256** seeded by it, with unbiased draws below a bound and an unbiased
 * Fisher-Yates shuffle. Results depend only on the seed, never on the platform or thread count. */
#ifndef NMT_RNG_H
#define NMT_RNG_H

#include <stddef.h>
#include <stdint.h>

/* The splitmix64 finaliser: a bijective mix of Z (the same function as the plugins' nmt_rng_mix64). */
static inline uint64_t rng_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
/* Advances the splitmix64 STATE by the golden gamma and returns the next output. */
static inline uint64_t rng_splitmix64(uint64_t *state) { return rng_mix64(*state += 0x9E3779B97F4A7C15ULL); }
/* Returns the top 53 bits of X as a double in [0, 1). */
static inline double rng_unit(uint64_t x) { return (double)(x >> 11) * 0x1.0p-53; }
/* xoshiro256** state; seed with rng_seed before use. */
struct rng {
    uint64_t s[4];
};
/* Seeds R from SEED through splitmix64. */
void rng_seed(struct rng *r, uint64_t seed);
/* Returns the next 64 random bits. */
static inline uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5, t = s[1] << 17;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}
/* Returns a value uniform in [0, N) (N >= 1), by rejection: unbiased. */
uint64_t rng_below(struct rng *r, uint64_t n);
/* Returns floor(next * N / 2^64): in [0, N), fast, biased by at most N / 2^64. */
static inline uint64_t rng_scaled(struct rng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}
/* Shuffles the N elements of SIZE bytes at BASE (Fisher-Yates, from the last element down, with
 * rng_below); SIZE at most 64 bytes. */
void rng_shuffle(struct rng *r, void *base, size_t n, size_t size);

#endif
