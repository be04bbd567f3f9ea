/* Overflow-proof validation: every size, span and offset the
 * library computes from caller input is checked, so that hostile values are
 * rejected with TODRE_ERR_INVALID_ARGUMENT and a message that starts with the
 * argument's name -- never a crash, never TODRE_OK -- and out-pointers and
 * output arrays are left untouched on failure.
 *
 * Classes, each for every array argument of every call (the table `calls`):
 *  - strides near 2^61 and 2^62 (and INT64_MAX) on a small buffer, on every
 *    dimension of extent > 1, and a stride just past the 2^56-byte extent
 *    limit;
 *  - shapes whose element count overflows int64;
 *  - byte_offset just past 2^56 and near UINT64_MAX;
 *  - a data pointer whose extent wraps around the address space.
 * Then: todre_select_keep_count() at n near INT64_MAX (ratios 1.0, 0.5, ...),
 * batch offsets and keep counts whose sums overflow, the stage-2 limits
 * (heads, B x H x Q x K, layout counts, num_layers / batch), and the
 * out-pointer rule for every call that has an out-pointer. */
#include "todre_test.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define P61 ((int64_t)1 << 61)
#define P62 ((int64_t)1 << 62)
#define LIMIT ((int64_t)1 << 56) /* the documented byte extent of one array */

