/* Stage-1 kernels: normalisation, pivots, the two greedy loops (Gram and
 * matrix-vector), CLS top-k and the position order. See select_kernels.h. */
#include <float.h>

#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "cuda_internal.h"
#include "device_util.cuh"
#include "select_kernels.h"

namespace cg = cooperative_groups;
using namespace todre_cuda;

#define GRAM_THREADS 1024
#define GEMV_THREADS 256
#define ROW_THREADS 256 /* kernels with one warp per row */

/* ---- helpers ------------------------------------------------------------- */

/* Set of global row r: the last b with rowoff[b] <= r. */
__device__ __forceinline__ int seg_of_row(const int64_t *rowoff, int nseg, int64_t r)
{
    int lo = 0, hi = nseg - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (rowoff[mid] <= r) lo = mid; else hi = mid - 1;
    }
    return lo;
}

/* Dot product of row a (dtype T) with vector b (dtype U), reduced over the
 * warp; every lane gets the result. */
template <typename T, typename U>
__device__ __forceinline__ float warp_dot(const T *a, const U *b, int d, int vec)
{
    int lane = threadIdx.x & 31;
    float acc = 0.f;
    if (vec) {
        for (int e = lane * 8; e < d; e += 256) {
            float x[8], y[8];
            ld8(a + e, x);
            ld8(b + e, y);
#pragma unroll
            for (int i = 0; i < 8; i++) acc = fmaf(x[i], y[i], acc);
        }
    } else {
        for (int e = lane; e < d; e += 32) acc = fmaf(ld(a, e), ld(b, e), acc);
    }
    return warp_sum(acc);
}

static unsigned blocks_for(int64_t items, int per_block)
{
    int64_t b = (items + per_block - 1) / per_block;
    if (b < 1) b = 1;
    if (b > 0x7fffffff) b = 0x7fffffff;
    return (unsigned)b;
}

#define DISPATCH_DTYPE(dt, T, ...)                                  \
    switch (dt) {                                                   \
    case TODRE_DTYPE_F16: { typedef __half T; __VA_ARGS__; break; } \
    case TODRE_DTYPE_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; break; } \
    default: { typedef float T; __VA_ARGS__; break; }               \
    }

/* ---- norms and finiteness -------------------------------------------------- */

template <typename T>
__global__ void k_rownorm(const T *emb, int64_t ldr, int d, int vec, int64_t N,
                          const int64_t *rowoff, int nseg, float *inv, int *flags, int *sticky)
{
    int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (r >= N) return;
    int lane = threadIdx.x & 31;
    const T *row = emb + r * ldr;
    /* Double accumulation: bf16 / f32 inputs may square beyond fp32's range. */
    double ss = 0.0;
    int bad = 0;
    if (vec) {
        for (int e = lane * 8; e < d; e += 256) {
            float x[8];
            ld8(row + e, x);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                bad |= !isfinite(x[i]);
                ss = fma((double)x[i], (double)x[i], ss);
            }
        }
    } else {
        for (int e = lane; e < d; e += 32) {
            float x = ld(row, e);
            bad |= !isfinite(x);
            ss = fma((double)x, (double)x, ss);
        }
    }
    ss = warp_sum_d(ss);
    bad = __any_sync(0xffffffffu, bad);
    if (lane == 0) {
        inv[r] = (ss > 0.0 && !bad) ? (float)(1.0 / sqrt(ss)) : 0.f;
        if (bad) {
            flags[seg_of_row(rowoff, nseg, r)] = 1;
            atomicOr(sticky, 1);
        }
    }
}

cudaError_t todre_cuda_launch_rownorm(const struct todre_cuda_emb *e, int64_t N,
                                      const int64_t *rowoff, int nseg, float *inv, int *flags,
                                      int *sticky, cudaStream_t stream)
{
    unsigned grid = blocks_for(N, ROW_THREADS / 32);
    DISPATCH_DTYPE(e->dtype, T,
        k_rownorm<T><<<grid, ROW_THREADS, 0, stream>>>((const T *)e->ptr, e->ld, e->d, e->vec,
                                                        N, rowoff, nseg, inv, flags, sticky));
    return cudaGetLastError();
}

