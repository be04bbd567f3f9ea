/* Stage 1 on CUDA: lays out one select job (the core's per-set strategy,
 * Gram chunks that fit the workspace limit), stages the segment table
 * through pinned memory and queues every kernel on the context's stream.
 * Nothing here waits for the device once the workspace has grown to the
 * job's size.
 *
 * The core decides, this backend executes: each set's strategy comes from
 * job->seg_plan (the core's planner, from be->caps), a RANDOM pivot comes
 * drawn as TODRE_PIVOT_FIXED with job->seg_pivot. What stays here is
 * execution detail that never changes which strategy runs: how Gram sets are
 * packed into chunks within the workspace limit, and the row panels of the
 * ISOLATED pivot on the matrix-vector strategy.
 *
 * Strategies (per set):
 *  - GRAM: E_b E_b^T by cuBLAS (fp32 accumulation; tensor cores for f16 /
 *    bf16), then the whole greedy loop in one block per set (n_b up to
 *    caps.gram_max_n, whose state fits in shared memory).
 *  - GEMV: every such set's loop in one cooperative kernel; each step
 *    streams the set's rows once. O(n) extra memory. */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "select_kernels.h"

#define MIN_PANEL_ROWS 64

/* Host view of the staged blob: segment table, row offsets, GEMV list. */
struct plan {
    int nseg;
    int64_t N, Ktot;
    struct todre_cuda_seg *segs; /* in the pinned slot */
    int64_t *rowoff;             /* nseg + 1 */
    int *gl_seg;                 /* G */
    int64_t *gl_w0;              /* G + 1 */
    int G;
    int64_t W;
    int kmax_gemv;
    int max_n;
    size_t gram_bytes;           /* largest Gram chunk or ISOLATED panel */
    size_t blob_bytes;
    size_t off_rowoff, off_glseg, off_glw0;
};

static size_t align_up(size_t x) { return (x + 15u) & ~(size_t)15u; }

/* The job's resolved pivot: a todre_pivot value or TODRE_PIVOT_FIXED. */
static int job_pivot(const struct todre_select_job *job) { return (int)job->pivot; }

int64_t todre_cuda_gram_max_n(int smem_optin)
{
    /* The kernel's static shared memory and the driver's reserve fit in the
     * 1024 bytes kept back (todre_cuda_select_kernels_init). */
    int64_t room = (int64_t)smem_optin - 1024;
    if (room <= 0) return 0;
    int64_t n = room / (int64_t)todre_cuda_greedy_gram_smem(1);
    while (n > 0 && todre_cuda_greedy_gram_smem((int)n) > (size_t)room) n--;
    /* n * n stays below 2^31 (cuBLAS strides and Gram offsets are exact). */
    return n < 46340 ? n : 46340;
}

static size_t panel_rows(int64_t limit, int64_t n, int64_t range)
{
    int64_t rows = limit / (4 * n);
    if (rows < MIN_PANEL_ROWS) rows = MIN_PANEL_ROWS;
    if (rows > range) rows = range;
    return (size_t)rows;
}

static size_t blob_layout(struct plan *p, int nseg)
{
    size_t off = align_up(sizeof(struct todre_cuda_seg) * (size_t)nseg);
    p->off_rowoff = off;
    off = align_up(off + sizeof(int64_t) * (size_t)(nseg + 1));
    p->off_glseg = off;
    off = align_up(off + sizeof(int) * (size_t)nseg);
    p->off_glw0 = off;
    off = align_up(off + sizeof(int64_t) * (size_t)(nseg + 1));
    return off;
}

/* What the core resolved, checked once before anything is queued: a job
 * that breaks these is a bug in libtodre, never a user error. */