/* Assert a failure with INVALID_ARGUMENT whose message starts with "name:". */
#define assert_rejected(ctx, call, name) \
    assert_rejected_at((ctx), (call), (name), #call, __FILE__, __LINE__)
static void assert_rejected_at(const todre_context *ctx, todre_status got, const char *name,
                               const char *expr, const char *file, int line)
{
    char want[64];
    snprintf(want, sizeof want, "%s:", name);
    tt_assert_fails_at(ctx, got, TODRE_ERR_INVALID_ARGUMENT, want, expr, file, line);
    const char *msg = todre_last_error();
    if (strncmp(msg, want, strlen(want)) != 0) {
        print_error("%s\n  message \"%s\" does not start with \"%s\"\n", expr, msg, want);
        _fail(file, line);
    }
}

/* ---- the calls and their array arguments ---------------------------------- */

enum { N = 8, D = 4, KEEP = 3, L = 1, H = 2, HKV = 1, QK = 6, DH = 4 };
static const uint8_t types6[QK] = {0, 1, 1, 1, 2, 2};

#define SENT64 ((int64_t)-7)
#define SENT32 ((int32_t)-7)
#define SENTF (-7.0f)
#define MAXSLOT 6

struct env {
    todre_context *ctx;
    todre_select_config *cfg;   /* MAX_SUM, AUTO pivot (CLS with a cls map), keep 3, BOTH */
    todre_select_config *cfg_b; /* the same with the ratio budget 0.4 (batch: 2 + 1) */
    todre_relevance *rel1, *rel2; /* 1 layer; batch 1 and 2 */
    float emb[N * D];
    uint16_t emb16[N * D];
    float cls[N];
    int64_t offsets[3], keep[2], layers[2];
    uint8_t types2[2 * QK];
    float attn[2 * H * QK * QK];
    float q[2 * H * QK * DH], k[2 * HKV * QK * DH];
    float src[6];
    /* outputs, filled with sentinels before each call */
    int64_t out[2 * KEEP], out_offsets[3], list[QK];
    int32_t decisions[2];
    float dst[6];
    int64_t count;
};

/* One call: its arguments' names and valid tensors, and how to run it with
 * argument `slot` replaced by `bad` (any slot, or -1 for none). */
struct call {
    const char *what;
    int nslots;
    const char *slot[MAXSLOT];
    int host_only; /* messages go to the thread only (no context) */
    /* fill a[i] with the valid tensor of every slot */
    void (*valid)(struct env *e, tt_array *a);
    todre_status (*run)(struct env *e, const DLTensor *const *args);
};

static const DLTensor *arr(tt_array *a, void *data, todre_dtype dt, int ndim, int64_t s0,
                           int64_t s1, int64_t s2, int64_t s3)
{
    int64_t shape[4] = {s0, s1, s2, s3};
    return tt_array_init(a, data, dt, ndim, shape, NULL);
}

/* select: f32, f16 and bf16 embeddings, a flat or a [frames, tokens] CLS map. */
static void v_select(struct env *e, tt_array *a)
{
    arr(&a[0], e->emb, TODRE_DTYPE_F32, 2, N, D, 0, 0);
    arr(&a[1], e->cls, TODRE_DTYPE_F32, 1, N, 0, 0, 0);
    arr(&a[2], e->out, TODRE_DTYPE_I64, 2, 2, KEEP, 0, 0);
}
static void v_select_f16(struct env *e, tt_array *a)
{
    v_select(e, a);
    arr(&a[0], e->emb16, TODRE_DTYPE_F16, 2, N, D, 0, 0);
    arr(&a[1], e->cls, TODRE_DTYPE_F32, 2, 2, N / 2, 0, 0); /* video: [frames, tokens] */
}
static void v_select_bf16(struct env *e, tt_array *a)
{
    v_select(e, a);
    arr(&a[0], e->emb16, TODRE_DTYPE_BF16, 2, N, D, 0, 0);
}
static todre_status r_select(struct env *e, const DLTensor *const *x)
{
    return todre_select(e->ctx, e->cfg, x[0], x[1], x[2]);
}

static void v_batch(struct env *e, tt_array *a)
{
    arr(&a[0], e->emb, TODRE_DTYPE_F32, 2, N, D, 0, 0);
    arr(&a[1], e->cls, TODRE_DTYPE_F32, 1, N, 0, 0, 0);
    arr(&a[2], e->offsets, TODRE_DTYPE_I64, 1, 3, 0, 0, 0);
    arr(&a[3], e->keep, TODRE_DTYPE_I64, 1, 2, 0, 0, 0);
    arr(&a[4], e->out, TODRE_DTYPE_I64, 2, 2, KEEP, 0, 0);
    arr(&a[5], e->out_offsets, TODRE_DTYPE_I64, 1, 3, 0, 0, 0);
}
static todre_status r_batch(struct env *e, const DLTensor *const *x)
{
    return todre_select_batch(e->ctx, e->cfg, x[0], x[1], x[2], x[3], x[4], x[5]);
}

static void v_layers(struct env *e, tt_array *a)
{
    arr(&a[0], e->layers, TODRE_DTYPE_I64, 1, 2, 0, 0, 0);
}
static todre_status r_set_layers(struct env *e, const DLTensor *const *x)
{
    return todre_relevance_set_probe_layers(e->rel1, x[0]);
}

static void v_list(struct env *e, tt_array *a)
{
    arr(&a[0], e->list, TODRE_DTYPE_I64, 1, QK, 0, 0, 0);
}
static todre_status r_get_layers(struct env *e, const DLTensor *const *x)
{
    return todre_relevance_get_probe_layers(e->rel1, x[0], &e->count);
}
static todre_status r_keep_positions(struct env *e, const DLTensor *const *x)
{
    return todre_relevance_keep_positions(e->rel1, 0, x[0], &e->count);
}

static void v_types(struct env *e, tt_array *a)
{
    arr(&a[0], e->types2, TODRE_DTYPE_U8, 1, QK, 0, 0, 0);
}
static void v_types2(struct env *e, tt_array *a)
{
    arr(&a[0], e->types2, TODRE_DTYPE_U8, 2, 2, QK, 0, 0);
}
static todre_status r_types(struct env *e, const DLTensor *const *x)
{
    return todre_relevance_set_types(e->rel1, x[0]);
}
static todre_status r_types2(struct env *e, const DLTensor *const *x)
{
    return todre_relevance_set_types(e->rel2, x[0]);
}

static void v_probs(struct env *e, tt_array *a)
{
    arr(&a[0], e->attn, TODRE_DTYPE_F32, 3, H, QK, QK, 0);
    arr(&a[1], e->decisions, TODRE_DTYPE_I32, 1, 1, 0, 0, 0);
}
static void v_probs4(struct env *e, tt_array *a)
{
    arr(&a[0], e->attn, TODRE_DTYPE_F32, 4, 2, H, QK, QK);
    arr(&a[1], e->decisions, TODRE_DTYPE_I32, 1, 2, 0, 0, 0);
}
static todre_status r_probs(struct env *e, const DLTensor *const *x)
{
    return todre_relevance_observe_probs(e->ctx, e->rel1, 0, x[0], x[1]);
}
static todre_status r_probs4(struct env *e, const DLTensor *const *x)
{
    return todre_relevance_observe_probs(e->ctx, e->rel2, 0, x[0], x[1]);
}

static void v_qk(struct env *e, tt_array *a)
{
    arr(&a[0], e->q, TODRE_DTYPE_F32, 3, H, QK, DH, 0);
    arr(&a[1], e->k, TODRE_DTYPE_F32, 3, HKV, QK, DH, 0);
    arr(&a[2], e->decisions, TODRE_DTYPE_I32, 1, 1, 0, 0, 0);
}
static void v_qk4(struct env *e, tt_array *a)
{
    arr(&a[0], e->q, TODRE_DTYPE_F32, 4, 2, H, QK, DH);
    arr(&a[1], e->k, TODRE_DTYPE_F32, 4, 2, HKV, QK, DH);
    arr(&a[2], e->decisions, TODRE_DTYPE_I32, 1, 2, 0, 0, 0);
}
static todre_status r_qk(struct env *e, const DLTensor *const *x)
{
    return todre_relevance_observe_qk(e->ctx, e->rel1, 0, x[0], x[1], 0.0, x[2]);
}
static todre_status r_qk4(struct env *e, const DLTensor *const *x)
{
    return todre_relevance_observe_qk(e->ctx, e->rel2, 0, x[0], x[1], 0.0, x[2]);
}

static void v_copy(struct env *e, tt_array *a)
{
    arr(&a[0], e->dst, TODRE_DTYPE_F32, 2, 2, 3, 0, 0);
    arr(&a[1], e->src, TODRE_DTYPE_F32, 2, 2, 3, 0, 0);
}
static todre_status r_copy(struct env *e, const DLTensor *const *x)
{
    return todre_context_copy(e->ctx, x[0], x[1]);
}

static const struct call calls[] = {
    {"todre_select f32", 3, {"embeddings", "cls", "out"}, 0, v_select, r_select},
    {"todre_select f16, video cls", 3, {"embeddings", "cls", "out"}, 0, v_select_f16, r_select},
    {"todre_select bf16", 3, {"embeddings", "cls", "out"}, 0, v_select_bf16, r_select},
    {"todre_select_batch", 6, {"embeddings", "cls", "offsets", "keep", "out", "out_offsets"}, 0,
     v_batch, r_batch},
    {"todre_relevance_set_probe_layers", 1, {"layers"}, 1, v_layers, r_set_layers},
    {"todre_relevance_get_probe_layers", 1, {"out"}, 1, v_list, r_get_layers},
    {"todre_relevance_keep_positions", 1, {"out"}, 1, v_list, r_keep_positions},
    {"todre_relevance_set_types [K]", 1, {"types"}, 1, v_types, r_types},
    {"todre_relevance_set_types [B, K]", 1, {"types"}, 1, v_types2, r_types2},
    {"todre_relevance_observe_probs", 2, {"attn", "decisions"}, 0, v_probs, r_probs},
    {"todre_relevance_observe_probs [B, ...]", 2, {"attn", "decisions"}, 0, v_probs4, r_probs4},
    {"todre_relevance_observe_qk", 3, {"q", "k", "decisions"}, 0, v_qk, r_qk},
    {"todre_relevance_observe_qk [B, ...]", 3, {"q", "k", "decisions"}, 0, v_qk4, r_qk4},
    {"todre_context_copy", 2, {"dst", "src"}, 0, v_copy, r_copy},
};
#define NCALLS (sizeof calls / sizeof calls[0])

/* ---- fixture --------------------------------------------------------------- */

static void fill_outputs(struct env *e)
{
    for (int i = 0; i < 2 * KEEP; i++) e->out[i] = SENT64;
    for (int i = 0; i < 3; i++) e->out_offsets[i] = SENT64;
    for (int i = 0; i < QK; i++) e->list[i] = SENT64;
    e->decisions[0] = e->decisions[1] = SENT32;
    for (int i = 0; i < 6; i++) e->dst[i] = SENTF;
    e->count = SENT64;
}

static void assert_outputs_untouched(const struct env *e, const char *what)
{
    int ok = e->count == SENT64 && e->decisions[0] == SENT32 && e->decisions[1] == SENT32;
    for (int i = 0; i < 2 * KEEP; i++) ok &= e->out[i] == SENT64;
    for (int i = 0; i < 3; i++) ok &= e->out_offsets[i] == SENT64;
    for (int i = 0; i < QK; i++) ok &= e->list[i] == SENT64;
    for (int i = 0; i < 6; i++) ok &= e->dst[i] == SENTF;
    if (!ok) fail_msg("%s: an output or out-pointer was written by a failed call", what);
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    if (!e) return -1;
    e->ctx = tt_cpu_context();
    e->cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, KEEP, TODRE_ORDER_BOTH);
    e->cfg_b = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, 0, TODRE_ORDER_BOTH);
    tt_assert_ok(todre_select_config_set_double(e->cfg_b, TODRE_SELECT_RATIO, 0.4));
    tt_fill_clustered(e->emb, N, D, D, 3, 0.2, 11);
    tt_to_f16(e->emb16, e->emb, N * D);
    for (int i = 0; i < N; i++) e->cls[i] = (float)(i % 5) / 5.0f;
    e->offsets[0] = 0, e->offsets[1] = 5, e->offsets[2] = N;
    e->keep[0] = 2, e->keep[1] = 1;
    e->layers[0] = 0, e->layers[1] = 0;
    memcpy(e->types2, types6, QK);
    memcpy(e->types2 + QK, types6, QK);
    for (int b = 0; b < 2 * H; b++)
        for (int i = 0; i < QK; i++)
            for (int j = 0; j < QK; j++)
                e->attn[(b * QK + i) * QK + j] = j <= i ? 1.0f / (float)(i + 1) : 0.0f;
    tt_rng r = {5};
    for (int i = 0; i < 2 * H * QK * DH; i++) e->q[i] = (float)tt_rng_normal(&r);
    for (int i = 0; i < 2 * HKV * QK * DH; i++) e->k[i] = (float)tt_rng_normal(&r);
    for (int i = 0; i < 6; i++) e->src[i] = (float)i;
    tt_assert_ok(todre_relevance_create(L, 1, &e->rel1));
    tt_assert_ok(todre_relevance_create(L, 2, &e->rel2));
    tt_assert_ok(todre_relevance_set_layout(e->rel1, 1, 3, 2));
    tt_assert_ok(todre_relevance_set_layout(e->rel2, 1, 3, 2));
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    todre_relevance_destroy(e->rel1);
    todre_relevance_destroy(e->rel2);
    todre_select_config_destroy(e->cfg);
    todre_select_config_destroy(e->cfg_b);
    todre_context_destroy(e->ctx);
    free(e);
    return 0;
}

