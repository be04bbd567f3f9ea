/*
 * The context the tool computes with, and device copies of its inputs when
 * that context is a CUDA one. libtodre takes tensors on the context's device
 * only; the tool reads host files, so on CUDA it copies them through the CUDA
 * driver API (libcuda.so.1, present wherever the CUDA backend can run),
 * loaded with dlopen so that the tool itself has no CUDA dependency. Memory
 * is allocated in the device's primary context, the one the CUDA runtime (and
 * so libtodre's CUDA module) uses.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <string.h>

#include "cli.h"

typedef unsigned long long cli_cuptr; /* CUdeviceptr */

struct cuda_driver {
    void *lib;
    void *pctx; /* the retained primary context */
    int (*init)(unsigned);
    int (*device_get)(int *, int);
    int (*primary_retain)(void **, int);
    int (*primary_release)(int);
    int (*ctx_set_current)(void *);
    int (*mem_alloc)(cli_cuptr *, size_t);
    int (*mem_free)(cli_cuptr);
    int (*htod)(cli_cuptr, const void *, size_t);
    int (*dtoh)(void *, cli_cuptr, size_t);
    int (*error_string)(int, const char **);
};

static struct cuda_driver g_cu;

/* ISO C has no cast from void * to a function pointer; copy the bits. */
static int sym(void *lib, const char *name, void *fn_ptr)
{
    void *p = dlsym(lib, name);
    if (!p) return -1;
    memcpy(fn_ptr, &p, sizeof p);
    return 0;
}

static const char *cu_error(int err)
{
    const char *s = NULL;
    if (g_cu.error_string && g_cu.error_string(err, &s) == 0 && s) return s;
    return "unknown CUDA driver error";
}

static int driver_resolve(void *lib)
{
    return sym(lib, "cuInit", &g_cu.init) || sym(lib, "cuDeviceGet", &g_cu.device_get) ||
           sym(lib, "cuDevicePrimaryCtxRetain", &g_cu.primary_retain) ||
           sym(lib, "cuDevicePrimaryCtxRelease_v2", &g_cu.primary_release) ||
           sym(lib, "cuCtxSetCurrent", &g_cu.ctx_set_current) ||
           sym(lib, "cuMemAlloc_v2", &g_cu.mem_alloc) || sym(lib, "cuMemFree_v2", &g_cu.mem_free) ||
           sym(lib, "cuMemcpyHtoD_v2", &g_cu.htod) || sym(lib, "cuMemcpyDtoH_v2", &g_cu.dtoh) ||
           sym(lib, "cuGetErrorString", &g_cu.error_string);
}

/* Load the driver and make device 0's primary context current. */
static int driver_open(char *why, size_t cap)
{
    if (g_cu.pctx) return 0;
    if (!g_cu.lib) {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            snprintf(why, cap, "cannot load the CUDA driver (libcuda.so.1): %s", dlerror());
            return -1;
        }
        if (driver_resolve(lib)) {
            snprintf(why, cap, "the CUDA driver lacks a needed function");
            dlclose(lib);
            return -1;
        }
        g_cu.lib = lib;
    }
    int dev = 0, err = g_cu.init(0);
    if (!err) err = g_cu.device_get(&dev, 0);
    if (!err) err = g_cu.primary_retain(&g_cu.pctx, dev);
    if (!err) err = g_cu.ctx_set_current(g_cu.pctx);
    if (err) {
        snprintf(why, cap, "CUDA driver: %s", cu_error(err));
        return -1;
    }
    return 0;
}

const char *cli_backend_name(todre_backend_kind kind)
{
    return kind == TODRE_BACKEND_CUDA ? "cuda" : kind == TODRE_BACKEND_CPU ? "cpu" : "auto";
}

