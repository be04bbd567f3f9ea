/* The ROWS strategy on the FMA kernels (src/cpu/select_rows.c: every CPU
 * code path below AMX, f32 / f16 / bf16). tests/cpu/CMakeLists.txt runs
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
#define _POSIX_C_SOURCE 200809L /* setenv, strdup */

#include <math.h>
#include <pthread.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TODRE_EXPERIMENTAL_API /* TODRE_CONTEXT_EXP_SELECT_STRATEGY, _ROWS_MADE */
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
 * padded to 16, as stored) and the batch (36 x d fp32), 3 n int32 (the
 * token slots and the compaction's positions and moves), then per slot a
 * row of padded n fp32 and two int32, and 36 rows of batch output. */
static int64_t store_limit(todre_dtype dt, int64_t slots)
{
    int64_t npad = (N + 15) / 16 * 16, es = dt == TODRE_DTYPE_F32 ? 4 : 2;
    int64_t pack = (npad * D * es + 63) / 64 * 64 + 36 * D * 4;
    return pack + 3 * N * 4 + (slots + 36) * (npad * 4 + 8);
}

struct run {
    int64_t strategy, limit, threads;
};

/* select_rows (below) over the first n rows (n <= N) and their first d
 * columns (d <= D). */
static void select_rows_nd(const void *x, todre_dtype dt, int64_t n, int64_t d,
                           todre_objective obj, todre_pivot piv, int64_t k, struct run r,
                           int64_t *sel)
{
    todre_context *ctx = tt_cpu_context();
    tt_ctx_set(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, r.strategy);
    tt_ctx_set(ctx, TODRE_CONTEXT_WORKSPACE_LIMIT, r.limit);
    tt_ctx_set(ctx, TODRE_CONTEXT_NUM_THREADS, r.threads);
    todre_select_config *cfg = tt_config(obj, piv, k, TODRE_ORDER_SELECTION);
    tt_array emb, out;
    memset(sel, 0xff, sizeof(int64_t) * (size_t)k);
    tt_assert_ok(todre_select(ctx, cfg, tt_array2(&emb, (void *)x, dt, n, d, LD), NULL,
                              tt_array1(&out, sel, TODRE_DTYPE_I64, k)));
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
}

static void select_rows_d(const void *x, todre_dtype dt, int64_t d, todre_objective obj,
                          todre_pivot piv, int64_t k, struct run r, int64_t *sel)
{
    select_rows_nd(x, dt, N, d, obj, piv, k, r, sel);
}

static void select_rows(const void *x, todre_dtype dt, todre_objective obj, todre_pivot piv,
                        int64_t k, struct run r, int64_t *sel)
{
    select_rows_d(x, dt, D, obj, piv, k, r, sel);
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

/* Integers in [-3, 3] around 20 centres; with @p copies rows 5..9 copy
 * rows 100..104 and rows 50, 51 and 202 are zero (copies of each other),
 * without, row 50 alone is zero and no two rows are the same (the FMA ROWS
 * kernels then drop the taken tokens' columns, src/cpu/select_rows.c; with
 * copies they keep them). */
static float *integer_rows(uint64_t seed, int copies)
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
    if (copies) {
        for (int i = 5; i < 10; i++) memcpy(x + i * LD, x + (95 + i) * LD, sizeof(float) * D);
        for (int i = 0; i < D; i++) x[50 * LD + i] = x[51 * LD + i] = x[202 * LD + i] = 0.0f;
        return x;
    }
    for (int i = 0; i < D; i++) x[50 * LD + i] = 0.0f;
    /* distinct rows: a chance repeat gets its first value moved */
    for (int64_t i = 1; i < N; i++)
        for (int64_t j = 0; j < i; j++)
            if (memcmp(x + i * LD, x + j * LD, sizeof(float) * D) == 0)
                x[i * LD] = x[i * LD] == 3.0f ? -3.0f : x[i * LD] + 1.0f;
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
    /* N - 1 and N: the compaction down to the last live columns */
    static const int64_t ks[] = {1, 2, 77, N - 1, N};
    int64_t *ref = malloc(sizeof(int64_t) * N), *sel = malloc(sizeof(int64_t) * N);
    assert_non_null(ref);
    assert_non_null(sel);
    for (int copies = 0; copies < 2; copies++) {
        float *x32 = integer_rows(11, copies);
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
                    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
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
        free(x32);
    }
    free(sel);
    free(ref);
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

/* The greedy's selection of k is the first k of its selection of any k' >
 * k (docs/semantics.md, Numerics), so ROWS must give a prefix of one run
 * for every shorter one. Near-tie rows (as above) make that a check of the
 * products' bits across kernels: a run speculates only on the steps it has
 * left, so its last batch is smaller than 12 rows and, where it holds up to
 * 6, the AVX-512 level makes it with the 6-row kernels (select_rows.c,
 * f->half); the longer run makes the same rows in full batches. bf16 with
 * an even d (pair and VDPBF16PS kernels) and an odd one (zero-extending
 * kernel). With one extra rounding in the half kernels' sums (a scratch
 * change) this failed for f32, f16 and bf16 on each of its kernels. */
static void test_prefix_across_batch_sizes(void **state)
{
    (void)state;
    static const struct {
        todre_dtype dt;
        int64_t d;
    } sets[] = {{TODRE_DTYPE_F32, D}, {TODRE_DTYPE_F16, D}, {TODRE_DTYPE_BF16, D},
                {TODRE_DTYPE_BF16, D - 1}};
    enum { K_LONG = 160, K_SHORT = 128 };
    float *x32 = malloc(sizeof(float) * N * LD);
    assert_non_null(x32);
    tt_fill_clustered(x32, N, D, LD, 1, 1e-3, 29);
    const struct run r = {ROWS, DEFAULT_LIMIT, 2};
    int64_t ref[K_LONG], sel[K_LONG];
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        todre_dtype dt = sets[i].dt;
        void *x = as_dtype(x32, dt);
        for (int obj = 0; obj < 2; obj++) {
            todre_objective o = (todre_objective)obj;
            select_rows_d(x, dt, sets[i].d, o, TODRE_PIVOT_CENTER, K_LONG, r, ref);
            for (int64_t k = K_SHORT; k < K_LONG; k++) {
                select_rows_d(x, dt, sets[i].d, o, TODRE_PIVOT_CENTER, k, r, sel);
                assert_same(ref, sel, k, sets[i].d == D ? "prefix of a longer run"
                                                        : "prefix of a longer run, odd d",
                            dt, obj, TODRE_PIVOT_CENTER, r);
            }
        }
        free(x);
    }
    free(x32);
}

/* A Gram matrix on the FMA kernels (forced here by $TODRE_CPU_GRAM=fma,
 * read when a context is created) holds the bits ROWS makes: each pair's
 * chain is the same whichever row is the batch's (a product of two values
 * is), so GRAM and ROWS must select alike on near-tie rows. n = 198 leaves
 * a last batch of 18 rows for the matrix (batches of 36), whose second
 * group of 6 runs on the AVX-512 half kernels (select_rows.c), and n = 203
 * one of 23 (12 + 11, full kernels). With one extra rounding in the half
 * kernels' sums (a scratch change) this failed at n = 198. */
static void test_gram_fma_selects_as_rows(void **state)
{
    (void)state;
    if (!fma_rows()) {
        printf("no FMA rows on this level\n");
        return;
    }
    const char *was = getenv("TODRE_CPU_GRAM");
    char *saved = was ? strdup(was) : NULL;
    setenv("TODRE_CPU_GRAM", "fma", 1);
    static const todre_dtype dts[] = {TODRE_DTYPE_F32, TODRE_DTYPE_F16, TODRE_DTYPE_BF16};
    static const int64_t ns[] = {198, N};
    enum { K = 150 };
    float *x32 = malloc(sizeof(float) * N * LD);
    assert_non_null(x32);
    tt_fill_clustered(x32, N, D, LD, 1, 1e-3, 31);
    const struct run rows = {ROWS, DEFAULT_LIMIT, 2}, full = {GRAM, DEFAULT_LIMIT, 2};
    int64_t ref[K], sel[K];
    for (size_t di = 0; di < 3; di++) {
        void *x = as_dtype(x32, dts[di]);
        for (size_t ni = 0; ni < 2; ni++)
            for (int obj = 0; obj < 2; obj++) {
                todre_objective o = (todre_objective)obj;
                select_rows_nd(x, dts[di], ns[ni], D, o, TODRE_PIVOT_CENTER, K, rows, ref);
                select_rows_nd(x, dts[di], ns[ni], D, o, TODRE_PIVOT_CENTER, K, full, sel);
                assert_same(ref, sel, K, ns[ni] == N ? "GRAM on FMAs, n = 203"
                                                     : "GRAM on FMAs, n = 198",
                            dts[di], obj, TODRE_PIVOT_CENTER, full);
            }
        free(x);
    }
    free(x32);
    if (saved) setenv("TODRE_CPU_GRAM", saved, 1);
    else unsetenv("TODRE_CPU_GRAM");
    free(saved);
}

/* Rows whose order in the greedy rests on the last bits of their norms:
 * rows 0..182 hold integers in [-3, 3] in columns [0, 140) and zeros after;
 * rows 183..202 are ten pairs, each pair the same integers in [0, 140) plus,
 * in a block of 8 columns of its own (columns 140 + 8 i for row 183 + i,
 * shared with no row), 8 fp32 values of full precision in [-16, 16] (in
 * the pair's second row in another order). Every raw dot product of two
 * rows is then an exact integer (the private blocks meet only zeros)
 * whatever the kernel, while a pair's squared norms, equal in exact
 * arithmetic, are rounded in each row's own order (their squares need 48
 * bits each), so the pair's scores differ only through those roundings.
 * GEMV, whose norms come from a pass of their own (select.c, row_norms),
 * and ROWS, whose norms come from the packing (todre_sel_rows_fma_prepack,
 * K block by K block), then select the same sequence only if the two passes
 * give the same bits. fp32 only: 16-bit values have squares of 22 or 16
 * bits, whose sums here are exact in any order, so they would test nothing
 * (tests/cpu/test_select_kernels.c checks the parts bitwise for every
 * dtype). About 7 % of such pairs change order when a row's K blocks are
 * summed apart and added (a scratch change to select_rows.c, counted by
 * this test on the AVX2 and AVX-512 levels of a 2-core Zen 4 VM). */
static float *norm_bit_rows(uint64_t seed)
{
    float *x = malloc(sizeof(float) * N * LD);
    assert_non_null(x);
    tt_rng r = {seed};
    for (int64_t i = 0; i < N; i++) {
        for (int j = 0; j < LD; j++) x[i * LD + j] = j < D ? 0.0f : NAN;
        if (i < 183 || (i - 183) % 2 == 0)
            for (int j = 0; j < 140; j++) x[i * LD + j] = (float)((int)(tt_rng_u64(&r) % 7) - 3);
        else
            memcpy(x + i * LD, x + (i - 1) * LD, sizeof(float) * 140);
    }
    for (int pr = 0; pr < 10; pr++) {
        float v[8];
        for (int q = 0; q < 8; q++) {
            float m = 1.0f + (float)(tt_rng_u64(&r) >> 41) / 8388608.0f; /* 24 bits */
            v[q] = ldexpf(m, (int)(tt_rng_u64(&r) % 7) - 3) * (tt_rng_u64(&r) % 2 ? -1.0f : 1.0f);
        }
        int64_t a = 183 + 2 * pr, b = a + 1;
        for (int q = 0; q < 8; q++) {
            x[a * LD + 140 + 8 * (a - 183) + q] = v[q];
            x[b * LD + 140 + 8 * (b - 183) + q] = v[(q * 3 + 5) % 8]; /* another order */
        }
    }
    return x;
}

static void test_norm_bits_rows_equal_gemv(void **state)
{
    (void)state;
    int64_t ref[N], sel[N];
    for (uint64_t seed = 1; seed <= 8; seed++) {
        float *x = norm_bit_rows(seed);
        for (int obj = 0; obj < 2; obj++) {
            for (int pv = 0; pv < 2; pv++) {
                /* CENTER, FARTHEST: the pivot's scores take the norms too */
                todre_pivot piv = pv ? TODRE_PIVOT_CENTER : TODRE_PIVOT_FARTHEST;
                const struct run g = {GEMV, DEFAULT_LIMIT, 1};
                const struct run runs[] = {{ROWS, DEFAULT_LIMIT, 1}, {ROWS, DEFAULT_LIMIT, 2}};
                select_rows(x, TODRE_DTYPE_F32, (todre_objective)obj, piv, N, g, ref);
                for (size_t v = 0; v < 2; v++) {
                    select_rows(x, TODRE_DTYPE_F32, (todre_objective)obj, piv, N, runs[v], sel);
                    assert_same(ref, sel, N, "norm-bit rows vs GEMV", TODRE_DTYPE_F32, obj, piv,
                                runs[v]);
                }
            }
        }
        free(x);
    }
}

/* A batch of three sets (rows [0, 70), [70, 140), [140, 203), 20 kept of
 * each, the CLS pivot) with NaN / Inf placed in it: whatever the strategy,
 * the call fails with NONFINITE naming the first non-finite embedding row
 * of the batch, or where there is none the first non-finite CLS value, and
 * leaves the output untouched. Under a ROWS plan (FMA kernels, or AMX for
 * bf16 on the AMX level) the sets' norms come from packing each set's rows
 * as the set runs
 * (select.c, pack_ahead), after the sets before it ran: the report must not
 * change with that. */
static void test_nonfinite_report_in_batch(void **state)
{
    (void)state;
    /* bf16: on the AMX level its rows are AMX's, packed ahead too */
    static const todre_dtype dts[] = {TODRE_DTYPE_F32, TODRE_DTYPE_F16, TODRE_DTYPE_BF16};
    static const struct {
        int64_t emb[2], cls; /* global rows, -1: none */
        const char *want;
    } cases[] = {
        {{145, -1}, -1, "embeddings: non-finite value (NaN or Inf) in row 5 of set 2"},
        {{145, -1}, 3, "embeddings: non-finite value (NaN or Inf) in row 5 of set 2"},
        {{145, 79}, 3, "embeddings: non-finite value (NaN or Inf) in row 9 of set 1"},
        {{12, 145}, -1, "embeddings: non-finite value (NaN or Inf) in row 12 of set 0"},
        {{-1, -1}, 150, "cls: non-finite value (NaN or Inf) for row 10 of set 2"},
    };
    const int64_t offsets[4] = {0, 70, 140, N}, keep[3] = {20, 20, 20};
    float *x32 = malloc(sizeof(float) * N * LD), cls[N];
    assert_non_null(x32);
    tt_fill_clustered(x32, N, D, LD, 12, 0.7, 31);
    for (size_t di = 0; di < 3; di++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            for (int64_t i = 0; i < N; i++) cls[i] = (float)((i * 37) % 101);
            if (cases[c].cls >= 0) cls[cases[c].cls] = NAN;
            float *y = malloc(sizeof(float) * N * LD);
            assert_non_null(y);
            memcpy(y, x32, sizeof(float) * N * LD);
            for (int q = 0; q < 2; q++)
                if (cases[c].emb[q] >= 0) y[cases[c].emb[q] * LD + 7 + 100 * q] = q ? INFINITY : NAN;
            void *x = as_dtype(y, dts[di]);
            for (int64_t strategy = GEMV; strategy <= ROWS; strategy += ROWS - GEMV) {
                todre_context *ctx = tt_cpu_context();
                tt_ctx_set(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, strategy);
                todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_CLS, 20,
                                                     TODRE_ORDER_SELECTION);
                int64_t out[60];
                for (int i = 0; i < 60; i++) out[i] = -7;
                tt_array a[5];
                todre_status st = todre_select_batch(
                    ctx, cfg, tt_array2(&a[0], x, dts[di], N, D, LD),
                    tt_array1(&a[1], cls, TODRE_DTYPE_F32, N),
                    tt_array1(&a[2], (void *)offsets, TODRE_DTYPE_I64, 4),
                    tt_array1(&a[3], (void *)keep, TODRE_DTYPE_I64, 3),
                    tt_array1(&a[4], out, TODRE_DTYPE_I64, 60), NULL);
                const char *msg = todre_context_last_error(ctx);
                if (st != TODRE_ERR_NONFINITE || !strstr(msg, cases[c].want))
                    fail_msg("dtype %d case %zu strategy %lld: status %d, message \"%s\"; expected "
                             "NONFINITE, \"%s\"",
                             (int)dts[di], c, (long long)strategy, (int)st, msg, cases[c].want);
                for (int i = 0; i < 60; i++) assert_int_equal(out[i], -7);
                todre_select_config_destroy(cfg);
                todre_context_destroy(ctx);
            }
            free(x);
            free(y);
        }
    }
    free(x32);
}

