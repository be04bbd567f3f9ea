/* Stage 2 on CUDA: the four attention sums per sequence, from attention
 * probabilities (a strided reduction) or from Q and K (a fused causal
 * online-softmax kernel whose memory does not depend on K).
 *
 * Both are synchronous: the 4 * B doubles come back to the host before the
 * call returns, since the decision that follows is taken on the host.
 * Reductions run in fixed order (no floating-point atomics): repeated calls
 * give identical sums. */
#include <math.h>
#include <string.h>

#include "cuda_internal.h"
#include "device_util.cuh"

using namespace todre_cuda;

#define DISPATCH_DTYPE(dt, T, ...)                                  \
    switch (dt) {                                                   \
    case TODRE_DTYPE_F16: { typedef __half T; __VA_ARGS__; break; } \
    case TODRE_DTYPE_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; break; } \
    default: { typedef float T; __VA_ARGS__; break; }               \
    }

/* Which key type a query row counts in its numerator, or -1 for rows that
 * contribute nothing (system rows). */
__device__ __forceinline__ int target_type(unsigned char qtype)
{
    return qtype == TODRE_TOKEN_TEXT ? TODRE_TOKEN_VISUAL
         : qtype == TODRE_TOKEN_VISUAL ? TODRE_TOKEN_TEXT : -1;
}

static size_t todre_dtype_bytes(todre_dtype dt) { return dt == TODRE_DTYPE_F32 ? 4 : 2; }

/* Staged per-call tables: types [B, K], active [B], first position of each
 * type per sequence (for skipping rows that see no target key). */
struct rel_tables {
    const unsigned char *types;
    const unsigned char *active;
    const int64_t *first_visual;
    const int64_t *first_text;
};

/* ---- from probabilities ---------------------------------------------------- */

/* One warp per query row (b, h, i): row sums in fp32 over its K entries,
 * stored as doubles per row; reduced per sequence by k_reduce_rows. */
template <typename T>
__global__ void k_probs_rows(const T *attn, int64_t B, int64_t H, int64_t Q, int64_t K,
                             int64_t s_b, int64_t s_h, int64_t s_q, int64_t s_k, int vec,
                             struct rel_tables tb, double *rows, int *nonfinite)
{
    int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= B * H * Q) return;
    int lane = threadIdx.x & 31;
    int64_t i = row % Q, h = (row / Q) % H, b = row / (Q * H);
    const unsigned char *ty = tb.types + b * K;
    int target = tb.active[b] ? target_type(ty[K - Q + i]) : -1;
    double num = 0.0, tot = 0.0;
    if (target >= 0) {
        const T *a = attn + b * s_b + h * s_h + i * s_q;
        float fn = 0.f, ft = 0.f;
        int bad = 0;
        /* Scalar head [0, j_body), vector body [j_body, j_end) with 8
         * elements per lane per 16-byte load (contiguous rows only), scalar
         * tail [j_end, K). Without the vector path the head is the row. */
        int64_t j_body = K, j_end = K;
        if (vec) {
            uintptr_t mis = (uintptr_t)a % 16u;
            j_body = mis ? (int64_t)((16u - mis) / sizeof(T)) : 0;
            if (j_body > K) j_body = K;
            j_end = j_body + ((K - j_body) & ~(int64_t)7);
        }
        for (int64_t j = lane; j < j_body; j += 32) {
            float x = ld(a, j * s_k);
            bad |= !isfinite(x);
            ft += x;
            if (ty[j] == target) fn += x;
        }
        for (int64_t j = j_body + (int64_t)lane * 8; j < j_end; j += 256) {
            float x[8];
            ld8(a + j, x);
#pragma unroll
            for (int u = 0; u < 8; u++) {
                bad |= !isfinite(x[u]);
                ft += x[u];
                if (ty[j + u] == target) fn += x[u];
            }
        }
        for (int64_t j = j_end + lane; j < K; j += 32) {
            float x = ld(a, j);
            bad |= !isfinite(x);
            ft += x;
            if (ty[j] == target) fn += x;
        }
        if (__any_sync(0xffffffffu, bad)) {
            if (lane == 0) atomicOr(nonfinite, 1);
        }
        num = warp_sum_d((double)fn);
        tot = warp_sum_d((double)ft);
    }
    if (lane == 0) {
        rows[2 * row] = num;
        rows[2 * row + 1] = tot;
    }
}