static todre_status check_job(const struct todre_cuda_backend *be,
                              const struct todre_select_job *job, struct todre_diag *diag)
{
    if (job->objective == TODRE_OBJECTIVE_CLS_TOPK) return TODRE_OK;
    switch (job_pivot(job)) {
    case TODRE_PIVOT_CLS:
    case TODRE_PIVOT_CENTER:
    case TODRE_PIVOT_FARTHEST:
    case TODRE_PIVOT_ISOLATED:
        break;
    case TODRE_PIVOT_FIXED:
        if (job->seg_pivot) break;
        return todre_diag_set(diag, TODRE_ERR_INTERNAL, "select job: FIXED pivot without rows");
    default:
        return todre_diag_set(diag, TODRE_ERR_INTERNAL,
                               "select job: pivot %d was not resolved by the core", job_pivot(job));
    }
    if (!job->seg_plan)
        return todre_diag_set(diag, TODRE_ERR_INTERNAL, "select job: no per-set plan");
    for (int64_t b = 0; b < job->nseg; b++) {
        int64_t n = job->seg_offsets[b + 1] - job->seg_offsets[b];
        int32_t st = job->seg_plan[b].strategy;
        /* GEMV is every backend's fallback (the planner assumes it). */
        if (st != TODRE_STRATEGY_GEMV &&
            (st != TODRE_STRATEGY_GRAM || !(be->base.caps.strategies & (1u << st))))
            return todre_diag_set(diag, TODRE_ERR_INTERNAL,
                                   "select job: set %lld is planned with strategy %d, which the "
                                   "CUDA backend does not declare", (long long)b, (int)st);
        if (st == TODRE_STRATEGY_GRAM && n > be->base.caps.gram_max_n)
            return todre_diag_set(diag, TODRE_ERR_INTERNAL,
                                   "select job: set %lld (n = %lld) is planned GRAM above "
                                   "gram_max_n = %lld", (long long)b, (long long)n,
                                   (long long)be->base.caps.gram_max_n);
        if (job_pivot(job) == TODRE_PIVOT_FIXED && (job->seg_pivot[b] < 0 || job->seg_pivot[b] >= n))
            return todre_diag_set(diag, TODRE_ERR_INTERNAL,
                                   "select job: pivot row %lld of set %lld is outside [0, %lld)",
                                   (long long)job->seg_pivot[b], (long long)b, (long long)n);
    }
    return TODRE_OK;
}

/* Fill the segment table (in pinned memory) from the job and its plan. */
static void make_plan(struct todre_cuda_backend *be, const struct todre_select_job *job,
                      void *blob, struct plan *p)
{
    char *base = (char *)blob;
    p->segs = (struct todre_cuda_seg *)base;
    p->rowoff = (int64_t *)(base + p->off_rowoff);
    p->gl_seg = (int *)(base + p->off_glseg);
    p->gl_w0 = (int64_t *)(base + p->off_glw0);
    p->G = 0;
    p->W = 0;
    p->kmax_gemv = 0;
    p->max_n = 0;
    p->gram_bytes = 0;
    int64_t limit = be->base.params.workspace_limit;
    int greedy = job->objective != TODRE_OBJECTIVE_CLS_TOPK;
    size_t chunk = 0;
    for (int b = 0; b < p->nseg; b++) {
        struct todre_cuda_seg *s = &p->segs[b];
        int64_t n = job->seg_offsets[b + 1] - job->seg_offsets[b];
        s->row0 = job->seg_offsets[b];
        s->out0 = job->out_offsets[b];
        s->n = (int32_t)n;
        s->k = (int32_t)job->seg_k[b];
        s->lo = (int32_t)job->pivot_lo;
        s->hi = (int32_t)(job->pivot_hi < 0 ? n : job->pivot_hi);
        /* CLS_TOPK ignores the pivot, its range and the plan. */
        s->pivot = (greedy && job_pivot(job) == TODRE_PIVOT_FIXED) ? (int32_t)job->seg_pivot[b] : -1;
        s->gram_off = -1;
        s->gemv = greedy && job->seg_plan[b].strategy == TODRE_STRATEGY_GEMV;
        s->base = job->seg_index_base ? job->seg_index_base[b] : 0;
        p->rowoff[b] = s->row0;
        if (n > p->max_n) p->max_n = (int)n;
        if (!greedy) continue;
        if (s->gemv) {
            p->gl_seg[p->G] = b;
            p->gl_w0[p->G] = p->W;
            p->G++;
            p->W += n;
            if (s->k > p->kmax_gemv) p->kmax_gemv = s->k;
            if (job_pivot(job) == TODRE_PIVOT_ISOLATED) {
                size_t pb = panel_rows(limit, n, s->hi - s->lo) * (size_t)n * 4;
                if (pb > p->gram_bytes) p->gram_bytes = pb;
            }
        } else {
            size_t g = (size_t)n * (size_t)n;
            /* Gram sets share a chunk while their matrices fit the limit
             * together; a chunk restarts (gram_off 0) when the next one
             * would overflow it. A set is never moved to another strategy:
             * one whose Gram alone exceeds the limit (the planner does not
             * plan that) is a chunk of its own. */
            if ((chunk + g) * 4 > (size_t)limit) chunk = 0;
            s->gram_off = (int64_t)chunk;
            chunk += g;
            if (chunk * 4 > p->gram_bytes) p->gram_bytes = chunk * 4;
        }
    }
    p->rowoff[p->nseg] = job->seg_offsets[p->nseg];
    p->gl_w0[p->G] = p->W;
    p->N = job->seg_offsets[p->nseg];
    p->Ktot = job->out_offsets[p->nseg];
}

