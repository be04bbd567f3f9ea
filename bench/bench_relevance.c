/* Stage-2 cost next to one attention layer, in one process (no Python):
 *
 *   bench_relevance [K n_text n_system H H_kv dh dtype reps layout threads]
 *
 * defaults 600 40 35 32 32 128 f16 7 std 0; threads 0 = all cores, else the
 * count used by every measurement; dtype f32|f16|bf16; layout std
 * ([system | visual | text]) or textfirst ([system | text/2 | visual |
 * text/2], where visual queries also need a softmax). Full prefill (Q = K).
 * Measures, median and minimum of `reps` calls after one warm-up call:
 *   attn   one causal attention layer with OpenBLAS, f32: per head
 *          S = scale * Q K^T (dense K x K sgemm, as eager attention does),
 *          causal row softmax, O = P V;
 *   probs  todre_relevance_observe_probs on the [1, H, K, K] probabilities;
 *   qk     todre_relevance_observe_qk on q [1, H, K, dh], k [1, H_kv, K, dh].
 * Memory per path: the input it needs and the heap the library allocates on
 * its first call in a fresh context (mallinfo2 difference: the workspace).
 * Output: one JSON object per line, for bench_relevance.py. */
#define _GNU_SOURCE
#include <malloc.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#include <omp.h>

#include "half.h"
#include "todre/todre.h"

enum bench_dtype { DT_F32, DT_F16, DT_BF16 };

struct cfg {
    int64_t K, n_text, n_system, H, Hkv, dh, reps, threads;
    enum bench_dtype dtype;
    int textfirst;
};

static DLDataType dl_dtype(enum bench_dtype dt)
{
    DLDataType t = {kDLFloat, dt == DT_F32 ? 32 : 16, 1};
    if (dt == DT_BF16) t.code = kDLBfloat;
    return t;
}

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

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float gauss(void)
{
    double s = 0;
    for (int i = 0; i < 4; i++) {
        rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
        s += (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
    }
    return (float)((s - 2.0) * 1.732);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(const char *what)
{
    fprintf(stderr, "bench_relevance: %s: %s\n", what, todre_last_error());
    exit(1);
}

static size_t esize(enum bench_dtype dt) { return dt == DT_F32 ? 4 : 2; }

static void *convert(const float *x, size_t n, enum bench_dtype dt)
{
    void *out = malloc(n * esize(dt));
    if (!out) die("out of memory");
    for (size_t i = 0; i < n; i++) {
        if (dt == DT_F32) ((float *)out)[i] = x[i];
        else if (dt == DT_F16) ((uint16_t *)out)[i] = todre_f32_to_f16(x[i]);
        else ((uint16_t *)out)[i] = todre_f32_to_bf16(x[i]);
    }
    return out;
}

/* Causal softmax of one [K, K] score block in place. */
static void causal_softmax(float *s, int64_t K)
{
    for (int64_t i = 0; i < K; i++) {
        float *row = s + i * K, m = row[0], sum = 0.0f;
        for (int64_t j = 1; j <= i; j++) m = row[j] > m ? row[j] : m;
        for (int64_t j = 0; j <= i; j++) sum += row[j] = expf(row[j] - m);
        float inv = 1.0f / sum;
        for (int64_t j = 0; j <= i; j++) row[j] *= inv;
        for (int64_t j = i + 1; j < K; j++) row[j] = 0.0f;
    }
}

/* One attention layer: all heads, f32, heads in parallel (OpenMP), each
 * head's sgemm single-threaded (OpenBLAS's own threads would compete with
 * OpenMP's). scores: one [K, K] buffer per thread. If probs != NULL, the
 * probabilities of every head are kept there ([H, K, K]). */
static void attention(const struct cfg *c, const float *q, const float *k, const float *v,
                      float *scores, float *out, float *probs)
{
    const int64_t K = c->K, dh = c->dh, G = c->H / c->Hkv;
    const float scale = 1.0f / sqrtf((float)dh);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t h = 0; h < c->H; h++) {
        const float *qh = q + h * K * dh, *kh = k + (h / G) * K * dh, *vh = v + (h / G) * K * dh;
        float *s = probs ? probs + h * K * K : scores + (size_t)omp_get_thread_num() * (size_t)(K * K);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)K, (int)K, (int)dh, scale, qh,
                    (int)dh, kh, (int)dh, 0.0f, s, (int)K);
        causal_softmax(s, K);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)K, (int)dh, (int)K, 1.0f, s,
                    (int)K, vh, (int)dh, 0.0f, out + h * K * dh, (int)dh);
    }
}

