/* The first selected token of MAX_SUM / MAX_MIN: CLS, CENTER, FARTHEST and
 * ISOLATED pivots inside the pivot range [lo, hi), or the row the core drew
 * (TODRE_PIVOT_FIXED: the RANDOM pivot, docs/semantics.md). */
#include <math.h>
#include <stdio.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "select_internal.h"

static int64_t pivot_cls(const struct todre_sel_seg *s, int64_t lo, int64_t hi)
{
    int64_t best = lo;
    float bv = todre_sel_cls(s, lo);
    for (int64_t i = lo + 1; i < hi; i++) {
        float v = todre_sel_cls(s, i);
        if (v > bv) { /* strict: the lowest index keeps a tie */
            bv = v;
            best = i;
        }
    }
    return best;
}

/* mu = sum over [lo, hi) of r_i e_i (fp64). The mean's 1/m factor changes no
 * argmax. Columns are split between threads, so the sum order of every
 * column is fixed whatever the thread count. */
static void range_sum(struct todre_sel_seg *s, int64_t lo, int64_t hi)
{
    int64_t d = s->d;
#pragma omp parallel num_threads(s->nthreads)
    {
        int t = 0, T = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        T = omp_get_num_threads();
#endif
        int64_t c0 = d * t / T, c1 = d * (t + 1) / T;
        float *tmp = s->w + c0; /* this thread's slice of w as scratch */
        for (int64_t j = c0; j < c1; j++) s->mu[j] = 0;
        for (int64_t i = lo; i < hi && c1 > c0; i++) {
            double r = s->scale[i];
            if (r == 0) continue;
            const char *row = todre_sel_row(s->rows, s->dtype, s->stride, i);
            s->kern->widen(row + c0 * todre_sel_elem_size(s->dtype), c1 - c0, 1.0f, tmp);
            for (int64_t j = c0; j < c1; j++) s->mu[j] += r * tmp[j - c0];
        }
    }
}

static int64_t pivot_center(struct todre_sel_seg *s, int64_t lo, int64_t hi, int sign)
{
    range_sum(s, lo, hi);
    for (int64_t j = 0; j < s->d; j++) s->w[j] = (float)s->mu[j];
    double *score = s->acc;
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int64_t i = lo; i < hi; i++)
        score[i - lo] = s->scale[i] *
                        (double)s->kern->dot(todre_sel_row(s->rows, s->dtype, s->stride, i),
                                             s->w, s->d);
    return lo + todre_sel_argbest(score, NULL, hi - lo, sign);
}

/* ISOLATED (DivPrune): argmin over v in the range of max over u != v of
 * s(v, u). Under a GRAM plan (the planner's choice: every product is needed
 * anyway and the greedy then reuses the matrix) from the Gram matrix, else
 * by blocked products within the workspace limit. */
static todre_status pivot_isolated(struct todre_sel_seg *s, int64_t lo, int64_t hi,
                                   const float **gram, int64_t *p, struct todre_diag *diag)
{
    if (s->n == 1) {
        *p = lo;
        return TODRE_OK;
    }
    todre_status st = TODRE_OK;
    if (s->plan->strategy == TODRE_STRATEGY_GRAM) {
        *gram = todre_sel_gram(s, &st, diag);
        if (st != TODRE_OK) return st;
    }
    st = todre_sel_nearest(s, *gram, lo, hi, s->near, diag);
    if (st != TODRE_OK) return st;
    *p = lo + todre_sel_argbest(s->near, NULL, hi - lo, +1);
    return TODRE_OK;
}

int64_t todre_sel_pivot_ahead(const struct todre_sel_seg *s)
{
    const struct todre_select_job *j = s->job;
    int64_t lo = j->pivot_lo, hi = j->pivot_hi < 0 ? s->n : j->pivot_hi;
    if (j->pivot == TODRE_PIVOT_FIXED) return j->seg_pivot[s->index];
    return j->pivot == TODRE_PIVOT_CLS ? pivot_cls(s, lo, hi) : -1;
}

todre_status todre_sel_pivot(struct todre_sel_seg *s, const float **gram, int64_t *pivot,
                             struct todre_diag *diag)
{
    const struct todre_select_job *j = s->job;
    int64_t lo = j->pivot_lo, hi = j->pivot_hi < 0 ? s->n : j->pivot_hi;
    *gram = NULL;
    if (j->pivot == TODRE_PIVOT_FIXED) { /* not a todre_pivot value: no case */
        *pivot = j->seg_pivot[s->index];
        return TODRE_OK;
    }
    switch (j->pivot) {
    case TODRE_PIVOT_CLS: *pivot = pivot_cls(s, lo, hi); return TODRE_OK;
    case TODRE_PIVOT_CENTER: *pivot = pivot_center(s, lo, hi, -1); return TODRE_OK;
    case TODRE_PIVOT_FARTHEST: *pivot = pivot_center(s, lo, hi, +1); return TODRE_OK;
    case TODRE_PIVOT_ISOLATED: return pivot_isolated(s, lo, hi, gram, pivot, diag);
    default: break;
    }
    snprintf(diag->buf, diag->cap, "pivot: unresolved value %d reached the CPU backend",
             (int)j->pivot);
    return TODRE_ERR_INTERNAL;
}
