/* Contexts: backend choice by name (NULL / "auto" falls back to "cpu",
 * explicit "cuda" without a GPU is BACKEND_UNAVAILABLE), the device, parameters
 * with their defaults and ranges, streams, and that the stage-1 strategies,
 * workspace limits and thread counts change how the work is done but never
 * which tokens are selected. */
#include <stdlib.h>
#include <string.h>

#define TODRE_EXPERIMENTAL_API /* TODRE_CONTEXT_EXP_SELECT_STRATEGY */
#include "todre_test.h"

/* Whether the registry lists an available "cuda" backend. */
static int cuda_available(void)
{
    int count = 0;
    tt_assert_ok(todre_backend_count(&count));
    for (int i = 0; i < count; i++) {
        todre_backend_props p;
        memset(&p, 0, sizeof p);
        p.struct_size = sizeof p;
        tt_assert_ok(todre_backend_get_props(i, &p));
        if (!strcmp(p.name, "cuda")) {
            assert_true(p.available == 0 || p.available == 1);
            return p.available;
        }
    }
    return 0;
}

/* CPU contexts always work, report "cpu" on host device 0; destroy accepts NULL. */
static void test_cpu_context(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    assert_string_equal(todre_context_backend(ctx), "cpu");
    DLDevice dev = {kDLCUDA, 7};
    tt_assert_ok(todre_context_device(ctx, &dev));
    assert_int_equal(dev.device_type, kDLCPU);
    assert_int_equal(dev.device_id, 0);
    tt_assert_ok(todre_context_synchronize(ctx));
    todre_context_destroy(ctx);
    todre_context_destroy(NULL);
    assert_string_equal(todre_context_backend(NULL), "");
}

/* NULL and "auto" resolve to CUDA exactly when CUDA can run, else to CPU
 * silently; the name reported is never "auto". */
static void test_auto_backend(void **state)
{
    (void)state;
    int cuda = cuda_available();
    const char *names[2] = {NULL, "auto"};
    for (int i = 0; i < 2; i++) {
        todre_context *ctx = NULL;
        tt_assert_ok(todre_context_create(names[i], 0, &ctx));
        assert_string_equal(todre_context_backend(ctx), cuda ? "cuda" : "cpu");
        assert_string_equal(todre_last_error(), "");
        todre_context_destroy(ctx);
    }
}

/* Explicit CUDA where it cannot run: BACKEND_UNAVAILABLE, a reason, NULL out. */
static void test_explicit_cuda(void **state)
{
    (void)state;
    int cuda = cuda_available();
    todre_context *const sentinel = (todre_context *)&cuda;
    todre_context *ctx = sentinel; /* out-pointers are written only on success */
    todre_status st = todre_context_create("cuda", 0, &ctx);
    if (cuda) {
        tt_assert_ok(st);
        assert_string_equal(todre_context_backend(ctx), "cuda");
        todre_context_destroy(ctx);
        return;
    }
    tt_assert_fails(NULL, st, TODRE_ERR_BACKEND_UNAVAILABLE, "cuda");
    assert_true(strlen(todre_last_error()) > strlen("cuda: "));
    assert_ptr_equal(ctx, sentinel);
}

