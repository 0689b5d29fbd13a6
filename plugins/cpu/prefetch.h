/* prefetch.h: the linear layers' requests for the next column group's weights. A layer sweeps its
 * packed weights a group of panels at a time, each group by every row tile of A; in a decoder step
 * the weights come from memory (each is read once a step), and only the group's first row tile
 * waits for them. So row tiles 1, 2, ... each ask the L2 cache for a stretch of the next group's
 * lines, one line every 2^shift steps of their loop (cpu_pf_shift), and the next group's first tile
 * finds them there. */
#ifndef NMT_CPU_PREFETCH_H
#define NMT_CPU_PREFETCH_H

#include <immintrin.h>
#include <stddef.h>

/* The first of the STEPS lines row tile T asks for (its loop's steps over 2^shift), when the next
 * group's LINES 64-byte lines start at NEXT; NULL (none) for tile 0, when there is no next group
 * (NEXT NULL), or for the tiles past the lines. */
static inline const char *cpu_pf_plan(const void *next, size_t lines, int t, size_t steps)
{
    if (t == 0 || !next || (size_t)(t - 1) * steps >= lines)
        return NULL;
    return (const char *)next + (size_t)(t - 1) * steps * 64;
}

/* The spacing of the requests, as a shift: a tile asks for one line every 2^shift steps of its
 * loop, the largest spacing at which the NTILES - 1 tiles that ask, STEPS steps each, still cover
 * the next group's LINES lines. Requests crowded into the first tiles of a group (one a step) fill
 * the core's line fill buffers while the tiles' own reads of the group, from the L2 cache, need
 * them too; spread over all the tiles they leave room. */
static inline int cpu_pf_shift(int ntiles, size_t steps, size_t lines)
{
    int s = 0;
    while (ntiles > 1 && (steps >> (s + 1)) > 0 && (size_t)(ntiles - 1) * (steps >> (s + 1)) >= lines)
        s++;
    return s;
}

/* Step S's request of the lines from PF, one every 2^SH steps (none when PF is NULL; a tile inlined
 * with a constant NULL has none in its loop): prefetcht1, into the L2 cache. */
#define CPU_PF_TOUCH(pf, s, sh)                                                                                        \
    do {                                                                                                               \
        if ((pf) && !((size_t)(s) & (((size_t)1 << (sh)) - 1)))                                                        \
            _mm_prefetch((pf) + ((size_t)(s) >> (sh)) * 64, _MM_HINT_T1);                                              \
    } while (0)

#endif
