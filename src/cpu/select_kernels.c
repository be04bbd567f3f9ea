/* Row kernels of the CPU stage-1 backend (see select_kernels.h). */
#include "select_kernels.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "../half.h"
#include "cpu_isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define TODRE_SEL_X86 1
#include <immintrin.h>
#endif

float todre_sel_load(const void *p, todre_dtype dt)
{
    if (dt == TODRE_DTYPE_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return dt == TODRE_DTYPE_F16 ? todre_f16_to_f32(h) : todre_bf16_to_f32(h);
}

/* ---- portable ------------------------------------------------------------ */

static inline float ld_f32(const void *p, int64_t i) { return ((const float *)p)[i]; }
static inline float ld_f16(const void *p, int64_t i) { return todre_f16_to_f32(((const uint16_t *)p)[i]); }
static inline float ld_bf16(const void *p, int64_t i) { return todre_bf16_to_f32(((const uint16_t *)p)[i]); }

/* Four partial sums so that the compiler may vectorise without reordering
 * anything it was not told to. */
#define SCALAR_KERNELS(T)                                                        \
    static float dot_scalar_##T(const void *row, const float *w, int64_t d)      \
    {                                                                            \
        float a[4] = {0, 0, 0, 0};                                               \
        int64_t i = 0;                                                           \
        for (; i + 4 <= d; i += 4)                                               \
            for (int j = 0; j < 4; j++) a[j] += ld_##T(row, i + j) * w[i + j];   \
        for (; i < d; i++) a[0] += ld_##T(row, i) * w[i];                        \
        return (a[0] + a[1]) + (a[2] + a[3]);                                    \
    }                                                                            \
    static inline double sumsq_body_scalar_##T(const void *row, int64_t len, double *st,    \
                                               int last, const float *w, float *wst,     \
                                               double *dot, const int with_dot)          \
    {                                                                            \
        double s = st[0];                                                        \
        float t = with_dot ? wst[0] : 0.0f;                                      \
        for (int64_t i = 0; i < len; i++) {                                      \
            float x = ld_##T(row, i);                                            \
            double v = x;                                                        \
            s += v * v;                                                          \
            if (with_dot) t += x * w[i];                                         \
        }                                                                        \
        st[0] = s;                                                               \
        if (with_dot) wst[0] = t;                                                \
        if (with_dot && last) *dot = t;                                          \
        return last ? s : 0.0;                                                   \
    }                                                                            \
    static double sumsq_scalar_##T(const void *row, int64_t len, double *st, int last) \
    {                                                                            \
        return sumsq_body_scalar_##T(row, len, st, last, NULL, NULL, NULL, 0);   \
    }                                                                            \
    static double sumsq_dot_scalar_##T(const void *row, int64_t len, double *st, int last, \
                                       const float *w, float *wst, double *dot)  \
    {                                                                            \
        return sumsq_body_scalar_##T(row, len, st, last, w, wst, dot, 1);        \
    }                                                                            \
    static void widen_scalar_##T(const void *row, int64_t d, float scale, float *out) \
    {                                                                            \
        for (int64_t i = 0; i < d; i++) out[i] = ld_##T(row, i) * scale;         \
    }

SCALAR_KERNELS(f32)
SCALAR_KERNELS(f16)
SCALAR_KERNELS(bf16)

#define SCALAR_DOT4(T)                                                           \
    static void dot4_scalar_##T(const void *const *rows, const float *w, int64_t d, float *out) \
    {                                                                            \
        for (int j = 0; j < 4; j++) out[j] = dot_scalar_##T(rows[j], w, d);      \
    }

SCALAR_DOT4(f32)
SCALAR_DOT4(f16)
SCALAR_DOT4(bf16)

/* The update, one value at a time: the definition the vector versions
 * follow bit for bit (todre_sel_update_fn). */
static int64_t update_scalar(double *acc, const uint8_t *taken, const float *g,
                             const double *scale, double sc, int64_t n, int maxmin, int sign)
{
    int64_t best = -1;
    double bv = INFINITY;
    for (int64_t v = 0; v < n; v++) {
        if (taken[v]) continue;
        double sim = (double)g[v] * (scale[v] * sc);
        if (maxmin) {
            double dist = 1.0 - sim;
            if (dist < acc[v] || dist != dist) acc[v] = dist;
        } else {
            acc[v] += sim;
        }
        double x = sign * acc[v];
        if (x < bv) {
            best = v;
            bv = x;
        }
    }
    return best;
}

