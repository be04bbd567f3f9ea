/* Stage 2 on CUDA: the four attention sums per sequence, from attention
 * probabilities (a strided reduction) or from Q and K (a fused causal
 * online-softmax kernel whose memory does not depend on K); the kernels are
 * in relevance_kernels.cu.
 *
 * Both are synchronous: the 4 * B doubles come back to the host before the
 * call returns, since the decision that follows is taken on the host.
 * Reductions run in fixed order (no floating-point atomics): repeated calls
 * give identical sums. */
#include <string.h>

#include "cuda_internal.h"
#include "relevance_kernels.h"

static size_t todre_dtype_bytes(todre_dtype dt) { return dt == TODRE_DTYPE_F32 ? 4 : 2; }

/* ---- host side ------------------------------------------------------------------- */

/* The first visual and the first text position of sequence b (K if none). */
static void first_positions(const struct todre_relevance_common *c, int64_t b, int64_t *fv,
                            int64_t *ft)
{
    *fv = c->K;
    *ft = c->K;
    for (int64_t j = c->K - 1; j >= 0; j--) {
        unsigned char t = c->types[b * c->K + j];
        if (t == TODRE_TOKEN_VISUAL) *fv = j;
        else if (t == TODRE_TOKEN_TEXT) *ft = j;
    }
}

/* Stage types, active flags and first-positions; return device tables. */
static todre_status stage_tables(struct todre_cuda_backend *be,
                                 const struct todre_relevance_common *c, struct todre_cuda_rel_tables *tb,
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
    for (int64_t b = 0; b < c->B; b++) first_positions(c, b, &fv[b], &ft[b]);
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
    /* bit 0 (1): NaN or Inf in the input; bit 1 (2, q/k path only): finite
     * q and k whose scale * q . k overflows float32 */
    if (bad & 1)
        return todre_diag_set(diag, TODRE_ERR_NONFINITE, "%s contain NaN or Inf",
                               qk ? "q or k" : "attn");
    if (bad)
        return todre_diag_set(diag, TODRE_ERR_NONFINITE,
                              "q, k: scale * q . k overflows float32");
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
    struct todre_cuda_rel_tables tb;
    CKS(stage_tables(be, c, &tb, diag));
    int64_t nrows = c->B * c->H * c->Q;
    double *rows, *dsums;
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_REL_ROWS, (size_t)nrows * 2 * sizeof(double),
                       (void **)&rows, diag));
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_REL_SUMS, ((size_t)c->B * 4 + 1) * sizeof(double),
                       (void **)&dsums, diag));
    int *flag = (int *)(dsums + 4 * c->B);
    CK(cudaMemsetAsync(flag, 0, sizeof(double), be->stream), "cudaMemsetAsync");
    if ((nrows + 7) / 8 > 0x7fffffff)
        return todre_diag_set(diag, TODRE_ERR_UNSUPPORTED, "attn: too many rows for one launch");
    int vec = job->s_k == 1 && (uintptr_t)job->attn % todre_dtype_bytes(job->dtype) == 0;
    CK(todre_cuda_launch_probs_rows(job->attn, job->dtype, c->B, c->H, c->Q, c->K, job->s_b,
                                    job->s_h, job->s_q, job->s_k, vec, tb, rows, flag, be->stream),
       "relevance kernel (probabilities)");
    CK(todre_cuda_launch_reduce_rows(rows, c->B, c->H, c->Q, c->K, tb, dsums, be->stream),
       "relevance reduction kernel");
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

/* Blocks the fused kernel aims for in all: about 15 per SM of an H100. */
#define QK_TARGET_BLOCKS 2048

/* The first query tile of sequence b that can hold a needed row (a row that
 * sees a key of its target type): every needed row is at or after
 * max(first visual, first text). The tile count when there is none. The
 * kernels' qk_first_tile is the same rule. */
static int64_t qk_first_tile(const struct todre_relevance_common *c, int64_t b, int64_t tiles)
{
    int64_t fv, ft;
    first_positions(c, b, &fv, &ft);
    int64_t p0 = fv > ft ? fv : ft;
    if (p0 >= c->K) return tiles;
    int64_t i0 = p0 - (c->K - c->Q);
    return i0 <= 0 ? 0 : i0 / TODRE_CUDA_QK_ROWS;
}

/* The fused kernel's launch shape (relevance_kernels.h), from the shapes and
 * token types alone (so
 * the sums, whose float order follows the splits, are the same on every
 * GPU):
 *  - slots: the most tiles any active sequence has from its first tile that
 *    can hold a needed row (the others get no block);
 *  - splits: enough for about QK_TARGET_BLOCKS blocks over the active
 *    sequences' tiles, but no split under TODRE_CUDA_QK_SPLIT_KEYS keys
 *    (unless K is). The [sys|vis|text] prefill needs only its text rows (2
 *    tiles at K = 2955), which alone would occupy a few SMs for the whole key
 *    range. Several splits keep a row state per split (12 bytes a row) for
 *    B * H * slots tiles: at most 4 * QK_TARGET_BLOCKS tiles' worth, 3 MiB,
 *    whatever K (with one split there are none);
 *  - split_keys: the keys per split, whole key tiles, the splits together
 *    covering K. */
