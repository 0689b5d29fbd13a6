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
 * split: one tdpbssd a panel and 64 values of k gives S (127 * 127 * 8192 < 2^31). Tiles: 0 A,
 * 1..3 the panels' B (tile 1 again for a fourth panel), 4..7 the sums of up to 4 panels. */
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

void cpu_q_amx_split(uint8_t *lo, int8_t *hi, const int16_t *q, int Kp)
{
    for (int k = 0; k < Kp; k += 4) {
        const int16_t a[4] = { q[k], q[k + 2], q[k + 1], q[k + 3] }; /* act_pos: 0, 2, 1, 3 */
        for (int t = 0; t < 4; t++) {
            int v = a[t], l = v & 255; /* two's complement: v mod 256 */
            lo[k + t] = (uint8_t)l;
            hi[k + t] = (int8_t)((v - l) / 256);
        }
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

/* 8-bit activations: rows I..I+15 by the NP (1..4, a constant once inlined) panels from P; LAST
 * masks the last panel's columns that exist; the first MR rows are stored. */
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
    int32_t s[4][16][16] __attribute__((aligned(64)));
    AMX_STORE(4, s[0], 64);
    if (np > 1)
        AMX_STORE(5, s[1], 64);
    if (np > 2)
        AMX_STORE(6, s[2], 64);
    if (np > 3)
        AMX_STORE(7, s[3], 64);
    for (int c = 0; c < np; c++)
        for (int r = 0; r < mr; r++)
            qstore16(g, i + r, (p + c) * QPW, c == np - 1 ? last : (__mmask16)0xFFFF, _mm512_load_si512(s[c][r]));
}

ISA_AMX void cpu_q_amx_rows(const struct qlin *g, int i, int mr, int p, int np, __mmask16 last)
{
    if (g->As8) {
        if (np == 4)
            amx8_panels(g, i, mr, p, 4, last);
        else if (np == 3)
            amx8_panels(g, i, mr, p, 3, last);
        else if (np == 2)
            amx8_panels(g, i, mr, p, 2, last);
        else
            amx8_panels(g, i, mr, p, 1, last);
        return;
    }
    for (int c = 0; c < np; c += 2) {
        if (np - c >= 2)
            amx_panels(g, i, mr, p + c, 1, (__mmask16)0xFFFF, np - c == 2 ? last : (__mmask16)0xFFFF);
        else
            amx_panels(g, i, mr, p + c, 0, last, last);
    }
}
