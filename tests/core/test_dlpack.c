/* DLTensor validation, through the calls that take arrays (todre_select,
 * todre_select_batch, the relevance functions): which DLPack dtypes (code,
 * bits, lanes) and device types are accepted, ranks up to TODRE_MAX_RANK,
 * negative shapes and strides, byte_offset, NULL data (only for an empty
 * array), strided rows; every rejection names the argument. The DLTensor
 * layout of include/todre/dlpack.h is checked against the published
 * specification (DLPack >= 0.5) first, so a layout mistake shows. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "todre_test.h"

#define N 8
#define D 4
#define K 3

/* Row i is (1 + i / 4) * e_dir[i]: every score is exact in any arithmetic
 * and in f16/bf16. mu = (1, 2, 3, 2) / 8, so the CENTER pivot is row 3 (the
 * first of direction 2); MAX_SUM then takes 0 and 1 (score 0, lowest index). */
static const int dir[N] = {0, 1, 1, 2, 2, 2, 3, 3};
static const int64_t expected[K] = {3, 0, 1};

static void exact_rows(float *x, int64_t ld)
{
    for (int i = 0; i < N; i++)
        for (int j = 0; j < ld; j++)
            x[i * ld + j] = j >= D ? NAN : j == dir[i] ? (float)(1 + i / 4) : 0.0f;
}

static DLTensor dl(void *data, uint8_t code, uint8_t bits, uint16_t lanes, int ndim, int64_t *shape,
                   int64_t *strides)
{
    DLDataType t = {code, bits, lanes};
    return todre_test_dl(data, t, ndim, shape, strides);
}

struct fx {
    todre_context *ctx;
    todre_select_config *cfg; /* MAX_SUM, CENTER, keep K, SELECTION order */
    float rows[N * D];
    int64_t shape[2];
    int64_t out_shape[1];
    int64_t want[K]; /* the selection on the compact float32 rows */
    int64_t out[2 * K];
};

static void select_ok(struct fx *f, const DLTensor *emb, const DLTensor *cls, const DLTensor *out)
{
    tt_assert_ok(todre_select(f->ctx, f->cfg, emb, cls, out));
}

static int setup(void **state)
{
    static struct fx f;
    memset(&f, 0, sizeof f);
    exact_rows(f.rows, D);
    f.shape[0] = N;
    f.shape[1] = D;
    f.out_shape[0] = K;
    f.ctx = tt_cpu_context();
    f.cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_CENTER, K, TODRE_ORDER_SELECTION);
    DLTensor e = dl(f.rows, kDLFloat, 32, 1, 2, f.shape, NULL);
    DLTensor o = dl(f.want, kDLInt, 64, 1, 1, f.out_shape, NULL);
    select_ok(&f, &e, NULL, &o);
    assert_memory_equal(f.want, expected, sizeof expected);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    todre_select_config_destroy(f->cfg);
    todre_context_destroy(f->ctx);
    return 0;
}

#define FAILS(f, emb, cls, out, name) \
    tt_assert_fails((f)->ctx, todre_select((f)->ctx, (f)->cfg, emb, cls, out), \
                    TODRE_ERR_INVALID_ARGUMENT, name)

/* The vendored header has the DLTensor layout of the DLPack specification
 * (LP64: data 0, device 8, ndim 16, dtype 20, shape 24, strides 32,
 * byte_offset 40; 48 bytes). */
static void test_layout(void **state)
{
    (void)state;
    assert_int_equal(sizeof(DLDataType), 4);
    assert_int_equal(offsetof(DLDataType, code), 0);
    assert_int_equal(offsetof(DLDataType, bits), 1);
    assert_int_equal(offsetof(DLDataType, lanes), 2);
    assert_int_equal(sizeof(DLDevice), 8);
    assert_int_equal(offsetof(DLDevice, device_id), 4);
    assert_int_equal(offsetof(DLTensor, data), 0);
    assert_int_equal(offsetof(DLTensor, device), sizeof(void *));
    assert_int_equal(offsetof(DLTensor, ndim), sizeof(void *) + 8);
    assert_int_equal(offsetof(DLTensor, dtype), sizeof(void *) + 12);
    assert_int_equal(offsetof(DLTensor, shape), sizeof(void *) + 16);
    assert_int_equal(offsetof(DLTensor, strides), 2 * sizeof(void *) + 16);
    assert_int_equal(offsetof(DLTensor, byte_offset), 3 * sizeof(void *) + 16);
    assert_int_equal(sizeof(DLTensor), 3 * sizeof(void *) + 24);
    assert_int_equal(kDLCPU, 1);
    assert_int_equal(kDLCUDA, 2);
    assert_int_equal(kDLCUDAHost, 3);
    assert_int_equal(kDLCUDAManaged, 13);
    assert_int_equal(kDLInt, 0);
    assert_int_equal(kDLUInt, 1);
    assert_int_equal(kDLFloat, 2);
    assert_int_equal(kDLBfloat, 4);
}

