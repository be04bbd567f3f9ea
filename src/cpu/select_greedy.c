/* Greedy MAX_SUM (ToDRE) and MAX_MIN (DivPrune) from a pivot.
 *
 * Both keep one fp64 value per token, updated with s(v, c) of each newly
 * selected token c: one matrix-vector product over the n rows per step
 * (GEMV strategy: the rows are read in place, f16 / bf16 included), or one
 * row of a Gram matrix made up front (GRAM strategy). The per-row products
 * are independent and the arg-min / arg-max is a serial scan, so the result
 * does not depend on the thread count. */
#include <math.h>

#include "select_internal.h"

/* Rough machine constants of the AUTO cost model, measured on a 2-core
 * Xeon with AVX-512 and AMX (docs/bench_stage1.md): GEMV streams rows from
 * cache at about 50 bytes/ns, a BLAS fp32 Gram matrix does about 135 fused
 * multiply-adds per ns, the AMX one about 1200 bf16 ones, packing writes
 * about 12 bytes/ns. All scale alike with the thread count, so only their
 * ratios matter; near the crossover both strategies cost about the same. */
#define GEMV_BYTES_PER_NS 50.0
#define GRAM_FMA_PER_NS 135.0
#define AMX_FMA_PER_NS 1200.0
#define PACK_BYTES_PER_NS 12.0

static int want_gram(const struct todre_sel_seg *s)
{
    int64_t strategy = s->be->base.params.strategy;
    if (strategy == TODRE_STRATEGY_GEMV || !todre_sel_gram_fits(s)) return 0;
    if (strategy == TODRE_STRATEGY_GRAM) return 1;
    double n = (double)s->n, d = (double)s->d, esz = (double)todre_sel_elem_size(s->dtype);
    double gemv = (double)(s->k - 1) * n * d * esz / GEMV_BYTES_PER_NS;
    double gram;
    if (todre_sel_gram_fast(s)) {
        /* f16: four exact bf16 products per value pair, 8 packed bytes per
         * value; bf16: one product, 4 bytes */
        int f16 = s->dtype == TODRE_DTYPE_F16;
        gram = n * n * d / 2 * (f16 ? 4 : 1) / AMX_FMA_PER_NS +
               n * d * (f16 ? 8 : 4) / PACK_BYTES_PER_NS;
    } else {
        gram = n * n * d / 2 / GRAM_FMA_PER_NS;
        if (s->dtype != TODRE_DTYPE_F32) gram += n * d * (4 + esz) / PACK_BYTES_PER_NS;
    }
    return gram < gemv;
}

/* acc[v] <- acc[v] + s(v, c) (MAX_SUM) or min(acc[v], 1 - s(v, c)) (MAX_MIN)
 * for every untaken v. */
static inline void fold(double *acc, int64_t v, double sim, int maxmin)
{
    if (maxmin) {
        double dist = 1.0 - sim;
        if (dist < acc[v]) acc[v] = dist;
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

static void update_gram(struct todre_sel_seg *s, const float *gram, int64_t c, int maxmin)
{
    const float *g = gram + c * s->n;
    double sc = s->scale[c];
    for (int64_t v = 0; v < s->n; v++)
        if (!s->taken[v]) fold(s->acc, v, (double)g[v] * (s->scale[v] * sc), maxmin);
}

todre_status todre_sel_greedy(struct todre_sel_seg *s, int64_t p, const float *gram,
                              int64_t *sel, struct todre_diag *diag)
{
    int maxmin = s->job->objective == TODRE_OBJECTIVE_MAX_MIN;
    todre_status st = TODRE_OK;
    if (!gram && s->k > 1 && want_gram(s)) {
        gram = todre_sel_gram(s, &st, diag);
        if (st != TODRE_OK) return st;
    }
    for (int64_t v = 0; v < s->n; v++) s->acc[v] = maxmin ? INFINITY : 0.0;
    int64_t c = p;
    for (int64_t t = 0;; t++) {
        sel[t] = c;
        s->taken[c] = 1;
        if (t + 1 == s->k) break;
        if (gram) update_gram(s, gram, c, maxmin);
        else update_gemv(s, c, maxmin);
        c = todre_sel_argbest(s->acc, s->taken, s->n, maxmin ? -1 : +1);
    }
    return TODRE_OK;
}