/* Per sequence b: sum the per-row (num, total) pairs of its H * Q rows into
 * the T2V or V2T slots by query type. */
__global__ void k_reduce_rows(const double *rows, int64_t H, int64_t Q, int64_t K,
                              struct rel_tables tb, double *sums)
{
    __shared__ double scratch[33];
    int64_t b = blockIdx.x;
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    const unsigned char *ty = tb.types + b * K;
    for (int64_t r = threadIdx.x; r < H * Q; r += blockDim.x) {
        int64_t i = r % Q;
        unsigned char qt = ty[K - Q + i];
        int64_t g = b * H * Q + r;
        if (qt == TODRE_TOKEN_TEXT) {
            acc[0] += rows[2 * g];
            acc[1] += rows[2 * g + 1];
        } else if (qt == TODRE_TOKEN_VISUAL) {
            acc[2] += rows[2 * g];
            acc[3] += rows[2 * g + 1];
        }
    }
    for (int s = 0; s < 4; s++) {
        double t = block_sum_d(acc[s], scratch);
        if (threadIdx.x == 0) sums[4 * b + s] = t;
    }
}

/* ---- from Q and K (fused online softmax) ------------------------------------------- */

#define QK_BQ 32      /* query rows per block */
#define QK_BK 64      /* keys per tile */
#define QK_DC 32      /* head-dimension chunk of a key tile */
#define QK_THREADS 256

struct qk_args {
    const void *q, *k;
    int64_t H, H_kv, Q, K, dh;
    int64_t qs_b, qs_h, qs_q, qs_d;
    int64_t ks_b, ks_h, ks_k, ks_d;
    float scale_log2; /* scale * log2(e): softmax in base 2 */
    struct rel_tables tb;
    double *part;     /* [B, H, tiles, 2] numerators (T2V, V2T) */
    int *nonfinite;
};

/* Does query row i of sequence b see any key of its target type? Rows that
 * do not have a numerator of exactly 0 and a denominator of exactly 1 (a
 * softmax row sums to 1), so they need no work. */
__device__ __forceinline__ int qk_row_needed(const struct qk_args &a, int64_t b, int64_t i,
                                             int *target)
{
    *target = -1;
    if (i >= a.Q || !a.tb.active[b]) return 0;
    int64_t pos = a.K - a.Q + i;
    int t = target_type(a.tb.types[b * a.K + pos]);
    *target = t;
    if (t == TODRE_TOKEN_VISUAL) return a.tb.first_visual[b] <= pos;
    if (t == TODRE_TOKEN_TEXT) return a.tb.first_text[b] <= pos;
    return 0;
}

/* Block (tile of QK_BQ query rows, head h, sequence b). Thread t owns query
 * row t / 8 and keys (t % 8) + 8m of each tile (m < 8); the 8 threads of a
 * row are adjacent lanes, so row reductions are 3 shuffles. Q lives in
 * shared memory for the whole block, K streams through in QK_DC-wide
 * chunks. */
