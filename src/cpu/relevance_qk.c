/* Stage-2 sums from queries and keys (CPU): the ratios of causal
 * softmax(scale * q . k) without materialising the attention matrix.
 *
 * Which rows need a softmax: a text query whose causal window holds no visual
 * key puts exactly 0 on visual keys (and 1 on all keys); likewise a visual
 * query with no text key in its window. With the usual [system | visual |
 * text] layout only the text rows are computed and system rows never are.
 * The rows that remain are gathered, per head, into blocks of at most BR_MAX
 * rows; each block streams over keys 0..(its last position) in blocks of bk
 * keys: an sgemm gives the scores, then an online softmax keeps per row the
 * running max and the running sums over all, visual and text keys. Memory is
 * a few blocks per thread, independent of K.
 *
 * Threads: OpenMP over (sequence, head) items. Each item is computed
 * serially and its partial sums are added in item order afterwards, so the
 * result is the same for every thread count. The score blocks are kept below
 * OpenBLAS's multithreading threshold (m*n*k < 65536 * 4), so sgemm runs in
 * the calling thread instead of oversubscribing the cores. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cblas.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_internal.h"
#include "relevance_util.h"

#define BR_MAX 64
#define BK_MAX 256
#define BK_MIN 16
#define GEMM_SINGLE_THREAD_MNK 262143 /* OpenBLAS threads gemm from 65536 * 4 */
#define DH_MAX 65536 /* keeps the per-thread blocks (and int gemm sizes) small */

enum qk_bad { QK_OK = 0, QK_BAD_Q, QK_BAD_K, QK_BAD_SCORES };

struct qk_item_result {
    double s[TODRE_NUM_SUMS];
    int kind;      /* enum qk_bad */
    int64_t index; /* first bad query row (q, scores) or key row (k) */
};

/* block_update_body() for one ISA level. */
typedef int64_t (*block_update_fn)(const float *restrict, int64_t, const int64_t *, int64_t,
                                int64_t, int64_t, const float *restrict, const float *restrict,
                                float *, double *, double *, double *);

/* Per-thread scratch; all sizes depend on the block sizes and dh only. */
struct qk_scratch {
    float *qbuf;   /* [BR_MAX, dh] */
    float *kbuf;   /* [BK_MAX, dh] */
    float *scores; /* [BR_MAX, BK_MAX] */
    float *mvis, *mtxt; /* [BK_MAX] key-type masks */
    float *rmax;   /* [BR_MAX] running max per row */
    double *sall, *svis, *stxt; /* [BR_MAX] running sums per row */
    int64_t *rows, *pos; /* [BR_MAX] query index and position */
    block_update_fn update; /* block_update_body for the ISA level in use */
};

struct qk_seq_plan {
    int64_t br, bk;          /* block sizes for this sequence */
    int64_t first_vis, first_txt; /* first position of each type, K if none */
};

static size_t align64(size_t n) { return (n + 63u) & ~(size_t)63u; }

static size_t scratch_bytes(int64_t dh)
{
    size_t f = sizeof(float), d = sizeof(double), i = sizeof(int64_t);
    return align64(BR_MAX * (size_t)dh * f) + align64(BK_MAX * (size_t)dh * f) +
           align64((size_t)BR_MAX * BK_MAX * f) + 2 * align64(BK_MAX * f) + align64(BR_MAX * f) +
           3 * align64(BR_MAX * d) + 2 * align64(BR_MAX * i);
}

static void scratch_carve(char *p, int64_t dh, struct qk_scratch *s)
{
    s->qbuf = (float *)p; p += align64(BR_MAX * (size_t)dh * sizeof(float));
    s->kbuf = (float *)p; p += align64(BK_MAX * (size_t)dh * sizeof(float));
    s->scores = (float *)p; p += align64((size_t)BR_MAX * BK_MAX * sizeof(float));
    s->mvis = (float *)p; p += align64(BK_MAX * sizeof(float));
    s->mtxt = (float *)p; p += align64(BK_MAX * sizeof(float));
    s->rmax = (float *)p; p += align64(BR_MAX * sizeof(float));
    s->sall = (double *)p; p += align64(BR_MAX * sizeof(double));
    s->svis = (double *)p; p += align64(BR_MAX * sizeof(double));
    s->stxt = (double *)p; p += align64(BR_MAX * sizeof(double));
    s->rows = (int64_t *)p; p += align64(BR_MAX * sizeof(int64_t));
    s->pos = (int64_t *)p;
}

