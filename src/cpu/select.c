/* CPU stage 1, entry point: checks the data (finite), computes the inverse
 * norms of every row once, lays out the workspace, then runs each token set
 * (pivot, greedy or top-k) with the strategy of the core's plan
 * (job->seg_plan) and writes its outputs.
 *
 * Every check happens before any output is written, so a NONFINITE failure
 * leaves the outputs untouched. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "select_internal.h"

#define ALIGN64(x) (((x) + 63u) & ~(size_t)63u)

float todre_sel_cls(const struct todre_sel_seg *s, int64_t i)
{
    const struct todre_select_job *j = s->job;
    int64_t r = s->row0 + i;
    int64_t off = (r / j->cls_inner) * j->cls_outer_stride + (r % j->cls_inner) * j->cls_inner_stride;
    return todre_sel_load((const char *)j->cls + off * todre_sel_elem_size(j->cls_dtype),
                          j->cls_dtype);
}

int64_t todre_sel_argbest(const double *v, const uint8_t *taken, int64_t n, int sign)
{
    int64_t best = -1;
    double bv = 0;
    for (int64_t i = 0; i < n; i++) {
        if (taken && taken[i]) continue;
        double x = sign * v[i];
        /* NaN after every number: select_greedy.c, fold() */
        if (todre_sel_better(x, bv, best)) {
            best = i;
            bv = x;
        }
    }
    return best;
}

/* Inverse norms of all N rows; the first non-finite row (or N) in *bad. */
static void row_norms(const struct todre_select_job *job, int64_t N, int nt, double *scale,
                      int64_t *bad)
{
    const struct todre_sel_kernels *k = todre_sel_kernels_for(job->emb_dtype);
    int64_t first_bad = N;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(min : first_bad)
    for (int64_t r = 0; r < N; r++) {
        double ss = k->sumsq(todre_sel_row(job->emb, job->emb_dtype, job->emb_row_stride, r),
                             job->d);
        if (!isfinite(ss)) {
            if (r < first_bad) first_bad = r;
            scale[r] = 0;
        } else {
            scale[r] = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
        }
    }
    *bad = first_bad;
}

/* Set number and local row of global row r. */
static void locate(const struct todre_select_job *job, int64_t r, int64_t *set, int64_t *row)
{
    int64_t b = 0;
    while (b + 1 < job->nseg && job->seg_offsets[b + 1] <= r) b++;
    *set = b;
    *row = r - job->seg_offsets[b];
}

static todre_status check_finite(const struct todre_select_job *job, int64_t N, int nt,
                                 double *scale, struct todre_diag *diag)
{
    int64_t bad, set, row;
    row_norms(job, N, nt, scale, &bad);
    if (bad < N) {
        locate(job, bad, &set, &row);
        snprintf(diag->buf, diag->cap, "embeddings: non-finite value (NaN or Inf) in row %lld of set %lld",
                 (long long)row, (long long)set);
        return TODRE_ERR_NONFINITE;
    }
    if (!job->cls) return TODRE_OK;
    struct todre_sel_seg all = {.job = job, .row0 = 0};
    for (int64_t r = 0; r < N; r++) {
        if (isfinite(todre_sel_cls(&all, r))) continue;
        locate(job, r, &set, &row);
        snprintf(diag->buf, diag->cap, "cls: non-finite value (NaN or Inf) for row %lld of set %lld",
                 (long long)row, (long long)set);
        return TODRE_ERR_NONFINITE;
    }
    return TODRE_OK;
}

/* Slot A: scale[N] | per-set scratch sized for the largest set | the
 * outputs of all sets (selection and position order, K = sum of the k),
 * written to the caller's arrays only once every set has succeeded. */
struct layout {
    size_t scale, acc, near, pairs, rep, taken, sel, w, mu, res_sel, res_pos, total;
};

static struct layout plan(int64_t N, int64_t nmax, int64_t d, int64_t K)
{
    struct layout L;
    size_t o = 0;
    L.scale = o; o = ALIGN64(o + (size_t)N * 8);
    L.acc = o;   o = ALIGN64(o + (size_t)nmax * 8);
    L.near = o;  o = ALIGN64(o + (size_t)nmax * 8);
    L.pairs = o; o = ALIGN64(o + (size_t)nmax * 16);
    L.rep = o;   o = ALIGN64(o + (size_t)nmax * 8);
    L.taken = o; o = ALIGN64(o + (size_t)nmax);
    L.sel = o;   o = ALIGN64(o + (size_t)nmax * 8);
    L.w = o;     o = ALIGN64(o + (size_t)d * 4);
    L.mu = o;    o = ALIGN64(o + (size_t)d * 8);
    L.res_sel = o; o = ALIGN64(o + (size_t)K * 8);
    L.res_pos = o; o = ALIGN64(o + (size_t)K * 8);
    L.total = o;
    return L;
}

