/* Greedy MAX_SUM (ToDRE) and MAX_MIN (DivPrune) from a pivot.
 *
 * Both keep one fp64 value per token, updated with s(v, c) of each newly
 * selected token c, with the strategy the core's planner chose for the set
 * (src/select_plan.c): one matrix-vector product over the n rows per step
 * (GEMV: the rows are read in place, f16 / bf16 included), or one row of a
 * Gram matrix made up front (GRAM), or one row made on demand (ROWS, by
 * AMX or the FMA kernels): when the row of the new c is not there yet, the
 * rows of c and of the 31 (AMX) or 11 (FMA) untaken tokens most likely to
 * come next are made together. AMX makes rows in blocks of 32 anyway and
 * takes the best current values (on clustered or Gaussian data 10 to 26 of
 * the 32 are used); the FMA kernels run the greedy ahead on exact values of
 * a few candidates (next_batch, below: about 11 of 12 used on clustered
 * data, 9 on Gaussian rows, where the best current values gave 9 and 6).
 * Any row is the same, whichever batch makes it, so the speculation changes
 * only the time, never the selection. A row is used once, so ROWS keeps only
 * rows made and not yet used, in a store the planner sized by the workspace
 * limit (any n): a full store evicts the speculative rows least likely to be used, and
 * an evicted row is made again if its token is selected. The per-row products
 * are independent and the arg-min / arg-max is a serial scan, so the result
 * does not depend on the thread count. */
#include <math.h>

#include <omp.h>

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

/* s(c, v) from row c of the raw dots, g[v] = dot(e_c, e_v) (BLAS, AMX or the
 * FMA kernels), sc = r_c: read through each row's first copy (s->rep), so
 * that copies get the same value whatever their place in the kernel's
 * blocks (select_copies.c). */
static inline double row_sim(const struct todre_sel_seg *s, const float *g, int64_t v, double sc)
{
    return (double)g[s->rep ? s->rep[v] : v] * (s->scale[v] * sc);
}

/* The update from row c (row_sim). Returns the next token,
 * todre_sel_argbest of the updated values, found in the same pass (a
 * second pass over the n values took 4 % of a call at n = 2880, k = 288).
 * Without copies, the level's vector kernel (todre_sel_update_fn: bitwise
 * this loop; one value at a time it took 2 % of a call, on one thread while
 * the others waited); its -1 (no value below +inf) leaves the choice to
 * todre_sel_argbest. */
static int64_t update_row(struct todre_sel_seg *s, const float *g, int64_t c, int maxmin,
                          int sign)
{
    const double sc = s->scale[c];
    if (!s->rep) {
        int64_t next = s->kern->update(s->acc, s->taken, g, s->scale, sc, s->n, maxmin, sign);
        return next >= 0 ? next : todre_sel_argbest(s->acc, s->taken, s->n, sign);
    }
    const uint8_t *taken = s->taken;
    double *acc = s->acc;
    int64_t best = -1;
    double bv = 0;
    for (int64_t v = 0; v < s->n; v++) {
        if (taken[v]) continue;
        fold(acc, v, row_sim(s, g, v, sc), maxmin);
        double x = sign * acc[v];
        if (todre_sel_better(x, bv, best)) {
            best = v;
            bv = x;
        }
    }
    return best;
}

/* The speculative rows of a batch on the FMA kernels: the greedy run ahead
 * on a few exact values. The candidates are the LOOKAHEAD untaken tokens
 * other than c with the best current values; the greedy's next steps take
 * almost only from them. Their values are moved on by c's similarities with
 * them, then by those of each simulated pick in turn (from the pick's
 * stored row where it has one, else as a "mini-row": LOOKAHEAD dot products
 * of d, about 2 % of a batch row's n), and each pick without a row joins the
 * batch. Within the candidates the simulation follows the greedy exactly;
 * it misses only where a token outside them, or a near-tie rounded the
 * other way, comes next. bench/speculation_sim.py models it: rows made per
 * step at n = 2880, k = 288, batches of 12, 1.34 -> 1.06 on clustered rows
 * (26 batches instead of 32) and 1.94 -> 1.32 on Gaussian ones (48
 * candidates: 1.09 and 1.50; 32: 1.20 and 1.69). AMX keeps the best
 * current values: its batches of 32 rows gain little from the lookahead
 * (2.06 -> 1.85 rows per step on clustered rows, none on Gaussian ones)
 * for up to 31 mini-rows each, and a first version measured bf16 rows on
 * AMX 1.15x slower with it. */