static int row_needs_softmax(const struct qk_seq_plan *pl, uint8_t t, int64_t p)
{
    if (t == TODRE_TOKEN_TEXT) return pl->first_vis <= p;
    if (t == TODRE_TOKEN_VISUAL) return pl->first_txt <= p;
    return 0;
}

/* Row blocks as even as possible (so 40 text rows make one block, not
 * 32 + 8), key blocks as wide as the single-thread gemm size allows. */
static void plan_sequence(const struct todre_relevance_qk_job *job, int64_t b,
                          struct qk_seq_plan *pl)
{
    const int64_t Q = job->c.Q, K = job->c.K;
    const uint8_t *ty = job->c.types + b * K;
    pl->first_vis = K;
    pl->first_txt = K;
    for (int64_t j = K - 1; j >= 0; j--) {
        if (ty[j] == TODRE_TOKEN_VISUAL) pl->first_vis = j;
        if (ty[j] == TODRE_TOKEN_TEXT) pl->first_txt = j;
    }
    int64_t need = 0;
    for (int64_t i = 0; i < Q; i++) need += row_needs_softmax(pl, ty[K - Q + i], K - Q + i);
    int64_t nblk = need > 0 ? (need + BR_MAX - 1) / BR_MAX : 1;
    pl->br = need > 0 ? (need + nblk - 1) / nblk : 1;
    int64_t bk = GEMM_SINGLE_THREAD_MNK / (pl->br * job->dh);
    bk = bk / BK_MIN * BK_MIN;
    pl->bk = bk < BK_MIN ? BK_MIN : bk > BK_MAX ? BK_MAX : bk;
}

/* Keys j0..j0+nk-1 of key head g as a row-major [nk, dh] f32 block; the input
 * itself when it already has that form. */
static const float *key_block(const struct todre_relevance_qk_job *job, int64_t b, int64_t g,
                              int64_t j0, int64_t nk, float *kbuf, int *ld)
{
    const int64_t dh = job->dh;
    int64_t off = b * job->ks_b + g * job->ks_h + j0 * job->ks_k;
    if (job->dtype == TODRE_DTYPE_F32 && job->ks_d == 1 && job->ks_k >= dh &&
        job->ks_k <= INT32_MAX) {
        *ld = (int)job->ks_k;
        return (const float *)job->k + off;
    }
    for (int64_t j = 0; j < nk; j++)
        todre_rel_load(kbuf + j * dh, todre_rel_at(job->k, job->dtype, off + j * job->ks_k),
                       job->dtype, job->ks_d, dh);
    *ld = (int)dh;
    return kbuf;
}

/* Signed integers ordered as the floats they encode (-0 sorts below +0,
 * which changes no exp or ratio). NaN sorts beyond the infinities of its
 * sign: a row's scores are finite exactly when their keys lie in
 * [float_key(-FLT_MAX), float_key(FLT_MAX)]. The map is its own inverse. */
static inline int32_t float_key(float x)
{
    int32_t i;
    memcpy(&i, &x, sizeof i);
    return i ^ (int32_t)((uint32_t)(i >> 31) >> 1);
}
static inline float key_float(int32_t k)
{
    int32_t i = k ^ (int32_t)((uint32_t)(k >> 31) >> 1);
    float x;
    memcpy(&x, &i, sizeof x);
    return x;
}

/* Fold a [nr, nk] score block (keys j0..j0+nk-1) into the rows' online
 * softmax state; row r sees keys up to pos[r]. One variant per ISA level
 * (relevance_util.h): each machine always runs the same one, so results
 * stay reproducible. Returns -1, or the first row whose visible scores hold
 * NaN or Inf (finite q and k whose scale * q . k overflows float32), which
 * is left before any exp: the caller reports TODRE_ERR_NONFINITE. */