/* Data dtypes: float32, float16 and bfloat16 (lanes 1) are accepted and give
 * the same selection (the rows are exact in all three); anything else is
 * rejected naming the array. */
static void test_float_dtypes(void **state)
{
    struct fx *f = *state;
    uint16_t half[N * D];
    static const struct { uint8_t code, bits; } ok[] = {{kDLFloat, 32}, {kDLFloat, 16}, {kDLBfloat, 16}};
    for (size_t i = 0; i < 3; i++) {
        void *data = f->rows;
        if (ok[i].bits == 16) {
            if (ok[i].code == kDLFloat) tt_to_f16(half, f->rows, N * D);
            else tt_to_bf16(half, f->rows, N * D);
            data = half;
        }
        DLTensor e = dl(data, ok[i].code, ok[i].bits, 1, 2, f->shape, NULL);
        DLTensor o = dl(f->out, kDLInt, 64, 1, 1, f->out_shape, NULL);
        memset(f->out, 0xff, sizeof f->out);
        select_ok(f, &e, NULL, &o);
        assert_memory_equal(f->out, f->want, sizeof f->want);
    }
    static const DLDataType bad[] = {
        {kDLFloat, 64, 1}, {kDLFloat, 32, 4}, {kDLFloat, 32, 0}, {kDLFloat, 8, 1},
        {kDLOpaqueHandle, 64, 1}, {kDLBfloat, 32, 1}, {kDLInt, 32, 1}, {kDLUInt, 8, 1},
        {kDLComplex, 64, 1}, {6, 8, 1} /* bool */, {200, 32, 1} /* no such code */,
    };
    static float cls[N] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
    int64_t n = N;
    DLTensor good_cls = dl(cls, kDLFloat, 32, 1, 1, &n, NULL);
    DLTensor e_ok = dl(f->rows, kDLFloat, 32, 1, 2, f->shape, NULL);
    DLTensor o = dl(f->out, kDLInt, 64, 1, 1, f->out_shape, NULL);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        DLTensor e = todre_test_dl(f->rows, bad[i], 2, f->shape, NULL);
        FAILS(f, &e, NULL, &o, "embeddings");
        DLTensor c = todre_test_dl(cls, bad[i], 1, &n, NULL);
        FAILS(f, &e_ok, &c, &o, "cls");
    }
    select_ok(f, &e_ok, &good_cls, &o);
}

/* Index arrays are int64 (lanes 1), decisions int32, token types uint8 or
 * bool (code 6, 8 bits). */
