/* Stage-2 decisions through the public API: the strict threshold on both
 * ratios, probe schedules (LIST and UNTIL_DROP), first deciding layer wins,
 * no-op layers, keep positions, set_layout, and closed-form ratios of
 * uniform causal attention on both paths.
 *
 * Inputs are built by hand so that the expected ratios follow from the
 * paper's formula by counting, with no reference code involved. */
#include "todre_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { S = TODRE_TOKEN_SYSTEM, V = TODRE_TOKEN_VISUAL, T = TODRE_TOKEN_TEXT };

#define H 2

/* Probabilities [H, K, K] (Q = K): a text query that sees a visual key puts
 * w_t on the first one and the rest on itself; a visual query that sees a
 * text key puts w_v on the first one; every other row attends to itself.
 * So alpha_t2v = w_t * (text rows seeing a visual key) / (text rows), and
 * likewise alpha_v2t; with powers of two the ratios are exact. */
static float *crafted_probs(const uint8_t *types, int64_t K, float w_t, float w_v)
{
    float *a = calloc((size_t)(H * K * K), sizeof *a);
    assert_non_null(a);
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < K; i++) {
            float *row = a + (h * K + i) * K;
            uint8_t want = types[i] == T ? V : types[i] == V ? T : 255;
            float w = types[i] == T ? w_t : w_v;
            int64_t j = 0;
            while (j < i && types[j] != want) j++;
            if (want != 255 && j < i) {
                row[j] = w;
                row[i] = 1.0f - w;
            } else {
                row[i] = 1.0f;
            }
        }
    return a;
}

static const DLTensor *probs_tensor(tt_array *t, float *a, int64_t K)
{
    return tt_array3(t, a, TODRE_DTYPE_F32, H, K, K);
}

static todre_relevance *handle(int64_t L, int64_t B, const uint8_t *types, int64_t K)
{
    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(L, B, &rel));
    tt_array t;
    tt_assert_ok(todre_relevance_set_types(rel, tt_array1(&t, (void *)types, TODRE_DTYPE_U8, K)));
    return rel;
}

static void set_tau(todre_relevance *rel, double tau)
{
    tt_assert_ok(todre_relevance_set_double(rel, TODRE_RELEVANCE_TAU, tau));
}

static void set_layers(todre_relevance *rel, int64_t *layers, int64_t count)
{
    tt_array t;
    tt_assert_ok(todre_relevance_set_probe_layers(rel, tt_array1(&t, layers, TODRE_DTYPE_I64, count)));
}

static int32_t observe(todre_context *ctx, todre_relevance *rel, int64_t layer, float *a, int64_t K)
{
    tt_array t, d;
    int32_t dec = -1;
    tt_assert_ok(todre_relevance_observe_probs(ctx, rel, layer, probs_tensor(&t, a, K),
                                               tt_array1(&d, &dec, TODRE_DTYPE_I32, 1)));
    return dec;
}

/* keep_positions into a host int64 [cap] array (NULL data when cap is 0). */
static todre_status keep_positions(const todre_relevance *rel, int64_t seq, int64_t *out,
                                   int64_t cap, int64_t *count)
{
    tt_array t;
    return todre_relevance_keep_positions(rel, seq, out ? tt_array1(&t, out, TODRE_DTYPE_I64, cap)
                                                        : NULL, count);
}

/* Drop iff both ratios are strictly below tau, tested at tau = the ratio
 * (keep) and the next double above it (drop), on each ratio in turn. */
