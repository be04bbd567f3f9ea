/* Products of all pairs of rows: the Gram matrix (GRAM strategy, ISOLATED
 * pivot) on AMX for f16 / bf16 where the CPU has it (select_amx.c), else
 * through BLAS on fp32 rows; and, when the matrix does not fit the
 * workspace limit, tiles of it for the ISOLATED pivot (BLAS).
 *
 * Memory: fp32 rows are read in place. f16 / bf16 rows are widened to fp32
 * tile by tile, into buffers that share the workspace limit with the matrix
 * or the tiles (at least MIN_TILE rows each: 2 MIN_TILE d 4 bytes when the
 * limit leaves less), never as a whole O(n d) copy (docs/api.md,
 * TODRE_CONTEXT_WORKSPACE_LIMIT). Tiles also leave BLAS_RESERVE of the
 * limit to OpenBLAS, which packs panels of both operands into its own
 * buffers (measured: about 3 MiB touched with 2 threads at d = 4096). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cblas.h>

#include "select_amx.h"
#include "select_internal.h"

#define MIRROR_BLOCK 64
#define MIN_TILE 64
#define BLAS_RESERVE ((double)(4 << 20))

/* BLAS calls run with OpenBLAS's own thread count: a context's
 * TODRE_CONTEXT_NUM_THREADS bounds only the OpenMP regions here (num_threads
 * clauses), never a process-wide setting that other contexts would see. */

/* Rows [r0, r1) as fp32 (leading dimension in *ld): the rows themselves
 * when they are fp32, else widened (exactly) into buf. */
static const float *rows_f32(const struct todre_sel_seg *s, int64_t r0, int64_t r1, float *buf,
                             int64_t *ld)
{
    if (s->dtype == TODRE_DTYPE_F32) {
        *ld = s->stride;
        return (const float *)s->rows + r0 * s->stride;
    }
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int64_t i = r0; i < r1; i++)
        s->kern->widen(todre_sel_row(s->rows, s->dtype, s->stride, i), s->d, 1.0f,
                       buf + (i - r0) * s->d);
    *ld = s->d;
    return buf;
}

/* Bytes of one widened row (0 when rows are read in place). */
static double widened_row_bytes(const struct todre_sel_seg *s)
{
    return s->dtype == TODRE_DTYPE_F32 ? 0.0 : (double)s->d * sizeof(float);
}

/* The workspace limit less what BLAS's own buffers may take (at most a
 * quarter of the limit). */
static double tile_budget(const struct todre_sel_seg *s)
{
    double limit = (double)s->be->base.params.workspace_limit;
    return limit - (limit / 4 < BLAS_RESERVE ? limit / 4 : BLAS_RESERVE);
}

static int64_t clamp_tile(double t, int64_t max)
{
    int64_t r = t < (double)MIN_TILE ? MIN_TILE : t > (double)max ? max : (int64_t)t;
    return r < 1 ? 1 : r;
}

/* AMX computes into a matrix padded to multiples of 32 rows, from two
 * packed copies of the rows (A and B tiles: 4 bytes a value each for f16,
 * 2 for bf16): it is used for a GRAM plan when the dtype has it and the
 * padded matrix and both packs fit the workspace limit together; otherwise
 * BLAS on fp32 rows, whose scratch todre_sel_gram_fits counts. Either way
 * the strategy is the plan's; this is only which kernel makes the matrix. */
static size_t amx_plane_bytes(const struct todre_sel_seg *s)
{
    int split = s->dtype == TODRE_DTYPE_F16;
    return (size_t)todre_sel_amx_pad(s->n) * (size_t)todre_sel_amx_pad(s->d) * (split ? 4 : 2);
}

