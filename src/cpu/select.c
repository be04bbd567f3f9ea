/* CPU stage 1, entry point: checks the data (finite), computes the inverse
 * norms of every row once, lays out the workspace, then runs each token set
 * (pivot, greedy or top-k) with the strategy of the core's plan
 * (job->seg_plan) and writes its outputs. A set whose rows the ROWS kernels
 * (FMA or AMX) will make takes its norms from packing them, at the start of its
 * run (pack_ahead): its rows are read once before the greedy loop, not
 * twice.
 *
 * Every check happens before any output is written, so a NONFINITE failure
 * leaves the outputs untouched; it names the first non-finite embedding row
 * of the call, else the first non-finite CLS value, whichever sets' rows
 * are checked as they are packed (check_finite). */
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

/* Set of global row r (binary search over the set offsets). */
static int64_t set_of(const struct todre_select_job *job, int64_t r)
{
    int64_t lo = 0, hi = job->nseg - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (job->seg_offsets[mid] <= r) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* The inverse norm from a squared norm; 0 for a zero row and for a
 * non-finite one. */
static inline double inv_norm(double ss)
{
    return !isfinite(ss) || ss <= 0 ? 0.0 : 1.0 / sqrt(ss);
}

/* Inverse norms of rows [lo, hi) but those of the sets with skip[b] (their
 * norms come from the packing, todre_sel_rows_fma_prepack; skip may be
 * NULL); the first non-finite row (or hi) in *bad. */
static void row_norms(const struct todre_select_job *job, int64_t lo, int64_t hi, int nt,
                      const uint8_t *skip, double *scale, int64_t *bad)
{
    const struct todre_sel_kernels *k = todre_sel_kernels_for(job->emb_dtype);
    int64_t first_bad = hi;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(min : first_bad)
    for (int64_t r = lo; r < hi; r++) {
        if (skip && skip[set_of(job, r)]) continue;
        double ss = todre_sel_sumsq(
            k, todre_sel_row(job->emb, job->emb_dtype, job->emb_row_stride, r), job->d);
        if (!isfinite(ss) && r < first_bad) first_bad = r;
        scale[r] = inv_norm(ss);
    }
    *bad = first_bad;
}

/* Set number and local row of global row r. */
static void locate(const struct todre_select_job *job, int64_t r, int64_t *set, int64_t *row)
{
    *set = set_of(job, r);
    *row = r - job->seg_offsets[*set];
}

static todre_status nonfinite_row(const struct todre_select_job *job, int64_t r,
                                  struct todre_diag *diag)
{
    int64_t set, row;
    locate(job, r, &set, &row);
    snprintf(diag->buf, diag->cap, "embeddings: non-finite value (NaN or Inf) in row %lld of set %lld",
             (long long)row, (long long)set);
    return TODRE_ERR_NONFINITE;
}

/* Every check but the embeddings of the sets with skip[b], whose rows the
 * set's run checks as it packs them (pack_ahead). A failure names the first
 * non-finite embedding row of all sets, else the first non-finite CLS value:
 * where one is found here, the skipped rows are checked too, so that the
 * report is the same whichever sets were skipped. */
static todre_status check_finite(const struct todre_select_job *job, int64_t N, int nt,
                                 const uint8_t *skip, double *scale, struct todre_diag *diag)
{
    int64_t bad, cbad = N;
    row_norms(job, 0, N, nt, skip, scale, &bad);
    if (job->cls) {
        struct todre_sel_seg all = {.job = job, .row0 = 0};
        for (int64_t r = 0; r < N && cbad == N; r++)
            if (!isfinite(todre_sel_cls(&all, r))) cbad = r;
    }
    if (bad == N && cbad == N) return TODRE_OK;
    if (skip) row_norms(job, 0, N, nt, NULL, scale, &bad);
    if (bad < N) return nonfinite_row(job, bad, diag);
    int64_t set, row;
    locate(job, cbad, &set, &row);
    snprintf(diag->buf, diag->cap, "cls: non-finite value (NaN or Inf) for row %lld of set %lld",
             (long long)row, (long long)set);
    return TODRE_ERR_NONFINITE;
}

/* Slot A: scale[N] | per set, the kernel packing it ahead (ROWS_NONE = 0) | per-set
 * scratch sized for the largest set | the outputs of all sets (selection
 * and position order, K = sum of the k), written to the caller's arrays
 * only once every set has succeeded. */
struct layout {
    size_t scale, ahead, acc, near, pairs, rep, taken, sel, w, mu, res_sel, res_pos;
    size_t res_scores, res_steps; /* [N] each, when the job asks for them */
    size_t total;
};

static struct layout plan(int64_t N, int64_t nseg, int64_t nmax, int64_t d, int64_t K,
                          int scores, int steps)
{
    struct layout L;
    size_t o = 0;
    L.scale = o; o = ALIGN64(o + (size_t)N * 8);
    L.ahead = o; o = ALIGN64(o + (size_t)nseg);
    L.acc = o;   o = ALIGN64(o + (size_t)nmax * 8);
    L.near = o;  o = ALIGN64(o + (size_t)nmax * 8);
    L.pairs = o; o = ALIGN64(o + (size_t)nmax * 16);
    L.rep = o;   o = ALIGN64(o + (size_t)nmax * 8);
    L.taken = o; o = ALIGN64(o + (size_t)nmax);
    L.sel = o;   o = ALIGN64(o + (size_t)nmax * 8);
    L.w = o;     o = ALIGN64(o + (size_t)d * 4 * TODRE_SEL_LOOKAHEAD_THREADS);
    L.mu = o;    o = ALIGN64(o + (size_t)d * 8);
    L.res_sel = o; o = ALIGN64(o + (size_t)K * 8);
    L.res_pos = o; o = ALIGN64(o + (size_t)K * 8);
    L.res_scores = o; o = ALIGN64(o + (scores ? (size_t)N * 4 : 0));
    L.res_steps = o;  o = ALIGN64(o + (steps ? (size_t)N * 8 : 0));
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
    int64_t base = job->seg_index_base ? job->seg_index_base[b] : 0;
    for (int64_t j = 0; j < s->k; j++) res_sel[o + j] = sel[j] + base;
    int64_t *dst = res_pos + o;
    for (int64_t i = 0, m = 0; i < s->n; i++)
        if (s->taken[i]) dst[m++] = i + base;
}

/* Set b's per-row outputs into the staged ones (scores, steps: the set's
 * rows of [N], or NULL), from the rows and scales the selection read
 * (the guard's normalised copy included). MAX_SUM: the dot product of each
 * row with the sum of the kept (normalised) rows, w = sum_c x_c summed in
 * fp64; MAX_MIN: the largest similarity to a kept row, one matrix-vector
 * product per kept row; CLS_TOPK: the CLS value. */
static void stage_extras(struct todre_sel_seg *s, const int64_t *sel, float *scores,
                         int64_t *steps)
{
    const struct todre_select_job *job = s->job;
    if (steps) {
        for (int64_t i = 0; i < s->n; i++) steps[i] = -1;
        for (int64_t j = 0; j < s->k; j++) steps[sel[j]] = j;
    }
    if (!scores) return;
    if (job->objective == TODRE_OBJECTIVE_CLS_TOPK) {
        for (int64_t i = 0; i < s->n; i++) scores[i] = todre_sel_cls(s, i);
        return;
    }
    const int64_t d = s->d;
    float *w = s->w;
    if (job->objective == TODRE_OBJECTIVE_MAX_SUM) {
        double *sum = s->mu;
        memset(sum, 0, (size_t)d * sizeof *sum);
        for (int64_t j = 0; j < s->k; j++) {
            int64_t c = sel[j];
            s->kern->widen(todre_sel_row(s->rows, s->dtype, s->stride, c), d, 1.0f, w);
            for (int64_t t = 0; t < d; t++) sum[t] += (double)w[t] * s->scale[c];
        }
        for (int64_t t = 0; t < d; t++) w[t] = (float)sum[t];
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
        for (int64_t v = 0; v < s->n; v++)
            scores[v] = (float)((double)s->kern->dot(todre_sel_row(s->rows, s->dtype, s->stride, v),
                                                     w, d) *
                                s->scale[v]);
        return;
    }
    double *best = s->acc;
    for (int64_t v = 0; v < s->n; v++) best[v] = -INFINITY;
    for (int64_t j = 0; j < s->k; j++) {
        int64_t c = sel[j];
        double sc = s->scale[c];
        s->kern->widen(todre_sel_row(s->rows, s->dtype, s->stride, c), d, 1.0f, w);
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
        for (int64_t v = 0; v < s->n; v++) {
            double sim = (double)s->kern->dot(todre_sel_row(s->rows, s->dtype, s->stride, v), w, d) *
                         (s->scale[v] * sc);
            if (sim > best[v] || sim != sim) best[v] = sim;
        }
    }
    for (int64_t v = 0; v < s->n; v++) scores[v] = (float)best[v];
}

/* The kernel that makes a ROWS set's rows within the workspace limit, and
 * the store it leaves (*slots). The planner's store holds two batches of
 * the kernel it costed (less, or a kernel this process lacks, is a bug:
 * ROWS_INVALID). Both kernels pack every row once, and the packed rows
 * share the workspace limit with the store, which may shrink. AMX first,
 * for the dtypes it makes rows of (TODRE_SEL_AMX_ROWS_DTYPES: bf16); where
 * it does not fit, or the set is f16 or f32 (or the guard's fp32 copy), the
 * FMA kernels; where they do not fit either (or would read the guard's
 * copy, slot B), none: the set runs as GEMV, which needs no memory beyond
 * O(n + d). */
/* ROWS_NONE is 0: a set's entry in row_norms' skip[] */
enum rows_kernel { ROWS_NONE = 0, ROWS_INVALID, ROWS_AMX, ROWS_FMA };

static enum rows_kernel rows_kernel(const struct todre_sel_seg *s, int64_t store_rows,
                                    int64_t *slots)
{
    int64_t need = s->n < TODRE_SEL_ROWS_BATCH ? s->n : TODRE_SEL_ROWS_BATCH;
    int amx = todre_sel_amx_usable(s->job->emb_dtype);
    if (!(amx || todre_sel_rows_fma_usable()) || store_rows < need || store_rows > s->n ||
        s->n > INT32_MAX)
        return ROWS_INVALID;
    *slots = todre_sel_amx_rows_slots(s, store_rows);
    if (*slots) return ROWS_AMX;
    *slots = s->f32 ? 0 : todre_sel_rows_fma_slots(s, store_rows);
    return *slots ? ROWS_FMA : ROWS_NONE;
}

/* The ROWS kernel (FMA or AMX) whose packing of a set's rows is done ahead
 * of its run, its norms taken from that pass (todre_sel_rows_fma_prepack,
 * todre_sel_amx_rows_prepack) instead of a pass of their own, or ROWS_NONE.
 * Ahead where its greedy loop makes rows on that kernel (follow_plan, and
 * k > 1: todre_sel_greedy) and nothing before the loop takes slot B
 * (the ISOLATED pivot's blocked products do). Known before the norms except
 * for guard_range's fp32 copy, which then replaces the packing (the set runs
 * as GEMV): rows near the fp32 range only. */
static enum rows_kernel packs_ahead(const struct todre_sel_seg *s)
{
    const struct todre_select_job *job = s->job;
    int64_t slots;
    if (job->objective == TODRE_OBJECTIVE_CLS_TOPK || s->k < 2 ||
        job->pivot == TODRE_PIVOT_ISOLATED || s->plan->strategy != TODRE_STRATEGY_ROWS)
        return ROWS_NONE;
    enum rows_kernel kern = rows_kernel(s, s->plan->store_rows, &slots);
    return kern == ROWS_FMA || kern == ROWS_AMX ? kern : ROWS_NONE;
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
        int64_t slots;
        switch (rows_kernel(s, plan->store_rows, &slots)) {
        case ROWS_AMX:
            s->rows_amx = 1;
            s->rows_batch = TODRE_SEL_AMX_BATCH;
            plan->store_rows = slots;
            return TODRE_OK;
        case ROWS_FMA:
            s->rows_amx = 0;
            s->rows_batch = TODRE_SEL_ROWS_BATCH;
            plan->store_rows = slots;
            return TODRE_OK;
        case ROWS_NONE:
            plan->strategy = TODRE_STRATEGY_GEMV, plan->store_rows = 0;
            return TODRE_OK;
        case ROWS_INVALID: break;
        }
        break;
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

/* Set b as the CPU backend runs it, with the core's plan (copied to *plan,
 * which follow_plan may change). */
static struct todre_sel_seg seg_of(struct todre_cpu_backend *be, const struct todre_select_job *job,
                                   int64_t b, char *ws, const struct layout *L, int nt,
                                   struct todre_select_plan *plan)
{
    int64_t r0 = job->seg_offsets[b];
    *plan = job->seg_plan[b];
    struct todre_sel_seg s = {
        .index = b, .row0 = r0, .n = job->seg_offsets[b + 1] - r0, .d = job->d,
        .k = job->seg_k[b],
        .rows = todre_sel_row(job->emb, job->emb_dtype, job->emb_row_stride, r0),
        .dtype = job->emb_dtype, .stride = job->emb_row_stride,
        .kern = todre_sel_kernels_for(job->emb_dtype), .scale = (double *)(ws + L->scale) + r0,
        .acc = (double *)(ws + L->acc), .rep_buf = (int64_t *)(ws + L->rep),
        .taken = (uint8_t *)(ws + L->taken), .w = (float *)(ws + L->w),
        .mu = (double *)(ws + L->mu), .near = (double *)(ws + L->near),
        .pairs = ws + L->pairs, .be = be, .job = job, .plan = plan, .nthreads = nt,
        .near_dots = -1,
    };
    return s;
}

/* The norms of a set whose rows are packed ahead (packs_ahead), from the
 * packing; where slot B cannot be allocated, from a pass of their own.
 * For the FMA kernels, where the pivot is known before any product (CLS,
 * FIXED), the packing also leaves every row's raw dot product with the
 * pivot's in s->near, for the first batch's estimate (select_greedy.c,
 * first_values). check_finite found every other row and CLS value finite,
 * so a non-finite row here is the first of the call. */
static todre_status pack_ahead(struct todre_sel_seg *s, enum rows_kernel kern, double *scale,
                               struct todre_diag *diag)
{
    const struct todre_select_job *job = s->job;
    int64_t bad = s->row0 + s->n;
    const int64_t p = kern == ROWS_FMA ? todre_sel_pivot_ahead(s) : -1;
    if (kern == ROWS_AMX ? todre_sel_amx_rows_prepack(s, scale)
                         : todre_sel_rows_fma_prepack(s, scale, p, s->near)) {
        s->near_dots = p;
        for (int64_t i = s->n - 1; i >= 0; i--) {
            if (!isfinite(scale[i])) bad = s->row0 + i;
            scale[i] = inv_norm(scale[i]);
        }
    } else {
        row_norms(job, s->row0, s->row0 + s->n, s->nthreads, NULL, scale - s->row0, &bad);
    }
    return bad < s->row0 + s->n ? nonfinite_row(job, bad, diag) : TODRE_OK;
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
    struct layout L = plan(N, job->nseg, nmax, job->d, K, job->out_scores != NULL,
                           job->out_steps != NULL);
    char *ws = todre_cpu_workspace(be, TODRE_CPU_WS_SELECT_A, L.total);
    if (!ws) {
        snprintf(diag->buf, diag->cap, "workspace: cannot allocate %zu bytes", L.total);
        return TODRE_ERR_OUT_OF_MEMORY;
    }
    double *scale = (double *)(ws + L.scale);
    uint8_t *ahead = (uint8_t *)(ws + L.ahead);
    int any = 0;
    for (int64_t b = 0; b < job->nseg; b++) {
        struct todre_select_plan plan;
        struct todre_sel_seg s = seg_of(be, job, b, ws, &L, nt, &plan);
        ahead[b] = (uint8_t)packs_ahead(&s);
        any |= ahead[b] != ROWS_NONE;
    }
    todre_status st = check_finite(job, N, nt, any ? ahead : NULL, scale, diag);
    if (st != TODRE_OK) return st;

    for (int64_t b = 0; b < job->nseg; b++) {
        int64_t r0 = job->seg_offsets[b];
        struct todre_select_plan plan;
        struct todre_sel_seg s = seg_of(be, job, b, ws, &L, nt, &plan);
        int64_t *sel = (int64_t *)(ws + L.sel);
        if (ahead[b] != ROWS_NONE) st = pack_ahead(&s, (enum rows_kernel)ahead[b], scale + r0, diag);
        if (st == TODRE_OK && job->objective != TODRE_OBJECTIVE_CLS_TOPK) {
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
        if (job->out_scores || job->out_steps)
            stage_extras(&s, sel, job->out_scores ? (float *)(ws + L.res_scores) + r0 : NULL,
                         job->out_steps ? (int64_t *)(ws + L.res_steps) + r0 : NULL);
    }
    /* every set succeeded: only now are the caller's arrays written */
    if (job->out_sel) memcpy(job->out_sel, ws + L.res_sel, (size_t)K * sizeof(int64_t));
    if (job->out_pos) memcpy(job->out_pos, ws + L.res_pos, (size_t)K * sizeof(int64_t));
    if (job->out_scores) memcpy(job->out_scores, ws + L.res_scores, (size_t)N * sizeof(float));
    if (job->out_steps) memcpy(job->out_steps, ws + L.res_steps, (size_t)N * sizeof(int64_t));
    return TODRE_OK;
}
