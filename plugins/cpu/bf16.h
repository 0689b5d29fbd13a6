/* bf16.h: bfloat16 values of the cpu backend's mixed-precision products (mixed.c, gemm_bf16_amx.c):
 * the high 16 bits of a float32, rounded to nearest even. */
#ifndef NMT_CPU_BF16_H
#define NMT_CPU_BF16_H

#include <stdint.h>
#include <string.h>

/* X rounded to bfloat16 (nearest even); NaN stays NaN (made quiet), infinities stay. */
static inline uint16_t f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign, set the quiet bit */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The bfloat16 H as a float32 (exact). */
static inline float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

#endif
