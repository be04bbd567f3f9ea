/* Element access for the stage-2 CPU kernels; see relevance_util.h. */
#include "relevance_util.h"

#include "../half.h"
#include "cpu_isa.h"

#ifdef TODRE_REL_X86
#include <immintrin.h>
#endif

enum todre_rel_level todre_rel_level(void)
{
    enum todre_cpu_isa isa = todre_cpu_isa();
    if (isa >= TODRE_CPU_ISA_AVX512) return TODRE_REL_LEVEL_AVX512;
    if (isa >= TODRE_CPU_ISA_AVX2) return TODRE_REL_LEVEL_AVX2;
    return TODRE_REL_GENERIC;
}

#ifdef TODRE_REL_X86
/* The portable f16 decoder has branches GCC cannot vectorise; F16C (part of
 * the AVX2 level) converts eight values per instruction, exactly, Inf and NaN
 * included. */
__attribute__((target("avx,f16c"))) static void load_f16_f16c(float *dst, const uint16_t *src,
                                                              int64_t n)
{
    int64_t e = 0;
    for (; e + 8 <= n; e += 8)
        _mm256_storeu_ps(dst + e, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + e))));
    for (; e < n; e++) dst[e] = todre_f16_to_f32(src[e]);
}
#endif

static void load_f16(float *dst, const uint16_t *src, int64_t stride, int64_t n)
{
#ifdef TODRE_REL_X86
    if (stride == 1 && todre_rel_level() >= TODRE_REL_LEVEL_AVX2) {
        load_f16_f16c(dst, src, n);
        return;
    }
#endif
    for (int64_t e = 0; e < n; e++) dst[e] = todre_f16_to_f32(src[e * stride]);
}

void todre_rel_load(float *dst, const void *src, todre_dtype dt, int64_t stride, int64_t n)
{
    if (dt == TODRE_DTYPE_F32) {
        const float *s = src;
        if (stride == 1) {
            memcpy(dst, s, (size_t)n * sizeof *dst);
            return;
        }
        for (int64_t e = 0; e < n; e++) dst[e] = s[e * stride];
    } else if (dt == TODRE_DTYPE_BF16) {
        const uint16_t *s = src;
        for (int64_t e = 0; e < n; e++) {
            union { uint32_t u; float f; } v;
            v.u = (uint32_t)s[e * stride] << 16;
            dst[e] = v.f;
        }
    } else {
        load_f16(dst, src, stride, n);
    }
}

/* A value is NaN or Inf exactly when all its exponent bits are set. */
TODRE_REL_BODY int finite_u32_body(const uint32_t *s, int64_t stride, int64_t n, uint32_t mask)
{
    uint32_t bad = 0;
    if (stride == 1) {
#pragma omp simd reduction(| : bad)
        for (int64_t e = 0; e < n; e++) bad |= (uint32_t)((s[e] & mask) == mask);
    } else {
        for (int64_t e = 0; e < n; e++) bad |= (uint32_t)((s[e * stride] & mask) == mask);
    }
    return !bad;
}

TODRE_REL_BODY int finite_u16_body(const uint16_t *s, int64_t stride, int64_t n, uint16_t mask)
{
    uint32_t bad = 0;
    if (stride == 1) {
#pragma omp simd reduction(| : bad)
        for (int64_t e = 0; e < n; e++) bad |= (uint32_t)((s[e] & mask) == mask);
    } else {
        for (int64_t e = 0; e < n; e++) bad |= (uint32_t)((s[e * stride] & mask) == mask);
    }
    return !bad;
}

/* Float partial sums over blocks of 256 (error ~1e-7 relative with the simd
 * lanes), carried in double across blocks so that long rows stay exact to
 * well below the 1e-5 the paths must agree to. Finite values near FLT_MAX
 * overflow a float partial sum (to Inf, or NaN from Inf - Inf); such a
 * block is summed again in double, where 256 finite floats cannot overflow,
 * so finite input always gives a finite sum. */
TODRE_REL_BODY double sum_body(const float *a, int64_t n)
{
    double total = 0.0;
    for (int64_t j0 = 0; j0 < n; j0 += 256) {
        int64_t m = n - j0 < 256 ? n - j0 : 256;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < m; j++) s += a[j0 + j];
        if (s - s == 0.0f) { /* finite */
            total += s;
            continue;
        }
        double d = 0.0;
        for (int64_t j = 0; j < m; j++) d += a[j0 + j];
        total += d;
    }
    return total;
}

/* One function per level around each body (see relevance_util.h). */
#define REL_VARIANT(attr, suffix)                                                         \
    attr static int finite_u32_##suffix(const uint32_t *s, int64_t st, int64_t n, uint32_t m) \
    {                                                                                     \
        return finite_u32_body(s, st, n, m);                                              \
    }                                                                                     \
    attr static int finite_u16_##suffix(const uint16_t *s, int64_t st, int64_t n, uint16_t m) \
    {                                                                                     \
        return finite_u16_body(s, st, n, m);                                              \
    }                                                                                     \
    attr static double sum_##suffix(const float *a, int64_t n) { return sum_body(a, n); }

REL_VARIANT(, generic)
#ifdef TODRE_REL_X86
REL_VARIANT(TODRE_REL_AVX2, avx2)
REL_VARIANT(TODRE_REL_AVX512, avx512)
#endif

static int finite_u32(const uint32_t *s, int64_t stride, int64_t n, uint32_t mask)
{
#ifdef TODRE_REL_X86
    switch (todre_rel_level()) {
    case TODRE_REL_LEVEL_AVX512: return finite_u32_avx512(s, stride, n, mask);
    case TODRE_REL_LEVEL_AVX2: return finite_u32_avx2(s, stride, n, mask);
    case TODRE_REL_GENERIC: break;
    }
#endif
    return finite_u32_generic(s, stride, n, mask);
}

static int finite_u16(const uint16_t *s, int64_t stride, int64_t n, uint16_t mask)
{
#ifdef TODRE_REL_X86
    switch (todre_rel_level()) {
    case TODRE_REL_LEVEL_AVX512: return finite_u16_avx512(s, stride, n, mask);
    case TODRE_REL_LEVEL_AVX2: return finite_u16_avx2(s, stride, n, mask);
    case TODRE_REL_GENERIC: break;
    }
#endif
    return finite_u16_generic(s, stride, n, mask);
}

int todre_rel_finite(const void *src, todre_dtype dt, int64_t stride, int64_t n)
{
    switch (dt) {
    case TODRE_DTYPE_F32: return finite_u32(src, stride, n, 0x7f800000u);
    case TODRE_DTYPE_F16: return finite_u16(src, stride, n, 0x7c00u);
    default: return finite_u16(src, stride, n, 0x7f80u);
    }
}

double todre_rel_sum(const float *a, int64_t n)
{
#ifdef TODRE_REL_X86
    switch (todre_rel_level()) {
    case TODRE_REL_LEVEL_AVX512: return sum_avx512(a, n);
    case TODRE_REL_LEVEL_AVX2: return sum_avx2(a, n);
    case TODRE_REL_GENERIC: break;
    }
#endif
    return sum_generic(a, n);
}
