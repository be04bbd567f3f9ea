/* The stage-1 planner (src/select_plan.c): the strategy and store size it
 * gives each token set for given capabilities, sizes and workspace limits,
 * called directly with fake backends; and, through the public API, that the
 * plans it makes are the ones the CPU backend runs: the workspace limit
 * bounds the memory a call takes, explicit requests fall back (ROWS -> GRAM
 * -> GEMV), and every strategy gives the same selection.
 *
 * libtodre's internal symbols are hidden, so the planner is compiled into
 * this program from its source. */
#define _GNU_SOURCE /* mallinfo2 */
#define TODRE_EXPERIMENTAL_API
#include "todre_test.h"

#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/select_plan.c"
#include "../../src/cpu/blas_class.h"

#define MIB (1024ll * 1024ll)
#define DEFAULT_LIMIT (256 * MIB)

/* ---- fake backends ------------------------------------------------------------ */

/* The CPU's declared constants (src/cpu/cpu_backend.c), with and without
 * AMX, and a device-like backend with GEMV and GRAM up to n = 1024. */
static struct todre_backend cpu_avx2(int64_t limit, int64_t strategy)
{
    struct todre_backend be;
    memset(&be, 0, sizeof be);
    be.params.workspace_limit = limit;
    be.params.strategy = strategy;
    be.caps.strategies = 1u << TODRE_STRATEGY_GEMV | 1u << TODRE_STRATEGY_GRAM;
    be.caps.gemv_bytes_per_ns = 50;
    be.caps.gram_fma_per_ns = 135;
    be.caps.pack_bytes_per_ns = 12;
    return be;
}

static struct todre_backend cpu_amx(int64_t limit, int64_t strategy)
{
    struct todre_backend be = cpu_avx2(limit, strategy);
    be.caps.strategies |= 1u << TODRE_STRATEGY_ROWS;
    be.caps.gram_fast_fma_per_ns = 500;
    be.caps.rows_batch = 32;
    be.caps.rows_row_bytes_per_n = 4;
    be.caps.rows_fma_batch = 12;
    be.caps.rows_fast_dtypes = 1u << TODRE_DTYPE_BF16;
    return be;
}

/* Below AMX with the FMA kernels (AVX2, AVX-512): ROWS without a fast unit. */
static struct todre_backend cpu_fma(int64_t limit, int64_t strategy)
{
    struct todre_backend be = cpu_avx2(limit, strategy);
    be.caps.strategies |= 1u << TODRE_STRATEGY_ROWS;
    be.caps.rows_batch = 12;
    be.caps.rows_row_bytes_per_n = 4;
    return be;
}

static struct todre_backend device_like(int64_t limit, int64_t strategy)
{
    struct todre_backend be;
    memset(&be, 0, sizeof be);
    be.params.workspace_limit = limit;
    be.params.strategy = strategy;
    be.caps.strategies = 1u << TODRE_STRATEGY_GEMV | 1u << TODRE_STRATEGY_GRAM;
    be.caps.gram_max_n = 1024;
    be.caps.gemv_bytes_per_ns = 1000;
    be.caps.gram_fma_per_ns = 20000;
    be.caps.pack_bytes_per_ns = 500;
    return be;
}

/* The plan of one set of n rows keeping k. */
static struct todre_select_plan plan1(const struct todre_backend *be, int64_t n, int64_t k,
                                      int64_t d, todre_dtype dt, todre_objective obj,
                                      todre_pivot piv)
{
    int64_t offsets[2] = {0, n}, keep[1] = {k};
    struct todre_select_job job;
    memset(&job, 0, sizeof job);
    job.emb_dtype = dt;
    job.d = d;
    job.nseg = 1;
    job.seg_offsets = offsets;
    job.seg_k = keep;
    job.objective = obj;
    job.pivot = piv;
    job.pivot_hi = -1;
    struct todre_select_plan p = {-1, -1, -1};
    todre_select_plan_sets(be, &job, &p);
    assert_int_equal(p.reserved, 0);
    return p;
}

#define assert_plan(plan, want_strategy, want_store)     \
    do {                                                \
        struct todre_select_plan p_ = (plan);           \
        assert_int_equal(p_.strategy, (want_strategy)); \
        assert_int_equal(p_.store_rows, (want_store));  \
    } while (0)

#define GEMV TODRE_STRATEGY_GEMV
#define GRAM TODRE_STRATEGY_GRAM
#define ROWS TODRE_STRATEGY_ROWS
#define F16 TODRE_DTYPE_F16
#define BF16 TODRE_DTYPE_BF16
#define F32 TODRE_DTYPE_F32
#define MAX_SUM TODRE_OBJECTIVE_MAX_SUM
#define MAX_MIN TODRE_OBJECTIVE_MAX_MIN
#define CENTER TODRE_PIVOT_CENTER
#define ISOLATED TODRE_PIVOT_ISOLATED

/* ---- AUTO: the cost model ------------------------------------------------------- */

