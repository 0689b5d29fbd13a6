/* prefetch.h: the linear layers' requests for the next column group's weights. A layer sweeps its
 * packed weights a group of panels at a time, each group by every row tile of A; in a decoder step
 * the weights come from memory (each is read once a step), and only the group's first row tile
 * waits for them. So row tiles 1, 2, ... each ask the L2 cache for a stretch of the next group's
 * lines, one line a step of their loop (as the loop reads its own panel's), and the next group's
 * first tile finds them there. */
#ifndef NMT_CPU_PREFETCH_H
#define NMT_CPU_PREFETCH_H

#include <immintrin.h>
#include <stddef.h>

/* The first of the lines row tile T asks for, one a step of its loop of STEPS steps, when the next
 * group's LINES 64-byte lines (a multiple of STEPS) start at NEXT; NULL (none) for tile 0, when there
 * is no next group (NEXT NULL), or for the tiles past the lines. */
static inline const char *cpu_pf_plan(const void *next, size_t lines, int t, size_t steps)
{
    if (t == 0 || !next || (size_t)(t - 1) * steps >= lines)
        return NULL;
    return (const char *)next + (size_t)(t - 1) * steps * 64;
}

/* Step S's request of the lines from PF (none when PF is NULL; a tile inlined with a constant NULL has
 * none in its loop): prefetcht1, into the L2 cache. */
#define CPU_PF_TOUCH(pf, s)                                                                                            \
    do {                                                                                                               \
        if (pf)                                                                                                        \
            _mm_prefetch((pf) + (size_t)(s) * 64, _MM_HINT_T1);                                                        \
    } while (0)

#endif