static void test_integer_dtypes(void **state)
{
    struct fx *f = *state;
    DLTensor e = dl(f->rows, kDLFloat, 32, 1, 2, f->shape, NULL);
    static const DLDataType bad_index[] = {
        {kDLUInt, 64, 1}, {kDLInt, 64, 2}, {kDLInt, 32, 1}, {kDLFloat, 64, 1}, {kDLInt, 64, 0},
    };
    for (size_t i = 0; i < sizeof bad_index / sizeof bad_index[0]; i++) {
        DLTensor o = todre_test_dl(f->out, bad_index[i], 1, f->out_shape, NULL);
        FAILS(f, &e, NULL, &o, "out");
    }

    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(1, 1, &rel));
    uint8_t types[4] = {TODRE_TOKEN_SYSTEM, TODRE_TOKEN_VISUAL, TODRE_TOKEN_VISUAL, TODRE_TOKEN_TEXT};
    int64_t nt = 4;
    static const DLDataType ok_types[] = {{kDLUInt, 8, 1}, {6, 8, 1}};
    for (size_t i = 0; i < 2; i++) {
        DLTensor t = todre_test_dl(types, ok_types[i], 1, &nt, NULL);
        tt_assert_ok(todre_relevance_set_types(rel, &t));
    }
    static const DLDataType bad_types[] = {{kDLInt, 8, 1}, {kDLUInt, 8, 2}, {kDLUInt, 16, 1}, {6, 16, 1}};
    for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
        DLTensor t = todre_test_dl(types, bad_types[i], 1, &nt, NULL);
        tt_assert_fails(NULL, todre_relevance_set_types(rel, &t), TODRE_ERR_INVALID_ARGUMENT, "types");
    }
    /* probabilities [1, 4, 4] of a causal uniform attention */
    float attn[16] = {0};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j <= i; j++) attn[i * 4 + j] = 1.0f / (float)(i + 1);
    int64_t sa[3] = {1, 4, 4}, one = 1;
    DLTensor a = dl(attn, kDLFloat, 32, 1, 3, sa, NULL);
    int32_t dec = -1;
    static const DLDataType bad_dec[] = {{kDLUInt, 32, 1}, {kDLInt, 64, 1}, {kDLInt, 32, 2}};
    for (size_t i = 0; i < sizeof bad_dec / sizeof bad_dec[0]; i++) {
        DLTensor d = todre_test_dl(&dec, bad_dec[i], 1, &one, NULL);
        tt_assert_fails(f->ctx, todre_relevance_observe_probs(f->ctx, rel, 0, &a, &d),
                        TODRE_ERR_INVALID_ARGUMENT, "decisions");
        assert_int_equal(dec, -1);
    }
    DLTensor d = dl(&dec, kDLInt, 32, 1, 1, &one, NULL);
    tt_assert_ok(todre_relevance_observe_probs(f->ctx, rel, 0, &a, &d));
    assert_true(dec == TODRE_DECISION_KEEP || dec == TODRE_DECISION_DROP);
    todre_relevance_destroy(rel);
}

/* kDLCPU and kDLCUDAHost are host memory, accepted by a CPU context (for
 * every array, device_id 0); CUDA and managed memory are not the CPU
 * context's device; other device types are rejected. */
static void test_devices(void **state)
{
    struct fx *f = *state;
    static const int32_t host[] = {kDLCPU, kDLCUDAHost};
    for (size_t i = 0; i < 2; i++) {
        DLTensor e = dl(f->rows, kDLFloat, 32, 1, 2, f->shape, NULL);
        DLTensor o = dl(f->out, kDLInt, 64, 1, 1, f->out_shape, NULL);
        e.device.device_type = (DLDeviceType)host[i];
        o.device.device_type = (DLDeviceType)host[i];
        memset(f->out, 0xff, sizeof f->out);
        select_ok(f, &e, NULL, &o);
        assert_memory_equal(f->out, f->want, sizeof f->want);
    }
    static const int32_t bad[] = {kDLCUDA, kDLCUDAManaged, kDLOpenCL, kDLVulkan, kDLROCM, 0, 5, 99, -1};
    DLTensor o = dl(f->out, kDLInt, 64, 1, 1, f->out_shape, NULL);
    DLTensor e_ok = dl(f->rows, kDLFloat, 32, 1, 2, f->shape, NULL);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        DLTensor e = dl(f->rows, kDLFloat, 32, 1, 2, f->shape, NULL);
        e.device.device_type = (DLDeviceType)bad[i];
        FAILS(f, &e, NULL, &o, "embeddings");
        DLTensor o2 = dl(f->out, kDLInt, 64, 1, 1, f->out_shape, NULL);
        o2.device.device_type = (DLDeviceType)bad[i];
        FAILS(f, &e_ok, NULL, &o2, "out");
    }
    /* host-only arrays (probe layers) accept pinned host memory too */
    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(4, 1, &rel));
    int64_t layers[2] = {3, 1}, two = 2;
    DLTensor l = dl(layers, kDLInt, 64, 1, 1, &two, NULL);
    l.device.device_type = kDLCUDAHost;
    tt_assert_ok(todre_relevance_set_probe_layers(rel, &l));
    int is = 0;
    tt_assert_ok(todre_relevance_is_probe(rel, 0, 1, &is));
    assert_int_equal(is, 1);
    l.device.device_type = (DLDeviceType)99;
    tt_assert_fails(NULL, todre_relevance_set_probe_layers(rel, &l), TODRE_ERR_INVALID_ARGUMENT, "layers");
    todre_relevance_destroy(rel);
}