template <typename T>
__global__ void k_cls(const T *cls, int64_t inner, int64_t outer_stride, int64_t inner_stride,
                      int64_t N, const int64_t *rowoff, int nseg, float *clsf, int *flags,
                      int *sticky)
{
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= N) return;
    float v = ld(cls, (r / inner) * outer_stride + (r % inner) * inner_stride);
    if (!isfinite(v)) {
        flags[seg_of_row(rowoff, nseg, r)] = 1;
        atomicOr(sticky, 2);
        v = 0.f;
    }
    clsf[r] = v + 0.0f;
}

cudaError_t todre_cuda_launch_cls(const void *cls, todre_dtype dt, int64_t inner,
                                  int64_t outer_stride, int64_t inner_stride, int64_t N,
                                  const int64_t *rowoff, int nseg, float *clsf, int *flags,
                                  int *sticky, cudaStream_t stream)
{
    unsigned grid = blocks_for(N, 256);
    DISPATCH_DTYPE(dt, T,
        k_cls<T><<<grid, 256, 0, stream>>>((const T *)cls, inner, outer_stride, inner_stride, N,
                                           rowoff, nseg, clsf, flags, sticky));
    return cudaGetLastError();
}

/* ---- CENTER / FARTHEST ------------------------------------------------------- */

/* Partial sums of x_r over a chunk of the pivot range, one column per thread,
 * rows in a fixed order (deterministic, no atomics). */
template <typename T>
__global__ void k_mu_partial(const T *emb, int64_t ldr, int d, const struct todre_cuda_seg *segs,
                             int chunks, const float *inv, float *partial)
{
    int e = blockIdx.y * blockDim.x + threadIdx.x;
    int b = blockIdx.x, c = blockIdx.z;
    if (e >= d) return;
    struct todre_cuda_seg s = segs[b];
    int m = s.hi - s.lo;
    int per = (m + chunks - 1) / chunks;
    int r0 = s.lo + c * per, r1 = min(s.hi, r0 + per);
    float acc = 0.f;
    for (int v = r0; v < r1; v++) {
        int64_t r = s.row0 + v;
        acc = fmaf(ld(emb, r * ldr + e), inv[r], acc);
    }
    partial[((int64_t)b * chunks + c) * d + e] = acc;
}

__global__ void k_mu_final(const struct todre_cuda_seg *segs, int chunks, int d,
                           const float *partial, float *mu)
{
    int e = blockIdx.y * blockDim.x + threadIdx.x;
    int b = blockIdx.x;
    if (e >= d) return;
    struct todre_cuda_seg s = segs[b];
    float acc = 0.f;
    for (int c = 0; c < chunks; c++) acc += partial[((int64_t)b * chunks + c) * d + e];
    mu[(int64_t)b * d + e] = acc / (float)(s.hi - s.lo);
}

template <typename T>
__global__ void k_center_score(const T *emb, int64_t ldr, int d, int vec, int64_t N,
                               const struct todre_cuda_seg *segs, const int64_t *rowoff, int nseg,
                               const float *inv, const float *mu, float *score)
{
    int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (r >= N) return;
    int b = seg_of_row(rowoff, nseg, r);
    struct todre_cuda_seg s = segs[b];
    int v = (int)(r - s.row0);
    if (v < s.lo || v >= s.hi) return;
    /* mu rows are 32-byte aligned whenever d % 8 == 0, so the vector path holds. */
    float dot = warp_dot(emb + r * ldr, mu + (int64_t)b * d, d, vec);
    if ((threadIdx.x & 31) == 0) score[r] = dot * inv[r];
}

