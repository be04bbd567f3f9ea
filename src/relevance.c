/* Stage 2 public calls: the relevance handle (layers, tau, schedule, token
 * types, observations), validation, dispatch of the sums to the backend, and
 * the decision rule. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

struct todre_relevance {
    /* tau, schedule, num_layers and batch (read-only), through src/params.c */
    struct todre_relevance_params p;
    int64_t num_layers, batch; /* copies of the read-only p.num_layers, p.batch */
    uint8_t *probe;       /* [L]: listed probe layer */
    int64_t first_probe;  /* smallest listed probe layer */
    uint8_t *types;       /* [B, K] or NULL before set_types */
    int64_t K;
    int64_t *drop_layer;  /* [B], -1 = none */
    uint8_t *observed;    /* [B, L] */
    double *ratios;       /* [B, L, 2] */
    uint8_t *active;      /* [B] scratch */
    double *sums;         /* [B, 4] scratch */
    /* Chunked prefill: sums of the chunks of a layer seen so far, added up
     * until the chunk that ends at position K decides. */
    double *pending;      /* [B, L, 4] */
    int64_t *pending_end; /* [L]: end of the last chunk taken, 0 = none */
    uint8_t *chunk_types; /* [B, K] scratch: types of the keys of one chunk */
};

/* batch x num_layers, whose products with the element sizes below were
 * checked when the handle was created. */
static size_t bl_count(const struct todre_relevance *r)
{
    return (size_t)r->batch * (size_t)r->num_layers;
}

static void reset_observations(struct todre_relevance *r)
{
    for (int64_t b = 0; b < r->batch; b++) r->drop_layer[b] = -1;
    memset(r->observed, 0, bl_count(r));
    memset(r->pending, 0, bl_count(r) * TODRE_NUM_SUMS * sizeof *r->pending);
    memset(r->pending_end, 0, (size_t)r->num_layers * sizeof *r->pending_end);
}

/* The default probe layer list: { floor(7L/8) } (the paper's 7L/8, 0-based). */
static void default_probes(struct todre_relevance *r)
{
    memset(r->probe, 0, (size_t)r->num_layers);
    r->first_probe = 7 * r->num_layers / 8;
    r->probe[r->first_probe] = 1;
}

todre_status todre_relevance_create(int64_t num_layers, int64_t batch, todre_relevance **out)
{
    todre_clear_error(NULL);
    if (!out) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "out: NULL");
    todre_status st = todre_param_check_int(NULL, TODRE_RELEVANCE_NUM_LAYERS, "num_layers",
                                            num_layers);
    if (st != TODRE_OK) return st;
    if ((st = todre_param_check_int(NULL, TODRE_RELEVANCE_BATCH, "batch", batch)) != TODRE_OK)
        return st;
    /* Both ranges are [1, 2^20] (the parameter table), so these fit on 64-bit
     * hosts; checked for every host. bl4 bounds every product below. */
    size_t bl, bl4;
    if (!todre_mul_size((size_t)batch, (size_t)num_layers, &bl) ||
        !todre_mul_size(bl, TODRE_NUM_SUMS * sizeof(double), &bl4))
        return todre_fail(NULL, TODRE_ERR_OUT_OF_MEMORY,
                          "batch x num_layers = %lld x %lld: the state does not fit host memory",
                          (long long)batch, (long long)num_layers);
    struct todre_relevance *r = calloc(1, sizeof *r);
    if (!r) return todre_fail(NULL, TODRE_ERR_OUT_OF_MEMORY, "relevance: out of memory");
    todre_param_defaults(TODRE_OWNER_RELEVANCE, &r->p);
    r->p.num_layers = r->num_layers = num_layers;
    r->p.batch = r->batch = batch;
    r->probe = calloc((size_t)num_layers, 1);
    r->drop_layer = malloc((size_t)batch * sizeof *r->drop_layer);
    r->observed = calloc(bl, 1);
    r->ratios = calloc(bl * 2, sizeof *r->ratios);
    r->active = calloc((size_t)batch, 1);
    r->sums = calloc((size_t)batch * TODRE_NUM_SUMS, sizeof *r->sums);
    r->pending = calloc(bl * TODRE_NUM_SUMS, sizeof *r->pending);
    r->pending_end = calloc((size_t)num_layers, sizeof *r->pending_end);
    if (!r->probe || !r->drop_layer || !r->observed || !r->ratios || !r->active || !r->sums ||
        !r->pending || !r->pending_end) {
        todre_relevance_destroy(r);
        return todre_fail(NULL, TODRE_ERR_OUT_OF_MEMORY, "relevance: out of memory");
    }
    default_probes(r);
    reset_observations(r);
    *out = r;
    return TODRE_OK;
}

