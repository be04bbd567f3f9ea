/* Gram matrices of f16 / bf16 rows on Intel AMX (select_amx.c). */
#ifndef TODRE_SRC_CPU_SELECT_AMX_H
#define TODRE_SRC_CPU_SELECT_AMX_H

#include <stdint.h>

#include "../backend.h"

/* Packed operands, 1 KiB tiles of 32-bit pairs (see select_amx.c): a = A
 * side (npad rows), b = B side (transposed tiles), npad * dpad uint32 each
 * for f16 (split = 1: a pair (h, l) per value), half that for bf16 (split =
 * 0: a pair per two values). npad and dpad are multiples of 32
 * (todre_sel_amx_pad). For a batch of rows (todre_sel_amx_batch), a holds
 * only the batch's TODRE_SEL_AMX_BATCH rows, and sw (f16) the same with the
 * halves of each pair swapped; when a is NULL, packing writes
 * only b and needs tmp: one block of 16 rows (todre_sel_amx_block) per
 * thread. */
struct todre_sel_amx_pack {
    uint32_t *a, *b, *tmp, *sw;
    int64_t npad, dpad;
    int split;
};

/* The dtypes whose ROWS rows AMX makes (the CPU backend's
 * caps.rows_fast_dtypes): bf16. f16 rows, through the exact split, stream 4
 * bytes a value per batch and ran 1.3-1.45x slower than the AVX-512 FMA
 * kernels at n = 2880, d = 4096, k = 288 and 720 (docs/performance.md, AMX), so
 * they are made there; f16 Gram matrices stay on AMX. */
#define TODRE_SEL_AMX_ROWS_DTYPES (1u << TODRE_DTYPE_BF16)

/* Rows computed together by todre_sel_amx_batch (one C micro-block). */
#define TODRE_SEL_AMX_BATCH 32

int64_t todre_sel_amx_pad(int64_t x);

/* Whether this CPU and OS run AMX-BF16 and the dtype has an exact split
 * (f16, bf16). Cheap after the first call. */
int todre_sel_amx_usable(todre_dtype dtype);

/* Fill @p p (arrays allocated by the caller) from n rows of d values; with
 * ss, also each row's squared norm into ss[0..n) (todre_sel_sumsq's bits,
 * select_kernels.h), from the row just packed (in L2: a block of 16 rows is
 * 16 d values of 2 bytes), so that the rows are read once. */
void todre_sel_amx_pack(const struct todre_sel_amx_pack *p, const void *rows, int64_t stride,
                        todre_dtype dtype, int64_t n, int64_t d, int nthreads, double *ss);

/* uint32 values of the packed tiles of 16 rows. */
static inline int64_t todre_sel_amx_block(const struct todre_sel_amx_pack *p)
{
    return 16 * (p->split ? p->dpad : p->dpad / 2);
}

/* The A tiles (p->a) of the batch rows ids[0..TODRE_SEL_AMX_BATCH), -1 = a
 * zero row. */
void todre_sel_amx_pack_rows(const struct todre_sel_amx_pack *p, const void *rows,
                             int64_t stride, todre_dtype dtype, int64_t d, const int64_t *ids);

/* c[r * npad + j] = dot(batch row r, row j) for r < TODRE_SEL_AMX_BATCH,
 * j < npad: bitwise the values todre_sel_amx_gram gives for those pairs. */
void todre_sel_amx_batch(const struct todre_sel_amx_pack *p, float *c, int nthreads);

/* g[i * npad + j] = dot(row i, row j) for all i, j < npad (both triangles;
 * g[i][j] and g[j][i] are bitwise equal). */
void todre_sel_amx_gram(const struct todre_sel_amx_pack *p, float *g, int nthreads);

#endif /* TODRE_SRC_CPU_SELECT_AMX_H */