static const struct todre_sel_kernels k_scalar[3] = {
    {dot_scalar_f32, dot4_scalar_f32, sumsq_scalar_f32, sumsq_dot_scalar_f32, widen_scalar_f32, update_scalar, "generic"},
    {dot_scalar_f16, dot4_scalar_f16, sumsq_scalar_f16, sumsq_dot_scalar_f16, widen_scalar_f16, update_scalar, "generic"},
    {dot_scalar_bf16, dot4_scalar_bf16, sumsq_scalar_bf16, sumsq_dot_scalar_bf16, widen_scalar_bf16, update_scalar, "generic"},
};

#ifdef TODRE_SEL_X86

/* ---- AVX2 + FMA + F16C (8 lanes) ----------------------------------------- */

#define T_AVX2 __attribute__((target("avx2,fma,f16c")))

T_AVX2 static inline __m256 v8_f32(const void *p, int64_t i)
{
    return _mm256_loadu_ps((const float *)p + i);
}
T_AVX2 static inline __m256 v8_f16(const void *p, int64_t i)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
}
T_AVX2 static inline __m256 v8_bf16(const void *p, int64_t i)
{
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
T_AVX2 static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
T_AVX2 static inline double hsum4d(__m256d v)
{
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

#define AVX2_KERNELS(T)                                                          \
    T_AVX2 static float dot_avx2_##T(const void *row, const float *w, int64_t d) \
    {                                                                            \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;              \
        int64_t i = 0;                                                           \
        for (; i + 32 <= d; i += 32) {                                           \
            a0 = _mm256_fmadd_ps(v8_##T(row, i), _mm256_loadu_ps(w + i), a0);    \
            a1 = _mm256_fmadd_ps(v8_##T(row, i + 8), _mm256_loadu_ps(w + i + 8), a1); \
            a2 = _mm256_fmadd_ps(v8_##T(row, i + 16), _mm256_loadu_ps(w + i + 16), a2); \
            a3 = _mm256_fmadd_ps(v8_##T(row, i + 24), _mm256_loadu_ps(w + i + 24), a3); \
        }                                                                        \
        for (; i + 8 <= d; i += 8)                                               \
            a0 = _mm256_fmadd_ps(v8_##T(row, i), _mm256_loadu_ps(w + i), a0);    \
        float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))); \
        for (; i < d; i++) s += ld_##T(row, i) * w[i];                           \
        return s;                                                                \
    }                                                                            \
    T_AVX2 static inline __attribute__((always_inline)) double sumsq_body_avx2_##T(        \
        const void *row, int64_t len, double *st, int last, const float *w, float *wst,     \
        double *dot, const int with_dot)                                         \
    {                                                                            \
        __m256d a0 = _mm256_loadu_pd(st), a1 = _mm256_loadu_pd(st + 4);         \
        __m256 d0 = with_dot ? _mm256_loadu_ps(wst) : _mm256_setzero_ps();      \
        int64_t i = 0;                                                           \
        for (; i + 8 <= len; i += 8) {                                           \
            __m256 v = v8_##T(row, i);                                           \
            __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));             \
            __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));           \
            a0 = _mm256_fmadd_pd(lo, lo, a0);                                    \
            a1 = _mm256_fmadd_pd(hi, hi, a1);                                    \
            if (with_dot) d0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w + i), d0);   \
        }                                                                        \
        _mm256_storeu_pd(st, a0);                                                \
        _mm256_storeu_pd(st + 4, a1);                                            \
        if (with_dot) _mm256_storeu_ps(wst, d0);                                 \
        if (!last) return 0.0;                                                   \
        double s = hsum4d(_mm256_add_pd(a0, a1));                                \
        float t = with_dot ? hsum8(d0) : 0.0f;                                   \
        for (; i < len; i++) {                                                   \
            float x = ld_##T(row, i);                                            \
            double v = x;                                                        \
            s += v * v;                                                          \
            if (with_dot) t += x * w[i];                                         \
        }                                                                        \
        if (with_dot) *dot = t;                                                  \
        return s;                                                                \
    }                                                                            \
    T_AVX2 static double sumsq_avx2_##T(const void *row, int64_t len, double *st, int last) \
    {                                                                            \
        return sumsq_body_avx2_##T(row, len, st, last, NULL, NULL, NULL, 0);     \
    }                                                                            \
    T_AVX2 static double sumsq_dot_avx2_##T(const void *row, int64_t len, double *st, int last, \
                                            const float *w, float *wst, double *dot) \
    {                                                                            \
        return sumsq_body_avx2_##T(row, len, st, last, w, wst, dot, 1);          \
    }                                                                            \
    T_AVX2 static void widen_avx2_##T(const void *row, int64_t d, float scale, float *out) \
    {                                                                            \
        __m256 sc = _mm256_set1_ps(scale);                                       \
        int64_t i = 0;                                                           \
        for (; i + 8 <= d; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(v8_##T(row, i), sc)); \
        for (; i < d; i++) out[i] = ld_##T(row, i) * scale;                      \
    }

AVX2_KERNELS(f32)
AVX2_KERNELS(f16)
AVX2_KERNELS(bf16)

/* Four dot products at once (the lookahead's mini-rows, select_greedy.c):
 * per row the chains, steps and tails of dot_avx2 (so the same bits), w
 * loaded once for the four; 4 x 4 accumulators. A mini-row of 64 f16 rows
 * of d = 4096 took 30 % less time than 64 single dot products. */
#define AVX2_DOT4(T)                                                             \
    T_AVX2 static void dot4_avx2_##T(const void *const *rows, const float *w, int64_t d, \
                                     float *out)                                 \
    {                                                                            \
        __m256 a[4][4];                                                          \
        for (int j = 0; j < 4; j++)                                              \
            for (int c = 0; c < 4; c++) a[j][c] = _mm256_setzero_ps();           \
        int64_t i = 0;                                                           \
        for (; i + 32 <= d; i += 32)                                             \
            for (int c = 0; c < 4; c++) {                                        \
                __m256 wc = _mm256_loadu_ps(w + i + 8 * c);                      \
                for (int j = 0; j < 4; j++)                                      \
                    a[j][c] = _mm256_fmadd_ps(v8_##T(rows[j], i + 8 * c), wc, a[j][c]); \
            }                                                                    \
        for (; i + 8 <= d; i += 8) {                                             \
            __m256 wc = _mm256_loadu_ps(w + i);                                  \
            for (int j = 0; j < 4; j++) a[j][0] = _mm256_fmadd_ps(v8_##T(rows[j], i), wc, a[j][0]); \
        }                                                                        \
        for (int j = 0; j < 4; j++) {                                            \
            float s = hsum8(_mm256_add_ps(_mm256_add_ps(a[j][0], a[j][1]),        \
                                          _mm256_add_ps(a[j][2], a[j][3])));      \
            for (int64_t k = i; k < d; k++) s += ld_##T(rows[j], k) * w[k];      \
            out[j] = s;                                                          \
        }                                                                        \
    }

AVX2_DOT4(f32)
AVX2_DOT4(f16)
AVX2_DOT4(bf16)

/* The update, 4 values per step. Compiled without FMA (a fused multiply-add
 * would round once where update_scalar rounds twice); the lanes keep each
 * its own best (strict <, so its lowest index), merged at the end and then
 * with the tail, whose indices come after. */
__attribute__((target("avx2"))) static int64_t
update_avx2(double *acc, const uint8_t *taken, const float *g, const double *scale, double sc,
            int64_t n, int maxmin, int sign)
{
    const __m256d vsc = _mm256_set1_pd(sc), one = _mm256_set1_pd(1.0);
    const __m256d vsign = _mm256_set1_pd((double)sign);
    __m256d bv = _mm256_set1_pd(INFINITY);
    __m256i bi = _mm256_set1_epi64x(-1), idx = _mm256_setr_epi64x(0, 1, 2, 3);
    const __m256i four = _mm256_set1_epi64x(4), zero = _mm256_setzero_si256();
    int64_t v = 0;
    for (; v + 4 <= n; v += 4) {
        int32_t t4;
        memcpy(&t4, taken + v, 4);
        __m256d free = _mm256_castsi256_pd(
            _mm256_cmpeq_epi64(_mm256_cvtepu8_epi64(_mm_cvtsi32_si128(t4)), zero));
        __m256d a = _mm256_loadu_pd(acc + v);
        __m256d sim = _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(g + v)),
                                    _mm256_mul_pd(_mm256_loadu_pd(scale + v), vsc));
        __m256d na;
        if (maxmin) {
            __m256d dist = _mm256_sub_pd(one, sim);
            __m256d take = _mm256_or_pd(_mm256_cmp_pd(dist, a, _CMP_LT_OQ),
                                        _mm256_cmp_pd(dist, dist, _CMP_UNORD_Q));
            na = _mm256_blendv_pd(a, dist, take);
        } else {
            na = _mm256_add_pd(a, sim);
        }
        a = _mm256_blendv_pd(a, na, free);
        _mm256_storeu_pd(acc + v, a);
        __m256d x = _mm256_mul_pd(vsign, a);
        __m256d lt = _mm256_and_pd(free, _mm256_cmp_pd(x, bv, _CMP_LT_OQ));
        bv = _mm256_blendv_pd(bv, x, lt);
        bi = _mm256_castpd_si256(
            _mm256_blendv_pd(_mm256_castsi256_pd(bi), _mm256_castsi256_pd(idx), lt));
        idx = _mm256_add_epi64(idx, four);
    }
    double lv[4];
    int64_t li[4];
    _mm256_storeu_pd(lv, bv);
    _mm256_storeu_si256((__m256i *)li, bi);
    int64_t best = -1;
    double b = INFINITY;
    for (int l = 0; l < 4; l++)
        if (li[l] >= 0 && (lv[l] < b || (lv[l] == b && li[l] < best))) best = li[l], b = lv[l];
    int64_t t = update_scalar(acc + v, taken + v, g + v, scale + v, sc, n - v, maxmin, sign);
    if (t >= 0 && sign * acc[v + t] < b) best = v + t;
    return best;
}

static const struct todre_sel_kernels k_avx2[3] = {
    {dot_avx2_f32, dot4_avx2_f32, sumsq_avx2_f32, sumsq_dot_avx2_f32, widen_avx2_f32, update_avx2, "avx2"},
    {dot_avx2_f16, dot4_avx2_f16, sumsq_avx2_f16, sumsq_dot_avx2_f16, widen_avx2_f16, update_avx2, "avx2"},
    {dot_avx2_bf16, dot4_avx2_bf16, sumsq_avx2_bf16, sumsq_dot_avx2_bf16, widen_avx2_bf16, update_avx2, "avx2"},
};

/* ---- AVX-512F (16 lanes) -------------------------------------------------- */

#define T_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

T_AVX512 static inline __m512 v16_f32(const void *p, int64_t i)
{
    return _mm512_loadu_ps((const float *)p + i);
}
T_AVX512 static inline __m512 v16_f16(const void *p, int64_t i)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)));
}
T_AVX512 static inline __m512 v16_bf16(const void *p, int64_t i)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

