/* Contract of every stage-2 function: bad input returns the documented
 * status with a message naming the argument, never crashes, and leaves the
 * handle usable. Non-finite data is TODRE_ERR_NONFINITE naming the tensor. */
#include "todre_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"

enum { H = 4, HKV = 2, K = 12, DH = 8 };

static const uint8_t types12[K] = {0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2};

struct fx {
    todre_context *ctx;
    todre_relevance *rel;
    float attn[H * K * K];
    float q[H * K * DH];
    float k[HKV * K * DH];
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    if (!f) return -1;
    f->ctx = tt_cpu_context();
    tt_assert_ok(todre_relevance_create(1, 1, &f->rel));
    tt_assert_ok(todre_relevance_set_layout(f->rel, 2, 5, 5));
    tt_rng r = {3};
    for (int i = 0; i < H * K * DH; i++) f->q[i] = (float)tt_rng_normal(&r);
    for (int i = 0; i < HKV * K * DH; i++) f->k[i] = (float)tt_rng_normal(&r);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < K; i++)
            for (int j = 0; j <= i; j++) f->attn[(h * K + i) * K + j] = 1.0f / (float)(i + 1);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    todre_relevance_destroy(f->rel);
    todre_context_destroy(f->ctx);
    free(f);
    return 0;
}

static const DLTensor *t3(tt_array *t, void *data, todre_dtype dt, int64_t a, int64_t b, int64_t c)
{
    return tt_array3(t, data, dt, a, b, c);
}

static const DLTensor *layers1(tt_array *t, int64_t *layers, int64_t count)
{
    return tt_array1(t, layers, TODRE_DTYPE_I64, count);
}

