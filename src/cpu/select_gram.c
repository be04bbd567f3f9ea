/* Products of all pairs of rows: the Gram matrix (GRAM strategy, ISOLATED
 * pivot) on AMX for f16 / bf16 where the CPU has it (select_amx.c), else
 * through BLAS on fp32 rows; and, when the matrix does not fit the
 * workspace limit, row blocks of it for the ISOLATED pivot (BLAS). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cblas.h>

#include "select_amx.h"
#include "select_internal.h"

#define MIRROR_BLOCK 64
#define MIN_NEAREST_BLOCK 64

/* BLAS calls run with OpenBLAS's own thread count: a context's
 * TODRE_CONTEXT_NUM_THREADS bounds only the OpenMP regions here (num_threads
 * clauses), never a process-wide setting that other contexts would see. */

todre_status todre_sel_f32_view(struct todre_sel_seg *s, struct todre_diag *diag)
{
    if (s->f32) return TODRE_OK;
    if (s->dtype == TODRE_DTYPE_F32) {
        s->f32 = s->rows;
        s->f32_ld = s->stride;
        return TODRE_OK;
    }
    float *copy = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_B,
                                      (size_t)s->n * (size_t)s->d * sizeof(float));
    if (!copy) {
        snprintf(diag->buf, diag->cap, "workspace: cannot allocate an fp32 copy of %lld x %lld",
                 (long long)s->n, (long long)s->d);
        return TODRE_ERR_OUT_OF_MEMORY;
    }
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int64_t i = 0; i < s->n; i++)
        s->kern->widen(todre_sel_row(s->rows, s->dtype, s->stride, i), s->d, 1.0f,
                       copy + i * s->d);
    s->f32 = copy;
    s->f32_ld = s->d;
    return TODRE_OK;
}

/* AMX computes into a matrix padded to multiples of 32 rows: it is used for
 * a GRAM plan when the dtype has it and the padded matrix fits the
 * workspace limit (the planner's cost model assumes the same, see
 * src/select_plan.c); otherwise BLAS on fp32 rows. Either way the strategy
 * is the plan's; this is only which kernel makes the matrix. */
static int use_amx(const struct todre_sel_seg *s)
{
    if (!todre_sel_amx_usable(s->dtype)) return 0;
    double np = (double)todre_sel_amx_pad(s->n);
    return np * np * sizeof(float) <= (double)s->be->base.params.workspace_limit;
}

/* Rows of ld npad -> rows of ld n, in place (forward: destinations never
 * overtake sources). */
static void compact(float *g, int64_t n, int64_t npad)
{
    for (int64_t i = 1; i < n && npad != n; i++) memmove(g + i * n, g + i * npad, (size_t)n * 4);
}

static float *gram_amx(struct todre_sel_seg *s, todre_status *st, struct todre_diag *diag)
{
    struct todre_sel_amx_pack p = {.npad = todre_sel_amx_pad(s->n), .dpad = todre_sel_amx_pad(s->d)};
    int split = s->dtype == TODRE_DTYPE_F16;
    /* one array: a pair per value (f16: (h, l)) or per two values (bf16) */
    size_t plane = (size_t)p.npad * (size_t)p.dpad * (split ? 4 : 2);
    char *buf = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_B, plane * 2);
    float *g = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_C,
                                   (size_t)p.npad * (size_t)p.npad * sizeof(float));
    if (!buf || !g) {
        snprintf(diag->buf, diag->cap, "workspace: cannot allocate a %lld x %lld Gram matrix",
                 (long long)s->n, (long long)s->n);
        *st = TODRE_ERR_OUT_OF_MEMORY;
        return NULL;
    }
    p.a = (uint32_t *)buf;
    p.b = (uint32_t *)(buf + plane);
    p.tmp = p.sw = NULL;
    p.split = split;
    todre_sel_amx_pack(&p, s->rows, s->stride, s->dtype, s->n, s->d, s->nthreads);
    todre_sel_amx_gram(&p, g, s->nthreads);
    compact(g, s->n, p.npad);
    return g;
}

/* Slot B: B tiles of all rows | the batch's A tiles | the same swapped |
 * a block per thread;
 * slot C: the store [slots x npad] | batch output [TODRE_SEL_AMX_BATCH x npad]
 * | slot [n] | owner [slots] | free [slots]. */