/* Device pointers of one call. */
struct dev {
    struct todre_cuda_seg *segs;
    int64_t *rowoff;
    int *gl_seg;
    int64_t *gl_w0;
    float *inv, *score, *gram;
    int *flags, *pivot;
    int64_t *sel;
};

static enum todre_cuda_pivot_rule pivot_rule(int pv)
{
    switch (pv) {
    case TODRE_PIVOT_CLS:
    case TODRE_PIVOT_CENTER: return TODRE_CUDA_PIVOT_ARGMAX;
    case TODRE_PIVOT_FIXED: return TODRE_CUDA_PIVOT_GIVEN;
    default: return TODRE_CUDA_PIVOT_ARGMIN; /* FARTHEST, ISOLATED */
    }
}

static todre_status gemm(struct todre_cuda_backend *be, const struct todre_cuda_emb *e,
                         int m, int n, int batch, const void *A, int64_t strideA, const void *B,
                         int64_t strideB, float *C, int64_t ldc, int64_t strideC,
                         struct todre_diag *diag)
{
    /* Row-major E (rows of ld elements) is a column-major d x rows matrix:
     * C (col-major m x n) = A^T B gives raw dot products e_u . e_v. */
    cudaDataType_t t = e->dtype == TODRE_DTYPE_F16 ? CUDA_R_16F
                     : e->dtype == TODRE_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    const float one = 1.f, zero = 0.f;
    cublasStatus_t st;
    if (batch == 1)
        st = cublasGemmEx(be->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, e->d, &one, A, t, (int)e->ld,
                          B, t, (int)e->ld, &zero, C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT);
    else
        st = cublasGemmStridedBatchedEx(be->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, e->d, &one, A,
                                        t, (int)e->ld, strideA, B, t, (int)e->ld, strideB, &zero,
                                        C, CUDA_R_32F, (int)ldc, strideC, batch,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return todre_cublas_fail(diag, st, "cublasGemmEx (Gram)");
    return TODRE_OK;
}

static const void *row_ptr(const struct todre_cuda_emb *e, int64_t r)
{
    size_t es = e->dtype == TODRE_DTYPE_F32 ? 4 : 2;
    return (const char *)e->ptr + (size_t)r * (size_t)e->ld * es;
}

/* Gram matrices of sets [s0, s1): runs of equal-sized sets become one
 * strided-batched GEMM (the sets are adjacent in E and in the chunk). */
static todre_status chunk_grams(struct todre_cuda_backend *be, const struct todre_cuda_emb *e,
                                const struct plan *p, int s0, int s1, float *gram,
                                struct todre_diag *diag)
{
    int b = s0;
    while (b < s1) {
        const struct todre_cuda_seg *s = &p->segs[b];
        int run = 1;
        while (b + run < s1 && p->segs[b + run].n == s->n && !p->segs[b + run].gemv) run++;
        int64_t n = s->n;
        const void *A = row_ptr(e, s->row0);
        CKS(gemm(be, e, (int)n, (int)n, run, A, n * e->ld, A, n * e->ld, gram + s->gram_off, n,
                 n * n, diag));
        b += run;
    }
    return TODRE_OK;
}

static todre_status run_gram_chunks(struct todre_cuda_backend *be, const struct todre_select_job *job,
                                    const struct todre_cuda_emb *e, const struct plan *p,
                                    const struct dev *dv, struct todre_diag *diag)
{
    enum todre_cuda_obj obj = job->objective == TODRE_OBJECTIVE_MAX_MIN ? TODRE_CUDA_OBJ_MAXMIN
                                                                          : TODRE_CUDA_OBJ_SUM;
    int b = 0;
    while (b < p->nseg) {
        if (p->segs[b].gemv) { b++; continue; }
        /* A chunk: consecutive Gram sets up to the next offset restart. */
        int s0 = b, s1 = b + 1, max_n = p->segs[b].n;
        while (s1 < p->nseg && (p->segs[s1].gemv || p->segs[s1].gram_off > 0)) {
            if (!p->segs[s1].gemv && p->segs[s1].n > max_n) max_n = p->segs[s1].n;
            s1++;
        }
        /* Gram sets within [s0, s1) in runs between GEMV sets. */
        for (int r = s0; r < s1;) {
            if (p->segs[r].gemv) { r++; continue; }
            int r1 = r;
            while (r1 < s1 && !p->segs[r1].gemv) r1++;
            CKS(chunk_grams(be, e, p, r, r1, dv->gram, diag));
            r = r1;
        }
        if (job_pivot(job) == TODRE_PIVOT_ISOLATED) {
            for (int r = s0; r < s1; r++) {
                const struct todre_cuda_seg *s = &p->segs[r];
                if (s->gemv) continue;
                CK(todre_cuda_launch_rowmax(dv->gram + s->gram_off + (int64_t)s->lo * s->n, s->n,
                                            s->hi - s->lo, s->lo, s->n, dv->inv + s->row0,
                                            dv->score + s->row0, be->stream),
                   "ISOLATED pivot kernel");
            }
            CK(todre_cuda_launch_pivot(dv->segs, s0, s1, 0, TODRE_CUDA_PIVOT_ARGMIN, dv->score,
                                       dv->pivot, be->stream), "pivot kernel");
        }
        CK(todre_cuda_launch_greedy_gram(obj, dv->segs, s0, s1, max_n, dv->pivot, dv->flags,
                                         dv->inv, dv->gram, dv->sel, be->stream),
           "greedy kernel (GRAM strategy)");
        b = s1;
    }
    return TODRE_OK;
}

static todre_status run_gemv(struct todre_cuda_backend *be, const struct todre_select_job *job,
                             const struct todre_cuda_emb *e, const struct plan *p,
                             const struct dev *dv, struct todre_diag *diag)
{
    if (p->G == 0) return TODRE_OK;
    /* Every device of compute capability 8.0 or newer has cooperative
     * launch; caps.strategies declares GEMV only then, but the planner
     * falls back to GEMV regardless. */
    if (!be->coop_supported)
        return todre_diag_set(diag, TODRE_ERR_UNSUPPORTED,
                               "the GEMV selection strategy needs cooperative launch, which this "
                               "device lacks; raise TODRE_CONTEXT_WORKSPACE_LIMIT so that the "
                               "GRAM strategy fits");
    if (job_pivot(job) == TODRE_PIVOT_ISOLATED) {
        for (int j = 0; j < p->G; j++) {
            const struct todre_cuda_seg *s = &p->segs[p->gl_seg[j]];
            int64_t rows = (int64_t)panel_rows(be->base.params.workspace_limit, s->n, s->hi - s->lo);
            for (int64_t v0 = s->lo; v0 < s->hi; v0 += rows) {
                int64_t nr = s->hi - v0 < rows ? s->hi - v0 : rows;
                CKS(gemm(be, e, s->n, (int)nr, 1, row_ptr(e, s->row0), 0, row_ptr(e, s->row0 + v0),
                         0, dv->gram, s->n, 0, diag));
                CK(todre_cuda_launch_rowmax(dv->gram, s->n, (int)nr, (int)v0, s->n,
                                            dv->inv + s->row0, dv->score + s->row0, be->stream),
                   "ISOLATED pivot kernel");
            }
        }
        CK(todre_cuda_launch_pivot(dv->segs, 0, p->nseg, 1, TODRE_CUDA_PIVOT_ARGMIN, dv->score,
                                   dv->pivot, be->stream), "pivot kernel");
    }
    float *cost;
    unsigned long long *keys;
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_COST, (size_t)p->W * sizeof(float), (void **)&cost, diag));
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_KEYS, (size_t)p->G * 3 * sizeof(unsigned long long),
                       (void **)&keys, diag));
    CK(cudaMemsetAsync(keys, 0xff, (size_t)p->G * 3 * sizeof(unsigned long long), be->stream),
       "cudaMemsetAsync");
    enum todre_cuda_obj obj = job->objective == TODRE_OBJECTIVE_MAX_MIN ? TODRE_CUDA_OBJ_MAXMIN
                                                                          : TODRE_CUDA_OBJ_SUM;
    CK(todre_cuda_launch_greedy_gemv(obj, e, dv->segs, dv->gl_seg, dv->gl_w0, p->G, p->W,
                                     p->kmax_gemv, dv->pivot, dv->flags, dv->inv, cost, keys,
                                     dv->sel, be->sm_count, be->stream),
       "greedy kernel (GEMV strategy)");
    return TODRE_OK;
}

