/* Gram rows made on demand by FMA units (see select_rows.h): packing, the
 * micro-kernels per ISA level, and the row store of the ROWS strategy.
 *
 * Blocking (per batch): the packed rows are read once, panel by panel,
 * each panel's K blocks in order; threads take chunks of column panels.
 * A panel's K block (NR x KC) is reused by the mr-row groups while in L1,
 * the batch's fp32 rows (up to TODRE_SEL_ROWS_AROWS x d) stay in L2, and
 * each output tile (mr x NR) is summed over the K blocks in L1.
 * Micro-kernels: on AVX2 MR x NR = 6 x 16, 12 accumulators of 8 lanes
 * (enough independent chains to hide the FMA latency), 2 panel loads and 6
 * broadcasts per 12 FMAs; on AVX-512 MR_WIDE x NR = 12 x 16, 12 zmm
 * accumulators, 1 panel load and 12 broadcasts per 12 FMAs (bf16: one load
 * per 24, from panels of interleaved k pairs: at_kj; where the CPU has
 * AVX512_BF16, 12 VDPBF16PS per load, each the two FMAs' work and bits:
 * micro_avx512_bf16_dp). */
#include "select_rows.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../half.h"
#include "select_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define TODRE_ROWS_X86 1
#include <immintrin.h>
#endif

#define NR TODRE_SEL_ROWS_NR
#define KC TODRE_SEL_ROWS_KC
#define MR TODRE_SEL_ROWS_MR
#define AROWS TODRE_SEL_ROWS_AROWS

/* Rows per micro-kernel call on AVX-512: 12 zmm chains. The FMA's latency
 * (4 cycles) times its two ports needs 8 or more; with 6 rows the kernel
 * ran at 73 % of the FMA rate measured on the same core (Emerald Rapids,
 * bench/results/cpu-emerald-rapids-2026-11-27-kernels.json). AVX2 keeps MR = 6 (12 ymm chains). */
#define MR_WIDE 12

/* The packed rows stream from L3 or memory once per batch (every panel's
 * K block is used by only the batch's MR-row groups), which the hardware
 * prefetcher alone does not keep up with: on a Zen 3 core the 6 x 16 kernel
 * ran at 46 GFMA/s on panels in L2 but 32 (f16) and 24 (f32) streaming
 * n = 2880, d = 4096, and at 46 and 36 prefetching 8 KiB ahead (one to two
 * panels' K blocks). Ahead means in the products' order: within a panel
 * the blocks that follow, past its end the next panel of the sweep, which
 * every other batch runs backwards (batch_products, prefetch_at). A
 * prefetch past the end of the packed rows is harmless (no fault). */
#define PF_BYTES 8192

_Static_assert(AROWS % MR == 0 && AROWS % MR_WIDE == 0 && AROWS >= TODRE_SEL_AMX_BATCH,
               "batch rows in MR groups");

/* Not on the generic level: there the portable kernel (kept for the
 * dispatch's completeness) is slower than BLAS's GRAM, which the planner
 * takes instead (cpu_backend.c declares no ROWS). On the AMX level, the
 * AVX-512 kernel makes the rows of a set whose AMX pack does not fit the
 * workspace limit (select.c, follow_plan). */
int todre_sel_rows_fma_usable(void)
{
    return todre_cpu_isa() >= TODRE_CPU_ISA_AVX2;
}

static int64_t esize(todre_dtype dt) { return dt == TODRE_DTYPE_F32 ? 4 : 2; }

static int64_t pad_nr(int64_t n) { return (n + NR - 1) / NR * NR; }

static size_t align64(size_t x) { return (x + 63u) & ~(size_t)63u; }

/* Slot B: packed columns | the batch. */
static size_t pack_bytes(int64_t n, int64_t d, todre_dtype dt)
{
    return align64((size_t)pad_nr(n) * (size_t)d * (size_t)esize(dt)) +
           (size_t)AROWS * (size_t)d * sizeof(float);
}

/* Slot C: the store [slots x npad] | batch output [AROWS x npad] | slot [n] |
 * owner [slots] | free [slots] | pos [n] | moves [n] (drop_taken). */
static size_t store_bytes(int64_t n, int64_t slots)
{
    return (size_t)pad_nr(n) * (size_t)(slots + AROWS) * sizeof(float) +
           (size_t)(3 * n + 2 * slots) * sizeof(int32_t);
}

int64_t todre_sel_rows_fma_slots(const struct todre_sel_seg *s, int64_t planned)
{
    double limit = (double)s->be->base.params.workspace_limit;
    double left = limit - (double)pack_bytes(s->n, s->d, s->dtype) -
                  3.0 * (double)s->n * sizeof(int32_t);
    /* a slot costs its row and two int32 */
    double per = (double)pad_nr(s->n) * sizeof(float) + 2 * sizeof(int32_t);
    double fit = floor(left / per) - AROWS;
    int64_t need = s->n < 2 * TODRE_SEL_AMX_BATCH ? s->n : 2 * TODRE_SEL_AMX_BATCH;
    if (fit < (double)need) return 0;
    return fit < (double)planned ? (int64_t)fit : planned;
}

/* Offset (elements) of K block kb of panel p: a panel's K blocks lie one
 * after another ([panel][k][NR], d x NR elements per panel), so a panel is
 * one contiguous run the products stream in order. */
static inline int64_t panel_at(int64_t d, int64_t kb, int64_t p)
{
    return p * NR * d + kb * KC * NR;
}

#ifdef TODRE_ROWS_X86
/* Columns [k0, k0 + kl) of the 16 rows src[0..16) (16-bit values) into dst
 * as [k][NR], bit for bit, kl a multiple of 8: 8 x 8 transposes by SSE2
 * unpacks (the scalar copy wrote one value per store, 6 % of a stage-1
 * call). */
