/* The CPU backend's process-wide footprint: TODRE_CONTEXT_NUM_THREADS bounds
 * that context's own threads and nothing else (OpenBLAS's and OpenMP's
 * process-wide thread counts are never changed, not even during a call, so
 * contexts with different counts used alternately give the same results),
 * and the instruction set is chosen once from the machine and
 * $TODRE_CPU_ISA, as todre_device_get_props() reports it.
 *
 * OpenBLAS and OpenMP come with libtodre: their functions are looked up
 * with dlsym() rather than linked. The TODRE_CPU_ISA cases run this program
 * again in a child process (the choice is made once per process). */
#define _GNU_SOURCE /* RTLD_DEFAULT, posix_spawn, pipe, sysconf */
#define TODRE_EXPERIMENTAL_API
#include "todre_test.h"

#include <stdatomic.h>
#include <dlfcn.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define N 600
#define D 96
#define K 30

/* ---- data ------------------------------------------------------------------------ */

static float *x32;
static uint16_t *x16;

static int setup_data(void **state)
{
    (void)state;
    x32 = malloc(sizeof(float) * N * D);
    x16 = malloc(sizeof(uint16_t) * N * D);
    if (!x32 || !x16) return -1;
    tt_fill_clustered(x32, N, D, D, 9, 0.5, 77);
    tt_to_f16(x16, x32, (size_t)N * D);
    return 0;
}

static int teardown_data(void **state)
{
    (void)state;
    free(x32);
    free(x16);
    return 0;
}

struct mode {
    todre_objective obj;
    todre_pivot piv;
    todre_dtype dt;
    int64_t strategy;
};

static const struct mode modes[] = {
    {TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_CENTER, TODRE_DTYPE_F32, 1},
    {TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_CENTER, TODRE_DTYPE_F32, 2},
    {TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_FARTHEST, TODRE_DTYPE_F16, 0},
    {TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_RANDOM, TODRE_DTYPE_F16, 2},
    {TODRE_OBJECTIVE_MAX_MIN, TODRE_PIVOT_ISOLATED, TODRE_DTYPE_F32, 0},
    {TODRE_OBJECTIVE_MAX_MIN, TODRE_PIVOT_ISOLATED, TODRE_DTYPE_F16, 1},
    {TODRE_OBJECTIVE_MAX_MIN, TODRE_PIVOT_CENTER, TODRE_DTYPE_F16, 3},
};
#define NMODES (sizeof modes / sizeof modes[0])

static void select_mode(todre_context *ctx, const struct mode *m, int64_t *sel, int64_t *pos)
{
    tt_ctx_set(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, m->strategy);
    tt_array a;
    void *data = m->dt == TODRE_DTYPE_F32 ? (void *)x32 : (void *)x16;
    const DLTensor *x = tt_array2(&a, data, m->dt, N, D, D);
    todre_select_config *cfg = tt_config(m->obj, m->piv, K, TODRE_ORDER_BOTH);
    tt_cfg_set(cfg, TODRE_SELECT_SEED, 12345);
    tt_assert_ok(tt_select_both(ctx, cfg, x, NULL, K, sel, pos));
    tt_assert_position_order(sel, pos, K, N);
    todre_select_config_destroy(cfg);
}

/* Stage 2 through the q/k path (OpenBLAS sgemm inside OpenMP regions):
 * layout [8 system | 200 visual | 40 text], 4 heads over 2 key heads. */
#define RL_H 4
#define RL_HKV 2
#define RL_K 248
#define RL_DH 32

static float *rl_q, *rl_k;

static void relevance_ratios(todre_context *ctx, double *t2v, double *v2t)
{
    if (!rl_q) {
        rl_q = malloc(sizeof(float) * RL_H * RL_K * RL_DH);
        rl_k = malloc(sizeof(float) * RL_HKV * RL_K * RL_DH);
        assert_non_null(rl_q);
        assert_non_null(rl_k);
        tt_fill_clustered(rl_q, RL_H * RL_K, RL_DH, RL_DH, 5, 0.8, 5);
        tt_fill_clustered(rl_k, RL_HKV * RL_K, RL_DH, RL_DH, 5, 0.8, 6);
    }
    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(8, 1, &rel));
    tt_assert_ok(todre_relevance_set_layout(rel, 8, 200, 40));
    tt_array qa, ka;
    const DLTensor *q = tt_array3(&qa, rl_q, TODRE_DTYPE_F32, RL_H, RL_K, RL_DH);
    const DLTensor *k = tt_array3(&ka, rl_k, TODRE_DTYPE_F32, RL_HKV, RL_K, RL_DH);
    tt_assert_ok(todre_relevance_observe_qk(ctx, rel, 7, q, k, 0.0, NULL));
    tt_assert_ok(todre_relevance_ratios(rel, 0, 7, t2v, v2t));
    todre_relevance_destroy(rel);
}