static int use_amx(const struct todre_sel_seg *s)
{
    if (!todre_sel_amx_usable(s->dtype)) return 0;
    double np = (double)todre_sel_amx_pad(s->n);
    return np * np * sizeof(float) + 2.0 * (double)amx_plane_bytes(s) <=
           (double)s->be->base.params.workspace_limit;
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
    size_t plane = amx_plane_bytes(s);
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
    todre_sel_amx_pack(&p, s->rows, s->stride, s->dtype, s->n, s->d, s->nthreads, NULL);
    todre_sel_amx_gram(&p, g, s->nthreads);
    compact(g, s->n, p.npad);
    return g;
}

/* Slot B: B tiles of all rows | the batch's A tiles | the same swapped |
 * a block per thread;
 * slot C: the store [slots x npad] | batch output [TODRE_SEL_AMX_BATCH x npad]
 * | slot [n] | owner [slots] | free [slots]. */
struct amx_rows_layout {
    struct todre_sel_amx_pack p;
    size_t packed, batch, b_bytes; /* slot B: B tiles, one batch's A tiles, all */
};

static struct amx_rows_layout amx_rows_layout(const struct todre_sel_seg *s)
{
    struct amx_rows_layout L = {.p = {.npad = todre_sel_amx_pad(s->n),
                                      .dpad = todre_sel_amx_pad(s->d),
                                      .split = s->dtype == TODRE_DTYPE_F16}};
    size_t blk = (size_t)todre_sel_amx_block(&L.p) * 4, nblk = (size_t)L.p.npad / 16;
    L.packed = nblk * blk;
    L.batch = (size_t)TODRE_SEL_AMX_BATCH / 16 * blk;
    L.b_bytes = L.packed + 2 * L.batch + (size_t)s->nthreads * blk;
    return L;
}

static size_t amx_store_bytes(const struct todre_sel_seg *s, int64_t npad, int64_t slots)
{
    return (size_t)npad * (size_t)(slots + TODRE_SEL_AMX_BATCH) * sizeof(float) +
           (size_t)(s->n + 2 * slots) * sizeof(int32_t);
}

int64_t todre_sel_amx_rows_slots(const struct todre_sel_seg *s, int64_t planned)
{
    if (!(TODRE_SEL_AMX_ROWS_DTYPES >> (unsigned)s->dtype & 1u) || !todre_sel_amx_usable(s->dtype))
        return 0;
    struct amx_rows_layout L = amx_rows_layout(s);
    double left = (double)s->be->base.params.workspace_limit - (double)L.b_bytes -
                  (double)amx_store_bytes(s, L.p.npad, 0);
    /* a slot costs its row and two int32 */
    double per = (double)L.p.npad * sizeof(float) + 2 * sizeof(int32_t);
    double fit = floor(left / per);
    int64_t need = s->n < 2 * TODRE_SEL_AMX_BATCH ? s->n : 2 * TODRE_SEL_AMX_BATCH;
    if (fit < (double)need) return 0;
    return fit < (double)planned ? (int64_t)fit : planned;
}

/* The B tiles of all rows in slot B (at b, as amx_rows_layout lays it
 * out), packed unless @p packed; with ss, the norms too (todre_sel_amx_pack).
 * The batch's A tiles (p.a, p.sw) are left to the caller. */
static struct todre_sel_amx_pack amx_rows_pack(const struct todre_sel_seg *s,
                                               const struct amx_rows_layout *L, uint32_t *b,
                                               int packed, double *ss)
{
    struct todre_sel_amx_pack p = L->p;
    p.b = b;
    p.tmp = (uint32_t *)((char *)b + L->packed + 2 * L->batch);
    if (!packed) todre_sel_amx_pack(&p, s->rows, s->stride, s->dtype, s->n, s->d, s->nthreads, ss);
    return p;
}

int todre_sel_amx_rows_prepack(struct todre_sel_seg *s, double *ss)
{
    struct amx_rows_layout L = amx_rows_layout(s);
    uint32_t *b = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_B, L.b_bytes);
    if (!b) return 0;
    amx_rows_pack(s, &L, b, 0, ss);
    s->packed = todre_cpu_workspace_claim(s->be, TODRE_CPU_WS_SELECT_B);
    return 1;
}