/* ndim in [0, TODRE_MAX_RANK]: 9 and negative ranks are rejected naming the
 * array (before any shape entry is read). */
static void test_rank(void **state)
{
    struct fx *f = *state;
    int64_t shape9[9] = {1, 1, 1, 1, 1, 1, 1, N, D};
    DLTensor o = dl(f->out, kDLInt, 64, 1, 1, f->out_shape, NULL);
    DLTensor e9 = dl(f->rows, kDLFloat, 32, 1, TODRE_MAX_RANK + 1, shape9, NULL);
    FAILS(f, &e9, NULL, &o, "embeddings");
    DLTensor eneg = dl(f->rows, kDLFloat, 32, 1, -1, f->shape, NULL);
    FAILS(f, &eneg, NULL, &o, "embeddings");
    DLTensor e_ok = dl(f->rows, kDLFloat, 32, 1, 2, f->shape, NULL);
    DLTensor o9 = dl(f->out, kDLInt, 64, 1, TODRE_MAX_RANK + 1, shape9, NULL);
    FAILS(f, &e_ok, NULL, &o9, "out");
    /* a rank-8 attention array is a valid DLTensor but the wrong rank for
     * observe_probs: still a named rejection */
    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(1, 1, &rel));
    tt_assert_ok(todre_relevance_set_layout(rel, 1, 2, 1));
    float attn[16] = {0};
    int64_t s8[8] = {1, 1, 1, 1, 1, 1, 4, 4};
    DLTensor a8 = dl(attn, kDLFloat, 32, 1, 8, s8, NULL);
    tt_assert_fails(f->ctx, todre_relevance_observe_probs(f->ctx, rel, 0, &a8, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "attn");
    uint8_t types[4] = {0, 1, 1, 2};
    DLTensor t9 = dl(types, kDLUInt, 8, 1, 9, shape9, NULL);
    tt_assert_fails(NULL, todre_relevance_set_types(rel, &t9), TODRE_ERR_INVALID_ARGUMENT, "types");
    todre_relevance_destroy(rel);
}

/* Negative shape entries and strides are rejected; so is a shape whose byte
 * size overflows. */
static void test_negative_and_huge(void **state)
{
    struct fx *f = *state;
    DLTensor o = dl(f->out, kDLInt, 64, 1, 1, f->out_shape, NULL);
    int64_t neg_shape[2] = {N, -D}, neg_rows[2] = {-N, D}, neg_strides[2] = {-D, 1}, neg_inner[2] = {D, -1};
    int64_t huge[2] = {INT64_MAX / 2, 8};
    int64_t *shapes[] = {neg_shape, neg_rows, huge};
    for (int i = 0; i < 3; i++) {
        DLTensor e = dl(f->rows, kDLFloat, 32, 1, 2, shapes[i], NULL);
        FAILS(f, &e, NULL, &o, "embeddings");
    }
    /* the last row first, with a negative row stride: still rejected */
    DLTensor e1 = dl(f->rows + (N - 1) * D, kDLFloat, 32, 1, 2, f->shape, neg_strides);
    FAILS(f, &e1, NULL, &o, "embeddings");
    DLTensor e2 = dl(f->rows + D - 1, kDLFloat, 32, 1, 2, f->shape, neg_inner);
    FAILS(f, &e2, NULL, &o, "embeddings");
    float cls[N] = {0};
    int64_t n = N, back = -1;
    DLTensor c = dl(cls + N - 1, kDLFloat, 32, 1, 1, &n, &back);
    DLTensor e_ok = dl(f->rows, kDLFloat, 32, 1, 2, f->shape, NULL);
    FAILS(f, &e_ok, &c, &o, "cls");
    int64_t neg_k = -K;
    DLTensor o2 = dl(f->out, kDLInt, 64, 1, 1, &neg_k, NULL);
    FAILS(f, &e_ok, NULL, &o2, "out");
}

/* byte_offset is added to data for every array: inputs (rows, CLS map,
 * host offsets) and outputs. */