/* ---- the generic driver ------------------------------------------------------ */

/* A fresh copy of a valid tensor with explicit strides (compact ones when it
 * had none), so that one stride can be replaced. */
static const DLTensor *explicit_copy(tt_array *dst, const tt_array *src)
{
    int64_t strides[TODRE_MAX_RANK], c = 1;
    const DLTensor *t = &src->dl;
    for (int i = t->ndim - 1; i >= 0; i--) {
        strides[i] = t->strides ? t->strides[i] : c;
        c *= t->shape[i];
    }
    tt_array_init(dst, t->data, TODRE_DTYPE_F32, t->ndim, t->shape, strides);
    dst->dl.dtype = t->dtype;
    return &dst->dl;
}

static size_t dl_esize(const DLTensor *t) { return (size_t)t->dtype.bits / 8; }

/* Bytes from data to one past the last element of a valid (small) tensor. */
static uintptr_t dl_extent(const DLTensor *t)
{
    int64_t last = 0, c = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        last += (t->shape[i] - 1) * (t->strides ? t->strides[i] : c);
        c *= t->shape[i];
    }
    return (uintptr_t)(last + 1) * dl_esize(t);
}

/* Run call @p c with slot @p s replaced by @p bad: INVALID_ARGUMENT naming
 * the slot, nothing written. */