/* Rows made by one call (TODRE_CONTEXT_EXP_SELECT_ROWS_MADE), from pivot
 * @p piv (CLS: row 0, the CLS map's largest value), k tokens, @p strategy,
 * @p threads (0: all); the context is used twice, ROWS first (the count is
 * the last call's). */
static int64_t rows_made(const void *x, todre_dtype dt, todre_objective obj, todre_pivot piv,
                         int64_t k, int64_t strategy, int64_t threads, int64_t *sel)
{
    todre_context *ctx = tt_cpu_context();
    tt_ctx_set(ctx, TODRE_CONTEXT_NUM_THREADS, threads);
    float cls[N] = {1.0f};
    tt_array emb, c, out;
    int64_t v = -1;
    todre_select_config *cfg = tt_config(obj, piv, k, TODRE_ORDER_SELECTION);
    tt_ctx_set(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, ROWS);
    tt_assert_ok(todre_select(ctx, cfg, tt_array2(&emb, (void *)x, dt, N, D, LD),
                              tt_array1(&c, cls, TODRE_DTYPE_F32, N),
                              tt_array1(&out, sel, TODRE_DTYPE_I64, k)));
    tt_ctx_set(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, strategy);
    tt_assert_ok(todre_select(ctx, cfg, tt_array2(&emb, (void *)x, dt, N, D, LD),
                              tt_array1(&c, cls, TODRE_DTYPE_F32, N),
                              tt_array1(&out, sel, TODRE_DTYPE_I64, k)));
    tt_assert_ok(todre_context_get_int(ctx, TODRE_CONTEXT_EXP_SELECT_ROWS_MADE, &v));
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
    return v;
}

