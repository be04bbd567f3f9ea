/* The tie rule between identical rows (docs/semantics.md, "Ties: the lowest
 * index wins everywhere"): rows that hold the same values have the same
 * score in exact arithmetic, so whenever a copy of a row is selected, no
 * lower copy may still be untaken; the pivot (CENTER, FARTHEST, ISOLATED,
 * and CLS with equal CLS values) is the lowest copy in the pivot range.
 *
 * Rows are Gaussian (not small integers: products of integers are exact in
 * any summation order and would hide a kernel that rounds differently
 * depending on where a row sits in a block). Every distinct row appears two
 * or three times at scattered positions, so that ISOLATED's nearest
 * neighbours are copies and k reaches past the number of distinct rows.
 * Checked for every strategy request (AUTO, GEMV, GRAM, ROWS), workspace
 * limits 0 (per-step products, blocked ISOLATED products), small (the Gram
 * matrix does not fit: blocks of a few dozen rows) and the default, every
 * pivot, both greedy objectives, f32 / f16 / bf16, a full and a partial
 * pivot range, 1 thread (and 2 for a part: products are per row, the
 * thread count changes no value), and rows whose raw products leave the fp32
 * range (the normalised-copy path). tests/cpu/CMakeLists.txt runs this
 * program once per ISA level the machine has ($TODRE_CPU_ISA); the level in
 * use is printed.
 *
 * Non-finite input (docs/semantics.md: NaN or Inf in E is an error, never a
 * silent selection): NONFINITE with the row named, for every strategy and
 * pivot, outputs untouched; and finite rows whose raw dot products would
 * overflow fp32 (where a kernel that folded a NaN or Inf similarity would
 * take such a row first) give a valid MAX_MIN trajectory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TODRE_EXPERIMENTAL_API /* TODRE_CONTEXT_EXP_SELECT_STRATEGY */
#include "oracle.h"
#include "todre_test.h"

#define DISTINCT 80
#define N 200 /* 80 rows twice, 40 of them three times */
#define D 45  /* not a multiple of any vector width */
#define K 120 /* past the 80 distinct rows */

struct input {
    todre_dtype dt;
    void *x;       /* N x D */
    float cls[N];  /* equal for copies */
    int src[N];    /* distinct row each row copies */
};

/* zeros: every fifth value of each distinct row is zero, stored as +0 in a
 * row's first copy and as -0 in the later ones (equal numbers, different
 * bits: still copies). */
static void make_input_z(struct input *in, todre_dtype dt, double scale, uint64_t seed, int zeros)
{
    tt_rng r = {seed};
    float base[DISTINCT][D];
    float cval[DISTINCT];
    for (int i = 0; i < DISTINCT; i++) {
        for (int j = 0; j < D; j++) base[i][j] = (float)(tt_rng_normal(&r) * scale);
        cval[i] = (float)tt_rng_uniform(&r);
    }
    /* the copies, shuffled */
    int n = 0;
    for (int i = 0; i < DISTINCT; i++) in->src[n++] = i, in->src[n++] = i;
    for (int i = 0; i < N - 2 * DISTINCT; i++) in->src[n++] = i;
    for (int i = N - 1; i > 0; i--) {
        int j = (int)(tt_rng_u64(&r) % (uint64_t)(i + 1)), t = in->src[i];
        in->src[i] = in->src[j];
        in->src[j] = t;
    }
    in->dt = dt;
    in->x = malloc((size_t)N * D * tt_dtype_size(dt));
    assert_non_null(in->x);
    int seen[DISTINCT] = {0};
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < D; j++) {
            double x = base[in->src[i]][j];
            if (zeros && j % 5 == 0) x = seen[in->src[i]] ? -0.0 : 0.0;
            tt_store(in->x, dt, (size_t)i * D + j, x);
        }
        seen[in->src[i]] = 1;
        in->cls[i] = cval[in->src[i]];
    }
}

static void make_input(struct input *in, todre_dtype dt, double scale, uint64_t seed)
{
    make_input_z(in, dt, scale, seed, 0);
}

/* The same values as numbers (-0 == +0). */
static int same_row(const struct input *in, int64_t a, int64_t b)
{
    for (size_t j = 0; j < D; j++)
        if (tt_load_f64(in->x, in->dt, (size_t)a * D + j) != tt_load_f64(in->x, in->dt, (size_t)b * D + j))
            return 0;
    return 1;
}

struct variant {
    int64_t strategy, limit, threads, lo, hi;
    todre_objective obj;
    todre_pivot pivot;
};