static void expect_rejected(struct env *e, const struct call *c, tt_array *valid, int s,
                            const DLTensor *bad, const char *how)
{
    const DLTensor *args[MAXSLOT];
    for (int i = 0; i < c->nslots; i++) args[i] = &valid[i].dl;
    args[s] = bad;
    fill_outputs(e);
    todre_status st = c->run(e, args);
    char want[64];
    snprintf(want, sizeof want, "%s:", c->slot[s]);
    const char *msg = todre_last_error();
    if (st != TODRE_ERR_INVALID_ARGUMENT || strncmp(msg, want, strlen(want)) != 0 ||
        (!c->host_only && strncmp(todre_context_last_error(e->ctx), want, strlen(want)) != 0))
        fail_msg("%s, %s with %s: returned %s \"%s\", expected INVALID_ARGUMENT naming %s",
                 c->what, c->slot[s], how, todre_status_string(st), msg, c->slot[s]);
    char what[160];
    snprintf(what, sizeof what, "%s, %s with %s", c->what, c->slot[s], how);
    assert_outputs_untouched(e, what);
}

static void run_valid(struct env *e, const struct call *c, tt_array *valid)
{
    const DLTensor *args[MAXSLOT];
    for (int i = 0; i < c->nslots; i++) args[i] = &valid[i].dl;
    fill_outputs(e);
    todre_status st = c->run(e, args);
    if (st != TODRE_OK)
        fail_msg("%s: the valid call returned %s: %s", c->what, todre_status_string(st),
                 todre_last_error());
}

static const int64_t huge_strides[] = {P61 - 1, P61, P61 + 1, P62 - 1, P62, P62 + 1,
                                       INT64_MAX - 1, INT64_MAX};
static const uint64_t huge_offsets[] = {(uint64_t)LIMIT + 1, (uint64_t)1 << 62,
                                        (uint64_t)1 << 63, UINT64_MAX - 7, UINT64_MAX};

static void hostile_slot(struct env *e, const struct call *c, tt_array *valid, int s)
{
    const DLTensor *v = &valid[s].dl;
    tt_array bad;
    char how[96];
    /* huge strides on every dimension that is read more than once */
    for (int i = 0; i < v->ndim; i++) {
        if (v->shape[i] < 2) continue;
        for (size_t j = 0; j < sizeof huge_strides / sizeof huge_strides[0]; j++) {
            explicit_copy(&bad, &valid[s]);
            bad.strides[i] = huge_strides[j];
            snprintf(how, sizeof how, "strides[%d] = %lld", i, (long long)huge_strides[j]);
            expect_rejected(e, c, valid, s, &bad.dl, how);
        }
        /* just past the extent limit */
        explicit_copy(&bad, &valid[s]);
        bad.strides[i] = LIMIT / (int64_t)dl_esize(v) / (v->shape[i] - 1) + 1;
        snprintf(how, sizeof how, "strides[%d] = %lld (just past 2^56 bytes)", i,
                 (long long)bad.strides[i]);
        expect_rejected(e, c, valid, s, &bad.dl, how);
    }
    /* an element count that overflows: [2^32, 2^32, ...] broadcast (all
     * strides 0, so the extent alone would pass); rank 1: [INT64_MAX] */
    explicit_copy(&bad, &valid[s]);
    if (v->ndim >= 2) {
        for (int i = 0; i < v->ndim; i++) bad.strides[i] = 0;
        bad.shape[0] = bad.shape[1] = (int64_t)1 << 32;
        snprintf(how, sizeof how, "shape [2^32, 2^32, ...] (count overflows)");
    } else {
        bad.shape[0] = INT64_MAX;
        snprintf(how, sizeof how, "shape [INT64_MAX]");
    }
    expect_rejected(e, c, valid, s, &bad.dl, how);
    /* byte_offset */
    for (size_t j = 0; j < sizeof huge_offsets / sizeof huge_offsets[0]; j++) {
        explicit_copy(&bad, &valid[s]);
        bad.dl.byte_offset = huge_offsets[j];
        snprintf(how, sizeof how, "byte_offset %llu", (unsigned long long)huge_offsets[j]);
        expect_rejected(e, c, valid, s, &bad.dl, how);
    }
    /* a data pointer whose extent wraps around the address space by one
     * byte (never read) */
    explicit_copy(&bad, &valid[s]);
    bad.dl.data = (void *)(UINTPTR_MAX - dl_extent(v) + 2);
    expect_rejected(e, c, valid, s, &bad.dl, "data at UINTPTR_MAX + 2 - extent");
    explicit_copy(&bad, &valid[s]);
    bad.dl.byte_offset = 64;
    bad.dl.data = (void *)(UINTPTR_MAX - 63);
    expect_rejected(e, c, valid, s, &bad.dl, "data + byte_offset past UINTPTR_MAX");
}

/* Every class above, for every array argument of every call; each call is
 * run once valid first (so that a rejection is the argument's doing), and
 * once valid after (a rejected call leaves the handles usable). */
static void test_every_array_argument(void **state)
{
    struct env *e = *state;
    int cases = 0;
    for (size_t ci = 0; ci < NCALLS; ci++) {
        const struct call *c = &calls[ci];
        tt_array valid[MAXSLOT];
        c->valid(e, valid);
        run_valid(e, c, valid);
        for (int s = 0; s < c->nslots; s++) {
            hostile_slot(e, c, valid, s);
            cases++;
        }
        run_valid(e, c, valid);
    }
    assert_int_equal(cases, 32); /* every slot of the table was exercised */
}

/* ---- todre_select_keep_count --------------------------------------------------- */

static int64_t keep_count(todre_select_config *cfg, int64_t n)
{
    int64_t k = SENT64;
    tt_assert_ok(todre_select_keep_count(cfg, n, &k));
    assert_true(k >= 1 && k <= n);
    return k;
}