TODRE_REL_BODY int64_t block_update_body(const float *restrict scores, int64_t ld, const int64_t *pos, int64_t nr,
                         int64_t j0, int64_t nk, const float *restrict mvis,
                         const float *restrict mtxt, float *rmax, double *sall, double *svis,
                         double *stxt)
{
    for (int64_t r = 0; r < nr; r++) {
        const int64_t nv = pos[r] - j0 + 1 < nk ? pos[r] - j0 + 1 : nk;
        if (nv <= 0) continue;
        const float *restrict s = scores + r * ld;
        /* the max through order-preserving integer keys: a float max
         * reduction does not vectorise in clang without -ffast-math */
        int32_t kb = float_key(-INFINITY), klo = float_key(INFINITY);
#pragma omp simd reduction(max : kb) reduction(min : klo)
        for (int64_t j = 0; j < nv; j++) {
            int32_t kj = float_key(s[j]);
            kb = kj > kb ? kj : kb;
            klo = kj < klo ? kj : klo;
        }
        if (kb > float_key(FLT_MAX) || klo < float_key(-FLT_MAX)) return r;
        const float mb = key_float(kb);
        if (mb > rmax[r]) {
            /* The factor scales all three sums alike, so its rounding cancels in
             * the ratios; the first block has rmax = -inf and sums of 0. */
            double f = todre_rel_exp_nonpos(rmax[r] - mb);
            sall[r] *= f;
            svis[r] *= f;
            stxt[r] *= f;
            rmax[r] = mb;
        }
        const float m = rmax[r];
        float a = 0.0f, v = 0.0f, t = 0.0f;
#pragma omp simd reduction(+ : a, v, t)
        for (int64_t j = 0; j < nv; j++) {
            float e = todre_rel_exp_nonpos(s[j] - m);
            a += e;
            v += e * mvis[j];
            t += e * mtxt[j];
        }
        sall[r] += a;
        svis[r] += v;
        stxt[r] += t;
    }
    return -1;
}

#define BLOCK_UPDATE_VARIANT(attr, suffix)                                                  \
    attr static int64_t block_update_##suffix(const float *restrict scores, int64_t ld,          \
                                           const int64_t *pos, int64_t nr, int64_t j0,        \
                                           int64_t nk, const float *restrict mvis,            \
                                           const float *restrict mtxt, float *rmax,           \
                                           double *sall, double *svis, double *stxt)          \
    {                                                                                         \
        return block_update_body(scores, ld, pos, nr, j0, nk, mvis, mtxt, rmax, sall, svis,   \
                                 stxt);                                                       \
    }

BLOCK_UPDATE_VARIANT(, generic)
#ifdef TODRE_REL_X86
BLOCK_UPDATE_VARIANT(TODRE_REL_AVX2, avx2)
BLOCK_UPDATE_VARIANT(TODRE_REL_AVX512, avx512)
#endif

static block_update_fn block_update_for(enum todre_rel_level level)
{
#ifdef TODRE_REL_X86
    switch (level) {
    case TODRE_REL_LEVEL_AVX512: return block_update_avx512;
    case TODRE_REL_LEVEL_AVX2: return block_update_avx2;
    case TODRE_REL_GENERIC: break;
    }
#endif
    (void)level;
    return block_update_generic;
}