/* CENTER / FARTHEST / CLS / FIXED pivots (ISOLATED is computed per strategy). */
static todre_status run_pivots(struct todre_cuda_backend *be, const struct todre_select_job *job,
                               const struct todre_cuda_emb *e, const struct plan *p,
                               const struct dev *dv, const float *clsf, struct todre_diag *diag)
{
    if (job_pivot(job) == TODRE_PIVOT_ISOLATED) return TODRE_OK;
    const float *score = dv->score;
    if (job_pivot(job) == TODRE_PIVOT_CLS) {
        score = clsf;
    } else if (job_pivot(job) == TODRE_PIVOT_CENTER || job_pivot(job) == TODRE_PIVOT_FARTHEST) {
        int64_t maxm = 0;
        for (int b = 0; b < p->nseg; b++)
            if (p->segs[b].hi - p->segs[b].lo > maxm) maxm = p->segs[b].hi - p->segs[b].lo;
        int64_t chunks = (maxm + 127) / 128;
        if (chunks > 32) chunks = 32;
        /* Partial sums are nseg * chunks * d floats: keep them modest. */
        while (chunks > 1 && (int64_t)p->nseg * chunks * e->d * 4 > ((int64_t)64 << 20)) chunks /= 2;
        if (chunks < 1) chunks = 1;
        float *mu;
        size_t mu_floats = (size_t)p->nseg * (size_t)e->d * (size_t)(chunks + 1);
        CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_MU, mu_floats * sizeof(float), (void **)&mu, diag));
        float *partial = mu + (size_t)p->nseg * (size_t)e->d;
        CK(todre_cuda_launch_center(e, p->N, dv->segs, dv->rowoff, p->nseg, (int)chunks, dv->inv,
                                    partial, mu, dv->score, be->stream), "CENTER pivot kernels");
    }
    CK(todre_cuda_launch_pivot(dv->segs, 0, p->nseg, -1, pivot_rule(job_pivot(job)), score,
                               dv->pivot, be->stream), "pivot kernel");
    return TODRE_OK;
}