void todre_relevance_destroy(todre_relevance *r)
{
    if (!r) return;
    free(r->probe);
    free(r->types);
    free(r->drop_layer);
    free(r->observed);
    free(r->ratios);
    free(r->active);
    free(r->sums);
    free(r->pending);
    free(r->pending_end);
    free(r->chunk_types);
    free(r);
}

todre_status todre_relevance_set_int(todre_relevance *r, todre_param param, int64_t value)
{
    todre_clear_error(NULL);
    if (!r) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "rel: NULL");
    return todre_param_set_int(NULL, TODRE_OWNER_RELEVANCE, &r->p, param, value);
}

todre_status todre_relevance_get_int(const todre_relevance *r, todre_param param, int64_t *value)
{
    todre_clear_error(NULL);
    if (!r) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "rel: NULL");
    return todre_param_get_int(NULL, TODRE_OWNER_RELEVANCE, &r->p, param, value);
}

todre_status todre_relevance_set_double(todre_relevance *r, todre_param param, double value)
{
    todre_clear_error(NULL);
    if (!r) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "rel: NULL");
    return todre_param_set_double(NULL, TODRE_OWNER_RELEVANCE, &r->p, param, value);
}

todre_status todre_relevance_get_double(const todre_relevance *r, todre_param param,
                                        double *value)
{
    todre_clear_error(NULL);
    if (!r) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "rel: NULL");
    return todre_param_get_double(NULL, TODRE_OWNER_RELEVANCE, &r->p, param, value);
}

todre_status todre_relevance_set_probe_layers(todre_relevance *r, const DLTensor *layers)
{
    todre_clear_error(NULL);
    if (!r) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "rel: NULL");
    struct todre_array a;
    todre_status st = todre_array_map(NULL, layers, "layers", TODRE_DT(TODRE_DTYPE_I64),
                                      TODRE_WHERE_HOST, &a);
    if (st != TODRE_OK) return st;
    if (a.rank != 1 || a.shape[0] < 1)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "layers: shape must be [count] with count >= 1");
    const int64_t *v = a.data;
    int64_t count = a.shape[0], s0 = a.strides[0];
    for (int64_t i = 0; i < count; i++)
        if (v[i * s0] < 0 || v[i * s0] >= r->num_layers)
            return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                              "layers: layers[%lld] = %lld is outside [0, %lld)", (long long)i,
                              (long long)v[i * s0], (long long)r->num_layers);
    memset(r->probe, 0, (size_t)r->num_layers);
    r->first_probe = r->num_layers;
    for (int64_t i = 0; i < count; i++) {
        int64_t l = v[i * s0];
        r->probe[l] = 1;
        if (l < r->first_probe) r->first_probe = l;
    }
    return TODRE_OK;
}

/* Check an optional host int64 1-D output of @p n values and write *count
 * (also when @p out is too small). */
static todre_status write_host_list(const char *name, const DLTensor *out, int64_t n,
                                    int64_t *count, struct todre_array *a)
{
    if (!count) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "count: NULL");
    if (out) {
        todre_status st = todre_array_map_out(NULL, out, name, TODRE_DT(TODRE_DTYPE_I64),
                                          TODRE_WHERE_HOST, a);
        if (st != TODRE_OK) return st;
        if (a->rank != 1)
            return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "%s: rank %d, expected 1", name,
                              a->rank);
    }
    *count = n;
    if (out && a->shape[0] < n)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "%s: capacity %lld, need %lld", name, (long long)a->shape[0],
                          (long long)n);
    return TODRE_OK;
}

