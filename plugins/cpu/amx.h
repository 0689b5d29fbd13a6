/* amx.h: the AMX tile instructions of the int8 linear layer's AMX path (linear_q_amx.c) and of
 * the bf16 products (gemm_bf16_amx.c), as GCC's intrinsics; or, where CPU_AMX_EMULATE is defined, as C functions that follow the pseudo-code of
 * Intel's instruction set reference, so that tests run the tile kernel on CPUs without AMX
 * (tests/unit/test_amx.c). Tile numbers are constants. The emulation aborts where the hardware
 * would fault: a tile used before a configuration is loaded, or operand shapes that do not match. */
#ifndef NMT_CPU_AMX_H
#define NMT_CPU_AMX_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* The 64-byte operand of ldtilecfg (palette 1): each tile's bytes per row and rows. */
struct amx_cfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

#ifndef CPU_AMX_EMULATE

#define AMX_LOADCONFIG(cfg) _tile_loadconfig(cfg)
#define AMX_RELEASE() _tile_release()
#define AMX_ZERO(t) _tile_zero(t)
#define AMX_LOAD(t, base, stride) _tile_loadd(t, base, stride)
#define AMX_STORE(t, base, stride) _tile_stored(t, base, stride)
#define AMX_DPBUSD(c, a, b) _tile_dpbusd(c, a, b)
#define AMX_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define AMX_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)

#else

#include <stdio.h>
#include <stdlib.h>

/* The tile registers of this thread: 8 tiles of 16 rows of 64 bytes, and the configuration. */
static _Thread_local struct {
    struct amx_cfg cfg;
    uint8_t t[8][16][64];
    int configured;
} amx_emu;

static void amx_emu_fail(const char *what)
{
    fprintf(stderr, "amx emulation: %s\n", what);
    abort();
}

static void amx_emu_check(int t)
{
    if (!amx_emu.configured)
        amx_emu_fail("tile used with no configuration loaded");
    if (t < 0 || t > 7 || amx_emu.cfg.rows[t] == 0 || amx_emu.cfg.colsb[t] == 0)
        amx_emu_fail("tile not configured");
}

/* ldtilecfg: palette 1 only; every tile's rows <= 16 and bytes per row <= 64; the tiles become 0. */
static inline void amx_emu_loadconfig(const void *p)
{
    memcpy(&amx_emu.cfg, p, sizeof amx_emu.cfg);
    if (amx_emu.cfg.palette != 1 || amx_emu.cfg.start_row != 0)
        amx_emu_fail("palette other than 1, or start_row");
    for (int t = 0; t < 8; t++)
        if (amx_emu.cfg.rows[t] > 16 || amx_emu.cfg.colsb[t] > 64)
            amx_emu_fail("tile larger than 16 rows of 64 bytes");
    memset(amx_emu.t, 0, sizeof amx_emu.t);
    amx_emu.configured = 1;
}

/* tilerelease: back to the initial state (no configuration). */
static inline void amx_emu_release(void)
{
    memset(&amx_emu, 0, sizeof amx_emu);
}

static inline void amx_emu_zero(int t)
{
    amx_emu_check(t);
    memset(amx_emu.t[t], 0, sizeof amx_emu.t[t]);
}

/* tileloadd: row r from base + r * stride, colsb bytes; the rest of the tile 0. */
static inline void amx_emu_load(int t, const void *base, long stride)
{
    amx_emu_check(t);
    memset(amx_emu.t[t], 0, sizeof amx_emu.t[t]);
    for (int r = 0; r < amx_emu.cfg.rows[t]; r++)
        memcpy(amx_emu.t[t][r], (const uint8_t *)base + (long)r * stride, amx_emu.cfg.colsb[t]);
}

/* tilestored: row r to base + r * stride, colsb bytes. */
static inline void amx_emu_store(int t, void *base, long stride)
{
    amx_emu_check(t);
    for (int r = 0; r < amx_emu.cfg.rows[t]; r++)
        memcpy((uint8_t *)base + (long)r * stride, amx_emu.t[t][r], amx_emu.cfg.colsb[t]);
}

/* tdpbusd (a_signed 0) and tdpbssd (1): for each row m of C, each 4-byte group k of A's row m and
 * each 32-bit column n of C, C[m][n] += the sum of the 4 products of A[m] bytes 4k..4k+3 (unsigned,
 * or signed) with B[k] bytes 4n..4n+3 (signed), in wrapping 32-bit arithmetic. Shapes: C's rows
 * are A's, A's groups are B's rows, C's columns are B's. */
