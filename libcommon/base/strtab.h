/* strtab.h: a string interning table. Maps byte strings (any bytes, not NUL-terminated) to dense
 * ids 0, 1, 2, ... in order of first insertion; the strings live in one arena owned by the table.
 * Used for word counts, piece lookup and encoder caches. */
#ifndef NMT_STRTAB_H
#define NMT_STRTAB_H

#include <stddef.h>
#include <stdint.h>

struct strtab {
    char *arena;               /* (arena_len) concatenated strings */
    size_t arena_len, arena_cap;
    uint64_t *off;             /* (n) start of string i in arena */
    uint32_t *len;             /* (n) byte length of string i */
    uint32_t n;                /* strings stored */
    size_t cap;                /* capacity of off/len */
    uint32_t *slot;            /* (nslot) open addressing: id + 1, 0 = empty */
    uint32_t *slot_hash;       /* (nslot) low 32 bits of the hash, to skip most compares */
    size_t nslot;              /* power of two */
};

/* Initialises T as empty; 0. */
void strtab_init(struct strtab *t);
/* Frees T's memory and leaves it empty. */
void strtab_free(struct strtab *t);
/* Returns the id of S (LEN bytes), or -1 when absent. */
int64_t strtab_find(const struct strtab *t, const void *s, size_t len);
/* Returns the id of S, inserting it when absent (*ADDED set to 1 then, else 0; ADDED may be NULL);
 * -1 with the error set when out of memory or the table is full (2^32-1 strings). */
int64_t strtab_intern(struct strtab *t, const void *s, size_t len, int *added);
/* Returns a pointer to string ID's bytes (valid until the next insertion) and stores its length. */
static inline const char *strtab_get(const struct strtab *t, uint32_t id, uint32_t *len)
{
    *len = t->len[id];
    return t->arena + t->off[id];
}

#endif
