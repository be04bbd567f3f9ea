/* Stage-1 configuration: defaults, parameter round trips and bounds, the
 * ratio budget and todre_select_keep_count's rounding and clamping. */
#include <math.h>
#include <string.h>

#include "todre_test.h"

static todre_select_config *fresh(void)
{
    todre_select_config *cfg = NULL;
    tt_assert_ok(todre_select_config_create(&cfg));
    assert_non_null(cfg);
    return cfg;
}

static int64_t get(const todre_select_config *cfg, todre_param p) { return tt_cfg_get(cfg, p); }

static double get_ratio(const todre_select_config *cfg)
{
    double r = -1;
    tt_assert_ok(todre_select_config_get_double(cfg, TODRE_SELECT_RATIO, &r));
    return r;
}

/* Documented defaults: MAX_SUM, AUTO pivot over [0, n), ratio 0.10, seed 0,
 * POSITION order. */
static void test_defaults(void **state)
{
    (void)state;
    todre_select_config *cfg = fresh();
    assert_int_equal(get(cfg, TODRE_SELECT_OBJECTIVE), TODRE_OBJECTIVE_MAX_SUM);
    assert_int_equal(get(cfg, TODRE_SELECT_PIVOT), TODRE_PIVOT_AUTO);
    assert_int_equal(get(cfg, TODRE_SELECT_PIVOT_LO), 0);
    assert_int_equal(get(cfg, TODRE_SELECT_PIVOT_HI), -1);
    assert_int_equal(get(cfg, TODRE_SELECT_KEEP), 0);
    assert_int_equal(get(cfg, TODRE_SELECT_SEED), 0);
    assert_int_equal(get(cfg, TODRE_SELECT_ORDER), TODRE_ORDER_POSITION);
    assert_true(get_ratio(cfg) == 0.10);
    todre_select_config_destroy(cfg);
    todre_select_config_destroy(NULL);
}

struct range { todre_param p; int64_t lo, hi; };
static const struct range ranges[] = {
    {TODRE_SELECT_OBJECTIVE, 0, 2},
    {TODRE_SELECT_PIVOT, 0, 5},
    {TODRE_SELECT_PIVOT_LO, 0, INT64_MAX - 1},
    {TODRE_SELECT_PIVOT_HI, -1, INT64_MAX},
    {TODRE_SELECT_KEEP, 0, INT64_MAX},
    {TODRE_SELECT_SEED, INT64_MIN, INT64_MAX},
    {TODRE_SELECT_ORDER, 0, 2},
};
#define NRANGES (sizeof ranges / sizeof ranges[0])

/* Bounds are queryable and match the documentation; both ends round-trip. */
static void test_bounds_and_round_trip(void **state)
{
    (void)state;
    todre_select_config *cfg = fresh();
    for (size_t i = 0; i < NRANGES; i++) {
        todre_param_bounds b;
        memset(&b, 0xa5, sizeof b);
        b.struct_size = sizeof b;
        tt_assert_ok(todre_param_get_bounds(ranges[i].p, &b));
        assert_int_equal(b.type, TODRE_PARAM_INT);
        assert_int_equal(b.read_only, 0);
        assert_true(b.int_min == ranges[i].lo && b.int_max == ranges[i].hi);
        tt_cfg_set(cfg, ranges[i].p, ranges[i].hi);
        assert_true(get(cfg, ranges[i].p) == ranges[i].hi);
        tt_cfg_set(cfg, ranges[i].p, ranges[i].lo);
        assert_true(get(cfg, ranges[i].p) == ranges[i].lo);
    }
    todre_select_config_destroy(cfg);
}

/* Values outside the bounds are rejected naming the parameter, and leave the
 * configuration unchanged. */