/* Rows of a set whose raw fp32 products could leave the fp32 range: the set
 * then reads an fp32 copy of its normalised rows (slot B) instead. */
static todre_status guard_range(struct todre_sel_seg *s, double *scale)
{
    int safe = 1;
    for (int64_t i = 0; i < s->n && safe; i++) {
        double r = scale[i];
        if (r == 0) continue;
        double ss = 1.0 / (r * r);
        safe = ss >= TODRE_SEL_SAFE_LO && ss <= TODRE_SEL_SAFE_HI;
    }
    if (safe) return TODRE_OK;
    size_t bytes = (size_t)s->n * (size_t)s->d * 4;
    float *copy = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_B, bytes);
    if (!copy) return TODRE_ERR_OUT_OF_MEMORY;
    const struct todre_sel_kernels *k = s->kern;
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int64_t i = 0; i < s->n; i++)
        k->widen(todre_sel_row(s->rows, s->dtype, s->stride, i), s->d, 1.0f,
                 copy + i * s->d);
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int64_t i = 0; i < s->n; i++) {
        /* normalise in fp64, one rounding per element */
        double r = scale[i];
        float *row = copy + i * s->d;
        for (int64_t j = 0; j < s->d; j++) row[j] = (float)(row[j] * r);
        scale[i] = r == 0 ? 0.0 : 1.0;
    }
    s->rows = copy;
    s->dtype = TODRE_DTYPE_F32;
    s->stride = s->d;
    s->kern = todre_sel_kernels_for(TODRE_DTYPE_F32);
    s->f32 = copy;
    s->f32_ld = s->d;
    return TODRE_OK;
}

/* Set b's result into the staged outputs (slot A). */
static void stage_outputs(const struct todre_select_job *job, int64_t b, const int64_t *sel,
                          const struct todre_sel_seg *s, int64_t *res_sel, int64_t *res_pos)
{
    int64_t o = job->out_offsets[b];
    memcpy(res_sel + o, sel, (size_t)s->k * sizeof *sel);
    int64_t *dst = res_pos + o;
    for (int64_t i = 0, m = 0; i < s->n; i++)
        if (s->taken[i]) dst[m++] = i;
}

/* The plan as this set can run it. The core chose it from the capabilities
 * (ROWS with AMX or the FMA kernels, a store of at least one batch); a plan outside them is
 * a bug. What only the set reveals is taken here: which kernel makes ROWS
 * within the workspace limit, or GEMV where none fits; a set whose rows had
 * to be copied to fp32 (guard_range) has no ROWS kernel left and runs as
 * GEMV, the strategy that needs no memory beyond O(n * d) (docs/semantics.md:
 * every strategy gives the same selection up to near-ties). */
static todre_status follow_plan(struct todre_sel_seg *s, struct todre_select_plan *plan,
                                struct todre_diag *diag)
{
    switch (plan->strategy) {
    case TODRE_STRATEGY_GEMV: return TODRE_OK;
    case TODRE_STRATEGY_GRAM:
        /* the planner counted the matrix alone: where BLAS's buffers and the
         * widened 16-bit tiles do not fit beside it, GEMV keeps the call
         * within the limit (todre_sel_gram_fits) */
        if (!todre_sel_gram_fits(s)) plan->strategy = TODRE_STRATEGY_GEMV;
        return TODRE_OK;
    case TODRE_STRATEGY_ROWS: {
        /* the planner's store holds two batches of the kernel it costed */
        int64_t need = s->n < TODRE_SEL_ROWS_BATCH ? s->n : TODRE_SEL_ROWS_BATCH;
        int amx = todre_sel_amx_usable(s->job->emb_dtype);
        if (!(amx || todre_sel_rows_fma_usable()) || plan->store_rows < need ||
            plan->store_rows > s->n || s->n > INT32_MAX)
            break;
        /* Both kernels pack every row once, and the packed rows share the
         * workspace limit with the store, which may shrink. AMX first, for
         * the dtypes it makes rows of (TODRE_SEL_AMX_ROWS_DTYPES: bf16);
         * where it does not fit, or the set is f16 or f32 (or the guard's
         * fp32 copy), the FMA kernels;
         * where they do not fit either (or read the guard's copy, slot B),
         * GEMV, which needs no memory beyond O(n + d). */
        int64_t slots = todre_sel_amx_rows_slots(s, plan->store_rows);
        if (slots) {
            s->rows_amx = 1;
            s->rows_batch = TODRE_SEL_AMX_BATCH;
            plan->store_rows = slots;
            return TODRE_OK;
        }
        slots = s->f32 ? 0 : todre_sel_rows_fma_slots(s, plan->store_rows);
        s->rows_amx = 0;
        s->rows_batch = TODRE_SEL_ROWS_BATCH;
        if (slots) plan->store_rows = slots;
        else plan->strategy = TODRE_STRATEGY_GEMV, plan->store_rows = 0;
        return TODRE_OK;
    }
    default: break;
    }
    return todre_diag_set(diag, TODRE_ERR_INTERNAL,
                          "plan: strategy %d with a store of %lld rows for set %lld (n = %lld) "
                          "is not one the CPU backend declared",
                          (int)plan->strategy, (long long)plan->store_rows, (long long)s->index,
                          (long long)s->n);
}