static void panel_t16(const uint16_t *const *src, int64_t k0, int64_t kl, uint16_t *dst)
{
    for (int64_t kk = 0; kk < kl; kk += 8)
        for (int h = 0; h < NR; h += 8) {
            __m128i a[8], b[8], c[8];
            for (int i = 0; i < 8; i++) a[i] = _mm_loadu_si128((const __m128i *)(src[h + i] + k0 + kk));
            for (int i = 0; i < 8; i += 2) {
                b[i] = _mm_unpacklo_epi16(a[i], a[i + 1]);
                b[i + 1] = _mm_unpackhi_epi16(a[i], a[i + 1]);
            }
            for (int i = 0; i < 8; i += 4) {
                c[i] = _mm_unpacklo_epi32(b[i], b[i + 2]);     /* columns 0, 1 */
                c[i + 1] = _mm_unpackhi_epi32(b[i], b[i + 2]); /* 2, 3 */
                c[i + 2] = _mm_unpacklo_epi32(b[i + 1], b[i + 3]); /* 4, 5 */
                c[i + 3] = _mm_unpackhi_epi32(b[i + 1], b[i + 3]); /* 6, 7 */
            }
            for (int q = 0; q < 4; q++) {
                uint16_t *o = dst + (kk + 2 * q) * NR + h;
                _mm_storeu_si128((__m128i *)o, _mm_unpacklo_epi64(c[q], c[4 + q]));
                _mm_storeu_si128((__m128i *)(o + NR), _mm_unpackhi_epi64(c[q], c[4 + q]));
            }
        }
}

/* The 16-bit halves of each 32-bit word swapped (a rotation by 16). */
static inline __m128 swap16(__m128 x)
{
    __m128i v = _mm_castps_si128(x);
    return _mm_castsi128_ps(_mm_or_si128(_mm_slli_epi32(v, 16), _mm_srli_epi32(v, 16)));
}

/* The same for 32-bit values, kl a multiple of 4: 4 x 4 transposes; with
 * swap, each word's 16-bit halves swapped (the pair layout, at_kj). */
static void panel_t32(const float *const *src, int64_t k0, int64_t kl, float *dst, int swap)
{
    for (int64_t kk = 0; kk < kl; kk += 4)
        for (int h = 0; h < NR; h += 4) {
            __m128 r0 = _mm_loadu_ps(src[h] + k0 + kk), r1 = _mm_loadu_ps(src[h + 1] + k0 + kk);
            __m128 r2 = _mm_loadu_ps(src[h + 2] + k0 + kk), r3 = _mm_loadu_ps(src[h + 3] + k0 + kk);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            if (swap) {
                r0 = swap16(r0);
                r1 = swap16(r1);
                r2 = swap16(r2);
                r3 = swap16(r3);
            }
            float *o = dst + kk * NR + h;
            _mm_storeu_ps(o, r0);
            _mm_storeu_ps(o + NR, r1);
            _mm_storeu_ps(o + 2 * NR, r2);
            _mm_storeu_ps(o + 3 * NR, r3);
        }
}
#endif

/* Where column j of a panel is stored within a k row: j, or with f->perm
 * (bf16 for the AVX2 kernel, bpair_bf16; set_kernel) the middle quads swapped (0-3, 8-11,
 * 4-7, 12-15), an order that is its own inverse. */
static inline int col_at(const struct todre_sel_rows_fma *f, int j)
{
    return f->perm ? (j & ~12) | (j & 4) << 1 | (j & 8) >> 1 : j;
}

/* Where value kk (within its K block) of column j of a panel is stored,
 * in elements from the K block's start: row kk of [k][NR] at col_at, or,
 * with f->pair (bf16 for the AVX-512 kernels; set_kernel), k rows in pairs,
 * [k / 2][NR][2]: column j's values k and k + 1 as one 32-bit word, k in
 * its high half, so that one load holds two k rows of the panel, each
 * widened by one instruction (micro_avx512_bf16_pair), and VDPBF16PS, which
 * adds a word's high product first, adds k's first (micro_avx512_bf16_dp). */
static inline int64_t at_kj(const struct todre_sel_rows_fma *f, int64_t kk, int j)
{
    return f->pair ? (kk & ~(int64_t)1) * NR + 2 * j + 1 - (kk & 1) : kk * NR + col_at(f, j);
}

/* All rows into panels, as stored (no conversion): panel p, K block kb holds
 * rows [p NR, p NR + NR) x columns [kb KC, kb KC + kl) (value kk of column
 * j at at_kj); rows past n are zero. With ss, also every row's squared
 * norm into ss[0..n), each row summed block by block as the block is
 * packed (from L1, in the same pass over the rows), the parts cut at
 * multiples of KC, so bitwise todre_sel_sumsq's (select_kernels.h). With pw
 * (a row widened to fp32; ss given), also every row's dot product with it
 * into dots[0..n), in the same kernel call (sumsq_dot): a pass of its own
 * re-read the rows from memory, 1.25-1.9 ms of a 40-65 ms call at n =
 * 2880, d = 4096 (`bench_select 2880 4096 288 f16 auto 7 2` on a 2-core
 * Emerald Rapids, with per-phase timers). */
_Static_assert(KC % TODRE_SEL_SUMSQ_PART == 0, "norms in parts of K blocks");