static int run(const struct input *in, const struct variant *v, int64_t *sel, char *why,
               size_t cap)
{
    todre_context *ctx = tt_cpu_context();
    tt_ctx_set(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, v->strategy);
    tt_ctx_set(ctx, TODRE_CONTEXT_WORKSPACE_LIMIT, v->limit);
    tt_ctx_set(ctx, TODRE_CONTEXT_NUM_THREADS, v->threads);
    todre_select_config *cfg = tt_config(v->obj, v->pivot, K, TODRE_ORDER_SELECTION);
    tt_cfg_set(cfg, TODRE_SELECT_PIVOT_LO, v->lo);
    tt_cfg_set(cfg, TODRE_SELECT_PIVOT_HI, v->hi);
    tt_cfg_set(cfg, TODRE_SELECT_SEED, 11);
    tt_array emb, cls, out;
    todre_status st = todre_select(ctx, cfg, tt_array2(&emb, in->x, in->dt, N, D, D),
                                   tt_array1(&cls, (void *)in->cls, TODRE_DTYPE_F32, N),
                                   tt_array1(&out, sel, TODRE_DTYPE_I64, K));
    if (st != TODRE_OK) snprintf(why, cap, "status %d: %s", (int)st, todre_context_last_error(ctx));
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
    return st == TODRE_OK;
}

/* Whether the selection obeys the tie rule; why: the first violation. */
static int ties_ok(const struct input *in, const struct variant *v, const int64_t *sel, char *why,
                   size_t cap)
{
    uint8_t taken[N] = {0};
    int64_t hi = v->hi < 0 ? N : v->hi;
    for (int64_t t = 0; t < K; t++) {
        int64_t c = sel[t];
        if (c < 0 || c >= N || taken[c]) {
            snprintf(why, cap, "step %lld: index %lld invalid or taken twice", (long long)t,
                     (long long)c);
            return 0;
        }
        /* the pivot is the lowest copy in the range (RANDOM draws it) */
        int64_t from = t == 0 ? v->lo : 0;
        for (int64_t u = from; u < c && !(t == 0 && v->pivot == TODRE_PIVOT_RANDOM); u++) {
            if (t == 0 && u >= hi) break;
            if (!taken[u] && same_row(in, u, c)) {
                snprintf(why, cap, "step %lld took row %lld, but row %lld is identical, lower "
                         "and untaken", (long long)t, (long long)c, (long long)u);
                return 0;
            }
        }
        taken[c] = 1;
    }
    return 1;
}

static int check_all_z(todre_dtype dt, double scale, uint64_t seed, int zeros)
{
    static const int64_t strategies[] = {0, 1, 2, 3};
    static const int64_t limits[] = {0, 64 << 10, 256 << 20};
    static const todre_pivot pivots[] = {TODRE_PIVOT_AUTO,     TODRE_PIVOT_CLS,
                                         TODRE_PIVOT_CENTER,   TODRE_PIVOT_FARTHEST,
                                         TODRE_PIVOT_RANDOM,   TODRE_PIVOT_ISOLATED};
    static const int64_t ranges[][2] = {{0, -1}, {37, 171}};
    struct input in;
    make_input_z(&in, dt, scale, seed, zeros);
    int64_t sel[K];
    char why[256];
    int bad = 0, runs = 0;
    for (size_t s = 0; s < 4; s++)
        for (size_t l = 0; l < 3; l++)
            for (int obj = 0; obj < 2; obj++)
                for (size_t p = 0; p < sizeof pivots / sizeof pivots[0]; p++)
                    for (size_t r = 0; r < 2; r++)
                        for (int64_t th = 1; th <= (r == 0 && l == 0 && s < 2 ? 2 : 1); th++) {
                            struct variant v = {strategies[s], limits[l], th, ranges[r][0],
                                                ranges[r][1], (todre_objective)obj, pivots[p]};
                            runs++;
                            if (run(&in, &v, sel, why, sizeof why) &&
                                ties_ok(&in, &v, sel, why, sizeof why))
                                continue;
                            if (bad++ < 12)
                                print_message("dtype %d scale %g strategy %lld limit %lld "
                                              "threads %lld objective %d pivot %d range [%lld, "
                                              "%lld): %s\n",
                                              (int)dt, scale, (long long)v.strategy,
                                              (long long)v.limit, (long long)v.threads, obj,
                                              (int)v.pivot, (long long)v.lo, (long long)v.hi, why);
                        }
    free(in.x);
    if (bad) print_message("%d of %d calls broke the tie rule\n", bad, runs);
    return bad;
}