static todre_status run_topk(struct todre_cuda_backend *be, const struct plan *p,
                             const struct dev *dv, const float *clsf, struct todre_diag *diag)
{
    unsigned long long *in, *out;
    uint32_t *rows;
    void *tmp = NULL;
    size_t tmp_bytes = 0;
    size_t N = (size_t)p->N;
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_SORT_IN, N * 8, (void **)&in, diag));
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_SORT_OUT, N * 8, (void **)&out, diag));
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_SORT_VAL, N * 8, (void **)&rows, diag));
    CK(todre_cuda_topk_sort(NULL, &tmp_bytes, in, out, rows, rows + N, p->N, p->nseg, be->stream),
       "CUB radix sort (size query)");
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_SORT_TMP, tmp_bytes, &tmp, diag));
    CK(todre_cuda_launch_topk_keys(clsf, p->N, dv->rowoff, p->nseg, in, rows, be->stream),
       "CLS_TOPK key kernel");
    CK(todre_cuda_topk_sort(tmp, &tmp_bytes, in, out, rows, rows + N, p->N, p->nseg, be->stream),
       "CUB radix sort");
    CK(todre_cuda_launch_topk_take(dv->segs, p->nseg, rows + N, dv->sel, be->stream),
       "CLS_TOPK kernel");
    return TODRE_OK;
}

