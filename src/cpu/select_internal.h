/* Shared state of the CPU stage-1 kernels (select*.c). Internal.
 *
 * Similarities are never formed from a normalised copy unless the data
 * forces it: s(v, u) = dot(e_v, e_u) * r_v * r_u, with e the stored rows
 * (read in place, any of f32 / f16 / bf16), dot accumulated in fp32 and
 * r = 1 / ||e|| from an fp64 norm. Only when some row's squared norm lies
 * outside [TODRE_SEL_SAFE_LO, TODRE_SEL_SAFE_HI] (where raw fp32 products
 * could overflow or underflow) do the kernels read an fp32 copy of the
 * normalised rows instead (and r becomes 1, or 0 for a zero row). */
#ifndef TODRE_SRC_CPU_SELECT_INTERNAL_H
#define TODRE_SRC_CPU_SELECT_INTERNAL_H

#include <stdint.h>

#include "cpu_internal.h"
#include "select_amx.h"
#include "select_kernels.h"
#include "select_rows.h"

/* Threads that share the FMA ROWS lookahead's mini-rows (select_greedy.c):
 * 16 groups of 4 dot products a pick leave little for more. */
#define TODRE_SEL_LOOKAHEAD_THREADS 4

#define TODRE_SEL_SAFE_LO 1e-30
#define TODRE_SEL_SAFE_HI 1e30

/* One token set, as the kernels see it. */
struct todre_sel_seg {
    int64_t index;  /* set number b (messages) */
    int64_t row0;   /* its first global row */
    int64_t n, d, k;

    /* Rows the dot kernels read: the input rows, or the normalised copy. */
    const void *rows;
    todre_dtype dtype;
    int64_t stride; /* elements */
    const struct todre_sel_kernels *kern;
    const double *scale; /* [n]: the r_v that turn dots of `rows` into cosines */

    /* The normalised fp32 copy when guard_range made one (select.c), else NULL. */
    const float *f32;
    int64_t f32_ld;

    /* Scratch (slot A), sized for this set. */
    double *acc;    /* [n] cumulative similarity / distance */
    int64_t *rep_buf; /* [n] scratch for rep */
    /* rep[v]: the lowest row with the same values as row v (v itself when
     * none); NULL when the set has no copies or they need not be known
     * (todre_sel_find_copies, select_copies.c) */
    const int64_t *rep;
    uint8_t *taken; /* [n] 1 = selected */
    float *w;       /* [d] the fp32 vector of a GEMV; [TODRE_SEL_LOOKAHEAD_THREADS x d]:
                     * one per thread of the ROWS lookahead (select_greedy.c) */
    double *mu;     /* [d] */
    double *near;   /* [n] ISOLATED scores; the first batch's estimate (select_greedy.c) */
    void *pairs;    /* [n] 16-byte records (CLS_TOPK sort) */

    struct todre_cpu_backend *be;
    const struct todre_select_job *job;
    const struct todre_select_plan *plan; /* the core's plan for this set */
    int nthreads;

    /* ROWS (set by select.c, follow_plan): 1 = the AMX kernel makes the
     * rows, 0 = the FMA kernels (select_rows.h); rows per batch of that
     * kernel (the greedy loop's speculative batch) */
    int rows_amx;
    int rows_batch;
    /* Slot B's claim when select.c packed the rows for the ROWS kernels
     * (FMA or AMX) ahead of the run, taking the norms from that pass
     * (todre_sel_rows_fma_prepack, todre_sel_amx_rows_prepack), else 0 */
    uint64_t packed;
    /* The token whose raw dot products with every row of the set near[]
     * holds, from the same packing (select.c, pack_ahead), or -1 */
    int64_t near_dots;
};

/* Pivot of a MAX_SUM / MAX_MIN set (job->pivot, range applied). Computes
 * the Gram matrix (returned through *gram, NULL when not made) for the
 * ISOLATED pivot under a GRAM plan. */
todre_status todre_sel_pivot(struct todre_sel_seg *s, const float **gram, int64_t *pivot,
                             struct todre_diag *diag);

/* The pivot todre_sel_pivot will choose where it needs no norm and no
 * product (CLS, and the core's FIXED draw), else -1. */
int64_t todre_sel_pivot_ahead(const struct todre_sel_seg *s);

/* Greedy MAX_SUM / MAX_MIN from pivot p with the plan's strategy; writes the
 * selection order into sel[0..k) and marks s->taken. @p gram: a ready Gram
 * matrix or NULL. */
todre_status todre_sel_greedy(struct todre_sel_seg *s, int64_t p, const float *gram,
                              int64_t *sel, struct todre_diag *diag);

/* CLS_TOPK: selection order into sel[0..k), marks s->taken. */
todre_status todre_sel_cls_topk(struct todre_sel_seg *s, int64_t *sel, struct todre_diag *diag);

/* ---- Gram matrices and fp32 views (select_gram.c) ----------------------- */

/* The full (both triangles) n x n matrix of raw dots of s->rows (slot C),
 * or NULL with the status set. */
const float *todre_sel_gram(struct todre_sel_seg *s, todre_status *st, struct todre_diag *diag);

/* Gram rows made on demand (AMX or the FMA kernels), s->rows_batch rows at a time,
 * kept in a store of `slots` rows (the plan's store_rows): row c of the raw dots lies at
 * g + slot[c] * ld while slot[c] >= 0. A row is needed once (when its token
 * is selected), so a used row is dropped, and unused ones may be evicted
 * for a new batch; any row is bitwise the same whichever batch makes it. */