/* create / destroy / tau / schedule / probe layers. */
static void test_handle_arguments(void **state)
{
    (void)state;
    todre_relevance *const sentinel = (todre_relevance *)&state;
    todre_relevance *rel = sentinel; /* out-pointers are written only on success */
    tt_assert_fails(NULL, todre_relevance_create(8, 1, NULL), TODRE_ERR_INVALID_ARGUMENT, "out");
    tt_assert_fails(NULL, todre_relevance_create(0, 1, &rel), TODRE_ERR_INVALID_ARGUMENT, "num_layers");
    assert_ptr_equal(rel, sentinel);
    tt_assert_fails(NULL, todre_relevance_create(-3, 1, &rel), TODRE_ERR_INVALID_ARGUMENT, "num_layers");
    tt_assert_fails(NULL, todre_relevance_create(8, 0, &rel), TODRE_ERR_INVALID_ARGUMENT, "batch");
    assert_ptr_equal(rel, sentinel);
    todre_relevance_destroy(NULL);

    tt_assert_ok(todre_relevance_create(8, 2, &rel));
    double tau;
    const double bad_tau[] = {-0.01, 1.01, NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 5; i++)
        tt_assert_fails_param(NULL, todre_relevance_set_double(rel, TODRE_RELEVANCE_TAU, bad_tau[i]),
                              TODRE_ERR_INVALID_ARGUMENT, TODRE_RELEVANCE_TAU);
    tt_assert_ok(todre_relevance_get_double(rel, TODRE_RELEVANCE_TAU, &tau));
    assert_true(tau == 0.10); /* unchanged by the failures */
    tt_assert_ok(todre_relevance_set_double(rel, TODRE_RELEVANCE_TAU, 0.0));
    tt_assert_ok(todre_relevance_set_double(rel, TODRE_RELEVANCE_TAU, 1.0));
    tt_assert_fails(NULL, todre_relevance_set_double(NULL, TODRE_RELEVANCE_TAU, 0.5),
                    TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_get_double(NULL, TODRE_RELEVANCE_TAU, &tau),
                    TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_get_double(rel, TODRE_RELEVANCE_TAU, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "value");

    tt_assert_fails(NULL, todre_relevance_set_int(NULL, TODRE_RELEVANCE_SCHEDULE, TODRE_PROBE_LIST),
                    TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails_param(NULL, todre_relevance_set_int(rel, TODRE_RELEVANCE_SCHEDULE, 2),
                          TODRE_ERR_INVALID_ARGUMENT, TODRE_RELEVANCE_SCHEDULE);
    tt_assert_fails_param(NULL, todre_relevance_set_int(rel, TODRE_RELEVANCE_SCHEDULE, -1),
                          TODRE_ERR_INVALID_ARGUMENT, TODRE_RELEVANCE_SCHEDULE);

    int64_t layers[3] = {1, 7, 1};
    tt_array t;
    tt_assert_fails(NULL, todre_relevance_set_probe_layers(NULL, layers1(&t, layers, 1)),
                    TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_set_probe_layers(rel, NULL), TODRE_ERR_INVALID_ARGUMENT,
                    "layers");
    tt_assert_fails(NULL, todre_relevance_set_probe_layers(rel, layers1(&t, layers, 0)),
                    TODRE_ERR_INVALID_ARGUMENT, "layers"); /* count >= 1 */
    int64_t bad[2] = {3, 8};
    tt_assert_fails(NULL, todre_relevance_set_probe_layers(rel, layers1(&t, bad, 2)),
                    TODRE_ERR_INVALID_ARGUMENT, "layers");
    tt_assert_fails(NULL, todre_relevance_set_probe_layers(rel, tt_array1(&t, layers, TODRE_DTYPE_I32, 2)),
                    TODRE_ERR_INVALID_ARGUMENT, "layers"); /* int64 only */
    int64_t sh2[2] = {1, 2};
    tt_assert_fails(NULL, todre_relevance_set_probe_layers(
                              rel, tt_array_init(&t, layers, TODRE_DTYPE_I64, 2, sh2, NULL)),
                    TODRE_ERR_INVALID_ARGUMENT, "layers"); /* 1-D only */
    layers1(&t, layers, 2);
    tt_assert_fails(NULL, todre_relevance_set_probe_layers(rel, tt_array_on(&t, kDLCUDA, 0)),
                    TODRE_ERR_INVALID_ARGUMENT, "layers"); /* host only */
    int is;
    tt_assert_ok(todre_relevance_is_probe(rel, 0, 3, &is));
    assert_int_equal(is, 0); /* the failed calls changed nothing */
    tt_assert_ok(todre_relevance_set_probe_layers(rel, layers1(&t, layers, 3))); /* duplicates are fine */
    tt_assert_ok(todre_relevance_is_probe(rel, 1, 7, &is));
    assert_int_equal(is, 1);
    int64_t count = -1;
    tt_assert_fails(NULL, todre_relevance_get_probe_layers(NULL, NULL, &count),
                    TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_get_probe_layers(rel, NULL, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "count");
    tt_assert_fails(NULL, todre_relevance_get_probe_layers(rel, tt_array1(&t, layers, TODRE_DTYPE_F32, 3),
                                                           &count),
                    TODRE_ERR_INVALID_ARGUMENT, "out");

    tt_assert_fails(NULL, todre_relevance_is_probe(NULL, 0, 0, &is), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_is_probe(rel, 0, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "is_probe");
    tt_assert_fails(NULL, todre_relevance_is_probe(rel, 2, 0, &is), TODRE_ERR_INVALID_ARGUMENT, "seq");
    tt_assert_fails(NULL, todre_relevance_is_probe(rel, -1, 0, &is), TODRE_ERR_INVALID_ARGUMENT, "seq");
    tt_assert_fails(NULL, todre_relevance_reset(NULL, TODRE_RESET_STATE), TODRE_ERR_INVALID_ARGUMENT,
                    "rel");
    tt_assert_fails(NULL, todre_relevance_reset(rel, (todre_reset)0), TODRE_ERR_INVALID_ARGUMENT,
                    "what");
    tt_assert_fails(NULL, todre_relevance_reset(rel, (todre_reset)4), TODRE_ERR_INVALID_ARGUMENT,
                    "what");
    todre_relevance_destroy(rel);
}

/* set_types / set_layout. */
static void test_types_arguments(void **state)
{
    struct fx *f = *state;
    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(4, 2, &rel));
    uint8_t u8[2 * K];
    memcpy(u8, types12, K);
    memcpy(u8 + K, types12, K);
    float f32[K] = {0};
    tt_array ok1_a, t;
    const DLTensor *ok1 = tt_array1(&ok1_a, u8, TODRE_DTYPE_U8, K);
    tt_assert_fails(NULL, todre_relevance_set_types(NULL, ok1), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_set_types(rel, NULL), TODRE_ERR_INVALID_ARGUMENT, "types");
    tt_assert_fails(NULL, todre_relevance_set_types(rel, tt_array1(&t, f32, TODRE_DTYPE_F32, K)),
                    TODRE_ERR_INVALID_ARGUMENT, "types");
    int64_t s3[3] = {1, 2, K / 2}, s2[2] = {3, K / 3}, s0[1] = {0};
    tt_assert_fails(NULL, todre_relevance_set_types(rel, tt_array_init(&t, u8, TODRE_DTYPE_U8, 3, s3, NULL)),
                    TODRE_ERR_INVALID_ARGUMENT, "types");
    tt_assert_fails(NULL, todre_relevance_set_types(rel, tt_array_init(&t, u8, TODRE_DTYPE_U8, 2, s2, NULL)),
                    TODRE_ERR_INVALID_ARGUMENT, "types");
    tt_assert_fails(NULL, todre_relevance_set_types(rel, tt_array_init(&t, u8, TODRE_DTYPE_U8, 1, s0, NULL)),
                    TODRE_ERR_INVALID_ARGUMENT, "types");
    tt_array1(&t, u8, TODRE_DTYPE_U8, K);
    tt_assert_fails(NULL, todre_relevance_set_types(rel, tt_array_on(&t, kDLCUDA, 0)),
                    TODRE_ERR_INVALID_ARGUMENT, "types");
    const uint8_t bad_values[] = {3, 7, 255};
    for (int i = 0; i < 3; i++) {
        u8[K + 5] = bad_values[i];
        int64_t sb[2] = {2, K};
        tt_assert_fails(NULL, todre_relevance_set_types(rel, tt_array_init(&t, u8, TODRE_DTYPE_U8, 2, sb, NULL)),
                        TODRE_ERR_INVALID_ARGUMENT, "types");
    }
    /* Nothing was installed: observing still needs types. */
    int64_t s4[4] = {2, H, K, K};
    float *a2 = calloc(2 * H * K * K, sizeof(float));
    assert_non_null(a2);
    tt_array attn2_a;
    const DLTensor *attn2 = tt_array_init(&attn2_a, a2, TODRE_DTYPE_F32, 4, s4, NULL);
    tt_assert_fails(f->ctx, todre_relevance_observe_probs(f->ctx, rel, 3, attn2, NULL), TODRE_ERR_STATE, "types");
    int64_t count;
    tt_assert_fails(NULL, todre_relevance_keep_positions(rel, 0, NULL, &count), TODRE_ERR_STATE, "types");

    tt_assert_fails(NULL, todre_relevance_set_layout(NULL, 1, 1, 1), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_set_layout(rel, -1, 1, 1), TODRE_ERR_INVALID_ARGUMENT, "n_system");
    tt_assert_fails(NULL, todre_relevance_set_layout(rel, 1, -1, 1), TODRE_ERR_INVALID_ARGUMENT, "n_visual");
    tt_assert_fails(NULL, todre_relevance_set_layout(rel, 1, 1, -1), TODRE_ERR_INVALID_ARGUMENT, "n_text");
    tt_assert_fails(NULL, todre_relevance_set_layout(rel, 0, 0, 0), TODRE_ERR_INVALID_ARGUMENT, "layout");
    tt_assert_ok(todre_relevance_set_types(rel, ok1)); /* [K]: same for every sequence */
    tt_assert_ok(todre_relevance_observe_probs(f->ctx, rel, 3, attn2, NULL));
    /* bool (DLPack code 6, 8 bits) is accepted like uint8 */
    tt_array1(&t, u8, TODRE_DTYPE_U8, K);
    t.dl.dtype.code = 6;
    tt_assert_ok(todre_relevance_set_types(rel, &t.dl));
    free(a2);
    todre_relevance_destroy(rel);
}

/* observe_probs: handles, rank, shape, dtype, device; the decisions array. */
static void test_observe_probs_arguments(void **state)
{
    struct fx *f = *state;
    todre_context *ctx = f->ctx;
    tt_array good_a, d_a;
    const DLTensor *good = t3(&good_a, f->attn, TODRE_DTYPE_F32, H, K, K);
    int32_t d;
    const DLTensor *dec = tt_array1(&d_a, &d, TODRE_DTYPE_I32, 1);
    tt_assert_fails(NULL, todre_relevance_observe_probs(NULL, f->rel, 0, good, dec), TODRE_ERR_INVALID_ARGUMENT, "ctx");
    tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, NULL, 0, good, dec), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, f->rel, 0, NULL, dec), TODRE_ERR_INVALID_ARGUMENT, "attn:");
    int64_t s2[2] = {K, K}, s5[5] = {1, 1, H, K, K}, s4b[4] = {2, H, K / 2, K};
    tt_array bad[9];
    tt_array_init(&bad[0], f->attn, TODRE_DTYPE_F32, 2, s2, NULL);
    tt_array_init(&bad[1], f->attn, TODRE_DTYPE_F32, 5, s5, NULL);
    tt_array_init(&bad[2], f->attn, TODRE_DTYPE_F32, 4, s4b, NULL);
    t3(&bad[3], f->attn, TODRE_DTYPE_F32, H, K + 1, K - 1);
    t3(&bad[4], f->attn, TODRE_DTYPE_F32, 1, K + 2, K);
    t3(&bad[5], f->attn, TODRE_DTYPE_I32, H, K, K);
    t3(&bad[6], f->attn, TODRE_DTYPE_U8, H, K, K);
    t3(&bad[7], f->attn, TODRE_DTYPE_F32, H, K, K);
    tt_array_on(&bad[7], kDLCUDA, 0);
    t3(&bad[8], NULL, TODRE_DTYPE_F32, H, K, K); /* NULL data, not empty */
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        d = 99;
        tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, f->rel, 0, &bad[i].dl, dec),
                        TODRE_ERR_INVALID_ARGUMENT, "attn:");
        assert_int_equal(d, 99); /* outputs untouched on failure */
    }
    /* decisions: host int32 [B] */
    int64_t two = 2;
    int32_t d2[2] = {99, 99};
    tt_array bd[4];
    tt_array1(&bd[0], d2, TODRE_DTYPE_I64, 1);
    tt_array1(&bd[1], d2, TODRE_DTYPE_I32, 2);
    tt_array_init(&bd[2], d2, TODRE_DTYPE_I32, 0, &two, NULL);
    tt_array1(&bd[3], d2, TODRE_DTYPE_I32, 1);
    tt_array_on(&bd[3], kDLCUDA, 0);
    for (size_t i = 0; i < sizeof bd / sizeof *bd; i++) {
        tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, f->rel, 0, good, &bd[i].dl),
                        TODRE_ERR_INVALID_ARGUMENT, "decisions");
        assert_true(d2[0] == 99 && d2[1] == 99);
    }
    d = 99;
    tt_assert_ok(todre_relevance_observe_probs(ctx, f->rel, 0, good, dec));
    assert_true(d == TODRE_DECISION_KEEP || d == TODRE_DECISION_DROP);
    tt_assert_ok(todre_relevance_reset(f->rel, TODRE_RESET_STATE));
}