/* The speculative batches are chosen from the values they will meet, the
 * first one too: it is made before any value has moved (every token's is
 * the same then), so its tokens come from the pivot's similarities
 * estimated ahead (src/cpu/select_greedy.c, first_values), not the lowest
 * indices. Rows 0..99 lie around one centre, the pivot (row 0) among them,
 * rows 100..202 around ten others: the greedy's next steps go to the far
 * rows, and a batch of the lowest indices (rows by the pivot) is wasted.
 * The count of rows made (TODRE_CONTEXT_EXP_SELECT_ROWS_MADE) is at least
 * k - 1 (a row per step but the last), and over 6 seeds at k = 12 at most
 * 130 per objective, dtype and pivot. Two pivots, for the estimate's two
 * sources: CLS, known before the rows are packed, takes the dot products
 * the packing made with it (select.c, pack_ahead); CENTER, known only from
 * the norms, a pass of its own. This test prints the counts (`ctest -R
 * unit.select_rows_fma -V`); on the AVX2, AVX-512 and AMX levels (2-core
 * AMD EPYC and Emerald Rapids VMs), f32 and f16: CLS 113 (MAX_SUM) and 95
 * (MAX_MIN), CENTER 104-108 and 92-93; with the first batch taken from the
 * lowest indices (a scratch change) 173 (CLS) and 164 (CENTER, MAX_SUM).
 * A GEMV call makes none, and the
 * count is the last call's; its selection is ROWS's (these rows have no
 * near-ties). One thread makes the same rows and selection as all of them:
 * the lookahead's mini-rows, shared between threads
 * (src/cpu/select_greedy.c), must be bitwise the serial ones, or the
 * speculation would choose other rows. On the generic level a ROWS request
 * runs as GRAM or GEMV: no rows. */
