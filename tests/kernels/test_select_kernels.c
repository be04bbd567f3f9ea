/* The CPU stage-1 row kernels of one ISA level (src/cpu/select_kernels.c)
 * against references written here from their definitions in
 * src/cpu/select_kernels.h. tests/select_kernels.cmake builds this program
 * with the kernel sources themselves (the table is internal to libtodre)
 * and runs it once per level the machine has ($TODRE_CPU_ISA); the level
 * in use is printed.
 *
 * 1. update (the greedy's step from a row of similarities, MAX_SUM and
 *    MAX_MIN, sign +1 and -1): every acc value bitwise equal to one
 *    rounding per operation, and the returned index the untaken token with
 *    the smallest sign * acc below +inf, ties to the lowest index, -1 when
 *    none; with ties, NaN and infinite values, all or no tokens taken, and
 *    n across the vector widths and their tails.
 * 2. quant (rows to int8 for the lookahead's estimates), f32 / f16 / bf16:
 *    the largest magnitude m, q = round-to-nearest-even(x * (127 / m)) in
 *    fp32, zero padding to dpad, the scale m / 127; and, independently of
 *    that formula, |x - scale * q| within half a step; zero rows, one
 *    outlier, f16 subnormals, d across the widths.
 * 3. dot8 (int8 x int16): the exact integer sum, also past 2^31 (int32
 *    partial sums must be added in int64) and across its 65536-value
 *    blocks. */
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

/* ---- 1. update --------------------------------------------------------- */

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

/* ---- 2. quant ---------------------------------------------------------- */

static void store(void *row, todre_dtype dt, int64_t i, float x)
{
    if (dt == TODRE_DTYPE_F32) ((float *)row)[i] = x;
    else if (dt == TODRE_DTYPE_F16) ((uint16_t *)row)[i] = todre_f32_to_f16(x);
    else ((uint16_t *)row)[i] = todre_f32_to_bf16(x);
}

static float load(const void *row, todre_dtype dt, int64_t i)
{
    if (dt == TODRE_DTYPE_F32) return ((const float *)row)[i];
    uint16_t h = ((const uint16_t *)row)[i];
    return dt == TODRE_DTYPE_F16 ? todre_f16_to_f32(h) : todre_bf16_to_f32(h);
}

/* kinds: 0 random, 1 zero row, 2 one outlier 1000x, 3 f16 subnormal range,
 * 4 all equal negative */
static void check_quant(todre_dtype dt, int64_t d, int kind)
{
    const struct todre_sel_kernels *k = todre_sel_kernels_for(dt);
    int64_t dpad = (d + 31) / 32 * 32;
    void *row = malloc((size_t)d * 4);
    int8_t *q = malloc((size_t)dpad + 64);
    assert_non_null(row);
    assert_non_null(q);
    for (int64_t i = 0; i < d; i++) {
        float x = (float)unif();
        if (kind == 1) x = 0;
        if (kind == 2) x = i == d / 2 ? 1000.0f : x;
        if (kind == 3) x *= 1e-5f;
        if (kind == 4) x = -0.375f;
        store(row, dt, i, x);
    }
    memset(q, 0x5a, (size_t)dpad + 64);
    float scale = k->quant(row, d, dpad, q);
    double m = 0;
    for (int64_t i = 0; i < d; i++) m = fmax(m, fabs((double)load(row, dt, i)));
    if (m == 0) {
        assert_true(scale == 0.0f);
        for (int64_t i = 0; i < dpad; i++) assert_int_equal(q[i], 0);
    } else {
        const float inv = 127.0f / (float)m;
        assert_true(scale == (float)m / 127.0f);
        for (int64_t i = 0; i < d; i++) {
            float p = load(row, dt, i) * inv;
            int want = (int)rintf(p);
            if (q[i] != want)
                fail_msg("quant dtype %d d %lld kind %d: q[%lld] = %d, want %d (x * inv = %.9g)",
                         (int)dt, (long long)d, kind, (long long)i, q[i], want, (double)p);
            /* the estimate's error: at most half a step (and a rounding) */
            double err = fabs((double)load(row, dt, i) - (double)scale * q[i]);
            assert_true(err <= 0.5 * (double)scale * (1 + 1e-6) + 1e-30);
        }
        for (int64_t i = d; i < dpad; i++) assert_int_equal(q[i], 0);
    }
    for (int64_t i = dpad; i < dpad + 64; i++) assert_int_equal((uint8_t)q[i], 0x5a);
    free(row);
    free(q);
}

static void test_quant(void **state)
{
    (void)state;
    const todre_dtype dts[] = {TODRE_DTYPE_F32, TODRE_DTYPE_F16, TODRE_DTYPE_BF16};
    const int64_t ds[] = {1, 7, 8, 15, 16, 17, 31, 32, 33, 300, 4096};
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
            for (int kind = 0; kind < 5; kind++)
                for (int rep = 0; rep < 3; rep++) check_quant(dts[t], ds[i], kind);
}

/* ---- 3. dot8 ----------------------------------------------------------- */

static void check_dot8(int64_t dpad, int extreme)
{
    const struct todre_sel_kernels *k = todre_sel_kernels_for(TODRE_DTYPE_F16);
    int8_t *a = malloc((size_t)dpad);
    int16_t *b = malloc((size_t)dpad * sizeof(int16_t));
    assert_non_null(a);
    assert_non_null(b);
    int64_t want = 0;
    for (int64_t i = 0; i < dpad; i++) {
        a[i] = extreme ? 127 : (int8_t)((int)(rnd() % 255) - 127);
        b[i] = (int16_t)(extreme ? (extreme > 0 ? 127 : -127) : (int)(rnd() % 255) - 127);
        want += (int64_t)a[i] * b[i];
    }
    int64_t got = k->dot8(a, b, dpad);
    if (got != want)
        fail_msg("dot8 dpad %lld extreme %d: %lld, want %lld", (long long)dpad, extreme,
                 (long long)got, (long long)want);
    free(a);
    free(b);
}

static void test_dot8(void **state)
{
    (void)state;
    const int64_t ds[] = {32, 64, 96, 128, 4096, 65536 - 32, 65536, 65536 + 32, 200000};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
        check_dot8(ds[i], 0);
        check_dot8(ds[i], 1);
        check_dot8(ds[i], -1);
    }
}

int main(void)
{
    printf("# level: %s\n", todre_sel_kernels_for(TODRE_DTYPE_F32)->isa);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_update),
        cmocka_unit_test(test_update_ties),
        cmocka_unit_test(test_quant),
        cmocka_unit_test(test_dot8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
