/* Concurrency: what the header promises about threads, exercised with 8
 * threads at once (and checked by ThreadSanitizer in its build: see
 * tests/robust/CMakeLists.txt and docs/testing.md).
 *
 *  - independent_handles: 8 threads, each with its own CPU context (thread
 *    counts 0, 1 and 2 mixed), selection configurations and relevance
 *    handles, run every stage-1 and stage-2 path at the same time on shared
 *    read-only inputs; every result is bit for bit the serial one.
 *  - registry_first_use: the registry, the CPU's instruction-set choice and
 *    the device properties are built on first use. 16 threads make that first
 *    use at the same moment (todre_backend_count, todre_backend_get_props,
 *    todre_device_get_props, todre_context_create("auto") and an unknown
 *    and an unavailable name) in a fresh process, so that nothing is built
 *    yet: this program re-executed with --registry-race, with a backend
 *    module (tests/robust) on $TODRE_BACKEND_PATH. Every thread must see the
 *    same registry. Repeated in 3 processes.
 *  - thread_local_errors: 8 threads fail at the same time, each with its
 *    own argument value; each thread's todre_last_error() and its context's
 *    message name its own value, and a success on one thread clears only
 *    that thread's message. */
#define _GNU_SOURCE
#define TODRE_EXPERIMENTAL_API
#include "todre_test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "robust_util.h"

#define NTHREADS 8
#define ROUNDS 2

/* ---- shared read-only inputs ---------------------------------------------------------- */

#define N 300
#define D 32
#define K 24
#define RL 8
#define RH 4
#define RHKV 2
#define RK 96
#define RDH 16
#define PROBE 7 /* floor(7 * RL / 8) */

static float emb32[N * D], cls32[N];
static uint16_t emb16[N * D];
static float attn[RH * RK * RK], qv[RH * RK * RDH], kv[RHKV * RK * RDH];

static void make_inputs(void)
{
    tt_fill_clustered(emb32, N, D, D, 6, 0.4, 3);
    tt_to_f16(emb16, emb32, (size_t)N * D);
    tt_rng r = {17};
    for (int i = 0; i < N; i++) cls32[i] = (float)tt_rng_uniform(&r);
    for (int s = 0; s < RH; s++)
        for (int i = 0; i < RK; i++) {
            float *row = attn + ((size_t)s * RK + i) * RK;
            double sum = 0;
            for (int j = 0; j < RK; j++) {
                row[j] = j <= i ? (float)(0.05 + tt_rng_uniform(&r)) : 0.0f;
                sum += row[j];
            }
            for (int j = 0; j < RK; j++) row[j] = (float)(row[j] / sum);
        }
    tt_fill_clustered(qv, RH * RK, RDH, RDH, 4, 0.6, 31);
    tt_fill_clustered(kv, RHKV * RK, RDH, RDH, 4, 0.6, 32);
}

/* ---- the work of one round ---------------------------------------------------------- */

struct sel_mode {
    todre_objective obj;
    todre_pivot piv;
    todre_dtype dt;
    int64_t strategy;
    int cls;
};

static const struct sel_mode modes[] = {
    {TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_CENTER, TODRE_DTYPE_F32, 1, 0},
    {TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_CLS, TODRE_DTYPE_F16, 2, 1},
    {TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_RANDOM, TODRE_DTYPE_F32, 2, 0},
    {TODRE_OBJECTIVE_MAX_MIN, TODRE_PIVOT_ISOLATED, TODRE_DTYPE_F16, 0, 0},
    {TODRE_OBJECTIVE_MAX_MIN, TODRE_PIVOT_FARTHEST, TODRE_DTYPE_F32, 1, 0},
    {TODRE_OBJECTIVE_CLS_TOPK, TODRE_PIVOT_AUTO, TODRE_DTYPE_F16, 0, 1},
};
#define NMODES (sizeof modes / sizeof modes[0])

struct results {
    int64_t sel[NMODES][2 * K];
    int64_t batch[2 * K], batch_off[4];
    double probs[2], qk[2];
    int32_t dec_probs, dec_qk;
};