static void test_first_batch_from_pivot(void **state)
{
    (void)state;
    static const todre_dtype dts[] = {TODRE_DTYPE_F32, TODRE_DTYPE_F16};
    const int64_t k = 12;
    todre_device_props dp = {.struct_size = sizeof dp};
    tt_assert_ok(todre_device_get_props("cpu", 0, &dp));
    const int rows = strcmp(dp.arch, "generic") != 0; /* f32 and f16 rows on FMA units */
    float *x32 = malloc(sizeof(float) * N * LD);
    assert_non_null(x32);
    int64_t sel[12], ref[12], one[12];
    for (size_t di = 0; di < 4; di++) {
        for (int obj = 0; obj < 2; obj++) {
            const todre_pivot piv = di < 2 ? TODRE_PIVOT_CLS : TODRE_PIVOT_CENTER;
            const todre_dtype dt = dts[di % 2];
            int64_t total = 0;
            for (uint64_t seed = 1; seed <= 6; seed++) {
                tt_fill_clustered(x32, 100, D, LD, 1, 0.3, 100 + seed);
                tt_fill_clustered(x32 + 100 * LD, N - 100, D, LD, 10, 0.3, 200 + seed);
                void *x = as_dtype(x32, dt);
                int64_t made = rows_made(x, dt, (todre_objective)obj, piv, k, ROWS, 0, sel);
                /* 1 thread: the serial lookahead; 3 and 4: teams of 3 and 4
                 * (TODRE_SEL_LOOKAHEAD_THREADS), where the machine has the
                 * cores: a context runs at most as many threads as
                 * omp_get_num_procs(), so on 2 cores (the CI machines) these
                 * requests run the team of 2 again, except in
                 * unit.select_rows_fma.teams ($TODRE_CPU_PROCS=4: 4
                 * threads on 2 cores; a helper of a team of 3 or 4 that
                 * returned other bits was caught there and only there) */
                static const int64_t threads[] = {1, 3, 4};
                for (size_t ti = 0; ti < 3; ti++) {
                    int64_t madet = rows_made(x, dt, (todre_objective)obj, piv, k, ROWS,
                                              threads[ti], one);
                    if (madet != made)
                        fail_msg("dtype %d objective %d pivot %d seed %llu: %lld rows made on %lld "
                                 "threads, %lld on all",
                                 (int)dt, obj, (int)piv, (unsigned long long)seed,
                                 (long long)madet, (long long)threads[ti], (long long)made);
                    assert_same(sel, one, k, "two-group rows, n threads vs all", dt, obj, piv,
                                (struct run){ROWS, DEFAULT_LIMIT, threads[ti]});
                }
                if (rows && made < k - 1)
                    fail_msg("dtype %d objective %d seed %llu: %lld rows made for %lld steps",
                             (int)dt, obj, (unsigned long long)seed, (long long)made,
                             (long long)(k - 1));
                if (!rows) assert_int_equal(made, 0);
                total += made;
                /* the same selection from GEMV, which makes no rows */
                assert_int_equal(rows_made(x, dt, (todre_objective)obj, piv, k, GEMV, 0, ref), 0);
                assert_same(ref, sel, k, "two-group rows vs GEMV", dt, obj, piv,
                            (struct run){ROWS, DEFAULT_LIMIT, 0});
                free(x);
            }
            printf("dtype %d objective %d pivot %d: %lld rows made in 6 calls of k = %lld\n",
                   (int)dt, obj, (int)piv, (long long)total, (long long)k);
            if (total > 130)
                fail_msg("dtype %d objective %d pivot %d: %lld rows made in 6 calls of k = %lld (at "
                         "most 130: is the first batch chosen by index?)",
                         (int)dt, obj, (int)piv, (long long)total, (long long)k);
        }
    }
    free(x32);
}

