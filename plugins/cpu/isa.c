/* isa.c: which instruction-set path the kernels of the cpu plugin take: the widest the CPU has,
 * capped by NMT_CPU_ISA (isa.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isa.h"
#include "linear_q.h"

static const char *const isa_names[] = { "portable", "avx2", "avx512", "avx512vnni", "amx" };

/* The cap NMT_CPU_ISA sets: the index of its name, the widest when unset or empty, -1 when unknown. */
static int isa_env_cap(void)
{
    const char *e = getenv("NMT_CPU_ISA");
    if (!e || !*e)
        return CPU_ISA_AMX;
    for (int i = CPU_ISA_PORTABLE; i <= CPU_ISA_AMX; i++)
        if (!strcmp(e, isa_names[i]))
            return i;
    return -1;
}

const char *cpu_isa_env_error(void)
{
    static char msg[160];
    if (isa_env_cap() >= 0)
        return NULL;
    snprintf(msg, sizeof msg, "NMT_CPU_ISA='%.40s' is not one of portable, avx2, avx512, avx512vnni, amx",
             getenv("NMT_CPU_ISA"));
    return msg;
}

int cpu_isa(void)
{
    static int cpu = -1;
    if (cpu < 0) {
        __builtin_cpu_init();
        int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                     __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
        int vnni = avx512 && __builtin_cpu_supports("avx512vnni");
#ifdef CPU_AMX_EMULATE /* the tests' build: the AMX path on the tile emulation of amx.h */
        int amx = vnni;
#else
        int amx = vnni && __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-int8") &&
                  __builtin_cpu_supports("amx-bf16") && cpu_amx_request();
#endif
        cpu = amx      ? CPU_ISA_AMX
              : vnni   ? CPU_ISA_VNNI
              : avx512 ? CPU_ISA_AVX512
              : avx2   ? CPU_ISA_AVX2
                       : CPU_ISA_PORTABLE;
    }
    int cap = isa_env_cap();
    cap = cap < 0 ? CPU_ISA_AMX : cap; /* refused when the backend opens (cpu_isa_env_error) */
    return cpu < cap ? cpu : cap;
}

const char *cpu_isa_name(void) { return isa_names[cpu_isa()]; }