/* Every call checked without cmocka (which is not thread-safe): the first
 * failure is recorded in *err. */
#define CHECK(call)                                                                          \
    do {                                                                                     \
        todre_status st_ = (call);                                                           \
        if (st_ != TODRE_OK) {                                                               \
            snprintf(err, errcap, "%s:%d: %s returned %s: %s", __FILE__, __LINE__, #call,   \
                     todre_status_string(st_), todre_last_error());                         \
            return 0;                                                                        \
        }                                                                                    \
    } while (0)

static DLTensor host(void *data, todre_dtype dt, int ndim, int64_t *shape)
{
    return todre_test_dl(data, tt_dl_dtype(dt), ndim, shape, NULL);
}

/* One round of every path on @p ctx with handles of this thread. */
static int run_round(todre_context *ctx, struct results *r, char *err, size_t errcap)
{
    memset(r, 0, sizeof *r);
    int64_t es[2] = {N, D}, cs[1] = {N}, os[2] = {2, K};
    for (size_t m = 0; m < NMODES; m++) {
        todre_select_config *cfg = NULL;
        CHECK(todre_select_config_create(&cfg));
        CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_OBJECTIVE, modes[m].obj));
        CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_PIVOT, modes[m].piv));
        CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_KEEP, K));
        CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_SEED, 4242));
        CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_ORDER, TODRE_ORDER_BOTH));
        CHECK(todre_context_set_int(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, modes[m].strategy));
        void *data = modes[m].dt == TODRE_DTYPE_F16 ? (void *)emb16 : (void *)emb32;
        DLTensor e = host(data, modes[m].dt, 2, es), c = host(cls32, TODRE_DTYPE_F32, 1, cs);
        DLTensor o = host(r->sel[m], TODRE_DTYPE_I64, 2, os);
        todre_status st = todre_select(ctx, cfg, &e, modes[m].cls ? &c : NULL, &o);
        todre_select_config_destroy(cfg);
        CHECK(st);
    }
    /* a ragged batch: sets of 50, 150 and 100 rows, k from the ratio */
    todre_select_config *cfg = NULL;
    CHECK(todre_select_config_create(&cfg));
    CHECK(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 0.08));
    int64_t offsets[4] = {0, 50, 200, N}, ofs[1] = {4}, bs[1] = {24}; /* 4 + 12 + 8 */
    DLTensor e = host(emb32, TODRE_DTYPE_F32, 2, es), off = host(offsets, TODRE_DTYPE_I64, 1, ofs);
    DLTensor o = host(r->batch, TODRE_DTYPE_I64, 1, bs), oo = host(r->batch_off, TODRE_DTYPE_I64, 1, ofs);
    todre_status st = todre_select_batch(ctx, cfg, &e, NULL, &off, NULL, &o, &oo);
    todre_select_config_destroy(cfg);
    CHECK(st);

    /* stage 2, both paths, each on its own handle: [8 system | 64 visual | 24 text] */
    for (int path = 0; path < 2; path++) {
        todre_relevance *rel = NULL;
        CHECK(todre_relevance_create(RL, 1, &rel));
        st = todre_relevance_set_layout(rel, 8, 64, 24);
        int64_t as[3] = {RH, RK, RK}, qs[3] = {RH, RK, RDH}, ks[3] = {RHKV, RK, RDH}, ds[1] = {1};
        int32_t *dec = path ? &r->dec_qk : &r->dec_probs;
        double *ratios = path ? r->qk : r->probs;
        DLTensor a = host(attn, TODRE_DTYPE_F32, 3, as), q = host(qv, TODRE_DTYPE_F32, 3, qs);
        DLTensor k = host(kv, TODRE_DTYPE_F32, 3, ks), d = host(dec, TODRE_DTYPE_I32, 1, ds);
        if (st == TODRE_OK)
            st = path ? todre_relevance_observe_qk(ctx, rel, PROBE, &q, &k, 0.0, &d)
                      : todre_relevance_observe_probs(ctx, rel, PROBE, &a, &d);
        if (st == TODRE_OK) st = todre_relevance_ratios(rel, 0, PROBE, &ratios[0], &ratios[1]);
        todre_relevance_destroy(rel);
        CHECK(st);
    }
    return 1;
}

