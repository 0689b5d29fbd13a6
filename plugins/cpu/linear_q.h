/* linear_q.h: what the paths of the int8 linear layer share: its operands, where a panel's bytes
 * are, the float epilogue of 16 columns, and the AMX path (linear_q_amx.c). linear_q.c states
 * the scheme and the packed layout. Header-only apart from the AMX functions. */
#ifndef NMT_CPU_LINEAR_Q_H
#define NMT_CPU_LINEAR_Q_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "isa.h"

#define QPW 16 /* columns per panel */

/* The operands of one call. */
struct qlin {
    const int16_t *A;  /* (M, ldq) quantised rows, in act_pos order (linear_q.c) */
    const float *sa;   /* (M) their scales */
    const float *sw;   /* (Np) weight scales */
    const uint8_t *Wp; /* the panels */
    const float *bias;
    float *C;
    int M, N, Kp, ldq, ldc, relu;
    const uint8_t *Alo; /* AMX only: (M rounded up to 16, ld8) the low bytes of A, columns in order */
    const int8_t *Ahi;  /* the high parts, as Alo */
    int ld8;
    const uint8_t *Au8;  /* 8- and 7-bit activations on VNNI: (M, ld8) the unsigned bytes qA + 128, in order */
    const int32_t *comp; /* 8- and 7-bit activations: (Np) 128 * sum_k qW[j,k], or NULL */
    const int8_t *As8;   /* 8-bit activations on AVX2, 8- and 7-bit on AMX: (M, ld8) the values qA, in order
                          * (AMX: M rounded up to 16, the rows past M zero) */
    const uint8_t *Am8;  /* and their magnitudes |qA|, as As8 */
    const uint8_t *Au7;  /* 7-bit activations on AVX2: (M, ld8) the unsigned bytes qA + 64, in order */
    int pf_shift;        /* the spacing of the requests for the next group's lines (cpu_pf_shift) */
};

/* The first byte of panel P's group of the bytes K..K+3. */
static inline __attribute__((always_inline)) const uint8_t *qpanel(const struct qlin *g, int p, int k)
{
    return g->Wp + ((size_t)p * (size_t)g->Kp + (size_t)k) * QPW;
}


/* The epilogue of row I, columns J..J+15 (those in mask M): C = ((float)S * s_j) * a_i + bias, then
 * ReLU if asked, from the exact sums S; the same operations as the portable path's, so the same bits. */
static inline __attribute__((always_inline)) ISA_AVX512_VNNI void qstore16(const struct qlin *g, int i, int j, __mmask16 m,
                                                                  __m512i S)
{
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(S), _mm512_loadu_ps(g->sw + j));
    v = _mm512_mul_ps(v, _mm512_set1_ps(g->sa[i]));
    if (g->bias)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, g->bias + j));
    if (g->relu)
        v = _mm512_max_ps(v, _mm512_setzero_ps());
    _mm512_mask_storeu_ps(g->C + (size_t)i * (size_t)g->ldc + (size_t)j, m, v);
}

/* linear_q_amx.c. The AMX path takes layers whose Kp is a multiple of 64, on the rows of A split
 * into low and high bytes (cpu_q_amx_split), or with 8-bit activations on their signed bytes (As8),
 * M rounded up to 16 rows (the extra rows are read, their results dropped). */

/* Asks Linux for the AMX tile state of this process; 1 when granted (AMX instructions may run). */
int cpu_amx_request(void);
/* Splits the quantised row Q (Kp int16 in act_pos order, -2047..2047) into LO = a mod 256 (0..255)
 * and HI = (a - LO) / 256 (-8..7), natural column order: a = 256 * HI + LO. AVX-512 code (the
 * AMX CPUs have it). */
void cpu_q_amx_split(uint8_t *lo, int8_t *hi, const int16_t *q, int Kp);
/* Loads the tile configuration of this thread (before cpu_q_amx_rows), and releases it. */
void cpu_q_amx_begin(void);
void cpu_q_amx_end(void);
/* All M rows of C in the NP (1..4) panels from P; LAST masks the columns of the last panel that
 * exist. */
void cpu_q_amx_group(const struct qlin *g, int p, int np, __mmask16 last);

#endif