/* One row block of head h: rows s->rows[0..nr) at positions s->pos[] (sorted). */
static int process_block(const struct todre_relevance_qk_job *job, const struct qk_seq_plan *pl,
                         int64_t b, int64_t h, int64_t nr, struct qk_scratch *s,
                         struct qk_item_result *res)
{
    const int64_t dh = job->dh, K = job->c.K, G = job->c.H / job->H_kv;
    const uint8_t *ty = job->c.types + b * K;
    for (int64_t r = 0; r < nr; r++) {
        int64_t off = b * job->qs_b + h * job->qs_h + s->rows[r] * job->qs_q;
        todre_rel_load(s->qbuf + r * dh, todre_rel_at(job->q, job->dtype, off), job->dtype,
                       job->qs_d, dh);
        s->rmax[r] = -INFINITY;
        s->sall[r] = s->svis[r] = s->stxt[r] = 0.0;
    }
    const int64_t pmax = s->pos[nr - 1];
    for (int64_t j0 = 0; j0 <= pmax; j0 += pl->bk) {
        int64_t nk = pmax + 1 - j0 < pl->bk ? pmax + 1 - j0 : pl->bk;
        int ld;
        const float *kb = key_block(job, b, h / G, j0, nk, s->kbuf, &ld);
        for (int64_t j = 0; j < nk; j++) {
            s->mvis[j] = ty[j0 + j] == TODRE_TOKEN_VISUAL ? 1.0f : 0.0f;
            s->mtxt[j] = ty[j0 + j] == TODRE_TOKEN_TEXT ? 1.0f : 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)nk, (int)dh,
                    (float)job->scale, s->qbuf, (int)dh, kb, ld, 0.0f, s->scores, (int)pl->bk);
        int64_t bad = s->update(s->scores, pl->bk, s->pos, nr, j0, nk, s->mvis, s->mtxt,
                                s->rmax, s->sall, s->svis, s->stxt);
        if (bad >= 0) {
            /* Finite q and k can still overflow float in the dot product. */
            res->kind = QK_BAD_SCORES;
            res->index = s->rows[bad];
            return 0;
        }
    }
    for (int64_t r = 0; r < nr; r++) {
        if (ty[s->pos[r]] == TODRE_TOKEN_TEXT)
            res->s[TODRE_SUM_T2V_NUM] += s->svis[r] / s->sall[r];
        else
            res->s[TODRE_SUM_V2T_NUM] += s->stxt[r] / s->sall[r];
    }
    return 1;
}

/* NaN/Inf anywhere in this item's q rows. The keys were checked before
 * (check_keys), for every key head, so no item scores a non-finite key. */
static int check_queries(const struct todre_relevance_qk_job *job, int64_t b, int64_t h,
                         struct qk_item_result *res)
{
    for (int64_t i = 0; i < job->c.Q; i++) {
        int64_t off = b * job->qs_b + h * job->qs_h + i * job->qs_q;
        if (!todre_rel_finite(todre_rel_at(job->q, job->dtype, off), job->dtype, job->qs_d, job->dh)) {
            res->kind = QK_BAD_Q;
            res->index = i;
            return 0;
        }
    }
    return 1;
}

/* NaN/Inf anywhere in the K key rows of key head g of sequence b (all of
 * them, also those no query sees, as in the probability path). */
static void check_keys(const struct todre_relevance_qk_job *job, int64_t b, int64_t g,
                       struct qk_item_result *res)
{
    res->kind = QK_OK;
    res->index = -1;
    for (int64_t j = 0; j < job->c.K; j++) {
        int64_t off = b * job->ks_b + g * job->ks_h + j * job->ks_k;
        if (!todre_rel_finite(todre_rel_at(job->k, job->dtype, off), job->dtype, job->ks_d, job->dh)) {
            res->kind = QK_BAD_K;
            res->index = j;
            return;
        }
    }
}

static void qk_item(const struct todre_relevance_qk_job *job, const struct qk_seq_plan *pl,
                    int64_t b, int64_t h, struct qk_scratch *s, struct qk_item_result *res)
{
    const int64_t Q = job->c.Q, K = job->c.K;
    const uint8_t *ty = job->c.types + b * K;
    for (int k = 0; k < TODRE_NUM_SUMS; k++) res->s[k] = 0.0;
    res->kind = QK_OK;
    res->index = -1;
    if (!check_queries(job, b, h, res)) return;
    int64_t nr = 0;
    for (int64_t i = 0; i < Q; i++) {
        int64_t p = K - Q + i;
        /* Every text / visual row adds its row sum, 1, to its denominator. */
        if (ty[p] == TODRE_TOKEN_TEXT) res->s[TODRE_SUM_T2V_DEN] += 1.0;
        if (ty[p] == TODRE_TOKEN_VISUAL) res->s[TODRE_SUM_V2T_DEN] += 1.0;
        if (!row_needs_softmax(pl, ty[p], p)) continue;
        s->rows[nr] = i;
        s->pos[nr] = p;
        if (++nr == pl->br) {
            if (!process_block(job, pl, b, h, nr, s, res)) return;
            nr = 0;
        }
    }
    if (nr > 0) process_block(job, pl, b, h, nr, s, res);
}

