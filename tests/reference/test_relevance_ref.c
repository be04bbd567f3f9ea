/* Stage-2 ratios against the float64 NumPy reference (relevance_ref.py, from
 * the paper's formula), through the public API: both paths, f32/f16/bf16,
 * GQA, chunked prefill, batched per-sequence types, layouts with text before
 * images, sequences without text or visual tokens; plus path agreement,
 * stride independence, batch = per-sequence calls, and determinism. */
#include "test_relevance_fixture.h"

#define RTOL 1e-5
#define ATOL 1e-12

static int is_long(const struct rf_case *c) { return c->K > 4096; }

static const DLTensor *tensor4(tt_array *t, void *data, todre_dtype dt, int64_t a, int64_t b,
                               int64_t c, int64_t d, const int64_t *strides)
{
    int64_t shape[4] = {a, b, c, d};
    return tt_array_init(t, data, dt, 4, shape, strides);
}

static void run_probs(todre_context *ctx, const struct rf_case *c, const struct rf_arrays *a,
                      double *out)
{
    tt_array t;
    rf_observe(ctx, c->B, c->K, a->types.data,
               tensor4(&t, a->attn.data, rf_dtype(c), c->B, c->H, c->Q, c->K, NULL), NULL, 0.0, out);
}

static void run_qk(todre_context *ctx, const struct rf_case *c, const struct rf_arrays *a,
                   double *out)
{
    tt_array q, k;
    rf_observe(ctx, c->B, c->K, a->types.data,
               tensor4(&q, a->q.data, rf_dtype(c), c->B, c->H, c->Q, c->dh, NULL),
               tensor4(&k, a->k.data, rf_dtype(c), c->B, c->Hkv, c->K, c->dh, NULL), c->scale, out);
}

/* Probability path: every fixture case equals the reference to 1e-5. */
static void test_probs_match_reference(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    int checked = 0;
    for (int i = 0; i < rf_ncases; i++) {
        const struct rf_case *c = &rf_cases[i];
        if (!c->probs) continue;
        struct rf_arrays a;
        rf_load(c, &a);
        double got[2 * 8];
        assert_true(c->B <= 8);
        run_probs(ctx, c, &a, got);
        for (int64_t b = 0; b < c->B; b++) {
            rf_assert_close(got[2 * b], rf_ref(&a)[4 * b + 0], RTOL, ATOL, "probs t2v", c->name, b);
            rf_assert_close(got[2 * b + 1], rf_ref(&a)[4 * b + 1], RTOL, ATOL, "probs v2t", c->name, b);
        }
        rf_free(&a);
        checked++;
    }
    assert_true(checked >= 10);
    todre_context_destroy(ctx);
}

/* Fused Q/K path: every short fixture case equals the reference to 1e-5. */
static void test_qk_match_reference(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    int checked = 0;
    for (int i = 0; i < rf_ncases; i++) {
        const struct rf_case *c = &rf_cases[i];
        if (is_long(c)) continue; /* test_relevance_long.c */
        struct rf_arrays a;
        rf_load(c, &a);
        double got[2 * 8];
        run_qk(ctx, c, &a, got);
        for (int64_t b = 0; b < c->B; b++) {
            rf_assert_close(got[2 * b], rf_ref(&a)[4 * b + 2], RTOL, ATOL, "qk t2v", c->name, b);
            rf_assert_close(got[2 * b + 1], rf_ref(&a)[4 * b + 3], RTOL, ATOL, "qk v2t", c->name, b);
        }
        rf_free(&a);
        checked++;
    }
    assert_true(checked >= 10);
    todre_context_destroy(ctx);
}

/* On f32 data (probabilities rounded only to f32) the two paths agree to
 * 1e-5 relative, as docs/semantics.md promises ("Ratios"). */
