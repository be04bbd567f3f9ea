/* The CUDA backend module: its one exported entry point
 * (todre_backend_module_register), the registration (device count and
 * properties, answered without creating any state), instance creation, the
 * dispatch table, memory, stream handling, synchronisation and teardown.
 *
 * Never aborts, never prints: every CUDA / cuBLAS failure becomes a status
 * with the runtime's error text in the diag buffer. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define TODRE_MODULE_EXPORT extern "C" __attribute__((visibility("default")))

/* Oldest architecture the fatbinary carries code for (sm_80 SASS). */
#define TODRE_CUDA_MIN_CC_MAJOR 8

/* The driver the statically linked runtime needs, as "CUDA 13 runtime:
 * driver R580 or newer": a CUDA major version runs on the driver branch
 * that introduced it and on every later one (minor version compatibility). */
static void driver_need(char *buf, size_t cap)
{
    int major = CUDART_VERSION / 1000;
    const char *branch = major == 11 ? "R450" : major == 12 ? "R525" : major == 13 ? "R580" : NULL;
    if (branch)
        snprintf(buf, cap, "CUDA %d runtime: driver %s or newer", major, branch);
    else
        snprintf(buf, cap, "CUDA %d runtime: a driver for CUDA %d or newer", major, major);
}

/* ---- diagnostics ----------------------------------------------------------- */

todre_status todre_cuda_fail(struct todre_diag *diag, cudaError_t err, const char *what)
{
    todre_status st = (err == cudaErrorMemoryAllocation) ? TODRE_ERR_OUT_OF_MEMORY
                                                          : TODRE_ERR_DEVICE;
    /* Clear a non-sticky error so that it does not resurface in a later call. */
    (void)cudaGetLastError();
    return todre_diag_set(diag, st, "%s: %s (%s)", what, cudaGetErrorString(err),
                           cudaGetErrorName(err));
}

todre_status todre_cublas_fail(struct todre_diag *diag, cublasStatus_t st, const char *what)
{
    todre_status s = (st == CUBLAS_STATUS_ALLOC_FAILED) ? TODRE_ERR_OUT_OF_MEMORY
                                                         : TODRE_ERR_DEVICE;
    return todre_diag_set(diag, s, "%s: cuBLAS error %s (%s)", what, cublasGetStatusName(st),
                           cublasGetStatusString(st));
}

/* ---- the driver's current context ---------------------------------------------- */

/* A call runs in the instance's CUDA context (the primary context of its
 * device, retained for the instance's lifetime) and gives the calling
 * thread's current context back exactly: a non-primary context of the
 * caller's (same device or another), or none on a thread that never chose a
 * device. cudaGetDevice / cudaSetDevice cannot do this: they see devices,
 * not contexts, and restoring "device 0" on a thread that had no context
 * binds (and in CUDA 12+ creates) device 0's primary context there.
 *
 * The driver API comes through the runtime (cudaGetDriverEntryPointByVersion),
 * so the module links no libcuda and still loads, and reports "unavailable",
 * on a machine without a driver. Types as in cuda.h: CUresult is an int enum,
 * CUcontext a pointer, CUdevice an int. The ABI version asked for is CUDA
 * 12.0's (cuDevicePrimaryCtxRelease is its _v2); toolkits before 12.5 have
 * only cudaGetDriverEntryPoint, which asks for their own version. */
typedef int (*todre_cu_ctx_get_current)(void **ctx);
typedef int (*todre_cu_ctx_set_current)(void *ctx);
typedef int (*todre_cu_device_get)(int *device, int ordinal);
typedef int (*todre_cu_primary_retain)(void **ctx, int device);
typedef int (*todre_cu_primary_release)(int device);

static struct {
    todre_cu_ctx_get_current ctx_get_current;
    todre_cu_ctx_set_current ctx_set_current;
    todre_cu_device_get device_get;
    todre_cu_primary_retain primary_retain;
    todre_cu_primary_release primary_release;
    const char *missing;  /* first entry point not found, or NULL */
    cudaError_t err;      /* of the lookup */
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void *drv_lookup(const char *name)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q);
#else /* CUDA 12.0 to 12.4: the runtime's own version (12.x) is the ABI asked for */
    cudaError_t err = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q);
#endif
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        if (drv.err == cudaSuccess) drv.err = err;
    }
    if ((err != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn) && !drv.missing) {
        drv.missing = name;
        fn = NULL;
    }
    return fn;
}

