/* Stage-2 kernels: row sums from attention probabilities, the fused causal
 * online-softmax kernel from Q and K, the per-sequence reductions, and their
 * launchers. See relevance_kernels.h; the driver is relevance.cu. */
#include <float.h>
#include <math.h>

#include "cuda_internal.h"
#include "device_util.cuh"
#include "relevance_kernels.h"

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

/* ---- from probabilities ---------------------------------------------------- */

/* One warp per query row (b, h, i): row sums in fp32 over its K entries,
 * stored as doubles per row; reduced per sequence by k_reduce_rows. */
template <typename T>
__global__ void k_probs_rows(const T *attn, int64_t B, int64_t H, int64_t Q, int64_t K,
                             int64_t s_b, int64_t s_h, int64_t s_q, int64_t s_k, int vec,
                             struct todre_cuda_rel_tables tb, double *rows, int *nonfinite)
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
        /* warp-uniform: every lane takes part in both votes */
        const int any_bad = __any_sync(0xffffffffu, bad);
        const int any_over = __any_sync(0xffffffffu, !isfinite(fn) || !isfinite(ft));
        if (any_bad && lane == 0) atomicOr(nonfinite, 1);
        /* Finite values near FLT_MAX overflow the float partial sums (to
         * Inf, or NaN from Inf - Inf): then the row is summed again in
         * double, where finite input cannot overflow, as on the CPU. Rare,
         * so the fast path stays in float. */
        double dn = fn, dt = ft;
        if (!any_bad && any_over) {
            dn = 0.0;
            dt = 0.0;
            for (int64_t j = lane; j < K; j += 32) {
                double x = ld(a, j * s_k);
                dt += x;
                if (ty[j] == target) dn += x;
            }
        }
        num = warp_sum_d(dn);
        tot = warp_sum_d(dt);
    }
    if (lane == 0) {
        rows[2 * row] = num;
        rows[2 * row + 1] = tot;
    }
}

/* Per sequence b: sum the per-row (num, total) pairs of its H * Q rows into
 * the T2V or V2T slots by query type. */
__global__ void k_reduce_rows(const double *rows, int64_t H, int64_t Q, int64_t K,
                              struct todre_cuda_rel_tables tb, double *sums)
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

#define QK_BQ TODRE_CUDA_QK_ROWS /* query rows per block */
#define QK_BK TODRE_CUDA_QK_KEY_TILE /* keys per tile */
#define QK_DC 32      /* head-dimension chunk of a key tile */
#define QK_THREADS 256
static_assert(QK_BQ == 32, "k_qk_combine is one warp per tile");

/* Does query row i of sequence b see any key of its target type? Rows that
 * do not have a numerator of exactly 0 and a denominator of exactly 1 (a
 * softmax row sums to 1), so they need no work. */
