/* Stage 1 public calls: validation (once, here), the core's decisions (the
 * pivot, the RANDOM draw, each set's strategy), job building, dispatch. */
#include <string.h>

#include "core.h"

/* ---- the RANDOM pivot ----------------------------------------------------- */

/* The portable generator pinned in docs/semantics.md (splitmix64), with
 * rejection so that every index is equally likely. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int64_t todre_random_pivot(uint64_t seed, int64_t lo, int64_t hi)
{
    uint64_t m = (uint64_t)(hi - lo), state = seed;
    uint64_t r = (0 - m) % m; /* 2^64 mod m */
    uint64_t z;
    do z = splitmix64(&state);
    while (z < r);
    return lo + (int64_t)(z % m);
}

/* ---- validation ------------------------------------------------------------ */

/* Embeddings [N, d]: float, on the context's device, inner stride 1. */
static todre_status check_embeddings(struct todre_context *ctx, const DLTensor *dl,
                                     struct todre_array *e)
{
    todre_status st = todre_array_map(ctx, dl, "embeddings", TODRE_DT_FLOAT,
                                      TODRE_WHERE_CONTEXT, e);
    if (st != TODRE_OK) return st;
    if (e->rank != 2)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "embeddings: rank %d, expected 2 ([n, d])", e->rank);
    if (e->shape[0] < 1)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "embeddings: n = 0 tokens (empty input)");
    if (e->shape[1] < 1)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "embeddings: d = 0 (empty rows)");
    if (e->shape[1] > 1 && e->strides[1] != 1)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "embeddings: inner stride %lld, must be 1", (long long)e->strides[1]);
    if (e->shape[0] > 1 && e->strides[0] < e->shape[1])
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "embeddings: row stride %lld is smaller than d = %lld (rows overlap)",
                          (long long)e->strides[0], (long long)e->shape[1]);
    return TODRE_OK;
}

/* CLS map [n] or [frames, tokens] (batch: [N] only). Fills the job's view. */
static todre_status check_cls(struct todre_context *ctx, const DLTensor *dl, int64_t n,
                              int allow_video, struct todre_select_job *job)
{
    struct todre_array c;
    todre_status st = todre_array_map(ctx, dl, "cls", TODRE_DT_FLOAT, TODRE_WHERE_CONTEXT, &c);
    if (st != TODRE_OK) return st;
    if (c.rank == 1) {
        if (c.shape[0] != n)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "cls: %lld values for %lld tokens", (long long)c.shape[0],
                              (long long)n);
        job->cls_inner = n;
        job->cls_outer_stride = 0;
        job->cls_inner_stride = c.strides[0];
    } else if (c.rank == 2 && allow_video) {
        /* c.count cannot overflow: todre_array_map checked it */
        if (c.shape[1] < 1 || c.count != n)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "cls: [%lld, %lld] frames x tokens does not cover %lld tokens",
                              (long long)c.shape[0], (long long)c.shape[1], (long long)n);
        job->cls_inner = c.shape[1];
        job->cls_outer_stride = c.strides[0];
        job->cls_inner_stride = c.strides[1];
    } else {
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "cls: rank %d, expected %s", c.rank,
                          allow_video ? "1 ([n]) or 2 ([frames, tokens])" : "1 ([N])");
    }
    job->cls = c.data;
    job->cls_dtype = c.dtype;
    return TODRE_OK;
}

/* Objective, pivot (AUTO resolved; RANDOM is drawn per set later) and seed
 * from the configuration. */
