/* Contexts: backend choice, parameters, stream, host scratch. */
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define DEFAULT_WORKSPACE_LIMIT ((int64_t)256 << 20)

static todre_status create_backend(todre_backend_kind kind, int device, struct todre_backend **be,
                                   void **handle)
{
    char msg[TODRE_MSG_CAP] = "";
    struct todre_diag diag = {msg, sizeof msg};
    todre_status st;
    *handle = NULL;
    if (kind == TODRE_BACKEND_CPU) {
        st = todre_cpu_backend_create(be, &diag);
        if (st != TODRE_OK) return todre_fail_diag(NULL, st, "CPU backend", msg);
        return TODRE_OK;
    }
    st = todre_module_backend_create(kind, device, be, handle, msg, sizeof msg);
    if (st != TODRE_OK) return todre_fail_diag(NULL, st, "CUDA backend", msg);
    return TODRE_OK;
}

todre_status todre_context_create(todre_backend_kind kind, int device, todre_context **out)
{
    todre_clear_error(NULL);
    if (!out) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "out: NULL");
    *out = NULL;
    if (kind != TODRE_BACKEND_AUTO && kind != TODRE_BACKEND_CPU && kind != TODRE_BACKEND_CUDA)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "kind: unknown backend kind %d", (int)kind);
    if (device < 0)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "device: %d is negative", device);

    struct todre_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_OUT_OF_MEMORY, "context: out of memory");

    todre_status st;
    if (kind == TODRE_BACKEND_AUTO) {
        /* AUTO: CUDA when it can run, otherwise CPU without an error. */
        st = create_backend(TODRE_BACKEND_CUDA, device, &ctx->be, &ctx->module_handle);
        ctx->kind = TODRE_BACKEND_CUDA;
        if (st != TODRE_OK) {
            todre_clear_error(NULL);
            st = create_backend(TODRE_BACKEND_CPU, 0, &ctx->be, &ctx->module_handle);
            ctx->kind = TODRE_BACKEND_CPU;
        }
    } else {
        st = create_backend(kind, kind == TODRE_BACKEND_CPU ? 0 : device, &ctx->be,
                            &ctx->module_handle);
        ctx->kind = kind;
    }
    if (st != TODRE_OK) {
        free(ctx);
        return st;
    }
    ctx->be->params.workspace_limit = DEFAULT_WORKSPACE_LIMIT;
    ctx->be->params.strategy = TODRE_STRATEGY_AUTO;
    ctx->be->params.num_threads = 0;
    *out = ctx;
    return TODRE_OK;
}

void todre_context_destroy(todre_context *ctx)
{
    if (!ctx) return;
    if (ctx->be) {
        if (ctx->be->ops->synchronize) {
            char msg[TODRE_MSG_CAP];
            struct todre_diag diag = {msg, sizeof msg};
            (void)ctx->be->ops->synchronize(ctx->be, &diag);
        }
        ctx->be->ops->destroy(ctx->be);
    }
    todre_module_release(ctx->module_handle);
    free(ctx->i64_scratch);
    free(ctx->f64_scratch);
    free(ctx);
}

todre_status todre_context_backend(const todre_context *ctx, todre_backend_kind *out)
{
    todre_clear_error(NULL);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    if (!out) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "out: NULL");
    *out = ctx->kind;
    return TODRE_OK;
}

todre_status todre_context_set_param(todre_context *ctx, todre_context_param param, int64_t value)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    struct todre_backend_params *p = &ctx->be->params;
    switch (param) {
    case TODRE_CONTEXT_WORKSPACE_LIMIT:
        if (value < 0)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "value: workspace limit %lld is negative", (long long)value);
        p->workspace_limit = value;
        return TODRE_OK;
    case TODRE_CONTEXT_SELECT_STRATEGY:
        if (value < TODRE_STRATEGY_AUTO || value > TODRE_STRATEGY_ROWS)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "value: select strategy %lld is outside [0, 3]", (long long)value);
        p->strategy = value;
        return TODRE_OK;
    case TODRE_CONTEXT_NUM_THREADS:
        if (value < 0 || value > 4096)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "value: thread count %lld is outside [0, 4096]", (long long)value);
        p->num_threads = value;
        return TODRE_OK;
    }
    return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "param: unknown context parameter %d",
                      (int)param);
}