static void pack_cols(const struct todre_sel_seg *s, const struct todre_sel_rows_fma *f,
                      double *ss, const float *pw, double *dots)
{
    const int64_t d = s->d, np = f->npad / NR, es = esize(f->dtype);
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int64_t p = 0; p < np; p++) {
        double st[NR][TODRE_SEL_SUMSQ_STATE]; /* the panel's rows' partial sums */
        float wst[NR][TODRE_SEL_DOT_STATE];   /* and dot products with pw */
        const int real = s->n - p * NR < NR ? (int)(s->n - p * NR) : NR;
        if (ss) memset(st, 0, sizeof st);
        if (pw) memset(wst, 0, sizeof wst);
        for (int64_t kb = 0; kb * KC < d; kb++) {
            int64_t k0 = kb * KC, kl = d - k0 < KC ? d - k0 : KC;
            char *dst = (char *)f->cols + panel_at(d, kb, p) * es;
            int whole = 0;
#ifdef TODRE_ROWS_X86
            /* whole panels, in whole transposes */
            int64_t kv = kl / 8 * 8;
            if (real == NR && kv > 0) {
                const void *src[NR]; /* by stored position */
                for (int j = 0; j < NR; j++)
                    src[col_at(f, j)] = todre_sel_row(s->rows, s->dtype, s->stride, p * NR + j);
                /* pairs of 16-bit values are the rows' 32-bit words (k in
                 * the low half), transposed and swapped (k0 and kv even) */
                if (es == 4) panel_t32((const float *const *)src, k0, kv, (float *)dst, 0);
                else if (f->pair)
                    panel_t32((const float *const *)src, k0 / 2, kv / 2, (float *)dst, 1);
                else panel_t16((const uint16_t *const *)src, k0, kv, (uint16_t *)dst);
                for (int j = 0; j < NR; j++) {
                    const char *x = (const char *)src[col_at(f, j)] + k0 * es;
                    for (int64_t kk = kv; kk < kl; kk++)
                        memcpy(dst + at_kj(f, kk, j) * es, x + kk * es, (size_t)es);
                }
                whole = 1;
            }
#endif
            for (int jv = 0; jv < NR && !whole; jv++) {
                int64_t v = p * NR + jv;
                if (v >= s->n) {
                    for (int64_t kk = 0; kk < kl; kk++)
                        memset(dst + at_kj(f, kk, jv) * es, 0, (size_t)es);
                    continue;
                }
                const char *src = (const char *)todre_sel_row(s->rows, s->dtype, s->stride, v) + k0 * es;
                if (es == 4) {
                    const float *x = (const float *)src;
                    float *o = (float *)dst;
                    for (int64_t kk = 0; kk < kl; kk++) o[at_kj(f, kk, jv)] = x[kk];
                } else {
                    const uint16_t *x = (const uint16_t *)src;
                    uint16_t *o = (uint16_t *)dst;
                    for (int64_t kk = 0; kk < kl; kk++) o[at_kj(f, kk, jv)] = x[kk];
                }
            }
            if (!ss) continue;
            const int last = k0 + kl == d;
            for (int j = 0; j < real; j++) {
                const char *x = (const char *)todre_sel_row(s->rows, s->dtype, s->stride, p * NR + j);
                double sum = pw ? s->kern->sumsq_dot(x + k0 * es, kl, st[j], last, pw + k0, wst[j],
                                                     dots + p * NR + j)
                                : s->kern->sumsq(x + k0 * es, kl, st[j], last);
                if (last) ss[p * NR + j] = sum;
            }
        }
    }
}

/* The batch rows ids[0..count) widened to fp32 (exact) into
 * [K block][group][k][f->mr], or with f->dp as stored, each k pair one
 * 32-bit word with k in its high half (the panels' at_kj order), into
 * [K block][group][k / 2][f->mr] at the same group offsets; rows of the
 * last group past count are zero.
 * Threads take K blocks; each row's block is widened by the SIMD kernel
 * into a local buffer, then stored at stride mr. (Widening and storing
 * element by element on one thread took 5 % of a call at n = 2880, d =
 * 4096, k = 288, while the other threads waited.) */
static void pack_batch(const struct todre_sel_seg *s, const struct todre_sel_rows_fma *f,
                       const int64_t *ids, int count)
{
    const int64_t d = s->d, nkb = (d + KC - 1) / KC, es = esize(s->dtype);
    const int mr = f->mr, rows = (count + mr - 1) / mr * mr;
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int64_t kb = 0; kb < nkb; kb++) {
        const int64_t k0 = kb * KC, kl = d - k0 < KC ? d - k0 : KC;
        float seg[KC];
        for (int r = 0; r < rows; r++) {
            float *grp = f->a + k0 * AROWS + (int64_t)(r / mr) * kl * mr, *dst = grp + r % mr;
            if (f->dp) { /* kl even (set_kernel) */
                uint32_t *w = (uint32_t *)grp + r % mr;
                const char *row = NULL;
                if (r < count)
                    row = (const char *)todre_sel_row(s->rows, s->dtype, s->stride, ids[r]) + k0 * es;
                for (int64_t q = 0; q < kl / 2; q++) {
                    uint32_t v = 0; /* k in the low half, as stored */
                    if (row) memcpy(&v, row + 4 * q, sizeof v);
                    w[q * mr] = v << 16 | v >> 16;
                }
                continue;
            }
            if (r < count) {
                const char *row = todre_sel_row(s->rows, s->dtype, s->stride, ids[r]);
                s->kern->widen(row + k0 * es, kl, 1.0f, seg);
                for (int64_t kk = 0; kk < kl; kk++) dst[kk * mr] = seg[kk];
            } else {
                for (int64_t kk = 0; kk < kl; kk++) dst[kk * mr] = 0.0f;
            }
        }
    }
}

/* ---- micro-kernels: c[i][j] (+)= sum over k of a[k][i] * b[k][j] -------- */

/* Each writes rows [0, rows) of its mr x NR block of c (row stride ldc; mr:
 * MR_WIDE for the AVX-512 kernels, else MR; rows <= MR_WIDE / 2 for the
 * AVX-512 half kernels), prefetching from pf on (prefetch_at): the
 * block's products from zero, stored when first, else added to c
 * (todre_sel_rows_micro_fn, select_rows.h). */

/* Portable C: one chain per (i, j), unfused multiply and add. */
#define MICRO_GENERIC(T, LOAD)                                                              \
    static void micro_generic_##T(const float *a, const void *b, const char *pf, int64_t kl, \
                                  float *c, int64_t ldc, int first, int rows)               \
    {                                                                                       \
        (void)pf;                                                                           \
        float acc[MR][NR];                                                                  \
        memset(acc, 0, sizeof acc);                                                         \
        for (int64_t k = 0; k < kl; k++) {                                                  \
            float bv[NR];                                                                   \
            for (int j = 0; j < NR; j++) bv[j] = LOAD(b, k * NR + j);                       \
            for (int i = 0; i < MR; i++) {                                                  \
                float av = a[k * MR + i];                                                   \
                for (int j = 0; j < NR; j++) acc[i][j] += av * bv[j];                       \
            }                                                                               \
        }                                                                                   \
        for (int i = 0; i < rows; i++)                                                      \
            for (int j = 0; j < NR; j++) c[i * ldc + j] = first ? acc[i][j] : c[i * ldc + j] + acc[i][j]; \
    }

static inline float gl_f32(const void *b, int64_t i) { return ((const float *)b)[i]; }
static inline float gl_f16(const void *b, int64_t i) { return todre_f16_to_f32(((const uint16_t *)b)[i]); }
static inline float gl_bf16(const void *b, int64_t i) { return todre_bf16_to_f32(((const uint16_t *)b)[i]); }