static todre_status resolve_method(struct todre_context *ctx, const struct todre_select_config *cfg,
                                   int have_cls, struct todre_select_job *job)
{
    job->objective = (todre_objective)cfg->p.objective;
    job->seed = (uint64_t)cfg->p.seed;
    job->pivot_lo = cfg->p.pivot_lo;
    job->pivot_hi = cfg->p.pivot_hi;
    if (cfg->p.objective == TODRE_OBJECTIVE_CLS_TOPK) {
        if (!have_cls)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "cls: NULL, but objective CLS_TOPK needs a CLS attention map");
        job->pivot = TODRE_PIVOT_CLS;
        return TODRE_OK;
    }
    todre_pivot p = (todre_pivot)cfg->p.pivot;
    if (p == TODRE_PIVOT_AUTO) {
        if (cfg->p.objective == TODRE_OBJECTIVE_MAX_MIN) p = TODRE_PIVOT_ISOLATED;
        else p = have_cls ? TODRE_PIVOT_CLS : TODRE_PIVOT_CENTER;
    }
    if (p == TODRE_PIVOT_CLS && !have_cls)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "cls: NULL, but the CLS pivot needs a CLS attention map");
    job->pivot = p;
    return TODRE_OK;
}

/* The pivot range within a set (or group, @p what) of n rows numbered
 * @p set (-1: the only one). */
static todre_status check_pivot_range_of(struct todre_context *ctx,
                                         const struct todre_select_config *cfg, int64_t n,
                                         int64_t set, const char *what)
{
    if (cfg->p.objective == TODRE_OBJECTIVE_CLS_TOPK) return TODRE_OK; /* range unused */
    int64_t hi = cfg->p.pivot_hi < 0 ? n : cfg->p.pivot_hi;
    if (cfg->p.pivot_lo >= hi || hi > n) {
        if (set < 0)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "pivot_range: [%lld, %lld) does not fit the %lld tokens",
                              (long long)cfg->p.pivot_lo, (long long)hi, (long long)n);
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "pivot_range: [%lld, %lld) does not fit the %lld tokens of %s %lld",
                          (long long)cfg->p.pivot_lo, (long long)hi, (long long)n, what,
                          (long long)set);
    }
    return TODRE_OK;
}

static todre_status check_pivot_range(struct todre_context *ctx,
                                      const struct todre_select_config *cfg, int64_t n,
                                      int64_t set)
{
    return check_pivot_range_of(ctx, cfg, n, set, "set");
}

/* Output [K] or [2, K] int64 on the context's device, inner stride 1. */
static todre_status check_out(struct todre_context *ctx, const DLTensor *dl, todre_order order,
                              int64_t total, struct todre_select_job *job)
{
    struct todre_array out;
    todre_status st = todre_array_map_out(ctx, dl, "out", TODRE_DT(TODRE_DTYPE_I64),
                                      TODRE_WHERE_CONTEXT, &out);
    if (st != TODRE_OK) return st;
    int both = order == TODRE_ORDER_BOTH;
    int want_rank = both ? 2 : 1;
    if (out.rank != want_rank || out.shape[want_rank - 1] != total || (both && out.shape[0] != 2))
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "out: shape must be %s%lld]%s",
                          both ? "[2, " : "[", (long long)total,
                          both ? " for ORDER_BOTH" : " (k indices)");
    if (total > 1 && out.strides[want_rank - 1] != 1)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "out: inner stride must be 1");
    if (both && out.strides[0] < total)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "out: rows overlap (row stride < %lld)",
                          (long long)total);
    int64_t *base = out.data;
    job->out_sel = order == TODRE_ORDER_POSITION ? NULL : base;
    job->out_pos = order == TODRE_ORDER_SELECTION ? NULL : both ? base + out.strides[0] : base;
    return TODRE_OK;
}

/* Completes the job with the embeddings view, the segment tables, the drawn
 * RANDOM pivots (seg_pivot: host scratch [nseg], written here when the pivot
 * is RANDOM) and each set's plan, and runs it on the context's backend. */