cudaError_t todre_cuda_launch_center(const struct todre_cuda_emb *e, int64_t N,
                                     const struct todre_cuda_seg *segs, const int64_t *rowoff,
                                     int nseg, int chunks, const float *inv, float *partial,
                                     float *mu, float *score, cudaStream_t stream)
{
    /* Sets on x (up to 2^31 - 1), column blocks on y, row chunks on z. */
    dim3 gp((unsigned)nseg, (unsigned)((e->d + 127) / 128), (unsigned)chunks);
    dim3 gf((unsigned)nseg, (unsigned)((e->d + 255) / 256), 1);
    unsigned gs = blocks_for(N, ROW_THREADS / 32);
    DISPATCH_DTYPE(e->dtype, T,
        k_mu_partial<T><<<gp, 128, 0, stream>>>((const T *)e->ptr, e->ld, e->d, segs, chunks,
                                                inv, partial);
        k_mu_final<<<gf, 256, 0, stream>>>(segs, chunks, e->d, partial, mu);
        k_center_score<T><<<gs, ROW_THREADS, 0, stream>>>((const T *)e->ptr, e->ld, e->d,
                                                          e->vec, N, segs, rowoff, nseg, inv,
                                                          mu, score));
    return cudaGetLastError();
}

/* ---- ISOLATED ---------------------------------------------------------------- */