static void drv_load(void)
{
    drv.ctx_get_current = (todre_cu_ctx_get_current)drv_lookup("cuCtxGetCurrent");
    drv.ctx_set_current = (todre_cu_ctx_set_current)drv_lookup("cuCtxSetCurrent");
    drv.device_get = (todre_cu_device_get)drv_lookup("cuDeviceGet");
    drv.primary_retain = (todre_cu_primary_retain)drv_lookup("cuDevicePrimaryCtxRetain");
    drv.primary_release = (todre_cu_primary_release)drv_lookup("cuDevicePrimaryCtxRelease");
}

/* The entry points, once per process; BACKEND_UNAVAILABLE naming the first
 * one the driver lacks. */
static todre_status drv_ready(struct todre_diag *diag)
{
    pthread_once(&drv_once, drv_load);
    if (!drv.missing) return TODRE_OK;
    if (drv.err != cudaSuccess)
        return todre_diag_set(diag, TODRE_ERR_BACKEND_UNAVAILABLE,
                               "the CUDA driver entry point %s is not available: %s (%s)",
                               drv.missing, cudaGetErrorString(drv.err), cudaGetErrorName(drv.err));
    return todre_diag_set(diag, TODRE_ERR_BACKEND_UNAVAILABLE,
                           "the CUDA driver has no entry point %s (driver too old?)", drv.missing);
}

static todre_status drv_fail(struct todre_diag *diag, int res, const char *what)
{
    return todre_diag_set(diag, TODRE_ERR_DEVICE, "%s: CUDA driver error %d", what, res);
}

todre_status todre_cuda_enter(struct todre_cuda_backend *be, struct todre_cuda_scope *sc,
                              struct todre_diag *diag)
{
    sc->changed = 0;
    sc->prev = NULL;
    int res = drv.ctx_get_current(&sc->prev);
    if (res != 0) return drv_fail(diag, res, "cuCtxGetCurrent");
    if (sc->prev != be->cu_ctx) {
        res = drv.ctx_set_current(be->cu_ctx);
        if (res != 0) return drv_fail(diag, res, "cuCtxSetCurrent");
        sc->changed = 1;
    }
    return TODRE_OK;
}

void todre_cuda_leave(struct todre_cuda_scope *sc)
{
    if (sc->changed) (void)drv.ctx_set_current(sc->prev);
}

/* UNSUPPORTED when @p stream is being captured into a CUDA graph (or, for
 * the legacy stream, when a blocking stream captures and using it would
 * join the capture: cudaErrorStreamCaptureImplicit). @p what names the
 * stream in the message. */
static todre_status not_capturing(cudaStream_t stream, const char *what, const char *advice,
                                  struct todre_diag *diag)
{
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t err = cudaStreamIsCapturing(stream, &cs);
    if (err == cudaErrorStreamCaptureImplicit ||
        (err == cudaSuccess && cs != cudaStreamCaptureStatusNone)) {
        (void)cudaGetLastError();
        return todre_diag_set(diag, TODRE_ERR_UNSUPPORTED,
                               "%s is being captured into a CUDA graph; %s", what, advice);
    }
    if (err != cudaSuccess) return todre_cuda_fail(diag, err, "cudaStreamIsCapturing");
    return TODRE_OK;
}

todre_status todre_cuda_begin_call(struct todre_cuda_backend *be, struct todre_cuda_scope *sc,
                                   struct todre_diag *diag)
{
    todre_status st = todre_cuda_enter(be, sc, diag);
    if (st != TODRE_OK) return st;
    (void)cudaGetLastError();
    st = not_capturing(be->stream, "the context's stream",
                       "libtodre calls cannot be captured (call outside the capture)", diag);
    if (st != TODRE_OK) todre_cuda_leave(sc);
    return st;
}