static todre_status dispatch(struct todre_context *ctx, const struct todre_array *embeddings,
                             int64_t nseg, const int64_t *seg_offsets, const int64_t *seg_k,
                             const int64_t *out_offsets, int64_t *seg_pivot,
                             struct todre_select_job *job)
{
    job->emb = embeddings->data;
    job->emb_dtype = embeddings->dtype;
    job->d = embeddings->shape[1];
    job->emb_row_stride = embeddings->strides[0];
    job->nseg = nseg;
    job->seg_offsets = seg_offsets;
    job->seg_k = seg_k;
    job->out_offsets = out_offsets;
    if (job->objective != TODRE_OBJECTIVE_CLS_TOPK && job->pivot == TODRE_PIVOT_RANDOM) {
        for (int64_t b = 0; b < nseg; b++) {
            int64_t n = seg_offsets[b + 1] - seg_offsets[b];
            int64_t hi = job->pivot_hi < 0 ? n : job->pivot_hi;
            seg_pivot[b] = todre_random_pivot(job->seed, job->pivot_lo, hi);
        }
        job->pivot = TODRE_PIVOT_FIXED;
        job->seg_pivot = seg_pivot;
    }
    struct todre_select_plan *plans = todre_ctx_plans(ctx, (size_t)nseg);
    if (!plans) return todre_fail(ctx, TODRE_ERR_OUT_OF_MEMORY, "select: out of host memory");
    todre_select_plan_sets(ctx->be, job, plans);
    job->seg_plan = plans;

    char msg[TODRE_MSG_CAP] = "";
    struct todre_diag diag = {msg, sizeof msg};
    ctx->be->params.rows_made = 0;
    todre_status st = ctx->be->ops->select(ctx->be, job, &diag);
    return st == TODRE_OK ? st : todre_fail_diag(ctx, st, "select", msg);
}

todre_status todre_select(todre_context *ctx, const todre_select_config *cfg,
                          const DLTensor *embeddings, const DLTensor *cls, const DLTensor *out)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    if (!cfg) return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    struct todre_select_job job;
    memset(&job, 0, sizeof job);
    struct todre_array emb;
    todre_status st = check_embeddings(ctx, embeddings, &emb);
    if (st != TODRE_OK) return st;
    int64_t n = emb.shape[0];
    if (cls && (st = check_cls(ctx, cls, n, 1, &job)) != TODRE_OK) return st;
    if ((st = resolve_method(ctx, cfg, cls != NULL, &job)) != TODRE_OK) return st;
    if ((st = check_pivot_range(ctx, cfg, n, -1)) != TODRE_OK) return st;
    int64_t k;
    if ((st = todre_resolve_keep(ctx, cfg, n, &k)) != TODRE_OK) return st;
    if ((st = check_out(ctx, out, (todre_order)cfg->p.order, k, &job)) != TODRE_OK) return st;

    int64_t *tab = todre_ctx_i64(ctx, 6);
    if (!tab) return todre_fail(ctx, TODRE_ERR_OUT_OF_MEMORY, "select: out of host memory");
    tab[0] = 0; tab[1] = n;     /* seg_offsets */
    tab[2] = k;                 /* seg_k */
    tab[3] = 0; tab[4] = k;     /* out_offsets */
    return dispatch(ctx, &emb, 1, tab, tab + 2, tab + 3, tab + 5, &job);
}

/* Host int64 vector of @p len entries (any stride), copied into dst. */
static todre_status read_host_i64(struct todre_context *ctx, const DLTensor *dl,
                                  const char *name, int64_t len, int64_t *dst)
{
    struct todre_array t;
    todre_status st = todre_array_map(ctx, dl, name, TODRE_DT(TODRE_DTYPE_I64),
                                      TODRE_WHERE_HOST, &t);
    if (st != TODRE_OK) return st;
    if (t.rank != 1 || t.shape[0] != len)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "%s: shape must be [%lld]", name,
                          (long long)len);
    const int64_t *p = t.data;
    for (int64_t i = 0; i < len; i++) dst[i] = p[i * t.strides[0]];
    return TODRE_OK;
}