static void test_threshold_strict_both_sides(void **state)
{
    (void)state;
    static const uint8_t std_layout[] = {S, V, V, T, T, T, T};     /* t2v = w_t, v2t = 0 */
    static const uint8_t text_first[] = {T, T, T, T, V, V, V, V}; /* t2v = 0, v2t = w_v */
    const uint8_t *layouts[2] = {std_layout, text_first};
    int64_t Ks[2] = {7, 8};
    todre_context *ctx = tt_cpu_context();
    for (int l = 0; l < 2; l++) {
        int64_t K = Ks[l];
        float *a = crafted_probs(layouts[l], K, 0.25f, 0.25f);
        double taus[2] = {0.25, nextafter(0.25, 1.0)};
        int32_t want[2] = {TODRE_DECISION_KEEP, TODRE_DECISION_DROP};
        for (int s = 0; s < 2; s++) {
            todre_relevance *rel = handle(1, 1, layouts[l], K);
            set_tau(rel, taus[s]);
            assert_int_equal(observe(ctx, rel, 0, a, K), want[s]);
            double t2v, v2t;
            tt_assert_ok(todre_relevance_ratios(rel, 0, 0, &t2v, &v2t));
            assert_true(l == 0 ? (t2v == 0.25 && v2t == 0.0) : (t2v == 0.0 && v2t == 0.25));
            int64_t drop;
            tt_assert_ok(todre_relevance_drop_layer(rel, 0, &drop));
            assert_int_equal(drop, want[s] == TODRE_DECISION_DROP ? 0 : -1);
            todre_relevance_destroy(rel);
        }
        free(a);
    }
    todre_context_destroy(ctx);
}

/* One ratio below tau is not enough; with tau = 0 nothing ever drops, not
 * even ratios of exactly 0. */
static void test_threshold_needs_both(void **state)
{
    (void)state;
    static const uint8_t types[] = {T, T, V, V, V, V, T, T}; /* t2v = w_t / 2, v2t = w_v */
    todre_context *ctx = tt_cpu_context();
    float *a = crafted_probs(types, 8, 0.125f, 0.5f); /* t2v = 1/16, v2t = 1/2 */
    todre_relevance *rel = handle(1, 1, types, 8);
    assert_int_equal(observe(ctx, rel, 0, a, 8), TODRE_DECISION_KEEP);
    double t2v, v2t, tau;
    tt_assert_ok(todre_relevance_ratios(rel, 0, 0, &t2v, &v2t));
    assert_true(t2v == 0.0625 && v2t == 0.5);
    tt_assert_ok(todre_relevance_get_double(rel, TODRE_RELEVANCE_TAU, &tau));
    assert_true(tau == 0.10);
    set_tau(rel, 0.75);
    tt_assert_ok(todre_relevance_reset(rel, TODRE_RESET_STATE));
    assert_int_equal(observe(ctx, rel, 0, a, 8), TODRE_DECISION_DROP);
    free(a);

    a = crafted_probs(types, 8, 0.0f, 0.0f); /* both ratios exactly 0 */
    set_tau(rel, 0.0);
    tt_assert_ok(todre_relevance_reset(rel, TODRE_RESET_STATE));
    assert_int_equal(observe(ctx, rel, 0, a, 8), TODRE_DECISION_KEEP);
    free(a);
    todre_relevance_destroy(rel);
    todre_context_destroy(ctx);
}

static float *nan_probs(int64_t K)
{
    float *a = malloc(sizeof(float) * (size_t)(H * K * K));
    assert_non_null(a);
    for (int64_t i = 0; i < H * K * K; i++) a[i] = NAN;
    return a;
}

static const uint8_t sched_types[] = {S, V, V, T, T, T, T};
#define SK 7

/* LIST: only listed layers are computed (a NaN tensor elsewhere is not even
 * read), the first deciding layer is the drop layer, later layers are
 * ALREADY_DROPPED, and unprobed layers have no ratios. */
