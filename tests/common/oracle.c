/* Float64 validity oracle for stage-1 selections (see oracle.h). */
#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todre_test.h"

static double dot(const double *a, const double *b, int64_t d)
{
    /* four partial sums: several times faster than one chain, and in double
     * the summation order is irrelevant at the tolerances used here */
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= d; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < d; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

void tt_problem_init(struct tt_problem *p, const void *emb, todre_dtype dt, int64_t n, int64_t d,
                     int64_t ld, const void *cls, todre_dtype cls_dt, todre_objective obj,
                     todre_pivot piv, int64_t lo, int64_t hi)
{
    memset(p, 0, sizeof *p);
    p->n = n;
    p->d = d;
    p->x = malloc(sizeof(double) * (size_t)(n * d));
    assert_non_null(p->x);
    for (int64_t i = 0; i < n; i++) {
        double *row = p->x + i * d, norm2 = 0;
        for (int64_t j = 0; j < d; j++) {
            row[j] = tt_load_f64(emb, dt, (size_t)(i * ld + j));
            norm2 += row[j] * row[j];
        }
        double norm = sqrt(norm2);
        for (int64_t j = 0; j < d; j++) row[j] = norm > 0 ? row[j] / norm : 0.0;
    }
    if (cls) {
        p->cls = malloc(sizeof(double) * (size_t)n);
        assert_non_null(p->cls);
        for (int64_t i = 0; i < n; i++) p->cls[i] = tt_load_f64(cls, cls_dt, (size_t)i);
    }
    p->objective = obj;
    if (piv == TODRE_PIVOT_AUTO)
        piv = obj == TODRE_OBJECTIVE_MAX_MIN ? TODRE_PIVOT_ISOLATED
              : cls                          ? TODRE_PIVOT_CLS
                                             : TODRE_PIVOT_CENTER;
    p->pivot = obj == TODRE_OBJECTIVE_CLS_TOPK ? TODRE_PIVOT_CLS : piv;
    p->lo = obj == TODRE_OBJECTIVE_CLS_TOPK ? 0 : lo;
    p->hi = obj == TODRE_OBJECTIVE_CLS_TOPK || hi < 0 ? n : hi;
    p->raw = emb;
    p->raw_row_bytes = d * (int64_t)tt_dtype_size(dt);
    p->raw_stride_bytes = ld * (int64_t)tt_dtype_size(dt);
}

void tt_problem_free(struct tt_problem *p)
{
    free(p->x);
    free(p->cls);
    memset(p, 0, sizeof *p);
}

double tt_oracle_tol(const struct tt_problem *p, int64_t step)
{
    if (p->objective == TODRE_OBJECTIVE_CLS_TOPK) return 0.0;
    if (step == 0 && (p->pivot == TODRE_PIVOT_CLS || p->pivot == TODRE_PIVOT_RANDOM)) return 0.0;
    double m = (p->objective == TODRE_OBJECTIVE_MAX_SUM && step > 0) ? (double)step : 1.0;
    return 0x1.0p-23 * (sqrt((double)p->d) + 8.0) * m;
}

/* ---- one step ---------------------------------------------------------------- */

struct step {
    const double *score; /* indexed by token */
    const unsigned char *taken;
    int64_t lo, hi;      /* candidates: untaken tokens in [lo, hi) */
    int want_max;
    double tol;
    int rows_decide;     /* scores come from the rows: bitwise-equal rows tie */
};

static int same_row(const struct tt_problem *p, int64_t a, int64_t b)
{
    return memcmp(p->raw + a * p->raw_stride_bytes, p->raw + b * p->raw_stride_bytes,
                  (size_t)p->raw_row_bytes) == 0;
}

static int judge(const struct tt_problem *p, const struct step *s, int64_t c, char *msg,
                 size_t cap)
{
    if (c < s->lo || c >= s->hi || s->taken[c]) {
        snprintf(msg, cap, "index %lld is not an available candidate in [%lld, %lld)",
                 (long long)c, (long long)s->lo, (long long)s->hi);
        return 0;
    }
    int64_t best = -1;
    for (int64_t v = s->lo; v < s->hi; v++) {
        if (s->taken[v]) continue;
        if (best < 0 || (s->want_max ? s->score[v] > s->score[best] : s->score[v] < s->score[best]))
            best = v;
    }
    double deficit = s->want_max ? s->score[best] - s->score[c] : s->score[c] - s->score[best];
    if (s->tol == 0.0 ? c != best : deficit > s->tol) {
        snprintf(msg, cap, "chose %lld (score %.17g) but %lld scores %.17g (deficit %.3g > tol %.3g)",
                 (long long)c, s->score[c], (long long)best, s->score[best], deficit, s->tol);
        return 0;
    }
    for (int64_t v = s->lo; s->rows_decide && v < c; v++) {
        if (!s->taken[v] && same_row(p, v, c)) {
            snprintf(msg, cap, "chose %lld while its exact duplicate %lld (lower index) was available",
                     (long long)c, (long long)v);
            return 0;
        }
    }
    return 1;
}

/* ---- pivot ---------------------------------------------------------------------- */

/* Pivot scores over [lo, hi) into score[]; returns want_max. */
static int pivot_scores(const struct tt_problem *p, double *score)
{
    int64_t d = p->d;
    if (p->pivot == TODRE_PIVOT_CLS) {
        memcpy(score, p->cls, sizeof(double) * (size_t)p->n);
        return 1;
    }
    if (p->pivot == TODRE_PIVOT_ISOLATED) {
        for (int64_t v = p->lo; v < p->hi; v++) {
            double mx = -INFINITY;
            for (int64_t u = 0; u < p->n; u++)
                if (u != v) mx = fmax(mx, dot(p->x + v * d, p->x + u * d, d));
            score[v] = p->n == 1 ? 0.0 : mx;
        }
        return 0;
    }
    double *mu = calloc((size_t)d, sizeof(double));
    assert_non_null(mu);
    for (int64_t v = p->lo; v < p->hi; v++)
        for (int64_t j = 0; j < d; j++) mu[j] += p->x[v * d + j];
    for (int64_t j = 0; j < d; j++) mu[j] /= (double)(p->hi - p->lo);
    for (int64_t v = p->lo; v < p->hi; v++) score[v] = dot(p->x + v * d, mu, d);
    free(mu);
    return p->pivot == TODRE_PIVOT_CENTER;
}

static int check_pivot(const struct tt_problem *p, int64_t c, double *score,
                       const unsigned char *taken, char *msg, size_t cap)
{
    if (p->pivot == TODRE_PIVOT_RANDOM) {
        if (c >= p->lo && c < p->hi) return 1;
        snprintf(msg, cap, "RANDOM pivot %lld outside [%lld, %lld)", (long long)c,
                 (long long)p->lo, (long long)p->hi);
        return 0;
    }
    struct step s = {score, taken, p->lo, p->hi, pivot_scores(p, score), tt_oracle_tol(p, 0),
                     p->pivot != TODRE_PIVOT_CLS};
    return judge(p, &s, c, msg, cap);
}

/* ---- trajectory ------------------------------------------------------------------- */

static void update(const struct tt_problem *p, double *score, int64_t c, int first)
{
    const double *xc = p->x + c * p->d;
    for (int64_t v = 0; v < p->n; v++) {
        double s = dot(p->x + v * p->d, xc, p->d);
        if (p->objective == TODRE_OBJECTIVE_MAX_SUM) score[v] = first ? s : score[v] + s;
        else score[v] = first ? 1.0 - s : fmin(score[v], 1.0 - s);
    }
}

static int64_t check_steps(const struct tt_problem *p, const int64_t *order, int64_t k,
                           double *score, unsigned char *taken, char *msg, size_t cap)
{
    int topk = p->objective == TODRE_OBJECTIVE_CLS_TOPK;
    int64_t first = 0;
    if (topk) {
        memcpy(score, p->cls, sizeof(double) * (size_t)p->n);
    } else {
        if (!check_pivot(p, order[0], score, taken, msg, cap)) return 0;
        taken[order[0]] = 1;
        update(p, score, order[0], 1);
        first = 1;
    }
    for (int64_t j = first; j < k; j++) {
        struct step s = {score, taken, 0, p->n, topk || p->objective == TODRE_OBJECTIVE_MAX_MIN,
                         tt_oracle_tol(p, j), !topk};
        if (!judge(p, &s, order[j], msg, cap)) return j;
        taken[order[j]] = 1;
        if (!topk) update(p, score, order[j], 0);
    }
    return -1;
}

int64_t tt_check_trajectory(const struct tt_problem *p, const int64_t *order, int64_t k, char *msg,
                            size_t cap)
{
    msg[0] = '\0';
    if (k < 1 || k > p->n) {
        snprintf(msg, cap, "k = %lld outside [1, %lld]", (long long)k, (long long)p->n);
        return 0;
    }
    for (int64_t j = 0; j < k; j++) {
        if (order[j] < 0 || order[j] >= p->n) {
            snprintf(msg, cap, "index %lld out of range", (long long)order[j]);
            return j;
        }
    }
    double *score = malloc(sizeof(double) * (size_t)p->n);
    unsigned char *taken = calloc((size_t)p->n, 1);
    assert_non_null(score);
    assert_non_null(taken);
    int64_t bad = check_steps(p, order, k, score, taken, msg, cap);
    free(score);
    free(taken);
    return bad;
}
