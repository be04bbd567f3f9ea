/* Concurrency on the device (docs/cuda.md, "Several threads"): 8 host
 * threads, each with its own context and, where the test links the CUDA
 * runtime, its own non-blocking stream, run stage-1 batches and stage-2
 * probes at the same time, several rounds each. Every result must equal,
 * bit for bit, what one context computed serially beforehand on the same
 * inputs: a race on a shared workspace, a stream that does not wait for the
 * previous call, or a host wait that returns early shows up as a difference.
 *
 * The worker threads do not call CMocka (its assertions are not thread-safe):
 * they record the first difference, and the main thread asserts after the
 * join. Exits 77 (skipped) where the registry has no available "cuda"
 * backend. */
#define _POSIX_C_SOURCE 200809L /* pthread_barrier_t */
#define TODRE_EXPERIMENTAL_API

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todre_test.h"

#ifdef TODRE_TEST_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

#define NTHREADS 8
#define ROUNDS 4
#define NSETS 4
#define D 256
#define H 8
#define HKV 2
#define DH 64
#define NSYS 8
#define NVIS 600
#define NTXT 40
#define K_ (NSYS + NVIS + NTXT)

/* One job per thread: a ragged f16 batch and one Q/K probe. */
struct job {
    int64_t off[NSETS + 1];
    uint16_t *emb; /* off[NSETS] x D, f16 */
    int64_t K;     /* kept in all */
    int64_t *want; /* [2, K]: selection order, then position order */
    int64_t want_off[NSETS + 1];
    uint16_t *q, *k; /* [H, K_, DH], [HKV, K_, DH], f16 */
    double want_ratio[2];
    /* written by the worker */
    char err[256];
};

static struct job JOBS[NTHREADS];

static void fail_job(struct job *j, const char *fmt, const char *what, const char *detail)
{
    if (j->err[0] == '\0') snprintf(j->err, sizeof j->err, fmt, what, detail);
}

static void job_make(struct job *j, int t)
{
    /* A LLaVA-NeXT image, and three ragged sets of another size per thread. */
    const int64_t n[NSETS] = {2880, 577 - 13 * t, 1200 + 31 * t, 64 + t};
    j->off[0] = 0;
    for (int b = 0; b < NSETS; b++) j->off[b + 1] = j->off[b] + n[b];
    int64_t N = j->off[NSETS];
    float *f = malloc(sizeof(float) * (size_t)(N * D));
    j->emb = malloc(sizeof(uint16_t) * (size_t)(N * D));
    assert_true(f && j->emb);
    tt_fill_clustered(f, N, D, D, 16, 0.5, 1000 + (uint64_t)t);
    tt_to_f16(j->emb, f, (size_t)(N * D));
    free(f);
    tt_rng r = {77 + (uint64_t)t};
    size_t qn = (size_t)H * K_ * DH, kn = (size_t)HKV * K_ * DH;
    j->q = malloc(2 * qn);
    j->k = malloc(2 * kn);
    assert_true(j->q && j->k);
    for (size_t x = 0; x < qn; x++) tt_store(j->q, TODRE_DTYPE_F16, x, tt_rng_normal(&r));
    for (size_t x = 0; x < kn; x++) tt_store(j->k, TODRE_DTYPE_F16, x, tt_rng_normal(&r));
    j->err[0] = '\0';
}

static void job_free(struct job *j)
{
    free(j->emb);
    free(j->want);
    free(j->q);
    free(j->k);
}

/* ---- device memory through the context ---------------------------------------------- */

static const DLTensor *bytes_on(tt_array *a, const void *p, size_t bytes, int dev)
{
    tt_array1(a, (void *)p, TODRE_DTYPE_U8, (int64_t)bytes);
    return dev ? tt_array_on(a, kDLCUDA, 0) : &a->dl;
}

static todre_status upload(todre_context *ctx, const void *src, size_t bytes, void **dst)
{
    todre_status st = todre_context_alloc(ctx, bytes, dst);
    if (st != TODRE_OK) return st;
    tt_array d, s;
    return todre_context_copy(ctx, bytes_on(&d, *dst, bytes, 1), bytes_on(&s, src, bytes, 0));
}

static todre_status download(todre_context *ctx, void *dst, const void *src, size_t bytes)
{
    tt_array d, s;
    return todre_context_copy(ctx, bytes_on(&d, dst, bytes, 0), bytes_on(&s, src, bytes, 1));
}

/* ---- one job on one context --------------------------------------------------------- */

struct result {
    int64_t *both; /* [2, K] */
    int64_t off[NSETS + 1];
    double ratio[2];
};

