/* Helpers shared by the two stage-2 CPU kernels (relevance.c, relevance_qk.c):
 * reading f32/f16/bf16 vectors with any element stride as float, finiteness
 * checks on the raw bits, a compensated row sum, and a vectorisable exp for
 * the online softmax. */
#ifndef TODRE_SRC_CPU_RELEVANCE_UTIL_H
#define TODRE_SRC_CPU_RELEVANCE_UTIL_H

#include <stdint.h>
#include <string.h>

#include "../backend.h"

/* Hot loops are compiled for AVX-512, AVX2 and the baseline (the library
 * itself is built for the baseline ISA): each is written once as an
 * always-inline body and wrapped by one function per level with
 * TODRE_REL_AVX512 / TODRE_REL_AVX2 (per-function target attributes that gcc
 * and clang both accept); todre_rel_level() picks the wrapper from the one
 * ISA detection (cpu_isa.h). A machine always runs the same variant, so
 * results are reproducible. */
#if defined(__x86_64__) && defined(__GNUC__)
#define TODRE_REL_X86 1
#define TODRE_REL_AVX512 __attribute__((target("avx512f")))
#define TODRE_REL_AVX2 __attribute__((target("avx2")))
#endif
#define TODRE_REL_BODY static inline __attribute__((always_inline))

/* Which variant of a hot loop runs here. */
enum todre_rel_level { TODRE_REL_GENERIC = 0, TODRE_REL_LEVEL_AVX2 = 1, TODRE_REL_LEVEL_AVX512 = 2 };
enum todre_rel_level todre_rel_level(void);

static inline size_t todre_rel_esize(todre_dtype dt) { return dt == TODRE_DTYPE_F32 ? 4u : 2u; }

/* Address of element @p off (in elements) from @p base. */
static inline const void *todre_rel_at(const void *base, todre_dtype dt, int64_t off)
{
    return (const char *)base + off * (int64_t)todre_rel_esize(dt);
}

/* dst[e] = (float)src[e * stride] for e < n. f16 and bf16 convert exactly. */
void todre_rel_load(float *dst, const void *src, todre_dtype dt, int64_t stride, int64_t n);

/* 1 if none of the n values src[e * stride] is NaN or Inf, else 0. */
int todre_rel_finite(const void *src, todre_dtype dt, int64_t stride, int64_t n);

/* Sum of a[0..n) in double. Blocks of float lanes keep the loop vectorised;
 * the order is fixed, so the result is reproducible. Finite values give a
 * finite sum (a block whose float sum overflows is summed in double). */
double todre_rel_sum(const float *a, int64_t n);

/* exp(x) for x <= 0 (Cephes expf: range reduction to [-ln2/2, ln2/2], degree-6
 * polynomial, relative error about 2e-7). Results below exp(-87) are
 * flushed to about 1.6e-38, which no softmax sum can notice. Written so that
 * `#pragma omp simd` loops vectorise it without -ffast-math.
 * Any argument is safe: NaN and -Inf are taken as -87 and anything above 0
 * as 0 (the comparisons are false for NaN), so the conversion of n to
 * int32_t below always has a value in [-126, 0]. Callers still must not pass
 * NaN: they check their scores first (relevance_qk.c). */
static inline float todre_rel_exp_nonpos(float x)
{
    x = x >= -87.0f ? x : -87.0f;
    x = x <= 0.0f ? x : 0.0f;
    float t = x * 1.44269504088896341f;
    float n = (t + 12582912.0f) - 12582912.0f; /* round to nearest: 1.5 * 2^23 */
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#endif /* TODRE_SRC_CPU_RELEVANCE_UTIL_H */