static void test_schedule_list(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    float *keep = crafted_probs(sched_types, SK, 0.5f, 0.0f);
    float *drop = crafted_probs(sched_types, SK, 0.0625f, 0.0f);
    float *nan = nan_probs(SK);
    todre_relevance *rel = handle(8, 1, sched_types, SK);
    int is;
    for (int64_t l = 0; l < 8; l++) {
        tt_assert_ok(todre_relevance_is_probe(rel, 0, l, &is));
        assert_int_equal(is, l == 7); /* default: floor(7 * 8 / 8) */
    }
    int64_t got[4] = {-1, -1, -1, -1}, count = -1;
    tt_array g;
    tt_assert_ok(todre_relevance_get_probe_layers(rel, NULL, &count));
    assert_int_equal(count, 1);
    tt_assert_ok(todre_relevance_get_probe_layers(rel, tt_array1(&g, got, TODRE_DTYPE_I64, 4), &count));
    assert_int_equal(count, 1);
    assert_int_equal(got[0], 7);
    int64_t layers[3] = {5, 2, 5}; /* any order, duplicates ignored */
    set_layers(rel, layers, 3);
    tt_assert_ok(todre_relevance_get_probe_layers(rel, tt_array1(&g, got, TODRE_DTYPE_I64, 4), &count));
    assert_int_equal(count, 2); /* ascending and distinct */
    assert_int_equal(got[0], 2);
    assert_int_equal(got[1], 5);
    assert_int_equal(got[2], -1); /* beyond count: untouched */
    count = -1;
    tt_assert_fails(NULL, todre_relevance_get_probe_layers(rel, tt_array1(&g, got, TODRE_DTYPE_I64, 1),
                                                           &count),
                    TODRE_ERR_INVALID_ARGUMENT, "out");
    assert_int_equal(count, 2); /* written also when out is too small */
    int32_t want[8] = {TODRE_DECISION_NOT_PROBED, TODRE_DECISION_NOT_PROBED,
                              TODRE_DECISION_KEEP, TODRE_DECISION_NOT_PROBED,
                              TODRE_DECISION_NOT_PROBED, TODRE_DECISION_DROP,
                              TODRE_DECISION_ALREADY_DROPPED, TODRE_DECISION_ALREADY_DROPPED};
    for (int64_t l = 0; l < 8; l++) {
        float *a = l == 2 ? keep : l == 5 ? drop : nan;
        assert_int_equal(observe(ctx, rel, l, a, SK), want[l]);
    }
    int64_t d;
    tt_assert_ok(todre_relevance_drop_layer(rel, 0, &d));
    assert_int_equal(d, 5);
    double t2v, v2t;
    tt_assert_ok(todre_relevance_ratios(rel, 0, 2, &t2v, &v2t));
    assert_true(t2v == 0.5 && v2t == 0.0);
    tt_assert_ok(todre_relevance_ratios(rel, 0, 5, &t2v, &v2t));
    assert_true(t2v == 0.0625);
    tt_assert_fails(NULL, todre_relevance_ratios(rel, 0, 3, &t2v, &v2t), TODRE_ERR_STATE, "layer");
    tt_assert_fails(NULL, todre_relevance_ratios(rel, 0, 6, &t2v, &v2t), TODRE_ERR_STATE, "layer");

    /* Both listed layers would drop: the first one wins. */
    tt_assert_ok(todre_relevance_reset(rel, TODRE_RESET_STATE));
    tt_assert_ok(todre_relevance_drop_layer(rel, 0, &d));
    assert_int_equal(d, -1);
    assert_int_equal(observe(ctx, rel, 2, drop, SK), TODRE_DECISION_DROP);
    assert_int_equal(observe(ctx, rel, 5, drop, SK), TODRE_DECISION_ALREADY_DROPPED);
    tt_assert_ok(todre_relevance_drop_layer(rel, 0, &d));
    assert_int_equal(d, 2);
    tt_assert_ok(todre_relevance_is_probe(rel, 0, 5, &is));
    assert_int_equal(is, 0);
    todre_relevance_destroy(rel);
    free(keep);
    free(drop);
    free(nan);
    todre_context_destroy(ctx);
}