MICRO_GENERIC(f32, gl_f32)
MICRO_GENERIC(f16, gl_f16)
MICRO_GENERIC(bf16, gl_bf16)

#ifdef TODRE_ROWS_X86

#define T_AVX2 __attribute__((target("avx2,fma,f16c")))

typedef float es_f32;
typedef uint16_t es_f16, es_bf16;


/* A panel's k row (16 values from element i) as two fp32 halves, columns
 * 0-7 and 8-15: f32 and f16 load and widen each half; bf16 loads all 16
 * once and puts each value in the high half of a zero dword with the
 * in-lane unpacks (2 shuffles, against 2 widenings and 2 shifts, which
 * compete with the FMAs for their ports), which take columns 0-3 and 8-11
 * of the register, hence panels stored in col_at's order (set_kernel). */
T_AVX2 static inline void bpair_f32(const void *b, int64_t i, __m256 *lo, __m256 *hi)
{
    *lo = _mm256_loadu_ps((const float *)b + i);
    *hi = _mm256_loadu_ps((const float *)b + i + 8);
}
T_AVX2 static inline void bpair_f16(const void *b, int64_t i, __m256 *lo, __m256 *hi)
{
    *lo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)b + i)));
    *hi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)b + i + 8)));
}
T_AVX2 static inline void bpair_bf16(const void *b, int64_t i, __m256 *lo, __m256 *hi)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)((const uint16_t *)b + i));
    __m256i z = _mm256_setzero_si256();
    *lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, v));
    *hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, v));
}

/* AVX2: 6 x 16 = 12 ymm accumulators, one fused chain per (i, j). */
#define MICRO_AVX2(T)                                                                       \
    T_AVX2 static void micro_avx2_##T(const float *a, const void *b, const char *pf,        \
                                      int64_t kl, float *c, int64_t ldc, int first, int rows) \
    {                                                                                       \
        __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00,       \
               c21 = c00, c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00; \
        for (int64_t k = 0; k < kl; k++) {                                                  \
            __m256 b0, b1, x;                                                               \
            bpair_##T(b, k * NR, &b0, &b1);                                                 \
            _mm_prefetch(pf + (k * NR) * (int64_t)sizeof(es_##T), _MM_HINT_T0);             \
            const float *ak = a + k * MR;                                                   \
            x = _mm256_broadcast_ss(ak + 0);                                                \
            c00 = _mm256_fmadd_ps(x, b0, c00); c01 = _mm256_fmadd_ps(x, b1, c01);           \
            x = _mm256_broadcast_ss(ak + 1);                                                \
            c10 = _mm256_fmadd_ps(x, b0, c10); c11 = _mm256_fmadd_ps(x, b1, c11);           \
            x = _mm256_broadcast_ss(ak + 2);                                                \
            c20 = _mm256_fmadd_ps(x, b0, c20); c21 = _mm256_fmadd_ps(x, b1, c21);           \
            x = _mm256_broadcast_ss(ak + 3);                                                \
            c30 = _mm256_fmadd_ps(x, b0, c30); c31 = _mm256_fmadd_ps(x, b1, c31);           \
            x = _mm256_broadcast_ss(ak + 4);                                                \
            c40 = _mm256_fmadd_ps(x, b0, c40); c41 = _mm256_fmadd_ps(x, b1, c41);           \
            x = _mm256_broadcast_ss(ak + 5);                                                \
            c50 = _mm256_fmadd_ps(x, b0, c50); c51 = _mm256_fmadd_ps(x, b1, c51);           \
        }                                                                                   \
        __m256 r[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},                              \
                           {c30, c31}, {c40, c41}, {c50, c51}};                             \
        for (int i = 0; i < rows; i++) {                                                    \
            float *ci = c + i * ldc;                                                        \
            if (first) {                                                                    \
                _mm256_storeu_ps(ci, r[i][0]);                                              \
                _mm256_storeu_ps(ci + 8, r[i][1]);                                          \
            } else {                                                                        \
                _mm256_storeu_ps(ci, _mm256_add_ps(_mm256_loadu_ps(ci), r[i][0]));          \
                _mm256_storeu_ps(ci + 8, _mm256_add_ps(_mm256_loadu_ps(ci + 8), r[i][1]));  \
            }                                                                               \
        }                                                                                   \
    }

MICRO_AVX2(f32)
MICRO_AVX2(f16)
MICRO_AVX2(bf16)

#define T_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

T_AVX512 static inline __m512 b16_f32(const void *b, int64_t i) { return _mm512_loadu_ps((const float *)b + i); }
T_AVX512 static inline __m512 b16_f16(const void *b, int64_t i)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)b + i)));
}
T_AVX512 static inline __m512 b16_bf16(const void *b, int64_t i)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)b + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* AVX-512F: MR_WIDE (12) zmm accumulators, one panel load and 12 broadcasts
 * per 12 FMAs. Each kernel body takes its row count R as a constant: R =
 * MR_WIDE, and R = MR_WIDE / 2 for groups of up to 6 rows (f->half: the
 * last batch of a selection, which speculates only on the steps left, and
 * the last group of a Gram matrix), in half the time; every accumulator is
 * its row's own chain, so a row's bits do not depend on R. */
