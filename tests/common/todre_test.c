/* Shared helpers of the CMocka test programs (see todre_test.h). */
#define _POSIX_C_SOURCE 200809L /* fnmatch */
#include "todre_test.h"

#include <fnmatch.h>
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

/* Every parameter of todre.h, written out here from the header (not read
 * from the library), with its handle kind. */
const struct tt_param_info tt_params[] = {
    {TODRE_CONTEXT_WORKSPACE_LIMIT, "TODRE_CONTEXT_WORKSPACE_LIMIT", TT_KIND_CONTEXT},
    {TODRE_CONTEXT_NUM_THREADS, "TODRE_CONTEXT_NUM_THREADS", TT_KIND_CONTEXT},
    {TODRE_SELECT_OBJECTIVE, "TODRE_SELECT_OBJECTIVE", TT_KIND_SELECT},
    {TODRE_SELECT_PIVOT, "TODRE_SELECT_PIVOT", TT_KIND_SELECT},
    {TODRE_SELECT_PIVOT_LO, "TODRE_SELECT_PIVOT_LO", TT_KIND_SELECT},
    {TODRE_SELECT_PIVOT_HI, "TODRE_SELECT_PIVOT_HI", TT_KIND_SELECT},
    {TODRE_SELECT_KEEP, "TODRE_SELECT_KEEP", TT_KIND_SELECT},
    {TODRE_SELECT_RATIO, "TODRE_SELECT_RATIO", TT_KIND_SELECT},
    {TODRE_SELECT_SEED, "TODRE_SELECT_SEED", TT_KIND_SELECT},
    {TODRE_SELECT_ORDER, "TODRE_SELECT_ORDER", TT_KIND_SELECT},
    {TODRE_SELECT_BUDGET, "TODRE_SELECT_BUDGET", TT_KIND_SELECT},
    {TODRE_SELECT_GROUP_MIN, "TODRE_SELECT_GROUP_MIN", TT_KIND_SELECT},
    {TODRE_RELEVANCE_TAU, "TODRE_RELEVANCE_TAU", TT_KIND_RELEVANCE},
    {TODRE_RELEVANCE_SCHEDULE, "TODRE_RELEVANCE_SCHEDULE", TT_KIND_RELEVANCE},
    {TODRE_RELEVANCE_NUM_LAYERS, "TODRE_RELEVANCE_NUM_LAYERS", TT_KIND_RELEVANCE},
    {TODRE_RELEVANCE_BATCH, "TODRE_RELEVANCE_BATCH", TT_KIND_RELEVANCE},
    {(todre_param)1000, "TODRE_CONTEXT_EXP_SELECT_STRATEGY", TT_KIND_CONTEXT},
    {(todre_param)1001, "TODRE_CONTEXT_EXP_SELECT_ROWS_MADE", TT_KIND_CONTEXT},
};
const size_t tt_nparams = sizeof tt_params / sizeof tt_params[0];

const char *tt_param_name(todre_param param)
{
    for (size_t i = 0; i < tt_nparams; i++)
        if (tt_params[i].param == param) return tt_params[i].name;
    fail_msg("tt_param_name: %d is not a parameter of todre.h", (int)param);
    return "";
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
    size_t size = todre_dtype_size(dt);
    if (size == 0) fail_msg("tt_dtype_size: unknown dtype %d", (int)dt);
    return size;
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

/* ---- DLTensors ------------------------------------------------------------------ */

DLDataType tt_dl_dtype(todre_dtype dt)
{
    DLDataType t = {kDLFloat, 32, 1};
    switch (dt) {
    case TODRE_DTYPE_F32: break;
    case TODRE_DTYPE_F16: t.bits = 16; break;
    case TODRE_DTYPE_BF16: t.code = kDLBfloat; t.bits = 16; break;
    case TODRE_DTYPE_I32: t.code = kDLInt; break;
    case TODRE_DTYPE_I64: t.code = kDLInt; t.bits = 64; break;
    case TODRE_DTYPE_U8: t.code = kDLUInt; t.bits = 8; break;
    default: fail_msg("tt_dl_dtype: unknown dtype %d", (int)dt);
    }
    return t;
}

DLTensor todre_test_dl(void *data, DLDataType dtype, int ndim, int64_t *shape, int64_t *strides)
{
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.device.device_id = 0;
    t.ndim = ndim;
    t.dtype = dtype;
    t.shape = shape;
    t.strides = strides;
    t.byte_offset = 0;
    return t;
}

const DLTensor *tt_array_init(tt_array *a, void *data, todre_dtype dt, int ndim,
                              const int64_t *shape, const int64_t *strides)
{
    assert_true(ndim >= 0 && ndim <= TODRE_MAX_RANK);
    memset(a, 0, sizeof *a);
    for (int i = 0; i < ndim; i++) {
        a->shape[i] = shape[i];
        if (strides) a->strides[i] = strides[i];
    }
    a->dl = todre_test_dl(data, tt_dl_dtype(dt), ndim, a->shape, strides ? a->strides : NULL);
    return &a->dl;
}

const DLTensor *tt_array1(tt_array *a, void *data, todre_dtype dt, int64_t n)
{
    return tt_array_init(a, data, dt, 1, &n, NULL);
}

const DLTensor *tt_array2(tt_array *a, void *data, todre_dtype dt, int64_t n, int64_t d,
                          int64_t ld)
{
    int64_t shape[2] = {n, d}, strides[2] = {ld, 1};
    return tt_array_init(a, data, dt, 2, shape, strides);
}

const DLTensor *tt_array3(tt_array *a, void *data, todre_dtype dt, int64_t n0, int64_t n1,
                          int64_t n2)
{
    int64_t shape[3] = {n0, n1, n2};
    return tt_array_init(a, data, dt, 3, shape, NULL);
}

const DLTensor *tt_array_on(tt_array *a, DLDeviceType type, int32_t id)
{
    a->dl.device.device_type = type;
    a->dl.device.device_id = id;
    return &a->dl;
}

/* ---- library handles ------------------------------------------------------------- */

todre_context *tt_cpu_context(void)
{
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create("cpu", 0, &ctx));
    assert_non_null(ctx);
    return ctx;
}

