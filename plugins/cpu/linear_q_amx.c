/* linear_q_amx.c: the int8 linear layer on AMX (AMX-TILE and AMX-INT8: Sapphire Rapids and later),
 * for layers whose Kp is a multiple of 64 (every preset's); the scheme and the other paths are in
 * linear_q.c. The same bits as every other path: the sums are exact integers and the epilogue is
 * qstore16.
 *
 * AMX multiplies bytes, and the activations have 12 bits, so each is split: a = 256 * hi + lo with
 * lo in 0..255 and hi in -8..7. S = 256 * S_hi + S_lo, where S_lo = sum lo * w (tdpbusd: unsigned by
 * signed bytes) and S_hi = sum hi * w (tdpbssd), both exact in 32 bits for K <= LIN_Q_MAXK
 * (255 * 127 * 8192 and 256 * 8 * 127 * 8192 are below 2^31), and so is S.
 *
 * The packed panels are already B tiles: a panel's 16 groups of 4 K values (64 bytes each: 4 bytes
 * of each of its 16 columns) are the B operand for 64 K values by 16 columns, 64 bytes a row. The
 * split rows of A give the A tiles, 16 rows by 64 K values. Tiles: 0 A low bytes, 1 A high parts,
 * 2 and 3 two panels' B, 4..7 the sums (low and high of panel 0, low and high of panel 1), 16 rows
 * by 16 int32 each.
 *
 * With 8-bit activations (-127..127, signed bytes in natural column order) there is nothing to
 * split: one tdpbssd a panel and 64 values of k gives S (127 * 127 * 8192 < 2^31). Up to 16 rows:
 * tiles of 16 rows by 4 panels (tile 0 A, 1..3 the panels' B, tile 1 again for a fourth, 4..7 the
 * sums); more: 32 rows by 2 panels.
 *
 * Rows of A are ld8 bytes apart, Kp padded so that a tile's 16 rows do not fall in the same few
 * sets of the first level cache (linear_q.c). */
#include <sys/syscall.h>
#include <unistd.h>

#include "amx.h"
#include "linear_q.h"


int cpu_amx_request(void)
{
    enum { GET_PERM = 0x1022, REQ_PERM = 0x1023, XTILEDATA = 18 }; /* arch_prctl codes, XFEATURE_XTILEDATA */
    unsigned long bits = 0;
    if (syscall(SYS_arch_prctl, REQ_PERM, XTILEDATA) != 0 || syscall(SYS_arch_prctl, GET_PERM, &bits) != 0)
        return 0;
    return (int)(bits >> XTILEDATA & 1);
}

/* The split of one value (as cpu_q_amx_split states it). */
static inline void split_one(uint8_t *lo, int8_t *hi, int v)
{
    int l = v & 255; /* two's complement: v mod 256 */
    *lo = (uint8_t)l;
    *hi = (int8_t)((v - l) / 256);
}

/* 32 values a step: each group of 4 back to column order (act_pos: 0, 2, 1, 3, i.e. words 1 and 2
 * swapped), the low bytes, and v >> 8 (arithmetic: (v - lo) / 256 exactly); the tail in C. */
