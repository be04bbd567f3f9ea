/* The CPU stage-1 row kernels of one ISA level (src/cpu/select_kernels.c)
 * against references written here from their definitions in
 * src/cpu/select_kernels.h. tests/cpu/CMakeLists.txt builds this program
 * with the kernel sources themselves (the table is internal to libtodre)
 * and runs it once per level the machine has ($TODRE_CPU_ISA); the level
 * in use is printed.
 *
 * update, the greedy's step from a row of similarities (MAX_SUM and
 * MAX_MIN, sign +1 and -1): every acc value bitwise equal to one rounding
 * per operation, and the returned index the untaken token with the
 * smallest sign * acc below +inf, ties to the lowest index, -1 when none;
 * with ties, NaN and infinite values, all or no tokens taken, and n across
 * the vector widths and their tails. dot4 (the lookahead's four dot
 * products at once): bitwise four calls of dot, and dot within fp32
 * accumulation of a float64 reference. sumsq in parts (the ROWS packing
 * sums each row K block by K block): bitwise the sum in one part, which is
 * within fp64 accumulation of a float64 reference; sumsq_dot (the packing's
 * norms with the pivot's dots): bitwise sumsq's sum, and a dot bitwise the
 * same in parts as in one, within fp32 accumulation of a float64
 * reference. (dot, sumsq and widen
 * are also checked through every selection test at every level.) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpu/cpu_isa.h"
#include "cpu/select_kernels.h"
#include "half.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* uniform in [-1, 1) */
static double unif(void) { return (double)(rnd() >> 11) / 4503599627370496.0 - 1.0; }

static int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static int64_t ref_update(double *acc, const uint8_t *taken, const float *g,
                          const double *scale, double sc, int64_t n, int maxmin, int sign)
{
    int64_t best = -1;
    double bv = 0;
    for (int64_t v = 0; v < n; v++) {
        if (taken[v]) continue;
        double t = scale[v] * sc;
        double sim = (double)g[v] * t;
        if (maxmin) {
            double dist = 1.0 - sim;
            if (dist < acc[v] || isnan(dist)) acc[v] = dist;
        } else {
            acc[v] = acc[v] + sim;
        }
        double x = (double)sign * acc[v];
        if (x < INFINITY && (best < 0 || x < bv)) {
            best = v;
            bv = x;
        }
    }
    return best;
}

/* kinds: 0 random, 1 few distinct values (ties), 2 with NaN / Inf, 3 all
 * taken, 4 every value +inf for the sign (MAX_MIN's start) */
static void check_update(const struct todre_sel_kernels *k, int64_t n, int kind, int maxmin,
                         int sign)
{
    double *acc = malloc((size_t)n * sizeof(double)), *ref = malloc((size_t)n * sizeof(double));
    double *scale = malloc((size_t)n * sizeof(double));
    float *g = malloc((size_t)n * sizeof(float));
    uint8_t *taken = malloc((size_t)n);
    assert_non_null(acc);
    assert_non_null(ref);
    assert_non_null(scale);
    assert_non_null(g);
    assert_non_null(taken);
    for (int64_t v = 0; v < n; v++) {
        taken[v] = kind == 3 || (rnd() % 4 == 0);
        scale[v] = 0.5 + 0.5 * fabs(unif());
        g[v] = (float)unif();
        acc[v] = maxmin ? 1.0 + unif() : 10.0 * unif();
        if (kind == 1) {
            g[v] = (float)(rnd() % 3) * 0.25f;
            scale[v] = 1.0;
            acc[v] = (double)(rnd() % 3);
        }
        if (kind == 2) {
            uint64_t r = rnd() % 16;
            if (r == 0) g[v] = NAN;
            if (r == 1) acc[v] = INFINITY;
            if (r == 2) acc[v] = -INFINITY;
            if (r == 3) acc[v] = NAN;
        }
        if (kind == 4) acc[v] = sign > 0 ? INFINITY : -INFINITY, g[v] = NAN;
    }
    memcpy(ref, acc, (size_t)n * sizeof(double));
    double sc = 0.75 + 0.25 * unif();
    int64_t want = ref_update(ref, taken, g, scale, sc, n, maxmin, sign);
    int64_t got = k->update(acc, taken, g, scale, sc, n, maxmin, sign);
    for (int64_t v = 0; v < n; v++) {
        if (!same_bits(acc[v], ref[v]))
            fail_msg("update n %lld kind %d maxmin %d sign %d: acc[%lld] %a, want %a",
                     (long long)n, kind, maxmin, sign, (long long)v, acc[v], ref[v]);
    }
    if (got != want)
        fail_msg("update n %lld kind %d maxmin %d sign %d: index %lld, want %lld", (long long)n,
                 kind, maxmin, sign, (long long)got, (long long)want);
    free(acc);
    free(ref);
    free(scale);
    free(g);
    free(taken);
}