static void test_byte_offset(void **state)
{
    struct fx *f = *state;
    /* CLS_TOPK through a CLS view starting 3 floats in sees the shifted values */
    float cls[10] = {9, 9, 9, 0.1f, 0.5f, 0.2f, 0.9f, 0.3f, 0.0f, 0.4f};
    float emb[7] = {1, 2, 3, 4, 5, 6, 7};
    int64_t cls_shape[1] = {7}, emb_shape[2] = {7, 1}, two = 2;
    DLTensor dc = dl(cls, kDLFloat, 32, 1, 1, cls_shape, NULL);
    dc.byte_offset = 3 * sizeof(float);
    DLTensor de = dl(emb, kDLFloat, 32, 1, 2, emb_shape, NULL);
    int64_t top[4] = {-1, -1, -1, -1};
    DLTensor dout = dl(top, kDLInt, 64, 1, 1, &two, NULL);
    dout.byte_offset = sizeof(int64_t); /* written at top[1], top[2] */
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_CLS_TOPK, TODRE_PIVOT_AUTO, 2,
                                         TODRE_ORDER_SELECTION);
    tt_assert_ok(todre_select(f->ctx, cfg, &de, &dc, &dout));
    assert_int_equal(top[0], -1);
    assert_int_equal(top[1], 3); /* 0.9 */
    assert_int_equal(top[2], 1); /* 0.5 */
    assert_int_equal(top[3], -1);
    todre_select_config_destroy(cfg);

    /* rows stored two rows in: the same selection as the compact rows */
    float padded[(N + 2) * D];
    memset(padded, 0xff, sizeof padded); /* NaN before the view */
    memcpy(padded + 2 * D, f->rows, sizeof f->rows);
    DLTensor e = dl(padded, kDLFloat, 32, 1, 2, f->shape, NULL);
    e.byte_offset = 2 * D * sizeof(float);
    DLTensor o = dl(f->out, kDLInt, 64, 1, 1, f->out_shape, NULL);
    memset(f->out, 0xff, sizeof f->out);
    select_ok(f, &e, NULL, &o);
    assert_memory_equal(f->out, f->want, sizeof f->want);

    /* host offsets of a batch behind a byte_offset */
    int64_t offs[4] = {-5, 0, N / 2, N}, three = 3, kk = 2 * K, out_offs[3] = {-1, -1, -1};
    DLTensor off = dl(offs, kDLInt, 64, 1, 1, &three, NULL);
    off.byte_offset = sizeof(int64_t);
    DLTensor oo = dl(out_offs, kDLInt, 64, 1, 1, &three, NULL);
    DLTensor ob = dl(f->out, kDLInt, 64, 1, 1, &kk, NULL);
    DLTensor ec = dl(f->rows, kDLFloat, 32, 1, 2, f->shape, NULL);
    tt_assert_ok(todre_select_batch(f->ctx, f->cfg, &ec, NULL, &off, NULL, &ob, &oo));
    assert_int_equal(out_offs[0], 0);
    assert_int_equal(out_offs[1], K);
    assert_int_equal(out_offs[2], 2 * K);
}

/* data may be NULL only for an empty array. */
static void test_null_data(void **state)
{
    struct fx *f = *state;
    DLTensor e_ok = dl(f->rows, kDLFloat, 32, 1, 2, f->shape, NULL);
    DLTensor o_ok = dl(f->out, kDLInt, 64, 1, 1, f->out_shape, NULL);
    DLTensor e = dl(NULL, kDLFloat, 32, 1, 2, f->shape, NULL);
    FAILS(f, &e, NULL, &o_ok, "embeddings");
    int64_t n = N;
    DLTensor c = dl(NULL, kDLFloat, 32, 1, 1, &n, NULL);
    FAILS(f, &e_ok, &c, &o_ok, "cls");
    DLTensor o = dl(NULL, kDLInt, 64, 1, 1, f->out_shape, NULL);
    FAILS(f, &e_ok, NULL, &o, "out");

    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(2, 1, &rel));
    int64_t four = 4, zero = 0;
    DLTensor t = dl(NULL, kDLUInt, 8, 1, 1, &four, NULL);
    tt_assert_fails(NULL, todre_relevance_set_types(rel, &t), TODRE_ERR_INVALID_ARGUMENT, "types");
    DLTensor l = dl(NULL, kDLInt, 64, 1, 1, &four, NULL);
    tt_assert_fails(NULL, todre_relevance_set_probe_layers(rel, &l), TODRE_ERR_INVALID_ARGUMENT, "layers");
    /* an empty output array with NULL data is valid: a set of visual tokens
     * only keeps nothing */
    tt_assert_ok(todre_relevance_set_layout(rel, 0, 4, 0));
    int64_t count = -1;
    DLTensor empty = dl(NULL, kDLInt, 64, 1, 1, &zero, NULL);
    tt_assert_ok(todre_relevance_keep_positions(rel, 0, &empty, &count));
    assert_int_equal(count, 0);
    /* ... but a non-empty one is not */
    tt_assert_ok(todre_relevance_set_layout(rel, 1, 2, 1));
    DLTensor out2 = dl(NULL, kDLInt, 64, 1, 1, &four, NULL);
    tt_assert_fails(NULL, todre_relevance_keep_positions(rel, 0, &out2, &count),
                    TODRE_ERR_INVALID_ARGUMENT, "out");
    todre_relevance_destroy(rel);
}