todre_status todre_relevance_get_probe_layers(const todre_relevance *r, const DLTensor *out,
                                              int64_t *count)
{
    todre_clear_error(NULL);
    if (!r) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "rel: NULL");
    int64_t n = 0;
    for (int64_t l = 0; l < r->num_layers; l++) n += r->probe[l];
    struct todre_array a;
    todre_status st = write_host_list("out", out, n, count, &a);
    if (st != TODRE_OK || !out) return st;
    int64_t *dst = a.data, w = 0;
    for (int64_t l = 0; l < r->num_layers; l++)
        if (r->probe[l]) dst[(w++) * a.strides[0]] = l;
    return TODRE_OK;
}

/* The schedule, for one sequence: 1 probe, 0 not a probe, -1 already dropped. */
static int probe_state(const struct todre_relevance *r, int64_t seq, int64_t layer)
{
    if (r->drop_layer[seq] >= 0) return -1;
    if (r->p.schedule == TODRE_PROBE_UNTIL_DROP) return layer >= r->first_probe;
    return r->probe[layer];
}

static todre_status check_seq_layer(const struct todre_relevance *r, int64_t seq, int64_t layer)
{
    if (seq < 0 || seq >= r->batch)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "seq: %lld is outside [0, %lld)",
                          (long long)seq, (long long)r->batch);
    if (layer < 0 || layer >= r->num_layers)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "layer: %lld is outside [0, %lld)",
                          (long long)layer, (long long)r->num_layers);
    return TODRE_OK;
}

todre_status todre_relevance_is_probe(const todre_relevance *r, int64_t seq, int64_t layer,
                                      int *is_probe)
{
    todre_clear_error(NULL);
    if (!r) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "rel: NULL");
    if (!is_probe) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "is_probe: NULL");
    todre_status st = check_seq_layer(r, seq, layer);
    if (st != TODRE_OK) return st;
    *is_probe = probe_state(r, seq, layer) == 1;
    return TODRE_OK;
}

/* Takes @p types ([batch, K], batch x K checked by the caller) and frees it
 * on failure. */
static todre_status install_types(struct todre_relevance *r, uint8_t *types, int64_t K)
{
    uint8_t *scratch = r->batch > 1 ? malloc((size_t)r->batch * (size_t)K) : NULL;
    if (r->batch > 1 && !scratch) {
        free(types);
        return todre_fail(NULL, TODRE_ERR_OUT_OF_MEMORY, "types: out of memory");
    }
    free(r->chunk_types);
    r->chunk_types = scratch;
    free(r->types);
    r->types = types;
    r->K = K;
    reset_observations(r);
    return TODRE_OK;
}

todre_status todre_relevance_set_types(todre_relevance *r, const DLTensor *types)
{
    todre_clear_error(NULL);
    if (!r) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "rel: NULL");
    struct todre_array t;
    todre_status st = todre_array_map(NULL, types, "types", TODRE_DT(TODRE_DTYPE_U8),
                                      TODRE_WHERE_HOST, &t);
    if (st != TODRE_OK) return st;
    int per_seq = t.rank == 2;
    if (!(t.rank == 1 || (per_seq && t.shape[0] == r->batch)))
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "types: shape must be [K] or [batch = %lld, K]", (long long)r->batch);
    int64_t K = t.shape[t.rank - 1], total;
    if (K < 1) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "types: K = 0 positions");
    size_t bytes;
    if (!todre_mul_i64(r->batch, K, &total) || !todre_bytes(total, 1, &bytes))
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "types: batch x K = %lld x %lld overflows", (long long)r->batch,
                          (long long)K);
    uint8_t *copy = malloc(bytes);
    if (!copy) return todre_fail(NULL, TODRE_ERR_OUT_OF_MEMORY, "types: out of memory");
    const uint8_t *src = t.data;
    int64_t sk = t.strides[t.rank - 1], sb = per_seq ? t.strides[0] : 0;
    for (int64_t b = 0; b < r->batch; b++)
        for (int64_t j = 0; j < K; j++) {
            uint8_t v = src[b * sb + j * sk];
            if (v > TODRE_TOKEN_TEXT) {
                free(copy);
                return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                                  "types: value %u at position %lld (0 system, 1 visual, 2 text)",
                                  (unsigned)v, (long long)j);
            }
            copy[b * K + j] = v;
        }
    return install_types(r, copy, K);
}

