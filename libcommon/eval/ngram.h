/* ngram.h: the one hash table of eval/: open addressing over a power-of-two array, emptied in O(1)
 * per segment by a generation stamp. A key is either a 64-bit number (an n-gram of small ids
 * packed into one word, a code point) or a byte string (token text, an id sequence) known by its
 * 64-bit hash. Each entry carries four counters whose meaning the user chooses. */
#ifndef NMT_NGRAM_H
#define NMT_NGRAM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct ngram_ent {
    uint64_t key;  /* the number, or the hash of the string */
    const void *p; /* string keys: the bytes (not owned); NULL for numbers */
    uint32_t len;  /* string keys: the length in bytes */
    uint32_t stamp;
    int32_t a, b, c, d; /* counters, zero when inserted */
};

struct ngram_tab {
    struct ngram_ent *e;
    size_t cap;  /* power of two */
    int shift;   /* 64 - log2(cap) */
    uint32_t stamp;
};

/* Empties T and makes room for WANT keys at a load of at most 1/2. Returns 0, or -1 with the
 * error set (out of memory; T is then empty with no room). */
int ngram_reset(struct ngram_tab *t, size_t want);
/* Frees T's memory and leaves it empty. */
void ngram_free(struct ngram_tab *t);

/* Returns the home slot of KEY. */
static inline size_t ngram_slot(const struct ngram_tab *t, uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> t->shift);
}

/* Returns the entry of number KEY, inserting it (counters zero) when absent and INSERT; NULL when
 * absent and not INSERT. A table holds numbers or strings, never both. */
static inline struct ngram_ent *ngram_get(struct ngram_tab *t, uint64_t key, int insert)
{
    size_t mask = t->cap - 1, i = ngram_slot(t, key);
    for (;;) {
        struct ngram_ent *e = &t->e[i];
        if (e->stamp != t->stamp) {
            if (!insert)
                return NULL;
            *e = (struct ngram_ent){.key = key, .stamp = t->stamp};
            return e;
        }
        if (e->key == key)
            return e;
        i = (i + 1) & mask;
    }
}

/* Returns the entry of the string P[0..LEN) with hash H, inserting it (counters zero, P kept by
 * reference) when absent and INSERT; NULL when absent and not INSERT. */
static inline struct ngram_ent *ngram_get_str(struct ngram_tab *t, uint64_t h, const void *p, uint32_t len,
                                              int insert)
{
    size_t mask = t->cap - 1, i = ngram_slot(t, h);
    for (;;) {
        struct ngram_ent *e = &t->e[i];
        if (e->stamp != t->stamp) {
            if (!insert)
                return NULL;
            *e = (struct ngram_ent){.key = h, .p = p, .len = len, .stamp = t->stamp};
            return e;
        }
        if (e->key == h && e->len == len && (e->p == p || memcmp(e->p, p, len) == 0))
            return e;
        i = (i + 1) & mask;
    }
}

/* Hashing of id sequences: start from NGRAM_SEQ_SEED, ngram_mix every id, then ngram_final with
 * the length (or any other tag). */
#define NGRAM_SEQ_SEED 0x84222325CBF29CE4ULL
static inline uint64_t ngram_mix(uint64_t h, int32_t x)
{
    h = (h ^ (uint32_t)x) * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}
static inline uint64_t ngram_final(uint64_t h, uint32_t tag)
{
    h ^= (uint64_t)tag * 0xC2B2AE3D27D4EB4FULL;
    h *= 0xFF51AFD7ED558CCDULL;
    return h ^ (h >> 32);
}
/* Returns the hash of the id sequence P[0..N). */
static inline uint64_t ngram_seq_hash(const int32_t *p, size_t n)
{
    uint64_t h = NGRAM_SEQ_SEED;
    for (size_t i = 0; i < n; i++)
        h = ngram_mix(h, p[i]);
    return ngram_final(h, (uint32_t)n);
}
/* Returns the hash of the bytes P[0..LEN). */
uint64_t ngram_bytes_hash(const char *p, uint32_t len);

/* Returns the number of bits needed to write K. */
static inline int ngram_bit_width(uint32_t k)
{
    int b = 0;
    while (k) {
        b++;
        k >>= 1;
    }
    return b;
}

#endif
