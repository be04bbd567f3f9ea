/* Greedy MAX_SUM (ToDRE) and MAX_MIN (DivPrune) from a pivot.
 *
 * Both keep one fp64 value per token, updated with s(v, c) of each newly
 * selected token c, with the strategy the core's planner chose for the set
 * (src/select_plan.c): one matrix-vector product over the n rows per step
 * (GEMV: the rows are read in place, f16 / bf16 included), or one row of a
 * Gram matrix made up front (GRAM), or one row made on demand (ROWS, by
 * AMX or the FMA kernels): when the row of the new c is not there yet, the
 * rows of c and of the 31 (AMX) or 11 (FMA) untaken tokens most likely to
 * come next (the best current values) are made together: AMX makes rows in
 * blocks of 32 anyway, and on clustered or Gaussian data 10 to 26 of them
 * are used (about 9 of 12 on the FMA kernels).
 * Any row is the same, whichever batch makes it, so the speculation changes
 * only the time, never the selection. A row is used once, so ROWS keeps only
 * rows made and not yet used, in a store the planner sized by the workspace
 * limit (any n): a full store evicts the speculative rows least likely to be used, and
 * an evicted row is made again if its token is selected. The per-row products
 * are independent and the arg-min / arg-max is a serial scan, so the result
 * does not depend on the thread count. */
#include <math.h>

#include "select_internal.h"

/* acc[v] <- acc[v] + s(v, c) (MAX_SUM) or min(acc[v], 1 - s(v, c)) (MAX_MIN)
 * for every untaken v. A NaN similarity cannot come from accepted input
 * (non-finite rows are refused, rows whose raw products would leave the
 * fp32 range are read normalised: select.c), but if one did it would stay
 * in the value (a sum with NaN is NaN; the min keeps it too) rather than be
 * dropped, and todre_sel_argbest takes NaN values last: the CUDA module's
 * rule (docs/cuda.md). A min that skipped it would leave D_v = +inf and take
 * a row with no valid similarity first. */
static inline void fold(double *acc, int64_t v, double sim, int maxmin)
{
    if (maxmin) {
        double dist = 1.0 - sim;
        if (dist < acc[v] || dist != dist) acc[v] = dist;
    } else {
        acc[v] += sim;
    }
}

static void update_gemv(struct todre_sel_seg *s, int64_t c, int maxmin)
{
    const void *rc = todre_sel_row(s->rows, s->dtype, s->stride, c);
    s->kern->widen(rc, s->d, 1.0f, s->w); /* exact: the stored values */
    double sc = s->scale[c];
    /* dynamic: a core busy with another process then does less of the step */
#pragma omp parallel for num_threads(s->nthreads) schedule(dynamic, 64)
    for (int64_t v = 0; v < s->n; v++) {
        if (s->taken[v]) continue;
        float dot = s->kern->dot(todre_sel_row(s->rows, s->dtype, s->stride, v), s->w, s->d);
        fold(s->acc, v, (double)dot * (s->scale[v] * sc), maxmin);
    }
}

/* From row c of the raw dots, g[v] = dot(e_c, e_v), made by BLAS or AMX:
 * read through each row's first copy (s->rep), so that copies get the same
 * value whatever their place in the kernel's blocks (select_copies.c).
 * Returns the next token, todre_sel_argbest of the updated values, found in
 * the same pass (a second pass over the n values took 4 % of a call at
 * n = 2880, k = 288). */
static int64_t update_row(struct todre_sel_seg *s, const float *g, int64_t c, int maxmin,
                          int sign)
{
    const double sc = s->scale[c];
    const int64_t *rep = s->rep;
    const uint8_t *taken = s->taken;
    double *acc = s->acc;
    int64_t best = -1;
    double bv = 0;
    for (int64_t v = 0; v < s->n; v++) {
        if (taken[v]) continue;
        fold(acc, v, (double)g[rep ? rep[v] : v] * (s->scale[v] * sc), maxmin);
        double x = sign * acc[v];
        if (todre_sel_better(x, bv, best)) {
            best = v;
            bv = x;
        }
    }
    return best;
}

/* Rows for c and the up to 31 untaken tokens without a row that have the
 * best values now (ties: lowest index), but no more than the `left` steps
 * after c's still take: the last step's token needs no row, so a batch
 * made near the end speculates only on what can still be used. */
static void next_batch(struct todre_sel_seg *s, struct todre_sel_rows *r, int64_t c, int sign,
                       int64_t left)
{
    int64_t ids[TODRE_SEL_AMX_BATCH];
    double val[TODRE_SEL_AMX_BATCH];
    int m = 0;
    /* <= TODRE_SEL_AMX_BATCH - 1 (follow_plan) */
    const int cap = left < s->rows_batch - 1 ? (int)left : s->rows_batch - 1;
    for (int64_t v = 0; cap > 0 && v < s->n; v++) {
        if (s->taken[v] || r->slot[v] >= 0) continue;
        double x = sign * s->acc[v];
        if (m == cap && x >= val[m - 1]) continue;
        int i = m < cap ? m++ : m - 1; /* insertion sort, the worst drops out */
        for (; i > 0 && val[i - 1] > x; i--) {
            val[i] = val[i - 1];
            ids[i + 1] = ids[i];
        }
        val[i] = x;
        ids[i + 1] = v;
    }
    ids[0] = c;
    todre_sel_rows_batch(s, r, ids, m + 1, sign);
}

todre_status todre_sel_greedy(struct todre_sel_seg *s, int64_t p, const float *gram,
                              int64_t *sel, struct todre_diag *diag)
{
    int maxmin = s->job->objective == TODRE_OBJECTIVE_MAX_MIN, sign = maxmin ? -1 : +1;
    todre_status st = TODRE_OK;
    int32_t plan = s->plan->strategy;
    struct todre_sel_rows rows;
    /* k = 1 takes no step: no products to prepare */
    if (s->k > 1 && plan == TODRE_STRATEGY_GRAM && !gram) gram = todre_sel_gram(s, &st, diag);
    if (s->k > 1 && plan == TODRE_STRATEGY_ROWS) st = todre_sel_rows_init(s, &rows, diag);
    if (st != TODRE_OK) return st;
    for (int64_t v = 0; v < s->n; v++) s->acc[v] = maxmin ? INFINITY : 0.0;
    int64_t c = p;
    for (int64_t t = 0;; t++) {
        sel[t] = c;
        s->taken[c] = 1;
        if (t + 1 == s->k) break;
        if (plan == TODRE_STRATEGY_ROWS) {
            /* steps t + 1 .. k - 2 need rows after this one */
            if (rows.slot[c] < 0) next_batch(s, &rows, c, sign, s->k - 2 - t);
            int64_t next = update_row(s, rows.g + rows.slot[c] * rows.ld, c, maxmin, sign);
            todre_sel_rows_drop(&rows, c);
            c = next;
        } else if (gram) {
            c = update_row(s, gram + c * s->n, c, maxmin, sign);
        } else {
            update_gemv(s, c, maxmin);
            c = todre_sel_argbest(s->acc, s->taken, s->n, sign);
        }
    }
    return TODRE_OK;
}