static void test_keep_count(void **state)
{
    (void)state;
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, 0,
                                         TODRE_ORDER_POSITION);
    const int64_t ns[] = {1, 2, 3, ((int64_t)1 << 53) + 1, P62, P62 + 1, INT64_MAX - 1024,
                          INT64_MAX - 513, INT64_MAX - 1, INT64_MAX};
    const double ratios[] = {1.0, nextafter(1.0, 0.0), 0.999999, 0.5, 0.1, 1e-300,
                             DBL_MIN, 4.9e-324};
    for (size_t r = 0; r < sizeof ratios / sizeof ratios[0]; r++) {
        tt_assert_ok(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, ratios[r]));
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) keep_count(cfg, ns[i]);
    }
    /* exact values at the edges */
    tt_assert_ok(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 1.0));
    assert_int_equal(keep_count(cfg, INT64_MAX), INT64_MAX);
    assert_int_equal(keep_count(cfg, INT64_MAX - 1), INT64_MAX - 1);
    assert_int_equal(keep_count(cfg, P62 + 1), P62 + 1);
    tt_assert_ok(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 0.5));
    assert_int_equal(keep_count(cfg, INT64_MAX), P62);      /* floor((2^63 - 1) / 2 + 0.5) */
    assert_int_equal(keep_count(cfg, P62), (int64_t)1 << 61);
    assert_int_equal(keep_count(cfg, 3), 2);                /* 1.5 + 0.5 */
    tt_assert_ok(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 4.9e-324));
    assert_int_equal(keep_count(cfg, INT64_MAX), 1);
    /* an explicit keep count: up to n, above n rejected with k untouched */
    tt_cfg_set(cfg, TODRE_SELECT_KEEP, INT64_MAX);
    assert_int_equal(keep_count(cfg, INT64_MAX), INT64_MAX);
    int64_t k = SENT64;
    assert_rejected(NULL, todre_select_keep_count(cfg, INT64_MAX - 1, &k), "keep");
    assert_int_equal(k, SENT64);
    /* n outside [1, INT64_MAX] */
    const int64_t bad_n[] = {0, -1, INT64_MIN};
    for (size_t i = 0; i < 3; i++) {
        assert_rejected(NULL, todre_select_keep_count(cfg, bad_n[i], &k), "n");
        assert_int_equal(k, SENT64);
    }
    /* the keep parameter itself: [0, INT64_MAX]; a rejected value changes nothing */
    assert_rejected(NULL, todre_select_config_set_int(cfg, TODRE_SELECT_KEEP, -1), "value");
    assert_int_equal(tt_cfg_get(cfg, TODRE_SELECT_KEEP), INT64_MAX);
    assert_rejected(NULL, todre_select_config_set_int(cfg, TODRE_SELECT_KEEP, INT64_MIN),
                    "value");
    assert_rejected(NULL, todre_select_config_set_int(cfg, TODRE_SELECT_PIVOT_LO, INT64_MAX),
                    "value");
    assert_rejected(NULL, todre_select_config_set_int(cfg, TODRE_SELECT_PIVOT_HI, INT64_MIN),
                    "value");
    todre_select_config_destroy(cfg);
}

/* ---- stage 1: batch tables and pivot ranges ----------------------------------- */

static void test_batch_sums(void **state)
{
    struct env *e = *state;
    tt_array a[6];
    v_batch(e, a);
    const DLTensor *emb = &a[0].dl, *offs = &a[2].dl, *keep = &a[3].dl, *out = &a[4].dl;
    const DLTensor *oo = &a[5].dl;
    /* keep counts whose sum overflows int64 (each one is above its set's n) */
    const int64_t keeps[][2] = {{INT64_MAX, INT64_MAX}, {INT64_MAX, 1}, {1, INT64_MAX},
                                {P62, P62}, {INT64_MIN, 1}, {2, INT64_MIN}, {0, 1}};
    for (size_t i = 0; i < sizeof keeps / sizeof keeps[0]; i++) {
        e->keep[0] = keeps[i][0];
        e->keep[1] = keeps[i][1];
        fill_outputs(e);
        assert_rejected(e->ctx, todre_select_batch(e->ctx, e->cfg, emb, NULL, offs, keep, out, oo),
                        "keep");
        assert_outputs_untouched(e, "keep sums");
    }
    e->keep[0] = 2, e->keep[1] = 1;
    /* offsets near INT64_MAX / INT64_MIN: never subtracted before they are known
     * to increase from 0 to N */
    const int64_t offsets[][3] = {{0, INT64_MAX, N},    {0, 5, INT64_MAX}, {0, INT64_MIN, N},
                                  {INT64_MIN, 5, N},    {INT64_MAX, 5, N}, {0, P62, INT64_MAX},
                                  {0, INT64_MAX, INT64_MAX}, {-5, 0, N}};
    for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
        memcpy(e->offsets, offsets[i], sizeof e->offsets);
        fill_outputs(e);
        assert_rejected(e->ctx, todre_select_batch(e->ctx, e->cfg, emb, NULL, offs, keep, out, oo),
                        "offsets");
        assert_outputs_untouched(e, "offsets");
    }
    e->offsets[0] = 0, e->offsets[1] = 5, e->offsets[2] = N;
    /* B + 1 = 2^62 offsets broadcast from one value: 2^62 sets for 8 rows is
     * rejected before any per-set table is sized */
    tt_array big;
    int64_t shape = P62, stride = 0;
    tt_array_init(&big, e->offsets, TODRE_DTYPE_I64, 1, &shape, &stride);
    fill_outputs(e);
    assert_rejected(e->ctx, todre_select_batch(e->ctx, e->cfg, emb, NULL, &big.dl, NULL, out, oo),
                    "offsets");
    assert_outputs_untouched(e, "offsets [2^62]");
    /* the ratio budget: K from the per-set k */
    tt_assert_ok(todre_select_batch(e->ctx, e->cfg_b, emb, NULL, offs, NULL, out, oo));
    assert_int_equal(e->out_offsets[2], KEEP);
}