/* The benchmark case of docs/bench_stage1.md, n = 2880, d = 4096, k = 288.
 * With AMX (ns, rates of the CPU): bf16 GEMV 287 n d 2 / 50 = 135.4e6; ROWS
 * on AMX ceil(287 / 10) = 29 batches: 29 * 32 n d / 500 + n d 2 / 12 =
 * 23.9e6, against AMX's Gram matrix n^2 d / 2 / 500 + 2 n d 2 / 12 =
 * 37.9e6; the store holds all n rows (256 MiB / (2880 * 4) - 32 = 23269 >=
 * n). f16 rows come from the FMA kernels (rows_fast_dtypes): ceil(287 /
 * 7.2) = 40 batches of 12 n d / (135 * 1.1) + 2 n d 2 / 12 = 42.1e6 against
 * GRAM on AMX n^2 d / 2 * 4 / 500 + 2 n d 4 / 12 = 143.8e6: ROWS. */
static void auto_amx_benchmark_case(void **state)
{
    (void)state;
    struct todre_backend be = cpu_amx(DEFAULT_LIMIT, TODRE_STRATEGY_AUTO);
    assert_plan(plan1(&be, 2880, 288, 4096, F16, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 288, 4096, BF16, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 288, 4096, BF16, MAX_MIN, TODRE_PIVOT_CLS), ROWS, 2880);
    /* fp32 on the FMA kernels too (auto_amx_f32_on_fma) */
    assert_plan(plan1(&be, 2880, 288, 4096, F32, MAX_SUM, CENTER), ROWS, 2880);
    /* f16, k = 20: 3 FMA batches, 6.8e6, against GEMV 8.96e6; k = 10: 2
     * batches, 5.8e6, against GEMV 4.2e6 */
    assert_plan(plan1(&be, 2880, 20, 4096, F16, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 10, 4096, F16, MAX_SUM, CENTER), GEMV, 0);
}

/* Without AMX: f16 GEMV 135.4e6 vs GRAM 125.8e6 + the fp32 copy n d 6 / 12
 * = 5.9e6, so GRAM; f32 GRAM; a small k GEMV; never ROWS. */
static void auto_without_fast_unit(void **state)
{
    (void)state;
    struct todre_backend be = cpu_avx2(DEFAULT_LIMIT, TODRE_STRATEGY_AUTO);
    assert_plan(plan1(&be, 2880, 288, 4096, F16, MAX_SUM, CENTER), GRAM, 0);
    assert_plan(plan1(&be, 2880, 288, 4096, BF16, MAX_SUM, CENTER), GRAM, 0);
    assert_plan(plan1(&be, 2880, 288, 4096, F32, MAX_SUM, CENTER), GRAM, 0);
    /* 19 n d 2 / 50 = 9.0e6 < 131.7e6 */
    assert_plan(plan1(&be, 2880, 20, 4096, F16, MAX_SUM, CENTER), GEMV, 0);
    /* the crossover: k = 280: GEMV 131.65e6 < 131.73e6; k = 281: 132.12e6 */
    assert_plan(plan1(&be, 2880, 280, 4096, F16, MAX_SUM, CENTER), GEMV, 0);
    assert_plan(plan1(&be, 2880, 281, 4096, F16, MAX_SUM, CENTER), GRAM, 0);
    /* the Gram matrix (2880^2 * 4 = 33.2e6 bytes) does not fit 31 MiB */
    assert_plan(plan1(&be, 2880, 288, 4096, F32, MAX_SUM, CENTER), GRAM, 0);
    be.params.workspace_limit = 31 * MIB;
    assert_plan(plan1(&be, 2880, 288, 4096, F32, MAX_SUM, CENTER), GEMV, 0);
    be.params.workspace_limit = 2880ll * 2880 * 4; /* exactly the matrix */
    assert_plan(plan1(&be, 2880, 288, 4096, F32, MAX_SUM, CENTER), GRAM, 0);
}

/* A rate of 0 is "not measured": that strategy is never the cheapest. */
/* The FMA ROWS kernels (AVX2 / AVX-512, no fast unit), n = 2880, d = 4096,
 * costs in rate units: GRAM f16 n^2 d / 2 / 135 + n d (4 + 2) / 12 =
 * 131.73e6, f32 125.83e6; ROWS B = ceil((k - 1) / 7.2) batches (12 rows,
 * 0.6 used), batch i (from 0) made for the n - 7.2 i tokens not yet taken:
 * 12 B (n - 7.2 (B - 1) / 2) d / (135 * 1.1), plus 2 n d esize / 12; GEMV
 * (k - 1) n d esize / 50. ROWS from k = 14 (f16; 12 for f32) to k = 1217
 * (f16: B = 169, 131.20e6 against GRAM's 131.73e6; k = 1218: B = 170,
 * 131.75e6) and 1095 for f32. Before
 * the compaction (every row made for all n tokens) GRAM began at 966 (f16)
 * and 887 (f32). */