/* @p h: the query head, or the key head for QK_BAD_K. */
static todre_status report_bad(const struct qk_item_result *r, int64_t b, int64_t h,
                               struct todre_diag *diag)
{
    switch (r->kind) {
    case QK_BAD_Q:
        return todre_diag_set(diag, TODRE_ERR_NONFINITE, "q: NaN or Inf in sequence %lld, head %lld, query row %lld",
                    (long long)b, (long long)h, (long long)r->index);
    case QK_BAD_K:
        return todre_diag_set(diag, TODRE_ERR_NONFINITE, "k: NaN or Inf in sequence %lld, key head %lld, key row %lld",
                    (long long)b, (long long)h, (long long)r->index);
    default:
        return todre_diag_set(diag, TODRE_ERR_NONFINITE,
                    "q, k: scale * q . k overflows float32 in sequence %lld, head %lld, query row %lld",
                    (long long)b, (long long)h, (long long)r->index);
    }
}

todre_status todre_cpu_relevance_qk(struct todre_backend *base,
                                    const struct todre_relevance_qk_job *job,
                                    struct todre_diag *diag)
{
    struct todre_cpu_backend *be = (struct todre_cpu_backend *)base;
    const struct todre_relevance_common *c = &job->c;
    const int64_t H = c->H, Hkv = job->H_kv;
    int nt = todre_cpu_threads(be);
    block_update_fn update = block_update_for(todre_rel_level());
    if (job->dh > DH_MAX)
        return todre_diag_set(diag, TODRE_ERR_UNSUPPORTED, "q: head dim %lld is above %lld (CPU backend)",
                    (long long)job->dh, (long long)DH_MAX);
    size_t per_thread = scratch_bytes(job->dh);
    size_t plans = align64((size_t)c->B * sizeof(struct qk_seq_plan));
    size_t items = (size_t)(c->B * H) * sizeof(struct qk_item_result);
    char *ws = todre_cpu_workspace(be, TODRE_CPU_WS_RELEVANCE, (size_t)nt * per_thread + plans + items);
    if (!ws)
        return todre_diag_set(diag, TODRE_ERR_OUT_OF_MEMORY,
                    "cannot allocate the q/k-path workspace (dh = %lld, B*H = %lld, "
                    "%d threads)", (long long)job->dh, (long long)(c->B * H), nt);
    struct qk_seq_plan *plan = (struct qk_seq_plan *)(ws + (size_t)nt * per_thread);
    struct qk_item_result *res = (struct qk_item_result *)(ws + (size_t)nt * per_thread + plans);
    for (int64_t b = 0; b < c->B; b++)
        if (c->active[b]) plan_sequence(job, b, &plan[b]);

    /* Keys first, each key head once: a query head of a group must never
     * score a key row holding NaN or Inf (NaN scores would reach the exp),
     * whichever head of the group runs first. res[] (B * H >= B * H_kv
     * items) holds the key results until the query heads overwrite it. */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1 && c->B * Hkv > 1)
    for (int64_t it = 0; it < c->B * Hkv; it++)
        if (c->active[it / Hkv]) check_keys(job, it / Hkv, it % Hkv, &res[it]);
    for (int64_t it = 0; it < c->B * Hkv; it++)
        if (c->active[it / Hkv] && res[it].kind != QK_OK)
            return report_bad(&res[it], it / Hkv, it % Hkv, diag);

#pragma omp parallel num_threads(nt) if (nt > 1 && c->B * H > 1)
    {
#ifdef _OPENMP
        int tid = omp_get_thread_num();
#else
        int tid = 0;
#endif
        struct qk_scratch s;
        scratch_carve(ws + (size_t)tid * per_thread, job->dh, &s);
        s.update = update;
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < c->B * H; it++) {
            int64_t b = it / H, h = it % H;
            if (c->active[b]) qk_item(job, &plan[b], b, h, &s, &res[it]);
        }
    }

    for (int64_t it = 0; it < c->B * H; it++)
        if (c->active[it / H] && res[it].kind != QK_OK)
            return report_bad(&res[it], it / H, it % H, diag);
    for (int64_t it = 0; it < c->B * H; it++) {
        if (!c->active[it / H]) continue;
        for (int k = 0; k < TODRE_NUM_SUMS; k++) c->sums[TODRE_NUM_SUMS * (it / H) + k] += res[it].s[k];
    }
    return TODRE_OK;
}