static void test_paths_agree(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    for (int i = 0; i < rf_ncases; i++) {
        const struct rf_case *c = &rf_cases[i];
        if (!c->probs || rf_dtype(c) != TODRE_DTYPE_F32) continue;
        struct rf_arrays a;
        rf_load(c, &a);
        double p[16], q[16];
        run_probs(ctx, c, &a, p);
        run_qk(ctx, c, &a, q);
        for (int64_t j = 0; j < 2 * c->B; j++)
            rf_assert_close(q[j], p[j], RTOL, ATOL, j % 2 ? "v2t qk vs probs" : "t2v qk vs probs",
                            c->name, j / 2);
        rf_free(&a);
    }
    todre_context_destroy(ctx);
}

static const struct rf_case *find_case(const char *name)
{
    for (int i = 0; i < rf_ncases; i++)
        if (!strcmp(rf_cases[i].name, name)) return &rf_cases[i];
    fail_msg("fixture case %s missing", name);
    return NULL;
}

/* Copy a contiguous [n0, n1, n2, n3] array (esize bytes per element) into a
 * buffer laid out with the given element strides. */
static void *restride(const void *src, size_t es, const int64_t n[4], const int64_t st[4],
                      size_t span)
{
    char *dst = calloc(span, es);
    assert_non_null(dst);
    const char *s = src;
    int64_t idx = 0;
    for (int64_t a = 0; a < n[0]; a++)
        for (int64_t b = 0; b < n[1]; b++)
            for (int64_t c = 0; c < n[2]; c++)
                for (int64_t d = 0; d < n[3]; d++, idx++)
                    memcpy(dst + (a * st[0] + b * st[1] + c * st[2] + d * st[3]) * (int64_t)es,
                           s + idx * (int64_t)es, es);
    return dst;
}

/* Non-contiguous views (permuted axes, padded rows, key axis with stride
 * != 1, head dim with stride != 1) give the contiguous results. */
static void test_strides(void **state)
{
    (void)state;
    const char *names[] = {"batch_f32", "batch_chunk_bf16", "multi_image_f16"};
    todre_context *ctx = tt_cpu_context();
    for (int n = 0; n < 3; n++) {
        const struct rf_case *c = find_case(names[n]);
        struct rf_arrays a;
        rf_load(c, &a);
        todre_dtype dt = rf_dtype(c);
        size_t es = dt == TODRE_DTYPE_F32 ? 4 : 2;
        int64_t B = c->B, H = c->H, Q = c->Q, K = c->K, dh = c->dh, G = c->Hkv;
        double base_p[16], base_q[16], got[16];
        run_probs(ctx, c, &a, base_p);
        run_qk(ctx, c, &a, base_q);

        /* attn in [B, Q, H, K + 3] memory; then in [B, H, K, Q] memory (s_k = Q). */
        int64_t na[4] = {B, H, Q, K};
        int64_t s1[4] = {Q * H * (K + 3), K + 3, H * (K + 3), 1};
        int64_t s2[4] = {H * K * Q, K * Q, 1, Q};
        const int64_t *sa[2] = {s1, s2};
        for (int v = 0; v < 2; v++) {
            void *buf = restride(a.attn.data, es, na, sa[v], (size_t)(B * H * Q * (K + 3)));
            tt_array t;
            rf_observe(ctx, B, K, a.types.data, tensor4(&t, buf, dt, B, H, Q, K, sa[v]), NULL, 0.0,
                       got);
            for (int64_t j = 0; j < 2 * B; j++)
                rf_assert_close(got[j], base_p[j], 1e-12, 0, "strided attn", c->name, j / 2);
            free(buf);
        }
        /* q in [B, Q, H, dh] memory with k padded rows; then q with head dim
         * stride 2 and k in [B, H_kv, dh, K] memory (ks_d = K). */
        int64_t nq[4] = {B, H, Q, dh}, nk[4] = {B, G, K, dh};
        int64_t q1[4] = {Q * H * dh, dh, H * dh, 1}, k1[4] = {G * K * (dh + 5), K * (dh + 5), dh + 5, 1};
        int64_t q2[4] = {H * Q * dh * 2, Q * dh * 2, dh * 2, 2}, k2[4] = {G * dh * K, dh * K, 1, K};
        const int64_t *sq[2] = {q1, q2}, *sk[2] = {k1, k2};
        for (int v = 0; v < 2; v++) {
            void *qb = restride(a.q.data, es, nq, sq[v], (size_t)(B * H * Q * dh * 2));
            void *kb = restride(a.k.data, es, nk, sk[v], (size_t)(B * G * K * (dh + 5)));
            tt_array qt, kt;
            rf_observe(ctx, B, K, a.types.data, tensor4(&qt, qb, dt, B, H, Q, dh, sq[v]),
                       tensor4(&kt, kb, dt, B, G, K, dh, sk[v]), c->scale, got);
            for (int64_t j = 0; j < 2 * B; j++)
                rf_assert_close(got[j], base_q[j], 1e-12, 0, "strided q/k", c->name, j / 2);
            free(qb);
            free(kb);
        }
        rf_free(&a);
    }
    todre_context_destroy(ctx);
}