static void test_pivot_range(void **state)
{
    struct env *e = *state;
    tt_array a[3];
    v_select(e, a);
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_RANDOM, KEEP,
                                         TODRE_ORDER_BOTH);
    tt_cfg_set(cfg, TODRE_SELECT_SEED, INT64_MIN);
    const int64_t ranges[][2] = {{INT64_MAX - 1, -1}, {INT64_MAX - 1, INT64_MAX}, {0, INT64_MAX},
                                 {N, -1}, {0, N + 1}};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        tt_cfg_set(cfg, TODRE_SELECT_PIVOT_LO, ranges[i][0]);
        tt_cfg_set(cfg, TODRE_SELECT_PIVOT_HI, ranges[i][1]);
        fill_outputs(e);
        assert_rejected(e->ctx, todre_select(e->ctx, cfg, &a[0].dl, NULL, &a[2].dl),
                        "pivot_range");
        assert_outputs_untouched(e, "pivot range");
    }
    /* just inside: [N - 1, N) and the largest seeds */
    tt_cfg_set(cfg, TODRE_SELECT_PIVOT_LO, N - 1);
    tt_cfg_set(cfg, TODRE_SELECT_PIVOT_HI, N);
    tt_cfg_set(cfg, TODRE_SELECT_SEED, INT64_MAX);
    tt_assert_ok(todre_select(e->ctx, cfg, &a[0].dl, NULL, &a[2].dl));
    assert_int_equal(e->out[0], N - 1); /* selection order: the pivot first */
    todre_select_config_destroy(cfg);
}

/* ---- stage 2 limits ------------------------------------------------------------- */

static void test_relevance_limits(void **state)
{
    struct env *e = *state;
    todre_relevance *rel = (todre_relevance *)(uintptr_t)0x1234;
    const int64_t bad[] = {0, -1, ((int64_t)1 << 20) + 1, INT32_MAX, (int64_t)1 << 32, P62,
                           INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_rejected(NULL, todre_relevance_create(bad[i], 1, &rel), "num_layers");
        assert_rejected(NULL, todre_relevance_create(1, bad[i], &rel), "batch");
        assert_ptr_equal(rel, (todre_relevance *)(uintptr_t)0x1234);
    }
    /* just inside: 2^20 layers, 2^20 sequences (not both: 2^40 states) */
    todre_relevance *big = NULL;
    tt_assert_ok(todre_relevance_create((int64_t)1 << 20, 1, &big));
    int64_t v = 0;
    tt_assert_ok(todre_relevance_get_int(big, TODRE_RELEVANCE_NUM_LAYERS, &v));
    assert_int_equal(v, (int64_t)1 << 20);
    todre_relevance_destroy(big);
    tt_assert_ok(todre_relevance_create(1, (int64_t)1 << 20, &big));
    todre_relevance_destroy(big);

    /* layout counts: each <= 2^31 - 1 */
    assert_rejected(NULL, todre_relevance_set_layout(e->rel1, (int64_t)1 << 31, 1, 1), "n_system");
    assert_rejected(NULL, todre_relevance_set_layout(e->rel1, 1, INT64_MAX, 1), "n_visual");
    assert_rejected(NULL, todre_relevance_set_layout(e->rel1, 1, 1, INT64_MAX), "n_text");
    assert_rejected(NULL, todre_relevance_set_layout(e->rel1, INT64_MIN, 1, 1), "n_system");
    /* the handle kept its types */
    e->count = SENT64;
    tt_assert_ok(todre_relevance_keep_positions(e->rel1, 0, NULL, &e->count));
    assert_int_equal(e->count, 3);

    /* layer and sequence indices far outside */
    const int64_t idx[] = {-1, INT64_MIN, INT64_MAX, L, (int64_t)1 << 32};
    for (size_t i = 0; i < sizeof idx / sizeof idx[0]; i++) {
        tt_array at, de;
        arr(&at, e->attn, TODRE_DTYPE_F32, 3, H, QK, QK, 0);
        arr(&de, e->decisions, TODRE_DTYPE_I32, 1, 1, 0, 0, 0);
        fill_outputs(e);
        assert_rejected(e->ctx, todre_relevance_observe_probs(e->ctx, e->rel1, idx[i], &at.dl, &de.dl),
                        "layer");
        assert_outputs_untouched(e, "observe layer");
        int is = SENT32;
        assert_rejected(NULL, todre_relevance_is_probe(e->rel1, idx[i] == L ? 1 : idx[i], 0, &is),
                        "seq");
        assert_rejected(NULL, todre_relevance_is_probe(e->rel1, 0, idx[i], &is), "layer");
        assert_int_equal(is, SENT32);
    }
}

/* Heads: at most 2^20 per observation, and B x H x Q x K must fit int64 --
 * with zero strides a small buffer describes any number of heads. */