#define T_AVX512_BODY T_AVX512 static inline __attribute__((always_inline))
#define MICRO_AVX512(T)                                                                     \
    T_AVX512_BODY void body_avx512_##T(const float *a, const void *b, const char *pf,       \
                                       int64_t kl, float *c, int64_t ldc, int first,        \
                                       int rows, const int R)                               \
    {                                                                                       \
        __m512 r[MR_WIDE];                                                                  \
        for (int i = 0; i < R; i++) r[i] = _mm512_setzero_ps();                             \
        for (int64_t k = 0; k < kl; k++) {                                                  \
            __m512 bv = b16_##T(b, k * NR);                                                 \
            _mm_prefetch(pf + (k * NR) * (int64_t)sizeof(es_##T), _MM_HINT_T0);             \
            const float *ak = a + k * MR_WIDE;                                              \
            for (int i = 0; i < R; i++)                                                     \
                r[i] = _mm512_fmadd_ps(_mm512_set1_ps(ak[i]), bv, r[i]);                    \
        }                                                                                   \
        for (int i = 0; i < rows && i < R; i++) {                                           \
            float *ci = c + i * ldc;                                                        \
            _mm512_storeu_ps(ci, first ? r[i] : _mm512_add_ps(_mm512_loadu_ps(ci), r[i]));  \
        }                                                                                   \
    }                                                                                       \
    MICRO_AVX512_R(T_AVX512, T, MR_WIDE, micro_avx512_##T)                                  \
    MICRO_AVX512_R(T_AVX512, T, MR_WIDE / 2, micro_avx512_##T##_half)

/* The kernel of body_avx512_T (or _pair, _dp) for R rows, built for TGT. */
#define MICRO_AVX512_R(TGT, T, R, NAME)                                                     \
    TGT static void NAME(const float *a, const void *b, const char *pf, int64_t kl,         \
                         float *c, int64_t ldc, int first, int rows)                        \
    {                                                                                       \
        body_avx512_##T(a, b, pf, kl, c, ldc, first, rows, R);                              \
    }

MICRO_AVX512(f32)
MICRO_AVX512(f16)
MICRO_AVX512(bf16)

/* bf16 from pair-interleaved panels (at_kj): one 64-byte load holds k rows
 * k and k + 1, each widened to fp32 by one instruction (a mask keeps the
 * high halves, k; a shift puts the low halves' bits in place), where the
 * kernel above spends two on each k row (a zero extension and a shift) on
 * the ports the FMAs use: 26 such operations per 24 FMAs instead of 28.
 * Each accumulator still takes k, then k + 1, so the sums are bitwise the
 * kernel's above (kl is even: set_kernel). The kernel and its loop alone,
 * on a 2-core Emerald Rapids: +14 % with the panels in L1, +0-8 %
 * streamed from L3 as in a call (the more, the more another thread
 * competes for the core's ports). */
T_AVX512_BODY void body_avx512_bf16_pair(const float *a, const void *b, const char *pf,
                                         int64_t kl, float *c, int64_t ldc, int first, int rows,
                                         const int R)
{
    const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
    __m512 r[MR_WIDE];
    for (int i = 0; i < R; i++) r[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kl; k += 2) {
        __m512i v = _mm512_loadu_si512((const uint16_t *)b + k * NR);
        _mm_prefetch(pf + k * NR * (int64_t)sizeof(es_bf16), _MM_HINT_T0);
        __m512 b0 = _mm512_castsi512_ps(_mm512_and_si512(v, high));
        __m512 b1 = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        const float *ak = a + k * MR_WIDE;
        for (int i = 0; i < R; i++) r[i] = _mm512_fmadd_ps(_mm512_set1_ps(ak[i]), b0, r[i]);
        for (int i = 0; i < R; i++)
            r[i] = _mm512_fmadd_ps(_mm512_set1_ps(ak[MR_WIDE + i]), b1, r[i]);
    }
    for (int i = 0; i < rows && i < R; i++) {
        float *ci = c + i * ldc;
        _mm512_storeu_ps(ci, first ? r[i] : _mm512_add_ps(_mm512_loadu_ps(ci), r[i]));
    }
}
MICRO_AVX512_R(T_AVX512, bf16_pair, MR_WIDE, micro_avx512_bf16_pair)
MICRO_AVX512_R(T_AVX512, bf16_pair, MR_WIDE / 2, micro_avx512_bf16_pair_half)

/* bf16 by VDPBF16PS (AVX512_BF16), on the pair kernel's panels and the
 * batch as stored (pack_batch, f->dp): per k pair, one load and 12
 * instructions where the pair kernel spends 2 widenings and 24 FMAs. The
 * instruction adds, in each fp32 lane, the product of the words' high
 * halves (k), then of the low halves (k + 1), each rounded once: a bf16
 * product is exact in fp32, so each step is an FMA's, and the sums are
 * bitwise the pair kernel's (dp_check verifies it once per process),
 * except that it reads subnormal inputs as zero and flushes subnormal
 * results to zero (Intel's definition; measured the same on Zen 4). Rows
 * reach these kernels only with norms in the safe range (select.c,
 * guard_range), so that changes a value only below 2^-126 in magnitude.
 * On a Zen 4 core it issues one a cycle, as a zmm FMA does: twice the
 * products (115 G against 58 G multiply-adds a second per core in a
 * register-only loop on an AMD EPYC Zen 4); use_dp says where it runs. */
#define T_AVX512BF16 __attribute__((target("avx512f,avx512bf16,avx2,fma,f16c")))

T_AVX512BF16 static inline __attribute__((always_inline)) void
body_avx512_bf16_dp(const float *a, const void *b, const char *pf, int64_t kl, float *c,
                    int64_t ldc, int first, int rows, const int R)
{
    const uint32_t *aw = (const uint32_t *)(const void *)a;
    __m512 r[MR_WIDE];
    for (int i = 0; i < R; i++) r[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kl; k += 2) {
        __m512bh v = (__m512bh)_mm512_loadu_si512((const uint16_t *)b + k * NR);
        _mm_prefetch(pf + k * NR * (int64_t)sizeof(es_bf16), _MM_HINT_T0);
        const uint32_t *ak = aw + (k / 2) * MR_WIDE;
        for (int i = 0; i < R; i++)
            r[i] = _mm512_dpbf16_ps(r[i], (__m512bh)_mm512_set1_epi32((int)ak[i]), v);
    }
    for (int i = 0; i < rows && i < R; i++) {
        float *ci = c + i * ldc;
        _mm512_storeu_ps(ci, first ? r[i] : _mm512_add_ps(_mm512_loadu_ps(ci), r[i]));
    }
}
MICRO_AVX512_R(T_AVX512BF16, bf16_dp, MR_WIDE, micro_avx512_bf16_dp)
MICRO_AVX512_R(T_AVX512BF16, bf16_dp, MR_WIDE / 2, micro_avx512_bf16_dp_half)

/* Whether micro_avx512_bf16_dp gives the pair kernel's bits here, on 12
 * rows x 16 columns x 64 k of bf16 values spread over 2^-8 .. 2^8 with both
 * signs (so that partial sums cancel and round): the instruction is used
 * only where it rounds as Intel defines it, and the ROWS values keep the
 * level's numerics (select_rows.h). On this block the low halves' product
 * first changes 109 of the 192 sums and one rounding of both products 129
 * (docs/testing.md). */
#define DP_K 64
static int dp_check(void)
{
    float a32[DP_K * MR_WIDE], c1[MR_WIDE * NR], c2[MR_WIDE * NR];
    uint32_t aw[DP_K / 2 * MR_WIDE], b[DP_K / 2 * NR];
    uint16_t av[MR_WIDE][DP_K], bv[NR][DP_K];
    uint32_t x = 0x9e3779b9u;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < (pass ? NR : MR_WIDE); i++)
            for (int k = 0; k < DP_K; k++) {
                x = x * 1664525u + 1013904223u;
                /* sign, exponent 119..135 (2^-8 .. 2^8), 7 mantissa bits */
                uint32_t e = 119u + (x >> 8) % 17u;
                uint16_t h = (uint16_t)((x >> 31) << 15 | e << 7 | (x >> 16 & 0x7fu));
                if (pass) bv[i][k] = h;
                else av[i][k] = h;
            }
    for (int k = 0; k < DP_K; k++)
        for (int i = 0; i < MR_WIDE; i++) {
            uint32_t u = (uint32_t)av[i][k] << 16;
            memcpy(&a32[k * MR_WIDE + i], &u, sizeof u);
            if (k % 2 == 0) aw[k / 2 * MR_WIDE + i] = u | av[i][k + 1];
        }
    for (int k = 0; k < DP_K; k += 2)
        for (int j = 0; j < NR; j++) b[k / 2 * NR + j] = (uint32_t)bv[j][k] << 16 | bv[j][k + 1];
    micro_avx512_bf16_pair(a32, b, (const char *)b, DP_K, c1, NR, 1, MR_WIDE);
    micro_avx512_bf16_dp((const float *)(const void *)aw, b, (const char *)b, DP_K, c2, NR, 1,
                         MR_WIDE);
    return memcmp(c1, c2, sizeof c1) == 0;
}

static int dp_ok;
static void dp_init(void)
{
    const char *e = getenv("TODRE_CPU_BF16");
    int want = e && strcmp(e, "dp") == 0 ? 1 : e && strcmp(e, "fma") == 0 ? 0 : todre_cpu_amd();
    dp_ok = want && todre_cpu_avx512bf16() && dp_check();
}

/* Whether the bf16 ROWS kernel is micro_avx512_bf16_dp: AVX-512 level or
 * above, a CPU with AVX512_BF16 and dp_check passed, on an AMD CPU (Zen 4:
 * twice the FMA kernel's products a cycle; on Emerald Rapids the
 * instruction issues at a quarter of an FMA's rate and a kernel on it ran
 * 1.3x slower than the FMA kernel: docs/building.md), or anywhere with
 * $TODRE_CPU_BF16=dp; never with $TODRE_CPU_BF16=fma (diagnostics and
 * tests, as $TODRE_CPU_ISA). */
static int use_dp(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, dp_init);
    return dp_ok;
}

#endif /* TODRE_ROWS_X86 */

int todre_sel_rows_bf16_dp(void)
{
#ifdef TODRE_ROWS_X86
    return todre_cpu_isa() >= TODRE_CPU_ISA_AVX512 && use_dp();
#else
    return 0;
#endif
}

/* The kernel for f->dtype at this process's level, with what it needs of
 * the packing: its rows per call (f->mr), for the AVX2 bf16 kernel the
 * swapped panel order (f->perm), for the AVX-512 bf16 kernels k rows in
 * pairs (f->pair) where every K block's length is even (d even; an odd d
 * packs k row by k row for the zero-extending kernel), and for the
 * VDPBF16PS kernel the batch as stored (f->dp). */
static void set_kernel(struct todre_sel_rows_fma *f, int64_t d)
{
    int f16 = f->dtype == TODRE_DTYPE_F16, bf16 = f->dtype == TODRE_DTYPE_BF16;
    f->mr = MR;
    f->half = NULL;
    f->perm = 0;
    f->pair = 0;
    f->dp = 0;
#ifdef TODRE_ROWS_X86
    _Static_assert(KC % 2 == 0, "K blocks of whole pairs");
    enum todre_cpu_isa isa = todre_cpu_isa();
    if (isa >= TODRE_CPU_ISA_AVX512) {
        f->pair = bf16 && d % 2 == 0;
        f->dp = f->pair && todre_sel_rows_bf16_dp();
        f->micro = f16    ? micro_avx512_f16
                   : bf16 ? (f->dp     ? micro_avx512_bf16_dp
                             : f->pair ? micro_avx512_bf16_pair
                                       : micro_avx512_bf16)
                          : micro_avx512_f32;
        f->half = f16    ? micro_avx512_f16_half
                  : bf16 ? (f->dp     ? micro_avx512_bf16_dp_half
                            : f->pair ? micro_avx512_bf16_pair_half
                                      : micro_avx512_bf16_half)
                         : micro_avx512_f32_half;
        f->mr = MR_WIDE;
        return;
    }
    if (isa >= TODRE_CPU_ISA_AVX2) {
        f->micro = f16 ? micro_avx2_f16 : bf16 ? micro_avx2_bf16 : micro_avx2_f32;
        f->perm = bf16;
        return;
    }
#endif
    f->micro = f16 ? micro_generic_f16 : bf16 ? micro_generic_bf16 : micro_generic_f32;
}

/* The packed operands in slot B (as pack_bytes sizes it) and the kernel
 * chosen; every row packed into panels unless @p packed (the rows are there
 * already, todre_sel_rows_fma_prepack); with ss, the rows' squared norms
 * from the same pass (pack_cols). */
static void set_operands(struct todre_sel_seg *s, struct todre_sel_rows_fma *f, char *b,
                         int packed, double *ss, const float *pw, double *dots)
{
    f->npad = pad_nr(s->n);
    f->dtype = s->dtype;
    f->pass = 0;
    f->cols = b;
    f->pos = f->moves = NULL;
    f->live = s->n;
    f->nmoves = 0;
    f->a = (float *)(b + align64((size_t)f->npad * (size_t)s->d * (size_t)esize(s->dtype)));
    set_kernel(f, s->d);
    if (!packed) pack_cols(s, f, ss, pw, dots);
}

int todre_sel_rows_fma_prepack(struct todre_sel_seg *s, double *ss, int64_t pivot, double *dots)
{
    char *b = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_B, pack_bytes(s->n, s->d, s->dtype));
    if (!b) return 0;
    struct todre_sel_rows_fma f;
    if (pivot >= 0)
        s->kern->widen(todre_sel_row(s->rows, s->dtype, s->stride, pivot), s->d, 1.0f, s->w);
    set_operands(s, &f, b, 0, ss, pivot >= 0 ? s->w : NULL, dots);
    s->packed = todre_cpu_workspace_claim(s->be, TODRE_CPU_WS_SELECT_B);
    return 1;
}

/* K block kb of the column at position `to` (panel to / NR, column to %
 * NR) <- that of the column at position `from`, as stored (at_kj): the
 * panels' values move bit for bit. */
static void move_col(const struct todre_sel_rows_fma *f, int64_t d, int64_t kb, int64_t to,
                     int64_t from)
{
    const int64_t k0 = kb * KC, kl = d - k0 < KC ? d - k0 : KC, es = esize(f->dtype);
    char *dst = (char *)f->cols + panel_at(d, kb, to / NR) * es;
    const char *src = (const char *)f->cols + panel_at(d, kb, from / NR) * es;
    const int jt = (int)(to % NR), jf = (int)(from % NR);
    if (f->pair) { /* a k pair is one 32-bit word: word q NR + j */
        uint32_t *o = (uint32_t *)dst + jt;
        const uint32_t *x = (const uint32_t *)src + jf;
        for (int64_t q = 0; q < kl / 2; q++) o[q * NR] = x[q * NR];
    } else if (es == 4) {
        float *o = (float *)dst + col_at(f, jt);
        const float *x = (const float *)src + col_at(f, jf);
        for (int64_t kk = 0; kk < kl; kk++) o[kk * NR] = x[kk * NR];
    } else {
        uint16_t *o = (uint16_t *)dst + col_at(f, jt);
        const uint16_t *x = (const uint16_t *)src + col_at(f, jf);
        for (int64_t kk = 0; kk < kl; kk++) o[kk * NR] = x[kk * NR];
    }
}

/* The first of the nm moves (to, from) whose target is >= pos (the moves
 * ascend by target). */
static int64_t first_move(const int32_t *mv, int64_t nm, int64_t pos)
{
    int64_t lo = 0, hi = nm;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (mv[2 * mid] < pos) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* out[r * npad + j] = dot(batch row r, the row at position j) for r <
 * count, j in the panels from p_first on (j >= p_first NR) that hold
 * positions below f->live (the row j itself unless drop_taken moved it).
 *
 * A thread takes panels in chunks of 4, in sweep order, and runs each
 * panel's K blocks in order (the batch's block of mr x 128 fp32 per group
 * comes from L2, the output tile stays in L1), so every pair's value is its
 * K blocks' products added in order, whatever the panel order or the
 * thread. The panel order alternates from
 * one batch to the next (f->pass): packed rows larger than the last-level
 * cache (f32 at n = 2880, d = 4096: 47 MB against 32 MiB of L3 on a Zen 3)
 * would be evicted by a cyclic sweep before their next use; sweeping back
 * and forth finds the rows used last still in the cache. */
/* Where the products of K block kb of panel p prefetch (PF_BYTES ahead of
 * the block, micro-kernels): in the panel, or past its end in panel @p next
 * (the panel after p in the sweep, or -1 where p is the last). A panel's
 * blocks lie one after another, so the plain address past p's end is the
 * next panel's block only in a forward sweep: backwards it was the panel
 * just made, and the next panel's first blocks came unprefetched (a
 * backward batch ran 5 % slower than a forward one at n = 2880, d = 4096,
 * f16: per-batch timers in `bench_select 2880 4096 288 f16 auto 7 1` on an
 * AMD EPYC Zen 4). */
static inline const char *prefetch_at(const struct todre_sel_rows_fma *f, int64_t d, int64_t kb,
                                      int64_t p, int64_t next)
{
    const int64_t es = esize(f->dtype), panel = d * NR * es;
    const int64_t ahead = panel_at(d, kb, 0) * es + PF_BYTES;
    const char *cols = (const char *)f->cols;
    if (ahead < panel || next < 0) return cols + panel_at(d, 0, p) * es + ahead;
    return cols + panel_at(d, 0, next) * es + (ahead - panel);
}

static void batch_products(const struct todre_sel_seg *s, struct todre_sel_rows_fma *f,
                           float *out, int count, int64_t p_first)
{
    const int64_t d = s->d, np = pad_nr(f->live) / NR, ld = f->npad, es = esize(f->dtype);
    const int mr = f->mr, groups = (count + mr - 1) / mr;
    const int back = (int)(f->pass++ & 1u);
    const int32_t *mv = f->moves;
    const int64_t nm = f->nmoves;
    todre_sel_rows_micro_fn micro = f->micro;
    /* chunks of panels handed out in sweep order: a thread slowed by
     * another process does less, instead of the others waiting for it */
#pragma omp parallel for num_threads(s->nthreads) schedule(dynamic, 4)
    for (int64_t i = p_first; i < np; i++) {
        int64_t p = back ? np - 1 - (i - p_first) : i;
        int64_t next = i + 1 < np ? (back ? p - 1 : p + 1) : -1;
        /* the moves into this panel (drop_taken: by ascending target) */
        int64_t m0 = 0, m1 = nm;
        if (nm) {
            m0 = first_move(mv, nm, p * NR);
            m1 = first_move(mv, nm, p * NR + NR);
        }
        for (int64_t kb = 0; kb * KC < d; kb++) {
            int64_t k0 = kb * KC, kl = d - k0 < KC ? d - k0 : KC;
            const float *ablk = f->a + k0 * AROWS;
            const char *b = (const char *)f->cols + panel_at(d, kb, p) * es;
            /* the moves' strided stores each waited for its line (a move
             * 7.7 % of a call at k = 288): the block's lines are fetched
             * first, all at once */
            if (m1 > m0)
                for (int64_t o = 0; o < kl * NR * es; o += 64) __builtin_prefetch(b + o, 1, 3);
            for (int64_t m = m0; m < m1; m++) move_col(f, d, kb, mv[2 * m], mv[2 * m + 1]);
            const char *pf = prefetch_at(f, d, kb, p, next);
            for (int g = 0; g < groups; g++) {
                int rows = count - g * mr < mr ? count - g * mr : mr;
                todre_sel_rows_micro_fn fn = f->half && 2 * rows <= mr ? f->half : micro;
                fn(ablk + (int64_t)g * kl * mr, b, pf, kl,
                   out + (int64_t)g * mr * ld + p * NR, ld, kb == 0, rows);
            }
        }
    }
    f->nmoves = 0;
}

/* ---- the row store (as select_gram.c keeps it for AMX) ------------------- */

todre_status todre_sel_rows_fma_init(struct todre_sel_seg *s, struct todre_sel_rows *r,
                                     struct todre_diag *diag)
{
    struct todre_sel_rows_fma *f = &r->fma;
    int64_t slots = s->plan->store_rows;
    /* the rows packed ahead are still there unless slot B was taken since */
    const int packed = todre_cpu_workspace_kept(s->be, TODRE_CPU_WS_SELECT_B, s->packed);
    char *b = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_B, pack_bytes(s->n, s->d, s->dtype));
    char *c = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_C, store_bytes(s->n, slots));
    if (!b || !c) {
        snprintf(diag->buf, diag->cap, "workspace: cannot allocate %lld x %lld products",
                 (long long)slots, (long long)s->n);
        return TODRE_ERR_OUT_OF_MEMORY;
    }
    set_operands(s, f, b, packed, NULL, NULL, NULL);
    memset(&r->amx, 0, sizeof r->amx);
    size_t rows = (size_t)f->npad * (size_t)(slots + AROWS) * sizeof(float);
    todre_sel_store_init(r, c, rows, f->npad, s->n, slots);
    /* With copies, a taken row's column is still read, through s->rep, for
     * its untaken copies (select_greedy.c, row_sim): no compaction. */
    if (!s->rep) {
        f->pos = r->free + slots;
        f->moves = f->pos + s->n;
        for (int64_t v = 0; v < s->n; v++) f->pos[v] = (int32_t)v;
    }
    return TODRE_OK;
}

