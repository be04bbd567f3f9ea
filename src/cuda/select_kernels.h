/* Stage-1 kernels of the CUDA backend and their launchers (select_kernels.cu);
 * the driver that plans a call and queues them is select.cu.
 *
 * Every launcher only enqueues on @p stream and returns the launch status. */
#ifndef TODRE_SRC_CUDA_SELECT_KERNELS_H
#define TODRE_SRC_CUDA_SELECT_KERNELS_H

#include <stdint.h>

#include <cuda_runtime.h>

#include "../backend.h"

/* One token set as the kernels see it (staged to the device per call). */
struct todre_cuda_seg {
    int64_t row0;     /* first global row of the set */
    int64_t out0;     /* first output slot */
    int64_t gram_off; /* float offset of the set's Gram matrix in its chunk, or -1 */
    int32_t n, k;
    int32_t lo, hi;   /* pivot range, local rows */
    int32_t pivot;    /* FIXED pivot (the core's draw of RANDOM), else -1 */
    int32_t gemv;     /* 1: GEMV strategy, 0: GRAM (as the core planned it) */
    int64_t base;     /* added to every index written (the job's seg_index_base) */
};

/* Greedy objective as the kernels implement it: both minimise a cost,
 * MAX_SUM's S_v and MAX_MIN's -D_v = max over C of (s(v,u) - 1). */
enum todre_cuda_obj { TODRE_CUDA_OBJ_SUM = 0, TODRE_CUDA_OBJ_MAXMIN = 1 };

/* How the pivot kernel turns a score array into a pivot. */
enum todre_cuda_pivot_rule {
    TODRE_CUDA_PIVOT_ARGMAX = 0,  /* CLS, CENTER */
    TODRE_CUDA_PIVOT_ARGMIN = 1,  /* FARTHEST, ISOLATED */
    TODRE_CUDA_PIVOT_GIVEN = 2    /* FIXED: seg.pivot */
};

/* The embedding matrix as every kernel reads it. */
struct todre_cuda_emb {
    const void *ptr;
    todre_dtype dtype;
    int64_t ld;  /* row stride, elements */
    int32_t d;
    int32_t vec; /* 1: rows may be read 8 elements at a time (aligned) */
};

/* 1/||e_r|| per row (0 for a zero row) and the finiteness check. Non-finite
 * rows set flags[set] and bit 1 of *sticky. */
cudaError_t todre_cuda_launch_rownorm(const struct todre_cuda_emb *e, int64_t N,
                                      const int64_t *rowoff, int nseg, float *inv, int *flags,
                                      int *sticky, cudaStream_t stream);

/* CLS map -> float per global row (-0 -> +0); non-finite values set
 * flags[set] and bit 2 of *sticky. */
cudaError_t todre_cuda_launch_cls(const void *cls, todre_dtype dt, int64_t inner,
                                  int64_t outer_stride, int64_t inner_stride, int64_t N,
                                  const int64_t *rowoff, int nseg, float *clsf, int *flags,
                                  int *sticky, cudaStream_t stream);

/* CENTER / FARTHEST scores x_v . mu over each set's pivot range. @p partial
 * holds nseg * chunks * d floats, @p mu nseg * d floats. */
cudaError_t todre_cuda_launch_center(const struct todre_cuda_emb *e, int64_t N,
                                     const struct todre_cuda_seg *segs, const int64_t *rowoff,
                                     int nseg, int chunks, const float *inv, float *partial,
                                     float *mu, float *score, cudaStream_t stream);

/* ISOLATED scores from a panel P (rows v0 .. v0+rows-1 of one set against all
 * n rows of it, row-major with leading dimension ldp, raw dot products):
 * score[v] = max over u != v of P[v][u] * inv[v] * inv[u]. @p inv and
 * @p score point at the set's first row. */
cudaError_t todre_cuda_launch_rowmax(const float *P, int64_t ldp, int rows, int v0, int n,
                                     const float *inv, float *score, cudaStream_t stream);