#define TRY(expr, what)                                                                    \
    do {                                                                                   \
        todre_status st_ = (expr);                                                         \
        if (st_ != TODRE_OK) {                                                             \
            snprintf(err, errlen, "%s: %s (%s)", what, todre_status_string(st_),            \
                     todre_context_last_error(ctx));                                       \
            goto out;                                                                      \
        }                                                                                  \
    } while (0)

/* Stage 1 (ratio 0.1, MAX_SUM, CENTER pivot) and the probe, as a runtime
 * would: inputs copied in, asynchronous selection, synchronize, copy out. */
static int run_job(todre_context *ctx, const struct job *j, int64_t K, struct result *r, char *err,
                   size_t errlen)
{
    int ok = 0;
    int64_t N = j->off[NSETS];
    void *emb = NULL, *out = NULL, *q = NULL, *k = NULL;
    todre_select_config *cfg = NULL;
    todre_relevance *rel = NULL;
    if (todre_select_config_create(&cfg) != TODRE_OK) {
        snprintf(err, errlen, "select_config_create failed");
        return 0;
    }
    TRY(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 0.1), "ratio");
    TRY(todre_select_config_set_int(cfg, TODRE_SELECT_ORDER, TODRE_ORDER_BOTH), "order");
    TRY(upload(ctx, j->emb, sizeof(uint16_t) * (size_t)(N * D), &emb), "embeddings upload");
    TRY(todre_context_alloc(ctx, sizeof(int64_t) * (size_t)(2 * K), &out), "out alloc");
    int64_t eshape[2] = {N, D}, oshape[2] = {2, K};
    tt_array emb_t, out_t, offs, ooffs;
    tt_array_init(&emb_t, emb, TODRE_DTYPE_F16, 2, eshape, NULL);
    tt_array_on(&emb_t, kDLCUDA, 0);
    tt_array_init(&out_t, out, TODRE_DTYPE_I64, 2, oshape, NULL);
    tt_array_on(&out_t, kDLCUDA, 0);
    tt_array1(&offs, (void *)j->off, TODRE_DTYPE_I64, NSETS + 1);
    tt_array1(&ooffs, r->off, TODRE_DTYPE_I64, NSETS + 1);
    TRY(todre_select_batch(ctx, cfg, &emb_t.dl, NULL, &offs.dl, NULL, &out_t.dl, &ooffs.dl),
        "select_batch");
    TRY(todre_context_synchronize(ctx), "synchronize");
    TRY(download(ctx, r->both, out, sizeof(int64_t) * (size_t)(2 * K)), "out download");

    TRY(upload(ctx, j->q, 2 * (size_t)H * K_ * DH, &q), "q upload");
    TRY(upload(ctx, j->k, 2 * (size_t)HKV * K_ * DH, &k), "k upload");
    if (todre_relevance_create(1, 1, &rel) != TODRE_OK) {
        snprintf(err, errlen, "relevance_create failed");
        goto out;
    }
    int64_t layer0 = 0;
    tt_array layers, qt, kt;
    if (todre_relevance_set_probe_layers(rel, tt_array1(&layers, &layer0, TODRE_DTYPE_I64, 1)) !=
            TODRE_OK ||
        todre_relevance_set_layout(rel, NSYS, NVIS, NTXT) != TODRE_OK) {
        snprintf(err, errlen, "relevance setup failed");
        goto out;
    }
    int64_t qshape[3] = {H, K_, DH}, kshape[3] = {HKV, K_, DH};
    tt_array_init(&qt, q, TODRE_DTYPE_F16, 3, qshape, NULL);
    tt_array_on(&qt, kDLCUDA, 0);
    tt_array_init(&kt, k, TODRE_DTYPE_F16, 3, kshape, NULL);
    tt_array_on(&kt, kDLCUDA, 0);
    TRY(todre_relevance_observe_qk(ctx, rel, 0, &qt.dl, &kt.dl, 0.0, NULL), "observe_qk");
    if (todre_relevance_ratios(rel, 0, 0, &r->ratio[0], &r->ratio[1]) != TODRE_OK) {
        snprintf(err, errlen, "relevance_ratios failed");
        goto out;
    }
    ok = 1;
out:
    todre_relevance_destroy(rel);
    if (k) (void)todre_context_free(ctx, k);
    if (q) (void)todre_context_free(ctx, q);
    if (out) (void)todre_context_free(ctx, out);
    if (emb) (void)todre_context_free(ctx, emb);
    todre_select_config_destroy(cfg);
    return ok;
}

/* ---- the threads ------------------------------------------------------------------------ */

static pthread_barrier_t START;