todre_status todre_relevance_set_layout(todre_relevance *r, int64_t n_system, int64_t n_visual,
                                        int64_t n_text)
{
    todre_clear_error(NULL);
    if (!r) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "rel: NULL");
    if (n_system < 0 || n_visual < 0 || n_text < 0)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "%s: negative count",
                          n_system < 0 ? "n_system" : n_visual < 0 ? "n_visual" : "n_text");
    if (n_system > INT32_MAX || n_visual > INT32_MAX || n_text > INT32_MAX)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "%s: %lld is above 2^31 - 1",
                          n_system > INT32_MAX   ? "n_system"
                          : n_visual > INT32_MAX ? "n_visual"
                                                 : "n_text",
                          (long long)(n_system > INT32_MAX   ? n_system
                                      : n_visual > INT32_MAX ? n_visual
                                                             : n_text));
    int64_t K, total;
    size_t bytes;
    if (!todre_add_i64(n_system, n_visual, &K) || !todre_add_i64(K, n_text, &K))
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "layout: K overflows int64");
    if (K < 1) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "layout: K = 0 positions");
    if (!todre_mul_i64(r->batch, K, &total) || !todre_bytes(total, 1, &bytes))
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "layout: batch x K = %lld x %lld overflows", (long long)r->batch,
                          (long long)K);
    uint8_t *copy = malloc(bytes);
    if (!copy) return todre_fail(NULL, TODRE_ERR_OUT_OF_MEMORY, "layout: out of memory");
    for (int64_t b = 0; b < r->batch; b++) {
        uint8_t *row = copy + b * K;
        memset(row, TODRE_TOKEN_SYSTEM, (size_t)n_system);
        memset(row + n_system, TODRE_TOKEN_VISUAL, (size_t)n_visual);
        memset(row + n_system + n_visual, TODRE_TOKEN_TEXT, (size_t)n_text);
    }
    return install_types(r, copy, K);
}

todre_status todre_relevance_reset(todre_relevance *r, todre_reset what)
{
    todre_clear_error(NULL);
    if (!r) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "rel: NULL");
    if (what != TODRE_RESET_STATE && what != TODRE_RESET_PARAMS && what != TODRE_RESET_ALL)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "what: %d is not a todre_reset value (1 STATE, 2 PARAMS, 3 ALL)",
                          (int)what);
    if (what & TODRE_RESET_STATE) reset_observations(r); /* token types are kept */
    if (what & TODRE_RESET_PARAMS) {
        todre_param_defaults(TODRE_OWNER_RELEVANCE, &r->p);
        default_probes(r);
    }
    return TODRE_OK;
}

/* Common front half of both observe calls: handle checks and which
 * sequences the layer probes. Returns the number of active sequences. */
static todre_status begin_observe(struct todre_context *ctx, struct todre_relevance *r,
                                  int64_t layer, int64_t *n_active)
{
    if (!r) return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "rel: NULL");
    if (layer < 0 || layer >= r->num_layers)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "layer: %lld is outside [0, %lld)",
                          (long long)layer, (long long)r->num_layers);
    if (!r->types)
        return todre_fail(ctx, TODRE_ERR_STATE,
                          "types: not set (call todre_relevance_set_types or _set_layout first)");
    *n_active = 0;
    for (int64_t b = 0; b < r->batch; b++) {
        r->active[b] = probe_state(r, b, layer) == 1;
        *n_active += r->active[b];
    }
    memset(r->sums, 0, (size_t)r->batch * TODRE_NUM_SUMS * sizeof *r->sums);
    return TODRE_OK;
}