static void test_out_of_range(void **state)
{
    (void)state;
    todre_select_config *cfg = fresh();
    for (size_t i = 0; i < NRANGES; i++) {
        int64_t before = get(cfg, ranges[i].p);
        if (ranges[i].lo > INT64_MIN)
            tt_assert_fails_param(NULL, todre_select_config_set_int(cfg, ranges[i].p, ranges[i].lo - 1),
                                  TODRE_ERR_INVALID_ARGUMENT, ranges[i].p);
        if (ranges[i].hi < INT64_MAX)
            tt_assert_fails_param(NULL, todre_select_config_set_int(cfg, ranges[i].p, ranges[i].hi + 1),
                                  TODRE_ERR_INVALID_ARGUMENT, ranges[i].p);
        assert_true(get(cfg, ranges[i].p) == before);
    }
    /* pivot_hi = 0 (an empty range) is inside the bounds: accepted here, and
     * rejected at selection time like every range that does not fit a set
     * (test_select_contract) */
    tt_cfg_set(cfg, TODRE_SELECT_PIVOT_HI, 0);
    assert_int_equal(get(cfg, TODRE_SELECT_PIVOT_HI), 0);
    tt_cfg_set(cfg, TODRE_SELECT_PIVOT_HI, -1);
    tt_assert_fails_param(NULL, todre_select_config_set_int(cfg, TODRE_SELECT_OBJECTIVE, INT64_MIN),
                          TODRE_ERR_INVALID_ARGUMENT, TODRE_SELECT_OBJECTIVE);
    tt_assert_fails(NULL, todre_select_config_set_int(cfg, (todre_param)210, 0),
                    TODRE_ERR_INVALID_ARGUMENT, "param");
    /* the budget policies and the per-group minimum (>= 1: none starved) */
    tt_assert_fails_param(NULL, todre_select_config_set_int(cfg, TODRE_SELECT_BUDGET, 3),
                          TODRE_ERR_INVALID_ARGUMENT, TODRE_SELECT_BUDGET);
    tt_assert_fails_param(NULL, todre_select_config_set_int(cfg, TODRE_SELECT_GROUP_MIN, 0),
                          TODRE_ERR_INVALID_ARGUMENT, TODRE_SELECT_GROUP_MIN);
    tt_cfg_set(cfg, TODRE_SELECT_BUDGET, TODRE_BUDGET_PER_GROUP);
    assert_int_equal(get(cfg, TODRE_SELECT_BUDGET), TODRE_BUDGET_PER_GROUP);
    tt_cfg_set(cfg, TODRE_SELECT_BUDGET, TODRE_BUDGET_SET);
    int64_t v;
    todre_param_bounds b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    tt_assert_fails(NULL, todre_select_config_get_int(cfg, (todre_param)-1, &v),
                    TODRE_ERR_INVALID_ARGUMENT, "param");
    tt_assert_fails(NULL, todre_param_get_bounds((todre_param)210, &b), TODRE_ERR_INVALID_ARGUMENT,
                    "param");
    todre_select_config_destroy(cfg);
}

/* NULL handles and out-pointers are named. */
static void test_null_arguments(void **state)
{
    (void)state;
    todre_select_config *cfg = fresh();
    int64_t v;
    double r;
    tt_assert_fails(NULL, todre_select_config_create(NULL), TODRE_ERR_INVALID_ARGUMENT, "out");
    tt_assert_fails(NULL, todre_select_config_set_int(NULL, TODRE_SELECT_KEEP, 1),
                    TODRE_ERR_INVALID_ARGUMENT, "cfg");
    tt_assert_fails(NULL, todre_select_config_get_int(NULL, TODRE_SELECT_KEEP, &v),
                    TODRE_ERR_INVALID_ARGUMENT, "cfg");
    tt_assert_fails(NULL, todre_select_config_get_int(cfg, TODRE_SELECT_KEEP, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "value");
    tt_assert_fails(NULL, todre_param_get_bounds(TODRE_SELECT_KEEP, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "bounds");
    tt_assert_fails(NULL, todre_select_config_set_double(NULL, TODRE_SELECT_RATIO, 0.5),
                    TODRE_ERR_INVALID_ARGUMENT, "cfg");
    tt_assert_fails(NULL, todre_select_config_get_double(NULL, TODRE_SELECT_RATIO, &r),
                    TODRE_ERR_INVALID_ARGUMENT, "cfg");
    tt_assert_fails(NULL, todre_select_config_get_double(cfg, TODRE_SELECT_RATIO, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "value");
    tt_assert_fails(NULL, todre_select_config_reset(NULL, TODRE_RESET_PARAMS),
                    TODRE_ERR_INVALID_ARGUMENT, "cfg");
    tt_assert_fails(NULL, todre_select_keep_count(NULL, 10, &v), TODRE_ERR_INVALID_ARGUMENT, "cfg");
    tt_assert_fails(NULL, todre_select_keep_count(cfg, 10, NULL), TODRE_ERR_INVALID_ARGUMENT, "k");
    todre_select_config_destroy(cfg);
}

/* Ratios outside (0, 1] (NaN and Inf included) are rejected and leave the
 * ratio unchanged; a valid ratio switches the budget back from keep. */
static void test_ratio(void **state)
{
    (void)state;
    todre_select_config *cfg = fresh();
    const double bad[] = {0.0, -0.0, -0.25, 1.0000001, 2.0, NAN, INFINITY, -INFINITY};
    tt_assert_ok(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 0.25));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        tt_assert_fails_param(NULL, todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, bad[i]),
                              TODRE_ERR_INVALID_ARGUMENT, TODRE_SELECT_RATIO);
    assert_true(get_ratio(cfg) == 0.25);
    tt_cfg_set(cfg, TODRE_SELECT_KEEP, 7);
    /* a rejected ratio does not switch the budget back either */
    tt_assert_fails_param(NULL, todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 0.0),
                          TODRE_ERR_INVALID_ARGUMENT, TODRE_SELECT_RATIO);
    assert_int_equal(get(cfg, TODRE_SELECT_KEEP), 7);
    tt_assert_ok(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 1.0));
    assert_int_equal(get(cfg, TODRE_SELECT_KEEP), 0);
    todre_select_config_destroy(cfg);
}