static int check_all(todre_dtype dt, double scale, uint64_t seed)
{
    return check_all_z(dt, scale, seed, 0);
}

/* Copies that differ only in the sign of their zeros are copies: the row
 * hash (select_copies.c) folds -0 onto +0 in every lane of its words. */
static void ties_signed_zeros(void **state)
{
    (void)state;
    if (check_all_z(TODRE_DTYPE_F32, 1.0, 21, 1) + check_all_z(TODRE_DTYPE_F16, 1.0, 22, 1) +
        check_all_z(TODRE_DTYPE_BF16, 1.0, 23, 1))
        fail_msg("rows equal up to the sign of zero not taken lowest index first");
}

static void ties_f32(void **state)
{
    (void)state;
    if (check_all(TODRE_DTYPE_F32, 1.0, 1) + check_all(TODRE_DTYPE_F32, 0x1p70, 2))
        fail_msg("f32: identical rows not taken lowest index first");
}

static void ties_f16(void **state)
{
    (void)state;
    if (check_all(TODRE_DTYPE_F16, 1.0, 3) + check_all(TODRE_DTYPE_F16, 0x1p-10, 4))
        fail_msg("f16: identical rows not taken lowest index first");
}

static void ties_bf16(void **state)
{
    (void)state;
    if (check_all(TODRE_DTYPE_BF16, 1.0, 5) + check_all(TODRE_DTYPE_BF16, 0x1p-80, 6))
        fail_msg("bf16: identical rows not taken lowest index first");
}

/* ---- long rows: copies and near-copies ----------------------------------- */

/* Rows long enough that select_copies.c first hashes a sample of each row's
 * words (16 spread words, the first and last included) and hashes in full
 * only rows that share a sample: 40 distinct rows, a copy of each
 * (scattered), and a near-copy of each that equals it at every sampled word
 * but differs in 8 elements of words never sampled (the second word, and
 * the ones around the middle). A near-copy taken for a copy would read its
 * row's products and fail the float64 oracle; copies must still go lowest
 * index first (the oracle checks that too). GRAM and ROWS (the strategies
 * that read products through copies), AUTO, both objectives, the CENTER and
 * ISOLATED pivots (ISOLATED's nearest neighbours are the copies), f32, f16,
 * bf16. */
#define LN 120
#define LD_ 520
#define LK 90

static void near_copies(void **state)
{
    (void)state;
    static const todre_dtype dts[] = {TODRE_DTYPE_F32, TODRE_DTYPE_F16, TODRE_DTYPE_BF16};
    static const int64_t strategies[] = {0, 2, 3};
    static const todre_pivot pivots[] = {TODRE_PIVOT_CENTER, TODRE_PIVOT_ISOLATED};
    int bad = 0;
    for (size_t di = 0; di < 3; di++) {
        todre_dtype dt = dts[di];
        int64_t per = dt == TODRE_DTYPE_F32 ? 2 : 4, words = LD_ / per;
        /* elements in words no sample reads (words at w (words - 1) / 15) */
        int64_t mid = words / 2 + 1, diff[8];
        for (int e = 0; e < 4; e++) diff[e] = per + e % per, diff[4 + e] = mid * per + e % per;
        for (int w = 0; w < 16; w++) {
            int64_t at = w * (words - 1) / 15;
            assert_true(at != 1 && at != mid);
        }
        tt_rng r = {31 + di};
        double base[40][LD_];
        for (int i = 0; i < 40; i++)
            for (int j = 0; j < LD_; j++) base[i][j] = tt_rng_normal(&r);
        int src[LN], kind[LN];
        for (int i = 0; i < LN; i++) src[i] = i % 40, kind[i] = i / 40; /* 0 row, 1 copy, 2 near */
        for (int i = LN - 1; i > 0; i--) {
            int j = (int)(tt_rng_u64(&r) % (uint64_t)(i + 1)), t = src[i], u = kind[i];
            src[i] = src[j], kind[i] = kind[j];
            src[j] = t, kind[j] = u;
        }
        void *x = malloc((size_t)LN * LD_ * tt_dtype_size(dt));
        assert_non_null(x);
        for (int i = 0; i < LN; i++)
            for (int j = 0; j < LD_; j++) {
                double v = base[src[i]][j];
                for (int e = 0; e < 8 && kind[i] == 2; e++)
                    if (diff[e] == j) v += 3.0;
                tt_store(x, dt, (size_t)i * LD_ + j, v);
            }
        for (size_t si = 0; si < 3; si++)
            for (int obj = 0; obj < 2; obj++)
                for (size_t pi = 0; pi < 2; pi++) {
                    todre_context *ctx = tt_cpu_context();
                    tt_ctx_set(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, strategies[si]);
                    todre_select_config *cfg =
                        tt_config((todre_objective)obj, pivots[pi], LK, TODRE_ORDER_SELECTION);
                    int64_t sel[LK];
                    tt_array emb, out;
                    todre_status st = todre_select(ctx, cfg, tt_array2(&emb, x, dt, LN, LD_, LD_),
                                                   NULL, tt_array1(&out, sel, TODRE_DTYPE_I64, LK));
                    char msg[256] = "";
                    if (st == TODRE_OK) {
                        struct tt_problem p;
                        tt_problem_init(&p, x, dt, LN, LD_, LD_, NULL, TODRE_DTYPE_F32,
                                        (todre_objective)obj, pivots[pi], 0, -1);
                        if (tt_check_trajectory(&p, sel, LK, msg, sizeof msg) < 0) msg[0] = 0;
                        tt_problem_free(&p);
                    } else {
                        snprintf(msg, sizeof msg, "status %d: %s", (int)st,
                                 todre_context_last_error(ctx));
                    }
                    if (msg[0] && bad++ < 12)
                        print_message("dtype %d strategy %lld objective %d pivot %d: %s\n",
                                      (int)dt, (long long)strategies[si], obj, (int)pivots[pi],
                                      msg);
                    todre_select_config_destroy(cfg);
                    todre_context_destroy(ctx);
                }
        free(x);
    }
    if (bad) fail_msg("%d calls with near-copies of long rows failed the oracle", bad);
}