static void auto_fma_rows(void **state)
{
    (void)state;
    struct todre_backend be = cpu_fma(DEFAULT_LIMIT, TODRE_STRATEGY_AUTO);
    assert_plan(plan1(&be, 2880, 13, 4096, F16, MAX_SUM, CENTER), GEMV, 0);
    assert_plan(plan1(&be, 2880, 14, 4096, F16, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 288, 4096, F16, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 720, 4096, F16, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 720, 4096, BF16, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 966, 4096, F16, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 1217, 4096, F16, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 1218, 4096, F16, MAX_SUM, CENTER), GRAM, 0);
    assert_plan(plan1(&be, 2880, 1440, 4096, F16, MAX_SUM, CENTER), GRAM, 0);
    assert_plan(plan1(&be, 2880, 11, 4096, F32, MAX_SUM, CENTER), GEMV, 0);
    assert_plan(plan1(&be, 2880, 12, 4096, F32, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 720, 4096, F32, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 1095, 4096, F32, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 1096, 4096, F32, MAX_SUM, CENTER), GRAM, 0);
}

/* bf16 products by VDPBF16PS (caps.fma_dp_dtypes, AMD CPUs with
 * AVX512_BF16: src/cpu/cpu_backend.c): ROWS and GRAM of bf16 sets of even d
 * costed at twice the FMA rate (the packing not). bf16 then takes ROWS
 * from k = 12 (2 batches and the packing, 4.88e6, against GEMV's 4.72e6 at
 * k = 11 and 5.19e6 at 12) to 1246 (173 batches, 68.66e6, against GRAM's
 * 68.81e6; 1247: 174, 68.93e6), and GRAM from 1247, where the FMA rate
 * gives 14 and 1218 as for f16 (auto_fma_rows); f16 and an odd d (no pair
 * words) keep those (d = 4095: 131.17e6 at 1217, 131.72e6 at 1218, GRAM
 * 131.70e6). */
static void auto_fma_dp_bf16(void **state)
{
    (void)state;
    struct todre_backend be = cpu_fma(DEFAULT_LIMIT, TODRE_STRATEGY_AUTO);
    be.caps.fma_dp_dtypes = 1u << TODRE_DTYPE_BF16;
    assert_plan(plan1(&be, 2880, 11, 4096, BF16, MAX_SUM, CENTER), GEMV, 0);
    assert_plan(plan1(&be, 2880, 12, 4096, BF16, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 1246, 4096, BF16, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 1247, 4096, BF16, MAX_SUM, CENTER), GRAM, 0);
    assert_plan(plan1(&be, 2880, 13, 4096, F16, MAX_SUM, CENTER), GEMV, 0);
    assert_plan(plan1(&be, 2880, 1218, 4096, F16, MAX_SUM, CENTER), GRAM, 0);
    assert_plan(plan1(&be, 2880, 13, 4095, BF16, MAX_SUM, CENTER), GEMV, 0);
    assert_plan(plan1(&be, 2880, 14, 4095, BF16, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 1217, 4095, BF16, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 1218, 4095, BF16, MAX_SUM, CENTER), GRAM, 0);
}

/* With AMX, f32 sets (no exact bf16 split) and f16 sets (rows_fast_dtypes:
 * bf16 only) get their rows from the FMA kernels (rows_fma_batch,
 * src/cpu/cpu_backend.c): ROWS in batches of 12 with the crossovers of
 * auto_fma_rows, a store sized by that batch, while bf16 sets stay on AMX.
 * Without rows_fma_batch (the caps before) f32 had no ROWS there, and
 * without rows_fast_dtypes f16 rows were costed and sized as AMX's. */
static void auto_amx_f32_on_fma(void **state)
{
    (void)state;
    struct todre_backend be = cpu_amx(DEFAULT_LIMIT, TODRE_STRATEGY_AUTO);
    assert_plan(plan1(&be, 2880, 11, 4096, F32, MAX_SUM, CENTER), GEMV, 0);
    assert_plan(plan1(&be, 2880, 12, 4096, F32, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 288, 4096, F32, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 1095, 4096, F32, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 1096, 4096, F32, MAX_SUM, CENTER), GRAM, 0);
    assert_plan(plan1(&be, 2880, 288, 4096, F16, MAX_SUM, CENTER), ROWS, 2880);
    /* f16: FMA rows from k = 14 (against GEMV) to 1390, where ceil(1389 /
     * 7.2) = 193 batches cost 143.755e6 against AMX's Gram matrix (4
     * products a pair) 143.760e6; k = 1391: 194 batches, 144.2e6 (before
     * the compaction: 1052) */
    assert_plan(plan1(&be, 2880, 13, 4096, F16, MAX_SUM, CENTER), GEMV, 0);
    assert_plan(plan1(&be, 2880, 14, 4096, F16, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 1390, 4096, F16, MAX_SUM, CENTER), ROWS, 2880);
    assert_plan(plan1(&be, 2880, 1391, 4096, F16, MAX_SUM, CENTER), GRAM, 0);
    /* a limit of 100 rows of n floats: 100 - 12 stored f32 and f16 rows,
     * 100 - 32 bf16 (AMX's batch) */
    struct todre_backend small = cpu_amx((int64_t)100 * 2880 * 4, TODRE_STRATEGY_ROWS);
    assert_plan(plan1(&small, 2880, 288, 4096, F32, MAX_SUM, CENTER), ROWS, 88);
    assert_plan(plan1(&small, 2880, 288, 4096, F16, MAX_SUM, CENTER), ROWS, 88);
    assert_plan(plan1(&small, 2880, 288, 4096, BF16, MAX_SUM, CENTER), ROWS, 68);
    small.caps.rows_fast_dtypes = 0; /* f16 on AMX, as before */
    assert_plan(plan1(&small, 2880, 288, 4096, F16, MAX_SUM, CENTER), ROWS, 68);
    be.caps.rows_fma_batch = 0;
    assert_plan(plan1(&be, 2880, 288, 4096, F32, MAX_SUM, CENTER), GRAM, 0);
    /* no FMA rows: f16 (not on AMX's rows) has no ROWS: GEMV (135.4e6) at
     * k = 288, AMX's Gram matrix (143.8e6) at k = 720 (GEMV 339.3e6) */
    assert_plan(plan1(&be, 2880, 288, 4096, F16, MAX_SUM, CENTER), GEMV, 0);
    assert_plan(plan1(&be, 2880, 720, 4096, F16, MAX_SUM, CENTER), GRAM, 0);
}

