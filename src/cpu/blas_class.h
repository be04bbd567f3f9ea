/* How fast OpenBLAS's chosen kernels are against the CPU's own class: below
 * 1, the CPU backend makes Gram matrices on its own FMA kernels instead
 * (cpu_backend.c, gram_on_fma). Internal; header-only so that
 * tests/core/test_select_plan.c checks it directly.
 *
 * OpenBLAS picks its kernels by CPU model, and an OpenBLAS older than the
 * CPU may not know it: Debian 12's 0.3.21 runs its SSE3 kernels ("Prescott")
 * on Emerald Rapids, where a Gram matrix of n = 2880, d = 4096 then takes
 * 4.4 times as long as with its AVX-512 ones (cblas_ssyrk, f32, on 2 cores of
 * an Emerald Rapids with OPENBLAS_CORETYPE set to each: SkylakeX 134 ms,
 * Haswell 288, Sandybridge 404, Prescott 587). The planner's GRAM rate
 * assumes kernels of the CPU's own class, which libtodre's FMA kernels match
 * where OpenBLAS reports a
 * lesser one (docs/building.md). Another BLAS behind cblas (no
 * openblas_get_corename: core NULL), a name not listed, or the generic
 * level: no change. `todre info` prints the core OpenBLAS chose. */
#ifndef TODRE_SRC_CPU_BLAS_CLASS_H
#define TODRE_SRC_CPU_BLAS_CLASS_H

#include <stddef.h>
#include <strings.h>

#include "cpu_isa.h"

#define TODRE_BLAS_SSE 1.0
#define TODRE_BLAS_AVX 1.45
#define TODRE_BLAS_AVX2 2.05
#define TODRE_BLAS_AVX512 4.4

/* Relative throughput of an OpenBLAS core's kernels; 0 = not known. */
static inline double todre_cpu_blas_class_rate(const char *core)
{
    static const struct {
        const char *name;
        double rate;
    } cores[] = {
        {"SkylakeX", TODRE_BLAS_AVX512},  {"Cooperlake", TODRE_BLAS_AVX512},
        {"SapphireRapids", TODRE_BLAS_AVX512}, {"Haswell", TODRE_BLAS_AVX2},
        {"Zen", TODRE_BLAS_AVX2},         {"Excavator", TODRE_BLAS_AVX2},
        {"Sandybridge", TODRE_BLAS_AVX},  {"Bulldozer", TODRE_BLAS_AVX},
        {"Piledriver", TODRE_BLAS_AVX},   {"Steamroller", TODRE_BLAS_AVX},
        {"Prescott", TODRE_BLAS_SSE},     {"Core2", TODRE_BLAS_SSE},
        {"Penryn", TODRE_BLAS_SSE},       {"Dunnington", TODRE_BLAS_SSE},
        {"Nehalem", TODRE_BLAS_SSE},      {"Atom", TODRE_BLAS_SSE},
        {"Barcelona", TODRE_BLAS_SSE},    {"Opteron", TODRE_BLAS_SSE},
        {"Opteron_SSE3", TODRE_BLAS_SSE}, {"Bobcat", TODRE_BLAS_SSE},
        {"Nano", TODRE_BLAS_SSE},         {"Katmai", TODRE_BLAS_SSE},
        {"Coppermine", TODRE_BLAS_SSE},   {"Northwood", TODRE_BLAS_SSE},
        {"Banias", TODRE_BLAS_SSE},       {"Athlon", TODRE_BLAS_SSE},
    };
    for (size_t i = 0; core && i < sizeof cores / sizeof cores[0]; i++)
        if (strcasecmp(core, cores[i].name) == 0) return cores[i].rate;
    return 0;
}

/* In (0, 1]: BLAS core @p core's throughput against ISA level @p isa's class. */
static inline double todre_cpu_blas_rate_factor(const char *core, enum todre_cpu_isa isa)
{
    double want = isa >= TODRE_CPU_ISA_AVX512 ? TODRE_BLAS_AVX512
                : isa >= TODRE_CPU_ISA_AVX2   ? TODRE_BLAS_AVX2
                                              : 0;
    double have = todre_cpu_blas_class_rate(core);
    return want > 0 && have > 0 && have < want ? have / want : 1.0;
}

#endif /* TODRE_SRC_CPU_BLAS_CLASS_H */
