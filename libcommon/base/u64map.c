/* u64map.c: 64-bit key hash map (see u64map.h). */
#include "base/u64map.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void u64map_init(struct u64map *m) { memset(m, 0, sizeof *m); }

void u64map_free(struct u64map *m)
{
    if (!m)
        return;
    free(m->key);
    free(m->val);
    memset(m, 0, sizeof *m);
}

uint64_t *u64map_find(const struct u64map *m, uint64_t key)
{
    if (!m->cap || key == U64MAP_EMPTY)
        return NULL;
    size_t mask = m->cap - 1, i = (size_t)u64map_hash(key) & mask;
    while (m->key[i] != U64MAP_EMPTY) {
        if (m->key[i] == key)
            return &m->val[i];
        i = (i + 1) & mask;
    }
    return NULL;
}

static int grow(struct u64map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    uint64_t *key = nmt_malloc(cap * sizeof *key);
    uint64_t *val = nmt_malloc(cap * sizeof *val);
    if (!key || !val) {
        free(key);
        free(val);
        return -1;
    }
    memset(key, 0xff, cap * sizeof *key);
    for (size_t j = 0; j < m->cap; j++) {
        if (m->key[j] == U64MAP_EMPTY)
            continue;
        size_t i = (size_t)u64map_hash(m->key[j]) & (cap - 1);
        while (key[i] != U64MAP_EMPTY)
            i = (i + 1) & (cap - 1);
        key[i] = m->key[j];
        val[i] = m->val[j];
    }
    free(m->key);
    free(m->val);
    m->key = key;
    m->val = val;
    m->cap = cap;
    return 0;
}

uint64_t *u64map_get(struct u64map *m, uint64_t key)
{
    if (key == U64MAP_EMPTY) {
        nmt_seterr("reserved hash key");
        return NULL;
    }
    if ((m->n + 1) * 2 > m->cap && grow(m) < 0)
        return NULL;
    size_t mask = m->cap - 1, i = (size_t)u64map_hash(key) & mask;
    while (m->key[i] != U64MAP_EMPTY) {
        if (m->key[i] == key)
            return &m->val[i];
        i = (i + 1) & mask;
    }
    m->key[i] = key;
    m->val[i] = 0;
    m->n++;
    return &m->val[i];
}