/* OpenBLAS's kernel class against the CPU's (src/cpu/blas_class.h): below
 * 1 only where OpenBLAS runs lesser kernels than the level in use (Debian
 * 12's OpenBLAS runs "Prescott" on Emerald Rapids); the CPU backend then
 * makes Gram matrices on its FMA kernels (unit.select_rows_fma.*.gram_fma
 * runs them on every level). */
static void blas_class_factor(void **state)
{
    (void)state;
    assert_true(fabs(todre_cpu_blas_rate_factor("Prescott", TODRE_CPU_ISA_AMX) - 1.0 / 4.4) < 1e-12);
    assert_true(fabs(todre_cpu_blas_rate_factor("prescott", TODRE_CPU_ISA_AVX512) - 1.0 / 4.4) < 1e-12);
    assert_true(fabs(todre_cpu_blas_rate_factor("Haswell", TODRE_CPU_ISA_AVX512) - 2.05 / 4.4) < 1e-12);
    assert_true(fabs(todre_cpu_blas_rate_factor("Sandybridge", TODRE_CPU_ISA_AVX2) - 1.45 / 2.05) < 1e-12);
    assert_true(todre_cpu_blas_rate_factor("Haswell", TODRE_CPU_ISA_AVX2) == 1.0);
    assert_true(todre_cpu_blas_rate_factor("Zen", TODRE_CPU_ISA_AVX2) == 1.0);
    assert_true(todre_cpu_blas_rate_factor("SkylakeX", TODRE_CPU_ISA_AVX2) == 1.0); /* better: as is */
    assert_true(todre_cpu_blas_rate_factor("SapphireRapids", TODRE_CPU_ISA_AMX) == 1.0);
    assert_true(todre_cpu_blas_rate_factor("SomeFutureCore", TODRE_CPU_ISA_AVX512) == 1.0);
    assert_true(todre_cpu_blas_rate_factor(NULL, TODRE_CPU_ISA_AVX512) == 1.0); /* not OpenBLAS */
    assert_true(todre_cpu_blas_rate_factor("Prescott", TODRE_CPU_ISA_GENERIC) == 1.0);
}

static void auto_unknown_rates(void **state)
{
    (void)state;
    struct todre_backend be = cpu_avx2(DEFAULT_LIMIT, TODRE_STRATEGY_AUTO);
    be.caps.gemv_bytes_per_ns = be.caps.gram_fma_per_ns = be.caps.pack_bytes_per_ns = 0;
    assert_plan(plan1(&be, 2880, 288, 4096, F32, MAX_SUM, CENTER), GEMV, 0);
    be.caps.gram_fma_per_ns = 135; /* GRAM known, GEMV not */
    assert_plan(plan1(&be, 2880, 2, 64, F32, MAX_SUM, CENTER), GRAM, 0);
    /* f16 needs the conversion rate too */
    assert_plan(plan1(&be, 2880, 2, 64, F16, MAX_SUM, CENTER), GEMV, 0);
}

/* ---- the workspace limit and requested strategies -------------------------------- */

static void limit_zero_is_gemv_everywhere(void **state)
{
    (void)state;
    for (int64_t req = TODRE_STRATEGY_AUTO; req <= TODRE_STRATEGY_ROWS; req++) {
        struct todre_backend amx = cpu_amx(0, req), avx2 = cpu_avx2(0, req);
        for (int dt = 0; dt < 3; dt++) {
            assert_plan(plan1(&amx, 2880, 288, 4096, (todre_dtype)dt, MAX_SUM, CENTER), GEMV, 0);
            assert_plan(plan1(&amx, 300, 30, 64, (todre_dtype)dt, MAX_MIN, ISOLATED), GEMV, 0);
            assert_plan(plan1(&avx2, 2, 2, 8, (todre_dtype)dt, MAX_SUM, CENTER), GEMV, 0);
        }
    }
}