/* A bf16 value widened to fp32 is exact, and every FMA kernel sums a pair's
 * products in the same order for each dtype (k in order within a K block,
 * the K blocks in order: src/cpu/select_rows.c), so a bf16 set selects
 * exactly as its fp32 widening, near ties included: rows around one centre
 * with a spread of 1e-3, whose scores differ by about their rounding. A
 * bf16 kernel that widened or summed otherwise fails here (shown with one
 * that took two k rows a step into two sets of accumulators: step 3
 * differs), where the checks above still pass. d = 300 and 299 (odd: the
 * last K block ends on a single k row), 1 and 2 threads, both objectives,
 * k = 150. Not on the generic level (no FMA rows) nor on AMX, whose bf16
 * rows are tile products summed in another order. */
static void test_bf16_as_its_f32_widening(void **state)
{
    (void)state;
    if (!fma_rows()) {
        printf("no FMA rows on this level: bf16 rows summed in another order\n");
        return;
    }
    const int64_t k = 150;
    int64_t ref[150], sel[150];
    float *x32 = malloc(sizeof(float) * N * LD);
    assert_non_null(x32);
    tt_fill_clustered(x32, N, D, LD, 1, 1e-3, 31);
    uint16_t *h = as_dtype(x32, TODRE_DTYPE_BF16);
    float *w = malloc(sizeof(float) * N * LD); /* h widened, exact */
    assert_non_null(w);
    for (size_t i = 0; i < (size_t)N * LD; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        memcpy(w + i, &u, sizeof u);
    }
    static const int64_t ds[] = {D, D - 1};
    for (size_t di = 0; di < 2; di++) {
        for (int obj = 0; obj < 2; obj++) {
            for (int64_t th = 1; th <= 2; th++) {
                const struct run r = {ROWS, DEFAULT_LIMIT, th};
                select_rows_d(w, TODRE_DTYPE_F32, ds[di], (todre_objective)obj,
                              TODRE_PIVOT_CENTER, k, r, ref);
                select_rows_d(h, TODRE_DTYPE_BF16, ds[di], (todre_objective)obj,
                              TODRE_PIVOT_CENTER, k, r, sel);
                for (int64_t i = 0; i < k; i++)
                    if (sel[i] != ref[i])
                        fail_msg("d %lld objective %d threads %lld: bf16 step %lld chose %lld, its "
                                 "fp32 widening %lld",
                                 (long long)ds[di], obj, (long long)th, (long long)i,
                                 (long long)sel[i], (long long)ref[i]);
            }
        }
    }
    free(w);
    free(h);
    free(x32);
}