static void test_heads_and_entries(void **state)
{
    struct env *e = *state;
    int64_t H1 = ((int64_t)1 << 20) + 1;
    /* attn [2^20 + 1, Q, K] broadcast over heads */
    tt_array at, de, q, k;
    int64_t ashape[3] = {H1, QK, QK}, astr[3] = {0, QK, 1};
    tt_array_init(&at, e->attn, TODRE_DTYPE_F32, 3, ashape, astr);
    arr(&de, e->decisions, TODRE_DTYPE_I32, 1, 1, 0, 0, 0);
    fill_outputs(e);
    assert_rejected(e->ctx, todre_relevance_observe_probs(e->ctx, e->rel1, 0, &at.dl, &de.dl),
                    "attn");
    assert_outputs_untouched(e, "attn heads");
    /* just inside: 2^20 heads of the same [Q, K] block */
    ashape[0] = (int64_t)1 << 20;
    tt_array_init(&at, e->attn, TODRE_DTYPE_F32, 3, ashape, astr);
    fill_outputs(e);
    tt_assert_ok(todre_relevance_reset(e->rel1, TODRE_RESET_STATE));
    tt_assert_ok(todre_relevance_observe_probs(e->ctx, e->rel1, 0, &at.dl, &de.dl));
    assert_true(e->decisions[0] == TODRE_DECISION_KEEP || e->decisions[0] == TODRE_DECISION_DROP);
    double t2v = -1, v2t = -1, t1 = -1, v1 = -1;
    tt_assert_ok(todre_relevance_ratios(e->rel1, 0, 0, &t2v, &v2t));
    tt_assert_ok(todre_relevance_reset(e->rel1, TODRE_RESET_STATE));
    arr(&at, e->attn, TODRE_DTYPE_F32, 3, 1, QK, QK, 0);
    tt_assert_ok(todre_relevance_observe_probs(e->ctx, e->rel1, 0, &at.dl, &de.dl));
    tt_assert_ok(todre_relevance_ratios(e->rel1, 0, 0, &t1, &v1));
    assert_true(fabs(t2v - t1) < 1e-9 && fabs(v2t - v1) < 1e-9); /* the same per head */

    /* q [2^20 + 1, Q, dh] broadcast, one key head */
    int64_t qshape[3] = {H1, QK, DH}, qstr[3] = {0, DH, 1};
    tt_array_init(&q, e->q, TODRE_DTYPE_F32, 3, qshape, qstr);
    arr(&k, e->k, TODRE_DTYPE_F32, 3, 1, QK, DH, 0);
    fill_outputs(e);
    assert_rejected(e->ctx, todre_relevance_observe_qk(e->ctx, e->rel1, 0, &q.dl, &k.dl, 0.0, &de.dl),
                    "q");
    assert_outputs_untouched(e, "q heads");

    /* B x H x Q x K = 2^20 x 2^22 x 2^22 = 2^64 entries on a handle whose
     * types cover 2^22 positions: rejected before any work (else hours) */
    todre_relevance *rel = NULL;
    const int64_t K22 = (int64_t)1 << 22;
    tt_assert_ok(todre_relevance_create(1, 1, &rel));
    tt_assert_ok(todre_relevance_set_layout(rel, 1, K22 / 2, K22 / 2 - 1));
    int64_t q2[3] = {(int64_t)1 << 20, K22, DH}, q2s[3] = {0, 0, 1};
    int64_t k2[3] = {1, K22, DH}, k2s[3] = {0, 0, 1};
    tt_array_init(&q, e->q, TODRE_DTYPE_F32, 3, q2, q2s);
    tt_array_init(&k, e->k, TODRE_DTYPE_F32, 3, k2, k2s);
    fill_outputs(e);
    assert_rejected(e->ctx, todre_relevance_observe_qk(e->ctx, rel, 0, &q.dl, &k.dl, 0.0, &de.dl),
                    "k");
    assert_outputs_untouched(e, "B x H x Q x K");
    todre_relevance_destroy(rel);
}

/* ---- the out-pointer rule ---------------------------------------------------------- */

#define PTR_SENT ((void *)(uintptr_t)0x5eed)