/* Compaction: a Gram row is read only at untaken tokens (select_greedy.c),
 * and a token once taken stays taken, so the columns of the tokens taken
 * since the last batch are dropped from the panels before the next one:
 * each hole below the last live position takes the last untaken column
 * (its values copied bit for bit, so every pair keeps its chain and its
 * bits: select_rows.h), and the batch products cover only the positions
 * [0, live). A selection of k of n then makes about (n - k / 2) products a
 * row instead of n (at k = 720 of 2880, 12.5 % fewer). Here the moves are
 * only listed, by ascending target (f->moves); batch_products makes them,
 * each K block of a target panel just before its products, while the
 * block is in cache anyway, its lines prefetched: done in a pass of their
 * own, before the products, the moves took 6.5 % of a call at n = 2880,
 * k = 288 (f16, AVX-512, 2 threads: each move a strided column of the
 * panels, 4 KB a K block, read and written from L3), inside the products
 * without the prefetch 7.7 %, with it 1.6 %. No source of a move is the
 * target of another (the holes rise while the sources fall, and the
 * sources lie at or past the new live end, whose products nobody reads),
 * so the threads make them in any order. Each move takes a hole and a
 * source, distinct positions below the old live end: at most n / 2 moves,
 * two int32 each, in f->moves' n. */