todre_status todre_select_batch(todre_context *ctx, const todre_select_config *cfg,
                                const DLTensor *embeddings, const DLTensor *cls,
                                const DLTensor *offsets, const DLTensor *keep,
                                const DLTensor *out, const DLTensor *out_offsets)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    if (!cfg) return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    struct todre_select_job job;
    memset(&job, 0, sizeof job);
    struct todre_array emb;
    todre_status st = check_embeddings(ctx, embeddings, &emb);
    if (st != TODRE_OK) return st;
    int64_t total_rows = emb.shape[0];

    struct todre_array off;
    st = todre_array_map(ctx, offsets, "offsets", TODRE_DT(TODRE_DTYPE_I64), TODRE_WHERE_HOST,
                         &off);
    if (st != TODRE_OK) return st;
    if (off.rank != 1 || off.shape[0] < 2)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "offsets: shape must be [B + 1] with B >= 1");
    int64_t nseg = off.shape[0] - 1;
    /* Every set has >= 1 row, so nseg <= total_rows. */
    if (nseg > total_rows)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "offsets: %lld sets for %lld rows (no set may be empty)",
                          (long long)nseg, (long long)total_rows);

    /* Host tables: offsets [B + 1], k [B], output offsets [B + 1], pivots [B]. */
    int64_t tab_len;
    size_t tab_bytes;
    if (!todre_mul_i64(nseg, 4, &tab_len) || !todre_add_i64(tab_len, 2, &tab_len) ||
        !todre_bytes(tab_len, sizeof(int64_t), &tab_bytes))
        return todre_fail(ctx, TODRE_ERR_OUT_OF_MEMORY,
                          "offsets: tables for %lld sets do not fit host memory",
                          (long long)nseg);
    int64_t *tab = todre_ctx_i64(ctx, (size_t)tab_len);
    if (!tab) return todre_fail(ctx, TODRE_ERR_OUT_OF_MEMORY, "select_batch: out of host memory");
    int64_t *seg_off = tab, *seg_k = tab + nseg + 1, *out_off = tab + 2 * nseg + 1;
    int64_t *seg_pivot = tab + 3 * nseg + 2;
    if ((st = read_host_i64(ctx, offsets, "offsets", nseg + 1, seg_off)) != TODRE_OK) return st;
    if (seg_off[0] != 0)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "offsets: offsets[0] = %lld, must be 0",
                          (long long)seg_off[0]);
    for (int64_t b = 0; b < nseg; b++)
        if (seg_off[b + 1] <= seg_off[b])
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "offsets: set %lld is empty or offsets decrease", (long long)b);
    if (seg_off[nseg] != total_rows)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "offsets: offsets[B] = %lld but embeddings has %lld rows",
                          (long long)seg_off[nseg], (long long)total_rows);

    if (cls && (st = check_cls(ctx, cls, total_rows, 0, &job)) != TODRE_OK) return st;
    if ((st = resolve_method(ctx, cfg, cls != NULL, &job)) != TODRE_OK) return st;

    if (keep && (st = read_host_i64(ctx, keep, "keep", nseg, seg_k)) != TODRE_OK) return st;
    out_off[0] = 0;
    for (int64_t b = 0; b < nseg; b++) {
        int64_t n = seg_off[b + 1] - seg_off[b];
        if ((st = check_pivot_range(ctx, cfg, n, b)) != TODRE_OK) return st;
        if (keep) {
            if (seg_k[b] < 1 || seg_k[b] > n)
                return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                                  "keep: keep[%lld] = %lld is outside [1, %lld]", (long long)b,
                                  (long long)seg_k[b], (long long)n);
        } else if ((st = todre_resolve_keep(ctx, cfg, n, &seg_k[b])) != TODRE_OK) {
            return st;
        }
        /* K = sum of the k, each <= its set's n, so K <= N; checked anyway */
        if (!todre_add_i64(out_off[b], seg_k[b], &out_off[b + 1]))
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "keep: the sum of the per-set k overflows int64 at set %lld",
                              (long long)b);
    }
    if ((st = check_out(ctx, out, (todre_order)cfg->p.order, out_off[nseg], &job)) != TODRE_OK)
        return st;
    struct todre_array oo;
    if (out_offsets) {
        st = todre_array_map_out(ctx, out_offsets, "out_offsets", TODRE_DT(TODRE_DTYPE_I64),
                             TODRE_WHERE_HOST, &oo);
        if (st != TODRE_OK) return st;
        if (oo.rank != 1 || oo.shape[0] != nseg + 1)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "out_offsets: shape must be [%lld]", (long long)(nseg + 1));
    }

    if ((st = dispatch(ctx, &emb, nseg, seg_off, seg_k, out_off, seg_pivot, &job)) != TODRE_OK)
        return st;
    if (out_offsets) {
        int64_t *p = oo.data;
        for (int64_t b = 0; b <= nseg; b++) p[b * oo.strides[0]] = out_off[b];
    }
    return TODRE_OK;
}