static void requested_strategies_fall_back(void **state)
{
    (void)state;
    /* GEMV is always honoured, even where GEMV is the most expensive */
    struct todre_backend be = cpu_amx(DEFAULT_LIMIT, TODRE_STRATEGY_GEMV);
    assert_plan(plan1(&be, 2880, 288, 4096, F16, MAX_SUM, CENTER), GEMV, 0);
    /* GRAM where AUTO would take GEMV; GEMV when the matrix does not fit */
    be = cpu_amx(DEFAULT_LIMIT, TODRE_STRATEGY_GRAM);
    assert_plan(plan1(&be, 2880, 10, 4096, F16, MAX_SUM, CENTER), GRAM, 0);
    be.params.workspace_limit = 2880ll * 2880 * 4 - 1;
    assert_plan(plan1(&be, 2880, 10, 4096, F16, MAX_SUM, CENTER), GEMV, 0);
    /* ROWS where AUTO would take GEMV */
    be = cpu_amx(DEFAULT_LIMIT, TODRE_STRATEGY_ROWS);
    assert_plan(plan1(&be, 2880, 10, 4096, F16, MAX_SUM, CENTER), ROWS, 2880);
    /* ROWS -> GRAM: fp32 has no fast unit (and here no FMA rows), or the
     * backend has no ROWS */
    be.caps.rows_fma_batch = 0;
    assert_plan(plan1(&be, 2880, 288, 4096, F32, MAX_SUM, CENTER), GRAM, 0);
    be = cpu_avx2(DEFAULT_LIMIT, TODRE_STRATEGY_ROWS);
    assert_plan(plan1(&be, 2880, 288, 4096, F16, MAX_SUM, CENTER), GRAM, 0);
    /* ROWS -> GEMV when neither fits */
    be.params.workspace_limit = 1 * MIB;
    assert_plan(plan1(&be, 2880, 288, 4096, F16, MAX_SUM, CENTER), GEMV, 0);
}

/* The ROWS store: rows of padded n * 4 bytes, one batch's output beside it,
 * at least two batches (or n). n = 2880: a row is 11520 bytes. bf16 (AMX's
 * rows, batches of 32). */
static void rows_store_sizing(void **state)
{
    (void)state;
    const int64_t row = 2880 * 4;
    struct todre_backend be = cpu_amx(row * (100 + 32), TODRE_STRATEGY_ROWS);
    assert_plan(plan1(&be, 2880, 288, 4096, BF16, MAX_SUM, CENTER), ROWS, 100);
    /* AUTO too: the Gram matrix does not fit, ROWS beats GEMV */
    be.params.strategy = TODRE_STRATEGY_AUTO;
    assert_plan(plan1(&be, 2880, 288, 4096, BF16, MAX_SUM, CENTER), ROWS, 100);
    be.params.workspace_limit = row * (100 + 32) + row - 1; /* floor */
    assert_plan(plan1(&be, 2880, 288, 4096, BF16, MAX_SUM, CENTER), ROWS, 100);
    /* 64 rows (two batches) is the least store */
    be.params.workspace_limit = row * (64 + 32);
    assert_plan(plan1(&be, 2880, 288, 4096, BF16, MAX_SUM, CENTER), ROWS, 64);
    be.params.workspace_limit = row * (64 + 32) - 1;
    assert_plan(plan1(&be, 2880, 288, 4096, BF16, MAX_SUM, CENTER), GEMV, 0);
    be.params.strategy = TODRE_STRATEGY_ROWS;
    assert_plan(plan1(&be, 2880, 288, 4096, BF16, MAX_SUM, CENTER), GEMV, 0);
    /* n = 40 pads to 64 (256-byte rows) and needs only its 40 rows */
    be.params.workspace_limit = 256 * (40 + 32);
    assert_plan(plan1(&be, 40, 5, 64, BF16, MAX_SUM, CENTER), ROWS, 40);
    be.params.workspace_limit = 256 * (40 + 32) - 1;
    /* 40^2 * 4 = 6400 bytes: the Gram matrix still fits */
    assert_plan(plan1(&be, 40, 5, 64, BF16, MAX_SUM, CENTER), GRAM, 0);
    /* never more than n rows */
    be.params.workspace_limit = DEFAULT_LIMIT;
    assert_plan(plan1(&be, 40, 5, 64, BF16, MAX_SUM, CENTER), ROWS, 40);
}