todre_status todre_context_get_param(const todre_context *ctx, todre_context_param param,
                                     int64_t *value)
{
    todre_clear_error(NULL);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    if (!value) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "value: NULL");
    const struct todre_backend_params *p = &ctx->be->params;
    switch (param) {
    case TODRE_CONTEXT_WORKSPACE_LIMIT: *value = p->workspace_limit; return TODRE_OK;
    case TODRE_CONTEXT_SELECT_STRATEGY: *value = p->strategy; return TODRE_OK;
    case TODRE_CONTEXT_NUM_THREADS: *value = p->num_threads; return TODRE_OK;
    }
    return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "param: unknown context parameter %d",
                      (int)param);
}

todre_status todre_context_set_stream(todre_context *ctx, void *stream)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    if (!ctx->be->ops->set_stream) {
        if (stream)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "stream: the %s backend has no streams; pass NULL",
                              ctx->be->ops->name);
        return TODRE_OK;
    }
    char msg[TODRE_MSG_CAP] = "";
    struct todre_diag diag = {msg, sizeof msg};
    todre_status st = ctx->be->ops->set_stream(ctx->be, stream, &diag);
    return st == TODRE_OK ? st : todre_fail_diag(ctx, st, "stream", msg);
}

todre_status todre_context_synchronize(todre_context *ctx)
{
    todre_clear_error(ctx);
    if (!ctx) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ctx: NULL");
    if (!ctx->be->ops->synchronize) return TODRE_OK;
    char msg[TODRE_MSG_CAP] = "";
    struct todre_diag diag = {msg, sizeof msg};
    todre_status st = ctx->be->ops->synchronize(ctx->be, &diag);
    return st == TODRE_OK ? st : todre_fail_diag(ctx, st, "synchronize", msg);
}

todre_status todre_backend_available(todre_backend_kind kind, int *available)
{
    todre_clear_error(NULL);
    if (!available) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "available: NULL");
    *available = 0;
    switch (kind) {
    case TODRE_BACKEND_AUTO:
    case TODRE_BACKEND_CPU:
        *available = 1;
        return TODRE_OK;
    case TODRE_BACKEND_CUDA: {
        /* Creating and releasing an instance is the honest answer: it runs
         * the module's probe and the device initialisation. */
        struct todre_backend *be = NULL;
        void *handle = NULL;
        char msg[TODRE_MSG_CAP] = "";
        todre_status st = todre_module_backend_create(kind, 0, &be, &handle, msg, sizeof msg);
        if (st == TODRE_OK) {
            be->ops->destroy(be);
            todre_module_release(handle);
            *available = 1;
        } else {
            todre_fail_diag(NULL, st, "CUDA backend", msg);
        }
        return TODRE_OK;
    }
    }
    return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "kind: unknown backend kind %d", (int)kind);
}

int64_t *todre_ctx_i64(struct todre_context *ctx, size_t n)
{
    if (n > ctx->i64_scratch_len) {
        int64_t *p = realloc(ctx->i64_scratch, n * sizeof *p);
        if (!p) return NULL;
        ctx->i64_scratch = p;
        ctx->i64_scratch_len = n;
    }
    return ctx->i64_scratch;
}

double *todre_ctx_f64(struct todre_context *ctx, size_t n)
{
    if (n > ctx->f64_scratch_len) {
        double *p = realloc(ctx->f64_scratch, n * sizeof *p);
        if (!p) return NULL;
        ctx->f64_scratch = p;
        ctx->f64_scratch_len = n;
    }
    return ctx->f64_scratch;
}