/* ---- independent handles ---------------------------------------------------------------- */

static struct results serial;
static pthread_barrier_t start;

struct worker {
    int id;
    int ok;
    char err[512];
    long mismatches;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char *err = w->err;
    size_t errcap = sizeof w->err;
    todre_context *ctx = NULL;
    todre_status st = todre_context_create("cpu", 0, &ctx);
    pthread_barrier_wait(&start);
    if (st != TODRE_OK) {
        snprintf(err, errcap, "todre_context_create: %s", todre_last_error());
        return NULL;
    }
    /* thread counts 0 (every core), 1, 2 */
    st = todre_context_set_int(ctx, TODRE_CONTEXT_NUM_THREADS, w->id % 3);
    for (int round = 0; st == TODRE_OK && round < ROUNDS; round++) {
        struct results r;
        if (!run_round(ctx, &r, err, errcap)) break;
        if (memcmp(&r, &serial, sizeof r) != 0) w->mismatches++;
        if (round == ROUNDS - 1) w->ok = 1;
    }
    todre_context_destroy(ctx);
    return NULL;
}

static void independent_handles(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    char err[512] = "";
    if (!run_round(ctx, &serial, err, sizeof err)) fail_msg("serial run: %s", err);
    todre_context_destroy(ctx);
    /* the data is not degenerate: kept sets differ between objectives */
    assert_memory_not_equal(serial.sel[0], serial.sel[3], sizeof serial.sel[0]);
    assert_true(serial.probs[0] > 0 && serial.qk[0] > 0);

    struct worker w[NTHREADS];
    pthread_t th[NTHREADS];
    assert_int_equal(pthread_barrier_init(&start, NULL, NTHREADS), 0);
    for (int i = 0; i < NTHREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].id = i;
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < NTHREADS; i++) {
        if (!w[i].ok) fail_msg("thread %d: %s", i, w[i].err);
        if (w[i].mismatches)
            fail_msg("thread %d (%d threads per call): %ld of %d rounds differ from the serial "
                     "results", i, i % 3, w[i].mismatches, ROUNDS);
    }
}

/* ---- the registry on first use, in a fresh process ---------------------------------------- */

#define RACERS 16

struct racer {
    int id;
    int count;
    const char *names[8];
    int available[8];
    char arch[64];
    int ok;
    char err[512];
};

static pthread_barrier_t race_start;

