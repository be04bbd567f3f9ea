/* Gram rows made on demand by FMA units (select_rows.c): the ROWS strategy
 * on the AVX2 + FMA + F16C and AVX-512F levels, and on AMX machines for
 * f32 and f16 rows (AMX makes bf16 ones, TODRE_SEL_AMX_ROWS_DTYPES; the
 * generic level uses BLAS's GRAM), for f32, f16 and bf16 rows alike.
 *
 * All n rows are packed once into column panels (TODRE_SEL_ROWS_NR columns,
 * K-major, in K blocks of TODRE_SEL_ROWS_KC), keeping their stored type
 * (f16 / bf16 are widened in registers, exactly); a batch of up to
 * TODRE_SEL_AMX_BATCH rows is widened to fp32 and multiplied against every
 * panel by an outer-product micro-kernel.
 *
 * Numerics: the value of the pair (r, v) is fixed by the ISA level alone:
 * per K block, one fp32 chain of products k = k0, k0 + 1, ... (fused on AVX2
 * and AVX-512, mul + add in the generic C), and the blocks added in order.
 * Neither the batch a row is made in, nor its slot in the batch, nor the
 * thread count changes a bit of it, so the speculation changes only the
 * time, never the selection; identical rows give identical values. bf16
 * rows by VDPBF16PS (todre_sel_rows_bf16_dp) follow the same chain, except
 * that subnormal inputs and partial sums become zero (select_rows.c). */
#ifndef TODRE_SRC_CPU_SELECT_ROWS_H
#define TODRE_SRC_CPU_SELECT_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "../backend.h"

#define TODRE_SEL_ROWS_NR 16  /* columns per packed panel */
#define TODRE_SEL_ROWS_KC 128 /* K block: a batch's block (36 x 128 fp32) stays in L1 */
#define TODRE_SEL_ROWS_MR 6   /* batch rows per micro-kernel call */
/* Rows per speculative batch (the planner's rows_batch): about 11 of 12 are
 * used on clustered data with the lookahead that chooses them
 * (select_greedy.c; 8 of 12 with the best current values); smaller batches
 * waste fewer products but stream the packed rows and pay the per-batch
 * scan and thread start more often (measured on a 2-core Zen 3: 12 about
 * 20% below 32; on Emerald Rapids 18 and 24 slower than 12,
 * bench/results/cpu-zen3-2026-11-23.json). At most TODRE_SEL_AMX_BATCH. */
#define TODRE_SEL_ROWS_BATCH 12
#define TODRE_SEL_ROWS_AROWS 36 /* batch rows packed: TODRE_SEL_AMX_BATCH rounded up to MR */

struct todre_sel_seg;
struct todre_sel_rows;

/* A micro-kernel (select_rows.c): pf is where it prefetches, the bytes
 * ahead of b's block that the products need next. */
typedef void (*todre_sel_rows_micro_fn)(const float *a, const void *b, const char *pf,
                                        int64_t kl, float *c, int64_t ldc, int first, int rows);

/* Packed operands of the FMA ROWS kernels. */
struct todre_sel_rows_fma {
    void *cols;        /* all rows as panels: [panel][K block][k][NR] (pair: [k / 2][NR][2]) */
    float *a;          /* the batch: [K block][mr group][k][mr], fp32 */
    int64_t npad;      /* n rounded up to NR (the store's row length) */
    todre_dtype dtype; /* of cols: as stored (f32, f16, bf16) */
    unsigned pass;     /* batches made: the panel order alternates */
    todre_sel_rows_micro_fn micro; /* the kernel for dtype at this level */
    todre_sel_rows_micro_fn half;  /* the same for groups of up to mr / 2 rows, or NULL */
    int mr;            /* batch rows per call of micro */
    int perm;          /* panel columns stored in col_at's order (select_rows.c) */
    int pair;          /* k rows stored in interleaved pairs (select_rows.c, at_kj) */
    int dp;            /* the batch as stored, in pairs, for VDPBF16PS (select_rows.c) */
    /* Compaction (ROWS, select_rows.c, drop_taken): the panels' column
     * positions [0, live) hold the untaken tokens pos[0..live); the taken
     * ones, whose columns no later row needs, are moved out of the way.
     * pos == NULL: no compaction (the Gram matrix; sets with copies). */
    int32_t *pos;      /* [n] token at each position; removed ones from live on */
    int32_t *moves;    /* [n]: the next batch's (to, from) position pairs */
    int64_t nmoves;    /* pairs in moves, made by the next batch_products */
    int64_t live;      /* positions the batch products cover */
};

/* Whether the FMA ROWS kernels serve this process (AVX2 or AVX-512 level). */
int todre_sel_rows_fma_usable(void);

/* Whether they make bf16 products by VDPBF16PS in this process (AVX-512
 * level or above, AVX512_BF16, an AMD CPU or $TODRE_CPU_BF16=dp; sets with
 * an even d: select_rows.c, use_dp), at twice the FMA kernel's rate. */
int todre_sel_rows_bf16_dp(void);

/* Rows the store may hold for this set once the packed operands take their
 * share of the workspace limit: min(planned, what fits), or 0 when less than
 * min(n, 2 batches) fits (the set then runs as GEMV). */
int64_t todre_sel_rows_fma_slots(const struct todre_sel_seg *s, int64_t planned);

/* The rows packed for the FMA kernels ahead of the set's run, with every
 * row's squared norm from the same pass into ss[0..n) (bitwise
 * todre_sel_sumsq's; select.c then makes no pass of its own for them) and,
 * for pivot >= 0, every row's raw dot product with row pivot into
 * dots[0..n) (sumsq_dot's, select_kernels.h: the first batch's estimate,
 * select_greedy.c, reads them; s->w is overwritten). Claims slot
 * B (cpu_internal.h) and records the claim in s->packed, so that
 * todre_sel_rows_fma_init packs nothing again unless the slot was taken
 * since. Returns 0, with nothing done, where slot B cannot be allocated. */
int todre_sel_rows_fma_prepack(struct todre_sel_seg *s, double *ss, int64_t pivot, double *dots);

/* As todre_sel_rows_init / todre_sel_rows_batch (select_internal.h), on
 * the FMA kernels. */
todre_status todre_sel_rows_fma_init(struct todre_sel_seg *s, struct todre_sel_rows *r,
                                     struct todre_diag *diag);
void todre_sel_rows_fma_batch(struct todre_sel_seg *s, struct todre_sel_rows *r,
                              const int64_t *ids, int count, int sign);

/* The Gram matrix of all rows on the same kernels (select_gram.c decides
 * when): todre_sel_gram_fma_upper writes, into g (n rows of
 * todre_sel_gram_fma_ld(n) floats, slot C), dot(row i, row j) for every
 * j >= i (and some j < i), each pair as the ROWS kernels make it, packing
 * all rows into slot B first; todre_sel_gram_fma_bytes is what both slots
 * take. */
int64_t todre_sel_gram_fma_ld(int64_t n);
size_t todre_sel_gram_fma_bytes(const struct todre_sel_seg *s);
todre_status todre_sel_gram_fma_upper(struct todre_sel_seg *s, float *g, struct todre_diag *diag);

#endif /* TODRE_SRC_CPU_SELECT_ROWS_H */