/* Busy threads that hold the cores, yielding now and then, so that the
 * scheduler parks the lookahead's helpers at arbitrary points. */
static atomic_int spin_stop;

static void *spinner(void *arg)
{
    uint32_t x = (uint32_t)(uintptr_t)arg;
    while (!atomic_load_explicit(&spin_stop, memory_order_relaxed)) {
        x = x * 1103515245u + 12345u;
        for (volatile uint32_t i = 0; i < 2000u + (x >> 20); i++) {
        }
        if ((x >> 13) % 4 == 0) sched_yield();
    }
    return NULL;
}

/* The lookahead's team (src/cpu/select_greedy.c) where other threads hold
 * the cores: its helpers are parked mid-job, the master takes their
 * unclaimed groups, waits a little for claimed ones and otherwise makes
 * them itself, and a set whose helpers fall behind goes back to one
 * thread. Whatever the interleaving, the mini-rows must be bitwise the
 * serial ones: on 2 threads beside 2 busy ones, 8 calls per set and
 * objective must make the rows, and select the tokens, that 1 thread does
 * alone (rows made, TODRE_CONTEXT_EXP_SELECT_ROWS_MADE, show any mini-row
 * that differs: the speculation follows it). k = 40 (4 to 5 batches a
 * call), the two-group sets of test_first_batch_from_pivot, f32 and bf16.
 * Not on the generic level (no ROWS). */
