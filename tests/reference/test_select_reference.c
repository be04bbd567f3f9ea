/* todre_select against the independent float64 reference (tests/reference/
 * todre_ref.py) on every fixture case written by gen_select_cases.py:
 * random and structured inputs (clusters, duplicates, exact ties, zero rows,
 * strided rows, f16/bf16), n from 1 to 3001, d from 1 to 4096, k = 1 and
 * k = n, every objective and pivot mode, pivot ranges (AnyRes thumbnail),
 * video [frames, tokens] CLS maps, RANDOM pivots from several seeds.
 *
 * A case passes when the library's selection order equals the reference's;
 * where it differs, the case must not be marked exact (all scores exact in any
 * arithmetic) and the library's own trajectory must pass the float64 oracle
 * (tests/common/oracle.h) within its rounding tolerance. Every case runs with
 * each stage-1 strategy (AUTO, GEMV, GRAM), in ORDER_BOTH layout (position
 * row = sorted selection), and a repeated call must give identical output. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TODRE_EXPERIMENTAL_API /* TODRE_CONTEXT_EXP_SELECT_STRATEGY */
#include "fixture.h"
#include "oracle.h"
#include "todre_test.h"

struct suite {
    const char *dir;
    struct tt_case *cases;
    size_t count;
};

static int setup(void **state)
{
    static struct suite s;
    char err[512];
    s.dir = tt_select_data_dir();
    if (!s.dir) return -1;
    if (tt_cases_read(s.dir, &s.cases, &s.count, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    *state = &s;
    return 0;
}

static int teardown(void **state)
{
    struct suite *s = *state;
    free(s->cases);
    return 0;
}

/* ---- building the library's inputs from a case --------------------------------- */

struct inputs {
    void *rows;           /* [n, d + pad]; padding NaN so reading it is caught */
    tt_array emb_a, cls_a, cls_flat_a;
    const DLTensor *emb;
    const DLTensor *cls;    /* as the case says ([n] or [frames, t]), or NULL */
    const DLTensor *cls_flat; /* the same values as [n] (video cases only), or NULL */
};

static void build_inputs(const struct tt_case *c, struct inputs *in)
{
    size_t es = tt_dtype_size(c->dtype);
    int64_t ld = c->d + c->pad;
    memset(in, 0, sizeof *in);
    in->rows = malloc(es * (size_t)(c->n * ld));
    assert_non_null(in->rows);
    for (int64_t i = 0; i < c->n; i++) {
        memcpy((char *)in->rows + es * (size_t)(i * ld), (const char *)c->emb.data + es * (size_t)(i * c->d),
               es * (size_t)c->d);
        for (int64_t j = c->d; j < ld; j++) tt_store(in->rows, c->dtype, (size_t)(i * ld + j), NAN);
    }
    in->emb = tt_array2(&in->emb_a, in->rows, c->dtype, c->n, c->d, ld);
    if (c->cls_kind == TT_CLS_VIDEO) {
        int64_t shape[2] = {c->frames, c->n / c->frames};
        in->cls = tt_array_init(&in->cls_a, c->cls.data, c->cls_dtype, 2, shape, NULL);
        in->cls_flat = tt_array1(&in->cls_flat_a, c->cls.data, c->cls_dtype, c->n);
    } else if (c->cls_kind == TT_CLS_FLAT) {
        in->cls = tt_array1(&in->cls_a, c->cls.data, c->cls_dtype, c->n);
    }
}

static void free_inputs(struct inputs *in)
{
    free(in->rows);
}

static todre_select_config *case_config(const struct tt_case *c)
{
    todre_select_config *cfg = tt_config(c->objective, c->pivot, c->keep, TODRE_ORDER_BOTH);
    tt_cfg_set(cfg, TODRE_SELECT_PIVOT_LO, c->lo);
    tt_cfg_set(cfg, TODRE_SELECT_PIVOT_HI, c->hi);
    tt_cfg_set(cfg, TODRE_SELECT_SEED, c->seed);
    if (c->keep == 0) tt_assert_ok(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, c->ratio));
    int64_t k = -1;
    tt_assert_ok(todre_select_keep_count(cfg, c->n, &k));
    if (k != c->k) fail_msg("%s: keep_count %lld, reference %lld", c->name, (long long)k, (long long)c->k);
    return cfg;
}

/* ---- judging one result ----------------------------------------------------------- */

struct verdict {
    int ok;
    int matched; /* equal to the reference */
    char msg[600];
};

/* First step where sel differs from the reference (k if none). */
static int64_t first_difference(const struct tt_case *c, const int64_t *sel)
{
    const int64_t *want = c->order.data;
    int64_t j = 0;
    while (j < c->k && sel[j] == want[j]) j++;
    return j;
}

static void judge_result(const struct tt_case *c, const struct inputs *in, const int64_t *sel,
                         struct verdict *v)
{
    const int64_t *want = c->order.data;
    const double *margin = c->margin.data;
    int64_t j = first_difference(c, sel);
    v->ok = 1;
    v->matched = j == c->k;
    if (v->matched) return;

    struct tt_problem p;
    tt_problem_init(&p, in->rows, c->dtype, c->n, c->d, c->d + c->pad,
                    c->cls_kind ? c->cls.data : NULL, c->cls_dtype, c->objective, c->pivot, c->lo,
                    c->hi);
    double tol = tt_oracle_tol(&p, j);
    if (c->exact || tol == 0.0) {
        v->ok = 0;
        snprintf(v->msg, sizeof v->msg, "step %lld: chose %lld, reference %lld (%s)", (long long)j,
                 (long long)sel[j], (long long)want[j],
                 c->exact ? "every score of this case is exact: no rounding excuse"
                          : "CLS and RANDOM choices involve no rounding");
    } else {
        char why[400];
        int64_t bad = tt_check_trajectory(&p, sel, c->k, why, sizeof why);
        if (bad >= 0) {
            v->ok = 0;
            snprintf(v->msg, sizeof v->msg,
                     "deviates from the reference at step %lld (reference margin %.3g, tol %.3g); "
                     "invalid at step %lld: %s", (long long)j, margin[j], tol, (long long)bad, why);
        }
    }
    tt_problem_free(&p);
}

/* ---- running a case ------------------------------------------------------------------ */

/* ROWS (speculative Gram rows) runs on AMX machines and is GRAM elsewhere. */
enum { NSTRAT = 4 };
static const int64_t strategies[NSTRAT] = {0, 1, 2, 3}; /* AUTO, GEMV, GRAM, ROWS */
static const char *const strategy_names[NSTRAT] = {"AUTO", "GEMV", "GRAM", "ROWS"};

struct tally {
    int failures, matched, validated;
};

static int run_one(todre_context *ctx, todre_select_config *cfg, const struct tt_case *c,
                   const DLTensor *emb, const DLTensor *cls, int64_t *sel, int64_t *pos,
                   const char *label)
{
    todre_status st = tt_select_both(ctx, cfg, emb, cls, c->k, sel, pos);
    if (st != TODRE_OK) {
        print_error("%s [%s]: %s: %s\n", c->name, label, todre_status_string(st), todre_last_error());
        return 0;
    }
    tt_assert_position_order(sel, pos, c->k, c->n);
    return 1;
}

/* Judge one result against the reference and count it. */
static void tally_verdict(const struct tt_case *c, const struct inputs *in, const int64_t *sel,
                          const char *label, struct tally *t)
{
    struct verdict v;
    judge_result(c, in, sel, &v);
    if (!v.ok) {
        print_error("%s [%s]: %s\n", c->name, label, v.msg);
        t->failures++;
    } else if (v.matched) {
        t->matched++;
    } else {
        t->validated++;
        int64_t j = first_difference(c, sel);
        print_message("%s [%s]: valid near-tie deviation at step %lld (chose %lld, reference "
                      "%lld, reference margin %.3g)\n", c->name, label, (long long)j,
                      (long long)sel[j], (long long)((const int64_t *)c->order.data)[j],
                      ((const double *)c->margin.data)[j]);
    }
}

/* A repeated call on the same context (for video, through the flat view of
 * the CLS map) must give the identical selection. */
static void check_repeat(todre_context *ctx, todre_select_config *cfg, const struct tt_case *c,
                         const struct inputs *in, const int64_t *sel, const char *label,
                         struct tally *t)
{
    int64_t *again = malloc(sizeof(int64_t) * (size_t)(2 * c->k));
    assert_non_null(again);
    const DLTensor *cls = in->cls_flat ? in->cls_flat : in->cls;
    if (!run_one(ctx, cfg, c, in->emb, cls, again, again + c->k, label)) {
        t->failures++;
    } else if (memcmp(sel, again, sizeof(int64_t) * (size_t)c->k) != 0) {
        print_error("%s [%s]: a repeated call%s gave a different selection\n", c->name, label,
                    in->cls_flat ? " with the flat CLS view" : "");
        t->failures++;
    }
    free(again);
}

static void run_case(todre_context *const ctx[NSTRAT], const struct tt_case *c, const struct inputs *in,
                     struct tally *t)
{
    todre_select_config *cfg = case_config(c);
    int64_t *sel = malloc(sizeof(int64_t) * (size_t)(2 * c->k));
    assert_non_null(sel);
    /* repeats of the largest cases are skipped to keep the suite fast */
    int repeat = in->cls_flat || (double)c->n * (double)c->d * (double)c->k <= 5e7;
    for (int s = 0; s < NSTRAT; s++) {
        if (!run_one(ctx[s], cfg, c, in->emb, in->cls, sel, sel + c->k, strategy_names[s])) {
            t->failures++;
            continue;
        }
        tally_verdict(c, in, sel, strategy_names[s], t);
        if (repeat) check_repeat(ctx[s], cfg, c, in, sel, strategy_names[s], t);
    }
    free(sel);
    todre_select_config_destroy(cfg);
}

static void test_reference_cases(void **state)
{
    struct suite *s = *state;
    todre_context *ctx[NSTRAT];
    for (int i = 0; i < NSTRAT; i++) {
        ctx[i] = tt_cpu_context();
        tt_ctx_set(ctx[i], TODRE_CONTEXT_EXP_SELECT_STRATEGY, strategies[i]);
    }
    struct tally t = {0, 0, 0};
    for (size_t i = 0; i < s->count; i++) {
        struct tt_case *c = &s->cases[i];
        char err[512];
        if (tt_case_load(s->dir, c, err, sizeof err) != 0) fail_msg("%s", err);
        struct inputs in;
        build_inputs(c, &in);
        clock_t start = clock();
        run_case(ctx, c, &in, &t);
        if (getenv("TODRE_TEST_VERBOSE"))
            print_message("%s: %.2f s CPU\n", c->name, (double)(clock() - start) / CLOCKS_PER_SEC);
        free_inputs(&in);
        tt_case_free(c);
    }
    print_message("%zu cases x %d strategies: %d equal to the reference, %d valid near-tie "
                  "trajectories, %d failures\n", s->count, NSTRAT, t.matched, t.validated, t.failures);
    for (int i = 0; i < NSTRAT; i++) todre_context_destroy(ctx[i]);
    assert_int_equal(t.failures, 0);
}

/* Oracle work for a full trajectory, in multiply-adds. */
static double oracle_cost(const struct tt_case *c)
{
    double n = (double)c->n, work = n * (double)c->d * (double)c->k;
    if (c->objective == TODRE_OBJECTIVE_MAX_MIN || c->pivot == TODRE_PIVOT_ISOLATED)
        work += n * n * (double)c->d; /* ISOLATED pivot scores */
    return work;
}

/* Swap steps j and j + 1 at the first step j >= 1 whose reference margin
 * exceeds the tolerance; the oracle must reject the result at exactly j.
 * Returns 1 if such a step exists. */
static int check_swap_rejected(const struct tt_case *c, const struct tt_problem *p)
{
    const int64_t *want = c->order.data;
    const double *margin = c->margin.data;
    for (int64_t j = 1; j + 1 < c->k; j++) {
        if (!(margin[j] > tt_oracle_tol(p, j))) continue;
        int64_t *swapped = malloc(sizeof(int64_t) * (size_t)c->k);
        assert_non_null(swapped);
        memcpy(swapped, want, sizeof(int64_t) * (size_t)c->k);
        swapped[j] = want[j + 1];
        swapped[j + 1] = want[j];
        char why[400];
        int64_t bad = tt_check_trajectory(p, swapped, c->k, why, sizeof why);
        free(swapped);
        if (bad != j)
            fail_msg("%s: oracle returned %lld for a swap at step %lld (margin %.3g, tol %.3g)",
                     c->name, (long long)bad, (long long)j, margin[j], tt_oracle_tol(p, j));
        return 1;
    }
    return 0;
}

/* The oracle is neither vacuous nor too strict: it accepts the reference's
 * own orders and rejects them with two steps swapped where the reference
 * margin exceeds the tolerance. (Skips full checks of the largest cases to
 * stay fast; the swap check stops at the swap.) */
static void test_oracle_self_check(void **state)
{
    struct suite *s = *state;
    int swaps = 0, full = 0;
    for (size_t i = 0; i < s->count; i++) {
        struct tt_case *c = &s->cases[i];
        char err[512];
        if (tt_case_load(s->dir, c, err, sizeof err) != 0) fail_msg("%s", err);
        struct tt_problem p;
        tt_problem_init(&p, c->emb.data, c->dtype, c->n, c->d, c->d, c->cls_kind ? c->cls.data : NULL,
                        c->cls_dtype, c->objective, c->pivot, c->lo, c->hi);
        if (oracle_cost(c) <= 2e8) {
            int64_t bad = tt_check_trajectory(&p, c->order.data, c->k, err, sizeof err);
            if (bad >= 0) fail_msg("%s: the reference order fails the oracle at step %lld: %s", c->name,
                                   (long long)bad, err);
            full++;
        }
        swaps += check_swap_rejected(c, &p);
        tt_problem_free(&p);
        tt_case_free(c);
    }
    print_message("oracle accepted %d reference orders and rejected %d swapped ones\n", full, swaps);
    assert_true(full >= 40 && swaps >= 40);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle_self_check),
        cmocka_unit_test(test_reference_cases),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