/* observe_qk: shapes, GQA divisibility, dtype agreement, scale. */
static void test_observe_qk_arguments(void **state)
{
    struct fx *f = *state;
    todre_context *ctx = f->ctx;
    tt_array qa, ka, t, u;
    const DLTensor *q = t3(&qa, f->q, TODRE_DTYPE_F32, H, K, DH);
    const DLTensor *k = t3(&ka, f->k, TODRE_DTYPE_F32, HKV, K, DH);
    tt_assert_fails(NULL, todre_relevance_observe_qk(NULL, f->rel, 0, q, k, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "ctx");
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, NULL, 0, q, k, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, NULL, k, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "q:");
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, NULL, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "k:");

    /* 3 % 2 != 0 */
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, t3(&t, f->q, TODRE_DTYPE_F32, 3, K, DH), k, 0, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "q:");
    /* 4 % 3 != 0 */
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, t3(&t, f->q, TODRE_DTYPE_F32, H, K, DH / 2),
                                                    t3(&u, f->k, TODRE_DTYPE_F32, 3, K, DH / 2), 0, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "q:");
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, t3(&t, f->q, TODRE_DTYPE_F32, 1, K, DH),
                                                    t3(&u, f->k, TODRE_DTYPE_F32, 2, K, DH), 0, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "q:"); /* fewer query than key heads */
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, t3(&u, f->k, TODRE_DTYPE_F32, HKV, K, DH / 2), 0, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "k:");
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, t3(&u, f->k, TODRE_DTYPE_F32, HKV, K + 1, DH), 0, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "k:");
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, t3(&t, f->q, TODRE_DTYPE_F32, 2, K + 1, DH), k, 0, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "q:");
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, t3(&u, f->k, TODRE_DTYPE_F16, HKV, K, DH), 0, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "k:");
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, t3(&t, f->q, TODRE_DTYPE_I64, H, K / 2, DH), k, 0, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "q:");
    int64_t s2[2] = {K, DH}, s4[4] = {1, HKV, K, DH};
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, tt_array_init(&t, f->q, TODRE_DTYPE_F32, 2, s2, NULL), k, 0, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "q:");
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, tt_array_init(&u, f->k, TODRE_DTYPE_F32, 4, s4, NULL), 0, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "k:");
    t3(&t, f->q, TODRE_DTYPE_F32, H, K, DH);
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, tt_array_on(&t, kDLCUDA, 0), k, 0, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "q:");

    const double bad_scale[] = {-1.0, -1e-300, NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 5; i++)
        tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, k, bad_scale[i], NULL),
                        TODRE_ERR_INVALID_ARGUMENT, "scale");
    tt_assert_ok(todre_relevance_observe_qk(ctx, f->rel, 0, q, k, 0.0, NULL));
    tt_assert_ok(todre_relevance_reset(f->rel, TODRE_RESET_STATE));
}