template <typename T>
__global__ void __launch_bounds__(QK_THREADS) k_qk(struct qk_args a)
{
    extern __shared__ float sm[];
    const int64_t b = blockIdx.z, h = blockIdx.y, tile = blockIdx.x;
    const int64_t i0 = tile * QK_BQ;
    const int tid = threadIdx.x, r = tid >> 3, g = tid & 7;
    const int dh = (int)a.dh, ldq = dh + 1;
    float *Qs = sm;                          /* [QK_BQ][dh + 1] */
    float *Ks = sm + QK_BQ * ldq;            /* [QK_BK][QK_DC + 1] */
    __shared__ unsigned char kt_types[QK_BK];
    __shared__ double red[33];

    int target;
    const int64_t i = i0 + r;
    int needed = qk_row_needed(a, b, i, &target);
    int any = __syncthreads_or(needed);
    double *out = a.part + ((b * a.H + h) * gridDim.x + tile) * 2;
    if (!any) {
        if (tid == 0) { out[0] = 0.0; out[1] = 0.0; }
        return;
    }
    const T *q = (const T *)a.q + b * a.qs_b + h * a.qs_h;
    const int64_t kvh = h / (a.H / a.H_kv);
    const T *k = (const T *)a.k + b * a.ks_b + kvh * a.ks_h;
    const unsigned char *ty = a.tb.types + b * a.K;
    int bad = 0;
    for (int idx = tid; idx < QK_BQ * dh; idx += QK_THREADS) {
        int rr = idx / dh, e = idx % dh;
        float x = 0.f;
        if (i0 + rr < a.Q) x = ld(q, (i0 + rr) * a.qs_q + e * a.qs_d);
        bad |= !isfinite(x);
        Qs[rr * ldq + e] = x;
    }
    const int64_t pos = a.K - a.Q + i;
    /* Last key any row of the tile may see. */
    const int64_t last_row = min(a.Q - 1, i0 + QK_BQ - 1);
    const int64_t kend = a.K - a.Q + last_row + 1;
    float m_run = -INFINITY, l = 0.f, lt = 0.f;
    for (int64_t j0 = 0; j0 < kend; j0 += QK_BK) {
        float sc[8];
#pragma unroll
        for (int m = 0; m < 8; m++) sc[m] = 0.f;
        __syncthreads();
        if (tid < QK_BK) kt_types[tid] = (j0 + tid < a.K) ? ty[j0 + tid] : 0;
        for (int e0 = 0; e0 < dh; e0 += QK_DC) {
            __syncthreads();
            for (int idx = tid; idx < QK_BK * QK_DC; idx += QK_THREADS) {
                int jj = idx / QK_DC, e = idx % QK_DC;
                float x = 0.f;
                if (j0 + jj < kend && e0 + e < dh) x = ld(k, (j0 + jj) * a.ks_k + (e0 + e) * a.ks_d);
                bad |= !isfinite(x);
                Ks[jj * (QK_DC + 1) + e] = x;
            }
            __syncthreads();
            const float *qrow = Qs + r * ldq + e0;
            const int ec = min(QK_DC, dh - e0);
            for (int e = 0; e < ec; e++) {
                float qv = qrow[e];
#pragma unroll
                for (int m = 0; m < 8; m++) sc[m] = fmaf(qv, Ks[(g + 8 * m) * (QK_DC + 1) + e], sc[m]);
            }
        }
        /* Online softmax over this tile, causal mask j <= pos. */
        float tmax = -INFINITY;
#pragma unroll
        for (int m = 0; m < 8; m++) {
            int64_t j = j0 + g + 8 * m;
            sc[m] = (j <= pos && j < a.K) ? sc[m] * a.scale_log2 : -INFINITY;
            tmax = fmaxf(tmax, sc[m]);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 4));
        float m_new = fmaxf(m_run, tmax);
        if (m_new != -INFINITY) {
            float corr = exp2f(m_run - m_new); /* 0 when m_run = -inf */
            l *= corr;
            lt *= corr;
#pragma unroll
            for (int m = 0; m < 8; m++) {
                float p = exp2f(sc[m] - m_new);
                l += p;
                if (kt_types[g + 8 * m] == target) lt += p;
            }
            m_run = m_new;
        }
    }
    /* Row totals over the 8 threads of the row. */
    for (int o = 1; o < 8; o <<= 1) {
        l += __shfl_xor_sync(0xffffffffu, l, o);
        lt += __shfl_xor_sync(0xffffffffu, lt, o);
    }
    double frac = (needed && g == 0 && l > 0.f) ? (double)lt / (double)l : 0.0;
    double t2v = target == TODRE_TOKEN_VISUAL ? frac : 0.0;
    double v2t = target == TODRE_TOKEN_TEXT ? frac : 0.0;
    if (__syncthreads_or(bad) && tid == 0) atomicOr(a.nonfinite, 1);
    t2v = block_sum_d(t2v, red);
    if (tid == 0) out[0] = t2v;
    v2t = block_sum_d(v2t, red);
    if (tid == 0) out[1] = v2t;
}

