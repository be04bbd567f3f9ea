/* Contexts: backend choice (AUTO falls back to CPU, explicit CUDA without a
 * GPU is BACKEND_UNAVAILABLE), parameters with their defaults and ranges,
 * streams, and that the stage-1 strategies and workspace limits change how
 * the work is done but never which tokens are selected. */
#include <stdlib.h>
#include <string.h>

#include "todre_test.h"

static int cuda_available(void)
{
    int avail = -1;
    tt_assert_ok(todre_backend_available(TODRE_BACKEND_CUDA, &avail));
    assert_true(avail == 0 || avail == 1);
    return avail;
}

/* CPU contexts always work and report CPU; destroy accepts NULL. */
static void test_cpu_context(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    todre_backend_kind kind = TODRE_BACKEND_AUTO;
    tt_assert_ok(todre_context_backend(ctx, &kind));
    assert_int_equal(kind, TODRE_BACKEND_CPU);
    tt_assert_ok(todre_context_synchronize(ctx));
    todre_context_destroy(ctx);
    todre_context_destroy(NULL);
    int avail = 0;
    tt_assert_ok(todre_backend_available(TODRE_BACKEND_CPU, &avail));
    assert_int_equal(avail, 1);
    tt_assert_ok(todre_backend_available(TODRE_BACKEND_AUTO, &avail));
    assert_int_equal(avail, 1);
}

/* AUTO resolves to CUDA exactly when CUDA can run, else to CPU silently. */
static void test_auto_backend(void **state)
{
    (void)state;
    int cuda = cuda_available();
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create(TODRE_BACKEND_AUTO, 0, &ctx));
    todre_backend_kind kind = TODRE_BACKEND_AUTO;
    tt_assert_ok(todre_context_backend(ctx, &kind));
    assert_int_equal(kind, cuda ? TODRE_BACKEND_CUDA : TODRE_BACKEND_CPU);
    assert_string_equal(todre_last_error(), "");
    todre_context_destroy(ctx);
}

/* Explicit CUDA where it cannot run: BACKEND_UNAVAILABLE, a reason, NULL out. */
static void test_explicit_cuda(void **state)
{
    (void)state;
    int cuda = cuda_available();
    if (!cuda) assert_true(strlen(todre_last_error()) > 0); /* available = 0 says why */
    todre_context *ctx = (todre_context *)&ctx;             /* must be reset to NULL */
    todre_status st = todre_context_create(TODRE_BACKEND_CUDA, 0, &ctx);
    if (cuda) {
        tt_assert_ok(st);
        todre_context_destroy(ctx);
        return;
    }
    tt_assert_fails(NULL, st, TODRE_ERR_BACKEND_UNAVAILABLE, "CUDA");
    assert_true(strlen(todre_last_error()) > strlen("CUDA backend: "));
    assert_null(ctx);
}