/* NaN or Inf anywhere in an observed sequence's input is NONFINITE naming
 * the tensor, in every dtype, including rows the formula does not use
 * (system queries) and padding-free strided views. */
static void test_nonfinite(void **state)
{
    struct fx *f = *state;
    todre_context *ctx = f->ctx;
    const float bad_values[] = {NAN, INFINITY, -INFINITY};
    const size_t attn_at[] = {0, (size_t)(2 * K * K + 9 * K + 3), (size_t)(H * K * K - 1)};
    tt_array ta, tb;
    for (int v = 0; v < 3; v++)
        for (int p = 0; p < 3; p++) {
            float *a = malloc(sizeof f->attn);
            assert_non_null(a);
            memcpy(a, f->attn, sizeof f->attn);
            a[attn_at[p]] = bad_values[v];
            tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, f->rel, 0, t3(&ta, a, TODRE_DTYPE_F32, H, K, K), NULL),
                            TODRE_ERR_NONFINITE, "attn:");
            free(a);
        }
    /* 16-bit inputs: f16 and bf16 Inf/NaN bit patterns. */
    uint16_t q16[H * K * DH], k16[HKV * K * DH];
    todre_dtype dts[2] = {TODRE_DTYPE_F16, TODRE_DTYPE_BF16};
    uint16_t inf_bits[2] = {0x7c00u, 0x7f80u}, nan_bits[2] = {0x7e00u, 0x7fc0u};
    for (int d = 0; d < 2; d++) {
        for (int i = 0; i < H * K * DH; i++)
            q16[i] = d ? todre_f32_to_bf16(f->q[i]) : todre_f32_to_f16(f->q[i]);
        for (int i = 0; i < HKV * K * DH; i++)
            k16[i] = d ? todre_f32_to_bf16(f->k[i]) : todre_f32_to_f16(f->k[i]);
        const DLTensor *q = t3(&ta, q16, dts[d], H, K, DH), *k = t3(&tb, k16, dts[d], HKV, K, DH);
        tt_assert_ok(todre_relevance_observe_qk(ctx, f->rel, 0, q, k, 0, NULL));
        tt_assert_ok(todre_relevance_reset(f->rel, TODRE_RESET_STATE));
        uint16_t save = q16[DH + 1]; /* head 0, query row 1: a system row */
        q16[DH + 1] = inf_bits[d];
        tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, k, 0, NULL), TODRE_ERR_NONFINITE, "q:");
        q16[DH + 1] = save;
        save = k16[HKV * K * DH - 1];
        k16[HKV * K * DH - 1] = nan_bits[d];
        tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, k, 0, NULL), TODRE_ERR_NONFINITE, "k:");
        k16[HKV * K * DH - 1] = save;
        /* attention probabilities in 16 bits */
        uint16_t *a16 = malloc(sizeof(uint16_t) * H * K * K);
        assert_non_null(a16);
        for (int i = 0; i < H * K * K; i++)
            a16[i] = d ? todre_f32_to_bf16(f->attn[i]) : todre_f32_to_f16(f->attn[i]);
        a16[5] = nan_bits[d];
        tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, f->rel, 0, t3(&ta, a16, dts[d], H, K, K), NULL),
                        TODRE_ERR_NONFINITE, "attn:");
        free(a16);
    }
    /* f32 q and k */
    float qc[H * K * DH], kc[HKV * K * DH];
    memcpy(qc, f->q, sizeof qc);
    memcpy(kc, f->k, sizeof kc);
    const DLTensor *q = t3(&ta, qc, TODRE_DTYPE_F32, H, K, DH), *k = t3(&tb, kc, TODRE_DTYPE_F32, HKV, K, DH);
    qc[3 * K * DH + 11 * DH + 7] = NAN;
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, k, 0, NULL), TODRE_ERR_NONFINITE, "q:");
    qc[3 * K * DH + 11 * DH + 7] = 0.0f;
    kc[K * DH + 2] = -INFINITY;
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, k, 0, NULL), TODRE_ERR_NONFINITE, "k:");
    kc[K * DH + 2] = 0.0f;
    /* Finite but huge: scale * q . k overflows float32. */
    for (int i = 0; i < H * K * DH; i++) qc[i] = 1e30f;
    for (int i = 0; i < HKV * K * DH; i++) kc[i] = 1e30f;
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, k, 1.0, NULL), TODRE_ERR_NONFINITE, "q, k:");
    /* The handle is still usable after the failures. */
    tt_array da;
    int32_t d = 0;
    tt_assert_ok(todre_relevance_observe_probs(ctx, f->rel, 0, t3(&ta, f->attn, TODRE_DTYPE_F32, H, K, K),
                                               tt_array1(&da, &d, TODRE_DTYPE_I32, 1)));
    assert_true(d == TODRE_DECISION_KEEP || d == TODRE_DECISION_DROP);
    tt_assert_ok(todre_relevance_reset(f->rel, TODRE_RESET_STATE));
}