/* Strided rows (row stride > d, padding never read) select like compact
 * rows; the inner stride of the embeddings must be 1, the output compact. */
static void test_strides(void **state)
{
    struct fx *f = *state;
    float wide[N * (D + 3)];
    exact_rows(wide, D + 3); /* NaN padding */
    int64_t st[2] = {D + 3, 1};
    DLTensor e = dl(wide, kDLFloat, 32, 1, 2, f->shape, st);
    DLTensor o = dl(f->out, kDLInt, 64, 1, 1, f->out_shape, NULL);
    memset(f->out, 0xff, sizeof f->out);
    select_ok(f, &e, NULL, &o);
    assert_memory_equal(f->out, f->want, sizeof f->want);
    /* explicit compact strides equal NULL strides */
    int64_t compact[2] = {D, 1}, one = 1;
    DLTensor ec = dl(f->rows, kDLFloat, 32, 1, 2, f->shape, compact);
    DLTensor oc = dl(f->out, kDLInt, 64, 1, 1, f->out_shape, &one);
    memset(f->out, 0xff, sizeof f->out);
    select_ok(f, &ec, NULL, &oc);
    assert_memory_equal(f->out, f->want, sizeof f->want);
    /* inner stride 2: rejected */
    float twice[N * 2 * D];
    int64_t inner2[2] = {2 * D, 2};
    DLTensor e2 = dl(twice, kDLFloat, 32, 1, 2, f->shape, inner2);
    FAILS(f, &e2, NULL, &o, "embeddings");
    /* a strided output: rejected (outputs are compact) */
    int64_t s2 = 2;
    DLTensor o2 = dl(f->out, kDLInt, 64, 1, 1, f->out_shape, &s2);
    FAILS(f, &ec, NULL, &o2, "out");
    /* host inputs may be strided: probe layers every other entry */
    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(8, 1, &rel));
    int64_t layers[4] = {6, -1, 2, -1}, cnt = 2, got[2] = {-1, -1};
    DLTensor l = dl(layers, kDLInt, 64, 1, 1, &cnt, &s2);
    tt_assert_ok(todre_relevance_set_probe_layers(rel, &l));
    DLTensor g = dl(got, kDLInt, 64, 1, 1, &cnt, NULL);
    tt_assert_ok(todre_relevance_get_probe_layers(rel, &g, &cnt));
    assert_int_equal(cnt, 2);
    assert_int_equal(got[0], 2);
    assert_int_equal(got[1], 6);
    todre_relevance_destroy(rel);
}

/* A NULL array pointer where an array is required names the argument; the
 * library reads nothing else of a rejected DLTensor. */
static void test_null_tensor(void **state)
{
    struct fx *f = *state;
    DLTensor e_ok = dl(f->rows, kDLFloat, 32, 1, 2, f->shape, NULL);
    DLTensor o_ok = dl(f->out, kDLInt, 64, 1, 1, f->out_shape, NULL);
    FAILS(f, NULL, NULL, &o_ok, "embeddings");
    FAILS(f, &e_ok, NULL, NULL, "out");
    /* shape NULL with ndim > 0 */
    DLTensor e = dl(f->rows, kDLFloat, 32, 1, 2, NULL, NULL);
    FAILS(f, &e, NULL, &o_ok, "embeddings");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_float_dtypes),
        cmocka_unit_test(test_integer_dtypes),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_rank),
        cmocka_unit_test(test_negative_and_huge),
        cmocka_unit_test(test_byte_offset),
        cmocka_unit_test(test_null_data),
        cmocka_unit_test(test_strides),
        cmocka_unit_test(test_null_tensor),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