static size_t heap_in_use(void)
{
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

struct timing {
    double median_ms, min_ms;
};

static struct timing summarize(double *t, int64_t n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    struct timing r = {1e3 * (n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2])), 1e3 * t[0]};
    return r;
}

static uint8_t *make_types(const struct cfg *c)
{
    uint8_t *t = malloc((size_t)c->K);
    int64_t n_vis = c->K - c->n_text - c->n_system, first_text = c->textfirst ? c->n_text / 2 : 0;
    for (int64_t j = 0; j < c->K; j++) {
        int64_t p = j - c->n_system;
        t[j] = p < 0 ? TODRE_TOKEN_SYSTEM
               : p < first_text ? TODRE_TOKEN_TEXT
               : p < first_text + n_vis ? TODRE_TOKEN_VISUAL : TODRE_TOKEN_TEXT;
    }
    return t;
}

/* Time one stage-2 path (qk != 0: observe_qk) in a fresh context; report
 * the heap its first call allocates. */
static void bench_path(const struct cfg *c, int qk, const DLTensor *a, const DLTensor *b,
                       uint8_t *types, const char *dtname, size_t input_bytes)
{
    todre_context *ctx;
    todre_relevance *rel;
    if (todre_context_create("cpu", 0, &ctx)) die("context");
    if (todre_context_set_int(ctx, TODRE_CONTEXT_NUM_THREADS, c->threads)) die("threads");
    if (todre_relevance_create(1, 1, &rel)) die("relevance");
    int64_t shape[1] = {c->K};
    DLTensor tt = host_tensor(types, (DLDataType){kDLUInt, 8, 1}, 1, shape);
    if (todre_relevance_set_types(rel, &tt)) die("set_types");
    double *t = malloc(sizeof(double) * (size_t)c->reps), t2v = 0, v2t = 0;
    size_t ws = 0;
    for (int64_t r = -1; r < c->reps; r++) {
        if (todre_relevance_reset(rel, TODRE_RESET_STATE)) die("reset");
        size_t h0 = heap_in_use();
        double t0 = now_s();
        todre_status st = qk ? todre_relevance_observe_qk(ctx, rel, 0, a, b, 0.0, NULL)
                             : todre_relevance_observe_probs(ctx, rel, 0, a, NULL);
        double t1 = now_s();
        if (st) die(qk ? "observe_qk" : "observe_probs");
        if (r < 0) ws = heap_in_use() - h0;
        else t[r] = t1 - t0;
    }
    todre_relevance_ratios(rel, 0, 0, &t2v, &v2t);
    struct timing tm = summarize(t, c->reps);
    printf("{\"what\": \"%s\", \"dtype\": \"%s\", \"K\": %lld, \"H\": %lld, \"H_kv\": %lld, "
           "\"dh\": %lld, \"layout\": \"%s\", \"threads\": %d, \"median_ms\": %.4f, "
           "\"min_ms\": %.4f, \"reps\": %lld, \"input_bytes\": %zu, \"workspace_bytes\": %zu, "
           "\"alpha_t2v\": %.8f, \"alpha_v2t\": %.8f}\n",
           qk ? "qk" : "probs", dtname, (long long)c->K, (long long)c->H, (long long)c->Hkv,
           (long long)c->dh, c->textfirst ? "textfirst" : "std", omp_get_max_threads(), tm.median_ms, tm.min_ms,
           (long long)c->reps, input_bytes, ws, t2v, v2t);
    fflush(stdout);
    free(t);
    todre_relevance_destroy(rel);
    todre_context_destroy(ctx);
}