/* A device-like backend: GRAM only up to gram_max_n, never ROWS. */
static void gram_max_n_bounds_gram(void **state)
{
    (void)state;
    struct todre_backend be = device_like(DEFAULT_LIMIT, TODRE_STRATEGY_GRAM);
    assert_plan(plan1(&be, 1024, 100, 4096, F16, MAX_SUM, CENTER), GRAM, 0);
    assert_plan(plan1(&be, 1025, 100, 4096, F16, MAX_SUM, CENTER), GEMV, 0);
    be.params.strategy = TODRE_STRATEGY_ROWS;
    assert_plan(plan1(&be, 1024, 100, 4096, BF16, MAX_SUM, CENTER), GRAM, 0);
    assert_plan(plan1(&be, 2880, 288, 4096, BF16, MAX_SUM, CENTER), GEMV, 0);
    /* AUTO: GEMV 99 n d 2 / 1000 = 0.83e6 vs GRAM n^2 d / 2 / 20000 = 0.107e6
     * + n d 6 / 500 = 0.050e6 */
    be.params.strategy = TODRE_STRATEGY_AUTO;
    assert_plan(plan1(&be, 1024, 100, 4096, F16, MAX_SUM, CENTER), GRAM, 0);
    assert_plan(plan1(&be, 2880, 288, 4096, F16, MAX_SUM, CENTER), GEMV, 0);
    assert_plan(plan1(&be, 1025, 288, 4096, F16, MAX_MIN, ISOLATED), GEMV, 0);
    assert_plan(plan1(&be, 1024, 1, 4096, F16, MAX_MIN, ISOLATED), GRAM, 0);
}

/* ---- objectives and pivots -------------------------------------------------------- */

static void isolated_pivot_takes_the_gram_matrix(void **state)
{
    (void)state;
    /* every pairwise product is needed for the pivot: GRAM when allowed and
     * it fits, even for k = 1 and where AUTO would take ROWS or GEMV */
    struct todre_backend be = cpu_amx(DEFAULT_LIMIT, TODRE_STRATEGY_AUTO);
    assert_plan(plan1(&be, 2880, 288, 4096, F16, MAX_MIN, ISOLATED), GRAM, 0);
    assert_plan(plan1(&be, 2880, 1, 4096, F16, MAX_MIN, ISOLATED), GRAM, 0);
    assert_plan(plan1(&be, 2880, 2, 4096, F16, MAX_SUM, ISOLATED), GRAM, 0);
    be.params.strategy = TODRE_STRATEGY_ROWS;
    assert_plan(plan1(&be, 2880, 288, 4096, F16, MAX_MIN, ISOLATED), GRAM, 0);
    be.params.strategy = TODRE_STRATEGY_GEMV;
    assert_plan(plan1(&be, 2880, 288, 4096, F16, MAX_MIN, ISOLATED), GEMV, 0);
    /* one row: nothing to compare */
    be.params.strategy = TODRE_STRATEGY_AUTO;
    assert_plan(plan1(&be, 1, 1, 4096, F16, MAX_MIN, ISOLATED), GEMV, 0);
    /* the matrix does not fit: the greedy's own rules (ROWS here, f16 rows
     * on the FMA kernels: 16 MiB / 11520 - 12 = 1444 stored rows) */
    be.params.workspace_limit = 16 * MIB;
    assert_plan(plan1(&be, 2880, 288, 4096, F16, MAX_MIN, ISOLATED), ROWS, 1444);
    assert_plan(plan1(&be, 2880, 1, 4096, F16, MAX_MIN, ISOLATED), GEMV, 0);
}

static void no_products_no_plan(void **state)
{
    (void)state;
    struct todre_backend be = cpu_amx(DEFAULT_LIMIT, TODRE_STRATEGY_GRAM);
    /* CLS_TOPK takes no products at all; k = 1 takes no greedy step */
    assert_plan(plan1(&be, 2880, 288, 4096, F16, TODRE_OBJECTIVE_CLS_TOPK, CENTER), GEMV, 0);
    assert_plan(plan1(&be, 2880, 1, 4096, F16, MAX_SUM, CENTER), GEMV, 0);
    assert_plan(plan1(&be, 2880, 1, 4096, F16, MAX_MIN, TODRE_PIVOT_FIXED), GEMV, 0);
    be.params.strategy = TODRE_STRATEGY_ROWS;
    assert_plan(plan1(&be, 2880, 1, 4096, F16, MAX_SUM, TODRE_PIVOT_CLS), GEMV, 0);
    /* a drawn (FIXED) pivot plans like any other */
    assert_plan(plan1(&be, 2880, 288, 4096, F16, MAX_SUM, TODRE_PIVOT_FIXED), ROWS, 2880);
}