/* Per sequence: numerators from the per-tile partials in fixed order. */
__global__ void k_reduce_tiles(const double *part, int64_t H, int64_t tiles, double *sums)
{
    __shared__ double scratch[33];
    int64_t b = blockIdx.x;
    double t2v = 0.0, v2t = 0.0;
    for (int64_t x = threadIdx.x; x < H * tiles; x += blockDim.x) {
        t2v += part[(b * H * tiles + x) * 2];
        v2t += part[(b * H * tiles + x) * 2 + 1];
    }
    double s = block_sum_d(t2v, scratch);
    if (threadIdx.x == 0) sums[4 * b + TODRE_SUM_T2V_NUM] = s;
    s = block_sum_d(v2t, scratch);
    if (threadIdx.x == 0) sums[4 * b + TODRE_SUM_V2T_NUM] = s;
}

static size_t qk_smem(int64_t dh)
{
    return ((size_t)QK_BQ * (size_t)(dh + 1) + (size_t)QK_BK * (QK_DC + 1)) * sizeof(float);
}

/* Dynamic shared memory the fused kernel may request: the opt-in maximum
 * less room for its static shared memory (336 bytes). */
static int qk_smem_cap(int smem_optin) { return smem_optin - 1024; }

cudaError_t todre_cuda_relevance_kernels_init(int smem_optin)
{
    int cap = qk_smem_cap(smem_optin);
    cudaError_t err = cudaFuncSetAttribute(k_qk<float>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           cap);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(k_qk<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize, cap);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(k_qk<__nv_bfloat16>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, cap);
    return err;
}

/* ---- host side ------------------------------------------------------------------- */

/* Stage types, active flags and first-positions; return device tables. */
static todre_status stage_tables(struct todre_cuda_backend *be,
                                 const struct todre_relevance_common *c, struct rel_tables *tb,
                                 struct todre_diag *diag)
{
    size_t tbytes = (size_t)(c->B * c->K);
    size_t off_active = (tbytes + 15u) & ~(size_t)15u;
    size_t off_fv = (off_active + (size_t)c->B + 15u) & ~(size_t)15u;
    size_t off_ft = off_fv + 8u * (size_t)c->B;
    size_t total = off_ft + 8u * (size_t)c->B;
    void *dev;
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_SEGS, total, &dev, diag));
    struct todre_cuda_stage *slot;
    CKS(todre_cuda_stage_acquire(be, total, &slot, diag));
    char *h = (char *)slot->host;
    memcpy(h, c->types, tbytes);
    memcpy(h + off_active, c->active, (size_t)c->B);
    int64_t *fv = (int64_t *)(h + off_fv), *ft = (int64_t *)(h + off_ft);
    for (int64_t b = 0; b < c->B; b++) {
        fv[b] = c->K;
        ft[b] = c->K;
        for (int64_t j = c->K - 1; j >= 0; j--) {
            unsigned char t = c->types[b * c->K + j];
            if (t == TODRE_TOKEN_VISUAL) fv[b] = j;
            else if (t == TODRE_TOKEN_TEXT) ft[b] = j;
        }
    }
    CK(cudaMemcpyAsync(dev, h, total, cudaMemcpyHostToDevice, be->stream), "cudaMemcpyAsync (types)");
    CKS(todre_cuda_stage_release(be, slot, diag));
    tb->types = (const unsigned char *)dev;
    tb->active = (const unsigned char *)dev + off_active;
    tb->first_visual = (const int64_t *)((char *)dev + off_fv);
    tb->first_text = (const int64_t *)((char *)dev + off_ft);
    return TODRE_OK;
}