/* Batch dimension of a rank-3 (batch 1) or rank-4 tensor. */
static todre_status check_batched(struct todre_context *ctx, const struct todre_relevance *r,
                                  const struct todre_array *t, const char *name, const char *dims)
{
    if (t->rank == 3) {
        if (r->batch != 1)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "%s: rank 3 needs batch 1; this handle has batch %lld (use [B, %s])",
                              name, (long long)r->batch, dims);
        return TODRE_OK;
    }
    if (t->rank == 4) {
        if (t->shape[0] != r->batch)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "%s: batch %lld, handle has %lld",
                              name, (long long)t->shape[0], (long long)r->batch);
        return TODRE_OK;
    }
    return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "%s: rank %d, expected [%s] or [B, %s]",
                      name, t->rank, dims, dims);
}

/* Keys [0, K) of an observation whose queries are positions [K - Q, K).
 * K below the types' length is a chunk of a chunked prefill: its sums wait
 * in `pending` until the chunk that ends at the last position. Chunks of a
 * layer must follow each other without a gap. Sets the types the backend
 * reads (the first K of each sequence, contiguous). */
static todre_status begin_chunk(struct todre_context *ctx, struct todre_relevance *r,
                                int64_t layer, const char *name, int64_t Q, int64_t K,
                                struct todre_relevance_common *c)
{
    if (K > r->K)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "%s: K = %lld keys but the token types cover %lld positions", name,
                          (long long)K, (long long)r->K);
    int64_t end = r->pending_end[layer];
    if (end > 0 && K - Q != end)
        return todre_fail(ctx, TODRE_ERR_STATE,
                          "%s: this chunk's queries start at position %lld, but the previous chunk "
                          "observed at layer %lld ended at %lld (observe chunks in order; "
                          "todre_relevance_reset between requests)",
                          name, (long long)(K - Q), (long long)layer, (long long)end);
    c->K = K;
    c->types = r->types;
    if (K < r->K && r->batch > 1) {
        for (int64_t b = 0; b < r->batch; b++)
            memcpy(r->chunk_types + b * K, r->types + b * r->K, (size_t)K);
        c->types = r->chunk_types;
    }
    return TODRE_OK;
}

/* Back half: ratios, decisions, stored observations. @p K: keys observed. */
static void finish_observe(struct todre_relevance *r, int64_t layer, int64_t K,
                           const struct todre_array *decisions)
{
    int final = K == r->K;
    int any = 0;
    for (int64_t b = 0; b < r->batch; b++) {
        todre_decision d;
        double *acc = r->pending + (b * r->num_layers + layer) * TODRE_NUM_SUMS;
        double *s = r->sums + b * TODRE_NUM_SUMS;
        if (!r->active[b]) {
            d = r->drop_layer[b] >= 0 ? TODRE_DECISION_ALREADY_DROPPED : TODRE_DECISION_NOT_PROBED;
            memset(acc, 0, TODRE_NUM_SUMS * sizeof *acc);
        } else if (!final) {
            for (int i = 0; i < TODRE_NUM_SUMS; i++) acc[i] += s[i];
            d = TODRE_DECISION_PENDING;
            any = 1;
        } else {
            for (int i = 0; i < TODRE_NUM_SUMS; i++) {
                s[i] += acc[i];
                acc[i] = 0;
            }
            double t2v = s[TODRE_SUM_T2V_DEN] > 0 ? s[TODRE_SUM_T2V_NUM] / s[TODRE_SUM_T2V_DEN] : 0;
            double v2t = s[TODRE_SUM_V2T_DEN] > 0 ? s[TODRE_SUM_V2T_NUM] / s[TODRE_SUM_V2T_DEN] : 0;
            size_t at = (size_t)(b * r->num_layers + layer);
            r->ratios[2 * at] = t2v;
            r->ratios[2 * at + 1] = v2t;
            r->observed[at] = 1;
            if (t2v < r->p.tau && v2t < r->p.tau) {
                r->drop_layer[b] = layer;
                d = TODRE_DECISION_DROP;
            } else {
                d = TODRE_DECISION_KEEP;
            }
        }
        if (decisions) ((int32_t *)decisions->data)[b * decisions->strides[0]] = (int32_t)d;
    }
    r->pending_end[layer] = any ? K : 0;
}