static int64_t keep_count(double ratio, int64_t keep, int64_t n)
{
    todre_select_config *cfg = fresh();
    tt_assert_ok(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, ratio));
    if (keep) tt_cfg_set(cfg, TODRE_SELECT_KEEP, keep);
    int64_t k = -1;
    tt_assert_ok(todre_select_keep_count(cfg, n, &k));
    todre_select_config_destroy(cfg);
    return k;
}

/* k = clamp(floor(r * n + 0.5), 1, n): LLaVA-NeXT's 2880 tokens give 288 at
 * 0.10 and 720 at 0.25; halves round up; tiny ratios keep 1; keep wins. */
static void test_keep_count(void **state)
{
    (void)state;
    assert_int_equal(keep_count(0.10, 0, 2880), 288);
    assert_int_equal(keep_count(0.25, 0, 2880), 720);
    assert_int_equal(keep_count(0.10, 0, 576), 58);  /* 57.6 */
    assert_int_equal(keep_count(0.5, 0, 5), 3);      /* 2.5 rounds up */
    assert_int_equal(keep_count(0.5, 0, 7), 4);      /* 3.5 rounds up */
    assert_int_equal(keep_count(0.3, 0, 5), 2);      /* 1.5 -> 2 */
    assert_int_equal(keep_count(0.01, 0, 5), 1);     /* 0.05 clamps up to 1 */
    assert_int_equal(keep_count(1e-300, 0, 1), 1);
    assert_int_equal(keep_count(1.0, 0, 3001), 3001);
    assert_int_equal(keep_count(0.999, 0, 100), 100); /* 99.9 -> 100 */
    assert_int_equal(keep_count(0.10, 0, 1), 1);
    assert_int_equal(keep_count(0.10, 17, 40), 17);  /* keep overrides the ratio */
    assert_int_equal(keep_count(0.10, 40, 40), 40);
}

/* A budget that cannot be met, or an empty set, is an error naming it. */
static void test_keep_count_contract(void **state)
{
    (void)state;
    todre_select_config *cfg = fresh();
    int64_t k = -1;
    tt_cfg_set(cfg, TODRE_SELECT_KEEP, 11);
    tt_assert_fails(NULL, todre_select_keep_count(cfg, 10, &k), TODRE_ERR_INVALID_ARGUMENT, "keep");
    tt_assert_fails(NULL, todre_select_keep_count(cfg, 0, &k), TODRE_ERR_INVALID_ARGUMENT, "n");
    tt_assert_fails(NULL, todre_select_keep_count(cfg, -5, &k), TODRE_ERR_INVALID_ARGUMENT, "n");
    assert_int_equal(k, -1);
    todre_select_config_destroy(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_bounds_and_round_trip),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_ratio),
        cmocka_unit_test(test_keep_count),
        cmocka_unit_test(test_keep_count_contract),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