/* Copy the 4 * B sums (and the non-finite flag behind them) back and wait. */
static todre_status fetch_sums(struct todre_cuda_backend *be, const struct todre_relevance_common *c,
                               double *dsums, int qk, struct todre_diag *diag)
{
    size_t bytes = (size_t)c->B * 4 * sizeof(double) + sizeof(double);
    struct todre_cuda_stage *slot;
    CKS(todre_cuda_stage_acquire(be, bytes, &slot, diag));
    CK(cudaMemcpyAsync(slot->host, dsums, bytes, cudaMemcpyDeviceToHost, be->stream),
       "cudaMemcpyAsync (sums)");
    CKS(todre_cuda_stage_release(be, slot, diag));
    CK(cudaStreamSynchronize(be->stream), "cudaStreamSynchronize");
    const double *h = (const double *)slot->host;
    int bad;
    memcpy(&bad, h + 4 * c->B, sizeof bad);
    if (bad)
        return todre_diag_set(diag, TODRE_ERR_NONFINITE, "%s contain NaN or Inf",
                               qk ? "q or k" : "attn");
    for (int64_t b = 0; b < c->B; b++) {
        if (!c->active[b]) continue;
        for (int s = 0; s < 4; s++) c->sums[4 * b + s] = h[4 * b + s];
    }
    return TODRE_OK;
}

static todre_status probs_body(struct todre_cuda_backend *be,
                               const struct todre_relevance_probs_job *job, struct todre_diag *diag)
{
    const struct todre_relevance_common *c = &job->c;
    CKS(todre_cuda_check_pointer(be, job->attn, "attn", diag));
    struct rel_tables tb;
    CKS(stage_tables(be, c, &tb, diag));
    int64_t nrows = c->B * c->H * c->Q;
    double *rows, *dsums;
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_REL_ROWS, (size_t)nrows * 2 * sizeof(double),
                       (void **)&rows, diag));
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_REL_SUMS, ((size_t)c->B * 4 + 1) * sizeof(double),
                       (void **)&dsums, diag));
    int *flag = (int *)(dsums + 4 * c->B);
    CK(cudaMemsetAsync(flag, 0, sizeof(double), be->stream), "cudaMemsetAsync");
    int64_t blocks = (nrows + 7) / 8;
    if (blocks > 0x7fffffff)
        return todre_diag_set(diag, TODRE_ERR_UNSUPPORTED, "attn: too many rows for one launch");
    int vec = job->s_k == 1 && (uintptr_t)job->attn % todre_dtype_bytes(job->dtype) == 0;
    DISPATCH_DTYPE(job->dtype, T,
        k_probs_rows<T><<<(unsigned)blocks, 256, 0, be->stream>>>(
            (const T *)job->attn, c->B, c->H, c->Q, c->K, job->s_b, job->s_h, job->s_q, job->s_k,
            vec, tb, rows, flag));
    CK(cudaGetLastError(), "relevance kernel (probabilities)");
    k_reduce_rows<<<(unsigned)c->B, 256, 0, be->stream>>>(rows, c->H, c->Q, c->K, tb, dsums);
    CK(cudaGetLastError(), "relevance reduction kernel");
    return fetch_sums(be, c, dsums, 0, diag);
}

todre_status todre_cuda_relevance_probs(struct todre_backend *base,
                                        const struct todre_relevance_probs_job *job,
                                        struct todre_diag *diag)
{
    struct todre_cuda_backend *be = (struct todre_cuda_backend *)base;
    struct todre_cuda_scope sc;
    CKS(todre_cuda_begin_call(be, &sc, diag));
    todre_status st = probs_body(be, job, diag);
    todre_cuda_leave(&sc);
    return st;
}

/* Denominators of the fused path: every softmax row sums to 1, so they are
 * H times the number of text (or visual) query rows. */
