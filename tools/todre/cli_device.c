/*
 * The context the tool computes with, and the arrays it hands to it.
 * libtodre takes a computation's arrays on the context's device only; the
 * tool reads host files, so where the context's device is not host memory
 * (CUDA) it moves them with todre_context_alloc() and todre_context_copy().
 * The library does the device work, so the tool links no device runtime and
 * runs unchanged on machines without one.
 */
#include <string.h>

#include "cli.h"

int cli_run_open(const char *cmd, const char *backend, struct cli_run *run)
{
    memset(run, 0, sizeof *run);
    char what[96];
    snprintf(what, sizeof what, "--backend %s", *backend ? backend : "\"\"");
    todre_status st = todre_context_create(backend, 0, &run->ctx);
    if (st == TODRE_OK) st = todre_context_device(run->ctx, &run->device);
    if (st != TODRE_OK) return cli_lib_fail(cmd, what, st);
    run->backend = todre_context_backend(run->ctx);
    run->on_host = run->device.device_type == kDLCPU ||
                   run->device.device_type == kDLCUDAHost;
    return 0;
}

static size_t array_bytes(DLDataType dtype, int ndim, const int64_t *shape)
{
    size_t bytes = (size_t)dtype.bits / 8u * dtype.lanes;
    for (int i = 0; i < ndim; i++) bytes *= (size_t)shape[i];
    return bytes;
}

int cli_run_array(const char *cmd, struct cli_run *run, const char *name, void *host,
                  DLDataType dtype, int ndim, const int64_t *shape, const DLTensor **out)
{
    if (run->count == CLI_MAX_BUFFERS || ndim > CLI_MAX_RANK)
        return cli_fail(cmd, "internal error: too many arrays");
    struct cli_array *a = &run->arrays[run->count++];
    memset(a, 0, sizeof *a);
    memcpy(a->shape, shape, (size_t)ndim * sizeof *shape);
    a->host = host;
    a->name = name;
    cli_host_tensor(&a->t, host, dtype, ndim, a->shape);
    if (!run->on_host) {
        size_t bytes = array_bytes(dtype, ndim, shape);
        a->t.device = run->device;
        a->t.data = NULL; /* an empty array needs no memory */
        if (bytes) {
            todre_status st = todre_context_alloc(run->ctx, bytes, &a->dev);
            if (st != TODRE_OK) return cli_lib_fail(cmd, name, st);
            a->t.data = a->dev;
            DLTensor src;
            cli_host_tensor(&src, host, dtype, ndim, a->shape);
            st = todre_context_copy(run->ctx, &a->t, &src);
            if (st != TODRE_OK) return cli_lib_fail(cmd, name, st);
        }
    }
    *out = &a->t;
    return 0;
}

int cli_run_fetch(const char *cmd, struct cli_run *run, const DLTensor *t)
{
    for (int i = 0; i < run->count; i++) {
        struct cli_array *a = &run->arrays[i];
        if (&a->t != t) continue;
        if (run->on_host || !a->dev) return 0;
        DLTensor dst;
        cli_host_tensor(&dst, a->host, a->t.dtype, a->t.ndim, a->shape);
        todre_status st = todre_context_copy(run->ctx, &dst, &a->t);
        return st == TODRE_OK ? 0 : cli_lib_fail(cmd, a->name, st);
    }
    return cli_fail(cmd, "internal error: unknown output array");
}

void cli_run_close(struct cli_run *run)
{
    for (int i = 0; i < run->count; i++) todre_context_free(run->ctx, run->arrays[i].dev);
    todre_context_destroy(run->ctx);
    memset(run, 0, sizeof *run);
}