#define LOOKAHEAD 64

/* Whether (x, v) ranks after (y, u): the worse value, ties to the higher
 * index, NaN after every number (todre_sel_better's order). */
static inline int worse(double x, int64_t v, double y, int64_t u)
{
    if (x != x || y != y) return y == y || (x != x && v > u);
    return x > y || (x == y && v > u);
}

/* Up to m untaken tokens other than those in skip[0..ns) whose row is not
 * made (no_row) or any (all), with the best sign * vals[v] (vals: s->acc,
 * or first_values' estimate), into ids[] (a heap, the worst first: a
 * batch's order does not matter, todre_sel_store_place). Returns how many. */
static int best_values(const struct todre_sel_seg *s, const struct todre_sel_rows *r, int sign,
                       const double *vals, const int64_t *skip, int ns, int no_row, int m,
                       int64_t *ids, double *val)
{
    int h = 0;
    for (int64_t v = 0; v < s->n; v++) {
        if (s->taken[v] || (no_row && r->slot[v] >= 0)) continue;
        double x = sign * vals[v];
        if (h == m && !worse(val[0], ids[0], x, v)) continue; /* no better than the worst */
        int in = 0;
        for (int i = 0; i < ns && !in; i++) in = skip[i] == v;
        if (in) continue;
        int i;
        if (h < m) { /* sift up */
            for (i = h++; i > 0 && worse(x, v, val[(i - 1) / 2], ids[(i - 1) / 2]); i = (i - 1) / 2) {
                val[i] = val[(i - 1) / 2];
                ids[i] = ids[(i - 1) / 2];
            }
        } else { /* replace the worst, sift down */
            for (i = 0;;) {
                int l = 2 * i + 1, w = l;
                if (l >= h) break;
                if (l + 1 < h && worse(val[l + 1], ids[l + 1], val[l], ids[l])) w = l + 1;
                if (!worse(val[w], ids[w], x, v)) break;
                val[i] = val[w];
                ids[i] = ids[w];
                i = w;
            }
        }
        val[i] = x;
        ids[i] = v;
    }
    return h;
}

/* The lookahead from c over the nc candidates cand[] (values val[], raw):
 * appends to ids[1..] up to cap picks that have no row; returns how many.
 * Serial: a mini-row is LOOKAHEAD dot products of d, four at a time (dot4;
 * f16 at d = 4096 about 12 us, 17 us one at a time), a run up to cap of
 * them. Spread over the context's threads it took
 * three barriers per pick, about 900 per call at n = 2880, k = 288; on an
 * oversubscribed machine (more runnable threads than cores, e.g. several
 * processes each with a thread per core) every barrier waits for a thread
 * the scheduler has parked, and a call took 50x longer than alone
 * (docs/benchmarks.md, "Oversubscribed CPU"). */
static int lookahead(struct todre_sel_seg *s, const struct todre_sel_rows *r, int64_t c,
                     int maxmin, int sign, const int64_t *cand, double *val, int nc, int cap,
                     int64_t *ids)
{
    double sim[LOOKAHEAD];
    uint8_t picked[LOOKAHEAD] = {0};
    int m = 0;
    int64_t u = c;
    const int64_t d = s->d;
    for (;;) {
        const double su = s->scale[u];
        if (r->slot[u] >= 0) {
            const float *g = r->g + r->slot[u] * r->ld;
            for (int i = 0; i < nc; i++)
                if (!picked[i]) sim[i] = row_sim(s, g, cand[i], su);
        } else {
            /* the unpicked candidates, four dot products at a time */
            s->kern->widen(todre_sel_row(s->rows, s->dtype, s->stride, u), d, 1.0f, s->w);
            int todo[LOOKAHEAD], nt = 0, j = 0;
            for (int i = 0; i < nc; i++)
                if (!picked[i]) todo[nt++] = i;
            for (; j + 4 <= nt; j += 4) {
                const void *x[4];
                float dot[4];
                for (int q = 0; q < 4; q++)
                    x[q] = todre_sel_row(s->rows, s->dtype, s->stride, cand[todo[j + q]]);
                s->kern->dot4(x, s->w, d, dot);
                for (int q = 0; q < 4; q++)
                    sim[todo[j + q]] = (double)dot[q] * (s->scale[cand[todo[j + q]]] * su);
            }
            for (; j < nt; j++) {
                const void *x = todre_sel_row(s->rows, s->dtype, s->stride, cand[todo[j]]);
                sim[todo[j]] = (double)s->kern->dot(x, s->w, d) * (s->scale[cand[todo[j]]] * su);
            }
        }
        int best = -1;
        double bv = 0;
        for (int i = 0; i < nc; i++) {
            if (picked[i]) continue;
            fold(val, i, sim[i], maxmin);
            double x = sign * val[i];
            if (todre_sel_better(x, bv, best)) best = i, bv = x;
        }
        if (best < 0) break;
        picked[best] = 1;
        u = cand[best];
        if (r->slot[u] < 0) {
            ids[1 + m++] = u;
            if (m == cap) break;
        }
    }
    return m;
}