/* Pivot of sets [s0, s1) whose gemv flag equals @p only_gemv (-1: all). */
cudaError_t todre_cuda_launch_pivot(const struct todre_cuda_seg *segs, int s0, int s1,
                                    int only_gemv, enum todre_cuda_pivot_rule rule,
                                    const float *score, int *pivot, cudaStream_t stream);

/* Greedy loop of sets [s0, s1) on the Gram path (gemv == 0), one block per
 * set; the set's raw Gram matrix E E^T is at gram + seg.gram_off. */
cudaError_t todre_cuda_launch_greedy_gram(enum todre_cuda_obj obj,
                                          const struct todre_cuda_seg *segs, int s0, int s1,
                                          int max_n, const int *pivot, const int *flags,
                                          const float *inv, const float *gram, int64_t *sel,
                                          cudaStream_t stream);

/* Shared memory the Gram greedy kernel needs for a set of n rows. */
size_t todre_cuda_greedy_gram_smem(int n);

/* Greedy loop of every matrix-vector set in one cooperative launch. The
 * work rows (W in all) are the concatenated rows of the sets gl_seg[0..G),
 * gl_w0 their prefix offsets. @p keys has 3 * G entries, set to all-ones by
 * the caller; @p cost has W floats. */
cudaError_t todre_cuda_launch_greedy_gemv(enum todre_cuda_obj obj, const struct todre_cuda_emb *e,
                                          const struct todre_cuda_seg *segs, const int *gl_seg,
                                          const int64_t *gl_w0, int G, int64_t W, int kmax,
                                          const int *pivot, const int *flags, const float *inv,
                                          float *cost, unsigned long long *keys, int64_t *sel,
                                          int sm_count, cudaStream_t stream);

/* CLS_TOPK, in one device-wide radix sort of (set, value) keys with the
 * local rows as values: keys[r] = set << 32 | order of -cls[r] and
 * rows[r] = r's row in its set; the stable sort leaves each set in its own
 * rows, by descending value, ties by ascending row (never a host wait,
 * whatever the number of sets); take copies each set's first k rows. The
 * sort follows CUB's two-phase protocol (tmp NULL: size query). */
cudaError_t todre_cuda_launch_topk_keys(const float *clsf, int64_t N, const int64_t *rowoff,
                                        int nseg, unsigned long long *keys, uint32_t *rows,
                                        cudaStream_t stream);
cudaError_t todre_cuda_topk_sort(void *tmp, size_t *tmp_bytes, const unsigned long long *keys_in,
                                 unsigned long long *keys_out, const uint32_t *rows_in,
                                 uint32_t *rows_out, int64_t N, int nseg, cudaStream_t stream);
cudaError_t todre_cuda_launch_topk_take(const struct todre_cuda_seg *segs, int nseg,
                                        const uint32_t *sorted_rows, int64_t *sel,
                                        cudaStream_t stream);

/* Per set: outputs of a set with non-finite input become -1; otherwise the
 * position order is derived from the selection order. @p out_sel may be NULL
 * (then sel is workspace and is left alone). */
/* todre_select_ex's per-row outputs (either may be NULL): steps (int64 per
 * global row) and scores (float per global row; mode 0 MAX_SUM, 1 MAX_MIN,
 * 2 CLS_TOPK with @p clsf). Reads the selection order @p sel, local rows:
 * queue it before the output kernel adds the sets' bases. */
cudaError_t todre_cuda_launch_extras(const struct todre_cuda_emb *e, const struct todre_cuda_seg *segs,
                                     const int64_t *rowoff, int nseg, int64_t N, const int *flags,
                                     const int64_t *sel, const float *inv, const float *clsf,
                                     int mode, float *scores, int64_t *steps, cudaStream_t stream);

cudaError_t todre_cuda_launch_finalize(const struct todre_cuda_seg *segs, int nseg,
                                       const int *flags, const int64_t *sel, int64_t *out_sel,
                                       int64_t *out_pos, unsigned char *flagmap,
                                       cudaStream_t stream);

#endif /* TODRE_SRC_CUDA_SELECT_KERNELS_H */