todre_status todre_cuda_check_pointer(struct todre_cuda_backend *be, const void *ptr,
                                      const char *name, struct todre_diag *diag)
{
    if (!ptr) return TODRE_OK; /* the core has checked presence */
    cudaPointerAttributes attr;
    cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return todre_diag_set(diag, TODRE_ERR_INVALID_ARGUMENT,
                               "%s: the pointer is not CUDA memory (%s)", name,
                               cudaGetErrorString(err));
    }
    switch (attr.type) {
    case cudaMemoryTypeManaged:
        return TODRE_OK;
    case cudaMemoryTypeDevice:
        if (attr.device != be->base.device)
            return todre_diag_set(diag, TODRE_ERR_INVALID_ARGUMENT,
                                   "%s: memory of CUDA device %d given to a context on device %d",
                                   name, attr.device, be->base.device);
        return TODRE_OK;
    case cudaMemoryTypeHost:
        return todre_diag_set(diag, TODRE_ERR_INVALID_ARGUMENT,
                               "%s: pinned host memory given to a CUDA context (device memory "
                               "is required; use a CPU context for host arrays)", name);
    default:
        return todre_diag_set(diag, TODRE_ERR_INVALID_ARGUMENT,
                               "%s: host memory given to a CUDA context (device memory is "
                               "required; use a CPU context for host arrays)", name);
    }
}

/* ---- table slots ------------------------------------------------------------ */

static todre_status cuda_set_stream(struct todre_backend *base, void *stream,
                                    struct todre_diag *diag)
{
    struct todre_cuda_backend *be = (struct todre_cuda_backend *)base;
    cudaStream_t next = (cudaStream_t)stream;
    if (next == be->stream) return TODRE_OK;
    struct todre_cuda_scope sc;
    todre_status st = todre_cuda_enter(be, &sc, diag);
    if (st != TODRE_OK) return st;
    /* The event below would join a capture on either stream (or break it):
     * refuse first, touching neither. */
    (void)cudaGetLastError();
    const char *advice = "set the stream outside the capture";
    st = not_capturing(be->stream, "the context's current stream", advice, diag);
    if (st == TODRE_OK) st = not_capturing(next, "the new stream", advice, diag);
    if (st != TODRE_OK) {
        todre_cuda_leave(&sc);
        return st;
    }
    /* The workspace is reused by the next call: work queued on the old
     * stream must finish before the new stream touches it. An event keeps
     * this ordering on the device without blocking the host. */
    cudaEvent_t ev;
    cudaError_t err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (err == cudaSuccess) err = cudaEventRecord(ev, be->stream);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(next, ev, 0);
    if (err == cudaSuccess) err = cudaEventDestroy(ev);
    if (err != cudaSuccess) {
        todre_cuda_leave(&sc);
        return todre_cuda_fail(diag, err, "set_stream: ordering the new stream after the old one");
    }
    /* cublasSetStream() drops a user workspace: set ours again, so that
     * cuBLAS never allocates on the hot path. */
    cublasStatus_t bst = cublasSetStream(be->blas, next);
    if (bst == CUBLAS_STATUS_SUCCESS) bst = cublasSetWorkspace(be->blas, be->blas_ws, be->blas_ws_size);
    todre_cuda_leave(&sc);
    if (bst != CUBLAS_STATUS_SUCCESS) return todre_cublas_fail(diag, bst, "cublasSetStream");
    be->stream = next;
    return TODRE_OK;
}

static todre_status cuda_synchronize(struct todre_backend *base, struct todre_diag *diag)
{
    struct todre_cuda_backend *be = (struct todre_cuda_backend *)base;
    struct todre_cuda_scope sc;
    todre_status st = todre_cuda_enter(be, &sc, diag);
    if (st != TODRE_OK) return st;
    cudaError_t err = cudaStreamSynchronize(be->stream);
    if (err != cudaSuccess) {
        todre_cuda_leave(&sc);
        return todre_cuda_fail(diag, err, "cudaStreamSynchronize");
    }
    int flag = *be->nonfinite_host;
    if (flag) {
        /* Report once: clear the sticky device flag and its host copy. */
        *be->nonfinite_host = 0;
        err = cudaMemsetAsync(be->nonfinite_dev, 0, sizeof(int), be->stream);
        if (err == cudaSuccess) err = cudaStreamSynchronize(be->stream);
        todre_cuda_leave(&sc);
        if (err != cudaSuccess) return todre_cuda_fail(diag, err, "clearing the non-finite flag");
        return todre_diag_set(diag, TODRE_ERR_NONFINITE,
                               "%s contained NaN or Inf in a selection queued since the last "
                               "synchronize (the affected sets' outputs were filled with -1)",
                               (flag & 2) ? ((flag & 1) ? "embeddings and cls" : "cls")
                                          : "embeddings");
    }
    todre_cuda_leave(&sc);
    return TODRE_OK;
}