/* ---- non-finite input ------------------------------------------------------ */

/* A NaN or an Inf in one row: NONFINITE naming the row, for every strategy
 * and pivot, and the output untouched. */
static void nonfinite_refused(void **state)
{
    (void)state;
    static const todre_dtype dts[] = {TODRE_DTYPE_F32, TODRE_DTYPE_F16, TODRE_DTYPE_BF16};
    static const double bad_values[] = {NAN, INFINITY, -INFINITY};
    for (size_t di = 0; di < 3; di++)
        for (size_t bi = 0; bi < 3; bi++)
            for (int64_t strategy = 0; strategy < 4; strategy++)
                for (int obj = 0; obj < 2; obj++)
                    for (int pivot = 0; pivot <= TODRE_PIVOT_ISOLATED; pivot++) {
                        struct input in;
                        make_input(&in, dts[di], 1.0, 7);
                        /* every value of row 93 (the all-NaN row a swallowing
                         * max-min would take first), or one value of it */
                        for (int j = 0; j < D; j++)
                            if (bi == 0 || j == 17)
                                tt_store(in.x, dts[di], (size_t)93 * D + j, bad_values[bi]);
                        todre_context *ctx = tt_cpu_context();
                        tt_ctx_set(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, strategy);
                        todre_select_config *cfg =
                            tt_config((todre_objective)obj, (todre_pivot)pivot, K,
                                      TODRE_ORDER_SELECTION);
                        int64_t sel[K];
                        for (int i = 0; i < K; i++) sel[i] = -7;
                        tt_array emb, cls, out;
                        todre_status st =
                            todre_select(ctx, cfg, tt_array2(&emb, in.x, in.dt, N, D, D),
                                         tt_array1(&cls, in.cls, TODRE_DTYPE_F32, N),
                                         tt_array1(&out, sel, TODRE_DTYPE_I64, K));
                        if (st != TODRE_ERR_NONFINITE)
                            fail_msg("dtype %d value %g strategy %lld objective %d pivot %d: "
                                     "status %d, expected NONFINITE", (int)dts[di],
                                     bad_values[bi], (long long)strategy, obj, pivot, (int)st);
                        if (!strstr(todre_context_last_error(ctx), "row 93"))
                            fail_msg("message does not name row 93: %s",
                                     todre_context_last_error(ctx));
                        for (int i = 0; i < K; i++)
                            if (sel[i] != -7) fail_msg("a failed call wrote its output");
                        todre_select_config_destroy(cfg);
                        todre_context_destroy(ctx);
                        free(in.x);
                    }
}

