/* Bounded memory: the peak resident set a call adds stays within what the
 * documentation promises.
 *
 *  - Stage 1 at n = 18,000, d = 4096 (f16, 147 MB of input; f32, 295 MB),
 *    k = 32: the working memory stays within TODRE_CONTEXT_WORKSPACE_LIMIT
 *    plus a small slack (the O(n + d) scratch, OpenMP's worker threads), at
 *    the default limit (256 MiB) and at 16 MiB, with AUTO and with GRAM /
 *    ROWS requests the limit cannot honour (the 1.2 GiB Gram matrix must not
 *    be made; the request falls back). Every pairwise product (the ISOLATED
 *    pivot, f16 and f32) at n = 2000 and 16 MiB: tiles of products, the f16
 *    rows widened tile by tile (a whole fp32 copy would be 32 MiB); a GRAM
 *    plan on f16 at n = 2000 and 24 MiB, where the 16 MB matrix fits and an
 *    fp32 copy of the rows (32 MB) beside it would not. The slack is SLACK_BASE_KIB plus
 *    SLACK_PER_THREAD_KIB per thread. The rows a ROWS plan packs count
 *    against the limit like everything else (f16 on the FMA kernels, as
 *    stored, or as GEMV at 16 MiB; AMX's bf16 rows, 2 bytes a value, 147
 *    MB here, at 512 MiB on AMX itself where the CPU has it).
 *  - Stage 2's fused path (todre_relevance_observe_qk) at K = 32,768 (H = 2,
 *    dh = 64, f32): within the documented working set, about 230 KiB per
 *    thread whatever K is (docs/bench_stage2.md), plus the slack; and the
 *    same figure, within QK_K_TOLERANCE_KIB, as at K = 2048.
 *  - The instrument itself: a 64 MiB block from todre_context_alloc,
 *    written once, must show in the figure (so that a call that used more
 *    than its bound would fail this test).
 *
 * Each case runs in a fresh child process (this program re-executed with
 * --case NAME), so that peaks never mix. The child makes its input first,
 * then takes the baseline: it resets the peak (VmHWM, by writing 5 to
 * /proc/self/clear_refs) where the kernel allows it, so the figure is the
 * growth of the peak over the resident set with the input in memory. The
 * input itself is excluded. Transparent huge pages are turned off in the
 * child (prctl PR_SET_THP_DISABLE), so that figures count 4 KiB pages.
 *
 * Resident-set figures mean nothing under a sanitizer (shadow memory,
 * quarantine): tests/robust/CMakeLists.txt does not build this program there; built
 * so anyway, it fails rather than report figures. */
#define _GNU_SOURCE
#define TODRE_EXPERIMENTAL_API
#include "todre_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "half.h"
#include "robust_util.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif

/* What a call may add besides its documented working memory: the O(n + d)
 * scratch of stage 1 (about 54 bytes per token: 1 MB at n = 18,000), the
 * stacks and team structures of the OpenMP threads the first parallel
 * region starts, OpenBLAS's packing buffers for stage 2, page granularity.
 * The smallest cases grow by 392 to 1,032 KiB in all (`ctest -R
 * unit.memory_bound -V` prints each case's growth; 2-core AMD EPYC VM). */
#define SLACK_BASE_KIB 2048L
#define SLACK_PER_THREAD_KIB 256L
/* Stage 2's fused path, documented per thread (docs/bench_stage2.md). */
#define QK_PER_THREAD_KIB 230L
/* Stage 2 at K = 32,768 against K = 2048: page-level noise only. */
#define QK_K_TOLERANCE_KIB 512L

#define S1_N 18000
#define S1_D 4096
#define S1_K 32
#define SMALL_LIMIT ((int64_t)16 << 20)
#define ISO_N 2000
#define GRAM_N 2000
#define GRAM_LIMIT ((int64_t)24 << 20)
#define DEFAULT_LIMIT ((int64_t)256 << 20)
#define BIG_LIMIT ((int64_t)512 << 20)