/* UNTIL_DROP: every layer from the smallest listed one on, until one drops. */
static void test_schedule_until_drop(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    float *keep = crafted_probs(sched_types, SK, 0.5f, 0.0f);
    float *drop = crafted_probs(sched_types, SK, 0.0625f, 0.0f);
    float *nan = nan_probs(SK);
    todre_relevance *rel = handle(8, 1, sched_types, SK);
    int64_t first = 3;
    set_layers(rel, &first, 1);
    tt_assert_ok(todre_relevance_set_int(rel, TODRE_RELEVANCE_SCHEDULE, TODRE_PROBE_UNTIL_DROP));
    int is;
    for (int64_t l = 0; l < 8; l++) {
        tt_assert_ok(todre_relevance_is_probe(rel, 0, l, &is));
        assert_int_equal(is, l >= 3);
    }
    int32_t want[8] = {TODRE_DECISION_NOT_PROBED, TODRE_DECISION_NOT_PROBED,
                              TODRE_DECISION_NOT_PROBED, TODRE_DECISION_KEEP,
                              TODRE_DECISION_KEEP, TODRE_DECISION_DROP,
                              TODRE_DECISION_ALREADY_DROPPED, TODRE_DECISION_ALREADY_DROPPED};
    for (int64_t l = 0; l < 8; l++) {
        float *a = l < 3 || l > 5 ? nan : l == 5 ? drop : keep;
        assert_int_equal(observe(ctx, rel, l, a, SK), want[l]);
    }
    int64_t d;
    tt_assert_ok(todre_relevance_drop_layer(rel, 0, &d));
    assert_int_equal(d, 5);
    tt_assert_ok(todre_relevance_is_probe(rel, 0, 6, &is));
    assert_int_equal(is, 0);
    todre_relevance_destroy(rel);
    free(keep);
    free(drop);
    free(nan);
    todre_context_destroy(ctx);
}

/* Batched: each sequence has its own state; a dropped sequence's data is
 * not read at later layers. */
static void test_batch_per_sequence(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    float *drop = crafted_probs(sched_types, SK, 0.0625f, 0.0f);
    float *keep = crafted_probs(sched_types, SK, 0.5f, 0.0f);
    float *nan = nan_probs(SK);
    size_t one = (size_t)(H * SK * SK);
    float *both = malloc(2 * one * sizeof *both);
    assert_non_null(both);
    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(4, 2, &rel));
    tt_assert_ok(todre_relevance_set_layout(rel, 1, 2, 4)); /* = sched_types */
    tt_assert_ok(todre_relevance_set_int(rel, TODRE_RELEVANCE_SCHEDULE, TODRE_PROBE_UNTIL_DROP));
    int64_t first = 1;
    set_layers(rel, &first, 1);
    int64_t shape[4] = {2, H, SK, SK};
    tt_array ta, da;
    const DLTensor *t = tt_array_init(&ta, both, TODRE_DTYPE_F32, 4, shape, NULL);
    int32_t dec[2];
    const DLTensor *decisions = tt_array1(&da, dec, TODRE_DTYPE_I32, 2);

    memcpy(both, drop, one * sizeof *both);
    memcpy(both + one, keep, one * sizeof *both);
    tt_assert_ok(todre_relevance_observe_probs(ctx, rel, 1, t, decisions));
    assert_int_equal(dec[0], TODRE_DECISION_DROP);
    assert_int_equal(dec[1], TODRE_DECISION_KEEP);

    memcpy(both, nan, one * sizeof *both); /* sequence 0 is no longer read */
    memcpy(both + one, drop, one * sizeof *both);
    tt_assert_ok(todre_relevance_observe_probs(ctx, rel, 2, t, decisions));
    assert_int_equal(dec[0], TODRE_DECISION_ALREADY_DROPPED);
    assert_int_equal(dec[1], TODRE_DECISION_DROP);
    int64_t d0, d1;
    tt_assert_ok(todre_relevance_drop_layer(rel, 0, &d0));
    tt_assert_ok(todre_relevance_drop_layer(rel, 1, &d1));
    assert_int_equal(d0, 1);
    assert_int_equal(d1, 2);
    todre_relevance_destroy(rel);
    free(both);
    free(drop);
    free(keep);
    free(nan);
    todre_context_destroy(ctx);
}

/* A layer outside [0, L) is an invalid argument for every call taking one. */
static void test_layer_out_of_range(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    float *a = crafted_probs(sched_types, SK, 0.5f, 0.0f);
    todre_relevance *rel = handle(4, 1, sched_types, SK);
    tt_array ta, la;
    const DLTensor *t = probs_tensor(&ta, a, SK);
    int64_t bad[2] = {-1, 4};
    for (int i = 0; i < 2; i++) {
        tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, rel, bad[i], t, NULL),
                        TODRE_ERR_INVALID_ARGUMENT, "layer");
        int is;
        tt_assert_fails(NULL, todre_relevance_is_probe(rel, 0, bad[i], &is),
                        TODRE_ERR_INVALID_ARGUMENT, "layer");
        double x, y;
        tt_assert_fails(NULL, todre_relevance_ratios(rel, 0, bad[i], &x, &y),
                        TODRE_ERR_INVALID_ARGUMENT, "layer");
        tt_assert_fails(NULL, todre_relevance_set_probe_layers(
                                  rel, tt_array1(&la, &bad[i], TODRE_DTYPE_I64, 1)),
                        TODRE_ERR_INVALID_ARGUMENT, "layers");
    }
    todre_relevance_destroy(rel);
    free(a);
    todre_context_destroy(ctx);
}