/* ---- todre_select_ex: groups, budget policies, scores -------------------- */

/* Per-row output [N] (scores float32 or steps int64) on the context's
 * device, compact. */
static todre_status check_row_out(struct todre_context *ctx, const DLTensor *dl, const char *name,
                                  todre_dtype dtype, int64_t N, void **data)
{
    struct todre_array a;
    todre_status st = todre_array_map_out(ctx, dl, name, TODRE_DT(dtype), TODRE_WHERE_CONTEXT, &a);
    if (st != TODRE_OK) return st;
    if (a.rank != 1 || a.shape[0] != N)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "%s: shape must be [%lld] (one per row)",
                          name, (long long)N);
    if (N > 1 && a.strides[0] != 1)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "%s: stride must be 1 (compact)", name);
    *data = a.data;
    return TODRE_OK;
}

/* The struct the caller passed: at least 1.1's, and any later fields zero. */
static todre_status check_args(struct todre_context *ctx, const todre_select_args *args)
{
    if (!args) return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "args: NULL");
    if (args->struct_size < sizeof *args)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "args: struct_size %zu is smaller than todre_select_args (%zu bytes): "
                          "set it to sizeof(todre_select_args)",
                          args->struct_size, sizeof *args);
    const unsigned char *extra = (const unsigned char *)args + sizeof *args;
    for (size_t i = 0; i < args->struct_size - sizeof *args; i++)
        if (extra[i])
            return todre_fail(ctx, TODRE_ERR_UNSUPPORTED,
                              "args: a field this libtodre (%s) does not know is set (byte %zu "
                              "of %zu)",
                              TODRE_VERSION_STRING, sizeof *args + i, args->struct_size);
    if (!args->out) return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "out: NULL");
    return TODRE_OK;
}