#define AVX512_KERNELS(T)                                                        \
    T_AVX512 static float dot_avx512_##T(const void *row, const float *w, int64_t d) \
    {                                                                            \
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;              \
        int64_t i = 0;                                                           \
        for (; i + 64 <= d; i += 64) {                                           \
            a0 = _mm512_fmadd_ps(v16_##T(row, i), _mm512_loadu_ps(w + i), a0);   \
            a1 = _mm512_fmadd_ps(v16_##T(row, i + 16), _mm512_loadu_ps(w + i + 16), a1); \
            a2 = _mm512_fmadd_ps(v16_##T(row, i + 32), _mm512_loadu_ps(w + i + 32), a2); \
            a3 = _mm512_fmadd_ps(v16_##T(row, i + 48), _mm512_loadu_ps(w + i + 48), a3); \
        }                                                                        \
        for (; i + 16 <= d; i += 16)                                             \
            a0 = _mm512_fmadd_ps(v16_##T(row, i), _mm512_loadu_ps(w + i), a0);   \
        float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))); \
        for (; i < d; i++) s += ld_##T(row, i) * w[i];                           \
        return s;                                                                \
    }                                                                            \
    T_AVX512 static inline __attribute__((always_inline)) double sumsq_body_avx512_##T(    \
        const void *row, int64_t len, double *st, int last, const float *w, float *wst,     \
        double *dot, const int with_dot)                                         \
    {                                                                            \
        __m512d a0 = _mm512_loadu_pd(st), a1 = _mm512_loadu_pd(st + 8);         \
        __m512 d0 = with_dot ? _mm512_loadu_ps(wst) : _mm512_setzero_ps();      \
        int64_t i = 0;                                                           \
        for (; i + 16 <= len; i += 16) {                                         \
            __m512 v = v16_##T(row, i);                                          \
            __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));             \
            __m512d hi = _mm512_cvtps_pd(                                        \
                _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))); \
            a0 = _mm512_fmadd_pd(lo, lo, a0);                                    \
            a1 = _mm512_fmadd_pd(hi, hi, a1);                                    \
            if (with_dot) d0 = _mm512_fmadd_ps(v, _mm512_loadu_ps(w + i), d0);   \
        }                                                                        \
        _mm512_storeu_pd(st, a0);                                                \
        _mm512_storeu_pd(st + 8, a1);                                            \
        if (with_dot) _mm512_storeu_ps(wst, d0);                                 \
        if (!last) return 0.0;                                                   \
        double s = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));                  \
        float t = with_dot ? _mm512_reduce_add_ps(d0) : 0.0f;                    \
        for (; i < len; i++) {                                                   \
            float x = ld_##T(row, i);                                            \
            double v = x;                                                        \
            s += v * v;                                                          \
            if (with_dot) t += x * w[i];                                         \
        }                                                                        \
        if (with_dot) *dot = t;                                                  \
        return s;                                                                \
    }                                                                            \
    T_AVX512 static double sumsq_avx512_##T(const void *row, int64_t len, double *st, int last) \
    {                                                                            \
        return sumsq_body_avx512_##T(row, len, st, last, NULL, NULL, NULL, 0);   \
    }                                                                            \
    T_AVX512 static double sumsq_dot_avx512_##T(const void *row, int64_t len, double *st,      \
                                                int last, const float *w, float *wst,    \
                                                double *dot)                             \
    {                                                                            \
        return sumsq_body_avx512_##T(row, len, st, last, w, wst, dot, 1);        \
    }                                                                            \
    T_AVX512 static void widen_avx512_##T(const void *row, int64_t d, float scale, float *out) \
    {                                                                            \
        __m512 sc = _mm512_set1_ps(scale);                                       \
        int64_t i = 0;                                                           \
        for (; i + 16 <= d; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(v16_##T(row, i), sc)); \
        for (; i < d; i++) out[i] = ld_##T(row, i) * scale;                      \
    }

AVX512_KERNELS(f32)
AVX512_KERNELS(f16)
AVX512_KERNELS(bf16)

/* Four dot products at once, as dot4_avx2 (the chains, steps and tails of
 * dot_avx512). */
#define AVX512_DOT4(T)                                                           \
    T_AVX512 static void dot4_avx512_##T(const void *const *rows, const float *w, int64_t d, \
                                         float *out)                             \
    {                                                                            \
        __m512 a[4][4];                                                          \
        for (int j = 0; j < 4; j++)                                              \
            for (int c = 0; c < 4; c++) a[j][c] = _mm512_setzero_ps();           \
        int64_t i = 0;                                                           \
        for (; i + 64 <= d; i += 64)                                             \
            for (int c = 0; c < 4; c++) {                                        \
                __m512 wc = _mm512_loadu_ps(w + i + 16 * c);                     \
                for (int j = 0; j < 4; j++)                                      \
                    a[j][c] = _mm512_fmadd_ps(v16_##T(rows[j], i + 16 * c), wc, a[j][c]); \
            }                                                                    \
        for (; i + 16 <= d; i += 16) {                                           \
            __m512 wc = _mm512_loadu_ps(w + i);                                  \
            for (int j = 0; j < 4; j++) a[j][0] = _mm512_fmadd_ps(v16_##T(rows[j], i), wc, a[j][0]); \
        }                                                                        \
        for (int j = 0; j < 4; j++) {                                            \
            float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[j][0], a[j][1]), \
                                                         _mm512_add_ps(a[j][2], a[j][3]))); \
            for (int64_t k = i; k < d; k++) s += ld_##T(rows[j], k) * w[k];      \
            out[j] = s;                                                          \
        }                                                                        \
    }