/* The values after the first step's update, estimated, into s->near
 * (free once the pivot is chosen): before it every value is the same, and
 * the lookahead's candidates would be the lowest indices. From dot
 * products of the stored rows with c's (the lookahead's kernel, in
 * parallel), not the batch kernel's bits; only the batch's choice depends
 * on them. Measured at n = 2880, d = 4096, k = 288 (FMA kernels): the
 * first batch of 12 makes 9 used rows instead of 3, 294 rows in all
 * instead of 303 (docs/benchmarks.md, session 14). Not for AMX, whose
 * batches of 32 cost about what this pass does (measured 6 % slower at n =
 * 576, k = 64, where the FMA kernels gain 5-12 %). */
static const double *first_values(struct todre_sel_seg *s, int64_t c, int maxmin)
{
    double *est = s->near;
    const double sc = s->scale[c];
    s->kern->widen(todre_sel_row(s->rows, s->dtype, s->stride, c), s->d, 1.0f, s->w);
#pragma omp parallel for num_threads(s->nthreads) schedule(dynamic, 64)
    for (int64_t v = 0; v < s->n; v++) {
        est[v] = s->acc[v];
        if (s->taken[v]) continue;
        float dot = s->kern->dot(todre_sel_row(s->rows, s->dtype, s->stride, v), s->w, s->d);
        fold(est, v, (double)dot * (s->scale[v] * sc), maxmin);
    }
    return est;
}

/* The batch for c, which has no row: c, then up to min(rows_batch - 1,
 * left) tokens without a row, from the lookahead (FMA kernels; the first
 * batch's candidates from first_values' estimate) and then the best
 * current values (ties: lowest index). `left` are the steps after c's that
 * still take a row: the last step's token needs none, so a batch made near
 * the end speculates only on what can still be used. */
static void next_batch(struct todre_sel_seg *s, struct todre_sel_rows *r, int64_t c, int maxmin,
                       int sign, int64_t left, int first)
{
    int64_t ids[TODRE_SEL_AMX_BATCH], cand[LOOKAHEAD];
    double val[LOOKAHEAD];
    /* <= TODRE_SEL_AMX_BATCH - 1 (follow_plan) */
    const int cap = left < s->rows_batch - 1 ? (int)left : s->rows_batch - 1;
    const double *vals = first && cap > 0 && !s->rows_amx ? first_values(s, c, maxmin) : s->acc;
    int m = 0;
    ids[0] = c;
    if (cap > 0 && !s->rows_amx) {
        int nc = best_values(s, r, sign, vals, &c, 1, 0, LOOKAHEAD, cand, val);
        for (int i = 0; i < nc; i++) val[i] = s->acc[cand[i]];
        if (nc > 0) m = lookahead(s, r, c, maxmin, sign, cand, val, nc, cap, ids);
    }
    if (m < cap) /* the places left: the best values without a row */
        m += best_values(s, r, sign, vals, ids, m + 1, 1, cap - m, ids + m + 1, val);
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
            if (rows.slot[c] < 0) next_batch(s, &rows, c, maxmin, sign, s->k - 2 - t, t == 0);
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
