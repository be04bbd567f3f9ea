/* Stage-1 timing of libtodre alone (no Python in the process):
 *
 *   bench_select [n d k dtype strategy reps threads objective pivot limit]
 *
 * defaults 2880 4096 288 f16 auto 7 0 max-sum cls 0; dtype f32|f16|bf16,
 * strategy auto|gemv|gram|rows, objective max-sum|max-min|cls-topk, pivot
 * auto|cls|center|farthest|random|isolated, limit = workspace limit in bytes
 * (0: the default). Prints the median and minimum of `reps` timed calls
 * (after one warm-up call that sizes the workspace), the median process CPU
 * time per call (on a shared machine CPU time divided by the threads
 * estimates the time an unloaded machine takes; OpenMP threads that wait
 * spinning count too), and the first selected indices, so runs can be
 * compared. Data: tokens
 * around 48 centres plus noise and a shared offset (deterministic). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TODRE_EXPERIMENTAL_API /* TODRE_CONTEXT_EXP_SELECT_STRATEGY, _ROWS_MADE */
#include "half.h"
#include "todre/todre.h"

enum { DT_F32, DT_F16, DT_BF16 }; /* indexes dtypes[] and DL_DTYPES[] */
static const DLDataType DL_DTYPES[] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}};

/* A compact host DLTensor view. */
static DLTensor host_tensor(void *data, DLDataType dtype, int ndim, int64_t *shape)
{
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.ndim = ndim;
    t.dtype = dtype;
    t.shape = shape;
    return t;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng_state = 0x1234567u;
static double uniform(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}
static float gauss(void)
{
    /* sum of 4 uniforms: cheap, roughly normal, enough for timing data */
    return (float)((uniform() + uniform() + uniform() + uniform() - 2.0) * 1.732);
}

static int lookup(const char *s, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (strcmp(s, names[i]) == 0) return i;
    fprintf(stderr, "unknown value '%s'\n", s);
    exit(2);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void make_data(int64_t n, int64_t d, int dtype, void *emb, float *cls)
{
    float *centres = malloc((size_t)48 * d * sizeof *centres);
    float *offset = malloc((size_t)d * sizeof *offset);
    for (int64_t i = 0; i < 48 * d; i++) centres[i] = gauss();
    for (int64_t j = 0; j < d; j++) offset[j] = 0.8f * gauss();
    for (int64_t i = 0; i < n; i++) {
        const float *c = centres + (int64_t)(uniform() * 48) * d;
        for (int64_t j = 0; j < d; j++) {
            float v = c[j] + 0.6f * gauss() + offset[j];
            if (dtype == DT_F32) ((float *)emb)[i * d + j] = v;
            else if (dtype == DT_F16) ((uint16_t *)emb)[i * d + j] = todre_f32_to_f16(v);
            else ((uint16_t *)emb)[i * d + j] = todre_f32_to_bf16(v);
        }
        cls[i] = (float)uniform();
    }
    free(centres);
    free(offset);
}

#define CHECK(call)                                                                   \
    do {                                                                              \
        todre_status st_ = (call);                                                    \
        if (st_ != TODRE_OK) {                                                        \
            fprintf(stderr, "%s: %s (%s)\n", #call, todre_status_string(st_),         \
                    todre_last_error());                                              \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

int main(int argc, char **argv)
{
    static const char *const dtypes[] = {"f32", "f16", "bf16"};
    static const char *const strategies[] = {"auto", "gemv", "gram", "rows"};
    static const char *const objectives[] = {"max-sum", "max-min", "cls-topk"};
    static const char *const pivots[] = {"auto", "cls", "center", "farthest", "random", "isolated"};
    int64_t n = argc > 1 ? atoll(argv[1]) : 2880;
    int64_t d = argc > 2 ? atoll(argv[2]) : 4096;
    int64_t k = argc > 3 ? atoll(argv[3]) : 288;
    int dtype = argc > 4 ? lookup(argv[4], dtypes, 3) : DT_F16;
    int strategy = argc > 5 ? lookup(argv[5], strategies, 4) : 0;
    int reps = argc > 6 ? atoi(argv[6]) : 7;
    int threads = argc > 7 ? atoi(argv[7]) : 0;
    int objective = argc > 8 ? lookup(argv[8], objectives, 3) : 0;
    int pivot = argc > 9 ? lookup(argv[9], pivots, 6) : 1;
    int64_t limit = argc > 10 ? atoll(argv[10]) : 0;
    if (n < 1 || d < 1 || k < 1 || k > n || reps < 1) {
        fprintf(stderr, "bad sizes\n");
        return 2;
    }

    size_t esz = dtype == DT_F32 ? 4 : 2;
    void *emb = malloc((size_t)n * d * esz);
    float *cls = malloc((size_t)n * sizeof *cls);
    int64_t *out = malloc((size_t)k * sizeof *out);
    double *times = malloc((size_t)reps * sizeof *times), *cpus = malloc((size_t)reps * sizeof *cpus);
    if (!emb || !cls || !out || !times || !cpus) return 1;
    make_data(n, d, dtype, emb, cls);

    todre_context *ctx;
    todre_select_config *cfg;
    int64_t eshape[2] = {n, d}, kshape[1] = {k};
    CHECK(todre_context_create("cpu", 0, &ctx));
    CHECK(todre_context_set_int(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, strategy));
    CHECK(todre_context_set_int(ctx, TODRE_CONTEXT_NUM_THREADS, threads));
    if (limit > 0) CHECK(todre_context_set_int(ctx, TODRE_CONTEXT_WORKSPACE_LIMIT, limit));
    CHECK(todre_select_config_create(&cfg));
    CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_OBJECTIVE, objective));
    CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_PIVOT, pivot));
    CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_KEEP, k));
    CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_ORDER, TODRE_ORDER_SELECTION));
    DLTensor te = host_tensor(emb, DL_DTYPES[dtype], 2, eshape);
    DLTensor tc = host_tensor(cls, DL_DTYPES[DT_F32], 1, eshape); /* [n] */
    DLTensor to = host_tensor(out, (DLDataType){kDLInt, 64, 1}, 1, kshape);

    CHECK(todre_select(ctx, cfg, &te, &tc, &to)); /* warm-up: sizes the workspace */
    for (int r = 0; r < reps; r++) {
        double t0 = now_s(), c0 = cpu_s();
        CHECK(todre_select(ctx, cfg, &te, &tc, &to));
        times[r] = now_s() - t0;
        cpus[r] = cpu_s() - c0;
    }
    qsort(times, (size_t)reps, sizeof *times, cmp_double);
    qsort(cpus, (size_t)reps, sizeof *cpus, cmp_double);
    int64_t made = 0; /* Gram rows the last call made under ROWS: its speculation */
    CHECK(todre_context_get_int(ctx, TODRE_CONTEXT_EXP_SELECT_ROWS_MADE, &made));
    printf("n=%lld d=%lld k=%lld %s %s %s/%s threads=%d: median %.2f ms, min %.2f ms, "
           "cpu %.2f ms; rows made %lld; sel[0..4] =",
           (long long)n, (long long)d, (long long)k, dtypes[dtype], strategies[strategy],
           objectives[objective], pivots[pivot], threads, 1e3 * times[reps / 2], 1e3 * times[0],
           1e3 * cpus[reps / 2], (long long)made);
    for (int64_t i = 0; i < k && i < 5; i++) printf(" %lld", (long long)out[i]);
    printf("\n");

    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
    free(emb);
    free(cls);
    free(out);
    free(times);
    free(cpus);
    return 0;
}