/* ld8() issues 16-byte loads (two float4 for f32, one uint4 for 2-byte
 * types): rows must start on 16 bytes and hold whole groups of 8. */
static int rows_vectorizable(const struct todre_select_job *job)
{
    return job->d % 8 == 0 && job->emb_row_stride % 8 == 0 && ((uintptr_t)job->emb % 16u) == 0;
}

static todre_status check_pointers(struct todre_cuda_backend *be, const struct todre_select_job *job,
                                   struct todre_diag *diag)
{
    CKS(todre_cuda_check_pointer(be, job->emb, "embeddings", diag));
    CKS(todre_cuda_check_pointer(be, job->cls, "cls", diag));
    CKS(todre_cuda_check_pointer(be, job->out_sel, "out", diag));
    CKS(todre_cuda_check_pointer(be, job->out_pos, "out", diag));
    CKS(todre_cuda_check_pointer(be, job->out_scores, "scores", diag));
    CKS(todre_cuda_check_pointer(be, job->out_steps, "steps", diag));
    return TODRE_OK;
}

static todre_status alloc_workspace(struct todre_cuda_backend *be,
                                    const struct todre_select_job *job, const struct plan *p,
                                    struct dev *dv, float **clsf, unsigned char **flagmap,
                                    struct todre_diag *diag)
{
    size_t N = (size_t)p->N;
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_INV, N * 4, (void **)&dv->inv, diag));
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_SCORE, N * 4, (void **)&dv->score, diag));
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_FLAGS, (size_t)p->nseg * 4, (void **)&dv->flags, diag));
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_PIVOT, (size_t)p->nseg * 4, (void **)&dv->pivot, diag));
    dv->gram = NULL;
    if (p->gram_bytes)
        CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_GRAM, p->gram_bytes, (void **)&dv->gram, diag));
    dv->sel = job->out_sel;
    if (!dv->sel)
        CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_SEL, (size_t)p->Ktot * 8, (void **)&dv->sel, diag));
    *clsf = NULL;
    if (job->cls) CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_CLS, N * 4, (void **)clsf, diag));
    *flagmap = NULL;
    if (job->out_pos) CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_FLAGMAP, N, (void **)flagmap, diag));
    void *dblob;
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_SEGS, p->blob_bytes, &dblob, diag));
    dv->segs = (struct todre_cuda_seg *)dblob;
    dv->rowoff = (int64_t *)((char *)dblob + p->off_rowoff);
    dv->gl_seg = (int *)((char *)dblob + p->off_glseg);
    dv->gl_w0 = (int64_t *)((char *)dblob + p->off_glw0);
    return TODRE_OK;
}