/* K and types: begin_chunk(). */
static void fill_common(struct todre_relevance *r, int64_t H, int64_t Q,
                        struct todre_relevance_common *c)
{
    c->B = r->batch;
    c->H = H;
    c->Q = Q;
    c->active = r->active;
    c->sums = r->sums;
}

static todre_status run_backend(struct todre_context *ctx, todre_status st, const char *msg)
{
    return st == TODRE_OK ? st : todre_fail_diag(ctx, st, "relevance", msg);
}

/* decisions: NULL or host int32 [B] (any stride); dec->data NULL for NULL. */
static todre_status check_decisions(struct todre_context *ctx, const struct todre_relevance *r,
                                    const DLTensor *decisions, struct todre_array *dec)
{
    dec->data = NULL;
    if (!decisions) return TODRE_OK;
    todre_status st = todre_array_map_out(ctx, decisions, "decisions", TODRE_DT(TODRE_DTYPE_I32),
                                      TODRE_WHERE_HOST, dec);
    if (st != TODRE_OK) return st;
    if (dec->rank != 1 || dec->shape[0] != r->batch)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "decisions: shape must be [B = %lld]",
                          (long long)r->batch);
    return TODRE_OK;
}

todre_status todre_relevance_observe_probs(todre_context *ctx, todre_relevance *r, int64_t layer,
                                           const DLTensor *attn_dl, const DLTensor *decisions)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    int64_t n_active;
    todre_status st = begin_observe(ctx, r, layer, &n_active);
    if (st != TODRE_OK) return st;
    struct todre_array attn_a, dec;
    const struct todre_array *attn = &attn_a;
    st = todre_array_map(ctx, attn_dl, "attn", TODRE_DT_FLOAT, TODRE_WHERE_CONTEXT, &attn_a);
    if (st != TODRE_OK) return st;
    if ((st = check_batched(ctx, r, attn, "attn", "H, Q, K")) != TODRE_OK) return st;
    if ((st = check_decisions(ctx, r, decisions, &dec)) != TODRE_OK) return st;
    int o = attn->rank - 3;
    int64_t H = attn->shape[o], Q = attn->shape[o + 1], K = attn->shape[o + 2];
    if (H < 1 || Q < 1 || Q > K)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "attn: shape [H = %lld, Q = %lld, K = %lld] needs H >= 1, 1 <= Q <= K",
                          (long long)H, (long long)Q, (long long)K);
    /* B x H x Q x K is the element count todre_array_map checked */
    if (H > TODRE_MAX_HEADS)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "attn: H = %lld heads, at most %lld",
                          (long long)H, (long long)TODRE_MAX_HEADS);
    struct todre_relevance_probs_job job;
    memset(&job, 0, sizeof job);
    if ((st = begin_chunk(ctx, r, layer, "attn", Q, K, &job.c)) != TODRE_OK) return st;
    if (n_active > 0) {
        fill_common(r, H, Q, &job.c);
        job.attn = attn->data;
        job.dtype = attn->dtype;
        job.s_b = o ? attn->strides[0] : 0;
        job.s_h = attn->strides[o];
        job.s_q = attn->strides[o + 1];
        job.s_k = attn->strides[o + 2];
        char msg[TODRE_MSG_CAP] = "";
        struct todre_diag diag = {msg, sizeof msg};
        st = run_backend(ctx, ctx->be->ops->relevance_probs(ctx->be, &job, &diag), msg);
        if (st != TODRE_OK) return st;
    }
    finish_observe(r, layer, K, dec.data ? &dec : NULL);
    return TODRE_OK;
}

