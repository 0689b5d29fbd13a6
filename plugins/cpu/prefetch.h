/* prefetch.h: the linear layers' requests for the next column group's weights. A layer sweeps its
 * packed weights a group of panels at a time, each group by every row tile of A; in a decoder step
 * the weights come from memory (each is read once a step), and only the group's first row tile
 * waits for them. So the other row tiles ask the L2 cache for the next group's lines, one line a
 * step of their loops, spread evenly, and the next group's first tile finds them there. */
#ifndef NMT_CPU_PREFETCH_H
#define NMT_CPU_PREFETCH_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

/* A row tile's requests: step s asks for the 64-byte line BASE + 64 ((AT + s STEP) >> 16); none
 * when STEP is 0. */
struct cpu_pf {
    const char *base;
    uint64_t at, step;
};

/* The requests of row tile T of NT, which sweeps its group in STEPS steps, when the next group's
 * LINES lines start at NEXT (NULL: no next group): tiles 1 .. NT-1 ask for those lines, spread
 * evenly over their steps. Tile 0 asks for none, nor does any tile when there is no next group or
 * the other tiles have fewer steps than it has lines (few rows: the weights' reads dominate). */
static inline struct cpu_pf cpu_pf_plan(const void *next, size_t lines, int t, int nt, int steps)
{
    uint64_t slots = (uint64_t)(nt - 1) * (uint64_t)steps;
    if (t == 0 || !next || lines == 0 || slots < lines)
        return (struct cpu_pf){NULL, 0, 0};
    uint64_t step = ((uint64_t)lines << 16) / slots;
    return (struct cpu_pf){(const char *)next, step * (uint64_t)(t - 1) * (uint64_t)steps, step};
}

/* No requests: a tile given this constant has no request in its loop. */
#define CPU_PF_NONE ((struct cpu_pf){NULL, 0, 0})

/* PF with its steps counted from step S0 (a tile that sweeps its group in several calls). */
static inline struct cpu_pf cpu_pf_from(struct cpu_pf pf, int s0)
{
    pf.at += (uint64_t)s0 * pf.step;
    return pf;
}

/* Step S's request (prefetcht1: into the L2 cache). */
#define CPU_PF_TOUCH(pf, s)                                                                                            \
    do {                                                                                                               \
        if ((pf).step)                                                                                                 \
            _mm_prefetch((pf).base + (size_t)(((pf).at + (uint64_t)(s) * (pf).step) >> 16) * 64, _MM_HINT_T1);        \
    } while (0)

#endif