void todre_cuda_qk_shape(const struct todre_relevance_common *c, int64_t tiles, int64_t *slots,
                         int64_t *splits, int64_t *split_keys)
{
    int64_t work = 0, most_tiles = 0;
    for (int64_t b = 0; b < c->B; b++) {
        if (!c->active[b]) continue;
        int64_t n = tiles - qk_first_tile(c, b, tiles);
        work += n;
        if (n > most_tiles) most_tiles = n;
    }
    *slots = most_tiles > 0 ? most_tiles : 1;
    work *= c->H;
    const int64_t tile = TODRE_CUDA_QK_KEY_TILE;
    int64_t want = work ? (QK_TARGET_BLOCKS + work - 1) / work : 1;
    int64_t most = (c->K + TODRE_CUDA_QK_SPLIT_KEYS - 1) / TODRE_CUDA_QK_SPLIT_KEYS;
    int64_t n = want < 1 ? 1 : want > most ? most : want;
    /* Row states are kept for B * H * slots tiles per split: never more than
     * 4 * QK_TARGET_BLOCKS tiles' worth (3 MiB), however ragged the batch. */
    int64_t cap = 4 * QK_TARGET_BLOCKS / (c->B * c->H * *slots);
    if (n > cap) n = cap > 1 ? cap : 1;
    /* keys per split in whole tiles; then no more splits than it takes */
    int64_t keys = (c->K + n - 1) / n;
    keys = (keys + tile - 1) / tile * tile;
    *split_keys = keys;
    *splits = (c->K + keys - 1) / keys;
}

static todre_status qk_body(struct todre_cuda_backend *be, const struct todre_relevance_qk_job *job,
                            struct todre_diag *diag)
{
    const struct todre_relevance_common *c = &job->c;
    CKS(todre_cuda_check_pointer(be, job->q, "q", diag));
    CKS(todre_cuda_check_pointer(be, job->k, "k", diag));
    if (todre_cuda_qk_smem(job->dh) > todre_cuda_qk_smem_cap(be->smem_optin))
        return todre_diag_set(diag, TODRE_ERR_UNSUPPORTED,
                               "q: head dimension %lld is too large for the CUDA kernel",
                               (long long)job->dh);
    struct todre_cuda_rel_tables tb;
    CKS(stage_tables(be, c, &tb, diag));
    int64_t tiles = (c->Q + TODRE_CUDA_QK_ROWS - 1) / TODRE_CUDA_QK_ROWS;
    int64_t slots, splits, split_keys;
    todre_cuda_qk_shape(c, tiles, &slots, &splits, &split_keys);
    /* One buffer: the per-tile numerators, then (several splits) the per-row
     * split states. */
    size_t part_bytes = (size_t)(c->B * c->H * tiles) * 2 * sizeof(double);
    size_t row_bytes = splits == 1 ? 0
                     : (size_t)(c->B * c->H * slots) * (size_t)splits * TODRE_CUDA_QK_ROWS * 3 *
                           sizeof(float);
    double *part, *dsums;
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_REL_ROWS, part_bytes + row_bytes, (void **)&part, diag));
    CKS(todre_cuda_buf(be, TODRE_CUDA_BUF_REL_SUMS, ((size_t)c->B * 4 + 1) * sizeof(double),
                       (void **)&dsums, diag));
    int *flag = (int *)(dsums + 4 * c->B);
    CK(cudaMemsetAsync(dsums, 0, ((size_t)c->B * 4 + 1) * sizeof(double), be->stream),
       "cudaMemsetAsync");
    if (tiles > 0x7fffffff || c->H > 65535 || c->B > 65535)
        return todre_diag_set(diag, TODRE_ERR_UNSUPPORTED,
                               "q: more than 65535 heads or sequences in one call");
    struct todre_cuda_qk_args a;
    a.q = job->q;
    a.k = job->k;
    a.H = c->H; a.H_kv = job->H_kv; a.Q = c->Q; a.K = c->K; a.dh = job->dh;
    a.qs_b = job->qs_b; a.qs_h = job->qs_h; a.qs_q = job->qs_q; a.qs_d = job->qs_d;
    a.ks_b = job->ks_b; a.ks_h = job->ks_h; a.ks_k = job->ks_k; a.ks_d = job->ks_d;
    a.scale_log2 = (float)(job->scale * 1.4426950408889634);
    a.tb = tb;
    a.splits = splits;
    a.split_keys = split_keys;
    a.slots = slots;
    a.rowpart = (float *)((char *)part + part_bytes);
    a.part = part;
    a.nonfinite = flag;
    CK(todre_cuda_launch_qk(&a, job->dtype, c->B, be->stream), "relevance kernel (q, k)");
    CK(todre_cuda_launch_reduce_tiles(part, c->B, c->H, tiles, dsums, be->stream),
       "relevance reduction kernel");
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