static void qk_denominators(const struct todre_relevance_common *c, double *dt, double *dv,
                            int64_t b)
{
    int64_t nt = 0, nv = 0;
    for (int64_t i = 0; i < c->Q; i++) {
        unsigned char t = c->types[b * c->K + c->K - c->Q + i];
        nt += t == TODRE_TOKEN_TEXT;
        nv += t == TODRE_TOKEN_VISUAL;
    }
    *dt = (double)(c->H * nt);
    *dv = (double)(c->H * nv);
}

static todre_status qk_body(struct todre_cuda_backend *be, const struct todre_relevance_qk_job *job,
                            struct todre_diag *diag)
{
    const struct todre_relevance_common *c = &job->c;
    CKS(todre_cuda_check_pointer(be, job->q, "q", diag));
    CKS(todre_cuda_check_pointer(be, job->k, "k", diag));
    size_t smem = qk_smem(job->dh);
    if (smem > (size_t)qk_smem_cap(be->smem_optin))
        return todre_diag_set(diag, TODRE_ERR_UNSUPPORTED,
                               "q: head dimension %lld is too large for the CUDA kernel",
                               (long long)job->dh);
    struct rel_tables tb;
    CKS(stage_tables(be, c, &tb, diag));
    int64_t tiles = (c->Q + QK_BQ - 1) / QK_BQ;
    double *part, *dsums;
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_REL_ROWS, (size_t)(c->B * c->H * tiles) * 2 * sizeof(double),
                       (void **)&part, diag));
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_REL_SUMS, ((size_t)c->B * 4 + 1) * sizeof(double),
                       (void **)&dsums, diag));
    int *flag = (int *)(dsums + 4 * c->B);
    CK(cudaMemsetAsync(dsums, 0, ((size_t)c->B * 4 + 1) * sizeof(double), be->stream),
       "cudaMemsetAsync");
    if (tiles > 0x7fffffff || c->H > 65535 || c->B > 65535)
        return todre_diag_set(diag, TODRE_ERR_UNSUPPORTED,
                               "q: more than 65535 heads or sequences in one call");
    struct qk_args a;
    a.q = job->q;
    a.k = job->k;
    a.H = c->H; a.H_kv = job->H_kv; a.Q = c->Q; a.K = c->K; a.dh = job->dh;
    a.qs_b = job->qs_b; a.qs_h = job->qs_h; a.qs_q = job->qs_q; a.qs_d = job->qs_d;
    a.ks_b = job->ks_b; a.ks_h = job->ks_h; a.ks_k = job->ks_k; a.ks_d = job->ks_d;
    a.scale_log2 = (float)(job->scale * 1.4426950408889634);
    a.tb = tb;
    a.part = part;
    a.nonfinite = flag;
    dim3 grid((unsigned)tiles, (unsigned)c->H, (unsigned)c->B);
    DISPATCH_DTYPE(job->dtype, T, k_qk<T><<<grid, QK_THREADS, smem, be->stream>>>(a));
    CK(cudaGetLastError(), "relevance kernel (q, k)");
    k_reduce_tiles<<<(unsigned)c->B, 256, 0, be->stream>>>(part, c->H, tiles, dsums);
    CK(cudaGetLastError(), "relevance reduction kernel");
    CKS(fetch_sums(be, c, dsums, 1, diag));
    for (int64_t b = 0; b < c->B; b++) {
        if (!c->active[b]) continue;
        qk_denominators(c, &c->sums[4 * b + TODRE_SUM_T2V_DEN], &c->sums[4 * b + TODRE_SUM_V2T_DEN], b);
    }
    return TODRE_OK;
}

todre_status todre_cuda_relevance_qk(struct todre_backend *base,
                                     const struct todre_relevance_qk_job *job,
                                     struct todre_diag *diag)
{
    struct todre_cuda_backend *be = (struct todre_cuda_backend *)base;
    struct todre_cuda_scope sc;
    CKS(todre_cuda_begin_call(be, &sc, diag));
    todre_status st = qk_body(be, job, diag);
    todre_cuda_leave(&sc);
    return st;
}
