/* The ROWS strategy (3) with a row store smaller than n: under a small
 * TODRE_CONTEXT_WORKSPACE_LIMIT only a few batches of speculative Gram rows
 * fit, so unused rows are evicted and made again when their token is
 * selected. The selection must be exactly GEMV's (1) and GRAM's (2, with a
 * limit the whole matrix fits), for MAX_SUM and MAX_MIN, f16 and bf16.
 *
 * Rows hold small integers: every raw dot is an exact integer in fp32
 * whatever the summation order (AMX tiles, AVX kernels, BLAS), and each
 * strategy scales it by the same fp64 factors, so all running scores are
 * bitwise equal and the selections must agree to the index, near-ties
 * included. Without AMX, ROWS falls back (to GRAM or GEMV) and the test
 * still checks that the call succeeds with the same result. */
#include <stdlib.h>
#include <string.h>

#define TODRE_EXPERIMENTAL_API /* TODRE_CONTEXT_EXP_SELECT_STRATEGY */
#include "todre_test.h"

#define N 3000
#define D 64
#define BATCH 32 /* rows per AMX batch (TODRE_SEL_AMX_BATCH) */

/* Bytes of `rows` store rows of N padded to a multiple of 32, plus one batch
 * of output: the limit at which ROWS keeps exactly `rows` rows. */
static int64_t store_limit(int64_t rows)
{
    int64_t npad = (N + 31) / 32 * 32;
    return (rows + BATCH) * npad * 4;
}

/* Integers in [-3, 3] around 24 integer centres (clustered, so that the
 * greedy moves between groups and batches are only partly used). */
static void *integer_rows(todre_dtype dt, uint64_t seed)
{
    float *x = malloc(sizeof(float) * N * D);
    uint16_t *h = malloc(sizeof(uint16_t) * N * D);
    assert_non_null(x);
    assert_non_null(h);
    tt_rng r = {seed};
    int centre[24][D];
    for (int c = 0; c < 24; c++)
        for (int j = 0; j < D; j++) centre[c][j] = (int)(tt_rng_u64(&r) % 5) - 2;
    for (int64_t i = 0; i < N; i++) {
        int c = (int)(tt_rng_u64(&r) % 24);
        for (int j = 0; j < D; j++) {
            int v = centre[c][j] + (tt_rng_u64(&r) % 4 == 0 ? (int)(tt_rng_u64(&r) % 3) - 1 : 0);
            x[i * D + j] = (float)(v < -3 ? -3 : v > 3 ? 3 : v);
        }
    }
    if (dt == TODRE_DTYPE_F16) tt_to_f16(h, x, (size_t)N * D);
    else tt_to_bf16(h, x, (size_t)N * D);
    free(x);
    return h;
}

static void select_with(const void *x, todre_dtype dt, todre_objective obj, int64_t k,
                        int64_t strategy, int64_t limit, int64_t *sel)
{
    todre_context *ctx = tt_cpu_context();
    tt_ctx_set(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, strategy);
    tt_ctx_set(ctx, TODRE_CONTEXT_WORKSPACE_LIMIT, limit);
    todre_select_config *cfg = tt_config(obj, TODRE_PIVOT_AUTO, k, TODRE_ORDER_SELECTION);
    tt_array emb, out;
    tt_assert_ok(todre_select(ctx, cfg, tt_array2(&emb, (void *)x, dt, N, D, D), NULL,
                              tt_array1(&out, sel, TODRE_DTYPE_I64, k)));
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
}

static void check_dtype(todre_dtype dt)
{
    static const int64_t ks[] = {300, 1500};
    /* strategy, workspace limit; the first (GEMV) is the reference */
    const int64_t variants[][2] = {
        {1, 268435456},
        {2, 268435456},       /* the whole Gram matrix (36 MB) */
        {3, store_limit(64)}, /* 2 batches: the smallest store */
        {3, store_limit(96)}, /* 3 batches */
        {3, 268435456},       /* a row for every token: no eviction */
        {3, 0},               /* nothing fits: GEMV */
    };
    const size_t nv = sizeof variants / sizeof variants[0];
    void *x = integer_rows(dt, 5 + (uint64_t)dt);
    int64_t *ref = malloc(sizeof(int64_t) * 1500), *sel = malloc(sizeof(int64_t) * 1500);
    assert_non_null(ref);
    assert_non_null(sel);
    for (int obj = 0; obj < 2; obj++) {
        for (size_t ki = 0; ki < 2; ki++) {
            int64_t k = ks[ki];
            select_with(x, dt, (todre_objective)obj, k, variants[0][0], variants[0][1], ref);
            for (size_t v = 1; v < nv; v++) {
                memset(sel, 0xff, sizeof(int64_t) * (size_t)k);
                select_with(x, dt, (todre_objective)obj, k, variants[v][0], variants[v][1], sel);
                for (int64_t i = 0; i < k; i++)
                    if (sel[i] != ref[i])
                        fail_msg("dtype %d objective %d k %lld strategy %lld limit %lld: step "
                                 "%lld chose %lld, GEMV %lld",
                                 (int)dt, obj, (long long)k, (long long)variants[v][0],
                                 (long long)variants[v][1], (long long)i, (long long)sel[i],
                                 (long long)ref[i]);
            }
        }
    }
    free(sel);
    free(ref);
    free(x);
}

static void test_rows_f16(void **state)
{
    (void)state;
    check_dtype(TODRE_DTYPE_F16);
}

static void test_rows_bf16(void **state)
{
    (void)state;
    check_dtype(TODRE_DTYPE_BF16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_f16),
        cmocka_unit_test(test_rows_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
