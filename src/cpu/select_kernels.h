/* Row kernels of the CPU stage-1 backend: dot products of stored rows (f32,
 * f16 or bf16, read in place) with an fp32 vector, squared norms and
 * conversions. Each has a portable version and, on x86-64, AVX2/F16C and
 * AVX-512 versions; the table follows the ISA level chosen once per process
 * (cpu_isa.h), so the library runs on any x86-64 and compiles elsewhere.
 *
 * Numerics: products are formed from the exact fp32 value of each stored
 * element (f16 and bf16 widen exactly), dot products accumulate in fp32,
 * squared norms in fp64. The order of accumulation is fixed per ISA, so a
 * given machine always gives the same result for the same row. */
#ifndef TODRE_SRC_CPU_SELECT_KERNELS_H
#define TODRE_SRC_CPU_SELECT_KERNELS_H

#include <stdint.h>

#include "../backend.h"

/* sum_i row[i] * w[i] over d elements, fp32 accumulation. */
typedef float (*todre_sel_dot_fn)(const void *row, const float *w, int64_t d);
/* out[j] = dot(rows[j], w, d) for j < 4, each bitwise what the level's dot
 * gives (the same order of accumulation), w read once for the four. */
typedef void (*todre_sel_dot4_fn)(const void *const *rows, const float *w, int64_t d,
                                  float *out);
/* A squared norm, sum_i row[i]^2 in fp64 (Inf or NaN when the row holds a
 * non-finite value: squares of finite f32 values cannot overflow fp64 over
 * any realistic d), summed in parts: each call adds row[0..len) to the
 * level's partial sums st[0..TODRE_SEL_SUMSQ_STATE) (zero before a row's
 * first part) in the level's order of accumulation; a part's len is a
 * multiple of TODRE_SEL_SUMSQ_PART except in the row's last part (last != 0),
 * which also folds st into the sum it returns (the other parts return 0).
 * st holds the vector chains between parts, so a row summed in parts, cut
 * at any multiples of TODRE_SEL_SUMSQ_PART, gives bitwise its sum in one
 * part (todre_sel_sumsq): the ROWS packing sums every row as it packs it,
 * K block by K block (select_rows.c), and the other strategies' norms are
 * the same bits. */
typedef double (*todre_sel_sumsq_fn)(const void *row, int64_t len, double *st, int last);
#define TODRE_SEL_SUMSQ_STATE 16 /* two chains of 8 (AVX-512) */
#define TODRE_SEL_SUMSQ_PART 16  /* a multiple of every level's vector step */
/* As sumsq, bitwise the same squared norm, and in the same pass the row's
 * dot product with w (w[0..len) for this part): fp32 products of the exact
 * values summed in the level's fp32 lanes, carried between parts in
 * wst[0..TODRE_SEL_DOT_STATE) (zero before a row's first part), folded in
 * the row's last part into *dot. Parts cut at multiples of
 * TODRE_SEL_SUMSQ_PART give the dot of one part bitwise (its lanes do not
 * depend on the cuts); not bitwise the level's dot, whose chains differ.
 * The ROWS packing makes the pivot's dots with it (select_rows.c). */
typedef double (*todre_sel_sumsq_dot_fn)(const void *row, int64_t len, double *st, int last,
                                         const float *w, float *wst, double *dot);
#define TODRE_SEL_DOT_STATE 16 /* one chain of 16 (AVX-512) */
/* out[i] = (float)row[i] * scale (exact when scale is 1 or a power of two). */
typedef void (*todre_sel_widen_fn)(const void *row, int64_t d, float scale, float *out);

/* The greedy's update from one row of similarities (select_greedy.c,
 * update_row): for every v with taken[v] == 0, sim = (double)g[v] *
 * (scale[v] * sc), then acc[v] += sim (maxmin 0: MAX_SUM) or acc[v] = 1 -
 * sim where that is below acc[v] or NaN (maxmin 1: MAX_MIN). Returns the
 * untaken v with the smallest sign * acc[v] below +inf, ties to the lowest
 * v, or -1 when there is none (every untaken value is then +inf or NaN, and
 * the caller's scan, todre_sel_argbest, decides). Each operation rounds once
 * as written (no fused multiply-add), so every level gives the same bits. */
typedef int64_t (*todre_sel_update_fn)(double *acc, const uint8_t *taken, const float *g,
                                       const double *scale, double sc, int64_t n, int maxmin,
                                       int sign);

struct todre_sel_kernels {
    todre_sel_dot_fn dot;
    todre_sel_dot4_fn dot4;
    todre_sel_sumsq_fn sumsq;
    todre_sel_sumsq_dot_fn sumsq_dot;
    todre_sel_widen_fn widen;
    todre_sel_update_fn update;
    const char *isa; /* "avx512", "avx2", "generic" */
};

/* The kernels for @p dtype (F32, F16 or BF16) at the ISA level in use. */
const struct todre_sel_kernels *todre_sel_kernels_for(todre_dtype dtype);

/* A row's squared norm in one part. */
static inline double todre_sel_sumsq(const struct todre_sel_kernels *k, const void *row, int64_t d)
{
    double st[TODRE_SEL_SUMSQ_STATE] = {0};
    return k->sumsq(row, d, st, 1);
}

/* Size in bytes of one element of a supported float dtype. */
static inline int64_t todre_sel_elem_size(todre_dtype dt)
{
    return dt == TODRE_DTYPE_F32 ? 4 : 2;
}

/* Element (row r, column 0) of a row-major matrix with @p stride elements. */
static inline const void *todre_sel_row(const void *base, todre_dtype dt, int64_t stride,
                                        int64_t r)
{
    return (const char *)base + r * stride * todre_sel_elem_size(dt);
}

/* One stored scalar (f32, f16 or bf16) as float. */
float todre_sel_load(const void *p, todre_dtype dt);

#endif /* TODRE_SRC_CPU_SELECT_KERNELS_H */