/* ---- memory (todre_context_alloc / free / copy) -------------------------------- */

static todre_status cuda_mem_alloc(struct todre_backend *base, size_t bytes, void **ptr,
                                   struct todre_diag *diag)
{
    struct todre_cuda_backend *be = (struct todre_cuda_backend *)base;
    struct todre_cuda_scope sc;
    CKS(todre_cuda_enter(be, &sc, diag));
    void *p = NULL;
    /* cudaMalloc aligns to at least 256 bytes. */
    cudaError_t err = cudaMalloc(&p, bytes);
    todre_cuda_leave(&sc);
    if (err != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "cudaMalloc of %zu bytes on device %d", bytes, be->base.device);
        return todre_cuda_fail(diag, err, what);
    }
    *ptr = p;
    return TODRE_OK;
}

static todre_status cuda_mem_free(struct todre_backend *base, void *ptr, struct todre_diag *diag)
{
    struct todre_cuda_backend *be = (struct todre_cuda_backend *)base;
    if (!ptr) return TODRE_OK;
    struct todre_cuda_scope sc;
    CKS(todre_cuda_begin_call(be, &sc, diag));
    /* Work queued on the context's stream may still read the memory. */
    cudaError_t err = cudaStreamSynchronize(be->stream);
    if (err == cudaSuccess) err = cudaFree(ptr);
    todre_cuda_leave(&sc);
    if (err != cudaSuccess) return todre_cuda_fail(diag, err, "cudaFree");
    return TODRE_OK;
}