todre_status todre_sel_rows_init(struct todre_sel_seg *s, struct todre_sel_rows *r,
                                 struct todre_diag *diag)
{
    if (!s->rows_amx) return todre_sel_rows_fma_init(s, r, diag);
    struct amx_rows_layout L = amx_rows_layout(s);
    /* the rows packed ahead are still there unless slot B was taken since */
    const int packed = todre_cpu_workspace_kept(s->be, TODRE_CPU_WS_SELECT_B, s->packed);
    uint32_t *b = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_B, L.b_bytes);
    int64_t slots = s->plan->store_rows;
    size_t rows = (size_t)L.p.npad * (size_t)(slots + TODRE_SEL_AMX_BATCH) * sizeof(float);
    char *c = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_C, amx_store_bytes(s, L.p.npad, slots));
    if (!b || !c) {
        snprintf(diag->buf, diag->cap, "workspace: cannot allocate %lld x %lld products",
                 (long long)slots, (long long)s->n);
        return TODRE_ERR_OUT_OF_MEMORY;
    }
    struct todre_sel_amx_pack p = amx_rows_pack(s, &L, b, packed, NULL);
    p.a = (uint32_t *)((char *)b + L.packed);
    p.sw = (uint32_t *)((char *)b + L.packed + L.batch);
    r->amx = p;
    todre_sel_store_init(r, c, rows, p.npad, s->n, slots);
    return TODRE_OK;
}

void todre_sel_store_init(struct todre_sel_rows *r, char *c, size_t rows, int64_t ld, int64_t n,
                          int64_t slots)
{
    r->g = (float *)c;
    r->ld = ld;
    r->out = r->g + slots * ld;
    r->slot = (int32_t *)(c + rows);
    r->owner = r->slot + n;
    r->free = r->owner + slots;
    r->slots = r->nfree = slots;
    for (int64_t v = 0; v < n; v++) r->slot[v] = -1;
    for (int64_t i = 0; i < slots; i++) {
        r->owner[i] = -1;
        r->free[i] = (int32_t)(slots - 1 - i); /* slot 0 first */
    }
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
    s->be->base.params.rows_made += count;
    if (!s->rows_amx) {
        todre_sel_rows_fma_batch(s, r, ids, count, sign);
        return;
    }
    const struct todre_sel_amx_pack *p = &r->amx;
    int64_t all[TODRE_SEL_AMX_BATCH];
    for (int i = 0; i < TODRE_SEL_AMX_BATCH; i++) all[i] = i < count ? ids[i] : -1;
    todre_sel_amx_pack_rows(p, s->rows, s->stride, s->dtype, s->d, all);
    todre_sel_amx_batch(p, r->out, s->nthreads);
    todre_sel_store_place(s, r, ids, count, sign, NULL, s->n);
}