/* Check the data, then pivots, greedy loops and outputs, all queued. */
static todre_status enqueue(struct todre_cuda_backend *be, const struct todre_select_job *job,
                            const struct todre_cuda_emb *e, const struct plan *p,
                            const struct dev *dv, const float *clsf, unsigned char *flagmap,
                            struct todre_diag *diag)
{
    CK(cudaMemsetAsync(dv->flags, 0, (size_t)p->nseg * 4, be->stream), "cudaMemsetAsync");
    CK(todre_cuda_launch_rownorm(e, p->N, dv->rowoff, p->nseg, dv->inv, dv->flags,
                                 be->nonfinite_dev, be->stream), "norm kernel");
    if (job->cls)
        CK(todre_cuda_launch_cls(job->cls, job->cls_dtype, job->cls_inner, job->cls_outer_stride,
                                 job->cls_inner_stride, p->N, dv->rowoff, p->nseg, (float *)clsf,
                                 dv->flags, be->nonfinite_dev, be->stream), "CLS kernel");
    if (job->objective == TODRE_OBJECTIVE_CLS_TOPK) {
        CKS(run_topk(be, p, dv, clsf, diag));
    } else {
        CKS(run_pivots(be, job, e, p, dv, clsf, diag));
        CKS(run_gram_chunks(be, job, e, p, dv, diag));
        CKS(run_gemv(be, job, e, p, dv, diag));
    }
    if (job->out_scores || job->out_steps) {
        int mode = job->objective == TODRE_OBJECTIVE_CLS_TOPK ? 2
                   : job->objective == TODRE_OBJECTIVE_MAX_MIN ? 1 : 0;
        CK(todre_cuda_launch_extras(e, dv->segs, dv->rowoff, p->nseg, p->N, dv->flags, dv->sel,
                                    dv->inv, clsf, mode, job->out_scores, job->out_steps,
                                    be->stream), "scores kernel");
    }
    CK(todre_cuda_launch_finalize(dv->segs, p->nseg, dv->flags, dv->sel, job->out_sel,
                                  job->out_pos, flagmap, be->stream), "output kernel");
    /* The sticky flag travels to pinned memory; synchronize() reads it. */
    CK(cudaMemcpyAsync(be->nonfinite_host, be->nonfinite_dev, sizeof(int), cudaMemcpyDeviceToHost,
                       be->stream), "cudaMemcpyAsync (non-finite flag)");
    return TODRE_OK;
}

static todre_status select_body(struct todre_cuda_backend *be, const struct todre_select_job *job,
                                struct todre_diag *diag)
{
    CKS(check_pointers(be, job, diag));
    if (job->nseg > 0x3fffffff || job->seg_offsets[job->nseg] > 0x7fffffff)
        return todre_diag_set(diag, TODRE_ERR_UNSUPPORTED,
                               "embeddings: the CUDA backend handles at most 2^31 - 1 rows per call");
    /* d: the CENTER kernels put column blocks of 128 on gridDim.y (<= 65535). */
    if (job->d > 65535 * 128 || job->emb_row_stride > 0x7fffffff)
        return todre_diag_set(diag, TODRE_ERR_UNSUPPORTED,
                               "embeddings: the CUDA backend takes d up to 8388480 and a row "
                               "stride below 2^31");
    CKS(check_job(be, job, diag));
    struct plan p;
    memset(&p, 0, sizeof p);
    p.nseg = (int)job->nseg;
    p.blob_bytes = blob_layout(&p, p.nseg);

    /* The segment table is built straight into a pinned slot. */
    struct todre_cuda_stage *slot;
    CKS(todre_cuda_stage_acquire(be, p.blob_bytes, &slot, diag));
    make_plan(be, job, slot->host, &p);

    struct dev dv;
    float *clsf;
    unsigned char *flagmap;
    CKS(alloc_workspace(be, job, &p, &dv, &clsf, &flagmap, diag));
    CK(cudaMemcpyAsync(dv.segs, slot->host, p.blob_bytes, cudaMemcpyHostToDevice, be->stream),
       "cudaMemcpyAsync (segment table)");
    CKS(todre_cuda_stage_release(be, slot, diag));

    struct todre_cuda_emb e = {job->emb, job->emb_dtype, job->emb_row_stride, (int32_t)job->d,
                               rows_vectorizable(job)};
    return enqueue(be, job, &e, &p, &dv, clsf, flagmap, diag);
}

todre_status todre_cuda_select(struct todre_backend *base, const struct todre_select_job *job,
                               struct todre_diag *diag)
{
    struct todre_cuda_backend *be = (struct todre_cuda_backend *)base;
    struct todre_cuda_scope sc;
    CKS(todre_cuda_begin_call(be, &sc, diag));
    todre_status st = select_body(be, job, diag);
    todre_cuda_leave(&sc);
    return st;
}