int cli_run_open(const char *cmd, todre_backend_kind kind, struct cli_run *run)
{
    memset(run, 0, sizeof *run);
    todre_status st = todre_context_create(kind, 0, &run->ctx);
    if (st != TODRE_OK) return cli_lib_fail(cmd, "--backend", st);
    st = todre_context_backend(run->ctx, &run->backend);
    if (st != TODRE_OK) return cli_lib_fail(cmd, "--backend", st);
    if (run->backend != TODRE_BACKEND_CUDA) return 0;

    char why[512];
    if (driver_open(why, sizeof why) == 0) return 0;
    if (kind == TODRE_BACKEND_CUDA) return cli_fail(cmd, "--backend cuda: %s", why);
    /* AUTO promises a silent CPU fallback when CUDA cannot be used */
    todre_context_destroy(run->ctx);
    run->ctx = NULL;
    st = todre_context_create(TODRE_BACKEND_CPU, 0, &run->ctx);
    if (st != TODRE_OK) return cli_lib_fail(cmd, "--backend", st);
    run->backend = TODRE_BACKEND_CPU;
    return 0;
}

static size_t dtype_size(todre_dtype dtype)
{
    switch (dtype) {
    case TODRE_DTYPE_F32: case TODRE_DTYPE_I32: return 4;
    case TODRE_DTYPE_F16: case TODRE_DTYPE_BF16: return 2;
    case TODRE_DTYPE_I64: return 8;
    default: return 1;
    }
}

static int cuda_fail(const char *cmd, const char *name, const char *what, int err)
{
    return cli_fail(cmd, "%s: %s failed: %s", name, what, cu_error(err));
}

int cli_run_tensor(const char *cmd, struct cli_run *run, const char *name, const void *host,
                   todre_dtype dtype, int rank, const int64_t *shape, todre_tensor **out)
{
    if (run->count == CLI_MAX_BUFFERS) return cli_fail(cmd, "internal error: too many tensors");
    size_t bytes = dtype_size(dtype);
    for (int i = 0; i < rank; i++) bytes *= (size_t)shape[i];
    void *data = (void *)host; /* the library only reads inputs; outputs are ours */
    todre_device_type device = TODRE_DEVICE_HOST;
    int slot = run->count;
    if (run->backend == TODRE_BACKEND_CUDA) {
        int err = g_cu.mem_alloc(&run->dev[slot], bytes ? bytes : 1);
        if (err) return cuda_fail(cmd, name, "cuMemAlloc", err);
        run->count++;
        err = bytes ? g_cu.htod(run->dev[slot], host, bytes) : 0;
        if (err) return cuda_fail(cmd, name, "cuMemcpyHtoD", err);
        data = (void *)(uintptr_t)run->dev[slot];
        device = TODRE_DEVICE_CUDA;
    } else {
        run->count++;
    }
    run->host[slot] = host;
    todre_status st = todre_tensor_create(data, dtype, device, 0, rank, shape, NULL,
                                          &run->tensors[slot]);
    if (st != TODRE_OK) return cli_lib_fail(cmd, name, st);
    *out = run->tensors[slot];
    return 0;
}

int cli_run_fetch(const char *cmd, struct cli_run *run, const todre_tensor *t, void *host,
                  size_t bytes)
{
    for (int i = 0; i < run->count; i++) {
        if (run->tensors[i] != t) continue;
        if (run->backend == TODRE_BACKEND_CUDA) {
            int err = bytes ? g_cu.dtoh(host, run->dev[i], bytes) : 0;
            if (err) return cuda_fail(cmd, "output", "cuMemcpyDtoH", err);
        } else if (run->host[i] != host) {
            memcpy(host, run->host[i], bytes);
        }
        return 0;
    }
    return cli_fail(cmd, "internal error: unknown output tensor");
}

void cli_run_close(struct cli_run *run)
{
    for (int i = 0; i < run->count; i++) {
        todre_tensor_destroy(run->tensors[i]);
        if (run->dev[i]) g_cu.mem_free(run->dev[i]);
    }
    todre_context_destroy(run->ctx);
    if (g_cu.pctx) {
        g_cu.primary_release(0);
        g_cu.pctx = NULL;
    }
    memset(run, 0, sizeof *run);
}