/* Keep positions: every non-visual position, ascending, per sequence. */
static void test_keep_positions(void **state)
{
    (void)state;
    static const uint8_t types[2][16] = {
        {S, S, T, T, T, V, V, V, V, T, T, V, V, V, T, V},
        {V, V, V, V, V, V, V, V, V, V, V, V, V, V, V, V},
    };
    static const int64_t want0[] = {0, 1, 2, 3, 4, 9, 10, 14};
    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(2, 2, &rel));
    int64_t shape[2] = {2, 16};
    tt_array t;
    tt_assert_ok(todre_relevance_set_types(
        rel, tt_array_init(&t, (void *)types, TODRE_DTYPE_U8, 2, shape, NULL)));
    int64_t out[16], count = -1;
    tt_assert_ok(keep_positions(rel, 0, NULL, 0, &count));
    assert_int_equal(count, 8);
    tt_assert_ok(keep_positions(rel, 0, out, 16, &count));
    assert_int_equal(count, 8);
    assert_memory_equal(out, want0, sizeof want0);
    count = -1;
    tt_assert_fails(NULL, keep_positions(rel, 0, out, 7, &count), TODRE_ERR_INVALID_ARGUMENT, "out");
    assert_int_equal(count, 8); /* written also when out is too small */
    tt_assert_ok(keep_positions(rel, 1, out, 16, &count));
    assert_int_equal(count, 0);
    /* an empty output array may have NULL data */
    int64_t zero = 0;
    tt_array e;
    tt_assert_ok(todre_relevance_keep_positions(
        rel, 1, tt_array_init(&e, NULL, TODRE_DTYPE_I64, 1, &zero, NULL), &count));
    assert_int_equal(count, 0);
    todre_relevance_destroy(rel);
}

/* set_layout(s, v, t) is set_types([S]*s + [V]*v + [T]*t) for every
 * sequence: same ratios, same keep positions. */
static void test_set_layout(void **state)
{
    (void)state;
    static const uint8_t types[] = {S, S, S, V, V, V, V, V, T, T, T};
    todre_context *ctx = tt_cpu_context();
    float *a = crafted_probs(types, 11, 0.375f, 0.0f);
    todre_relevance *r1 = handle(1, 1, types, 11), *r2 = NULL;
    tt_assert_ok(todre_relevance_create(1, 1, &r2));
    tt_assert_ok(todre_relevance_set_layout(r2, 3, 5, 3));
    observe(ctx, r1, 0, a, 11);
    observe(ctx, r2, 0, a, 11);
    double x1, y1, x2, y2;
    tt_assert_ok(todre_relevance_ratios(r1, 0, 0, &x1, &y1));
    tt_assert_ok(todre_relevance_ratios(r2, 0, 0, &x2, &y2));
    assert_true(x1 == 0.375 && x2 == x1 && y1 == 0.0 && y2 == 0.0);
    int64_t out[11], count;
    static const int64_t want[] = {0, 1, 2, 8, 9, 10};
    tt_assert_ok(keep_positions(r2, 0, out, 11, &count));
    assert_int_equal(count, 6);
    assert_memory_equal(out, want, sizeof want);
    /* Setting types resets observations. */
    tt_assert_ok(todre_relevance_set_layout(r2, 3, 5, 3));
    tt_assert_fails(NULL, todre_relevance_ratios(r2, 0, 0, &x2, &y2), TODRE_ERR_STATE, "layer");
    todre_relevance_destroy(r1);
    todre_relevance_destroy(r2);
    free(a);
    todre_context_destroy(ctx);
}

