/* Contexts: backend instance from the registry, parameters, stream, memory,
 * host scratch. */
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define DIAG(name) \
    char name##_buf[TODRE_MSG_CAP] = ""; \
    struct todre_diag name = {name##_buf, sizeof name##_buf}

todre_status todre_context_create(const char *backend, int device, todre_context **out)
{
    todre_clear_error(NULL);
    if (!out) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "out: NULL");
    const struct todre_registry_entry *e;
    int dev;
    todre_status st = todre_registry_resolve(backend, device, &e, &dev);
    if (st != TODRE_OK) return st;

    struct todre_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_OUT_OF_MEMORY, "context: out of memory");
    DIAG(diag);
    st = e->reg->create(dev, &ctx->be, &diag);
    if (st != TODRE_OK || !ctx->be) {
        free(ctx);
        if (st == TODRE_OK) st = TODRE_ERR_INTERNAL;
        /* A bad device ordinal stays an argument error and memory stays
         * memory; anything else means the backend cannot run here. */
        if (st != TODRE_ERR_OUT_OF_MEMORY && st != TODRE_ERR_INVALID_ARGUMENT)
            st = TODRE_ERR_BACKEND_UNAVAILABLE;
        return todre_fail(NULL, st, "backend: %s device %d: %s", e->name, dev,
                          diag_buf[0] ? diag_buf : todre_status_string(st));
    }
    ctx->entry = e;
    todre_param_defaults(TODRE_OWNER_CONTEXT, &ctx->be->params);
    ctx->be->params.rows_made = 0; /* read-only: no default written */
    *out = ctx;
    return TODRE_OK;
}

void todre_context_destroy(todre_context *ctx)
{
    if (!ctx) return;
    if (ctx->be) {
        if (ctx->be->ops->synchronize) {
            DIAG(diag);
            (void)ctx->be->ops->synchronize(ctx->be, &diag);
        }
        ctx->be->ops->destroy(ctx->be);
    }
    todre_ctx_trim(ctx);
    free(ctx);
}

const char *todre_context_backend(const todre_context *ctx)
{
    return ctx ? ctx->entry->name : "";
}

todre_status todre_context_device(const todre_context *ctx, DLDevice *device)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    if (!device) return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "device: NULL");
    device->device_type = (DLDeviceType)ctx->entry->dl_device_type;
    device->device_id = ctx->be->device;
    return TODRE_OK;
}

/* ---- parameters ------------------------------------------------------------ */

todre_status todre_context_set_int(todre_context *ctx, todre_param param, int64_t value)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    return todre_param_set_int(ctx, TODRE_OWNER_CONTEXT, &ctx->be->params, param, value);
}

todre_status todre_context_get_int(const todre_context *ctx, todre_param param, int64_t *value)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    return todre_param_get_int(ctx, TODRE_OWNER_CONTEXT, &ctx->be->params, param, value);
}

todre_status todre_context_set_double(todre_context *ctx, todre_param param, double value)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    return todre_param_set_double(ctx, TODRE_OWNER_CONTEXT, &ctx->be->params, param, value);
}

todre_status todre_context_get_double(const todre_context *ctx, todre_param param, double *value)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    return todre_param_get_double(ctx, TODRE_OWNER_CONTEXT, &ctx->be->params, param, value);
}

todre_status todre_context_reset(todre_context *ctx, todre_reset what)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    if (what != TODRE_RESET_STATE && what != TODRE_RESET_PARAMS && what != TODRE_RESET_ALL)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "what: %d is not a todre_reset value (1 STATE, 2 PARAMS, 3 ALL)",
                          (int)what);
    if (what & TODRE_RESET_STATE) {
        if (ctx->be->ops->trim) ctx->be->ops->trim(ctx->be);
        todre_ctx_trim(ctx);
    }
    if (what & TODRE_RESET_PARAMS) todre_param_defaults(TODRE_OWNER_CONTEXT, &ctx->be->params);
    return TODRE_OK;
}

/* ---- stream -------------------------------------------------------------- */

todre_status todre_context_set_stream(todre_context *ctx, void *stream)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    if (!ctx->be->ops->set_stream) {
        if (stream)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "stream: the %s backend has no streams; pass NULL",
                              ctx->entry->name);
        return TODRE_OK;
    }
    DIAG(diag);
    todre_status st = ctx->be->ops->set_stream(ctx->be, stream, &diag);
    return st == TODRE_OK ? st : todre_fail_diag(ctx, st, "stream", diag_buf);
}

