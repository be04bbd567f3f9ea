/* Shared helpers of the CMocka test programs (see todre_test.h). */
#include "todre_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"

void tt_assert_fails_at(const todre_context *ctx, todre_status got, todre_status want,
                        const char *name, const char *expr, const char *file, int line)
{
    const char *msg = todre_last_error();
    if (got != want) {
        print_error("%s\n  returned %s, expected %s (message: \"%s\")\n", expr,
                       todre_status_string(got), todre_status_string(want), msg);
        _fail(file, line);
    }
    if (!strstr(msg, name)) {
        print_error("%s\n  message \"%s\" does not name \"%s\"\n", expr, msg, name);
        _fail(file, line);
    }
    if (ctx && !strstr(todre_context_last_error(ctx), name)) {
        print_error("%s\n  context message \"%s\" does not name \"%s\"\n", expr,
                       todre_context_last_error(ctx), name);
        _fail(file, line);
    }
}

void tt_assert_ok_at(todre_status got, const char *expr, const char *file, int line)
{
    if (got != TODRE_OK) {
        print_error("%s\n  returned %s: %s\n", expr, todre_status_string(got),
                       todre_last_error());
        _fail(file, line);
    }
}

/* ---- deterministic data -------------------------------------------------- */

uint64_t tt_rng_u64(tt_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double tt_rng_uniform(tt_rng *r) { return (double)(tt_rng_u64(r) >> 11) * 0x1.0p-53; }

double tt_rng_normal(tt_rng *r)
{
    double u1 = tt_rng_uniform(r), u2 = tt_rng_uniform(r);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

void tt_fill_clustered(float *x, int64_t n, int64_t d, int64_t ld, int clusters, double spread,
                       uint64_t seed)
{
    tt_rng r = {seed};
    double *centers = malloc(sizeof(double) * (size_t)(clusters * d));
    assert_non_null(centers);
    for (int64_t i = 0; i < clusters * d; i++) centers[i] = tt_rng_normal(&r);
    for (int64_t i = 0; i < n; i++) {
        int64_t c = (int64_t)(tt_rng_u64(&r) % (uint64_t)clusters);
        for (int64_t j = 0; j < d; j++)
            x[i * ld + j] = (float)(centers[c * d + j] + spread * tt_rng_normal(&r));
        for (int64_t j = d; j < ld; j++) x[i * ld + j] = NAN;
    }
    free(centers);
}

/* ---- dtype conversion ------------------------------------------------------- */

void tt_to_f16(uint16_t *dst, const float *src, size_t count)
{
    for (size_t i = 0; i < count; i++) dst[i] = todre_f32_to_f16(src[i]);
}

void tt_to_bf16(uint16_t *dst, const float *src, size_t count)
{
    for (size_t i = 0; i < count; i++) dst[i] = todre_f32_to_bf16(src[i]);
}

size_t tt_dtype_size(todre_dtype dt)
{
    switch (dt) {
    case TODRE_DTYPE_F32: case TODRE_DTYPE_I32: return 4;
    case TODRE_DTYPE_F16: case TODRE_DTYPE_BF16: return 2;
    case TODRE_DTYPE_I64: return 8;
    case TODRE_DTYPE_U8: return 1;
    }
    return 0;
}

double tt_load_f64(const void *data, todre_dtype dt, size_t i)
{
    switch (dt) {
    case TODRE_DTYPE_F32: return ((const float *)data)[i];
    case TODRE_DTYPE_F16: return todre_f16_to_f32(((const uint16_t *)data)[i]);
    case TODRE_DTYPE_BF16: return todre_bf16_to_f32(((const uint16_t *)data)[i]);
    default: fail_msg("tt_load_f64: not a float dtype (%d)", (int)dt);
    }
    return 0.0;
}

void tt_store(void *data, todre_dtype dt, size_t i, double v)
{
    switch (dt) {
    case TODRE_DTYPE_F32: ((float *)data)[i] = (float)v; return;
    case TODRE_DTYPE_F16: ((uint16_t *)data)[i] = todre_f32_to_f16((float)v); return;
    case TODRE_DTYPE_BF16: ((uint16_t *)data)[i] = todre_f32_to_bf16((float)v); return;
    default: fail_msg("tt_store: not a float dtype (%d)", (int)dt);
    }
}

/* ---- tensors ------------------------------------------------------------------ */

todre_tensor *tt_tensor(void *data, todre_dtype dt, int rank, const int64_t *shape,
                        const int64_t *strides)
{
    todre_tensor *t = NULL;
    tt_assert_ok(todre_tensor_create(data, dt, TODRE_DEVICE_HOST, 0, rank, shape, strides, &t));
    return t;
}

todre_tensor *tt_tensor1(void *data, todre_dtype dt, int64_t n)
{
    return tt_tensor(data, dt, 1, &n, NULL);
}

todre_tensor *tt_tensor2(void *data, todre_dtype dt, int64_t n, int64_t d, int64_t ld)
{
    int64_t shape[2] = {n, d}, strides[2] = {ld, 1};
    return tt_tensor(data, dt, 2, shape, strides);
}

/* ---- library handles ------------------------------------------------------------- */

todre_context *tt_cpu_context(void)
{
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create(TODRE_BACKEND_CPU, 0, &ctx));
    return ctx;
}

todre_select_config *tt_config(todre_objective obj, todre_pivot piv, int64_t keep,
                               todre_order order)
{
    todre_select_config *cfg = NULL;
    tt_assert_ok(todre_select_config_create(&cfg));
    tt_assert_ok(todre_select_config_set(cfg, TODRE_SELECT_OBJECTIVE, obj));
    tt_assert_ok(todre_select_config_set(cfg, TODRE_SELECT_PIVOT, piv));
    if (keep > 0) tt_assert_ok(todre_select_config_set(cfg, TODRE_SELECT_KEEP, keep));
    tt_assert_ok(todre_select_config_set(cfg, TODRE_SELECT_ORDER, order));
    return cfg;
}

todre_status tt_select_both(todre_context *ctx, todre_select_config *cfg, const todre_tensor *emb,
                            const todre_tensor *cls, int64_t k, int64_t *sel, int64_t *pos)
{
    int64_t *buf = malloc(sizeof(int64_t) * (size_t)(2 * k));
    assert_non_null(buf);
    for (int64_t i = 0; i < 2 * k; i++) buf[i] = -7; /* must all be overwritten */
    int64_t shape[2] = {2, k};
    todre_tensor *out = tt_tensor(buf, TODRE_DTYPE_I64, 2, shape, NULL);
    tt_assert_ok(todre_select_config_set(cfg, TODRE_SELECT_ORDER, TODRE_ORDER_BOTH));
    todre_status st = todre_select(ctx, cfg, emb, cls, out);
    memcpy(sel, buf, sizeof(int64_t) * (size_t)k);
    memcpy(pos, buf + k, sizeof(int64_t) * (size_t)k);
    todre_tensor_destroy(out);
    free(buf);
    return st;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void tt_assert_position_order(const int64_t *sel, const int64_t *pos, int64_t k, int64_t n)
{
    int64_t *sorted = malloc(sizeof(int64_t) * (size_t)k);
    assert_non_null(sorted);
    memcpy(sorted, sel, sizeof(int64_t) * (size_t)k);
    qsort(sorted, (size_t)k, sizeof(int64_t), cmp_i64);
    for (int64_t i = 0; i < k; i++) {
        assert_in_range(sorted[i], 0, n - 1);
        if (i > 0 && sorted[i] == sorted[i - 1]) fail_msg("index %lld selected twice", (long long)sorted[i]);
        if (pos[i] != sorted[i])
            fail_msg("position order [%lld] = %lld, expected %lld", (long long)i,
                     (long long)pos[i], (long long)sorted[i]);
    }
    free(sorted);
}