/* ---- contexts with different thread counts ------------------------------------- */

static void alternating_contexts_agree(void **state)
{
    (void)state;
    todre_context *one = tt_cpu_context(), *all = tt_cpu_context(), *two = tt_cpu_context();
    tt_ctx_set(one, TODRE_CONTEXT_NUM_THREADS, 1);
    tt_ctx_set(two, TODRE_CONTEXT_NUM_THREADS, 2);
    int64_t v = -1;
    tt_assert_ok(todre_context_get_int(all, TODRE_CONTEXT_NUM_THREADS, &v));
    assert_int_equal(v, 0);
    todre_context *order[] = {one, all, one, two, all, one};
    int64_t ref_sel[K], ref_pos[K], sel[K], pos[K];
    for (size_t m = 0; m < NMODES; m++) {
        select_mode(one, &modes[m], ref_sel, ref_pos);
        for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
            select_mode(order[i], &modes[m], sel, pos);
            assert_memory_equal(sel, ref_sel, sizeof sel);
            assert_memory_equal(pos, ref_pos, sizeof pos);
        }
    }
    double ref_t2v, ref_v2t, t2v, v2t;
    relevance_ratios(one, &ref_t2v, &ref_v2t);
    /* text queries see visual keys; visual ones see no text key (causal) */
    assert_true(ref_t2v > 0 && ref_t2v < 1);
    assert_true(ref_v2t == 0.0);
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        relevance_ratios(order[i], &t2v, &v2t);
        assert_memory_equal(&t2v, &ref_t2v, sizeof t2v); /* bit for bit */
        assert_memory_equal(&v2t, &ref_v2t, sizeof v2t);
    }
    todre_context_destroy(one);
    todre_context_destroy(all);
    todre_context_destroy(two);
}

/* ---- process-wide settings ------------------------------------------------------- */

typedef int (*get_threads_fn)(void);
typedef void (*set_threads_fn)(int);

static get_threads_fn blas_get, omp_get;
static set_threads_fn blas_set;

static void lookup_runtimes(void)
{
    blas_get = (get_threads_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
    blas_set = (set_threads_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
    omp_get = (get_threads_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "omp_get_max_threads");
    assert_non_null(blas_get); /* libtodre links OpenBLAS and OpenMP */
    assert_non_null(blas_set);
    assert_non_null(omp_get);
}

struct poller {
    atomic_int stop;
    int want;
    long polls, changed;
};

/* Reads OpenBLAS's process-wide count while another context computes. */
static void *poll_blas(void *arg)
{
    struct poller *p = arg;
    while (!atomic_load(&p->stop)) {
        if (blas_get() != p->want) p->changed++;
        p->polls++;
    }
    return NULL;
}

static void process_wide_counts_untouched(void **state)
{
    (void)state;
    lookup_runtimes();
    /* a count no context below asks for (at least 2, so that a context's 1
     * would show) */
    const int blas_original = blas_get();
    blas_set(3);
    const int blas_before = blas_get(), omp_before = omp_get();
    assert_true(blas_before >= 2);

    todre_context *one = tt_cpu_context();
    tt_ctx_set(one, TODRE_CONTEXT_NUM_THREADS, 1);
    struct poller p = {0, blas_before, 0, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, poll_blas, &p), 0);
    int64_t sel[K], pos[K];
    double t2v, v2t;
    for (int round = 0; round < 3; round++) {
        for (size_t m = 0; m < NMODES; m++) {
            select_mode(one, &modes[m], sel, pos);
            assert_int_equal(blas_get(), blas_before);
            assert_int_equal(omp_get(), omp_before);
        }
        relevance_ratios(one, &t2v, &v2t);
        assert_int_equal(blas_get(), blas_before);
        assert_int_equal(omp_get(), omp_before);
    }
    atomic_store(&p.stop, 1);
    pthread_join(th, NULL);
    assert_true(p.polls > 0);
    assert_int_equal(p.changed, 0); /* never changed, even during a call */

    /* the default context too */
    todre_context *all = tt_cpu_context();
    select_mode(all, &modes[1], sel, pos);
    assert_int_equal(blas_get(), blas_before);
    assert_int_equal(omp_get(), omp_before);
    todre_context_destroy(all);
    todre_context_destroy(one);
    blas_set(blas_original);
}

/* ---- the instruction set ------------------------------------------------------------ */

static int isa_level(const char *arch)
{
    static const char *names[] = {"generic", "avx2", "avx512", "amx"};
    for (int i = 0; i < 4; i++)
        if (strcmp(arch, names[i]) == 0) return i;
    fail_msg("arch \"%s\" is not one of generic, avx2, avx512, amx", arch);
    return -1;
}

static void cpu_device_props(void **state)
{
    (void)state;
    todre_device_props p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    tt_assert_ok(todre_device_get_props("cpu", 0, &p));
    assert_int_equal(p.struct_size, sizeof p);
    assert_true(p.name[0] != '\0');
    (void)isa_level(p.arch);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    assert_int_equal(p.total_memory, (int64_t)pages * page);
    assert_int_equal(p.compute_major, 0);
    assert_int_equal(p.compute_minor, 0);
    assert_true(p.cores >= 1);
    assert_true(p.cores <= sysconf(_SC_NPROCESSORS_CONF));
    /* the model name of /proc/cpuinfo, where there is one */
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10) != 0) continue;
            assert_non_null(strstr(line, p.name));
            break;
        }
        fclose(f);
    }
    tt_assert_fails(NULL, todre_device_get_props("cpu", 1, &p), TODRE_ERR_INVALID_ARGUMENT,
                    "device");
}