static todre_status cuda_mem_copy(struct todre_backend *base, void *dst, int dst_dev,
                                  const void *src, int src_dev, size_t bytes,
                                  struct todre_diag *diag)
{
    struct todre_cuda_backend *be = (struct todre_cuda_backend *)base;
    if (bytes == 0) return TODRE_OK;
    struct todre_cuda_scope sc;
    CKS(todre_cuda_begin_call(be, &sc, diag));
    /* Memory described as this device's must be (copy kinds are explicit,
     * so a host pointer would otherwise fail with a bare "invalid argument"). */
    todre_status st = dst_dev ? todre_cuda_check_pointer(be, dst, "dst", diag) : TODRE_OK;
    if (st == TODRE_OK && src_dev) st = todre_cuda_check_pointer(be, src, "src", diag);
    if (st != TODRE_OK) {
        todre_cuda_leave(&sc);
        return st;
    }
    enum cudaMemcpyKind kind = dst_dev ? (src_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                       : (src_dev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    /* On the context's stream: ordered after the work queued there. Host
     * memory may be pageable; the copy is complete when this returns. */
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, kind, be->stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(be->stream);
    todre_cuda_leave(&sc);
    if (err != cudaSuccess) return todre_cuda_fail(diag, err, "cudaMemcpyAsync (todre_context_copy)");
    return TODRE_OK;
}

static void cuda_trim(struct todre_backend *base)
{
    struct todre_cuda_backend *be = (struct todre_cuda_backend *)base;
    struct todre_cuda_scope sc;
    if (todre_cuda_enter(be, &sc, NULL) != TODRE_OK) return;
    todre_cuda_workspace_trim(be);
    (void)cudaGetLastError();
    todre_cuda_leave(&sc);
}

static void cuda_destroy(struct todre_backend *base)
{
    struct todre_cuda_backend *be = (struct todre_cuda_backend *)base;
    if (!be) return;
    struct todre_cuda_scope sc;
    /* Everything below lives in the instance's context: without it, leak
     * rather than free another context's handles. */
    if (be->cu_ctx && todre_cuda_enter(be, &sc, NULL) == TODRE_OK) {
        /* Queued work still reads the workspace: let it finish before freeing. */
        (void)cudaStreamSynchronize(be->stream);
        todre_cuda_workspace_free(be);
        if (be->blas) cublasDestroy(be->blas);
        if (be->blas_ws) cudaFree(be->blas_ws);
        if (be->nonfinite_dev) cudaFree(be->nonfinite_dev);
        if (be->nonfinite_host) cudaFreeHost(be->nonfinite_host);
        (void)cudaGetLastError();
        todre_cuda_leave(&sc);
    }
    if (be->cu_ctx) (void)drv.primary_release(be->cu_dev);
    free(be);
}

static const struct todre_backend_ops cuda_ops = {
    TODRE_BACKEND_ABI_VERSION,
    "cuda",
    todre_cuda_select,
    todre_cuda_relevance_probs,
    todre_cuda_relevance_qk,
    cuda_set_stream,
    cuda_synchronize,
    cuda_mem_alloc,
    cuda_mem_free,
    cuda_mem_copy,
    cuda_trim,
    cuda_destroy,
};

/* ---- registration: availability and devices, without creating state ------------ */

/* The device's properties, or BACKEND_UNAVAILABLE when it cannot run the
 * module (query failed, compute capability below 8.0). Creates nothing. */
static todre_status check_device(int device, int count, cudaDeviceProp *prop,
                                 struct todre_diag *diag)
{
    cudaError_t err = cudaGetDeviceProperties(prop, device);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return todre_diag_set(diag, TODRE_ERR_BACKEND_UNAVAILABLE,
                               "CUDA device %d of %d: %s (%s)", device, count,
                               cudaGetErrorString(err), cudaGetErrorName(err));
    }
    if (prop->major < TODRE_CUDA_MIN_CC_MAJOR)
        return todre_diag_set(diag, TODRE_ERR_BACKEND_UNAVAILABLE,
                               "CUDA device %d (%s) has compute capability %d.%d; libtodre-cuda "
                               "needs 8.0 or newer", device, prop->name, prop->major, prop->minor);
    return TODRE_OK;
}

/* cudaGetDeviceCount initialises the driver but creates no context, so this
 * is the cheap availability query. The count is of CUDA ordinals (context
 * device indices are CUDA's); it is 0 when no device has compute capability
 * 8.0, and then the reason names the first device. */
static todre_status reg_device_count(int *count, struct todre_diag *diag)
{
    int n = 0;
    *count = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaErrorInsufficientDriver) {
        (void)cudaGetLastError();
        /* 0 when no driver is installed (no libcuda.so.1). */
        int have = 0;
        if (cudaDriverGetVersion(&have) != cudaSuccess) have = 0;
        (void)cudaGetLastError();
        char need[96];
        driver_need(need, sizeof need);
        if (have <= 0)
            return todre_diag_set(diag, TODRE_ERR_BACKEND_UNAVAILABLE,
                                   "no CUDA driver is installed (libcuda.so.1 not found); this "
                                   "module needs one (%s) (%s)", need, cudaGetErrorName(err));
        return todre_diag_set(diag, TODRE_ERR_BACKEND_UNAVAILABLE,
                               "the CUDA driver is older than this module needs (%s); the "
                               "installed driver supports CUDA %d.%d (%s)", need, have / 1000,
                               (have % 1000) / 10, cudaGetErrorName(err));
    }
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return todre_diag_set(diag, TODRE_ERR_BACKEND_UNAVAILABLE,
                               "no usable CUDA driver or device: %s (%s)",
                               cudaGetErrorString(err), cudaGetErrorName(err));
    }
    if (n <= 0)
        return todre_diag_set(diag, TODRE_ERR_BACKEND_UNAVAILABLE,
                               "the CUDA driver reports no devices");
    cudaDeviceProp prop;
    for (int d = 0; d < n; d++)
        if (check_device(d, n, &prop, NULL) == TODRE_OK) {
            *count = n;
            return TODRE_OK;
        }
    return check_device(0, n, &prop, diag);
}

static todre_status reg_device_props(int device, struct todre_backend_device_props *props,
                                     struct todre_diag *diag)
{
    cudaDeviceProp prop;
    cudaError_t err = cudaGetDeviceProperties(&prop, device);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return todre_diag_set(diag, err == cudaErrorInvalidDevice ? TODRE_ERR_INVALID_ARGUMENT
                                                                  : TODRE_ERR_BACKEND_UNAVAILABLE,
                               "device: CUDA device %d: %s (%s)", device, cudaGetErrorString(err),
                               cudaGetErrorName(err));
    }
    memset(props, 0, sizeof *props);
    snprintf(props->name, sizeof props->name, "%s", prop.name);
    snprintf(props->arch, sizeof props->arch, "sm_%d%d", prop.major, prop.minor);
    props->total_memory = (int64_t)prop.totalGlobalMem;
    props->compute_major = prop.major;
    props->compute_minor = prop.minor;
    props->cores = prop.multiProcessorCount;
    return TODRE_OK;
}