static void test_out_pointers(void **state)
{
    struct env *e = *state;
    fill_outputs(e);
    /* todre_param_get_bounds: unknown parameter, struct_size too small */
    todre_param_bounds b, b0;
    memset(&b, 0xAB, sizeof b);
    b.struct_size = sizeof b;
    b0 = b;
    assert_rejected(NULL, todre_param_get_bounds((todre_param)-1, &b), "param");
    assert_memory_equal(&b, &b0, sizeof b);
    assert_rejected(NULL, todre_param_get_bounds((todre_param)INT32_MAX, &b), "param");
    b.struct_size = sizeof(size_t);
    b0 = b;
    assert_rejected(NULL, todre_param_get_bounds(TODRE_SELECT_KEEP, &b), "bounds");
    assert_memory_equal(&b, &b0, sizeof b);

    /* backends and devices */
    todre_backend_props bp, bp0;
    memset(&bp, 0xAB, sizeof bp);
    bp.struct_size = sizeof bp;
    bp0 = bp;
    assert_rejected(NULL, todre_backend_get_props(-1, &bp), "index");
    assert_rejected(NULL, todre_backend_get_props(INT32_MAX, &bp), "index");
    assert_memory_equal(&bp, &bp0, sizeof bp);
    todre_device_props dp, dp0;
    memset(&dp, 0xAB, sizeof dp);
    dp.struct_size = sizeof dp;
    dp0 = dp;
    assert_rejected(NULL, todre_device_get_props("cpu", 1, &dp), "device");
    assert_rejected(NULL, todre_device_get_props("cpu", -1, &dp), "device");
    assert_rejected(NULL, todre_device_get_props("cpu", INT32_MAX, &dp), "device");
    assert_rejected(NULL, todre_device_get_props("CPU!", 0, &dp), "backend");
    assert_memory_equal(&dp, &dp0, sizeof dp);

    /* contexts */
    todre_context *ctx = PTR_SENT;
    assert_rejected(NULL, todre_context_create("cpu", 1, &ctx), "device");
    assert_rejected(NULL, todre_context_create("cpu", INT32_MIN, &ctx), "device");
    assert_rejected(NULL, todre_context_create("a_name_that_is_longer_than_31_chars", 0, &ctx),
                    "backend");
    assert_rejected(NULL, todre_context_create("", 0, &ctx), "backend");
    assert_int_equal(todre_context_create("nonexistent", 0, &ctx), TODRE_ERR_BACKEND_UNAVAILABLE);
    assert_ptr_equal(ctx, PTR_SENT);
    DLDevice dev = {(DLDeviceType)77, 77};
    assert_rejected(NULL, todre_context_device(NULL, &dev), "ctx");
    assert_int_equal(dev.device_type, 77);
    int64_t v = SENT64;
    double dv = -7.0;
    assert_rejected(e->ctx, todre_context_get_int(e->ctx, TODRE_SELECT_KEEP, &v), "param");
    assert_rejected(e->ctx, todre_context_get_int(e->ctx, (todre_param)INT32_MAX, &v), "param");
    assert_rejected(e->ctx, todre_context_get_double(e->ctx, TODRE_CONTEXT_NUM_THREADS, &dv),
                    "param");
    /* context parameters: out of range changes nothing */
    assert_rejected(e->ctx, todre_context_set_int(e->ctx, TODRE_CONTEXT_NUM_THREADS, 1025), "value");
    assert_rejected(e->ctx, todre_context_set_int(e->ctx, TODRE_CONTEXT_NUM_THREADS, INT64_MIN),
                    "value");
    assert_rejected(e->ctx, todre_context_set_int(e->ctx, TODRE_CONTEXT_WORKSPACE_LIMIT, -1),
                    "value");
    tt_assert_ok(todre_context_get_int(e->ctx, TODRE_CONTEXT_NUM_THREADS, &v));
    assert_int_equal(v, 0);
    v = SENT64;
    void *p = PTR_SENT;
    assert_rejected(e->ctx, todre_context_alloc(e->ctx, 0, &p), "bytes");
    assert_rejected(e->ctx, todre_context_alloc(e->ctx, (size_t)INT64_MAX + 1, &p), "bytes");
    assert_rejected(e->ctx, todre_context_alloc(e->ctx, SIZE_MAX, &p), "bytes");
    /* (a failed allocation: tests/robust/test_alloc_fail.c) */
    assert_ptr_equal(p, PTR_SENT);
    assert_true(dv == -7.0);

    /* selection configurations */
    todre_select_config *cfg = PTR_SENT;
    assert_rejected(NULL, todre_select_config_get_int(e->cfg, TODRE_SELECT_RATIO, &v), "param");
    assert_rejected(NULL, todre_select_config_get_double(e->cfg, TODRE_SELECT_KEEP, &dv), "param");
    assert_rejected(NULL, todre_select_config_get_int(NULL, TODRE_SELECT_KEEP, &v), "cfg");
    assert_rejected(NULL, todre_select_config_create(NULL), "out");
    assert_ptr_equal(cfg, PTR_SENT);

    /* relevance handles */
    assert_rejected(NULL, todre_relevance_get_int(e->rel1, TODRE_RELEVANCE_TAU, &v), "param");
    assert_rejected(NULL, todre_relevance_get_double(e->rel1, TODRE_RELEVANCE_BATCH, &dv), "param");
    int is = SENT32;
    assert_rejected(NULL, todre_relevance_is_probe(e->rel1, 1, 0, &is), "seq");
    assert_int_equal(is, SENT32);
    double t2v = -7.0, v2t = -7.0;
    assert_rejected(NULL, todre_relevance_ratios(e->rel1, 1, 0, &t2v, &v2t), "seq");
    assert_rejected(NULL, todre_relevance_ratios(e->rel1, 0, INT64_MAX, &t2v, &v2t), "layer");
    todre_relevance *fresh = NULL;
    tt_assert_ok(todre_relevance_create(4, 1, &fresh));
    assert_int_equal(todre_relevance_ratios(fresh, 0, 0, &t2v, &v2t), TODRE_ERR_STATE);
    assert_true(t2v == -7.0 && v2t == -7.0);
    assert_rejected(NULL, todre_relevance_drop_layer(e->rel1, INT64_MIN, &v), "seq");
    assert_int_equal(todre_relevance_keep_positions(fresh, 0, NULL, &e->count), TODRE_ERR_STATE);
    assert_int_equal(e->count, SENT64);
    assert_rejected(NULL, todre_relevance_keep_positions(e->rel1, -1, NULL, &e->count), "seq");
    assert_int_equal(e->count, SENT64);
    assert_int_equal(v, SENT64);
    assert_true(dv == -7.0);
    todre_relevance_destroy(fresh);

    /* the documented exception: count is written when the output is too small,
     * the output itself is not */
    tt_array small;
    arr(&small, e->list, TODRE_DTYPE_I64, 1, 2, 0, 0, 0);
    fill_outputs(e);
    assert_rejected(NULL, todre_relevance_keep_positions(e->rel1, 0, &small.dl, &e->count), "out");
    assert_int_equal(e->count, 3);
    e->count = SENT64;
    assert_outputs_untouched(e, "keep_positions, too small");
    arr(&small, e->list, TODRE_DTYPE_I64, 1, 0, 0, 0, 0);
    assert_rejected(NULL, todre_relevance_get_probe_layers(e->rel1, &small.dl, &e->count), "out");
    assert_int_equal(e->count, 1);
    e->count = SENT64;
    /* a bad output array: count untouched */
    arr(&small, e->list, TODRE_DTYPE_I32, 1, 4, 0, 0, 0);
    assert_rejected(NULL, todre_relevance_get_probe_layers(e->rel1, &small.dl, &e->count), "out");
    assert_outputs_untouched(e, "get_probe_layers, int32 output");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_array_argument, setup, teardown),
        cmocka_unit_test(test_keep_count),
        cmocka_unit_test_setup_teardown(test_batch_sums, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pivot_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relevance_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_heads_and_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_pointers, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