todre_status todre_select_ex(todre_context *ctx, const todre_select_config *cfg,
                             const todre_select_args *args)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    if (!cfg) return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    todre_status st = check_args(ctx, args);
    if (st != TODRE_OK) return st;
    struct todre_select_job job;
    memset(&job, 0, sizeof job);
    struct todre_array emb;
    if ((st = check_embeddings(ctx, args->embeddings, &emb)) != TODRE_OK) return st;
    const int64_t N = emb.shape[0];

    /* the sets: B, and their row offsets */
    int64_t B = 1;
    if (args->offsets) {
        struct todre_array off;
        st = todre_array_map(ctx, args->offsets, "offsets", TODRE_DT(TODRE_DTYPE_I64),
                             TODRE_WHERE_HOST, &off);
        if (st != TODRE_OK) return st;
        if (off.rank != 1 || off.shape[0] < 2)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "offsets: shape must be [B + 1] with B >= 1");
        B = off.shape[0] - 1;
        if (B > N)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "offsets: %lld sets for %lld rows (no set may be empty)",
                              (long long)B, (long long)N);
    }
    /* the groups: G (each set one group without them) */
    struct todre_array ga;
    int64_t G = B;
    if (args->groups) {
        st = todre_array_map(ctx, args->groups, "groups", TODRE_DT(TODRE_DTYPE_I64),
                             TODRE_WHERE_HOST, &ga);
        if (st != TODRE_OK) return st;
        if (ga.rank != 1 || ga.shape[0] < 2)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "groups: shape must be [G + 1] with G >= 1");
        G = ga.shape[0] - 1;
    }

    /* Host tables, one allocation: set offsets [B+1] | set keep [B] | set
     * totals [B] | set out offsets [B+1] | group offsets [G+1] | group sizes
     * [G] | counts [G] | rem [G] | group -> set [G] | segment offsets [G+1] |
     * k [G] | out offsets [G+1] | pivots [G] | index bases [G]: 4B + 10G + 5
     * (segments are at most the groups). */
    int64_t len, t1;
    size_t bytes;
    if (!todre_mul_i64(B, 4, &len) || !todre_mul_i64(G, 10, &t1) || !todre_add_i64(len, t1, &len) ||
        !todre_add_i64(len, 5, &len) || !todre_bytes(len, sizeof(int64_t), &bytes))
        return todre_fail(ctx, TODRE_ERR_OUT_OF_MEMORY,
                          "groups: tables for %lld sets and %lld groups do not fit host memory",
                          (long long)B, (long long)G);
    int64_t *tab = todre_ctx_i64(ctx, (size_t)len);
    if (!tab) return todre_fail(ctx, TODRE_ERR_OUT_OF_MEMORY, "select_ex: out of host memory");
    int64_t *set_off = tab, *set_keep = set_off + B + 1, *set_total = set_keep + B;
    int64_t *set_out = set_total + B, *grp = set_out + B + 1, *sizes = grp + G + 1;
    int64_t *counts = sizes + G, *rem = counts + G, *grp_set = rem + G;
    int64_t *seg_off = grp_set + G, *seg_k = seg_off + G + 1, *out_off = seg_k + G;
    int64_t *seg_pivot = out_off + G + 1, *seg_base = seg_pivot + G;

    if (args->offsets) {
        if ((st = read_host_i64(ctx, args->offsets, "offsets", B + 1, set_off)) != TODRE_OK)
            return st;
        if (set_off[0] != 0)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "offsets: offsets[0] = %lld, must be 0", (long long)set_off[0]);
        for (int64_t b = 0; b < B; b++)
            if (set_off[b + 1] <= set_off[b])
                return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                                  "offsets: set %lld is empty or offsets decrease", (long long)b);
        if (set_off[B] != N)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "offsets: offsets[B] = %lld but embeddings has %lld rows",
                              (long long)set_off[B], (long long)N);
    } else {
        set_off[0] = 0;
        set_off[1] = N;
    }
    if (args->groups) {
        if ((st = read_host_i64(ctx, args->groups, "groups", G + 1, grp)) != TODRE_OK) return st;
        if (grp[0] != 0)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "groups: groups[0] = %lld, must be 0", (long long)grp[0]);
        if (grp[G] != N)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "groups: groups[G] = %lld but embeddings has %lld rows",
                              (long long)grp[G], (long long)N);
        if ((st = todre_plan_group_sizes(ctx, grp, G, 0, -1, sizes)) != TODRE_OK) return st;
    } else {
        for (int64_t b = 0; b <= B; b++) grp[b] = set_off[b];
        for (int64_t b = 0; b < B; b++) sizes[b] = set_off[b + 1] - set_off[b];
    }
    /* each group to the set holding its first row (an empty group at a set
     * boundary: the set after it; at N: the last); a group must not reach
     * past its set, so every set boundary is a group boundary */
    for (int64_t g = 0, b = 0; g < G; g++) {
        while (b + 1 < B && set_off[b + 1] <= grp[g]) b++;
        if (grp[g + 1] > set_off[b + 1])
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "groups: group %lld (rows %lld to %lld) crosses the end of set "
                              "%lld at row %lld: every set boundary must be a group boundary",
                              (long long)g, (long long)grp[g], (long long)grp[g + 1],
                              (long long)b, (long long)set_off[b + 1]);
        grp_set[g] = b;
    }

    if (args->cls && (st = check_cls(ctx, args->cls, N, !args->offsets, &job)) != TODRE_OK)
        return st;
    if ((st = resolve_method(ctx, cfg, args->cls != NULL, &job)) != TODRE_OK) return st;
    if (args->keep) {
        if ((st = read_host_i64(ctx, args->keep, "keep", B, set_keep)) != TODRE_OK) return st;
        for (int64_t b = 0; b < B; b++) {
            int64_t n = set_off[b + 1] - set_off[b];
            int64_t hi = cfg->p.budget == TODRE_BUDGET_PER_GROUP ? INT64_MAX : n;
            if (set_keep[b] < 1 || set_keep[b] > hi)
                return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                                  "keep: keep[%lld] = %lld is outside [1, %lld]", (long long)b,
                                  (long long)set_keep[b], (long long)hi);
        }
    } else {
        for (int64_t b = 0; b < B; b++) set_keep[b] = -1;
    }

    /* counts per set, then the segments the backend selects */
    const int by_group = cfg->p.budget != TODRE_BUDGET_SET;
    int64_t S = 0, g0 = 0;
    seg_off[0] = 0;
    out_off[0] = 0;
    set_out[0] = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t g1 = g0;
        while (g1 < G && grp_set[g1] == b) g1++;
        st = todre_plan_counts(ctx, cfg, sizes + g0, g1 - g0, set_keep[b], args->offsets ? b : -1,
                               counts + g0, rem + g0, &set_total[b]);
        if (st != TODRE_OK) return st;
        if (!todre_add_i64(set_out[b], set_total[b], &set_out[b + 1]))
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "keep: the sum of the per-set k overflows int64 at set %lld",
                              (long long)b);
        if (!by_group) {
            seg_off[S + 1] = set_off[b + 1];
            seg_k[S] = set_total[b];
            seg_base[S] = 0;
            if ((st = check_pivot_range(ctx, cfg, set_off[b + 1] - set_off[b],
                                        args->offsets ? b : -1)) != TODRE_OK)
                return st;
            out_off[S + 1] = out_off[S] + seg_k[S];
            S++;
        } else {
            for (int64_t g = g0; g < g1; g++) {
                if (sizes[g] == 0) continue; /* an empty group: no rows, no segment */
                seg_off[S + 1] = grp[g + 1];
                seg_k[S] = counts[g];        /* >= 1: no non-empty group keeps none */
                seg_base[S] = grp[g] - set_off[b];
                if ((st = check_pivot_range_of(ctx, cfg, sizes[g], g, "group")) != TODRE_OK)
                    return st;
                out_off[S + 1] = out_off[S] + seg_k[S];
                S++;
            }
        }
        g0 = g1;
    }
    if ((st = check_out(ctx, args->out, (todre_order)cfg->p.order, set_out[B], &job)) != TODRE_OK)
        return st;
    struct todre_array oo;
    if (args->out_offsets) {
        st = todre_array_map_out(ctx, args->out_offsets, "out_offsets", TODRE_DT(TODRE_DTYPE_I64),
                                 TODRE_WHERE_HOST, &oo);
        if (st != TODRE_OK) return st;
        if (oo.rank != 1 || oo.shape[0] != B + 1)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "out_offsets: shape must be [%lld]", (long long)(B + 1));
    }
    void *p;
    if (args->scores) {
        if ((st = check_row_out(ctx, args->scores, "scores", TODRE_DTYPE_F32, N, &p)) != TODRE_OK)
            return st;
        job.out_scores = p;
    }
    if (args->steps) {
        if ((st = check_row_out(ctx, args->steps, "steps", TODRE_DTYPE_I64, N, &p)) != TODRE_OK)
            return st;
        job.out_steps = p;
    }
    job.seg_index_base = by_group ? seg_base : NULL;
    if ((st = dispatch(ctx, &emb, S, seg_off, seg_k, out_off, seg_pivot, &job)) != TODRE_OK)
        return st;
    if (args->out_offsets) {
        int64_t *o = oo.data;
        for (int64_t b = 0; b <= B; b++) o[b * oo.strides[0]] = set_out[b];
    }
    return TODRE_OK;
}
