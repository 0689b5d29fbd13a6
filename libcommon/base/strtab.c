/* strtab.c: string interning table (see strtab.h). */
#include "base/strtab.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

static uint64_t hash_bytes(const void *s, size_t len)
{
    uint64_t h = nmt_fnv1a(NMT_FNV_INIT, s, len);
    h ^= h >> 29; /* spread the high bits into the low ones used for slots */
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 32;
    return h;
}

void strtab_init(struct strtab *t) { memset(t, 0, sizeof *t); }

void strtab_free(struct strtab *t)
{
    if (!t)
        return;
    free(t->arena);
    free(t->off);
    free(t->len);
    free(t->slot);
    free(t->slot_hash);
    memset(t, 0, sizeof *t);
}

static size_t probe(const struct strtab *t, const void *s, size_t len, uint64_t h, int *found)
{
    size_t mask = t->nslot - 1, i = (size_t)h & mask;
    uint32_t h32 = (uint32_t)h;
    for (;;) {
        uint32_t v = t->slot[i];
        if (!v) {
            *found = 0;
            return i;
        }
        uint32_t id = v - 1;
        if (t->slot_hash[i] == h32 && t->len[id] == len && (len == 0 || memcmp(t->arena + t->off[id], s, len) == 0)) {
            *found = 1;
            return i;
        }
        i = (i + 1) & mask;
    }
}

int64_t strtab_find(const struct strtab *t, const void *s, size_t len)
{
    if (!t->nslot)
        return -1;
    int found;
    size_t i = probe(t, s, len, hash_bytes(s, len), &found);
    return found ? (int64_t)t->slot[i] - 1 : -1;
}

static int grow_slots(struct strtab *t)
{
    size_t nslot = t->nslot ? t->nslot * 2 : 64;
    uint32_t *slot = nmt_calloc(nslot, sizeof *slot);
    uint32_t *sh = nmt_calloc(nslot, sizeof *sh);
    if (!slot || !sh) {
        free(slot);
        free(sh);
        return -1;
    }
    for (uint32_t id = 0; id < t->n; id++) {
        uint64_t h = hash_bytes(t->arena + t->off[id], t->len[id]);
        size_t i = (size_t)h & (nslot - 1);
        while (slot[i])
            i = (i + 1) & (nslot - 1);
        slot[i] = id + 1;
        sh[i] = (uint32_t)h;
    }
    free(t->slot);
    free(t->slot_hash);
    t->slot = slot;
    t->slot_hash = sh;
    t->nslot = nslot;
    return 0;
}

int64_t strtab_intern(struct strtab *t, const void *s, size_t len, int *added)
{
    if (added)
        *added = 0;
    if (len > UINT32_MAX)
        return nmt_seterr("string too long (%zu bytes)", len);
    if ((size_t)t->n + 1 > t->nslot / 2 && grow_slots(t) < 0)
        return -1;
    uint64_t h = hash_bytes(s, len);
    int found;
    size_t i = probe(t, s, len, h, &found);
    if (found)
        return (int64_t)t->slot[i] - 1;
    if (t->n == UINT32_MAX - 1)
        return nmt_seterr("too many distinct strings");
    if (NMT_GROW2(t->off, t->len, t->cap, (size_t)t->n + 1) < 0)
        return -1;
    if (len > t->arena_cap - t->arena_len && NMT_GROW(t->arena, t->arena_cap, t->arena_len + len) < 0)
        return -1;
    if (len)
        memcpy(t->arena + t->arena_len, s, len);
    uint32_t id = t->n++;
    t->off[id] = t->arena_len;
    t->len[id] = (uint32_t)len;
    t->arena_len += len;
    t->slot[i] = id + 1;
    t->slot_hash[i] = (uint32_t)h;
    if (added)
        *added = 1;
    return id;
}