__device__ __forceinline__ int qk_row_needed(const struct todre_cuda_qk_args &a, int64_t b, int64_t i,
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

/* Block (tile of QK_BQ query rows, key split s, head h, sequence b), with
 * blockIdx.x = tile * splits + s: split s covers keys [s * split_keys,
 * (s + 1) * split_keys) of the tile's causal range. Tiles are counted from
 * the sequence's first tile that can hold a needed row (qk_first_tile):
 * blockIdx.x / splits is the slot, tile = first + slot. Thread t owns query
 * row t / 8 and keys (t % 8) + 8m of each key tile (m < 8); the 8 threads of
 * a row are adjacent lanes, so row reductions are 3 shuffles. Q lives in
 * shared memory for the whole block, K streams through in QK_DC-wide
 * chunks. With one split the block sums its rows' fractions into a.part
 * itself; with several, each row's online-softmax state over the split's
 * keys (running max m, sum l, sum lt of its target type) goes to a.rowpart
 * and k_qk_combine merges the splits. Splitting the keys gives a few needed
 * rows (the text rows of [sys|vis|text]) enough blocks to fill the GPU. */
/* The first query tile of sequence b that can hold a needed row: a visual
 * row is needed from the first text position on and a text row from the
 * first visual one, so every needed row is at or after max(first visual,
 * first text). Returns the tile count when there is none. The host's
 * qk_first_tile (relevance.cu) is the same rule. */
__device__ __forceinline__ int64_t qk_first_tile(const struct todre_cuda_qk_args &a, int64_t b)
{
    const int64_t tiles = (a.Q + QK_BQ - 1) / QK_BQ;
    int64_t p0 = max(a.tb.first_visual[b], a.tb.first_text[b]);
    if (p0 >= a.K) return tiles;
    int64_t i0 = p0 - (a.K - a.Q);
    return i0 <= 0 ? 0 : i0 / QK_BQ;
}

/* At least 4 blocks per SM, so ptxas may use 64 registers per thread. Left
 * to itself on sm_80 it chose 48 and spilled in the key loop (36 bytes of
 * spill stores, 40 of loads, CUDA 13.0); with this bound sm_80 and sm_90
 * both use 64 and spill nothing (cuda.no_register_spills checks every
 * kernel). sm_90 used 64 already; on sm_80 occupancy goes from 5 to 4
 * blocks of 256 threads (shared memory, about 26 KiB per block at
 * dh = 128, would allow 6). */
#define QK_MIN_BLOCKS 4
template <typename T>
__global__ void __launch_bounds__(QK_THREADS, QK_MIN_BLOCKS) k_qk(struct todre_cuda_qk_args a)
{
    extern __shared__ float sm[];
    const int64_t b = blockIdx.z, h = blockIdx.y, slot = blockIdx.x / a.splits;
    const int64_t split = blockIdx.x % a.splits;
    const int64_t tiles = (a.Q + QK_BQ - 1) / QK_BQ, tile = qk_first_tile(a, b) + slot;
    if (tile >= tiles) return; /* a slot past this sequence's tiles */
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
    /* Last key any row of the tile may see, and this split's keys. */
    const int64_t last_row = min(a.Q - 1, i0 + QK_BQ - 1);
    const int64_t kend = a.K - a.Q + last_row + 1;
    const int64_t jlo = split * a.split_keys, jhi = min(jlo + a.split_keys, kend);
    int any = __syncthreads_or(needed && jlo < kend);
    /* [m, l, lt] of row r in this split (several splits) */
    float *out = a.splits == 1 ? NULL
               : a.rowpart + ((((b * a.H + h) * a.slots + slot) * a.splits + split) * QK_BQ + r) * 3;
    if (!any) { /* one split: a.part is already 0 */
        if (out && g == 0) { out[0] = -INFINITY; out[1] = 0.f; out[2] = 0.f; }
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
    float m_run = -INFINITY, l = 0.f, lt = 0.f;
    for (int64_t j0 = jlo; j0 < jhi; j0 += QK_BK) {
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
                if (j0 + jj < jhi && e0 + e < dh) x = ld(k, (j0 + jj) * a.ks_k + (e0 + e) * a.ks_d);
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
        /* Online softmax over this tile, causal mask j <= pos. A visible
         * score that is not finite (finite q and k whose scale * q . k
         * overflows float32) is reported (bit 2) instead of folded: fmaxf
         * would drop a NaN and exp2f(inf - inf) is NaN. */
        float tmax = -INFINITY;
#pragma unroll
        for (int m = 0; m < 8; m++) {
            int64_t j = j0 + g + 8 * m;
            int vis = j <= pos && j < a.K;
            float s = sc[m] * a.scale_log2;
            bad |= (vis && needed && !(fabsf(s) <= FLT_MAX)) << 1;
            sc[m] = vis ? s : -INFINITY;
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
    /* Row totals over the 8 threads of the row (which share m_run). */
    for (int o = 1; o < 8; o <<= 1) {
        l += __shfl_xor_sync(0xffffffffu, l, o);
        lt += __shfl_xor_sync(0xffffffffu, lt, o);
    }
    if (out && g == 0) {
        out[0] = needed ? m_run : -INFINITY;
        out[1] = needed ? l : 0.f;
        out[2] = needed ? lt : 0.f;
    }
    /* bit 0: NaN or Inf in q or k; bit 1: a score overflowed */
    int bad_in = __syncthreads_or(bad & 1), bad_sc = __syncthreads_or(bad & 2);
    if ((bad_in || bad_sc) && tid == 0) atomicOr(a.nonfinite, (bad_in ? 1 : 0) | (bad_sc ? 2 : 0));
    if (!out) { /* one split: the tile's two numerators */
        double frac = (needed && g == 0 && l > 0.f) ? (double)lt / (double)l : 0.0;
        double t2v = target == TODRE_TOKEN_VISUAL ? frac : 0.0;
        double v2t = target == TODRE_TOKEN_TEXT ? frac : 0.0;
        double *part = a.part + ((b * a.H + h) * tiles + tile) * 2;
        t2v = block_sum_d(t2v, red);
        if (tid == 0) part[0] = t2v;
        v2t = block_sum_d(v2t, red);
        if (tid == 0) part[1] = v2t;
    }
}

/* Block (slot, head h, sequence b) of QK_BQ threads, one per query row of
 * tile qk_first_tile + slot:
 * merge the row's split states in split order (m = max m_s, l = sum l_s *
 * 2^(m_s - m), likewise lt), take lt / l, and sum the tile's rows by target
 * into a.part[(b, h, tile)] (T2V, V2T numerators), in a fixed order. */
__global__ void __launch_bounds__(QK_BQ) k_qk_combine(struct todre_cuda_qk_args a)
{
    const int64_t b = blockIdx.z, h = blockIdx.y, slot = blockIdx.x;
    const int64_t tiles = (a.Q + QK_BQ - 1) / QK_BQ, tile = qk_first_tile(a, b) + slot;
    if (tile >= tiles) return;
    const int r = threadIdx.x;
    int target;
    int needed = qk_row_needed(a, b, tile * QK_BQ + r, &target);
    double t2v = 0.0, v2t = 0.0;
    if (needed) {
        const float *st = a.rowpart + ((b * a.H + h) * a.slots + slot) * a.splits * QK_BQ * 3;
        float m = -INFINITY;
        for (int64_t s = 0; s < a.splits; s++) m = fmaxf(m, st[(s * QK_BQ + r) * 3]);
        double l = 0.0, lt = 0.0;
        if (m != -INFINITY) {
            for (int64_t s = 0; s < a.splits; s++) {
                const float *x = st + (s * QK_BQ + r) * 3;
                if (x[0] == -INFINITY) continue;
                double f = (double)exp2f(x[0] - m);
                l += (double)x[1] * f;
                lt += (double)x[2] * f;
            }
        }
        double frac = l > 0.0 ? lt / l : 0.0;
        t2v = target == TODRE_TOKEN_VISUAL ? frac : 0.0;
        v2t = target == TODRE_TOKEN_TEXT ? frac : 0.0;
    }
    t2v = warp_sum_d(t2v);
    v2t = warp_sum_d(v2t);
    if (r == 0) {
        double *out = a.part + ((b * a.H + h) * tiles + tile) * 2;
        out[0] = t2v;
        out[1] = v2t;
    }
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

size_t todre_cuda_qk_smem(int64_t dh)
{
    return ((size_t)QK_BQ * (size_t)(dh + 1) + (size_t)QK_BK * (QK_DC + 1)) * sizeof(float);
}

/* The opt-in maximum less room for the kernel's static shared memory (336
 * bytes). */
size_t todre_cuda_qk_smem_cap(int smem_optin)
{
    return smem_optin > 1024 ? (size_t)(smem_optin - 1024) : 0;
}

cudaError_t todre_cuda_relevance_kernels_init(int smem_optin)
{
    int cap = (int)todre_cuda_qk_smem_cap(smem_optin);
    cudaError_t err = cudaFuncSetAttribute(k_qk<float>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           cap);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(k_qk<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize, cap);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(k_qk<__nv_bfloat16>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, cap);
    return err;
}

/* ---- launchers --------------------------------------------------------------------- */

cudaError_t todre_cuda_launch_probs_rows(const void *attn, todre_dtype dt, int64_t B, int64_t H,
                                         int64_t Q, int64_t K, int64_t s_b, int64_t s_h,
                                         int64_t s_q, int64_t s_k, int vec,
                                         struct todre_cuda_rel_tables tb, double *rows,
                                         int *nonfinite, cudaStream_t stream)
{
    int64_t blocks = (B * H * Q + 7) / 8;
    if (blocks < 1) blocks = 1;
    if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
    DISPATCH_DTYPE(dt, T,
        k_probs_rows<T><<<(unsigned)blocks, 256, 0, stream>>>(
            (const T *)attn, B, H, Q, K, s_b, s_h, s_q, s_k, vec, tb, rows, nonfinite));
    return cudaGetLastError();
}

cudaError_t todre_cuda_launch_reduce_rows(const double *rows, int64_t B, int64_t H, int64_t Q,
                                          int64_t K, struct todre_cuda_rel_tables tb,
                                          double *sums, cudaStream_t stream)
{
    k_reduce_rows<<<(unsigned)B, 256, 0, stream>>>(rows, H, Q, K, tb, sums);
    return cudaGetLastError();
}

cudaError_t todre_cuda_launch_qk(const struct todre_cuda_qk_args *a, todre_dtype dt, int64_t B,
                                 cudaStream_t stream)
{
    int64_t tiles = (a->Q + QK_BQ - 1) / QK_BQ;
    /* The splits must cover every key, each of whole key tiles. */
    if (a->splits < 1 || a->split_keys < QK_BK || a->split_keys % QK_BK != 0 ||
        a->splits > (a->K + a->split_keys - 1) / a->split_keys ||
        a->splits * a->split_keys < a->K)
        return cudaErrorInvalidValue;
    if (a->slots < 1 || a->slots > tiles || a->slots * a->splits > 0x7fffffff || a->H > 65535 ||
        B > 65535)
        return cudaErrorInvalidConfiguration;
    /* tiles before a sequence's first slot have no needed row: 0 */
    cudaError_t err = cudaMemsetAsync(a->part, 0, (size_t)(B * a->H * tiles) * 2 * sizeof(double),
                                      stream);
    if (err != cudaSuccess) return err;
    dim3 grid((unsigned)(a->slots * a->splits), (unsigned)a->H, (unsigned)B);
    size_t smem = todre_cuda_qk_smem(a->dh);
    DISPATCH_DTYPE(dt, T, k_qk<T><<<grid, QK_THREADS, smem, stream>>>(*a));
    err = cudaGetLastError();
    if (err != cudaSuccess || a->splits == 1) return err;
    dim3 cgrid((unsigned)a->slots, (unsigned)a->H, (unsigned)B);
    k_qk_combine<<<cgrid, QK_BQ, 0, stream>>>(*a);
    return cudaGetLastError();
}

cudaError_t todre_cuda_launch_reduce_tiles(const double *part, int64_t B, int64_t H, int64_t tiles,
                                           double *sums, cudaStream_t stream)
{
    k_reduce_tiles<<<(unsigned)B, 256, 0, stream>>>(part, H, tiles, sums);
    return cudaGetLastError();
}