todre_status todre_sel_rows_init(struct todre_sel_seg *s, struct todre_sel_rows *r,
                                 struct todre_diag *diag)
{
    struct todre_sel_amx_pack p = {.npad = todre_sel_amx_pad(s->n),
                                   .dpad = todre_sel_amx_pad(s->d),
                                   .split = s->dtype == TODRE_DTYPE_F16};
    size_t blk = (size_t)todre_sel_amx_block(&p) * 4, nblk = (size_t)p.npad / 16;
    size_t batch = (size_t)TODRE_SEL_AMX_BATCH / 16 * blk;
    uint32_t *b = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_B,
                                      nblk * blk + 2 * batch + (size_t)s->nthreads * blk);
    int64_t slots = s->plan->store_rows;
    size_t rows = (size_t)p.npad * (size_t)(slots + TODRE_SEL_AMX_BATCH) * sizeof(float);
    char *c = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_C,
                                  rows + (size_t)(s->n + 2 * slots) * sizeof(int32_t));
    if (!b || !c) {
        snprintf(diag->buf, diag->cap, "workspace: cannot allocate %lld x %lld products",
                 (long long)slots, (long long)s->n);
        return TODRE_ERR_OUT_OF_MEMORY;
    }
    p.b = b;
    p.tmp = (uint32_t *)((char *)b + nblk * blk + 2 * batch);
    todre_sel_amx_pack(&p, s->rows, s->stride, s->dtype, s->n, s->d, s->nthreads);
    p.a = (uint32_t *)((char *)b + nblk * blk);
    p.sw = (uint32_t *)((char *)b + nblk * blk + batch);
    r->g = (float *)c;
    r->ld = p.npad;
    r->out = r->g + slots * p.npad;
    r->amx = p;
    r->slot = (int32_t *)(c + rows);
    r->owner = r->slot + s->n;
    r->free = r->owner + slots;
    r->slots = r->nfree = slots;
    for (int64_t v = 0; v < s->n; v++) r->slot[v] = -1;
    for (int64_t i = 0; i < slots; i++) {
        r->owner[i] = -1;
        r->free[i] = (int32_t)(slots - 1 - i); /* slot 0 first */
    }
    return TODRE_OK;
}

/* A slot for a new row: a free one, else the one of the stored row whose
 * token is least likely to be selected soon (worst value sign * acc; ties:
 * the highest index goes). Slots of the batch being placed are marked -2 and
 * never evicted. */
static int32_t take_slot(const struct todre_sel_seg *s, struct todre_sel_rows *r, int sign)
{
    if (r->nfree) return r->free[--r->nfree];
    int32_t worst = -1;
    double wx = 0;
    for (int32_t i = 0; i < (int32_t)r->slots; i++) {
        int32_t o = r->owner[i];
        if (o < 0) continue;
        double x = sign * s->acc[o];
        if (worst < 0 || x > wx || (x == wx && o > r->owner[worst])) {
            worst = i;
            wx = x;
        }
    }
    r->slot[r->owner[worst]] = -1; /* recomputed if its token is selected */
    return worst;
}

void todre_sel_rows_batch(struct todre_sel_seg *s, struct todre_sel_rows *r, const int64_t *ids,
                          int count, int sign)
{
    const struct todre_sel_amx_pack *p = &r->amx;
    int64_t all[TODRE_SEL_AMX_BATCH];
    int32_t at[TODRE_SEL_AMX_BATCH];
    for (int i = 0; i < TODRE_SEL_AMX_BATCH; i++) all[i] = i < count ? ids[i] : -1;
    todre_sel_amx_pack_rows(p, s->rows, s->stride, s->dtype, s->d, all);
    todre_sel_amx_batch(p, r->out, s->nthreads);
    for (int i = 0; i < count; i++) r->owner[at[i] = take_slot(s, r, sign)] = -2;
    for (int i = 0; i < count; i++) {
        memcpy(r->g + at[i] * r->ld, r->out + i * p->npad, (size_t)s->n * sizeof(float));
        r->owner[at[i]] = (int32_t)ids[i];
        r->slot[ids[i]] = at[i];
    }
}

