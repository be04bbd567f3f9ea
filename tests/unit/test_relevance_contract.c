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

static todre_tensor *t3(void *data, todre_dtype dt, int64_t a, int64_t b, int64_t c)
{
    int64_t shape[3] = {a, b, c};
    return tt_tensor(data, dt, 3, shape, NULL);
}

/* create / destroy / tau / schedule / probe layers. */
static void test_handle_arguments(void **state)
{
    (void)state;
    todre_relevance *rel = (todre_relevance *)1;
    tt_assert_fails(NULL, todre_relevance_create(8, 1, NULL), TODRE_ERR_INVALID_ARGUMENT, "out");
    tt_assert_fails(NULL, todre_relevance_create(0, 1, &rel), TODRE_ERR_INVALID_ARGUMENT, "num_layers");
    assert_null(rel);
    tt_assert_fails(NULL, todre_relevance_create(-3, 1, &rel), TODRE_ERR_INVALID_ARGUMENT, "num_layers");
    tt_assert_fails(NULL, todre_relevance_create(8, 0, &rel), TODRE_ERR_INVALID_ARGUMENT, "batch");
    todre_relevance_destroy(NULL);

    tt_assert_ok(todre_relevance_create(8, 2, &rel));
    double tau;
    const double bad_tau[] = {-0.01, 1.01, NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 5; i++)
        tt_assert_fails(NULL, todre_relevance_set_tau(rel, bad_tau[i]), TODRE_ERR_INVALID_ARGUMENT, "tau");
    tt_assert_ok(todre_relevance_get_tau(rel, &tau));
    assert_true(tau == 0.10); /* unchanged by the failures */
    tt_assert_ok(todre_relevance_set_tau(rel, 0.0));
    tt_assert_ok(todre_relevance_set_tau(rel, 1.0));
    tt_assert_fails(NULL, todre_relevance_set_tau(NULL, 0.5), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_get_tau(NULL, &tau), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_get_tau(rel, NULL), TODRE_ERR_INVALID_ARGUMENT, "tau");

    tt_assert_fails(NULL, todre_relevance_set_schedule(NULL, TODRE_PROBE_LIST), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_set_schedule(rel, (todre_probe_schedule)2),
                    TODRE_ERR_INVALID_ARGUMENT, "schedule");
    tt_assert_fails(NULL, todre_relevance_set_schedule(rel, (todre_probe_schedule)-1),
                    TODRE_ERR_INVALID_ARGUMENT, "schedule");

    int64_t layers[3] = {1, 7, 1};
    tt_assert_fails(NULL, todre_relevance_set_probe_layers(NULL, layers, 1), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_set_probe_layers(rel, NULL, 1), TODRE_ERR_INVALID_ARGUMENT, "layers");
    tt_assert_fails(NULL, todre_relevance_set_probe_layers(rel, layers, 0), TODRE_ERR_INVALID_ARGUMENT, "count");
    int64_t bad[2] = {3, 8};
    tt_assert_fails(NULL, todre_relevance_set_probe_layers(rel, bad, 2), TODRE_ERR_INVALID_ARGUMENT, "layers");
    int is;
    tt_assert_ok(todre_relevance_is_probe(rel, 0, 3, &is));
    assert_int_equal(is, 0); /* the failed call changed nothing */
    tt_assert_ok(todre_relevance_set_probe_layers(rel, layers, 3)); /* duplicates are fine */
    tt_assert_ok(todre_relevance_is_probe(rel, 1, 7, &is));
    assert_int_equal(is, 1);

    tt_assert_fails(NULL, todre_relevance_is_probe(NULL, 0, 0, &is), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_is_probe(rel, 0, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "is_probe");
    tt_assert_fails(NULL, todre_relevance_is_probe(rel, 2, 0, &is), TODRE_ERR_INVALID_ARGUMENT, "seq");
    tt_assert_fails(NULL, todre_relevance_is_probe(rel, -1, 0, &is), TODRE_ERR_INVALID_ARGUMENT, "seq");
    tt_assert_fails(NULL, todre_relevance_reset(NULL), TODRE_ERR_INVALID_ARGUMENT, "rel");
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
    todre_tensor *ok1 = tt_tensor1(u8, TODRE_DTYPE_U8, K);
    tt_assert_fails(NULL, todre_relevance_set_types(NULL, ok1), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_set_types(rel, NULL), TODRE_ERR_INVALID_ARGUMENT, "types");
    todre_tensor *wrong_dt = tt_tensor1(f32, TODRE_DTYPE_F32, K);
    tt_assert_fails(NULL, todre_relevance_set_types(rel, wrong_dt), TODRE_ERR_INVALID_ARGUMENT, "types");
    int64_t s3[3] = {1, 2, K / 2}, s2[2] = {3, K / 3}, s0[1] = {0};
    todre_tensor *rank3 = tt_tensor(u8, TODRE_DTYPE_U8, 3, s3, NULL);
    tt_assert_fails(NULL, todre_relevance_set_types(rel, rank3), TODRE_ERR_INVALID_ARGUMENT, "types");
    todre_tensor *wrong_b = tt_tensor(u8, TODRE_DTYPE_U8, 2, s2, NULL);
    tt_assert_fails(NULL, todre_relevance_set_types(rel, wrong_b), TODRE_ERR_INVALID_ARGUMENT, "types");
    todre_tensor *empty = tt_tensor(u8, TODRE_DTYPE_U8, 1, s0, NULL);
    tt_assert_fails(NULL, todre_relevance_set_types(rel, empty), TODRE_ERR_INVALID_ARGUMENT, "types");
    todre_tensor *dev = NULL;
    int64_t sk[1] = {K};
    tt_assert_ok(todre_tensor_create(u8, TODRE_DTYPE_U8, TODRE_DEVICE_CUDA, 0, 1, sk, NULL, &dev));
    tt_assert_fails(NULL, todre_relevance_set_types(rel, dev), TODRE_ERR_INVALID_ARGUMENT, "types");
    const uint8_t bad_values[] = {3, 7, 255};
    for (int i = 0; i < 3; i++) {
        u8[K + 5] = bad_values[i];
        int64_t sb[2] = {2, K};
        todre_tensor *tb = tt_tensor(u8, TODRE_DTYPE_U8, 2, sb, NULL);
        tt_assert_fails(NULL, todre_relevance_set_types(rel, tb), TODRE_ERR_INVALID_ARGUMENT, "types");
        todre_tensor_destroy(tb);
    }
    /* Nothing was installed: observing still needs types. */
    todre_tensor *attn = t3(f->attn, TODRE_DTYPE_F32, H, K, K);
    int64_t s4[4] = {2, H, K, K};
    float *a2 = calloc(2 * H * K * K, sizeof(float));
    assert_non_null(a2);
    todre_tensor *attn2 = tt_tensor(a2, TODRE_DTYPE_F32, 4, s4, NULL);
    tt_assert_fails(f->ctx, todre_relevance_observe_probs(f->ctx, rel, 3, attn2, NULL), TODRE_ERR_STATE, "types");
    int64_t count;
    tt_assert_fails(NULL, todre_relevance_keep_positions(rel, 0, NULL, 0, &count), TODRE_ERR_STATE, "types");

    tt_assert_fails(NULL, todre_relevance_set_layout(NULL, 1, 1, 1), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_set_layout(rel, -1, 1, 1), TODRE_ERR_INVALID_ARGUMENT, "n_system");
    tt_assert_fails(NULL, todre_relevance_set_layout(rel, 1, -1, 1), TODRE_ERR_INVALID_ARGUMENT, "n_visual");
    tt_assert_fails(NULL, todre_relevance_set_layout(rel, 1, 1, -1), TODRE_ERR_INVALID_ARGUMENT, "n_text");
    tt_assert_fails(NULL, todre_relevance_set_layout(rel, 0, 0, 0), TODRE_ERR_INVALID_ARGUMENT, "layout");
    tt_assert_ok(todre_relevance_set_types(rel, ok1)); /* [K]: same for every sequence */
    tt_assert_ok(todre_relevance_observe_probs(f->ctx, rel, 3, attn2, NULL));
    todre_tensor_destroy(ok1);
    todre_tensor_destroy(wrong_dt);
    todre_tensor_destroy(rank3);
    todre_tensor_destroy(wrong_b);
    todre_tensor_destroy(empty);
    todre_tensor_destroy(dev);
    todre_tensor_destroy(attn);
    todre_tensor_destroy(attn2);
    free(a2);
    todre_relevance_destroy(rel);
}

/* observe_probs: handles, rank, shape, dtype, device. */
static void test_observe_probs_arguments(void **state)
{
    struct fx *f = *state;
    todre_context *ctx = f->ctx;
    todre_tensor *good = t3(f->attn, TODRE_DTYPE_F32, H, K, K);
    todre_decision d;
    tt_assert_fails(NULL, todre_relevance_observe_probs(NULL, f->rel, 0, good, &d), TODRE_ERR_INVALID_ARGUMENT, "ctx");
    tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, NULL, 0, good, &d), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, f->rel, 0, NULL, &d), TODRE_ERR_INVALID_ARGUMENT, "attn:");
    int64_t s2[2] = {K, K}, s5[5] = {1, 1, H, K, K}, s4b[4] = {2, H, K / 2, K};
    todre_tensor *r2 = tt_tensor(f->attn, TODRE_DTYPE_F32, 2, s2, NULL);
    todre_tensor *r5 = tt_tensor(f->attn, TODRE_DTYPE_F32, 5, s5, NULL);
    todre_tensor *b2 = tt_tensor(f->attn, TODRE_DTYPE_F32, 4, s4b, NULL);
    todre_tensor *wrong_k = t3(f->attn, TODRE_DTYPE_F32, H, K + 1, K - 1);
    todre_tensor *q_gt_k = t3(f->attn, TODRE_DTYPE_F32, 1, K + 2, K);
    todre_tensor *i32 = t3(f->attn, TODRE_DTYPE_I32, H, K, K);
    todre_tensor *u8 = t3(f->attn, TODRE_DTYPE_U8, H, K, K);
    todre_tensor *dev = NULL;
    int64_t s3[3] = {H, K, K};
    tt_assert_ok(todre_tensor_create(f->attn, TODRE_DTYPE_F32, TODRE_DEVICE_CUDA, 0, 3, s3, NULL, &dev));
    todre_tensor *bad[] = {r2, r5, b2, wrong_k, q_gt_k, i32, u8, dev};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        d = (todre_decision)99;
        tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, f->rel, 0, bad[i], &d),
                        TODRE_ERR_INVALID_ARGUMENT, "attn:");
        assert_int_equal(d, 99); /* outputs untouched on failure */
    }
    tt_assert_ok(todre_relevance_observe_probs(ctx, f->rel, 0, good, &d));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) todre_tensor_destroy(bad[i]);
    todre_tensor_destroy(good);
    tt_assert_ok(todre_relevance_reset(f->rel));
}

