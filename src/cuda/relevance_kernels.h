/* Stage-2 kernels of the CUDA backend and their launchers
 * (relevance_kernels.cu); the driver that stages a call and reads the sums
 * back is relevance.cu.
 *
 * Every launcher only enqueues on @p stream and returns the launch status. */
#ifndef TODRE_SRC_CUDA_RELEVANCE_KERNELS_H
#define TODRE_SRC_CUDA_RELEVANCE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "../backend.h"

/* Per-call tables in device memory: token types [B, K], active flags [B],
 * and per sequence the first visual and first text position (K if none),
 * for skipping query rows that see no key of their target type. */
struct todre_cuda_rel_tables {
    const unsigned char *types;
    const unsigned char *active;
    const int64_t *first_visual;
    const int64_t *first_text;
};

/* ---- from probabilities ---------------------------------------------------- */

/* One warp per query row (b, h, i) of attn (element at b*s_b + h*s_h +
 * i*s_q + j*s_k): rows[2 * row] = the row's sum over keys of its target
 * type, rows[2 * row + 1] = its total (0 for system rows and inactive
 * sequences). @p vec: s_k == 1 and the element type is aligned (16-byte
 * loads in the row body). A non-finite element sets *nonfinite. */
cudaError_t todre_cuda_launch_probs_rows(const void *attn, todre_dtype dt, int64_t B, int64_t H,
                                         int64_t Q, int64_t K, int64_t s_b, int64_t s_h,
                                         int64_t s_q, int64_t s_k, int vec,
                                         struct todre_cuda_rel_tables tb, double *rows,
                                         int *nonfinite, cudaStream_t stream);

/* Per sequence b: sums[4b .. 4b+3] (TODRE_SUM_*) from its H * Q row pairs,
 * in a fixed order. */
cudaError_t todre_cuda_launch_reduce_rows(const double *rows, int64_t B, int64_t H, int64_t Q,
                                          int64_t K, struct todre_cuda_rel_tables tb,
                                          double *sums, cudaStream_t stream);

/* ---- from Q and K (fused causal online softmax) ------------------------------ */

/* Query rows per block of the fused kernel: a call has ceil(Q / this) tiles. */
#define TODRE_CUDA_QK_ROWS 32
/* Keys per key tile of the fused kernel, and the fewest keys per split: a
 * tile's keys are cut into splits of split_keys keys (a multiple of the key
 * tile, at least TODRE_CUDA_QK_SPLIT_KEYS unless K is smaller), each split
 * a block of its own. */
#define TODRE_CUDA_QK_KEY_TILE 64
#define TODRE_CUDA_QK_SPLIT_KEYS 256

struct todre_cuda_qk_args {
    const void *q, *k;
    int64_t H, H_kv, Q, K, dh;
    int64_t qs_b, qs_h, qs_q, qs_d;
    int64_t ks_b, ks_h, ks_k, ks_d;
    float scale_log2; /* scale * log2(e): softmax in base 2 */
    struct todre_cuda_rel_tables tb;
    int64_t splits;     /* key splits per tile, >= 1, none of them empty: */
    int64_t split_keys; /* keys per split, a multiple of TODRE_CUDA_QK_KEY_TILE,
                           (splits - 1) * split_keys < K <= splits * split_keys */
    int64_t slots;      /* tiles per (sequence, head) that get blocks, counted
                           from the sequence's first tile that can hold a
                           needed row (every needed row is at or after
                           max(first visual, first text)); in [1, tiles],
                           at least tiles - that first tile for every
                           sequence */
    float *rowpart;     /* splits > 1: [B, H, slots, splits, TODRE_CUDA_QK_ROWS, 3]
                           (m, l, lt); unused with one split */
    double *part;       /* [B, H, tiles, 2] numerators (T2V, V2T) */
    int *nonfinite;
};

/* The fused kernel's slots, splits and keys per split for a call with
 * @p tiles query tiles (relevance.cu says how they are chosen). The split
 * states it implies, B * H * slots * splits tiles of TODRE_CUDA_QK_ROWS rows
 * (none with one split), stay under 4 * 2048 tiles (3 MiB). */
void todre_cuda_qk_shape(const struct todre_relevance_common *c, int64_t tiles, int64_t *slots,
                         int64_t *splits, int64_t *split_keys);

/* Dynamic shared memory of the fused kernel for head size @p dh, and what it
 * may request on a device with @p smem_optin bytes of opt-in shared memory
 * per block (a larger dh is UNSUPPORTED). */
size_t todre_cuda_qk_smem(int64_t dh);
size_t todre_cuda_qk_smem_cap(int smem_optin);

/* Zeroes a->part, then grid (slots * splits, H, B): with one split each
 * block writes its tile's two numerators to a->part; with several, every
 * row's softmax state per split to a->rowpart, and grid (slots, H, B) then
 * merges the splits into a->part. Needs todre_cuda_relevance_kernels_init()
 * once per device. */
cudaError_t todre_cuda_launch_qk(const struct todre_cuda_qk_args *a, todre_dtype dt, int64_t B,
                                 cudaStream_t stream);

/* Per sequence b: sums[4b + T2V_NUM] and sums[4b + V2T_NUM] from its H *
 * tiles partials, in a fixed order (the denominators are the host's). */
cudaError_t todre_cuda_launch_reduce_tiles(const double *part, int64_t B, int64_t H, int64_t tiles,
                                           double *sums, cudaStream_t stream);

#endif /* TODRE_SRC_CUDA_RELEVANCE_KERNELS_H */