static void *worker(void *arg)
{
    struct job *j = arg;
    char err[256] = "";
    todre_context *ctx = NULL;
    struct result r;
    r.both = malloc(sizeof(int64_t) * (size_t)(2 * j->K));
#ifdef TODRE_TEST_HAVE_CUDART
    cudaStream_t stream = NULL;
#endif
    todre_status st = todre_context_create("cuda", 0, &ctx);
    if (st != TODRE_OK || !r.both) {
        fail_job(j, "%s%s", "context_create failed: ", todre_last_error());
        pthread_barrier_wait(&START);
        goto done;
    }
#ifdef TODRE_TEST_HAVE_CUDART
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
        todre_context_set_stream(ctx, (void *)stream) != TODRE_OK) {
        fail_job(j, "%s%s", "stream: ", todre_context_last_error(ctx));
        pthread_barrier_wait(&START);
        goto done;
    }
#endif
    pthread_barrier_wait(&START); /* all threads start their rounds together */
    for (int round = 0; round < ROUNDS && j->err[0] == '\0'; round++) {
        memset(r.both, 0xff, sizeof(int64_t) * (size_t)(2 * j->K));
        if (!run_job(ctx, j, j->K, &r, err, sizeof err)) {
            fail_job(j, "%s: %s", "call failed", err);
            break;
        }
        if (memcmp(r.off, j->want_off, sizeof r.off) != 0)
            fail_job(j, "%s%s", "out_offsets differ from the serial run", "");
        else if (memcmp(r.both, j->want, sizeof(int64_t) * (size_t)(2 * j->K)) != 0)
            fail_job(j, "%s%s", "kept indices differ from the serial run", "");
        else if (r.ratio[0] != j->want_ratio[0] || r.ratio[1] != j->want_ratio[1]) {
            char d[128];
            snprintf(d, sizeof d, " (%.17g, %.17g) vs (%.17g, %.17g)", r.ratio[0], r.ratio[1],
                     j->want_ratio[0], j->want_ratio[1]);
            fail_job(j, "%s%s", "ratios differ from the serial run", d);
        }
    }
done:
    if (ctx) {
#ifdef TODRE_TEST_HAVE_CUDART
        /* The stream must outlive its use by the context (docs/cuda.md,
         * "Stream lifetime"): destroy the context first. */
        todre_context_destroy(ctx);
        if (stream) (void)cudaStreamDestroy(stream);
#else
        todre_context_destroy(ctx);
#endif
    }
    free(r.both);
    return NULL;
}

static void test_threads_equal_serial(void **state)
{
    (void)state;
    /* Serial reference: one context, the jobs one after another. */
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create("cuda", 0, &ctx));
    todre_select_config *cfg = NULL;
    tt_assert_ok(todre_select_config_create(&cfg));
    tt_assert_ok(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 0.1));
    for (int t = 0; t < NTHREADS; t++) {
        struct job *j = &JOBS[t];
        job_make(j, t);
        j->K = 0;
        for (int b = 0; b < NSETS; b++) {
            int64_t k;
            tt_assert_ok(todre_select_keep_count(cfg, j->off[b + 1] - j->off[b], &k));
            j->K += k;
        }
        j->want = malloc(sizeof(int64_t) * (size_t)(2 * j->K));
        assert_non_null(j->want);
        struct result r = {.both = j->want};
        char err[256] = "";
        if (!run_job(ctx, j, j->K, &r, err, sizeof err)) fail_msg("serial job %d: %s", t, err);
        memcpy(j->want_off, r.off, sizeof r.off);
        memcpy(j->want_ratio, r.ratio, sizeof r.ratio);
        /* Sanity: a selection, not garbage (distinct, in range, sorted copy). */
        for (int b = 0; b < NSETS; b++) {
            int64_t n = j->off[b + 1] - j->off[b], k = r.off[b + 1] - r.off[b];
            tt_assert_position_order(j->want + r.off[b], j->want + j->K + r.off[b], k, n);
        }
    }
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);

    pthread_t th[NTHREADS];
    assert_int_equal(pthread_barrier_init(&START, NULL, NTHREADS), 0);
    for (int t = 0; t < NTHREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, worker, &JOBS[t]), 0);
    for (int t = 0; t < NTHREADS; t++) assert_int_equal(pthread_join(th[t], NULL), 0);
    pthread_barrier_destroy(&START);
    int bad = 0;
    for (int t = 0; t < NTHREADS; t++) {
        if (JOBS[t].err[0]) {
            print_error("thread %d: %s\n", t, JOBS[t].err);
            bad = 1;
        }
        job_free(&JOBS[t]);
    }
    if (bad) fail_msg("concurrent results differ from serial ones (above)");
}

int main(void)
{
    if (!tt_cuda_usable()) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_equal_serial),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