static void *racer_main(void *arg)
{
    struct racer *r = arg;
    char *err = r->err;
    size_t errcap = sizeof r->err;
    pthread_barrier_wait(&race_start);
    /* each thread makes a different call first */
    todre_context *ctx = NULL;
    todre_device_props dp;
    memset(&dp, 0, sizeof dp);
    dp.struct_size = sizeof dp;
    switch (r->id % 4) {
    case 0: {
        int n = 0;
        if (todre_backend_count(&n) != TODRE_OK) goto fail;
        break;
    }
    case 1: {
        todre_backend_props p;
        memset(&p, 0, sizeof p);
        p.struct_size = sizeof p;
        if (todre_backend_get_props(0, &p) != TODRE_OK) goto fail;
        break;
    }
    case 2:
        if (todre_device_get_props("cpu", 0, &dp) != TODRE_OK) goto fail;
        break;
    default:
        if (todre_context_create("auto", 0, &ctx) != TODRE_OK) goto fail;
        todre_context_destroy(ctx);
        ctx = NULL;
        break;
    }
    /* then all of them */
    if (todre_backend_count(&r->count) != TODRE_OK) goto fail;
    for (int i = 0; i < r->count && i < 8; i++) {
        todre_backend_props p;
        memset(&p, 0, sizeof p);
        p.struct_size = sizeof p;
        if (todre_backend_get_props(i, &p) != TODRE_OK) goto fail;
        r->names[i] = p.name;
        r->available[i] = p.available;
    }
    if (todre_device_get_props("cpu", 0, &dp) != TODRE_OK) goto fail;
    snprintf(r->arch, sizeof r->arch, "%s", dp.arch);
    if (todre_context_create("auto", 0, &ctx) != TODRE_OK) goto fail;
    if (strcmp(todre_context_backend(ctx), "cpu") != 0) {
        snprintf(err, errcap, "\"auto\" gave %s", todre_context_backend(ctx));
        todre_context_destroy(ctx);
        return NULL;
    }
    float rows[3 * 2] = {1, 0, 0, 1, 1, 1};
    int64_t out[2], es[2] = {3, 2}, os[1] = {2};
    DLTensor e = host(rows, TODRE_DTYPE_F32, 2, es), o = host(out, TODRE_DTYPE_I64, 1, os);
    todre_select_config *cfg = NULL;
    todre_status st = todre_select_config_create(&cfg);
    if (st == TODRE_OK) st = todre_select_config_set_int(cfg, TODRE_SELECT_KEEP, 2);
    if (st == TODRE_OK) st = todre_select(ctx, cfg, &e, NULL, &o);
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
    if (st != TODRE_OK) goto fail;
    /* an unavailable and an unknown backend: errors name them */
    if (todre_context_create("robustfake", 0, &ctx) != TODRE_ERR_BACKEND_UNAVAILABLE ||
        !strstr(todre_last_error(), "no device by design")) {
        snprintf(err, errcap, "robustfake: \"%s\"", todre_last_error());
        return NULL;
    }
    if (todre_context_create("nosuch", 0, &ctx) != TODRE_ERR_BACKEND_UNAVAILABLE ||
        !strstr(todre_last_error(), "\"nosuch\" is not registered")) {
        snprintf(err, errcap, "nosuch: \"%s\"", todre_last_error());
        return NULL;
    }
    r->ok = 1;
    return NULL;
fail:
    snprintf(err, errcap, "failed: %s", todre_last_error());
    return NULL;
}

static int registry_race_child(void)
{
    struct racer r[RACERS];
    pthread_t th[RACERS];
    if (pthread_barrier_init(&race_start, NULL, RACERS) != 0) return 2;
    for (int i = 0; i < RACERS; i++) {
        memset(&r[i], 0, sizeof r[i]);
        r[i].id = i;
        if (pthread_create(&th[i], NULL, racer_main, &r[i]) != 0) return 2;
    }
    for (int i = 0; i < RACERS; i++) pthread_join(th[i], NULL);
    int bad = 0;
    for (int i = 0; i < RACERS; i++) {
        if (!r[i].ok) {
            printf("thread %d: %s\n", i, r[i].err);
            bad = 1;
            continue;
        }
        /* one registry: the same static strings in every thread */
        if (r[i].count != r[0].count || r[i].count < 2 || strcmp(r[i].arch, r[0].arch) != 0)
            bad = 1;
        for (int j = 0; j < r[i].count && j < 8; j++)
            if (r[i].names[j] != r[0].names[j] || r[i].available[j] != r[0].available[j])
                bad = 1;
    }
    printf("count %d:", r[0].count);
    for (int j = 0; j < r[0].count && j < 8; j++)
        printf(" %s(%d)", r[0].names[j] ? r[0].names[j] : "?", r[0].available[j]);
    printf(" arch %s\n", r[0].arch);
    return bad ? 1 : 0;
}

static void registry_first_use(void **state)
{
    (void)state;
    const char *bin = getenv("TODRE_BINARY_DIR");
    char env[4200], out[8192], why[64];
    snprintf(env, sizeof env, "TODRE_BACKEND_PATH=%s/tests/robust", bin ? bin : ".");
    const char *args[] = {"--registry-race", NULL}, *envs[] = {env, NULL};
    for (int run = 0; run < 3; run++) {
        int status = rb_run_self(args, envs, out, sizeof out);
        if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("registry race (process %d) %s:\n%s", run,
                     rb_status_text(status, why, sizeof why), out);
        /* cpu, then the module (unavailable) */
        if (!strstr(out, "count 2: cpu(1) robustfake(0)"))
            fail_msg("registry race: unexpected registry: %s", out);
    }
    print_message("  registry first use by %d threads at once, 3 processes: %s", RACERS, out);
}

