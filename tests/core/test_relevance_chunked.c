/* Stage 2 over a chunked prefill: a layer observed chunk by chunk (keys
 * [0, end), queries [start, end)) gives the ratios of the whole prefill,
 * checked against a float64 evaluation of the paper's formula written here
 * from docs/semantics.md, for the probability and the Q/K paths, two layouts
 * (question last and question first) in one batch. Earlier chunks return
 * PENDING and have no ratios yet; chunks out of order are a STATE error
 * naming the tensor; reset forgets pending chunks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "todre_test.h"

#define B 2
#define H 4
#define HKV 2
#define K 50
#define DH 16
#define LAYERS 8 /* default probe layer: floor(7 * 8 / 8) = 7 */

static const int64_t CHUNK_END[3] = {20, 37, 50};

struct fixture {
    uint8_t types[B * K];
    float attn[B * H * K * K]; /* [B, H, Q = K, K], causal rows summing to 1 */
    float q[B * H * K * DH], k[B * HKV * K * DH];
};

static void make_types(uint8_t *t)
{
    for (int j = 0; j < K; j++) {
        t[j] = j < 3 ? TODRE_TOKEN_SYSTEM : j < 33 ? TODRE_TOKEN_VISUAL : TODRE_TOKEN_TEXT;
        t[K + j] = j < 2 ? TODRE_TOKEN_SYSTEM : j < 10 ? TODRE_TOKEN_TEXT
                 : j < 40 ? TODRE_TOKEN_VISUAL : TODRE_TOKEN_TEXT;
    }
}

static void make_fixture(struct fixture *f)
{
    make_types(f->types);
    tt_rng r = {2024};
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < K; i++) {
                double row[K], z = 0;
                for (int j = 0; j < K; j++) z += row[j] = j <= i ? exp(1.5 * tt_rng_normal(&r)) : 0;
                for (int j = 0; j < K; j++)
                    f->attn[((b * H + h) * K + i) * K + j] = (float)(row[j] / z);
            }
    for (size_t i = 0; i < sizeof f->q / sizeof f->q[0]; i++) f->q[i] = (float)tt_rng_normal(&r);
    for (size_t i = 0; i < sizeof f->k / sizeof f->k[0]; i++) f->k[i] = (float)tt_rng_normal(&r);
}

/* alpha_t2v = sum over text queries and heads of the attention to visual
 * keys / the same over all keys; alpha_v2t likewise with the roles swapped.
 * A[b][h][i][j] comes from get(); the causal rows are the whole prefill. */
static void reference(const struct fixture *f, int from_qk, double out[B][2])
{
    for (int b = 0; b < B; b++) {
        double num[2] = {0, 0}, den[2] = {0, 0};
        const uint8_t *t = f->types + b * K;
        for (int h = 0; h < H; h++)
            for (int i = 0; i < K; i++) {
                int which = t[i] == TODRE_TOKEN_TEXT ? 0 : t[i] == TODRE_TOKEN_VISUAL ? 1 : -1;
                if (which < 0) continue;
                uint8_t target = which == 0 ? TODRE_TOKEN_VISUAL : TODRE_TOKEN_TEXT;
                double a[K], z = 0, m = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    if (from_qk) {
                        double s = 0;
                        for (int e = 0; e < DH; e++)
                            s += (double)f->q[((b * H + h) * K + i) * DH + e] *
                                 f->k[((b * HKV + h / (H / HKV)) * K + j) * DH + e];
                        a[j] = s / sqrt((double)DH);
                        if (a[j] > m) m = a[j];
                    } else {
                        a[j] = f->attn[((b * H + h) * K + i) * K + j];
                    }
                }
                if (from_qk) {
                    for (int j = 0; j <= i; j++) z += a[j] = exp(a[j] - m);
                    for (int j = 0; j <= i; j++) a[j] /= z;
                }
                for (int j = 0; j <= i; j++) {
                    den[which] += a[j];
                    if (t[j] == target) num[which] += a[j];
                }
            }
        out[b][0] = den[0] > 0 ? num[0] / den[0] : 0;
        out[b][1] = den[1] > 0 ? num[1] / den[1] : 0;
    }
}

static todre_relevance *make_rel(const struct fixture *f)
{
    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(LAYERS, B, &rel));
    int64_t shape[2] = {B, K};
    tt_array t;
    tt_assert_ok(todre_relevance_set_types(
        rel, tt_array_init(&t, (void *)f->types, TODRE_DTYPE_U8, 2, shape, NULL)));
    return rel;
}

/* Observe chunk c of layer 7 (views into the full arrays, no copies). */
static todre_status observe_chunk(todre_context *ctx, todre_relevance *rel, struct fixture *f,
                                  int from_qk, int64_t start, int64_t end, int32_t *dec)
{
    int64_t Q = end - start;
    tt_array d;
    const DLTensor *decisions = tt_array1(&d, dec, TODRE_DTYPE_I32, B);
    if (!from_qk) {
        int64_t shape[4] = {B, H, Q, end}, str[4] = {H * K * K, K * K, K, 1};
        tt_array a;
        return todre_relevance_observe_probs(
            ctx, rel, 7, tt_array_init(&a, f->attn + start * K, TODRE_DTYPE_F32, 4, shape, str),
            decisions);
    }
    int64_t qs[4] = {B, H, Q, DH}, qst[4] = {H * K * DH, K * DH, DH, 1};
    int64_t ks[4] = {B, HKV, end, DH}, kst[4] = {HKV * K * DH, K * DH, DH, 1};
    tt_array q, k;
    return todre_relevance_observe_qk(
        ctx, rel, 7, tt_array_init(&q, f->q + start * DH, TODRE_DTYPE_F32, 4, qs, qst),
        tt_array_init(&k, f->k, TODRE_DTYPE_F32, 4, ks, kst), 0.0, decisions);
}