/* ---- instance creation --------------------------------------------------------- */

static todre_status init_resources(struct todre_cuda_backend *be, struct todre_diag *diag)
{
    int dev = be->base.device;
    cudaError_t err = cudaDeviceGetAttribute(&be->sm_count, cudaDevAttrMultiProcessorCount, dev);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&be->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&be->coop_supported, cudaDevAttrCooperativeLaunch, dev);
    if (err != cudaSuccess) return todre_cuda_fail(diag, err, "querying the device");
    err = todre_cuda_select_kernels_init(be->smem_optin);
    if (err == cudaSuccess) err = todre_cuda_relevance_kernels_init(be->smem_optin);
    if (err != cudaSuccess) return todre_cuda_fail(diag, err, "configuring kernels");

    cublasStatus_t bst = cublasCreate(&be->blas);
    if (bst != CUBLAS_STATUS_SUCCESS) {
        be->blas = NULL;
        return todre_cublas_fail(diag, bst, "cublasCreate");
    }
    /* A fixed workspace keeps cuBLAS from allocating on the hot path
     * (32 MiB is NVIDIA's recommendation for Hopper). */
    be->blas_ws_size = (size_t)32 << 20;
    err = cudaMalloc(&be->blas_ws, be->blas_ws_size);
    if (err != cudaSuccess) {
        be->blas_ws = NULL;
        return todre_cuda_fail(diag, err, "cudaMalloc (cuBLAS workspace)");
    }
    /* Stream first: cublasSetStream() resets the workspace. */
    bst = cublasSetStream(be->blas, be->stream);
    if (bst == CUBLAS_STATUS_SUCCESS) bst = cublasSetWorkspace(be->blas, be->blas_ws, be->blas_ws_size);
    /* Bitwise-reproducible GEMMs: no atomics-based reductions. */
    if (bst == CUBLAS_STATUS_SUCCESS) bst = cublasSetAtomicsMode(be->blas, CUBLAS_ATOMICS_NOT_ALLOWED);
    if (bst != CUBLAS_STATUS_SUCCESS) return todre_cublas_fail(diag, bst, "configuring cuBLAS");

    err = cudaMalloc((void **)&be->nonfinite_dev, sizeof(int));
    /* Ordered before every later call: set_stream() chains streams. */
    if (err == cudaSuccess) err = cudaMemsetAsync(be->nonfinite_dev, 0, sizeof(int), be->stream);
    if (err != cudaSuccess) return todre_cuda_fail(diag, err, "allocating the non-finite flag");
    err = cudaMallocHost((void **)&be->nonfinite_host, sizeof(int));
    if (err != cudaSuccess) {
        be->nonfinite_host = NULL;
        return todre_cuda_fail(diag, err, "cudaMallocHost");
    }
    *be->nonfinite_host = 0;
    for (int i = 0; i < TODRE_CUDA_RING; i++) {
        err = cudaEventCreateWithFlags(&be->ring[i].done, cudaEventDisableTiming);
        if (err != cudaSuccess) {
            be->ring[i].done = NULL;
            return todre_cuda_fail(diag, err, "cudaEventCreate");
        }
    }
    err = cudaGetLastError();
    if (err != cudaSuccess) return todre_cuda_fail(diag, err, "initialising the device");
    return TODRE_OK;
}

/* What the core's planner (src/select_plan.c) may choose on this device and
 * what it costs. Rates are rough H100-class figures for one device; only
 * their ratios matter (docs/cuda.md, "Capabilities"):
 *  - GEMV: the cooperative matrix-vector loop streams the set's rows once per
 *    step from HBM, about 2 TB/s achieved (3.35 TB/s peak);
 *  - GRAM from f32: cuBLAS in strict FP32 (no TF32), about 25 TFMA/s achieved
 *    (33.5 peak);
 *  - GRAM from f16 / bf16: tensor cores, about 300 TFMA/s achieved (495
 *    dense peak), declared as the "fast unit" (the planner charges an f16
 *    product 4 of them, its AMX model, so f16 is costed 4x high: this moves
 *    the GEMV / GRAM crossover from k of about n/600 to n/150, both far
 *    below the usual k);
 *  - no packing before a GRAM (cuBLAS reads the rows in place, no padding):
 *    a rate so high that the term vanishes, and rows_batch 0;
 *  - no ROWS strategy.
 * GRAM runs the whole greedy loop in one block whose shared memory holds the
 * cost vector and the inverse norms: gram_max_n is the largest set that fits
 * the device's opt-in shared memory (28928 rows on H100). GEMV is declared
 * only with cooperative launch (every device of compute capability 8.0). */