void todre_sel_store_place(const struct todre_sel_seg *s, struct todre_sel_rows *r,
                           const int64_t *ids, int count, int sign, const int32_t *pos,
                           int64_t live)
{
    int32_t at[TODRE_SEL_AMX_BATCH];
    for (int i = 0; i < count; i++) r->owner[at[i] = take_slot(s, r, sign)] = -2;
    for (int i = 0; i < count; i++) {
        float *dst = r->g + at[i] * r->ld;
        const float *src = r->out + i * r->ld;
        if (!pos) {
            memcpy(dst, src, (size_t)s->n * sizeof(float));
        } else { /* by token; a dropped (taken) one is never read: 0 */
            for (int64_t j = 0; j < live; j++) dst[pos[j]] = src[j];
            for (int64_t j = live; j < s->n; j++) dst[pos[j]] = 0.0f;
        }
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

/* The FMA kernels make the matrix (todre_sel_gram_fma_upper) where the
 * backend chose them over BLAS (gram_fma, cpu_backend.c), or for bf16 rows
 * of even d where they multiply by VDPBF16PS (gram_fma_bf16: twice BLAS's
 * rate on the fp32 copy, 104 against 194 ms by `bench_select 2880 4096
 * 1440 bf16 auto 9 2` on a 2-core AMD Zen 4), and the packed rows fit beside
 * the matrix within the limit; not for a set read through the guard's fp32
 * copy, which lies in the slot the packed rows need. Each pair's product
 * is the ROWS kernels' (the same for (i, j) and (j, i)). */
static int use_fma(const struct todre_sel_seg *s)
{
    int bf16 = s->dtype == TODRE_DTYPE_BF16 && s->d % 2 == 0 && s->be->gram_fma_bf16;
    if (!(s->be->gram_fma || bf16) || s->f32) return 0;
    return (double)todre_sel_gram_fma_bytes(s) <= (double)s->be->base.params.workspace_limit;
}

static const float *gram_fma(struct todre_sel_seg *s, todre_status *st, struct todre_diag *diag)
{
    int64_t n = s->n, ld = todre_sel_gram_fma_ld(n);
    float *g = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_C,
                                   (size_t)n * (size_t)ld * sizeof(float));
    if (!g) {
        snprintf(diag->buf, diag->cap, "workspace: cannot allocate a %lld x %lld Gram matrix",
                 (long long)n, (long long)n);
        *st = TODRE_ERR_OUT_OF_MEMORY;
        return NULL;
    }
    *st = todre_sel_gram_fma_upper(s, g, diag);
    if (*st != TODRE_OK) return NULL;
    compact(g, n, ld);
    mirror_upper(g, n, s->nthreads);
    return g;
}

int todre_sel_gram_fits(const struct todre_sel_seg *s)
{
    if (use_amx(s) || use_fma(s)) return 1;
    double n = (double)s->n, row = widened_row_bytes(s);
    double left = tile_budget(s) - n * n * sizeof(float);
    double tiles = row == 0 ? 0 : row * (n < 2 * MIN_TILE ? n : 2 * MIN_TILE);
    return left >= tiles;
}

const float *todre_sel_gram(struct todre_sel_seg *s, todre_status *st, struct todre_diag *diag)
{
    *st = TODRE_OK;
    if (use_amx(s)) {
        return gram_amx(s, st, diag); /* both triangles already */
    }
    if (use_fma(s)) return gram_fma(s, st, diag);
    int64_t n = s->n, d = s->d;
    /* row tiles of T rows: each widened once as A, and as B for the tiles
     * left of the diagonal; two T x d buffers within what the limit leaves
     * beside the matrix (one tile of all rows when they fit) */
    double row = widened_row_bytes(s);
    double left = tile_budget(s) - (double)n * (double)n * sizeof(float);
    int64_t T = row == 0 ? n : row * (double)n <= left ? n : clamp_tile(left / (2 * row), n);
    size_t bufs = row == 0 ? 0 : (size_t)(T < n ? 2 : 1) * (size_t)T * (size_t)d * sizeof(float);
    float *g = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_C,
                                   (size_t)n * (size_t)n * sizeof(float));
    float *buf = bufs ? todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_B, bufs) : NULL;
    if (!g || (bufs && !buf)) {
        snprintf(diag->buf, diag->cap, "workspace: cannot allocate a %lld x %lld Gram matrix",
                 (long long)n, (long long)n);
        *st = TODRE_ERR_OUT_OF_MEMORY;
        return NULL;
    }
    for (int64_t i0 = 0; i0 < n; i0 += T) {
        int64_t i1 = i0 + T < n ? i0 + T : n, lda, ldb;
        const float *a = rows_f32(s, i0, i1, buf, &lda);
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, (blasint)(i1 - i0), (blasint)d,
                    1.0f, a, (blasint)lda, 0.0f, g + i0 * n + i0, (blasint)n);
        for (int64_t j0 = i1; j0 < n; j0 += T) {
            int64_t j1 = j0 + T < n ? j0 + T : n;
            const float *b = rows_f32(s, j0, j1, buf ? buf + (size_t)T * (size_t)d : NULL, &ldb);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)(i1 - i0),
                        (blasint)(j1 - j0), (blasint)d, 1.0f, a, (blasint)lda, b, (blasint)ldb,
                        0.0f, g + i0 * n + j0, (blasint)n);
        }
    }
    mirror_upper(g, n, s->nthreads);
    return g;
}