AVX512_DOT4(f32)
AVX512_DOT4(f16)
AVX512_DOT4(bf16)

/* The update, 8 values per step, the tail masked. AVX-512F has fused
 * multiply-adds, which a compiler may form from a multiply and an add: the
 * arithmetic goes through the explicit-rounding forms, which it leaves as
 * written. */
#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
T_AVX512 static int64_t update_avx512(double *acc, const uint8_t *taken, const float *g,
                                      const double *scale, double sc, int64_t n, int maxmin,
                                      int sign)
{
    const __m512d vsc = _mm512_set1_pd(sc), one = _mm512_set1_pd(1.0);
    const __m512d vsign = _mm512_set1_pd((double)sign);
    __m512d bv = _mm512_set1_pd(INFINITY);
    __m512i bi = _mm512_set1_epi64(-1), idx = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
    const __m512i eight = _mm512_set1_epi64(8), zero = _mm512_setzero_si512();
    for (int64_t v = 0; v < n; v += 8) {
        const int64_t m = n - v < 8 ? n - v : 8;
        const __mmask8 in = (__mmask8)((1u << m) - 1u);
        uint64_t t8 = 0;
        memcpy(&t8, taken + v, (size_t)m);
        __mmask8 free = in & _mm512_cmpeq_epi64_mask(
                                 _mm512_cvtepu8_epi64(_mm_cvtsi64_si128((long long)t8)), zero);
        __m512d a = _mm512_maskz_loadu_pd(in, acc + v);
        __m256 g8 = _mm512_castps512_ps256(_mm512_maskz_loadu_ps((__mmask16)in, g + v));
        __m512d sim = _mm512_mul_round_pd(
            _mm512_cvtps_pd(g8), _mm512_mul_round_pd(_mm512_maskz_loadu_pd(in, scale + v), vsc, RNE),
            RNE);
        if (maxmin) {
            __m512d dist = _mm512_sub_round_pd(one, sim, RNE);
            __mmask8 take = _mm512_cmp_pd_mask(dist, a, _CMP_LT_OQ) |
                            _mm512_cmp_pd_mask(dist, dist, _CMP_UNORD_Q);
            a = _mm512_mask_mov_pd(a, free & take, dist);
        } else {
            a = _mm512_mask_add_round_pd(a, free, a, sim, RNE);
        }
        _mm512_mask_storeu_pd(acc + v, free, a);
        __m512d x = _mm512_mul_round_pd(vsign, a, RNE);
        __mmask8 lt = free & _mm512_cmp_pd_mask(x, bv, _CMP_LT_OQ);
        bv = _mm512_mask_mov_pd(bv, lt, x);
        bi = _mm512_mask_mov_epi64(bi, lt, idx);
        idx = _mm512_add_epi64(idx, eight);
    }
    double lv[8];
    int64_t li[8];
    _mm512_storeu_pd(lv, bv);
    _mm512_storeu_si512(li, bi);
    int64_t best = -1;
    double b = INFINITY;
    for (int l = 0; l < 8; l++)
        if (li[l] >= 0 && (lv[l] < b || (lv[l] == b && li[l] < best))) best = li[l], b = lv[l];
    return best;
}
#undef RNE