ISA_AVX512 void cpu_q_amx_split(uint8_t *lo, int8_t *hi, const int16_t *q, int Kp)
{
    int k = 0;
    for (; k + 32 <= Kp; k += 32) {
        __m512i v = _mm512_loadu_si512(q + k);
        v = _mm512_shufflehi_epi16(_mm512_shufflelo_epi16(v, 0xD8), 0xD8);
        _mm256_storeu_si256((__m256i *)(lo + k), _mm512_cvtepi16_epi8(_mm512_and_si512(v, _mm512_set1_epi16(255))));
        _mm256_storeu_si256((__m256i *)(hi + k), _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
    }
    for (; k < Kp; k += 4) {
        const int16_t a[4] = { q[k], q[k + 2], q[k + 1], q[k + 3] }; /* act_pos: 0, 2, 1, 3 */
        for (int t = 0; t < 4; t++)
            split_one(lo + k + t, hi + k + t, a[t]);
    }
}

static const struct amx_cfg amx_config = {
    .palette = 1,
    .colsb = { 64, 64, 64, 64, 64, 64, 64, 64 },
    .rows = { 16, 16, 16, 16, 16, 16, 16, 16 },
};

ISA_AMX void cpu_q_amx_begin(void) { AMX_LOADCONFIG(&amx_config); }

ISA_AMX void cpu_q_amx_end(void) { AMX_RELEASE(); }

/* Rows I..I+15 by panel P and, when TWO, P + 1 (M0, M1: their columns that exist); the first MR
 * rows are stored. */
static inline __attribute__((always_inline)) ISA_AMX void amx_panels(const struct qlin *g, int i, int mr, int p,
                                                                     int two, __mmask16 m0, __mmask16 m1)
{
    const uint8_t *lo = g->Alo + (size_t)i * (size_t)g->ld8;
    const int8_t *hi = g->Ahi + (size_t)i * (size_t)g->ld8;
    const uint8_t *w0 = qpanel(g, p, 0), *w1 = two ? qpanel(g, p + 1, 0) : w0;
    AMX_ZERO(4);
    AMX_ZERO(5);
    if (two) {
        AMX_ZERO(6);
        AMX_ZERO(7);
    }
    for (int k = 0; k < g->Kp; k += 64) {
        AMX_LOAD(0, lo + k, g->ld8);
        AMX_LOAD(1, hi + k, g->ld8);
        AMX_LOAD(2, w0 + (size_t)k * QPW, 64);
        AMX_DPBUSD(4, 0, 2);
        AMX_DPBSSD(5, 1, 2);
        if (two) {
            AMX_LOAD(3, w1 + (size_t)k * QPW, 64);
            AMX_DPBUSD(6, 0, 3);
            AMX_DPBSSD(7, 1, 3);
        }
    }
    int32_t s[4][16][16] __attribute__((aligned(64)));
    AMX_STORE(4, s[0], 64);
    AMX_STORE(5, s[1], 64);
    if (two) {
        AMX_STORE(6, s[2], 64);
        AMX_STORE(7, s[3], 64);
    }
    for (int c = 0; c <= two; c++)
        for (int r = 0; r < mr; r++) {
            __m512i slo = _mm512_load_si512(s[2 * c][r]), shi = _mm512_load_si512(s[2 * c + 1][r]);
            qstore16(g, i + r, (p + c) * QPW, c ? m1 : m0, _mm512_add_epi32(_mm512_slli_epi32(shi, 8), slo));
        }
}

/* The sums of tile T (rows I.., the first MR stored) for panel P's columns (mask M) through the
 * epilogue. */
#define AMX_FINISH(t, i, mr, p, m)                                                                                     \
    do {                                                                                                               \
        int32_t s_[16][16] __attribute__((aligned(64)));                                                               \
        AMX_STORE(t, s_, 64);                                                                                          \
        for (int r_ = 0; r_ < (mr); r_++)                                                                              \
            qstore16(g, (i) + r_, (p) * QPW, m, _mm512_load_si512(s_[r_]));                                            \
    } while (0)

/* 8-bit activations: rows I..I+15 by the NP (1..4, a constant once inlined) panels from P; LAST
 * masks the last panel's columns that exist; the first MR rows are stored. One row tile: each
 * panel's bytes are read once, as they come from memory. */
static inline __attribute__((always_inline)) ISA_AMX void amx8_panels(const struct qlin *g, int i, int mr, int p,
                                                                      int np, __mmask16 last)
{
    const int8_t *a = g->As8 + (size_t)i * (size_t)g->ld8;
    const uint8_t *w = qpanel(g, p, 0);
    size_t pw = (size_t)g->Kp * QPW; /* the bytes of a panel */
    AMX_ZERO(4);
    if (np > 1)
        AMX_ZERO(5);
    if (np > 2)
        AMX_ZERO(6);
    if (np > 3)
        AMX_ZERO(7);
    for (int k = 0; k < g->Kp; k += 64) {
        const uint8_t *wk = w + (size_t)k * QPW;
        AMX_LOAD(0, a + k, g->ld8);
        AMX_LOAD(1, wk, 64);
        AMX_DPBSSD(4, 0, 1);
        if (np > 1) {
            AMX_LOAD(2, wk + pw, 64);
            AMX_DPBSSD(5, 0, 2);
        }
        if (np > 2) {
            AMX_LOAD(3, wk + 2 * pw, 64);
            AMX_DPBSSD(6, 0, 3);
        }
        if (np > 3) {
            AMX_LOAD(1, wk + 3 * pw, 64);
            AMX_DPBSSD(7, 0, 1);
        }
    }
    AMX_FINISH(4, i, mr, p, np == 1 ? last : (__mmask16)0xFFFF);
    if (np > 1)
        AMX_FINISH(5, i, mr, p + 1, np == 2 ? last : (__mmask16)0xFFFF);
    if (np > 2)
        AMX_FINISH(6, i, mr, p + 2, np == 3 ? last : (__mmask16)0xFFFF);
    if (np > 3)
        AMX_FINISH(7, i, mr, p + 3, last);
}

/* 8-bit activations: rows I..I+31 (the first MR exist, more than 16) by the NP (1 or 2, a constant
 * once inlined) panels from P: two row tiles share each panel tile (tiles 0, 1 A; 2, 3 B; 4..7
 * the sums). M0, M1: the panels' columns that exist. */
static inline __attribute__((always_inline)) ISA_AMX void amx8_rows2(const struct qlin *g, int i, int mr, int p,
                                                                     int np, __mmask16 m0, __mmask16 m1)
{
    size_t ld8 = (size_t)g->ld8, pw = (size_t)g->Kp * QPW;
    const int8_t *a = g->As8 + (size_t)i * ld8;
    const uint8_t *w = qpanel(g, p, 0);
    AMX_ZERO(4);
    AMX_ZERO(6);
    if (np > 1) {
        AMX_ZERO(5);
        AMX_ZERO(7);
    }
    for (int k = 0; k < g->Kp; k += 64) {
        const uint8_t *wk = w + (size_t)k * QPW;
        AMX_LOAD(0, a + k, ld8);
        AMX_LOAD(1, a + 16 * ld8 + k, ld8);
        AMX_LOAD(2, wk, 64);
        AMX_DPBSSD(4, 0, 2);
        AMX_DPBSSD(6, 1, 2);
        if (np > 1) {
            AMX_LOAD(3, wk + pw, 64);
            AMX_DPBSSD(5, 0, 3);
            AMX_DPBSSD(7, 1, 3);
        }
    }
    AMX_FINISH(4, i, 16, p, m0);
    AMX_FINISH(6, i + 16, mr - 16, p, m0);
    if (np > 1) {
        AMX_FINISH(5, i, 16, p + 1, m1);
        AMX_FINISH(7, i + 16, mr - 16, p + 1, m1);
    }
}

/* 8-bit activations, all M rows by the NP (1..4) panels from P. More than 16 rows: a pair of panels
 * at a time, swept by every pair of row tiles, so that its bytes are read from the first level
 * cache after the first pair. */
static ISA_AMX void amx8_group(const struct qlin *g, int p, int np, __mmask16 last)
{
    if (g->M <= 16) {
        if (np == 4)
            amx8_panels(g, 0, g->M, p, 4, last);
        else if (np == 3)
            amx8_panels(g, 0, g->M, p, 3, last);
        else if (np == 2)
            amx8_panels(g, 0, g->M, p, 2, last);
        else
            amx8_panels(g, 0, g->M, p, 1, last);
        return;
    }
    for (int c = 0; c < np; c += 2)
        for (int i = 0; i < g->M; i += 32) {
            int mr = g->M - i < 32 ? g->M - i : 32;
            if (np - c == 1)
                mr > 16 ? amx8_rows2(g, i, mr, p + c, 1, last, 0) : amx8_panels(g, i, mr, p + c, 1, last);
            else {
                __mmask16 m1 = np - c == 2 ? last : (__mmask16)0xFFFF;
                mr > 16 ? amx8_rows2(g, i, mr, p + c, 2, 0xFFFF, m1) : amx8_panels(g, i, mr, p + c, 2, m1);
            }
        }
}

ISA_AMX void cpu_q_amx_group(const struct qlin *g, int p, int np, __mmask16 last)
{
    if (g->As8) {
        amx8_group(g, p, np, last);
        return;
    }
    for (int c = 0; c < np; c += 2) /* each pair of panels swept by every row tile (as amx8_group) */
        for (int i = 0; i < g->M; i += 16) {
            int mr = g->M - i < 16 ? g->M - i : 16;
            if (np - c >= 2)
                amx_panels(g, i, mr, p + c, 1, (__mmask16)0xFFFF, np - c == 2 ? last : (__mmask16)0xFFFF);
            else
                amx_panels(g, i, mr, p + c, 0, last, last);
        }
}