__global__ void k_rowmax(const float *P, int64_t ldp, int rows, int v0, int n, const float *inv,
                         float *score)
{
    int r = (int)(((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    if (r >= rows) return;
    int lane = threadIdx.x & 31;
    int v = v0 + r;
    float iv = inv[v];
    const float *p = P + (int64_t)r * ldp;
    /* fmaxf ignores a NaN operand: a NaN similarity (finite rows outside the
     * fp32 range) leaves the maximum of the others, and a row with no
     * similarity that is a number keeps NaN, which sorts last, so it never
     * wins the pivot (a start of -inf would make it the most isolated row). */
    float m = NAN;
    for (int u = lane; u < n; u += 32)
        if (u != v) m = fmaxf(m, p[u] * iv * inv[u]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) score[v] = m;
}

cudaError_t todre_cuda_launch_rowmax(const float *P, int64_t ldp, int rows, int v0, int n,
                                     const float *inv, float *score, cudaStream_t stream)
{
    k_rowmax<<<blocks_for(rows, ROW_THREADS / 32), ROW_THREADS, 0, stream>>>(P, ldp, rows, v0, n,
                                                                            inv, score);
    return cudaGetLastError();
}

/* ---- pivot ------------------------------------------------------------------- */

__global__ void k_pivot(const struct todre_cuda_seg *segs, int s0, int only_gemv, int rule,
                        const float *score, int *pivot)
{
    __shared__ unsigned long long red[33];
    int b = s0 + blockIdx.x;
    struct todre_cuda_seg s = segs[b];
    if (only_gemv >= 0 && s.gemv != only_gemv) return;
    if (rule == TODRE_CUDA_PIVOT_GIVEN) {
        if (threadIdx.x == 0) pivot[b] = s.pivot;
        return;
    }
    unsigned long long key = TODRE_KEY_NONE;
    for (int v = s.lo + threadIdx.x; v < s.hi; v += blockDim.x) {
        float x = score[s.row0 + v];
        unsigned long long k = argmin_key(rule == TODRE_CUDA_PIVOT_ARGMAX ? -x : x, (uint32_t)v);
        key = k < key ? k : key;
    }
    key = block_min_u64(key, red);
    if (threadIdx.x == 0) {
        int p = (int)key_index(key);
        /* Only reachable with NaN scores (a set flagged non-finite). */
        if (p < s.lo || p >= s.hi) p = s.lo;
        pivot[b] = p;
    }
}

cudaError_t todre_cuda_launch_pivot(const struct todre_cuda_seg *segs, int s0, int s1,
                                    int only_gemv, enum todre_cuda_pivot_rule rule,
                                    const float *score, int *pivot, cudaStream_t stream)
{
    if (s1 <= s0) return cudaSuccess;
    k_pivot<<<(unsigned)(s1 - s0), 256, 0, stream>>>(segs, s0, only_gemv, (int)rule, score, pivot);
    return cudaGetLastError();
}

/* One greedy cost update of an unselected row v from the raw dot product
 * e_c . e_v: max-sum adds s(c, v), max-min keeps max(x, s - 1). Rounding is
 * pinned (no FMA contraction), so the CPU emulator reproduces the GPU bit
 * for bit. +inf marks a selected row: a cost that overflows or turns NaN
 * (raw dot products beyond fp32 range, subnormal-only rows) becomes FLT_MAX,
 * so it still sorts before every selected row, after every row whose cost
 * is a number, and no index is taken twice. A NaN similarity makes the
 * max-min cost NaN too, as it makes the sum NaN (fmaxf would drop it, and a
 * row whose similarities are all NaN would keep -inf and be taken first);
 * FLT_MAX then stays, since every later cost is max(FLT_MAX, ...). */
template <int OBJ>
__device__ __forceinline__ float greedy_update(float x, float dot, float ic, float iv)
{
    float sim = __fmul_rn(__fmul_rn(dot, ic), iv);
    if (OBJ == TODRE_CUDA_OBJ_SUM) {
        x = __fadd_rn(x, sim);
    } else {
        float y = __fadd_rn(sim, -1.f);
        x = (y > x || y != y) ? y : x;
    }
    return x < INFINITY ? x : FLT_MAX;
}

/* ---- greedy loop, Gram path ----------------------------------------------------- */

/* The set's whole loop in one block: the cost vector and the inverse norms
 * live in shared memory, each step reads one Gram row (L2-resident for the
 * sizes this path is chosen for), updates the costs and takes a block-wide
 * argmin. No host round trip per step. */
template <int OBJ>
__global__ void __launch_bounds__(GRAM_THREADS)
k_greedy_gram(const struct todre_cuda_seg *segs, int s0, const int *pivot, const int *flags,
              const float *inv, const float *gram, int64_t *sel)
{
    extern __shared__ float smem[];
    /* Double-buffered per-warp minima: one __syncthreads() per step. Step t
     * writes red[t & 1]; it is rewritten at step t + 2, after the barrier of
     * step t + 1, which no thread passes before finishing its reads. */
    __shared__ unsigned long long red[2][32];
    int b = s0 + blockIdx.x;
    struct todre_cuda_seg s = segs[b];
    if (s.gemv || flags[b]) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nwarps = blockDim.x >> 5;
    const int n = s.n;
    float *cost = smem;
    float *iv = smem + n;
    const float init = (OBJ == TODRE_CUDA_OBJ_SUM) ? 0.f : -INFINITY;
    for (int v = threadIdx.x; v < n; v += blockDim.x) {
        iv[v] = inv[s.row0 + v];
        cost[v] = init;
    }
    __syncthreads();
    const float *G = gram + s.gram_off;
    int c = pivot[b];
    for (int t = 0;; t++) {
        if (threadIdx.x == 0) sel[s.out0 + t] = c;
        if (t == s.k - 1) break;
        const float *g = G + (int64_t)c * n;
        const float ic = iv[c];
        unsigned long long key = TODRE_KEY_NONE;
        for (int v = threadIdx.x; v < n; v += blockDim.x) {
            float x = cost[v];
            if (v == c) {
                x = INFINITY;
            } else if (x != INFINITY) {
                x = greedy_update<OBJ>(x, g[v], ic, iv[v]);
            }
            cost[v] = x;
            unsigned long long k = argmin_key(x, (uint32_t)v);
            key = k < key ? k : key;
        }
        key = warp_min_u64(key);
        if (lane == 0) red[t & 1][warp] = key;
        __syncthreads();
        key = lane < nwarps ? red[t & 1][lane] : TODRE_KEY_NONE;
        c = (int)key_index(warp_min_u64(key));
    }
}

size_t todre_cuda_greedy_gram_smem(int n) { return (size_t)n * 2 * sizeof(float); }

cudaError_t todre_cuda_launch_greedy_gram(enum todre_cuda_obj obj,
                                          const struct todre_cuda_seg *segs, int s0, int s1,
                                          int max_n, const int *pivot, const int *flags,
                                          const float *inv, const float *gram, int64_t *sel,
                                          cudaStream_t stream)
{
    if (s1 <= s0) return cudaSuccess;
    size_t smem = todre_cuda_greedy_gram_smem(max_n);
    if (obj == TODRE_CUDA_OBJ_SUM)
        k_greedy_gram<TODRE_CUDA_OBJ_SUM><<<(unsigned)(s1 - s0), GRAM_THREADS, smem, stream>>>(
            segs, s0, pivot, flags, inv, gram, sel);
    else
        k_greedy_gram<TODRE_CUDA_OBJ_MAXMIN><<<(unsigned)(s1 - s0), GRAM_THREADS, smem, stream>>>(
            segs, s0, pivot, flags, inv, gram, sel);
    return cudaGetLastError();
}

/* ---- greedy loop, matrix-vector path ---------------------------------------------- */

struct gemv_args {
    const void *emb;
    int64_t ld;
    int d, vec;
    const struct todre_cuda_seg *segs;
    const int *gl_seg;
    const int64_t *gl_w0;
    int G;
    int64_t W;
    int kmax;
    const int *pivot, *flags;
    const float *inv;
    float *cost;
    unsigned long long *keys;
    int64_t *sel;
};

/* Every set's step t in one grid-wide pass: each warp owns a contiguous range
 * of work rows, computes s(v, c_t) for its rows with one warp dot product,
 * updates the costs and folds its argmin into the set's key with one atomicMin
 * per (warp, set). Keys are triple-buffered so that one grid.sync() per step
 * suffices: step t writes keys[t%3], reads keys[(t-1)%3] and clears
 * keys[(t+1)%3], last read at step t-1. */
template <typename T, int OBJ>
__global__ void __launch_bounds__(GEMV_THREADS) k_greedy_gemv(struct gemv_args a)
{
    cg::grid_group grid = cg::this_grid();
    const T *emb = (const T *)a.emb;
    const int lane = threadIdx.x & 31;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t per = (a.W + nwarps - 1) / nwarps;
    const int64_t w_begin = warp * per;
    const int64_t w_end = min(a.W, w_begin + per);
    int j_begin = 0;
    if (w_begin < w_end) {
        int lo = 0, hi = a.G - 1;
        while (lo < hi) {
            int mid = (lo + hi + 1) >> 1;
            if (a.gl_w0[mid] <= w_begin) lo = mid; else hi = mid - 1;
        }
        j_begin = lo;
    }
    const float init = (OBJ == TODRE_CUDA_OBJ_SUM) ? 0.f : -INFINITY;

    for (int t = 0; t < a.kmax; t++) {
        unsigned long long *kw = a.keys + (int64_t)(t % 3) * a.G;
        const unsigned long long *kr = a.keys + (int64_t)((t + 2) % 3) * a.G;
        unsigned long long *kz = a.keys + (int64_t)((t + 1) % 3) * a.G;
        if (blockIdx.x == 0) {
            for (int j = threadIdx.x; j < a.G; j += blockDim.x) {
                kz[j] = TODRE_KEY_NONE;
                int b = a.gl_seg[j];
                struct todre_cuda_seg s = a.segs[b];
                if (t < s.k && !a.flags[b]) {
                    int c = t == 0 ? a.pivot[b] : (int)key_index(__ldcg(kr + j));
                    a.sel[s.out0 + t] = c;
                }
            }
        }
        int64_t w = w_begin;
        int j = j_begin;
        while (w < w_end) {
            const int b = a.gl_seg[j];
            const struct todre_cuda_seg s = a.segs[b];
            const int64_t seg_w0 = a.gl_w0[j];
            const int64_t seg_w1 = min(w_end, a.gl_w0[j + 1]);
            if (t < s.k - 1 && !a.flags[b]) {
                const int c = t == 0 ? a.pivot[b] : (int)key_index(__ldcg(kr + j));
                const T *ec = emb + (s.row0 + c) * a.ld;
                const float ic = a.inv[s.row0 + c];
                unsigned long long run = TODRE_KEY_NONE;
                for (; w < seg_w1; w++) {
                    const int v = (int)(w - seg_w0);
                    float x = t == 0 ? init : a.cost[w];
                    if (v == c) {
                        x = INFINITY;
                    } else if (x != INFINITY) {
                        const int64_t r = s.row0 + v;
                        float dot = warp_dot(emb + r * a.ld, ec, a.d, a.vec);
                        x = greedy_update<OBJ>(x, dot, ic, a.inv[r]);
                    }
                    if (lane == 0) {
                        a.cost[w] = x;
                        unsigned long long k = argmin_key(x, (uint32_t)v);
                        run = k < run ? k : run;
                    }
                }
                if (lane == 0 && run != TODRE_KEY_NONE) atomicMin(kw + j, run);
            }
            w = seg_w1;
            j++;
        }
        grid.sync();
    }
}

template <typename T, int OBJ>
static cudaError_t launch_gemv(struct gemv_args *a, int sm_count, cudaStream_t stream)
{
    int per_sm = 0;
    cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_greedy_gemv<T, OBJ>,
                                                                    GEMV_THREADS, 0);
    if (err != cudaSuccess) return err;
    if (per_sm < 1) return cudaErrorCooperativeLaunchTooLarge;
    int64_t want = (a->W + (GEMV_THREADS / 32) - 1) / (GEMV_THREADS / 32);
    int64_t grid = (int64_t)per_sm * sm_count;
    if (want < grid) grid = want;
    if (grid < 1) grid = 1;
    void *args[] = {a};
    /* The kernel is correct for any grid size. Under MPS thread limits or
     * green contexts fewer SMs are ours than the device reports: halve. */
    for (;;) {
        err = cudaLaunchCooperativeKernel((const void *)k_greedy_gemv<T, OBJ>,
                                          dim3((unsigned)grid), dim3(GEMV_THREADS), args, 0, stream);
        if (err != cudaErrorCooperativeLaunchTooLarge || grid == 1) return err;
        (void)cudaGetLastError();
        grid = (grid + 1) / 2;
    }
}

cudaError_t todre_cuda_launch_greedy_gemv(enum todre_cuda_obj obj, const struct todre_cuda_emb *e,
                                          const struct todre_cuda_seg *segs, const int *gl_seg,
                                          const int64_t *gl_w0, int G, int64_t W, int kmax,
                                          const int *pivot, const int *flags, const float *inv,
                                          float *cost, unsigned long long *keys, int64_t *sel,
                                          int sm_count, cudaStream_t stream)
{
    if (G <= 0 || kmax <= 0) return cudaSuccess;
    struct gemv_args a = {e->ptr, e->ld, e->d, e->vec, segs, gl_seg, gl_w0, G, W, kmax,
                          pivot, flags, inv, cost, keys, sel};
    if (obj == TODRE_CUDA_OBJ_SUM) {
        DISPATCH_DTYPE(e->dtype, T, return launch_gemv<T, TODRE_CUDA_OBJ_SUM>(&a, sm_count, stream));
    } else {
        DISPATCH_DTYPE(e->dtype, T, return launch_gemv<T, TODRE_CUDA_OBJ_MAXMIN>(&a, sm_count, stream));
    }
    return cudaSuccess;
}

/* ---- CLS_TOPK ------------------------------------------------------------------------ */

/* Keys for one radix sort of the whole call: the set in the high 32 bits,
 * the order-preserving map of -cls in the low 32 (ascending = descending
 * value), and the local row as the value; the sort is stable, so ties keep
 * ascending rows. One device-wide sort whatever the number of sets: CUB's
 * DeviceSegmentedSort synchronises the stream on the host (it copies its
 * group sizes to pageable memory) above 500 segments. */
__global__ void k_topk_keys(const float *clsf, int64_t N, const int64_t *rowoff, int nseg,
                            unsigned long long *keys, uint32_t *rows)
{
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= N) return;
    int b = seg_of_row(rowoff, nseg, r);
    keys[r] = ((unsigned long long)(uint32_t)b << 32) | (unsigned long long)ord_f32(-clsf[r]);
    rows[r] = (uint32_t)(r - rowoff[b]);
}

cudaError_t todre_cuda_launch_topk_keys(const float *clsf, int64_t N, const int64_t *rowoff,
                                        int nseg, unsigned long long *keys, uint32_t *rows,
                                        cudaStream_t stream)
{
    k_topk_keys<<<blocks_for(N, 256), 256, 0, stream>>>(clsf, N, rowoff, nseg, keys, rows);
    return cudaGetLastError();
}

cudaError_t todre_cuda_topk_sort(void *tmp, size_t *tmp_bytes, const unsigned long long *keys_in,
                                 unsigned long long *keys_out, const uint32_t *rows_in,
                                 uint32_t *rows_out, int64_t N, int nseg, cudaStream_t stream)
{
    /* Only the bits that vary: 32 for the value, enough for nseg - 1. */
    int end_bit = 32;
    while (end_bit < 64 && ((unsigned long long)(nseg - 1) >> (end_bit - 32)) != 0) end_bit++;
    return cub::DeviceRadixSort::SortPairs(tmp, *tmp_bytes, keys_in, keys_out, rows_in, rows_out,
                                           (int)N, 0, end_bit, stream);
}

__global__ void k_topk_take(const struct todre_cuda_seg *segs, const uint32_t *rows, int64_t *sel)
{
    struct todre_cuda_seg s = segs[blockIdx.x];
    for (int t = threadIdx.x; t < s.k; t += blockDim.x) sel[s.out0 + t] = (int64_t)rows[s.row0 + t];
}

cudaError_t todre_cuda_launch_topk_take(const struct todre_cuda_seg *segs, int nseg,
                                        const uint32_t *sorted_rows, int64_t *sel,
                                        cudaStream_t stream)
{
    k_topk_take<<<(unsigned)nseg, 256, 0, stream>>>(segs, sorted_rows, sel);
    return cudaGetLastError();
}

/* ---- outputs --------------------------------------------------------------------------- */

#define FINAL_THREADS 512

__global__ void __launch_bounds__(FINAL_THREADS)
k_finalize(const struct todre_cuda_seg *segs, const int *flags, const int64_t *sel,
           int64_t *out_sel, int64_t *out_pos, unsigned char *flagmap)
{
    typedef cub::BlockScan<int, FINAL_THREADS> Scan;
    __shared__ typename Scan::TempStorage scan_tmp;
    __shared__ int carry;
    int b = blockIdx.x;
    struct todre_cuda_seg s = segs[b];
    if (flags[b]) {
        /* Never a silent selection: the caller gathering these fails loudly. */
        for (int t = threadIdx.x; t < s.k; t += blockDim.x) {
            if (out_sel) out_sel[s.out0 + t] = -1;
            if (out_pos) out_pos[s.out0 + t] = -1;
        }
        return;
    }
    if (out_pos) {
        unsigned char *map = flagmap + s.row0;
        for (int v = threadIdx.x; v < s.n; v += blockDim.x) map[v] = 0;
        __syncthreads();
        for (int t = threadIdx.x; t < s.k; t += blockDim.x) map[sel[s.out0 + t]] = 1;
        if (threadIdx.x == 0) carry = 0;
        __syncthreads();
        for (int base = 0; base < s.n; base += blockDim.x) {
            int v = base + threadIdx.x;
            int in = (v < s.n) ? map[v] : 0;
            int prefix, total;
            Scan(scan_tmp).ExclusiveSum(in, prefix, total);
            if (in) out_pos[s.out0 + carry + prefix] = v + s.base;
            __syncthreads();
            if (threadIdx.x == 0) carry += total;
            __syncthreads();
        }
    }
    /* the selection order holds local rows until here (the map read them) */
    if (out_sel && s.base) {
        __syncthreads();
        for (int t = threadIdx.x; t < s.k; t += blockDim.x) out_sel[s.out0 + t] += s.base;
    }
}

cudaError_t todre_cuda_launch_finalize(const struct todre_cuda_seg *segs, int nseg,
                                       const int *flags, const int64_t *sel, int64_t *out_sel,
                                       int64_t *out_pos, unsigned char *flagmap,
                                       cudaStream_t stream)
{
    k_finalize<<<(unsigned)nseg, FINAL_THREADS, 0, stream>>>(segs, flags, sel, out_sel, out_pos,
                                                           flagmap);
    return cudaGetLastError();
}

/* ---- per-row outputs (todre_select_ex's scores and steps) ----------------------------------- */

#define EXTRA_THREADS 256

/* steps[row] = the row's place in its set's selection order, -1 if not kept. */
__global__ void __launch_bounds__(EXTRA_THREADS)
k_steps(const struct todre_cuda_seg *segs, const int *flags, const int64_t *sel, int64_t *steps)
{
    struct todre_cuda_seg s = segs[blockIdx.x];
    for (int v = threadIdx.x; v < s.n; v += blockDim.x) steps[s.row0 + v] = -1;
    __syncthreads();
    if (flags[blockIdx.x]) return;
    for (int t = threadIdx.x; t < s.k; t += blockDim.x) steps[s.row0 + sel[s.out0 + t]] = t;
}

/* scores[v], one warp a row: the sum (mode 0, MAX_SUM) or the largest (mode
 * 1, MAX_MIN) of its similarities to the rows kept in its set, or its CLS
 * value (mode 2); NaN in a set whose input was not finite. */
template <typename T>
__global__ void __launch_bounds__(EXTRA_THREADS)
k_scores(const T *emb, int64_t ld, int d, int vec, const struct todre_cuda_seg *segs,
         const int64_t *rowoff, int nseg, int64_t N, const int *flags, const int64_t *sel,
         const float *inv, const float *clsf, int mode, float *scores)
{
    int64_t v = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (v >= N) return; /* the whole warp */
    int b = seg_of_row(rowoff, nseg, v);
    struct todre_cuda_seg s = segs[b];
    float out;
    if (flags[b]) {
        out = __int_as_float(0x7fc00000);
    } else if (mode == 2) {
        out = clsf[v];
    } else {
        float acc = mode == 0 ? 0.f : -INFINITY;
        const T *rv = emb + v * ld;
        for (int t = 0; t < s.k; t++) {
            int64_t c = s.row0 + sel[s.out0 + t];
            float sim = warp_dot(rv, emb + c * ld, d, vec) * inv[v] * inv[c];
            acc = mode == 0 ? acc + sim : fmaxf(acc, sim);
        }
        out = acc;
    }
    if ((threadIdx.x & 31) == 0) scores[v] = out;
}

cudaError_t todre_cuda_launch_extras(const struct todre_cuda_emb *e, const struct todre_cuda_seg *segs,
                                     const int64_t *rowoff, int nseg, int64_t N, const int *flags,
                                     const int64_t *sel, const float *inv, const float *clsf,
                                     int mode, float *scores, int64_t *steps, cudaStream_t stream)
{
    if (steps) {
        k_steps<<<(unsigned)nseg, EXTRA_THREADS, 0, stream>>>(segs, flags, sel, steps);
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return err;
    }
    if (scores) {
        unsigned grid = blocks_for(N, EXTRA_THREADS / 32);
        DISPATCH_DTYPE(e->dtype, T,
            k_scores<T><<<grid, EXTRA_THREADS, 0, stream>>>((const T *)e->ptr, e->ld, e->d, e->vec,
                                                          segs, rowoff, nseg, N, flags, sel, inv,
                                                          clsf, mode, scores));
    }
    return cudaGetLastError();
}

/* ---- one-time setup ---------------------------------------------------------------------- */

/* The opt-in maximum less room for the kernel's static shared memory. */
cudaError_t todre_cuda_select_kernels_init(int smem_optin)
{
    cudaError_t err = cudaFuncSetAttribute(k_greedy_gram<TODRE_CUDA_OBJ_SUM>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           smem_optin - 1024);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(k_greedy_gram<TODRE_CUDA_OBJ_MAXMIN>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, smem_optin - 1024);
    return err;
}