struct todre_sel_rows {
    float *g, *out; /* the store; the batch output */
    int64_t ld, slots, nfree;
    int32_t *slot;  /* [n] slot of token v's row, -1 = none */
    int32_t *owner; /* [slots] token of a slot, -1 = free */
    int32_t *free;  /* [slots] stack of free slots, nfree of them */
    struct todre_sel_amx_pack amx; /* all rows as B tiles, a batch as A tiles */
    struct todre_sel_rows_fma fma; /* below AMX: rows as panels, a batch in fp32 */
};

/* Pack all rows once (AMX: B tiles; FMA: panels), empty store of
 * s->plan->store_rows rows (sized by follow_plan so that the packed rows and
 * the store fit the workspace limit together: todre_sel_amx_rows_slots,
 * todre_sel_rows_fma_slots); fails like todre_sel_gram when memory runs
 * out. With s->rows_amx, needs AMX for s->dtype. */
todre_status todre_sel_rows_init(struct todre_sel_seg *s, struct todre_sel_rows *r,
                                 struct todre_diag *diag);

/* Make the rows ids[0..count) (count <= TODRE_SEL_AMX_BATCH, none stored,
 * none selected but ids[0]); when the store is full, evicts the rows whose
 * tokens have the worst values sign * s->acc. */
void todre_sel_rows_batch(struct todre_sel_seg *s, struct todre_sel_rows *r, const int64_t *ids,
                          int count, int sign);

/* The store a ROWS plan of @p planned rows can keep on AMX beside the
 * packed rows (all rows as B tiles: 4 bytes a value for f16, 2 for bf16),
 * the batch's tiles and its output, within the workspace limit: @p planned
 * or fewer, and 0 when less than min(n, 2 TODRE_SEL_AMX_BATCH) rows fit
 * (the set then runs on the FMA kernels, or as GEMV). */
int64_t todre_sel_amx_rows_slots(const struct todre_sel_seg *s, int64_t planned);

/* As todre_sel_rows_fma_prepack (select_rows.h), for the AMX kernel's rows
 * (B tiles in slot B, as todre_sel_rows_init lays them out). */
int todre_sel_amx_rows_prepack(struct todre_sel_seg *s, double *ss);

/* Free the slot of stored row c once it has been used. */
void todre_sel_rows_drop(struct todre_sel_rows *r, int64_t c);

/* The row store of both ROWS kernels (AMX here, FMA in select_rows.c), in
 * c: the store [slots x ld] | batch output | slot [n] | owner [slots] | free
 * [slots], the int32 arrays from byte `rows` on. _init empties it; _place
 * gives the rows ids[0..count), computed into r->out (row i at i * ld), their
 * slots, evicting as todre_sel_rows_batch says; with pos (the FMA kernels'
 * compaction, select_rows.h), r->out holds positions [0, live), position j
 * the token pos[j], and the tokens pos[live..n) (taken) get 0. */
void todre_sel_store_init(struct todre_sel_rows *r, char *c, size_t rows, int64_t ld, int64_t n,
                          int64_t slots);
void todre_sel_store_place(const struct todre_sel_seg *s, struct todre_sel_rows *r,
                           const int64_t *ids, int count, int sign, const int32_t *pos,
                           int64_t live);

/* Whether the Gram matrix of a GRAM plan and its scratch (the widened
 * tiles of 16-bit rows, BLAS's own buffers) fit the workspace limit. The
 * planner counts only the matrix (src/select_plan.c); a set for which this
 * fails runs as GEMV (select.c, follow_plan). */
int todre_sel_gram_fits(const struct todre_sel_seg *s);

/* near[v - lo] = max over u != v of s(v, u) for v in [lo, hi), from @p gram
 * when given, else by tiles of products within the workspace limit (16-bit
 * rows widened tile by tile, never as a whole); copies get their first
 * copy's value (s->rep). A NaN similarity is ignored like fmaxf does; a row
 * with none that is a number gets NaN, which todre_sel_argbest takes last. */
todre_status todre_sel_nearest(struct todre_sel_seg *s, const float *gram, int64_t lo,
                               int64_t hi, double *near, struct todre_diag *diag);

/* ---- identical rows (select_copies.c) ------------------------------------ */

/* Find the rows of the set that repeat an earlier row (s->rep; uses
 * s->pairs as scratch). Called before any product is taken from BLAS or AMX
 * (GRAM, ROWS, the ISOLATED pivot), whose rounding depends on a row's place
 * in a block: products are then read through rep, so that copies score
 * bitwise the same and the tie rule keeps the lowest index. */
void todre_sel_find_copies(struct todre_sel_seg *s);

/* near[v - lo] <- near of the first copy of row v in [lo, hi) (uses s->pairs
 * as scratch). */
void todre_sel_same_near(const struct todre_sel_seg *s, int64_t lo, int64_t hi, double *near);

/* ---- helpers (select.c) --------------------------------------------------- */

/* One CLS value of set-local row i. */
float todre_sel_cls(const struct todre_sel_seg *s, int64_t i);

/* argmin (sign = +1) or argmax (sign = -1) of v[0..n) over rows with
 * taken[i] == 0 (taken may be NULL); lowest index wins ties; NaN values
 * come last (the lowest NaN when all are NaN); -1 if none. */
int64_t todre_sel_argbest(const double *v, const uint8_t *taken, int64_t n, int sign);

/* todre_sel_argbest's rule for one candidate met in index order: whether x
 * (sign applied) replaces the best so far, bv at index best (-1: none yet).
 * Strict, so the lowest index keeps a tie; NaN comes after every number.
 * Also the greedy's update, which finds the next token in its own pass. */
static inline int todre_sel_better(double x, double bv, int64_t best)
{
    return best < 0 || (bv != bv ? x == x : x < bv);
}

#endif /* TODRE_SRC_CPU_SELECT_INTERNAL_H */