/* Child mode: print the arch in use and one selection. */
static int child_main(void)
{
    if (setup_data(NULL) != 0) return 2;
    todre_device_props p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    if (todre_device_get_props("cpu", 0, &p) != TODRE_OK) return 3;
    todre_context *ctx = NULL;
    if (todre_context_create("cpu", 0, &ctx) != TODRE_OK) return 4;
    todre_select_config *cfg = NULL;
    if (todre_select_config_create(&cfg) != TODRE_OK) return 5;
    todre_select_config_set_int(cfg, TODRE_SELECT_KEEP, K);
    int64_t out[K], shape[1] = {K};
    DLTensor o = todre_test_dl(out, tt_dl_dtype(TODRE_DTYPE_I64), 1, shape, NULL);
    int64_t xs[2] = {N, D};
    DLTensor x = todre_test_dl(x16, tt_dl_dtype(TODRE_DTYPE_F16), 2, xs, NULL);
    if (todre_select(ctx, cfg, &x, NULL, &o) != TODRE_OK) return 6;
    printf("%s", p.arch);
    for (int i = 0; i < K; i++) printf(" %lld", (long long)out[i]);
    printf("\n");
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
    teardown_data(NULL);
    return 0;
}

/* Run this program in child mode with TODRE_CPU_ISA = @p isa (NULL: unset);
 * its output line into @p buf. */
static void run_child(const char *isa, char *buf, size_t cap)
{
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 2, sizeof *env);
    assert_non_null(env);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "TODRE_CPU_ISA=", 14) != 0) env[m++] = environ[i];
    char var[64];
    if (isa) {
        snprintf(var, sizeof var, "TODRE_CPU_ISA=%s", isa);
        env[m++] = var;
    }
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    char self[] = "/proc/self/exe", mode[] = "--isa-child";
    char *argv[] = {self, mode, NULL};
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, self, &fa, NULL, argv, env), 0);
    close(fds[1]);
    size_t len = 0;
    ssize_t r;
    while (len + 1 < cap && (r = read(fds[0], buf + len, cap - 1 - len)) > 0) len += (size_t)r;
    buf[len] = '\0';
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child with TODRE_CPU_ISA=%s failed (status %d)", isa ? isa : "(unset)", status);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
}

static void isa_override(void **state)
{
    (void)state;
    char best[4096], got[4096], arch[64];
    run_child(NULL, best, sizeof best);
    assert_int_equal(sscanf(best, "%63s", arch), 1);
    int supported = isa_level(arch);
    const char *sel_best = strchr(best, ' ');
    assert_non_null(sel_best);
    static const char *caps[] = {"generic", "avx2", "avx512", "amx"};
    for (int c = 0; c < 4; c++) {
        run_child(caps[c], got, sizeof got);
        assert_int_equal(sscanf(got, "%63s", arch), 1);
        int want = c < supported ? c : supported;
        assert_int_equal(isa_level(arch), want);
        /* other kernels, same selection (this data has no near-ties) */
        assert_string_equal(strchr(got, ' '), sel_best);
    }
    /* "scalar" (0.1's name) is generic; anything unknown caps nothing */
    run_child("scalar", got, sizeof got);
    assert_int_equal(sscanf(got, "%63s", arch), 1);
    assert_string_equal(arch, "generic");
    run_child("bogus", got, sizeof got);
    assert_string_equal(got, best);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--isa-child") == 0) return child_main();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(alternating_contexts_agree),
        cmocka_unit_test(process_wide_counts_untouched),
        cmocka_unit_test(cpu_device_props),
        cmocka_unit_test(isa_override),
    };
    int rc = cmocka_run_group_tests(tests, setup_data, teardown_data);
    free(rl_q);
    free(rl_k);
    return rc;
}