static void drop_taken(const struct todre_sel_seg *s, struct todre_sel_rows_fma *f)
{
    int32_t *pos = f->pos, *mv = f->moves;
    int64_t live = f->live, nm = 0;
    while (live > 0 && s->taken[pos[live - 1]]) live--;
    for (int64_t j = 0; j < live; j++) {
        if (!s->taken[pos[j]]) continue;
        int32_t gone = pos[j];
        live--; /* pos[live] is untaken (the tail was trimmed), live > j */
        mv[2 * nm] = (int32_t)j;
        mv[2 * nm + 1] = (int32_t)live;
        nm++;
        pos[j] = pos[live];
        pos[live] = gone;
        while (live > j + 1 && s->taken[pos[live - 1]]) live--;
    }
    f->live = live;
    f->nmoves = nm;
}

void todre_sel_rows_fma_batch(struct todre_sel_seg *s, struct todre_sel_rows *r,
                              const int64_t *ids, int count, int sign)
{
    struct todre_sel_rows_fma *f = &r->fma;
    if (f->pos) drop_taken(s, f);
    pack_batch(s, f, ids, count);
    batch_products(s, f, r->out, count, 0);
    todre_sel_store_place(s, r, ids, count, sign, f->live < s->n ? f->pos : NULL, f->live);
}