/* Bad create arguments name backend, device and out. */
static void test_create_contract(void **state)
{
    (void)state;
    todre_context *const sentinel = (todre_context *)&state;
    todre_context *ctx = sentinel; /* written only on success */
    tt_assert_fails(NULL, todre_context_create("cpu", 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "out");
    /* a well-formed name nothing registered: unavailable, saying what was searched */
    tt_assert_fails(NULL, todre_context_create("nosuch", 0, &ctx), TODRE_ERR_BACKEND_UNAVAILABLE,
                    "nosuch");
    assert_non_null(strstr(todre_last_error(), "backend"));
    assert_ptr_equal(ctx, sentinel);
    /* names that cannot be backend names */
    tt_assert_fails(NULL, todre_context_create("", 0, &ctx), TODRE_ERR_INVALID_ARGUMENT, "backend");
    tt_assert_fails(NULL, todre_context_create("a b", 0, &ctx), TODRE_ERR_INVALID_ARGUMENT, "backend");
    tt_assert_fails(NULL, todre_context_create("CPU", 0, &ctx), TODRE_ERR_INVALID_ARGUMENT,
                    "backend"); /* names are exact */
    tt_assert_fails(NULL, todre_context_create("cpu", 1, &ctx), TODRE_ERR_INVALID_ARGUMENT, "device");
    tt_assert_fails(NULL, todre_context_create("cpu", -1, &ctx), TODRE_ERR_INVALID_ARGUMENT, "device");
    tt_assert_fails(NULL, todre_context_create("cuda", -1, &ctx), TODRE_ERR_INVALID_ARGUMENT,
                    "device");
    assert_ptr_equal(ctx, sentinel);
    DLDevice dev;
    tt_assert_fails(NULL, todre_context_device(NULL, &dev), TODRE_ERR_INVALID_ARGUMENT, "ctx");
    ctx = tt_cpu_context();
    tt_assert_fails(NULL, todre_context_device(ctx, NULL), TODRE_ERR_INVALID_ARGUMENT, "device");
    todre_context_destroy(ctx);
}

static int64_t ctx_get(const todre_context *ctx, todre_param p)
{
    int64_t v = -12345;
    tt_assert_ok(todre_context_get_int(ctx, p, &v));
    return v;
}

/* Documented defaults; values round-trip; out-of-range values are rejected
 * with a message naming the parameter and leave it unchanged. */
static void test_params(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    int64_t v = -1;
    assert_int_equal(ctx_get(ctx, TODRE_CONTEXT_WORKSPACE_LIMIT), 268435456);
    assert_int_equal(ctx_get(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY), 0);
    assert_int_equal(ctx_get(ctx, TODRE_CONTEXT_NUM_THREADS), 0);

    static const struct { todre_param p; int64_t good, bad; } cases[] = {
        {TODRE_CONTEXT_WORKSPACE_LIMIT, 0, -1},
        {TODRE_CONTEXT_WORKSPACE_LIMIT, INT64_MAX, INT64_MIN},
        {TODRE_CONTEXT_EXP_SELECT_STRATEGY, 3, 4},
        {TODRE_CONTEXT_EXP_SELECT_STRATEGY, 1, -1},
        {TODRE_CONTEXT_NUM_THREADS, 1, -1},
        {TODRE_CONTEXT_NUM_THREADS, 1024, 1025},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tt_assert_ok(todre_context_set_int(ctx, cases[i].p, cases[i].good));
        tt_assert_fails_param(ctx, todre_context_set_int(ctx, cases[i].p, cases[i].bad),
                              TODRE_ERR_INVALID_ARGUMENT, cases[i].p);
        assert_int_equal(ctx_get(ctx, cases[i].p), cases[i].good);
    }
    tt_assert_fails(ctx, todre_context_set_int(ctx, (todre_param)102, 0),
                    TODRE_ERR_INVALID_ARGUMENT, "param");
    tt_assert_fails(ctx, todre_context_get_int(ctx, (todre_param)102, &v),
                    TODRE_ERR_INVALID_ARGUMENT, "param");
    tt_assert_fails(ctx, todre_context_get_int(ctx, TODRE_CONTEXT_NUM_THREADS, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "value");
    tt_assert_fails(NULL, todre_context_get_int(NULL, TODRE_CONTEXT_NUM_THREADS, &v),
                    TODRE_ERR_INVALID_ARGUMENT, "ctx");
    tt_assert_fails(NULL, todre_context_set_int(NULL, TODRE_CONTEXT_NUM_THREADS, 1),
                    TODRE_ERR_INVALID_ARGUMENT, "ctx");
    /* reset(PARAMS) restores every default */
    tt_assert_ok(todre_context_reset(ctx, TODRE_RESET_PARAMS));
    assert_int_equal(ctx_get(ctx, TODRE_CONTEXT_WORKSPACE_LIMIT), 268435456);
    assert_int_equal(ctx_get(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY), 0);
    assert_int_equal(ctx_get(ctx, TODRE_CONTEXT_NUM_THREADS), 0);
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
    tt_ctx_set(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, params[0]);
    tt_ctx_set(ctx, TODRE_CONTEXT_WORKSPACE_LIMIT, params[1]);
    tt_ctx_set(ctx, TODRE_CONTEXT_NUM_THREADS, params[2]);
    todre_select_config *cfg = tt_config(obj, TODRE_PIVOT_AUTO, k, TODRE_ORDER_SELECTION);
    tt_array emb, out;
    tt_assert_ok(todre_select(ctx, cfg, tt_array2(&emb, (void *)x, TODRE_DTYPE_F32, n, d, d), NULL,
                              tt_array1(&out, sel, TODRE_DTYPE_I64, k)));
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