/* A batched call equals one call per sequence (rank 3, batch-1 handle),
 * exactly: sequences never influence each other. */
static void test_batch_equals_single(void **state)
{
    (void)state;
    const char *names[] = {"batch_f32", "batch_chunk_bf16", "batch_chunk_f16"};
    todre_context *ctx = tt_cpu_context();
    for (int n = 0; n < 3; n++) {
        const struct rf_case *c = find_case(names[n]);
        struct rf_arrays a;
        rf_load(c, &a);
        todre_dtype dt = rf_dtype(c);
        size_t es = dt == TODRE_DTYPE_F32 ? 4 : 2;
        double all_p[16], all_q[16], one[2];
        run_probs(ctx, c, &a, all_p);
        run_qk(ctx, c, &a, all_q);
        for (int64_t b = 0; b < c->B; b++) {
            const uint8_t *types = (const uint8_t *)a.types.data + b * c->K;
            int64_t s_attn[3] = {c->H, c->Q, c->K}, s_q[3] = {c->H, c->Q, c->dh},
                    s_k[3] = {c->Hkv, c->K, c->dh};
            char *attn = (char *)a.attn.data + (size_t)(b * c->H * c->Q * c->K) * es;
            char *q = (char *)a.q.data + (size_t)(b * c->H * c->Q * c->dh) * es;
            char *k = (char *)a.k.data + (size_t)(b * c->Hkv * c->K * c->dh) * es;
            tt_array ta, tq, tk;
            rf_observe(ctx, 1, c->K, types, tt_array_init(&ta, attn, dt, 3, s_attn, NULL), NULL, 0.0,
                       one);
            assert_true(one[0] == all_p[2 * b] && one[1] == all_p[2 * b + 1]);
            rf_observe(ctx, 1, c->K, types, tt_array_init(&tq, q, dt, 3, s_q, NULL),
                       tt_array_init(&tk, k, dt, 3, s_k, NULL), c->scale, one);
            assert_true(one[0] == all_q[2 * b] && one[1] == all_q[2 * b + 1]);
        }
        rf_free(&a);
    }
    todre_context_destroy(ctx);
}

/* Repeated calls, and calls with 1 or 2 threads, give bit-identical ratios
 * (fixed partition and reduction order). */
static void test_deterministic(void **state)
{
    (void)state;
    const struct rf_case *c = find_case("peaky_f32");
    struct rf_arrays a;
    rf_load(c, &a);
    todre_context *ctx = tt_cpu_context();
    double p0[2], q0[2], p[2], q[2];
    run_probs(ctx, c, &a, p0);
    run_qk(ctx, c, &a, q0);
    for (int threads = 0; threads <= 2; threads++) {
        tt_ctx_set(ctx, TODRE_CONTEXT_NUM_THREADS, threads);
        run_probs(ctx, c, &a, p);
        run_qk(ctx, c, &a, q);
        assert_memory_equal(p, p0, sizeof p);
        assert_memory_equal(q, q0, sizeof q);
    }
    rf_free(&a);
    todre_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probs_match_reference),
        cmocka_unit_test(test_qk_match_reference),
        cmocka_unit_test(test_paths_agree),
        cmocka_unit_test(test_strides),
        cmocka_unit_test(test_batch_equals_single),
        cmocka_unit_test(test_deterministic),
    };
    return cmocka_run_group_tests(tests, rf_load_cases, NULL);
}
