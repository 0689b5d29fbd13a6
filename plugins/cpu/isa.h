/* isa.h: the instruction sets of the cpu plugin's kernels. One target attribute per set, each a
 * superset of the narrower sets it builds on, used by every kernel written for that set; the
 * baseline-or-wider loops are cloned (CPU_VEC); the runtime choice is cpu_isa(). Without -ffast-math
 * and with contraction off (-std=c11), enabling more of an instruction set changes no result: only
 * what intrinsics a function may use, and how element-wise loops are vectorised. */
#ifndef NMT_CPU_ISA_H
#define NMT_CPU_ISA_H

#define ISA_AVX2 __attribute__((target("avx2,fma")))
#define ISA_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))
#define ISA_AVX512_BF16 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512bf16,avx2,fma")))
#define ISA_AVX512_VNNI __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512vnni,avx2,fma")))
#define ISA_AMX                                                                                                 \
    __attribute__((target("amx-tile,amx-int8,amx-bf16,avx512f,avx512dq,avx512bw,avx512vl,avx512vnni,avx2,fma")))

/* CPU_VEC_BODY(NAME) { ... } defines NAME, a pool_for body (void *arg, int64_t lo, int64_t hi, int
 * tid), from the block after it: a hot loop compiled three times (AVX-512, AVX2, baseline), the one
 * run picked per call by cpu_isa() (feature checks, not CPU model names, which miss newer CPUs), so
 * that NMT_CPU_ISA caps these loops as it caps the hand-written kernels. Without -ffast-math the
 * three compute the same bits: only element-wise work is vectorised. */
#define CPU_VEC_ARGS void *arg, int64_t lo, int64_t hi, int tid
#define CPU_VEC_BODY(name)                                                                              \
    static inline __attribute__((always_inline)) void name##_loop(CPU_VEC_ARGS);                       \
    ISA_AVX512 static void name##_avx512(CPU_VEC_ARGS) { name##_loop(arg, lo, hi, tid); }              \
    ISA_AVX2 static void name##_avx2(CPU_VEC_ARGS) { name##_loop(arg, lo, hi, tid); }                  \
    static void name##_base(CPU_VEC_ARGS) { name##_loop(arg, lo, hi, tid); }                           \
    static void name(CPU_VEC_ARGS)                                                                      \
    {                                                                                                   \
        int isa = cpu_isa();                                                                            \
        (isa >= CPU_ISA_AVX512 ? name##_avx512 : isa == CPU_ISA_AVX2 ? name##_avx2 : name##_base)(arg, lo, \
                                                                                                  hi, tid); \
    }                                                                                                   \
    static inline __attribute__((always_inline)) void name##_loop(CPU_VEC_ARGS)

/* The instruction sets of the hand-written kernels (gemm_rowinv, linear_rowinv), widest last.
 * VNNI is AVX-512 with AVX512-VNNI: the float32 kernels take their AVX-512 path on it, the int8
 * linear layer its vpdpwssd path. AMX is VNNI with AMX-TILE, AMX-INT8 and AMX-BF16 granted by the
 * kernel: the int8 layer's tile path (linear_q_amx.c) and the bf16 products' (gemm_bf16_amx.c), the
 * rest as on VNNI. */
enum { CPU_ISA_PORTABLE, CPU_ISA_AVX2, CPU_ISA_AVX512, CPU_ISA_VNNI, CPU_ISA_AMX };
/* The widest set the CPU has, capped by NMT_CPU_ISA (portable, avx2, avx512, avx512vnni or amx;
 * read per call, so tests can check every path; cpu_isa_env_error checks its value). */
int cpu_isa(void);
/* NULL when NMT_CPU_ISA is unset, empty or one of the names above, else a message naming it. */
const char *cpu_isa_env_error(void);
/* The path gemm_rowinv and linear_rowinv take now: "amx", "avx512vnni", "avx512", "avx2" or
 * "portable" (isa.c). */
const char *cpu_isa_name(void);

#endif