/* near[v - lo] = max(near[v - lo], s(v, u)) for the rows v0..v1 of a tile
 * and its columns u0..u1 (tile row i is row v0 + i, ld elements). fmaxf's
 * rule: a NaN similarity is ignored, and NaN stays only while no number
 * has been seen. */
static void nearest_tile(const struct todre_sel_seg *s, const float *blk, int64_t ld,
                         int64_t v0, int64_t v1, int64_t u0, int64_t u1, double *near, int64_t lo)
{
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int64_t v = v0; v < v1; v++) {
        const float *g = blk + (v - v0) * ld - u0;
        double best = near[v - lo], sv = s->scale[v];
        for (int64_t u = u0; u < u1; u++) {
            if (u == v) continue;
            double sim = (double)g[u] * (sv * s->scale[u]); /* symmetric in (u, v) */
            if (sim > best || best != best) best = sim;
        }
        near[v - lo] = best;
    }
}

todre_status todre_sel_nearest(struct todre_sel_seg *s, const float *gram, int64_t lo,
                               int64_t hi, double *near, struct todre_diag *diag)
{
    int64_t n = s->n, d = s->d;
    for (int64_t v = lo; v < hi; v++) near[v - lo] = NAN;
    if (gram) {
        nearest_tile(s, gram + lo * n, n, lo, hi, 0, n, near, lo);
        todre_sel_same_near(s, lo, hi, near);
        return TODRE_OK;
    }
    /* R x C tiles of products within the limit: fp32 rows in place, R rows
     * of all n columns (as many R as the limit allows); 16-bit rows square
     * tiles, R = C, with the two widened tiles counted:
     * 4 R^2 + 2 R d 4 <= limit */
    double limit = tile_budget(s), row = widened_row_bytes(s);
    int64_t R, C;
    if (row == 0) {
        R = clamp_tile(limit / ((double)n * sizeof(float)), hi - lo);
        C = n;
    } else {
        double b = 2 * row / sizeof(float);
        R = C = clamp_tile((-b + sqrt(b * b + 4 * limit / sizeof(float))) / 2, n);
    }
    size_t tile = (size_t)R * (size_t)C * sizeof(float);
    size_t bufs = row == 0 ? 0 : (size_t)(R + C) * (size_t)d * sizeof(float);
    float *blk = todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_C, tile);
    float *buf = bufs ? todre_cpu_workspace(s->be, TODRE_CPU_WS_SELECT_B, bufs) : NULL;
    if (!blk || (bufs && !buf)) {
        snprintf(diag->buf, diag->cap, "workspace: cannot allocate %lld x %lld products",
                 (long long)R, (long long)C);
        return TODRE_ERR_OUT_OF_MEMORY;
    }
    for (int64_t v0 = lo; v0 < hi; v0 += R) {
        int64_t v1 = v0 + R < hi ? v0 + R : hi, lda, ldb;
        const float *a = rows_f32(s, v0, v1, buf, &lda);
        for (int64_t u0 = 0; u0 < n; u0 += C) {
            int64_t u1 = u0 + C < n ? u0 + C : n;
            const float *b = rows_f32(s, u0, u1, buf ? buf + (size_t)R * (size_t)d : NULL, &ldb);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)(v1 - v0),
                        (blasint)(u1 - u0), (blasint)d, 1.0f, a, (blasint)lda, b, (blasint)ldb,
                        0.0f, blk, (blasint)(u1 - u0));
            nearest_tile(s, blk, u1 - u0, v0, v1, u0, u1, near, lo);
        }
    }
    todre_sel_same_near(s, lo, hi, near);
    return TODRE_OK;
}