/* Finite rows whose raw fp32 dot products overflow (|e| ~ 2^70: squares
 * ~ 2^140 > FLT_MAX) or underflow (bf16 ~ 2^-80): MAX_MIN with every pivot
 * must follow a valid greedy trajectory in double precision. A kernel that
 * formed such products raw would get Inf - Inf = NaN similarities, and a
 * NaN folded into min(D_v, 1 - s) would either be dropped (the row keeps
 * D_v = +inf and is taken next) or win the argmax. One row in each of the
 * input is made much larger still, so it differs in scale from the others. */
static void out_of_range_rows_maxmin(void **state)
{
    (void)state;
    static const struct {
        todre_dtype dt;
        double scale;
    } cases[] = {{TODRE_DTYPE_F32, 0x1p70}, {TODRE_DTYPE_BF16, 0x1p70}, {TODRE_DTYPE_BF16, 0x1p-80},
                 {TODRE_DTYPE_F32, 0x1p-70}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int64_t strategy = 0; strategy < 4; strategy++)
            for (int pivot = TODRE_PIVOT_CENTER; pivot <= TODRE_PIVOT_ISOLATED; pivot++) {
                struct input in;
                make_input(&in, cases[ci].dt, cases[ci].scale, 9 + ci);
                /* a few copies removed: distinct rows give strict steps */
                for (int i = 0; i < N; i++)
                    tt_store(in.x, in.dt, (size_t)i * D + (size_t)(i % D),
                             tt_load_f64(in.x, in.dt, (size_t)i * D + (size_t)(i % D)) * 1.5 +
                                 cases[ci].scale * 0.01 * (i % 7));
                double xs[N][D];
                for (int i = 0; i < N; i++) {
                    double ss = 0;
                    for (int j = 0; j < D; j++) {
                        xs[i][j] = tt_load_f64(in.x, in.dt, (size_t)i * D + j);
                        ss += xs[i][j] * xs[i][j];
                    }
                    for (int j = 0; j < D; j++) xs[i][j] /= sqrt(ss);
                }
                todre_context *ctx = tt_cpu_context();
                tt_ctx_set(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, strategy);
                tt_ctx_set(ctx, TODRE_CONTEXT_NUM_THREADS, 1);
                todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_MIN, (todre_pivot)pivot,
                                                     40, TODRE_ORDER_SELECTION);
                tt_cfg_set(cfg, TODRE_SELECT_SEED, 3);
                int64_t sel[40];
                tt_array emb, out;
                tt_assert_ok(todre_select(ctx, cfg, tt_array2(&emb, in.x, in.dt, N, D, D), NULL,
                                          tt_array1(&out, sel, TODRE_DTYPE_I64, 40)));
                double dist[N];
                uint8_t taken[N] = {0};
                for (int v = 0; v < N; v++) dist[v] = INFINITY;
                for (int t = 0; t < 40; t++) {
                    int64_t c = sel[t];
                    assert_true(c >= 0 && c < N && !taken[c]);
                    if (t > 0) {
                        double best = -INFINITY;
                        for (int v = 0; v < N; v++)
                            if (!taken[v] && dist[v] > best) best = dist[v];
                        if (!(dist[c] >= best - 1e-5))
                            fail_msg("dtype %d scale %g strategy %lld pivot %d: step %d took "
                                     "%lld at distance %.9g, the farthest is %.9g",
                                     (int)in.dt, cases[ci].scale, (long long)strategy, pivot, t,
                                     (long long)c, dist[c], best);
                    }
                    taken[c] = 1;
                    for (int v = 0; v < N; v++) {
                        double s = 0;
                        for (int j = 0; j < D; j++) s += xs[v][j] * xs[c][j];
                        if (1 - s < dist[v]) dist[v] = 1 - s;
                    }
                }
                todre_select_config_destroy(cfg);
                todre_context_destroy(ctx);
                free(in.x);
            }
}

int main(void)
{
    todre_device_props dp;
    memset(&dp, 0, sizeof dp);
    dp.struct_size = sizeof dp;
    if (todre_device_get_props("cpu", 0, &dp) == TODRE_OK)
        printf("CPU code path: %s (TODRE_CPU_ISA=%s)\n", dp.arch,
               getenv("TODRE_CPU_ISA") ? getenv("TODRE_CPU_ISA") : "");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ties_f32),
        cmocka_unit_test(ties_f16),
        cmocka_unit_test(ties_bf16),
        cmocka_unit_test(ties_signed_zeros),
        cmocka_unit_test(near_copies),
        cmocka_unit_test(nonfinite_refused),
        cmocka_unit_test(out_of_range_rows_maxmin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