static void chunked_equals_whole(int from_qk)
{
    struct fixture *f = malloc(sizeof *f);
    assert_non_null(f);
    make_fixture(f);
    double want[B][2];
    reference(f, from_qk, want);
    /* The question-first sequence has visual queries that see text. */
    assert_true(want[1][1] > 0.0 && want[0][1] == 0.0);

    todre_context *ctx = tt_cpu_context();
    todre_relevance *rel = make_rel(f);
    double tau = 0.5 * (want[0][0] + want[1][0]);
    tt_assert_ok(todre_relevance_set_double(rel, TODRE_RELEVANCE_TAU, tau));
    int32_t dec[B];
    int64_t start = 0;
    for (int c = 0; c < 3; c++) {
        tt_assert_ok(observe_chunk(ctx, rel, f, from_qk, start, CHUNK_END[c], dec));
        if (c < 2) {
            for (int b = 0; b < B; b++) assert_int_equal(dec[b], TODRE_DECISION_PENDING);
            double t2v, v2t;
            assert_int_equal(todre_relevance_ratios(rel, 0, 7, &t2v, &v2t), TODRE_ERR_STATE);
            assert_non_null(strstr(todre_last_error(), "pending"));
        }
        start = CHUNK_END[c];
    }
    for (int b = 0; b < B; b++) {
        double t2v, v2t;
        tt_assert_ok(todre_relevance_ratios(rel, b, 7, &t2v, &v2t));
        if (fabs(t2v - want[b][0]) > 1e-5 * (1 + want[b][0]) ||
            fabs(v2t - want[b][1]) > 1e-5 * (1 + want[b][1]))
            fail_msg("%s seq %d: (%.9g, %.9g), reference (%.9g, %.9g)", from_qk ? "qk" : "probs", b,
                     t2v, v2t, want[b][0], want[b][1]);
        int drop = want[b][0] < tau && want[b][1] < tau;
        assert_int_equal(dec[b], drop ? TODRE_DECISION_DROP : TODRE_DECISION_KEEP);
    }
    todre_relevance_destroy(rel);
    todre_context_destroy(ctx);
    free(f);
}

static void test_probs_chunked(void **state)
{
    (void)state;
    chunked_equals_whole(0);
}

static void test_qk_chunked(void **state)
{
    (void)state;
    chunked_equals_whole(1);
}

/* A chunk that does not start where the previous one ended is refused and
 * changes nothing; reset forgets the pending chunk; a later full prefill
 * then decides alone. */
static void test_chunk_order(void **state)
{
    (void)state;
    struct fixture *f = malloc(sizeof *f);
    assert_non_null(f);
    make_fixture(f);
    double want[B][2];
    reference(f, 0, want);
    todre_context *ctx = tt_cpu_context();
    todre_relevance *rel = make_rel(f);
    int32_t dec[B];
    tt_assert_ok(observe_chunk(ctx, rel, f, 0, 0, 20, dec));
    tt_assert_fails(ctx, observe_chunk(ctx, rel, f, 0, 37, 50, dec), TODRE_ERR_STATE, "attn");
    tt_assert_fails(ctx, observe_chunk(ctx, rel, f, 0, 0, 50, dec), TODRE_ERR_STATE, "attn");
    tt_assert_ok(observe_chunk(ctx, rel, f, 0, 20, 37, dec));
    assert_int_equal(dec[0], TODRE_DECISION_PENDING);
    tt_assert_ok(todre_relevance_reset(rel, TODRE_RESET_STATE));
    tt_assert_ok(observe_chunk(ctx, rel, f, 0, 0, 50, dec));
    for (int b = 0; b < B; b++) {
        double t2v, v2t;
        tt_assert_ok(todre_relevance_ratios(rel, b, 7, &t2v, &v2t));
        assert_true(fabs(t2v - want[b][0]) <= 1e-5 * (1 + want[b][0]));
        assert_true(fabs(v2t - want[b][1]) <= 1e-5 * (1 + want[b][1]));
    }
    /* Keys beyond the types are still an error naming the tensor. */
    int64_t shape[3] = {H, 1, K + 1};
    todre_relevance *one = NULL;
    tt_assert_ok(todre_relevance_create(LAYERS, 1, &one));
    tt_assert_ok(todre_relevance_set_layout(one, 2, 20, K - 22));
    tt_array a;
    tt_assert_fails(ctx, todre_relevance_observe_probs(
                             ctx, one, 7, tt_array_init(&a, f->attn, TODRE_DTYPE_F32, 3, shape, NULL),
                             NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "attn");
    todre_relevance_destroy(one);
    todre_relevance_destroy(rel);
    todre_context_destroy(ctx);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probs_chunked),
        cmocka_unit_test(test_qk_chunked),
        cmocka_unit_test(test_chunk_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