/* observe_qk: shapes, GQA divisibility, dtype agreement, scale. */
static void test_observe_qk_arguments(void **state)
{
    struct fx *f = *state;
    todre_context *ctx = f->ctx;
    todre_tensor *q = t3(f->q, TODRE_DTYPE_F32, H, K, DH);
    todre_tensor *k = t3(f->k, TODRE_DTYPE_F32, HKV, K, DH);
    tt_assert_fails(NULL, todre_relevance_observe_qk(NULL, f->rel, 0, q, k, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "ctx");
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, NULL, 0, q, k, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, NULL, k, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "q:");
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, NULL, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "k:");

    todre_tensor *q3heads = t3(f->q, TODRE_DTYPE_F32, 3, K, DH);     /* 3 % 2 != 0 */
    todre_tensor *k3heads = t3(f->k, TODRE_DTYPE_F32, 3, K, DH / 2); /* 4 % 3 != 0 */
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q3heads, k, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "q:");
    todre_tensor *q_dh = t3(f->q, TODRE_DTYPE_F32, H, K, DH / 2);
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q_dh, k3heads, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "q:");
    todre_tensor_destroy(q_dh);
    todre_tensor *qsmall = t3(f->q, TODRE_DTYPE_F32, 1, K, DH);
    todre_tensor *k2 = t3(f->k, TODRE_DTYPE_F32, 2, K, DH);
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, qsmall, k2, 0, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "q:"); /* fewer query than key heads */
    todre_tensor *k_dh = t3(f->k, TODRE_DTYPE_F32, HKV, K, DH / 2);
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, k_dh, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "k:");
    todre_tensor *k_K = t3(f->k, TODRE_DTYPE_F32, HKV, K + 1, DH);
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, k_K, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "k:");
    todre_tensor *q_Q = t3(f->q, TODRE_DTYPE_F32, 2, K + 1, DH);
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q_Q, k, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "q:");
    todre_tensor *k_f16 = t3(f->k, TODRE_DTYPE_F16, HKV, K, DH);
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, k_f16, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "k:");
    todre_tensor *q_i64 = t3(f->q, TODRE_DTYPE_I64, H, K / 2, DH);
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q_i64, k, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "q:");
    int64_t s2[2] = {K, DH}, s4[4] = {1, HKV, K, DH};
    todre_tensor *q_r2 = tt_tensor(f->q, TODRE_DTYPE_F32, 2, s2, NULL);
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q_r2, k, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "q:");
    todre_tensor *k_r4 = tt_tensor(f->k, TODRE_DTYPE_F32, 4, s4, NULL);
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, k_r4, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "k:");
    todre_tensor *qdev = NULL;
    int64_t sq[3] = {H, K, DH};
    tt_assert_ok(todre_tensor_create(f->q, TODRE_DTYPE_F32, TODRE_DEVICE_CUDA, 0, 3, sq, NULL, &qdev));
    tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, qdev, k, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "q:");

    const double bad_scale[] = {-1.0, -1e-300, NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 5; i++)
        tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, k, bad_scale[i], NULL),
                        TODRE_ERR_INVALID_ARGUMENT, "scale");
    tt_assert_ok(todre_relevance_observe_qk(ctx, f->rel, 0, q, k, 0.0, NULL));
    todre_tensor *all[] = {q, k, q3heads, k3heads, qsmall, k2, k_dh, k_K, q_Q, k_f16, q_i64, q_r2, k_r4, qdev};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) todre_tensor_destroy(all[i]);
    tt_assert_ok(todre_relevance_reset(f->rel));
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
    for (int v = 0; v < 3; v++)
        for (int p = 0; p < 3; p++) {
            float *a = malloc(sizeof f->attn);
            assert_non_null(a);
            memcpy(a, f->attn, sizeof f->attn);
            a[attn_at[p]] = bad_values[v];
            todre_tensor *t = t3(a, TODRE_DTYPE_F32, H, K, K);
            tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, f->rel, 0, t, NULL),
                            TODRE_ERR_NONFINITE, "attn:");
            todre_tensor_destroy(t);
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
        todre_tensor *q = t3(q16, dts[d], H, K, DH), *k = t3(k16, dts[d], HKV, K, DH);
        tt_assert_ok(todre_relevance_observe_qk(ctx, f->rel, 0, q, k, 0, NULL));
        tt_assert_ok(todre_relevance_reset(f->rel));
        uint16_t save = q16[DH + 1]; /* head 0, query row 1: a system row */
        q16[DH + 1] = inf_bits[d];
        tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, k, 0, NULL), TODRE_ERR_NONFINITE, "q:");
        q16[DH + 1] = save;
        save = k16[HKV * K * DH - 1];
        k16[HKV * K * DH - 1] = nan_bits[d];
        tt_assert_fails(ctx, todre_relevance_observe_qk(ctx, f->rel, 0, q, k, 0, NULL), TODRE_ERR_NONFINITE, "k:");
        k16[HKV * K * DH - 1] = save;
        todre_tensor_destroy(q);
        todre_tensor_destroy(k);
        /* attention probabilities in 16 bits */
        uint16_t *a16 = malloc(sizeof(uint16_t) * H * K * K);
        assert_non_null(a16);
        for (int i = 0; i < H * K * K; i++)
            a16[i] = d ? todre_f32_to_bf16(f->attn[i]) : todre_f32_to_f16(f->attn[i]);
        a16[5] = nan_bits[d];
        todre_tensor *t = t3(a16, dts[d], H, K, K);
        tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, f->rel, 0, t, NULL), TODRE_ERR_NONFINITE, "attn:");
        todre_tensor_destroy(t);
        free(a16);
    }
    /* f32 q and k */
    float qc[H * K * DH], kc[HKV * K * DH];
    memcpy(qc, f->q, sizeof qc);
    memcpy(kc, f->k, sizeof kc);
    todre_tensor *q = t3(qc, TODRE_DTYPE_F32, H, K, DH), *k = t3(kc, TODRE_DTYPE_F32, HKV, K, DH);
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
    todre_tensor_destroy(q);
    todre_tensor_destroy(k);
    /* The handle is still usable after the failures. */
    todre_tensor *good = t3(f->attn, TODRE_DTYPE_F32, H, K, K);
    todre_decision d = (todre_decision)0;
    tt_assert_ok(todre_relevance_observe_probs(ctx, f->rel, 0, good, &d));
    assert_true(d == TODRE_DECISION_KEEP || d == TODRE_DECISION_DROP);
    todre_tensor_destroy(good);
    tt_assert_ok(todre_relevance_reset(f->rel));
}