/* Bad create arguments name kind, device and out. */
static void test_create_contract(void **state)
{
    (void)state;
    todre_context *ctx = NULL;
    tt_assert_fails(NULL, todre_context_create(TODRE_BACKEND_CPU, 0, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "out");
    tt_assert_fails(NULL, todre_context_create((todre_backend_kind)3, 0, &ctx),
                    TODRE_ERR_INVALID_ARGUMENT, "kind");
    assert_null(ctx);
    tt_assert_fails(NULL, todre_context_create((todre_backend_kind)-1, 0, &ctx),
                    TODRE_ERR_INVALID_ARGUMENT, "kind");
    tt_assert_fails(NULL, todre_context_create(TODRE_BACKEND_CUDA, -1, &ctx),
                    TODRE_ERR_INVALID_ARGUMENT, "device");
    int avail;
    tt_assert_fails(NULL, todre_backend_available(TODRE_BACKEND_CPU, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "available");
    tt_assert_fails(NULL, todre_backend_available((todre_backend_kind)5, &avail),
                    TODRE_ERR_INVALID_ARGUMENT, "kind");
    tt_assert_fails(NULL, todre_context_backend(NULL, (todre_backend_kind *)&avail),
                    TODRE_ERR_INVALID_ARGUMENT, "ctx");
    ctx = tt_cpu_context();
    tt_assert_fails(NULL, todre_context_backend(ctx, NULL), TODRE_ERR_INVALID_ARGUMENT, "out");
    todre_context_destroy(ctx);
}

/* Documented defaults; values round-trip; out-of-range values are rejected
 * with a message naming the value and leave the parameter unchanged. */
static void test_params(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    int64_t v = -1;
    tt_assert_ok(todre_context_get_param(ctx, TODRE_CONTEXT_WORKSPACE_LIMIT, &v));
    assert_int_equal(v, 268435456);
    tt_assert_ok(todre_context_get_param(ctx, TODRE_CONTEXT_SELECT_STRATEGY, &v));
    assert_int_equal(v, 0);
    tt_assert_ok(todre_context_get_param(ctx, TODRE_CONTEXT_NUM_THREADS, &v));
    assert_int_equal(v, 0);

    static const struct { todre_context_param p; int64_t good, bad; } cases[] = {
        {TODRE_CONTEXT_WORKSPACE_LIMIT, 0, -1},
        {TODRE_CONTEXT_WORKSPACE_LIMIT, INT64_MAX, INT64_MIN},
        {TODRE_CONTEXT_SELECT_STRATEGY, 3, 4},
        {TODRE_CONTEXT_SELECT_STRATEGY, 1, -1},
        {TODRE_CONTEXT_NUM_THREADS, 1, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tt_assert_ok(todre_context_set_param(ctx, cases[i].p, cases[i].good));
        tt_assert_fails(ctx, todre_context_set_param(ctx, cases[i].p, cases[i].bad),
                        TODRE_ERR_INVALID_ARGUMENT, "value");
        tt_assert_ok(todre_context_get_param(ctx, cases[i].p, &v));
        assert_int_equal(v, cases[i].good);
    }
    tt_assert_fails(ctx, todre_context_set_param(ctx, (todre_context_param)3, 0),
                    TODRE_ERR_INVALID_ARGUMENT, "param");
    tt_assert_fails(NULL, todre_context_get_param(ctx, (todre_context_param)3, &v),
                    TODRE_ERR_INVALID_ARGUMENT, "param");
    tt_assert_fails(NULL, todre_context_get_param(ctx, TODRE_CONTEXT_NUM_THREADS, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "value");
    tt_assert_fails(NULL, todre_context_get_param(NULL, TODRE_CONTEXT_NUM_THREADS, &v),
                    TODRE_ERR_INVALID_ARGUMENT, "ctx");
    tt_assert_fails(NULL, todre_context_set_param(NULL, TODRE_CONTEXT_NUM_THREADS, 1),
                    TODRE_ERR_INVALID_ARGUMENT, "ctx");
    todre_context_destroy(ctx);
}

/* A CPU context has no streams: NULL is accepted, anything else rejected. */
static void test_stream(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    tt_assert_ok(todre_context_set_stream(ctx, NULL));
    int dummy;
    tt_assert_fails(ctx, todre_context_set_stream(ctx, &dummy), TODRE_ERR_INVALID_ARGUMENT,
                    "stream");
    tt_assert_fails(NULL, todre_context_set_stream(NULL, NULL), TODRE_ERR_INVALID_ARGUMENT, "ctx");
    tt_assert_fails(NULL, todre_context_synchronize(NULL), TODRE_ERR_INVALID_ARGUMENT, "ctx");
    todre_context_destroy(ctx);
}

/* Rows c * e_j (c a power of two): every similarity and running score is
 * exact in any arithmetic, so every strategy must agree to the index. */
static float *exact_rows(int64_t n, int64_t d, uint64_t seed)
{
    float *x = calloc((size_t)(n * d), sizeof(float));
    assert_non_null(x);
    tt_rng r = {seed};
    for (int64_t i = 0; i < n; i++)
        x[i * d + (int64_t)(tt_rng_u64(&r) % (uint64_t)d)] = (float)(1 << (tt_rng_u64(&r) % 4));
    return x;
}

static void select_with(const float *x, int64_t n, int64_t d, todre_objective obj, int64_t k,
                        const int64_t params[3], int64_t *sel)
{
    todre_context *ctx = tt_cpu_context();
    tt_assert_ok(todre_context_set_param(ctx, TODRE_CONTEXT_SELECT_STRATEGY, params[0]));
    tt_assert_ok(todre_context_set_param(ctx, TODRE_CONTEXT_WORKSPACE_LIMIT, params[1]));
    tt_assert_ok(todre_context_set_param(ctx, TODRE_CONTEXT_NUM_THREADS, params[2]));
    todre_select_config *cfg = tt_config(obj, TODRE_PIVOT_AUTO, k, TODRE_ORDER_SELECTION);
    todre_tensor *emb = tt_tensor2((void *)x, TODRE_DTYPE_F32, n, d, d);
    todre_tensor *out = tt_tensor1(sel, TODRE_DTYPE_I64, k);
    tt_assert_ok(todre_select(ctx, cfg, emb, NULL, out));
    todre_tensor_destroy(out);
    todre_tensor_destroy(emb);
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
}

/* GEMV, GRAM (fitting or not in the workspace limit), AUTO and thread counts
 * give the same selection on the same input. */
static void test_strategies_agree(void **state)
{
    (void)state;
    const int64_t n = 700, d = 24, k = 150;
    float *x = exact_rows(n, d, 11);
    static const int64_t variants[][3] = {
        /* strategy, workspace limit, threads */
        {0, 268435456, 0}, {1, 268435456, 0}, {2, 268435456, 0},
        {2, 0, 0},       /* GRAM does not fit: falls back to GEMV */
        {2, 1000, 1},    {0, 0, 1}, {1, 268435456, 2}, {2, INT64_MAX, 2},
    };
    const size_t nv = sizeof variants / sizeof variants[0];
    for (int obj = 0; obj < 2; obj++) {
        int64_t ref[150], sel[150];
        select_with(x, n, d, (todre_objective)obj, k, variants[0], ref);
        for (size_t v = 1; v < nv; v++) {
            select_with(x, n, d, (todre_objective)obj, k, variants[v], sel);
            for (int64_t i = 0; i < k; i++)
                if (sel[i] != ref[i])
                    fail_msg("objective %d, variant %zu: step %lld chose %lld, AUTO chose %lld",
                             obj, v, (long long)i, (long long)sel[i], (long long)ref[i]);
        }
    }
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_context),
        cmocka_unit_test(test_auto_backend),
        cmocka_unit_test(test_explicit_cuda),
        cmocka_unit_test(test_create_contract),
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_strategies_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