todre_status todre_relevance_observe_qk(todre_context *ctx, todre_relevance *r, int64_t layer,
                                        const DLTensor *q_dl, const DLTensor *k_dl, double scale,
                                        const DLTensor *decisions)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    int64_t n_active;
    todre_status st = begin_observe(ctx, r, layer, &n_active);
    if (st != TODRE_OK) return st;
    struct todre_array q_a, k_a, dec;
    const struct todre_array *q = &q_a, *k = &k_a;
    if ((st = todre_array_map(ctx, q_dl, "q", TODRE_DT_FLOAT, TODRE_WHERE_CONTEXT, &q_a)) !=
            TODRE_OK ||
        (st = todre_array_map(ctx, k_dl, "k", TODRE_DT_FLOAT, TODRE_WHERE_CONTEXT, &k_a)) !=
            TODRE_OK)
        return st;
    if ((st = check_batched(ctx, r, q, "q", "H, Q, dh")) != TODRE_OK ||
        (st = check_batched(ctx, r, k, "k", "H_kv, K, dh")) != TODRE_OK)
        return st;
    if ((st = check_decisions(ctx, r, decisions, &dec)) != TODRE_OK) return st;
    if (q->rank != k->rank)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "k: rank %d differs from q's rank %d",
                          k->rank, q->rank);
    if (q->dtype != k->dtype)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "k: dtype %s differs from q's %s",
                          todre_dtype_name(k->dtype), todre_dtype_name(q->dtype));
    int o = q->rank - 3;
    int64_t H = q->shape[o], Q = q->shape[o + 1], dh = q->shape[o + 2];
    int64_t Hkv = k->shape[o], K = k->shape[o + 1];
    if (k->shape[o + 2] != dh)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "k: head dim %lld differs from q's %lld",
                          (long long)k->shape[o + 2], (long long)dh);
    if (H < 1 || dh < 1 || Hkv < 1 || H % Hkv != 0)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "q: %lld query heads is not a positive multiple of k's %lld key heads",
                          (long long)H, (long long)Hkv);
    if (Q < 1 || Q > K)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "q: Q = %lld queries, need 1 <= Q <= K = %lld",
                          (long long)Q, (long long)K);
    if (H > TODRE_MAX_HEADS)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "q: H = %lld heads, at most %lld",
                          (long long)H, (long long)TODRE_MAX_HEADS);
    /* The attention entries the backend scores: B x H x Q x K, as for
     * observe_probs (H_kv <= H, so k's heads are bounded too). */
    int64_t entries;
    if (!todre_mul_i64(r->batch, H, &entries) || !todre_mul_i64(entries, Q, &entries) ||
        !todre_mul_i64(entries, K, &entries))
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "k: B x H x Q x K = %lld x %lld x %lld x %lld attention entries "
                          "overflow int64",
                          (long long)r->batch, (long long)H, (long long)Q, (long long)K);
    if (scale == 0.0) scale = 1.0 / sqrt((double)dh);
    if (!(scale > 0.0) || !isfinite(scale))
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "scale: %g, must be > 0 and finite (or 0)",
                          scale);
    /* The backends score in float32: a larger scale would round to Inf and
     * turn every product, even 0, into Inf or NaN. */
    if (scale > FLT_MAX)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "scale: %g is above FLT_MAX = %g (scores are computed in float32)",
                          scale, (double)FLT_MAX);
    /* ... and a smaller one than FLT_MIN would round to a subnormal or to 0,
     * changing every score silently (found by fuzz_relevance: scale 1e-75
     * with |q . k| near 1e75 gave uniform attention and wrong ratios). */
    if (scale < FLT_MIN)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "scale: %g is below FLT_MIN = %g (scores are computed in float32)",
                          scale, (double)FLT_MIN);
    struct todre_relevance_qk_job job;
    memset(&job, 0, sizeof job);
    if ((st = begin_chunk(ctx, r, layer, "k", Q, K, &job.c)) != TODRE_OK) return st;
    if (n_active > 0) {
        fill_common(r, H, Q, &job.c);
        job.H_kv = Hkv;
        job.dh = dh;
        job.q = q->data;
        job.k = k->data;
        job.dtype = q->dtype;
        job.qs_b = o ? q->strides[0] : 0;
        job.qs_h = q->strides[o];
        job.qs_q = q->strides[o + 1];
        job.qs_d = q->strides[o + 2];
        job.ks_b = o ? k->strides[0] : 0;
        job.ks_h = k->strides[o];
        job.ks_k = k->strides[o + 1];
        job.ks_d = k->strides[o + 2];
        job.scale = scale;
        char msg[TODRE_MSG_CAP] = "";
        struct todre_diag diag = {msg, sizeof msg};
        st = run_backend(ctx, ctx->be->ops->relevance_qk(ctx->be, &job, &diag), msg);
        if (st != TODRE_OK) return st;
    }
    finish_observe(r, layer, K, dec.data ? &dec : NULL);
    return TODRE_OK;
}