todre_status todre_context_synchronize(todre_context *ctx)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    if (!ctx->be->ops->synchronize) return TODRE_OK;
    DIAG(diag);
    todre_status st = ctx->be->ops->synchronize(ctx->be, &diag);
    return st == TODRE_OK ? st : todre_fail_diag(ctx, st, "synchronize", diag_buf);
}

/* ---- memory ------------------------------------------------------------- */

todre_status todre_context_alloc(todre_context *ctx, size_t bytes, void **ptr)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    if (!ptr) return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "ptr: NULL");
    if (bytes == 0) return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "bytes: 0, must be > 0");
    if (bytes > (size_t)INT64_MAX)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "bytes: %zu is above INT64_MAX", bytes);
    DIAG(diag);
    void *p = NULL;
    todre_status st = ctx->be->ops->mem_alloc(ctx->be, bytes, &p, &diag);
    if (st != TODRE_OK) return todre_fail_diag(ctx, st, "alloc", diag_buf);
    *ptr = p;
    return TODRE_OK;
}

todre_status todre_context_free(todre_context *ctx, void *ptr)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    if (!ptr) return TODRE_OK;
    DIAG(diag);
    todre_status st = ctx->be->ops->mem_free(ctx->be, ptr, &diag);
    return st == TODRE_OK ? st : todre_fail_diag(ctx, st, "free", diag_buf);
}

todre_status todre_context_copy(todre_context *ctx, const DLTensor *dst, const DLTensor *src)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    const unsigned any = (1u << TODRE_DTYPE_COUNT) - 1;
    struct todre_array d, s;
    todre_status st = todre_array_map_out(ctx, dst, "dst", any, TODRE_WHERE_ANY, &d);
    if (st != TODRE_OK) return st;
    if ((st = todre_array_map(ctx, src, "src", any, TODRE_WHERE_ANY, &s)) != TODRE_OK) return st;
    if (d.dtype != s.dtype)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "dst: dtype %s differs from src's %s",
                          todre_dtype_name(d.dtype), todre_dtype_name(s.dtype));
    int same = d.rank == s.rank;
    for (int i = 0; same && i < d.rank; i++) same = d.shape[i] == s.shape[i];
    if (!same)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "dst: shape differs from src's (ndim %d and %d)", d.rank, s.rank);
    if (!todre_array_is_compact(&d))
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "dst: must be compact (row-major)");
    if (!todre_array_is_compact(&s))
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "src: must be compact (row-major)");
    if (d.count == 0) return TODRE_OK;
    /* compact: the byte size is the extent todre_array_map bounded */
    size_t bytes;
    if (!todre_bytes(d.count, todre_dtype_size(d.dtype), &bytes))
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "dst: %lld elements overflow size_t",
                          (long long)d.count);
    int dst_dev = d.device != TODRE_DEVICE_HOST, src_dev = s.device != TODRE_DEVICE_HOST;
    DIAG(diag);
    st = ctx->be->ops->mem_copy(ctx->be, d.data, dst_dev, s.data, src_dev, bytes, &diag);
    return st == TODRE_OK ? st : todre_fail_diag(ctx, st, "copy", diag_buf);
}

/* ---- host scratch -------------------------------------------------------- */

int64_t *todre_ctx_i64(struct todre_context *ctx, size_t n)
{
    if (n > ctx->i64_scratch_len) {
        size_t bytes;
        if (!todre_mul_size(n, sizeof(int64_t), &bytes)) return NULL;
        int64_t *p = realloc(ctx->i64_scratch, bytes);
        if (!p) return NULL;
        ctx->i64_scratch = p;
        ctx->i64_scratch_len = n;
    }
    return ctx->i64_scratch;
}

struct todre_select_plan *todre_ctx_plans(struct todre_context *ctx, size_t n)
{
    if (n > ctx->plan_scratch_len) {
        size_t bytes;
        if (!todre_mul_size(n, sizeof(struct todre_select_plan), &bytes)) return NULL;
        struct todre_select_plan *p = realloc(ctx->plan_scratch, bytes);
        if (!p) return NULL;
        ctx->plan_scratch = p;
        ctx->plan_scratch_len = n;
    }
    return ctx->plan_scratch;
}

void todre_ctx_trim(struct todre_context *ctx)
{
    free(ctx->i64_scratch);
    ctx->i64_scratch = NULL;
    ctx->i64_scratch_len = 0;
    free(ctx->plan_scratch);
    ctx->plan_scratch = NULL;
    ctx->plan_scratch_len = 0;
}