static const struct todre_sel_kernels k_avx512[3] = {
    {dot_avx512_f32, dot4_avx512_f32, sumsq_avx512_f32, sumsq_dot_avx512_f32, widen_avx512_f32, update_avx512, "avx512"},
    {dot_avx512_f16, dot4_avx512_f16, sumsq_avx512_f16, sumsq_dot_avx512_f16, widen_avx512_f16, update_avx512, "avx512"},
    {dot_avx512_bf16, dot4_avx512_bf16, sumsq_avx512_bf16, sumsq_dot_avx512_bf16, widen_avx512_bf16, update_avx512, "avx512"},
};

#endif /* TODRE_SEL_X86 */

static int dtype_slot(todre_dtype dt)
{
    return dt == TODRE_DTYPE_F16 ? 1 : dt == TODRE_DTYPE_BF16 ? 2 : 0;
}

/* The level of the one ISA detection (cpu_isa.c); AVX-512 kernels serve
 * the AMX level too. */
const struct todre_sel_kernels *todre_sel_kernels_for(todre_dtype dtype)
{
    int s = dtype_slot(dtype);
#ifdef TODRE_SEL_X86
    enum todre_cpu_isa isa = todre_cpu_isa();
    if (isa >= TODRE_CPU_ISA_AVX512) return &k_avx512[s];
    if (isa >= TODRE_CPU_ISA_AVX2) return &k_avx2[s];
#endif
    return &k_scalar[s];
}