/* ---- the Gram matrix on the same kernels --------------------------------- */

int64_t todre_sel_gram_fma_ld(int64_t n) { return pad_nr(n); }

size_t todre_sel_gram_fma_bytes(const struct todre_sel_seg *s)
{
    return pack_bytes(s->n, s->d, s->dtype) +
           (size_t)s->n * (size_t)pad_nr(s->n) * sizeof(float);
}

todre_status todre_sel_gram_fma_upper(struct todre_sel_seg *s, float *g, struct todre_diag *diag)
{
    struct todre_sel_rows_fma f;
    char *b = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_B, pack_bytes(s->n, s->d, s->dtype));
    if (!b) {
        snprintf(diag->buf, diag->cap, "workspace: cannot pack %lld rows for a Gram matrix",
                 (long long)s->n);
        return TODRE_ERR_OUT_OF_MEMORY;
    }
    set_operands(s, &f, b, 0, NULL, NULL, NULL);
    int64_t ids[AROWS];
    /* batches of AROWS rows: each B block loaded serves AROWS rows, and a
     * batch needs only the panels from its first row's on */
    for (int64_t i0 = 0; i0 < s->n; i0 += AROWS) {
        int count = s->n - i0 < AROWS ? (int)(s->n - i0) : AROWS;
        for (int r = 0; r < count; r++) ids[r] = i0 + r;
        pack_batch(s, &f, ids, count);
        batch_products(s, &f, g + i0 * f.npad, count, i0 / NR);
    }
    return TODRE_OK;
}