void todre_sel_rows_drop(struct todre_sel_rows *r, int64_t c)
{
    int32_t i = r->slot[c];
    r->slot[c] = -1;
    r->owner[i] = -1;
    r->free[r->nfree++] = i;
}

/* Lower triangle <- upper triangle, in cache-sized tiles. */
static void mirror_upper(float *g, int64_t n, int nt)
{
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int64_t ib = 0; ib < n; ib += MIRROR_BLOCK) {
        int64_t ie = ib + MIRROR_BLOCK < n ? ib + MIRROR_BLOCK : n;
        for (int64_t jb = ib; jb < n; jb += MIRROR_BLOCK) {
            int64_t je = jb + MIRROR_BLOCK < n ? jb + MIRROR_BLOCK : n;
            for (int64_t i = ib; i < ie; i++)
                for (int64_t j = (jb > i + 1 ? jb : i + 1); j < je; j++)
                    g[j * n + i] = g[i * n + j];
        }
    }
}

const float *todre_sel_gram(struct todre_sel_seg *s, todre_status *st, struct todre_diag *diag)
{
    *st = TODRE_OK;
    if (use_amx(s)) {
        return gram_amx(s, st, diag); /* both triangles already */
    }
    *st = todre_sel_f32_view(s, diag);
    if (*st != TODRE_OK) return NULL;
    int64_t n = s->n;
    float *g = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_C,
                                   (size_t)n * (size_t)n * sizeof(float));
    if (!g) {
        snprintf(diag->buf, diag->cap, "workspace: cannot allocate a %lld x %lld Gram matrix",
                 (long long)n, (long long)n);
        *st = TODRE_ERR_OUT_OF_MEMORY;
        return NULL;
    }
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, (blasint)n, (blasint)s->d, 1.0f,
                s->f32, (blasint)s->f32_ld, 0.0f, g, (blasint)n);
    mirror_upper(g, n, s->nthreads);
    return g;
}

/* near[v - lo] for the rows v0..v1 of one block, from their products with
 * all n rows (blk row i is row v0 + i). */
static void nearest_rows(const struct todre_sel_seg *s, const float *blk, int64_t ld,
                         int64_t v0, int64_t v1, double *near, int64_t lo)
{
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int64_t v = v0; v < v1; v++) {
        const float *g = blk + (v - v0) * ld;
        double best = -INFINITY, sv = s->scale[v];
        for (int64_t u = 0; u < s->n; u++) {
            if (u == v) continue;
            double sim = (double)g[u] * (sv * s->scale[u]); /* symmetric in (u, v) */
            if (sim > best) best = sim;
        }
        near[v - lo] = best;
    }
}

todre_status todre_sel_nearest(struct todre_sel_seg *s, const float *gram, int64_t lo,
                               int64_t hi, double *near, struct todre_diag *diag)
{
    int64_t n = s->n;
    if (gram) {
        nearest_rows(s, gram + lo * n, n, lo, hi, near, lo);
        return TODRE_OK;
    }
    todre_status st = todre_sel_f32_view(s, diag);
    if (st != TODRE_OK) return st;
    /* the block buffer is the only O(n * rows) memory: rows from the limit */
    int64_t rows = (int64_t)(s->be->base.params.workspace_limit / ((double)n * sizeof(float)));
    if (rows < MIN_NEAREST_BLOCK) rows = MIN_NEAREST_BLOCK;
    if (rows > hi - lo) rows = hi - lo;
    float *blk = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_C,
                                     (size_t)rows * (size_t)n * sizeof(float));
    if (!blk) {
        snprintf(diag->buf, diag->cap, "workspace: cannot allocate %lld x %lld products",
                 (long long)rows, (long long)n);
        return TODRE_ERR_OUT_OF_MEMORY;
    }
    for (int64_t v0 = lo; v0 < hi; v0 += rows) {
        int64_t v1 = v0 + rows < hi ? v0 + rows : hi;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)(v1 - v0), (blasint)n,
                    (blasint)s->d, 1.0f, s->f32 + v0 * s->f32_ld, (blasint)s->f32_ld, s->f32,
                    (blasint)s->f32_ld, 0.0f, blk, (blasint)n);
        nearest_rows(s, blk, n, v0, v1, near, lo);
    }
    return TODRE_OK;
}