static void test_update(void **state)
{
    (void)state;
    const struct todre_sel_kernels *k = todre_sel_kernels_for(TODRE_DTYPE_F32);
    const int64_t ns[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 100, 2880};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (int kind = 0; kind < 5; kind++)
            for (int maxmin = 0; maxmin < 2; maxmin++)
                for (int sign = -1; sign <= 1; sign += 2)
                    for (int rep = 0; rep < 4; rep++) check_update(k, ns[i], kind, maxmin, sign);
}

/* Ties across lanes: equal smallest values at indices in different lanes
 * and chunks; the lowest must win. */
static void test_update_ties(void **state)
{
    (void)state;
    const struct todre_sel_kernels *k = todre_sel_kernels_for(TODRE_DTYPE_F32);
    enum { n = 53 };
    const int64_t firsts[] = {0, 3, 7, 8, 12, 17, 40, 52};
    for (size_t f = 0; f < sizeof firsts / sizeof firsts[0]; f++) {
        double acc[n], scale[n];
        float g[n];
        uint8_t taken[n];
        for (int v = 0; v < n; v++) acc[v] = 5.0, scale[v] = 1.0, g[v] = 1.0f, taken[v] = 0;
        /* the same smallest value at firsts[f] and at every later index
         * that is 5 mod 8 */
        for (int64_t v = firsts[f]; v < n; v++)
            if (v == firsts[f] || v % 8 == 5) acc[v] = 1.0;
        assert_int_equal(k->update(acc, taken, g, scale, 1.0, n, 0, 1), firsts[f]);
    }
}

/* dot4 = four calls of dot, bitwise, for every dtype and d across the
 * vector widths and their tails; and dot itself within fp32 accumulation
 * of the exact products (float64 reference). */
static void test_dot4(void **state)
{
    (void)state;
    const todre_dtype dts[] = {TODRE_DTYPE_F32, TODRE_DTYPE_F16, TODRE_DTYPE_BF16};
    const int64_t ds[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 300, 4096};
    for (int t = 0; t < 3; t++) {
        const struct todre_sel_kernels *k = todre_sel_kernels_for(dts[t]);
        const size_t es = dts[t] == TODRE_DTYPE_F32 ? 4 : 2;
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++) {
            const int64_t d = ds[di];
            void *rows[4];
            const void *crow[4];
            float *w = malloc((size_t)d * sizeof(float)), got[4];
            assert_non_null(w);
            for (int64_t i = 0; i < d; i++) w[i] = (float)unif();
            for (int j = 0; j < 4; j++) {
                rows[j] = malloc((size_t)d * es);
                assert_non_null(rows[j]);
                for (int64_t i = 0; i < d; i++) {
                    float x = (float)unif();
                    if (es == 4) ((float *)rows[j])[i] = x;
                    else if (dts[t] == TODRE_DTYPE_F16) ((uint16_t *)rows[j])[i] = todre_f32_to_f16(x);
                    else ((uint16_t *)rows[j])[i] = todre_f32_to_bf16(x);
                }
                crow[j] = rows[j];
            }
            k->dot4(crow, w, d, got);
            for (int j = 0; j < 4; j++) {
                float one = k->dot(rows[j], w, d);
                if (memcmp(&one, &got[j], sizeof one) != 0)
                    fail_msg("dot4 dtype %d d %lld row %d: %a, dot gives %a", (int)dts[t],
                             (long long)d, j, (double)got[j], (double)one);
                double ref = 0, mag = 0;
                for (int64_t i = 0; i < d; i++) {
                    double x = es == 4 ? ((float *)rows[j])[i]
                               : dts[t] == TODRE_DTYPE_F16 ? todre_f16_to_f32(((uint16_t *)rows[j])[i])
                                                           : todre_bf16_to_f32(((uint16_t *)rows[j])[i]);
                    ref += x * w[i];
                    mag += fabs(x * w[i]);
                }
                assert_true(fabs((double)one - ref) <= (double)d * 1.2e-7 * mag + 1e-30);
            }
            for (int j = 0; j < 4; j++) free(rows[j]);
            free(w);
        }
    }
}

/* sumsq in parts: a row summed in parts cut at multiples of
 * TODRE_SEL_SUMSQ_PART (one part, the ROWS packing's 128-long K blocks,
 * parts of 16, and uneven cuts) gives bitwise its sum in one part, and that
 * sum is within fp64 accumulation of a float64 reference (the squares of
 * fp32 values are exact in fp64); non-finite values give a non-finite sum.
 * sumsq_dot in the same parts gives sumsq's sum bitwise and a dot with w
 * bitwise its dot in one part, within d * 2^-24 of sum |row[i] w[i]| of a
 * float64 reference. Rows of full-precision values over 2^-3..2^3, so that
 * the order of accumulation shows in the last bits. */