int main(int argc, char **argv)
{
    struct cfg c = {600, 40, 35, 32, 32, 128, 7, 0, DT_F16, 0};
    const char *dtname = "f16";
    int64_t *iv[] = {&c.K, &c.n_text, &c.n_system, &c.H, &c.Hkv, &c.dh};
    for (int i = 1; i < argc && i <= 6; i++) *iv[i - 1] = strtoll(argv[i], NULL, 10);
    if (argc > 7) {
        dtname = argv[7];
        c.dtype = !strcmp(dtname, "f32") ? DT_F32 : !strcmp(dtname, "bf16") ? DT_BF16 : DT_F16;
    }
    if (argc > 8) c.reps = strtoll(argv[8], NULL, 10);
    if (argc > 9) c.textfirst = !strcmp(argv[9], "textfirst");
    if (argc > 10) c.threads = strtoll(argv[10], NULL, 10);
    if (c.threads > 0) omp_set_num_threads((int)c.threads);
    if (c.K < c.n_text + c.n_system || c.H % c.Hkv || c.reps < 1) {
        fprintf(stderr, "bench_relevance: bad arguments\n");
        return 2;
    }
    const int64_t K = c.K, H = c.H, Hkv = c.Hkv, dh = c.dh;
    size_t nq = (size_t)(H * K * dh), nk = (size_t)(Hkv * K * dh), na = (size_t)(H * K * K);
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *out = malloc(nq * 4);
    openblas_set_num_threads(1);
    float *scores = malloc((size_t)(K * K) * 4 * (size_t)omp_get_max_threads()), *probs = malloc(na * 4);
    if (!q || !k || !v || !out || !scores || !probs) die("out of memory");
    for (size_t i = 0; i < nq; i++) q[i] = gauss();
    for (size_t i = 0; i < nk; i++) k[i] = gauss();
    for (size_t i = 0; i < nk; i++) v[i] = gauss();

    /* attention layer (a scores buffer per thread, reused across heads; the
     * probability path needs the probabilities of all heads at once) */
    double *t = malloc(sizeof(double) * (size_t)c.reps);
    for (int64_t r = -1; r < c.reps; r++) {
        double t0 = now_s();
        attention(&c, q, k, v, scores, out, NULL);
        if (r >= 0) t[r] = now_s() - t0;
    }
    struct timing tm = summarize(t, c.reps);
    printf("{\"what\": \"attn\", \"dtype\": \"f32\", \"K\": %lld, \"H\": %lld, \"H_kv\": %lld, "
           "\"dh\": %lld, \"threads\": %d, \"median_ms\": %.4f, \"min_ms\": %.4f, \"reps\": %lld, "
           "\"scores_bytes_per_head\": %lld, \"probs_bytes_all_heads\": %lld}\n",
           (long long)K, (long long)H, (long long)Hkv, (long long)dh, omp_get_max_threads(),
           tm.median_ms, tm.min_ms,
           (long long)c.reps, (long long)(K * K * 4), (long long)(H * K * K * 4));
    fflush(stdout);
    free(t);

    attention(&c, q, k, v, scores, out, probs);
    uint8_t *types = make_types(&c);
    void *pa = convert(probs, na, c.dtype);
    free(probs);
    int64_t sa[4] = {1, H, K, K}, sq[4] = {1, H, K, dh}, sk[4] = {1, Hkv, K, dh};
    DLTensor ta = host_tensor(pa, dl_dtype(c.dtype), 4, sa);
    bench_path(&c, 0, &ta, NULL, types, dtname, na * esize(c.dtype));
    free(pa);

    void *qd = convert(q, nq, c.dtype), *kd = convert(k, nk, c.dtype);
    DLTensor tq = host_tensor(qd, dl_dtype(c.dtype), 4, sq);
    DLTensor tk = host_tensor(kd, dl_dtype(c.dtype), 4, sk);
    bench_path(&c, 1, &tq, &tk, types, dtname, (nq + nk) * esize(c.dtype));
    free(qd);
    free(kd);
    free(types);
    free(q);
    free(k);
    free(v);
    free(out);
    free(scores);
    return 0;
}