static todre_status run_set(struct todre_sel_seg *s, int64_t *sel, struct todre_diag *diag)
{
    memset(s->taken, 0, (size_t)s->n);
    if (s->job->objective == TODRE_OBJECTIVE_CLS_TOPK) return todre_sel_cls_topk(s, sel, diag);
    const float *gram = NULL;
    int64_t p = 0;
    todre_status st = todre_sel_pivot(s, &gram, &p, diag);
    if (st != TODRE_OK) return st;
    return todre_sel_greedy(s, p, gram, sel, diag);
}

todre_status todre_cpu_select(struct todre_backend *base, const struct todre_select_job *job,
                              struct todre_diag *diag)
{
    struct todre_cpu_backend *be = (struct todre_cpu_backend *)base;
    int nt = todre_cpu_threads(be);
    int64_t N = job->seg_offsets[job->nseg], nmax = 0;
    for (int64_t b = 0; b < job->nseg; b++) {
        int64_t n = job->seg_offsets[b + 1] - job->seg_offsets[b];
        if (n > nmax) nmax = n;
    }
    const int64_t K = job->out_offsets[job->nseg];
    struct layout L = plan(N, nmax, job->d, K);
    char *ws = todre_cpu_workspace(be, TODRE_CPU_WS_SELECT_A, L.total);
    if (!ws) {
        snprintf(diag->buf, diag->cap, "workspace: cannot allocate %zu bytes", L.total);
        return TODRE_ERR_OUT_OF_MEMORY;
    }
    double *scale = (double *)(ws + L.scale);
    todre_status st = check_finite(job, N, nt, scale, diag);
    if (st != TODRE_OK) return st;

    for (int64_t b = 0; b < job->nseg; b++) {
        int64_t r0 = job->seg_offsets[b];
        struct todre_select_plan plan = job->seg_plan[b];
        struct todre_sel_seg s = {
            .index = b, .row0 = r0, .n = job->seg_offsets[b + 1] - r0, .d = job->d,
            .k = job->seg_k[b],
            .rows = todre_sel_row(job->emb, job->emb_dtype, job->emb_row_stride, r0),
            .dtype = job->emb_dtype, .stride = job->emb_row_stride,
            .kern = todre_sel_kernels_for(job->emb_dtype), .scale = scale + r0,
            .acc = (double *)(ws + L.acc), .rep_buf = (int64_t *)(ws + L.rep),
            .taken = (uint8_t *)(ws + L.taken), .w = (float *)(ws + L.w),
            .mu = (double *)(ws + L.mu), .near = (double *)(ws + L.near),
            .pairs = ws + L.pairs, .be = be, .job = job, .plan = &plan, .nthreads = nt,
        };
        int64_t *sel = (int64_t *)(ws + L.sel);
        if (job->objective != TODRE_OBJECTIVE_CLS_TOPK) {
            /* products from BLAS / AMX: copies read through their first */
            if (plan.strategy != TODRE_STRATEGY_GEMV || job->pivot == TODRE_PIVOT_ISOLATED)
                todre_sel_find_copies(&s);
            st = guard_range(&s, scale + r0);
            if (st == TODRE_OK) st = follow_plan(&s, &plan, diag);
        }
        if (st == TODRE_OK) st = run_set(&s, sel, diag);
        if (st == TODRE_ERR_OUT_OF_MEMORY && !diag->buf[0])
            snprintf(diag->buf, diag->cap, "workspace: out of memory in set %lld", (long long)b);
        if (st != TODRE_OK) return st;
        stage_outputs(job, b, sel, &s, (int64_t *)(ws + L.res_sel), (int64_t *)(ws + L.res_pos));
    }
    /* every set succeeded: only now are the caller's arrays written */
    if (job->out_sel) memcpy(job->out_sel, ws + L.res_sel, (size_t)K * sizeof(int64_t));
    if (job->out_pos) memcpy(job->out_pos, ws + L.res_pos, (size_t)K * sizeof(int64_t));
    return TODRE_OK;
}