/* A ragged batch: each set gets its own plan. */
static void batch_sets_planned_separately(void **state)
{
    (void)state;
    struct todre_backend be = cpu_amx(DEFAULT_LIMIT, TODRE_STRATEGY_AUTO);
    int64_t offsets[5] = {0, 2880, 2920, 2921, 5801}, keep[4] = {288, 4, 1, 10};
    struct todre_select_job job;
    memset(&job, 0, sizeof job);
    job.emb_dtype = F16;
    job.d = 4096;
    job.nseg = 4;
    job.seg_offsets = offsets;
    job.seg_k = keep;
    job.objective = MAX_SUM;
    job.pivot = CENTER;
    job.pivot_hi = -1;
    struct todre_select_plan p[4];
    memset(p, 0xff, sizeof p);
    todre_select_plan_sets(&be, &job, p);
    assert_plan(p[0], ROWS, 2880);
    /* n = 40, k = 4: GEMV 3 n d 2 / 50 = 19.7e3 vs GRAM (AMX) 5.5e3 + 109e3
     * packing vs ROWS 17.5e3 + 54.6e3 */
    assert_plan(p[1], GEMV, 0);
    assert_plan(p[2], GEMV, 0);
    assert_plan(p[3], GEMV, 0);
    be.params.strategy = TODRE_STRATEGY_ROWS;
    todre_select_plan_sets(&be, &job, p);
    assert_plan(p[0], ROWS, 2880);
    assert_plan(p[1], ROWS, 40);
    assert_plan(p[2], GEMV, 0);
    assert_plan(p[3], ROWS, 2880);
}

/* ---- through the public API ----------------------------------------------------- */

/* Bytes malloc has handed out and not taken back (the CPU workspace is
 * allocated in the calling thread and cached in the context). */
/* Bytes of heap in use: glibc's counters, or ASan's own under ASan, which
 * replaces malloc (glibc's mallinfo2 then sees nothing). */
#if defined(__SANITIZE_ADDRESS__)
#define TT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TT_ASAN 1
#endif
#endif
#ifdef TT_ASAN
/* Declared here: gcc does not install <sanitizer/allocator_interface.h>;
 * both runtimes (libasan, clang's) export it. */
size_t __sanitizer_get_current_allocated_bytes(void);
static int64_t heap_in_use(void) { return (int64_t)__sanitizer_get_current_allocated_bytes(); }
#else
static int64_t heap_in_use(void)
{
    struct mallinfo2 m = mallinfo2();
    return (int64_t)(m.uordblks + m.hblkhd);
}
#endif

#define N_MEM 1024
#define D_MEM 64
#define K_MEM 40

struct mem_case {
    int64_t sel[K_MEM], pos[K_MEM];
    int64_t grown; /* heap growth over the call, context alive */
};

/* One selection on a fresh context with the given limit and strategy. */
static void run_mem_case(const void *emb, todre_dtype dt, todre_objective obj, todre_pivot piv,
                         int64_t limit, int64_t strategy, struct mem_case *out)
{
    tt_array a;
    const DLTensor *x = tt_array2(&a, (void *)emb, dt, N_MEM, D_MEM, D_MEM);
    todre_select_config *cfg = tt_config(obj, piv, K_MEM, TODRE_ORDER_BOTH);
    todre_context *ctx = tt_cpu_context();
    tt_ctx_set(ctx, TODRE_CONTEXT_WORKSPACE_LIMIT, limit);
    tt_ctx_set(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, strategy);
    int64_t before = heap_in_use();
    tt_assert_ok(tt_select_both(ctx, cfg, x, NULL, K_MEM, out->sel, out->pos));
    out->grown = heap_in_use() - before;
    tt_assert_position_order(out->sel, out->pos, K_MEM, N_MEM);
    todre_context_destroy(ctx);
    todre_select_config_destroy(cfg);
}

/* The CPU's ISA level in use: "generic", "avx2", "avx512" or "amx". */
static void cpu_arch(char *arch, size_t cap)
{
    todre_device_props p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    tt_assert_ok(todre_device_get_props("cpu", 0, &p));
    snprintf(arch, cap, "%s", p.arch);
}

/* The n x n fp32 Gram matrix is 4 MiB here; GEMV needs O(n + d). A limit of
 * 0 must keep every request to GEMV, visibly in the memory the context takes,
 * with the same selection as every other strategy. */
