/* The ROWS strategy on the FMA kernels (src/cpu/select_rows.c: every CPU
 * code path below AMX, f32 / f16 / bf16). tests/select_rows_fma.cmake runs
 * this program once per ISA level the machine has ($TODRE_CPU_ISA); the
 * level in use is printed. (At AMX level 16-bit sets use the AMX kernels,
 * covered by unit.select_rows; the checks below still hold there.)
 *
 * 1. Exact inputs: rows of small integers (every raw dot is an exact integer
 *    in fp32 whatever the summation order), with duplicate rows, zero rows,
 *    strided rows (NaN padding, so a read past d is caught), n not a multiple
 *    of the 16-column panels and d not a multiple of the 128-long K blocks or
 *    of any vector width. Every strategy then gives bitwise equal scores, so
 *    ROWS (with a store of every row, and with the smallest store, 2 batches,
 *    which evicts and remakes rows) must equal GEMV and GRAM to the index:
 *    MAX_SUM and MAX_MIN, CENTER and ISOLATED pivots, k = 1, 2, 77 and n.
 * 2. Float inputs (clustered Gaussian rows): the products of a pair must not
 *    depend on the batch that makes them, its slot in the batch, the store
 *    size or the thread count (docs/semantics.md: repeated calls give
 *    identical output; the speculation must change only the time), so ROWS
 *    with the full store, with the smallest store and with 1 thread must be
 *    identical, and the trajectory must pass the float64 oracle
 *    (tests/common/oracle.h) built from the paper's definition.
 * On the generic level a ROWS request runs as GRAM or GEMV (no FMA ROWS
 * there): part 1 and the oracle still apply, the near-tie equality not. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TODRE_EXPERIMENTAL_API /* TODRE_CONTEXT_EXP_SELECT_STRATEGY */
#include "oracle.h"
#include "todre_test.h"

#define N 203  /* not a multiple of the 16-column panels; > 2 batches of 32 */
#define D 300  /* K blocks 128 + 128 + 44; not a multiple of 8 or 16 */
#define LD 307 /* row stride, NaN padding */
#define GEMV 1
#define GRAM 2
#define ROWS 3
#define DEFAULT_LIMIT 268435456

/* Workspace limit at which the FMA ROWS store holds exactly `slots` rows
 * (src/cpu/select_rows.c, todre_sel_rows_fma_slots): the packed rows (n
 * padded to 16, as stored) and the batch (36 x d fp32), n int32, then per
 * slot a row of padded n fp32 and two int32, and 36 rows of batch output. */
static int64_t store_limit(todre_dtype dt, int64_t slots)
{
    int64_t npad = (N + 15) / 16 * 16, es = dt == TODRE_DTYPE_F32 ? 4 : 2;
    int64_t pack = (npad * D * es + 63) / 64 * 64 + 36 * D * 4;
    return pack + N * 4 + (slots + 36) * (npad * 4 + 8);
}

struct run {
    int64_t strategy, limit, threads;
};

static void select_rows(const void *x, todre_dtype dt, todre_objective obj, todre_pivot piv,
                        int64_t k, struct run r, int64_t *sel)
{
    todre_context *ctx = tt_cpu_context();
    tt_ctx_set(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, r.strategy);
    tt_ctx_set(ctx, TODRE_CONTEXT_WORKSPACE_LIMIT, r.limit);
    tt_ctx_set(ctx, TODRE_CONTEXT_NUM_THREADS, r.threads);
    todre_select_config *cfg = tt_config(obj, piv, k, TODRE_ORDER_SELECTION);
    tt_array emb, out;
    memset(sel, 0xff, sizeof(int64_t) * (size_t)k);
    tt_assert_ok(todre_select(ctx, cfg, tt_array2(&emb, (void *)x, dt, N, D, LD), NULL,
                              tt_array1(&out, sel, TODRE_DTYPE_I64, k)));
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
}