#define S2_K 32768
#define S2_H 2
#define S2_DH 64
#define S2_TEXT 1024
#define S2_SYSTEM 16

/* ---- measurement (child side) ------------------------------------------------------------ */

static long base_kib;
static int hwm_reset;
static int ncores;     /* threads a context uses by default */
static char arch[64];  /* the CPU code path */

/* The slack for a context using every core. */
static long slack_kib(void) { return SLACK_BASE_KIB + SLACK_PER_THREAD_KIB * ncores; }

static int read_device(void)
{
    todre_device_props dp;
    memset(&dp, 0, sizeof dp);
    dp.struct_size = sizeof dp;
    if (todre_device_get_props("cpu", 0, &dp) != TODRE_OK) return 0;
    ncores = dp.cores;
    snprintf(arch, sizeof arch, "%s", dp.arch);
    return 1;
}

/* After the input exists: the baseline the call is measured from. */
static void take_baseline(void)
{
    /* The registry is process-wide setup done once, not memory of a call:
     * build it first. Where a CUDA module sits next to libtodre, loading it
     * initialises the CUDA runtime, which maps about 150 MB. */
    int nbackends = 0;
    (void)todre_backend_count(&nbackends);
    FILE *f = fopen("/proc/self/clear_refs", "w");
    hwm_reset = f && fputs("5", f) >= 0;
    if (f && fclose(f) != 0) hwm_reset = 0;
    long rss = rb_status_kib("VmRSS"), hwm = rb_status_kib("VmHWM");
    /* without a reset the peak so far counts (the input is made without a
     * larger transient, so it is close to the resident set) */
    base_kib = hwm_reset || hwm < rss ? rss : hwm;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int report(const char *name, long bound_kib, double seconds, const char *what)
{
    long hwm = rb_status_kib("VmHWM");
    if (hwm < 0) {
        printf("case %s: no VmHWM in /proc/self/status\n", name);
        return 3;
    }
    printf("case %s delta_kib %ld bound_kib %ld base_kib %ld reset %d seconds %.2f %s\n", name,
           hwm - base_kib, bound_kib, base_kib, hwm_reset, seconds, what);
    return 0;
}

/* Stage-1 input: n x d f16 or f32, a few dozen directions plus noise, made
 * row by row (no n x d float32 transient for f16). */
static void *stage1_input(int64_t n, todre_dtype dt)
{
    size_t esize = dt == TODRE_DTYPE_F32 ? 4 : 2;
    void *x = malloc((size_t)n * S1_D * esize);
    float *row = malloc(S1_D * sizeof *row), *centers = malloc((size_t)64 * S1_D * sizeof *centers);
    if (!x || !row || !centers) return NULL;
    tt_rng r = {2024};
    for (size_t i = 0; i < (size_t)64 * S1_D; i++) centers[i] = (float)(2 * tt_rng_uniform(&r) - 1);
    for (int64_t i = 0; i < n; i++) {
        const float *c = centers + (tt_rng_u64(&r) % 64) * S1_D;
        uint64_t s = tt_rng_u64(&r);
        for (int64_t j = 0; j < S1_D; j++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17; /* xorshift noise in [-0.25, 0.25) */
            row[j] = c[j] + (float)((double)(s >> 11) * 0x1.0p-53 - 0.5) * 0.5f;
        }
        if (dt == TODRE_DTYPE_F32)
            memcpy((float *)x + i * S1_D, row, S1_D * sizeof *row);
        else
            for (int64_t j = 0; j < S1_D; j++)
                ((uint16_t *)x)[i * S1_D + j] =
                    dt == TODRE_DTYPE_BF16 ? todre_f32_to_bf16(row[j]) : todre_f32_to_f16(row[j]);
    }
    free(row);
    free(centers);
    return x;
}

struct s1 {
    int64_t n, limit, strategy;
    todre_dtype dt;
    todre_pivot pivot;
};

static int stage1_case(const char *name, struct s1 c)
{
    void *x = stage1_input(c.n, c.dt);
    int64_t *out = malloc(S1_K * sizeof *out);
    if (!x || !out) return 2;
    take_baseline();
    double t0 = now_s();
    todre_context *ctx = NULL;
    todre_select_config *cfg = NULL;
    if (!read_device() || todre_context_create("cpu", 0, &ctx) != TODRE_OK ||
        todre_context_set_int(ctx, TODRE_CONTEXT_WORKSPACE_LIMIT, c.limit) != TODRE_OK ||
        todre_context_set_int(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, c.strategy) != TODRE_OK ||
        todre_select_config_create(&cfg) != TODRE_OK ||
        todre_select_config_set_int(cfg, TODRE_SELECT_KEEP, S1_K) != TODRE_OK ||
        todre_select_config_set_int(cfg, TODRE_SELECT_PIVOT, c.pivot) != TODRE_OK) {
        printf("case %s: setup: %s\n", name, todre_last_error());
        return 4;
    }
    int64_t xs[2] = {c.n, S1_D}, os[1] = {S1_K};
    DLTensor e = todre_test_dl(x, tt_dl_dtype(c.dt), 2, xs, NULL);
    DLTensor o = todre_test_dl(out, tt_dl_dtype(TODRE_DTYPE_I64), 1, os, NULL);
    todre_status st = todre_select(ctx, cfg, &e, NULL, &o);
    double t1 = now_s();
    if (st != TODRE_OK) {
        printf("case %s: todre_select: %s\n", name, todre_last_error());
        return 5;
    }
    /* The limit bounds all the memory beyond the input
     * (TODRE_CONTEXT_WORKSPACE_LIMIT), the packed rows of a ROWS plan
     * included (AMX: 2 bytes per bf16 value, 147 MB here; FMA: as stored). */
    long extra = 0;
    char what[160];
    snprintf(what, sizeof what, "n %lld dtype %d pivot %d limit_kib %lld extra_kib %ld threads %d "
             "arch %s kept %lld..%lld", (long long)c.n, (int)c.dt, (int)c.pivot,
             (long long)(c.limit >> 10), extra, ncores, arch, (long long)out[0],
             (long long)out[S1_K - 1]);
    int rc = report(name, (long)(c.limit >> 10) + extra + slack_kib(), t1 - t0, what);
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
    free(out);
    free(x);
    return rc;
}

static int stage2_case(const char *name, int64_t K)
{
    size_t nq = (size_t)S2_H * (size_t)K * S2_DH;
    float *q = malloc(nq * sizeof *q), *k = malloc(nq * sizeof *k);
    if (!q || !k) return 2;
    tt_rng r = {77};
    for (size_t i = 0; i < nq; i++) {
        q[i] = (float)(tt_rng_uniform(&r) - 0.5);
        k[i] = (float)(tt_rng_uniform(&r) - 0.5);
    }
    take_baseline();
    double t0 = now_s();
    todre_context *ctx = NULL;
    todre_relevance *rel = NULL;
    if (!read_device() || todre_context_create("cpu", 0, &ctx) != TODRE_OK ||
        todre_relevance_create(8, 1, &rel) != TODRE_OK ||
        todre_relevance_set_layout(rel, S2_SYSTEM, K - S2_SYSTEM - S2_TEXT, S2_TEXT) != TODRE_OK) {
        printf("case %s: setup: %s\n", name, todre_last_error());
        return 4;
    }
    int64_t shape[3] = {S2_H, K, S2_DH};
    DLTensor qt = todre_test_dl(q, tt_dl_dtype(TODRE_DTYPE_F32), 3, shape, NULL);
    DLTensor kt = todre_test_dl(k, tt_dl_dtype(TODRE_DTYPE_F32), 3, shape, NULL);
    todre_status st = todre_relevance_observe_qk(ctx, rel, 7, &qt, &kt, 0.0, NULL);
    double t2v = -1, v2t = -1;
    if (st == TODRE_OK) st = todre_relevance_ratios(rel, 0, 7, &t2v, &v2t);
    double t1 = now_s();
    if (st != TODRE_OK) {
        printf("case %s: observe_qk: %s\n", name, todre_last_error());
        return 5;
    }
    /* a context uses every core by default */
    long bound = (long)ncores * QK_PER_THREAD_KIB + slack_kib();
    char what[96];
    snprintf(what, sizeof what, "threads %d alpha_t2v %.4f", ncores, t2v);
    int rc = report(name, bound, t1 - t0, what);
    todre_relevance_destroy(rel);
    todre_context_destroy(ctx);
    free(q);
    free(k);
    return rc;
}

/* The instrument: a 64 MiB block written once must show. */
static int probe_case(const char *name)
{
    take_baseline();
    todre_context *ctx = NULL;
    void *p = NULL;
    const size_t bytes = (size_t)64 << 20;
    if (todre_context_create("cpu", 0, &ctx) != TODRE_OK ||
        todre_context_alloc(ctx, bytes, &p) != TODRE_OK)
        return 4;
    memset(p, 1, bytes);
    /* the bound here is the least the figure must reach */
    int rc = report(name, (long)(bytes >> 10), 0.0, "minimum");
    todre_context_free(ctx, p);
    todre_context_destroy(ctx);
    return rc;
}

static int child_main(const char *name)
{
    /* 4 KiB pages only: with transparent huge pages set to "always", one
     * touched byte of a thread stack or heap region can make 2 MiB resident,
     * which would measure the kernel's policy instead of the library. */
    (void)prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
    static const struct {
        const char *name;
        struct s1 c;
    } s1_cases[] = {
        {"stage1_default_auto", {S1_N, DEFAULT_LIMIT, 0, TODRE_DTYPE_F16, TODRE_PIVOT_AUTO}},
        {"stage1_default_gram", {S1_N, DEFAULT_LIMIT, 2, TODRE_DTYPE_F16, TODRE_PIVOT_AUTO}},
        {"stage1_16mib_auto", {S1_N, SMALL_LIMIT, 0, TODRE_DTYPE_F16, TODRE_PIVOT_AUTO}},
        {"stage1_16mib_gram", {S1_N, SMALL_LIMIT, 2, TODRE_DTYPE_F16, TODRE_PIVOT_AUTO}},
        {"stage1_16mib_rows", {S1_N, SMALL_LIMIT, 3, TODRE_DTYPE_F16, TODRE_PIVOT_AUTO}},
        /* room for AMX's packed bf16 rows (147 MB) and a store: the AMX
         * kernel runs where the CPU has it, and stays within the limit too */
        {"stage1_512mib_rows", {S1_N, BIG_LIMIT, 3, TODRE_DTYPE_BF16, TODRE_PIVOT_AUTO}},
        {"stage1_16mib_auto_f32", {S1_N, SMALL_LIMIT, 0, TODRE_DTYPE_F32, TODRE_PIVOT_AUTO}},
        /* every pairwise product, so a smaller n (the old fp32 copy of the
         * f16 rows, 32 MiB, is twice the limit) */
        {"stage1_16mib_isolated_f16", {ISO_N, SMALL_LIMIT, 0, TODRE_DTYPE_F16, TODRE_PIVOT_ISOLATED}},
        {"stage1_16mib_isolated_f32", {ISO_N, SMALL_LIMIT, 0, TODRE_DTYPE_F32, TODRE_PIVOT_ISOLATED}},
        /* the Gram matrix (16 MB) fits the limit, the rows as fp32 beside it
         * (32 MB) do not */
        {"stage1_24mib_gram_f16", {GRAM_N, GRAM_LIMIT, 2, TODRE_DTYPE_F16, TODRE_PIVOT_AUTO}},
        {"stage1_24mib_gram_isolated_f16",
         {GRAM_N, GRAM_LIMIT, 0, TODRE_DTYPE_F16, TODRE_PIVOT_ISOLATED}},
    };
    for (size_t i = 0; i < sizeof s1_cases / sizeof s1_cases[0]; i++)
        if (strcmp(name, s1_cases[i].name) == 0) return stage1_case(name, s1_cases[i].c);
    if (strcmp(name, "stage2_qk_32k") == 0) return stage2_case(name, S2_K);
    if (strcmp(name, "stage2_qk_2k") == 0) return stage2_case(name, 2048);
    if (strcmp(name, "probe_64mib") == 0) return probe_case(name);
    printf("unknown case %s\n", name);
    return 2;
}

/* ---- the parent: one child per case ---------------------------------------------------- */

struct figure {
    long delta, bound, base;
    int reset;
    double seconds;
};

static struct figure run_case(const char *name)
{
    char out[1024], why[64], want[128];
    const char *args[] = {"--case", name, NULL};
    int status = rb_run_self(args, NULL, out, sizeof out);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("case %s: child %s: %s", name, rb_status_text(status, why, sizeof why), out);
    struct figure f;
    snprintf(want, sizeof want, "case %s delta_kib %%ld bound_kib %%ld base_kib %%ld reset %%d "
             "seconds %%lf", name);
    if (sscanf(out, want, &f.delta, &f.bound, &f.base, &f.reset, &f.seconds) != 5)
        fail_msg("case %s: unreadable child output: %s", name, out);
    print_message("  %s", out);
    return f;
}

static void stage1_bounded(void **state)
{
    (void)state;
    static const char *cases[] = {"stage1_16mib_auto", "stage1_16mib_gram", "stage1_16mib_rows",
                                  "stage1_512mib_rows",
                                  "stage1_default_auto", "stage1_default_gram",
                                  "stage1_16mib_auto_f32", "stage1_16mib_isolated_f16",
                                  "stage1_16mib_isolated_f32", "stage1_24mib_gram_f16",
                                  "stage1_24mib_gram_isolated_f16"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct figure f = run_case(cases[i]);
        if (f.delta > f.bound)
            fail_msg("%s: the call added %ld KiB to the peak resident set; the bound is %ld KiB "
                     "(workspace limit + slack)", cases[i], f.delta, f.bound);
    }
}

static void stage2_fused_bounded(void **state)
{
    (void)state;
    struct figure f = run_case("stage2_qk_32k");
    if (f.delta > f.bound)
        fail_msg("stage 2 (q/k, K = %d): the call added %ld KiB to the peak resident set; the "
                 "bound is %ld KiB (%ld KiB per thread + slack)", S2_K, f.delta, f.bound,
                 QK_PER_THREAD_KIB);
    struct figure small = run_case("stage2_qk_2k");
    if (labs(f.delta - small.delta) > QK_K_TOLERANCE_KIB)
        fail_msg("stage 2 (q/k): the working set grows with K: %ld KiB at K = 2048, %ld KiB at "
                 "K = %d", small.delta, f.delta, S2_K);
}

static void instrument_sees_memory(void **state)
{
    (void)state;
    struct figure f = run_case("probe_64mib");
    if (f.delta < f.bound)
        fail_msg("a written 64 MiB block added only %ld KiB to the measured peak: the "
                 "measurement cannot see what a call uses", f.delta);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--case") == 0) return child_main(argv[2]);
#ifdef UNDER_SANITIZER
    printf("resident-set figures are meaningless under a sanitizer; tests/robust/CMakeLists.txt should "
           "not have registered this test\n");
    return 1;
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(instrument_sees_memory),
        cmocka_unit_test(stage2_fused_bounded),
        cmocka_unit_test(stage1_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