/* ---- thread-local error messages ------------------------------------------------------------ */

#define ERR_ROUNDS 50

static pthread_barrier_t step;

struct err_worker {
    int id;
    char err[512];
};

static void *err_main(void *arg)
{
    struct err_worker *w = arg;
    todre_context *ctx = NULL;
    todre_select_config *cfg = NULL;
    todre_status st = todre_context_create("cpu", 0, &ctx);
    if (st == TODRE_OK) st = todre_select_config_create(&cfg);
    char want_ctx[32], want_n[32];
    snprintf(want_ctx, sizeof want_ctx, "%d", 2000 + w->id);
    snprintf(want_n, sizeof want_n, "n: %d", -(100 + w->id));
    for (int round = 0; round < ERR_ROUNDS; round++) {
        /* 1: every thread fails with its own value, on its context */
        todre_status s1 = st == TODRE_OK
                              ? todre_context_set_int(ctx, TODRE_CONTEXT_NUM_THREADS, 2000 + w->id)
                              : st;
        pthread_barrier_wait(&step);
        if (!w->err[0] && (s1 != TODRE_ERR_INVALID_ARGUMENT || !strstr(todre_last_error(), want_ctx) ||
                           !strstr(todre_context_last_error(ctx), want_ctx)))
            snprintf(w->err, sizeof w->err, "round %d: thread %d sees \"%s\" (context: \"%s\")",
                     round, w->id, todre_last_error(), ctx ? todre_context_last_error(ctx) : "");
        pthread_barrier_wait(&step);
        /* 2: a failure without a context: only the thread-local message */
        int64_t k = -1;
        todre_status s2 = st == TODRE_OK ? todre_select_keep_count(cfg, -(100 + w->id), &k) : st;
        pthread_barrier_wait(&step);
        if (!w->err[0] && (s2 != TODRE_ERR_INVALID_ARGUMENT || !strstr(todre_last_error(), want_n) ||
                           k != -1 || !strstr(todre_context_last_error(ctx), want_ctx)))
            snprintf(w->err, sizeof w->err, "round %d: thread %d sees \"%s\" (context: \"%s\")",
                     round, w->id, todre_last_error(), ctx ? todre_context_last_error(ctx) : "");
        pthread_barrier_wait(&step);
        /* 3: even threads succeed: their messages clear, odd threads keep theirs */
        if (w->id % 2 == 0 && st == TODRE_OK) {
            int64_t v;
            (void)todre_context_get_int(ctx, TODRE_CONTEXT_NUM_THREADS, &v);
        }
        pthread_barrier_wait(&step);
        int cleared = todre_last_error()[0] == '\0';
        if (!w->err[0] && cleared != (w->id % 2 == 0))
            snprintf(w->err, sizeof w->err, "round %d: thread %d: message \"%s\" after %s", round,
                     w->id, todre_last_error(), w->id % 2 ? "its failure" : "a success");
        pthread_barrier_wait(&step);
    }
    if (st != TODRE_OK) snprintf(w->err, sizeof w->err, "setup: %s", todre_last_error());
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
    return NULL;
}

static void thread_local_errors(void **state)
{
    (void)state;
    struct err_worker w[NTHREADS];
    pthread_t th[NTHREADS];
    assert_int_equal(pthread_barrier_init(&step, NULL, NTHREADS), 0);
    for (int i = 0; i < NTHREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].id = i;
        assert_int_equal(pthread_create(&th[i], NULL, err_main, &w[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&step);
    for (int i = 0; i < NTHREADS; i++)
        if (w[i].err[0]) fail_msg("%s", w[i].err);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--registry-race") == 0) return registry_race_child();
    make_inputs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(registry_first_use),
        cmocka_unit_test(independent_handles),
        cmocka_unit_test(thread_local_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