todre_status todre_relevance_ratios(const todre_relevance *r, int64_t seq, int64_t layer,
                                    double *alpha_t2v, double *alpha_v2t)
{
    todre_clear_error(NULL);
    if (!r) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "rel: NULL");
    if (!alpha_t2v) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "alpha_t2v: NULL");
    if (!alpha_v2t) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "alpha_v2t: NULL");
    todre_status st = check_seq_layer(r, seq, layer);
    if (st != TODRE_OK) return st;
    size_t at = (size_t)(seq * r->num_layers + layer);
    if (!r->observed[at])
        return todre_fail(NULL, TODRE_ERR_STATE,
                          r->pending_end[layer] > 0
                              ? "layer: %lld has pending chunks for sequence %lld (its ratios "
                                "exist once the chunk that ends at the last position is observed)"
                              : "layer: %lld was not probed for sequence %lld",
                          (long long)layer, (long long)seq);
    *alpha_t2v = r->ratios[2 * at];
    *alpha_v2t = r->ratios[2 * at + 1];
    return TODRE_OK;
}

todre_status todre_relevance_drop_layer(const todre_relevance *r, int64_t seq, int64_t *layer)
{
    todre_clear_error(NULL);
    if (!r) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "rel: NULL");
    if (!layer) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "layer: NULL");
    todre_status st = check_seq_layer(r, seq, 0);
    if (st != TODRE_OK) return st;
    *layer = r->drop_layer[seq];
    return TODRE_OK;
}

todre_status todre_relevance_keep_positions(const todre_relevance *r, int64_t seq,
                                            const DLTensor *out, int64_t *count)
{
    todre_clear_error(NULL);
    if (!r) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "rel: NULL");
    if (!count) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "count: NULL");
    todre_status st = check_seq_layer(r, seq, 0);
    if (st != TODRE_OK) return st;
    if (!r->types)
        return todre_fail(NULL, TODRE_ERR_STATE,
                          "types: not set (call todre_relevance_set_types or _set_layout first)");
    const uint8_t *t = r->types + seq * r->K;
    int64_t n = 0;
    for (int64_t j = 0; j < r->K; j++) n += t[j] != TODRE_TOKEN_VISUAL;
    struct todre_array a;
    if ((st = write_host_list("out", out, n, count, &a)) != TODRE_OK || !out) return st;
    int64_t *dst = a.data, w = 0;
    for (int64_t j = 0; j < r->K; j++)
        if (t[j] != TODRE_TOKEN_VISUAL) dst[(w++) * a.strides[0]] = j;
    return TODRE_OK;
}

todre_status todre_relevance_signature(const todre_relevance *r, char *buf, size_t size,
                                       size_t *len)
{
    todre_clear_error(NULL);
    if (!r) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "rel: NULL");
    /* at most 2^20 layers, but a list that long is no signature a cache key
     * carries: up to 512 listed layers */
    int64_t probes[512], n = 0;
    if (r->p.schedule == TODRE_PROBE_UNTIL_DROP) {
        probes[n++] = r->first_probe;
    } else {
        for (int64_t l = 0; l < r->num_layers; l++) {
            if (!r->probe[l]) continue;
            if (n == 512)
                return todre_fail(NULL, TODRE_ERR_UNSUPPORTED,
                                  "rel: more than 512 probe layers have no signature");
            probes[n++] = l;
        }
    }
    return todre_relevance_signature_text(&r->p, probes, n, buf, size, len);
}