static void test_team_under_contention(void **state)
{
    (void)state;
    if (!fma_rows()) {
        printf("no FMA rows on this level: no lookahead\n");
        return;
    }
    static const todre_dtype dts[] = {TODRE_DTYPE_F32, TODRE_DTYPE_BF16};
    const int64_t k = 40;
    int64_t ref[40], sel[40];
    float *x32 = malloc(sizeof(float) * N * LD);
    assert_non_null(x32);
    pthread_t spin[2];
    atomic_store(&spin_stop, 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&spin[i], NULL, spinner, (void *)(uintptr_t)(7 + i)), 0);
    int64_t calls = 0;
    for (size_t di = 0; di < 2; di++) {
        for (uint64_t seed = 1; seed <= 2; seed++) {
            tt_fill_clustered(x32, 100, D, LD, 1, 0.3, 300 + seed);
            tt_fill_clustered(x32 + 100 * LD, N - 100, D, LD, 10, 0.3, 400 + seed);
            void *x = as_dtype(x32, dts[di]);
            for (int obj = 0; obj < 2; obj++) {
                int64_t want = rows_made(x, dts[di], (todre_objective)obj, TODRE_PIVOT_CLS, k, ROWS,
                                         1, ref);
                for (int rep = 0; rep < 8; rep++, calls++) {
                    int64_t made = rows_made(x, dts[di], (todre_objective)obj, TODRE_PIVOT_CLS, k,
                                             ROWS, 2, sel);
                    if (made != want)
                        fail_msg("dtype %d seed %llu objective %d call %d, busy cores: %lld rows "
                                 "made on 2 threads, %lld on 1",
                                 (int)dts[di], (unsigned long long)seed, obj, rep, (long long)made,
                                 (long long)want);
                    assert_same(ref, sel, k, "busy cores, 2 threads vs 1", dts[di], obj,
                                TODRE_PIVOT_CLS, (struct run){ROWS, DEFAULT_LIMIT, 2});
                }
            }
            free(x);
        }
    }
    atomic_store(&spin_stop, 1);
    for (int i = 0; i < 2; i++) pthread_join(spin[i], NULL);
    printf("%lld calls on busy cores, rows and selections as on 1 thread\n", (long long)calls);
    free(x32);
}

/* Whether the CPU has AVX512_BF16 (cpuid leaf 7.1, EAX bit 5). */
static int cpu_avx512bf16(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || a < 1) return 0;
    __get_cpuid_count(7, 1, &a, &b, &c, &d);
    return (a >> 5) & 1u;
#else
    return 0;
#endif
}

/* Whether the CPU's vendor is AMD. */
static int cpu_amd(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    unsigned a, b, c, d;
    char v[13] = {0};
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    memcpy(v, &b, 4);
    memcpy(v + 4, &d, 4);
    memcpy(v + 8, &c, 4);
    return strcmp(v, "AuthenticAMD") == 0;
#else
    return 0;
#endif
}