/* ratios / drop_layer / keep_positions. */
static void test_query_arguments(void **state)
{
    struct fx *f = *state;
    double x, y;
    int64_t l, out[K], count;
    tt_assert_fails(NULL, todre_relevance_ratios(NULL, 0, 0, &x, &y), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_ratios(f->rel, 1, 0, &x, &y), TODRE_ERR_INVALID_ARGUMENT, "seq");
    tt_assert_fails(NULL, todre_relevance_ratios(f->rel, 0, 0, &x, &y), TODRE_ERR_STATE, "layer");
    tt_assert_fails(NULL, todre_relevance_drop_layer(NULL, 0, &l), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_drop_layer(f->rel, 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "layer");
    tt_assert_fails(NULL, todre_relevance_drop_layer(f->rel, -1, &l), TODRE_ERR_INVALID_ARGUMENT, "seq");
    tt_assert_fails(NULL, todre_relevance_keep_positions(NULL, 0, out, K, &count), TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_keep_positions(f->rel, 0, out, K, NULL), TODRE_ERR_INVALID_ARGUMENT, "count");
    tt_assert_fails(NULL, todre_relevance_keep_positions(f->rel, 1, out, K, &count), TODRE_ERR_INVALID_ARGUMENT, "seq");
    tt_assert_fails(NULL, todre_relevance_keep_positions(f->rel, 0, out, 6, &count), TODRE_ERR_INVALID_ARGUMENT, "capacity");
    tt_assert_ok(todre_relevance_keep_positions(f->rel, 0, out, 7, &count));
    assert_int_equal(count, 7);
    /* A NULL ratio out-pointer is allowed once the layer was observed. */
    todre_tensor *good = t3(f->attn, TODRE_DTYPE_F32, H, K, K);
    tt_assert_ok(todre_relevance_observe_probs(f->ctx, f->rel, 0, good, NULL));
    tt_assert_ok(todre_relevance_ratios(f->rel, 0, 0, NULL, &y));
    tt_assert_ok(todre_relevance_ratios(f->rel, 0, 0, &x, NULL));
    todre_tensor_destroy(good);
    tt_assert_ok(todre_relevance_reset(f->rel));
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