/* x (fp32, N x LD) in dtype dt, same layout; NaN padding kept. */
static void *as_dtype(const float *x, todre_dtype dt)
{
    size_t count = (size_t)N * LD;
    if (dt == TODRE_DTYPE_F32) {
        float *y = malloc(count * sizeof(float));
        assert_non_null(y);
        memcpy(y, x, count * sizeof(float));
        return y;
    }
    uint16_t *h = malloc(count * sizeof(uint16_t));
    assert_non_null(h);
    if (dt == TODRE_DTYPE_F16) tt_to_f16(h, x, count);
    else tt_to_bf16(h, x, count);
    return h;
}

/* Integers in [-3, 3] around 20 centres; rows 5..9 copy rows 100..104, rows
 * 50, 51 and 202 are zero. */
static float *integer_rows(uint64_t seed)
{
    float *x = malloc(sizeof(float) * N * LD);
    assert_non_null(x);
    tt_rng r = {seed};
    int centre[20][D];
    for (int c = 0; c < 20; c++)
        for (int j = 0; j < D; j++) centre[c][j] = (int)(tt_rng_u64(&r) % 5) - 2;
    for (int64_t i = 0; i < N; i++) {
        int c = (int)(tt_rng_u64(&r) % 20);
        for (int j = 0; j < D; j++) {
            int v = centre[c][j] + (tt_rng_u64(&r) % 4 == 0 ? (int)(tt_rng_u64(&r) % 3) - 1 : 0);
            x[i * LD + j] = (float)(v < -3 ? -3 : v > 3 ? 3 : v);
        }
        for (int j = D; j < LD; j++) x[i * LD + j] = NAN;
    }
    for (int i = 5; i < 10; i++) memcpy(x + i * LD, x + (95 + i) * LD, sizeof(float) * D);
    for (int i = 0; i < D; i++) x[50 * LD + i] = x[51 * LD + i] = x[202 * LD + i] = 0.0f;
    return x;
}

static void assert_same(const int64_t *ref, const int64_t *sel, int64_t k, const char *what,
                        todre_dtype dt, int obj, todre_pivot piv, struct run r)
{
    for (int64_t i = 0; i < k; i++)
        if (sel[i] != ref[i])
            fail_msg("%s: dtype %d objective %d pivot %d k %lld strategy %lld limit %lld threads "
                     "%lld: step %lld chose %lld, expected %lld",
                     what, (int)dt, obj, (int)piv, (long long)k, (long long)r.strategy,
                     (long long)r.limit, (long long)r.threads, (long long)i, (long long)sel[i],
                     (long long)ref[i]);
}

static void print_path(void)
{
    todre_device_props dp = {.struct_size = sizeof dp};
    tt_assert_ok(todre_device_get_props("cpu", 0, &dp));
    printf("CPU code path: %s (TODRE_CPU_ISA=%s)\n", dp.arch,
           getenv("TODRE_CPU_ISA") ? getenv("TODRE_CPU_ISA") : "");
}

static void test_exact_equals_gemv_and_gram(void **state)
{
    (void)state;
    print_path();
    static const todre_dtype dts[] = {TODRE_DTYPE_F32, TODRE_DTYPE_F16, TODRE_DTYPE_BF16};
    static const int64_t ks[] = {1, 2, 77, N};
    float *x32 = integer_rows(11);
    int64_t *ref = malloc(sizeof(int64_t) * N), *sel = malloc(sizeof(int64_t) * N);
    assert_non_null(ref);
    assert_non_null(sel);
    for (size_t di = 0; di < 3; di++) {
        todre_dtype dt = dts[di];
        void *x = as_dtype(x32, dt);
        const struct run runs[] = {
            {GRAM, DEFAULT_LIMIT, 1},
            {ROWS, DEFAULT_LIMIT, 1},       /* a row for every token */
            {ROWS, store_limit(dt, 64), 1}, /* 2 batches: evicts, remakes */
            {ROWS, store_limit(dt, 64), 2}, /* columns split between threads */
        };
        for (int obj = 0; obj < 2; obj++) {
            for (int pv = 0; pv < 2; pv++) {
                /* ISOLATED: with the whole Gram matrix in the limit the pivot
                 * makes it and the greedy reuses it, so only the small store
                 * runs ROWS there */
                todre_pivot piv = pv ? TODRE_PIVOT_ISOLATED : TODRE_PIVOT_CENTER;
                for (size_t ki = 0; ki < 4; ki++) {
                    int64_t k = ks[ki];
                    struct run g = {GEMV, DEFAULT_LIMIT, 1};
                    select_rows(x, dt, (todre_objective)obj, piv, k, g, ref);
                    for (size_t v = 0; v < sizeof runs / sizeof runs[0]; v++) {
                        select_rows(x, dt, (todre_objective)obj, piv, k, runs[v], sel);
                        assert_same(ref, sel, k, "exact rows vs GEMV", dt, obj, piv, runs[v]);
                    }
                }
            }
        }
        free(x);
    }
    free(sel);
    free(ref);
    free(x32);
}