/* Uniform causal attention (probabilities 1/(p+1), or q = 0 on the fused
 * path): a text query at position p has (#visual keys <= p) / (p + 1) on
 * visual keys, a visual query (#text keys <= p) / (p + 1) on text keys.
 * Both paths, full and chunked prefill, several layouts. */
static void closed_form(const uint8_t *types, int64_t K, int64_t Q, double *t2v, double *v2t)
{
    double nt = 0, nv = 0, st = 0, sv = 0;
    int64_t cv = 0, ct = 0;
    for (int64_t p = 0; p < K; p++) {
        cv += types[p] == V;
        ct += types[p] == T;
        if (p < K - Q) continue;
        if (types[p] == T) { st += (double)cv / (double)(p + 1); nt++; }
        if (types[p] == V) { sv += (double)ct / (double)(p + 1); nv++; }
    }
    *t2v = nt > 0 ? st / nt : 0.0;
    *v2t = nv > 0 ? sv / nv : 0.0;
}

static void test_uniform_closed_form(void **state)
{
    (void)state;
    enum { K = 90, DH = 8, HKV = 1 };
    uint8_t layouts[3][K];
    tt_rng rng = {42};
    for (int64_t j = 0; j < K; j++) {
        layouts[0][j] = j < 5 ? S : j < 70 ? V : T;
        layouts[1][j] = j < 3 ? S : j < 20 ? T : j < 60 ? V : j < 75 ? T : j < 85 ? V : T;
        layouts[2][j] = (uint8_t)(tt_rng_u64(&rng) % 3);
    }
    float *k = malloc(sizeof(float) * HKV * K * DH), *q = calloc(H * K * DH, sizeof(float));
    float *a = calloc((size_t)(H * K * K), sizeof(float));
    assert_true(k && q && a);
    for (int64_t i = 0; i < HKV * K * DH; i++) k[i] = (float)tt_rng_normal(&rng);
    todre_context *ctx = tt_cpu_context();
    int64_t Qs[2] = {K, 23};
    for (int l = 0; l < 3; l++)
        for (int qi = 0; qi < 2; qi++) {
            int64_t Q = Qs[qi];
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < Q; i++)
                    for (int64_t j = 0; j < K; j++)
                        a[(h * Q + i) * K + j] = j <= K - Q + i ? (float)(1.0 / (double)(K - Q + i + 1)) : 0.0f;
            double want_t, want_v, x, y;
            closed_form(layouts[l], K, Q, &want_t, &want_v);
            todre_relevance *rel = handle(1, 1, layouts[l], K);
            tt_array ata, atq, atk;
            const DLTensor *ta = tt_array3(&ata, a, TODRE_DTYPE_F32, H, Q, K);
            const DLTensor *tq = tt_array3(&atq, q, TODRE_DTYPE_F32, H, Q, DH);
            const DLTensor *tk = tt_array3(&atk, k, TODRE_DTYPE_F32, HKV, K, DH);
            tt_assert_ok(todre_relevance_observe_probs(ctx, rel, 0, ta, NULL));
            tt_assert_ok(todre_relevance_ratios(rel, 0, 0, &x, &y));
            assert_true(fabs(x - want_t) <= 1e-6 * want_t && fabs(y - want_v) <= 1e-6 * want_v);
            tt_assert_ok(todre_relevance_reset(rel, TODRE_RESET_STATE));
            tt_assert_ok(todre_relevance_observe_qk(ctx, rel, 0, tq, tk, 0.0, NULL));
            tt_assert_ok(todre_relevance_ratios(rel, 0, 0, &x, &y));
            assert_true(fabs(x - want_t) <= 1e-12 * want_t && fabs(y - want_v) <= 1e-12 * want_v);
            todre_relevance_destroy(rel);
        }
    free(k);
    free(q);
    free(a);
    todre_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threshold_strict_both_sides),
        cmocka_unit_test(test_threshold_needs_both),
        cmocka_unit_test(test_schedule_list),
        cmocka_unit_test(test_schedule_until_drop),
        cmocka_unit_test(test_batch_per_sequence),
        cmocka_unit_test(test_layer_out_of_range),
        cmocka_unit_test(test_keep_positions),
        cmocka_unit_test(test_set_layout),
        cmocka_unit_test(test_uniform_closed_form),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