/* Which kernel made the bf16 rows, seen in a selection: on the AVX-512
 * level, where the CPU has AVX512_BF16 and is AMD's or $TODRE_CPU_BF16 is
 * dp (and it is not fma), VDPBF16PS (src/cpu/select_rows.c,
 * micro_avx512_bf16_dp), whose sums are
 * the FMA kernels' bits except that it flushes subnormal results to zero
 * (docs/semantics.md). Row 0 (the pivot) is e0 + 2^-70 e2, row 1 is e1 +
 * 2^-60 e2, row 2 is e3, the others e0 plus a distinct e_j / 4: after the
 * pivot, MAX_SUM takes the smallest similarity with it, which is 0 for row
 * 2 and the subnormal 2^-130 for row 1 on FMAs (step 1: row 2), 0 for both
 * where the product is flushed (a tie: row 1, the lower index). f32 rows
 * are always made by FMAs. ROWS (k = 2: one batch, the pivot's row) must
 * run: rows made is checked. Not asserted for bf16 on the AMX level, whose
 * rows AMX makes (unit.select_rows covers it). */
static void test_bf16_products_kernel(void **state)
{
    (void)state;
    if (!fma_rows()) {
        printf("no FMA rows on this level\n");
        return;
    }
    todre_device_props dp = {.struct_size = sizeof dp};
    tt_assert_ok(todre_device_get_props("cpu", 0, &dp));
    const char *env = getenv("TODRE_CPU_BF16");
    const int avx512 = strcmp(dp.arch, "avx512") == 0;
    const int want_dp = env && strcmp(env, "dp") == 0    ? 1
                        : env && strcmp(env, "fma") == 0 ? 0
                                                         : cpu_amd();
    const int flush = avx512 && cpu_avx512bf16() && want_dp;
    float *x32 = malloc(sizeof(float) * N * LD);
    assert_non_null(x32);
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < LD; j++) x32[i * LD + j] = j < D ? 0.0f : NAN;
    x32[0 * LD + 0] = 1.0f;
    x32[0 * LD + 2] = ldexpf(1.0f, -70);
    x32[1 * LD + 1] = 1.0f;
    x32[1 * LD + 2] = ldexpf(1.0f, -60);
    x32[2 * LD + 3] = 1.0f;
    for (int64_t i = 3; i < N; i++) {
        x32[i * LD + 0] = 1.0f;
        x32[i * LD + 4 + (i - 3)] = 0.25f;
    }
    static const todre_dtype dts[] = {TODRE_DTYPE_F32, TODRE_DTYPE_BF16};
    for (size_t di = 0; di < 2; di++) {
        todre_dtype dt = dts[di];
        if (dt == TODRE_DTYPE_BF16 && strcmp(dp.arch, "amx") == 0) continue;
        void *x = as_dtype(x32, dt);
        int64_t sel[2];
        int64_t made = rows_made(x, dt, TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_CLS, 2, ROWS, 1, sel);
        int64_t want = dt == TODRE_DTYPE_BF16 && flush ? 1 : 2;
        if (made < 1) fail_msg("dtype %d: no ROWS run (rows made %lld)", (int)dt, (long long)made);
        if (sel[0] != 0 || sel[1] != want)
            fail_msg("dtype %d on %s (CPU AVX512_BF16 %d, AMD %d, TODRE_CPU_BF16=%s): selected "
                     "%lld, %lld; expected 0, %lld (%s)",
                     (int)dt, dp.arch, cpu_avx512bf16(), cpu_amd(), env ? env : "", (long long)sel[0],
                     (long long)sel[1], (long long)want,
                     want == 1 ? "the subnormal product flushed" : "the subnormal product kept");
        printf("%s %s: step 1 took row %lld (%s)\n", dp.arch, dt == TODRE_DTYPE_F32 ? "f32" : "bf16",
               (long long)sel[1], want == 1 ? "VDPBF16PS" : "FMA");
        free(x);
    }
    free(x32);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_equals_gemv_and_gram),
        cmocka_unit_test(test_float_batch_invariant_and_valid),
        cmocka_unit_test(test_prefix_across_batch_sizes),
        cmocka_unit_test(test_gram_fma_selects_as_rows),
        cmocka_unit_test(test_norm_bits_rows_equal_gemv),
        cmocka_unit_test(test_nonfinite_report_in_batch),
        cmocka_unit_test(test_first_batch_from_pivot),
        cmocka_unit_test(test_bf16_as_its_f32_widening),
        cmocka_unit_test(test_team_under_contention),
        cmocka_unit_test(test_bf16_products_kernel),
    };
    return tt_run_tests(tests);
}
