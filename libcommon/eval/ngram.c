/* ngram.c: the stamped open-addressing table of eval/ (see ngram.h). */
#include "eval/ngram.h"

#include <stdlib.h>

#include "base/util.h"

int ngram_reset(struct ngram_tab *t, size_t want)
{
    size_t need = 64;
    int lg = 6;
    while (need < want * 2) {
        need *= 2;
        lg++;
    }
    if (need > t->cap) {
        free(t->e);
        t->e = nmt_calloc(need, sizeof *t->e);
        if (!t->e) {
            t->cap = 0;
            return -1;
        }
        t->cap = need;
        t->stamp = 0;
    } else {
        while (((size_t)1 << lg) < t->cap)
            lg++;
    }
    t->shift = 64 - lg;
    if (++t->stamp == 0) {
        memset(t->e, 0, t->cap * sizeof *t->e);
        t->stamp = 1;
    }
    return 0;
}

void ngram_free(struct ngram_tab *t)
{
    free(t->e);
    t->e = NULL;
    t->cap = 0;
    t->stamp = 0;
}

uint64_t ngram_bytes_hash(const char *p, uint32_t len)
{
    uint64_t h = 0xC4CEB9FE1A85EC53ULL ^ len;
    for (uint32_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)p[i]) * 0x100000001B3ULL;
    h *= 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}