static void api_limit_and_requests(void **state)
{
    (void)state;
    const int64_t gram_bytes = (int64_t)N_MEM * N_MEM * 4;
    float *x32 = malloc(sizeof(float) * N_MEM * D_MEM);
    uint16_t *x16 = malloc(sizeof(uint16_t) * N_MEM * D_MEM);
    assert_non_null(x32);
    assert_non_null(x16);
    tt_fill_clustered(x32, N_MEM, D_MEM, D_MEM, 12, 0.4, 2024);
    tt_to_f16(x16, x32, (size_t)N_MEM * D_MEM);
    struct mem_case *ref = malloc(sizeof *ref), *c = malloc(sizeof *c);
    assert_non_null(ref);
    assert_non_null(c);
    const struct {
        todre_objective obj;
        todre_pivot piv;
    } modes[] = {{MAX_SUM, CENTER}, {MAX_MIN, ISOLATED}, {MAX_MIN, TODRE_PIVOT_FARTHEST}};
    for (int dti = 0; dti < 2; dti++) {
        todre_dtype dt = dti ? F16 : F32;
        const void *emb = dti ? (const void *)x16 : (const void *)x32;
        for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
            /* GEMV first: the reference, and no matrix at all (but the
             * ISOLATED pivot's blocks of products, sized by the limit) */
            run_mem_case(emb, dt, modes[m].obj, modes[m].piv, DEFAULT_LIMIT, GEMV, ref);
            if (modes[m].piv != ISOLATED) assert_true(ref->grown < gram_bytes / 4);
            for (int64_t req = TODRE_STRATEGY_AUTO; req <= TODRE_STRATEGY_ROWS; req++) {
                /* limit 0: GEMV whatever the request */
                run_mem_case(emb, dt, modes[m].obj, modes[m].piv, 0, req, c);
                assert_true(c->grown < gram_bytes / 4);
                assert_memory_equal(c->sel, ref->sel, sizeof c->sel);
                /* default limit: GRAM (or ROWS with AMX for f16, whose store
                 * holds all n rows here) takes at least the n x n products */
                run_mem_case(emb, dt, modes[m].obj, modes[m].piv, DEFAULT_LIMIT, req, c);
                if (req == TODRE_STRATEGY_GRAM || req == TODRE_STRATEGY_ROWS)
                    assert_true(c->grown >= gram_bytes);
                assert_memory_equal(c->sel, ref->sel, sizeof c->sel);
                assert_memory_equal(c->pos, ref->pos, sizeof c->pos);
            }
        }
    }
    /* A limit between a ROWS plan's memory and the Gram matrix: the rows
     * packed once (AMX: 4 bytes per f16 value; the FMA kernels: as stored)
     * and a store of at least 64 rows plus a batch ((64 + 32) * 4 KiB) fit,
     * the 4 MiB matrix does not. ROWS runs, and its packed rows count
     * against the limit; on the generic level (no ROWS) only GEMV fits. */
    const int64_t rows_limit = (int64_t)(96 + 8) * N_MEM * 4 + (int64_t)N_MEM * D_MEM * 4 +
                               ((int64_t)32 << 10);
    char arch[sizeof ((todre_device_props *)0)->arch];
    cpu_arch(arch, sizeof arch);
    run_mem_case(x16, F16, MAX_SUM, CENTER, DEFAULT_LIMIT, GEMV, ref);
    run_mem_case(x16, F16, MAX_SUM, CENTER, rows_limit, TODRE_STRATEGY_ROWS, c);
    assert_memory_equal(c->sel, ref->sel, sizeof c->sel);
    /* the limit bounds what lies beyond the O(n + d) scratch (slot A:
     * about 60 bytes per token, docs/api.md) */
    const int64_t scratch = (int64_t)96 * N_MEM + (int64_t)64 * D_MEM;
    assert_true(c->grown <= rows_limit + scratch);
    if (strcmp(arch, "amx") == 0)
        assert_true(c->grown >= (int64_t)N_MEM * D_MEM * 4 + (int64_t)96 * N_MEM * 4);
    else if (strcmp(arch, "generic") != 0)
        assert_true(c->grown >= (int64_t)N_MEM * D_MEM * 2 + (int64_t)96 * N_MEM * 4);
    else
        assert_true(c->grown < gram_bytes / 4);
    /* Half that limit holds neither kernel's packed rows and store: GEMV. */
    run_mem_case(x16, F16, MAX_SUM, CENTER, rows_limit / 2, TODRE_STRATEGY_ROWS, c);
    assert_memory_equal(c->sel, ref->sel, sizeof c->sel);
    assert_true(c->grown < (int64_t)64 * N_MEM * 4);
    free(ref);
    free(c);
    free(x16);
    free(x32);
}

/* Out-of-range requests are rejected by the parameter's bounds. */
static void api_strategy_bounds(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    int64_t v = -1;
    tt_assert_ok(todre_context_get_int(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, &v));
    assert_int_equal(v, TODRE_STRATEGY_AUTO);
    tt_assert_fails_param(ctx, todre_context_set_int(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, 4),
                          TODRE_ERR_INVALID_ARGUMENT, TODRE_CONTEXT_EXP_SELECT_STRATEGY);
    tt_assert_ok(todre_context_get_int(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, &v));
    assert_int_equal(v, TODRE_STRATEGY_AUTO);
    todre_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(auto_amx_benchmark_case),
        cmocka_unit_test(auto_without_fast_unit),
        cmocka_unit_test(auto_fma_rows),
        cmocka_unit_test(auto_fma_dp_bf16),
        cmocka_unit_test(auto_amx_f32_on_fma),
        cmocka_unit_test(blas_class_factor),
        cmocka_unit_test(auto_unknown_rates),
        cmocka_unit_test(limit_zero_is_gemv_everywhere),
        cmocka_unit_test(requested_strategies_fall_back),
        cmocka_unit_test(rows_store_sizing),
        cmocka_unit_test(gram_max_n_bounds_gram),
        cmocka_unit_test(isolated_pivot_takes_the_gram_matrix),
        cmocka_unit_test(no_products_no_plan),
        cmocka_unit_test(batch_sets_planned_separately),
        cmocka_unit_test(api_limit_and_requests),
        cmocka_unit_test(api_strategy_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