static void test_sumsq_parts(void **state)
{
    (void)state;
    const todre_dtype dts[] = {TODRE_DTYPE_F32, TODRE_DTYPE_F16, TODRE_DTYPE_BF16};
    const int64_t ds[] = {1, 7, 15, 16, 17, 31, 33, 128, 129, 143, 300, 4096, 4100};
    int checked_parts = 0;
    for (int t = 0; t < 3; t++) {
        const struct todre_sel_kernels *k = todre_sel_kernels_for(dts[t]);
        const size_t es = dts[t] == TODRE_DTYPE_F32 ? 4 : 2;
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++) {
            const int64_t d = ds[di];
            char *row = malloc((size_t)d * es);
            float *w = malloc((size_t)d * sizeof(float));
            assert_non_null(row);
            assert_non_null(w);
            for (int rep = 0; rep < 4; rep++) {
                double ref = 0, dref = 0, dabs = 0;
                for (int64_t i = 0; i < d; i++) {
                    float x = ldexpf((float)unif(), (int)(rnd() % 7) - 3);
                    if (es == 4) memcpy(row + i * 4, &x, 4);
                    else {
                        uint16_t h = dts[t] == TODRE_DTYPE_F16 ? todre_f32_to_f16(x) : todre_f32_to_bf16(x);
                        memcpy(row + i * 2, &h, 2);
                        x = dts[t] == TODRE_DTYPE_F16 ? todre_f16_to_f32(h) : todre_bf16_to_f32(h);
                    }
                    ref += (double)x * x;
                    w[i] = ldexpf((float)unif() - 0.5f, (int)(rnd() % 7) - 3);
                    dref += (double)x * w[i];
                    dabs += fabs((double)x * w[i]);
                }
                double one = todre_sel_sumsq(k, row, d);
                assert_true(fabs(one - ref) <= (double)d * 2.3e-16 * ref);
                double dot_one = NAN;
                {
                    double st[TODRE_SEL_SUMSQ_STATE] = {0};
                    float wst[TODRE_SEL_DOT_STATE] = {0};
                    double sum = k->sumsq_dot(row, d, st, 1, w, wst, &dot_one);
                    if (!same_bits(sum, one))
                        fail_msg("sumsq_dot dtype %d d %lld: sum %a, sumsq's %a", (int)dts[t],
                                 (long long)d, sum, one);
                    if (!(fabs(dot_one - dref) <= (double)d * 0x1p-24 * dabs))
                        fail_msg("sumsq_dot dtype %d d %lld: dot %.9g, float64 %.9g", (int)dts[t],
                                 (long long)d, dot_one, dref);
                }
                /* cuts: every 128, every 16, and at 16 * (1 + rep) then 48 */
                const int64_t steps[3][2] = {{128, 128}, {16, 16}, {16 * (1 + rep), 48}};
                for (int c = 0; c < 3; c++) {
                    double st[TODRE_SEL_SUMSQ_STATE] = {0}, got = 0;
                    int64_t at = 0;
                    for (int part = 0;; part++) {
                        int64_t len = part == 0 ? steps[c][0] : steps[c][1];
                        int last = at + len >= d;
                        if (last) len = d - at;
                        got = k->sumsq(row + at * (int64_t)es, len, st, last);
                        at += len;
                        if (!last) assert_true(got == 0.0);
                        else break;
                    }
                    if (!same_bits(got, one))
                        fail_msg("sumsq dtype %d d %lld cut %d: %a in parts, %a in one", (int)dts[t],
                                 (long long)d, c, got, one);
                    checked_parts += d > steps[c][0];
                    /* sumsq_dot in the same parts */
                    double st2[TODRE_SEL_SUMSQ_STATE] = {0}, dot = NAN;
                    float wst[TODRE_SEL_DOT_STATE] = {0};
                    at = 0;
                    for (int part = 0;; part++) {
                        int64_t len = part == 0 ? steps[c][0] : steps[c][1];
                        int last = at + len >= d;
                        if (last) len = d - at;
                        got = k->sumsq_dot(row + at * (int64_t)es, len, st2, last, w + at, wst, &dot);
                        at += len;
                        if (!last) assert_true(got == 0.0);
                        else break;
                    }
                    if (!same_bits(got, one) || !same_bits(dot, dot_one))
                        fail_msg("sumsq_dot dtype %d d %lld cut %d: sum %a dot %a in parts, %a %a "
                                 "in one", (int)dts[t], (long long)d, c, got, dot, one, dot_one);
                }
                /* a non-finite value anywhere: a non-finite sum */
                int64_t at = (int64_t)(rnd() % (uint64_t)d);
                if (es == 4) {
                    float inf = INFINITY;
                    memcpy(row + at * 4, &inf, 4);
                } else {
                    uint16_t h = dts[t] == TODRE_DTYPE_F16 ? 0x7e00 : 0x7fc0; /* NaN */
                    memcpy(row + at * 2, &h, 2);
                }
                assert_false(isfinite(todre_sel_sumsq(k, row, d)));
            }
            free(w);
            free(row);
        }
    }
    assert_true(checked_parts > 100);
}

int main(void)
{
    printf("# level: %s\n", todre_sel_kernels_for(TODRE_DTYPE_F32)->isa);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_update),
        cmocka_unit_test(test_update_ties),
        cmocka_unit_test(test_dot4),
        cmocka_unit_test(test_sumsq_parts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