/* ratios / drop_layer / keep_positions. */
static void test_query_arguments(void **state)
{
    struct fx *f = *state;
    double x, y;
    int64_t l, out[K], count;
    tt_array o;
    tt_assert_fails(NULL, todre_relevance_ratios(NULL, 0, 0, &x, &y), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_ratios(f->rel, 1, 0, &x, &y), TODRE_ERR_INVALID_ARGUMENT, "seq");
    tt_assert_fails(NULL, todre_relevance_ratios(f->rel, 0, 0, &x, &y), TODRE_ERR_STATE, "layer");
    tt_assert_fails(NULL, todre_relevance_drop_layer(NULL, 0, &l), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_drop_layer(f->rel, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "layer");
    tt_assert_fails(NULL, todre_relevance_drop_layer(f->rel, -1, &l), TODRE_ERR_INVALID_ARGUMENT, "seq");
    tt_assert_fails(NULL, todre_relevance_keep_positions(NULL, 0, tt_array1(&o, out, TODRE_DTYPE_I64, K), &count),
                    TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_keep_positions(f->rel, 0, tt_array1(&o, out, TODRE_DTYPE_I64, K), NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "count");
    tt_assert_fails(NULL, todre_relevance_keep_positions(f->rel, 1, tt_array1(&o, out, TODRE_DTYPE_I64, K), &count),
                    TODRE_ERR_INVALID_ARGUMENT, "seq");
    tt_assert_fails(NULL, todre_relevance_keep_positions(f->rel, 0, tt_array1(&o, out, TODRE_DTYPE_I64, 6), &count),
                    TODRE_ERR_INVALID_ARGUMENT, "out"); /* capacity below the count */
    tt_assert_fails(NULL, todre_relevance_keep_positions(f->rel, 0, tt_array1(&o, out, TODRE_DTYPE_I32, K), &count),
                    TODRE_ERR_INVALID_ARGUMENT, "out");
    int64_t sh2[2] = {1, K};
    tt_assert_fails(NULL, todre_relevance_keep_positions(f->rel, 0, tt_array_init(&o, out, TODRE_DTYPE_I64, 2, sh2, NULL),
                                                         &count),
                    TODRE_ERR_INVALID_ARGUMENT, "out");
    tt_array1(&o, out, TODRE_DTYPE_I64, K);
    tt_assert_fails(NULL, todre_relevance_keep_positions(f->rel, 0, tt_array_on(&o, kDLCUDA, 0), &count),
                    TODRE_ERR_INVALID_ARGUMENT, "out"); /* host only */
    tt_assert_ok(todre_relevance_keep_positions(f->rel, 0, tt_array1(&o, out, TODRE_DTYPE_I64, 7), &count));
    assert_int_equal(count, 7);
    /* A NULL ratio out-pointer is refused, as by every other getter, also
     * once the layer was observed; the other one is then untouched. */
    tt_array g;
    tt_assert_ok(todre_relevance_observe_probs(f->ctx, f->rel, 0, t3(&g, f->attn, TODRE_DTYPE_F32, H, K, K), NULL));
    y = -7.0;
    tt_assert_fails(NULL, todre_relevance_ratios(f->rel, 0, 0, NULL, &y), TODRE_ERR_INVALID_ARGUMENT,
                    "alpha_t2v");
    assert_true(y == -7.0);
    x = -7.0;
    tt_assert_fails(NULL, todre_relevance_ratios(f->rel, 0, 0, &x, NULL), TODRE_ERR_INVALID_ARGUMENT,
                    "alpha_v2t");
    assert_true(x == -7.0);
    tt_assert_ok(todre_relevance_ratios(f->rel, 0, 0, &x, &y));
    tt_assert_ok(todre_relevance_reset(f->rel, TODRE_RESET_STATE));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handle_arguments),
        cmocka_unit_test_setup_teardown(test_types_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_observe_probs_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_observe_qk_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nonfinite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_query_arguments, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