/* Whether name matches one of the comma-separated patterns of list. */
static int tt_matches(const char *name, const char *list)
{
    char pat[256];
    while (*list) {
        size_t len = strcspn(list, ",");
        if (len > 0 && len < sizeof pat) {
            memcpy(pat, list, len);
            pat[len] = '\0';
            if (fnmatch(pat, name, 0) == 0) return 1;
        }
        list += len;
        if (*list == ',') list++;
    }
    return 0;
}

int tt_run_group(const char *name, const struct CMUnitTest *tests, size_t count)
{
    const char *only = getenv("TODRE_TEST_ONLY"), *skip = getenv("TODRE_TEST_SKIP");
    struct CMUnitTest *sel = calloc(count ? count : 1, sizeof *sel);
    size_t n = 0;
    if (!sel) return 1;
    for (size_t i = 0; i < count; i++) {
        if (only && *only && !tt_matches(tests[i].name, only)) continue;
        if (skip && *skip && tt_matches(tests[i].name, skip)) continue;
        sel[n++] = tests[i];
    }
    if (n < count)
        printf("%zu of %zu tests selected (TODRE_TEST_ONLY=%s, TODRE_TEST_SKIP=%s)\n", n, count,
               only ? only : "", skip ? skip : "");
    int rc = _cmocka_run_group_tests(name, sel, n, NULL, NULL);
    free(sel);
    return rc;
}

int tt_cuda_usable(void)
{
    int n = 0;
    if (todre_backend_count(&n) != TODRE_OK) return 0;
    for (int i = 0; i < n; i++) {
        todre_backend_props p;
        memset(&p, 0, sizeof p);
        p.struct_size = sizeof p;
        if (todre_backend_get_props(i, &p) != TODRE_OK || strcmp(p.name, "cuda") != 0) continue;
        if (p.available) return 1;
        printf("skipped: CUDA backend unavailable: %s\n", p.reason);
        return 0;
    }
    printf("skipped: no CUDA backend module was found\n");
    return 0;
}

void tt_cfg_set(todre_select_config *cfg, todre_param param, int64_t value)
{
    tt_assert_ok(todre_select_config_set_int(cfg, param, value));
}

int64_t tt_cfg_get(const todre_select_config *cfg, todre_param param)
{
    int64_t v = -12345;
    tt_assert_ok(todre_select_config_get_int(cfg, param, &v));
    return v;
}

void tt_ctx_set(todre_context *ctx, todre_param param, int64_t value)
{
    tt_assert_ok(todre_context_set_int(ctx, param, value));
}

todre_select_config *tt_config(todre_objective obj, todre_pivot piv, int64_t keep,
                               todre_order order)
{
    todre_select_config *cfg = NULL;
    tt_assert_ok(todre_select_config_create(&cfg));
    tt_cfg_set(cfg, TODRE_SELECT_OBJECTIVE, obj);
    tt_cfg_set(cfg, TODRE_SELECT_PIVOT, piv);
    if (keep > 0) tt_cfg_set(cfg, TODRE_SELECT_KEEP, keep);
    tt_cfg_set(cfg, TODRE_SELECT_ORDER, order);
    return cfg;
}

todre_status tt_select_both(todre_context *ctx, todre_select_config *cfg, const DLTensor *emb,
                            const DLTensor *cls, int64_t k, int64_t *sel, int64_t *pos)
{
    int64_t *buf = malloc(sizeof(int64_t) * (size_t)(2 * k));
    assert_non_null(buf);
    for (int64_t i = 0; i < 2 * k; i++) buf[i] = -7; /* must all be overwritten */
    int64_t shape[2] = {2, k};
    DLTensor out = todre_test_dl(buf, tt_dl_dtype(TODRE_DTYPE_I64), 2, shape, NULL);
    tt_cfg_set(cfg, TODRE_SELECT_ORDER, TODRE_ORDER_BOTH);
    todre_status st = todre_select(ctx, cfg, emb, cls, &out);
    memcpy(sel, buf, sizeof(int64_t) * (size_t)k);
    memcpy(pos, buf + k, sizeof(int64_t) * (size_t)k);
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