/* Whether this process runs the FMA ROWS kernels (AVX2 and AVX-512 levels;
 * the generic level plans GRAM or GEMV for a ROWS request instead, whose
 * roundings differ from each other, so near-tie selections may too). */
static int fma_rows(void)
{
    todre_device_props dp = {.struct_size = sizeof dp};
    tt_assert_ok(todre_device_get_props("cpu", 0, &dp));
    return strcmp(dp.arch, "avx2") == 0 || strcmp(dp.arch, "avx512") == 0;
}

/* One data set (see the file comment, 2.); @p same: the runs must agree. */
static void check_invariant(const float *x32, const char *what, int same)
{
    static const todre_dtype dts[] = {TODRE_DTYPE_F32, TODRE_DTYPE_F16, TODRE_DTYPE_BF16};
    const int64_t k = 150;
    int64_t ref[150], sel[150];
    for (size_t di = 0; di < 3; di++) {
        todre_dtype dt = dts[di];
        void *x = as_dtype(x32, dt);
        const struct run full = {ROWS, DEFAULT_LIMIT, 1};
        const struct run others[] = {
            {ROWS, store_limit(dt, 64), 1}, {ROWS, store_limit(dt, 96), 1}, {ROWS, DEFAULT_LIMIT, 2}};
        for (int obj = 0; obj < 2; obj++) {
            select_rows(x, dt, (todre_objective)obj, TODRE_PIVOT_CENTER, k, full, ref);
            struct tt_problem p;
            tt_problem_init(&p, x, dt, N, D, LD, NULL, TODRE_DTYPE_F32, (todre_objective)obj,
                            TODRE_PIVOT_CENTER, 0, -1);
            char why[400];
            int64_t bad = tt_check_trajectory(&p, ref, k, why, sizeof why);
            tt_problem_free(&p);
            if (bad >= 0)
                fail_msg("%s, dtype %d objective %d: ROWS trajectory invalid at step %lld: %s",
                         what, (int)dt, obj, (long long)bad, why);
            for (size_t v = 0; v < sizeof others / sizeof others[0]; v++) {
                select_rows(x, dt, (todre_objective)obj, TODRE_PIVOT_CENTER, k, others[v], sel);
                if (same) assert_same(ref, sel, k, what, dt, obj, TODRE_PIVOT_CENTER, others[v]);
            }
        }
        free(x);
    }
}

static void test_float_batch_invariant_and_valid(void **state)
{
    (void)state;
    float *x32 = malloc(sizeof(float) * N * LD);
    assert_non_null(x32);
    tt_fill_clustered(x32, N, D, LD, 12, 0.7, 23);
    check_invariant(x32, "clustered rows", 1);
    /* rows around one centre with a spread of 1e-3: their scores differ by
     * about their rounding, so that any change of a product's rounding (a
     * product that depends on its batch slot, the store or the threads)
     * changes the selection */
    tt_fill_clustered(x32, N, D, LD, 1, 1e-3, 29);
    check_invariant(x32, "near-tie rows", fma_rows());
    free(x32);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_equals_gemv_and_gram),
        cmocka_unit_test(test_float_batch_invariant_and_valid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