static inline void amx_emu_dpb(int c, int a, int b, int a_signed)
{
    amx_emu_check(c), amx_emu_check(a), amx_emu_check(b);
    const struct amx_cfg *g = &amx_emu.cfg;
    if (g->rows[c] != g->rows[a] || g->colsb[a] / 4 != g->rows[b] || g->colsb[c] != g->colsb[b] || g->colsb[c] % 4 ||
        g->colsb[a] % 4)
        amx_emu_fail("tdpb: operand shapes do not match");
    int K = g->colsb[a] / 4, N = g->colsb[c] / 4;
    for (int m = 0; m < g->rows[c]; m++) {
        uint32_t acc[16];
        memcpy(acc, amx_emu.t[c][m], sizeof acc);
        for (int k = 0; k < K; k++) {
            const uint8_t *x = amx_emu.t[a][m] + 4 * k;
            const int8_t *y = (const int8_t *)amx_emu.t[b][k];
            int32_t x0 = a_signed ? (int8_t)x[0] : x[0], x1 = a_signed ? (int8_t)x[1] : x[1];
            int32_t x2 = a_signed ? (int8_t)x[2] : x[2], x3 = a_signed ? (int8_t)x[3] : x[3];
            for (int n = 0; n < N; n++) /* the 4 products' sum is far within 32 bits; C wraps */
                acc[n] += (uint32_t)(x0 * y[4 * n] + x1 * y[4 * n + 1] + x2 * y[4 * n + 2] + x3 * y[4 * n + 3]);
        }
        memcpy(amx_emu.t[c][m], acc, sizeof acc);
    }
}

/* A float32 with DAZ and FTZ: below the normal range (exponent bits 0) it reads as 0 of its sign. */
static inline float amx_emu_flush(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (!(u & 0x7f800000u))
        u &= 0x80000000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The bfloat16 at byte offset 2 * I of tile row R, as a float32 (DAZ). */
static inline float amx_emu_bf16(const uint8_t *r, int i)
{
    uint16_t h;
    memcpy(&h, r + 2 * i, sizeof h);
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return amx_emu_flush(x);
}

/* tdpbf16ps: for each row m of C and each float32 column n, two running sums from 0, of the even
 * and of the odd elements of the bf16 pairs: for each pair k of A's row m, in increasing k,
 * e += A[m].bf16[2k] * B[k].bf16[2n] and o += A[m].bf16[2k+1] * B[k].bf16[2n+1], each a fused
 * multiply-add rounded to nearest even; then C[m][n] += e + o (the sum first). Inputs and results
 * below float32's normal range are 0 (DAZ, FTZ). Shapes as tdpbssd's. */
__attribute__((target("fma"))) static inline void amx_emu_dpbf16ps(int c, int a, int b)
{
    amx_emu_check(c), amx_emu_check(a), amx_emu_check(b);
    const struct amx_cfg *g = &amx_emu.cfg;
    if (g->rows[c] != g->rows[a] || g->colsb[a] / 4 != g->rows[b] || g->colsb[c] != g->colsb[b] || g->colsb[c] % 4 ||
        g->colsb[a] % 4)
        amx_emu_fail("tdpbf16ps: operand shapes do not match");
    int K = g->colsb[a] / 4, N = g->colsb[c] / 4;
    for (int m = 0; m < g->rows[c]; m++) {
        float e[16] = { 0 }, o[16] = { 0 }, acc[16];
        for (int k = 0; k < K; k++) {
            float x0 = amx_emu_bf16(amx_emu.t[a][m], 2 * k), x1 = amx_emu_bf16(amx_emu.t[a][m], 2 * k + 1);
            for (int n = 0; n < N; n++) {
                e[n] = amx_emu_flush(__builtin_fmaf(x0, amx_emu_bf16(amx_emu.t[b][k], 2 * n), e[n]));
                o[n] = amx_emu_flush(__builtin_fmaf(x1, amx_emu_bf16(amx_emu.t[b][k], 2 * n + 1), o[n]));
            }
        }
        memcpy(acc, amx_emu.t[c][m], sizeof acc);
        for (int n = 0; n < N; n++)
            acc[n] = amx_emu_flush(amx_emu_flush(acc[n]) + amx_emu_flush(e[n] + o[n]));
        memcpy(amx_emu.t[c][m], acc, sizeof acc);
    }
}

#define AMX_LOADCONFIG(cfg) amx_emu_loadconfig(cfg)
#define AMX_RELEASE() amx_emu_release()
#define AMX_ZERO(t) amx_emu_zero(t)
#define AMX_LOAD(t, base, stride) amx_emu_load(t, base, (long)(stride))
#define AMX_STORE(t, base, stride) amx_emu_store(t, base, (long)(stride))
#define AMX_DPBUSD(c, a, b) amx_emu_dpb(c, a, b, 0)
#define AMX_DPBSSD(c, a, b) amx_emu_dpb(c, a, b, 1)
#define AMX_DPBF16PS(c, a, b) amx_emu_dpbf16ps(c, a, b)

#endif
#endif