static void fill_caps(struct todre_cuda_backend *be)
{
    struct todre_backend_caps *c = &be->base.caps;
    memset(c, 0, sizeof *c);
    c->strategies = 1u << TODRE_STRATEGY_GRAM;
    if (be->coop_supported) c->strategies |= 1u << TODRE_STRATEGY_GEMV;
    c->gram_max_n = todre_cuda_gram_max_n(be->smem_optin);
    /* 0 would mean "no limit" to the planner: no GRAM at all then. */
    if (c->gram_max_n <= 0) c->strategies &= ~(1u << TODRE_STRATEGY_GRAM);
    c->gemv_bytes_per_ns = 2000.0;
    c->gram_fma_per_ns = 25000.0;
    c->gram_fast_fma_per_ns = 300000.0;
    c->pack_bytes_per_ns = 1e9;
    c->rows_batch = 0;
    c->rows_row_bytes_per_n = 0;
}

static todre_status reg_create(int device, struct todre_backend **out, struct todre_diag *diag)
{
    if (!out) return todre_diag_set(diag, TODRE_ERR_INVALID_ARGUMENT, "out: NULL");
    *out = NULL;
    int count;
    todre_status st = reg_device_count(&count, diag);
    if (st != TODRE_OK) return st;
    if (device < 0 || device >= count)
        return todre_diag_set(diag, TODRE_ERR_INVALID_ARGUMENT,
                               "device: %d is not a CUDA device ordinal (this machine has %d)",
                               device, count);
    cudaDeviceProp prop;
    st = check_device(device, count, &prop, diag);
    if (st != TODRE_OK) return st;

    st = drv_ready(diag);
    if (st != TODRE_OK) return st;
    int cudev = 0;
    int res = drv.device_get(&cudev, device);
    if (res != 0) return drv_fail(diag, res, "cuDeviceGet");

    struct todre_cuda_backend *be =
        (struct todre_cuda_backend *)calloc(1, sizeof(struct todre_cuda_backend));
    if (!be) return todre_diag_set(diag, TODRE_ERR_OUT_OF_MEMORY, "allocating the CUDA backend");
    be->base.ops = &cuda_ops;
    be->base.device_type = TODRE_DEVICE_CUDA;
    be->base.device = device;
    be->stream = NULL;
    /* The device's primary context (the runtime's, shared with e.g. PyTorch),
     * held until the instance is destroyed. */
    res = drv.primary_retain(&be->cu_ctx, cudev);
    if (res != 0) {
        free(be);
        return res == 2 ? todre_diag_set(diag, TODRE_ERR_OUT_OF_MEMORY,
                                         "cuDevicePrimaryCtxRetain: out of memory")
                        : drv_fail(diag, res, "cuDevicePrimaryCtxRetain");
    }
    be->cu_dev = cudev;

    struct todre_cuda_scope sc;
    st = todre_cuda_enter(be, &sc, diag);
    if (st != TODRE_OK) {
        cuda_destroy(&be->base);
        return st;
    }
    st = init_resources(be, diag);
    todre_cuda_leave(&sc);
    if (st != TODRE_OK) {
        cuda_destroy(&be->base);
        return st;
    }
    fill_caps(be);
    *out = &be->base;
    return TODRE_OK;
}

static const struct todre_backend_reg cuda_reg = {
    TODRE_BACKEND_ABI_VERSION,
    "cuda",
    kDLCUDA,
    reg_device_count,
    reg_device_props,
    reg_create,
};

/* ---- the one exported symbol ---------------------------------------------------- */

TODRE_MODULE_EXPORT const struct todre_backend_reg *
todre_backend_module_register(uint32_t abi_version, struct todre_diag *diag)
{
    if (abi_version != TODRE_BACKEND_ABI_VERSION) {
        todre_diag_set(diag, TODRE_ERR_BACKEND_UNAVAILABLE,
                       "libtodre-cuda was built for backend ABI %u, the core uses %u "
                       "(install matching versions)",
                       (unsigned)TODRE_BACKEND_ABI_VERSION, (unsigned)abi_version);
        return NULL;
    }
    return &cuda_reg;
}
