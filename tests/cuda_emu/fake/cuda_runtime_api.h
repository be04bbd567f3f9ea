/* CPU emulation of the CUDA runtime API (host side), for tests only.
 *
 * Just the calls libtodre-cuda and its tests make, with the documented
 * semantics that matter for them: device memory is host memory handed out
 * by cudaMalloc() and tracked, so cudaPointerGetAttributes() tells device,
 * pinned and plain host memory apart; work queued on a stream (kernels,
 * asynchronous copies from pinned memory, memsets, cuBLAS, CUB) runs later,
 * at the next point where the host waits, so code that reads results
 * before synchronising sees stale data, as on a GPU. All streams share one
 * queue: ordering between streams is stronger than on a GPU.
 *
 * Contexts follow the runtime / driver model of CUDA 12 and newer: each
 * thread has a current context (none at first) and a runtime device (0 at
 * first); cudaSetDevice() makes the device's primary context current,
 * initialising it; a call that needs a context on a thread with none binds
 * the primary context of the thread's device; the driver entry points
 * (cudaGetDriverEntryPointByVersion) get and set the current context and
 * retain primary contexts. Streams, events and cuBLAS handles belong to the
 * context that was current when they were made; using them under another
 * context is reported. Streams can be captured (cudaStreamBeginCapture):
 * work queued on a capturing stream is recorded, not run, and counted.
 *
 * Implemented in tests/cuda_emu/rt/emu_rt.cpp (libtodre_cudaemu.so). C and
 * C++ both include this header. */
#ifndef TODRE_EMU_CUDA_RUNTIME_API_H
#define TODRE_EMU_CUDA_RUNTIME_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInsufficientDriver = 35,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorSymbolNotFound = 500,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorCooperativeLaunchTooLarge = 720,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureImplicit = 906
} cudaError_t;

/* The runtime this emulator stands for (CUDA 13.0). */
#define CUDART_VERSION 13000

enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2
};

enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
};

enum cudaDriverEntryPointQueryResult {
    cudaDriverEntryPointSuccess = 0,
    cudaDriverEntryPointSymbolNotFound = 1,
    cudaDriverEntryPointVersionNotSufficent = 2
};
#define cudaEnableDefault 0x0

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3
};

struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
};
typedef struct cudaPointerAttributes cudaPointerAttributes;

enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrCooperativeLaunch = 95,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8
};

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int maxThreadsPerBlock;
    int multiProcessorCount;
    int major;
    int minor;
};
typedef struct cudaDeviceProp cudaDeviceProp;

#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
#define cudaEventDefault 0x0
#define cudaEventDisableTiming 0x2

const char *cudaGetErrorString(cudaError_t err);
const char *cudaGetErrorName(cudaError_t err);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

/* TODRE_EMU_DRIVER_VERSION (default 13000, as cudaDriverGetVersion reports
 * it): below CUDART_VERSION, the driver is too old for this runtime and
 * every call that needs it fails with cudaErrorInsufficientDriver. */
cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize(void);

cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMallocHost(void **ptr, size_t bytes);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr);

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemset(void *dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream);

cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
/* A stream captures between cudaStreamBeginCapture and cudaStreamEndCapture
 * (the graph is empty: captured work is only counted); every stream reports
 * capture while TODRE_EMU_CAPTURING=1. Asking about the legacy stream while
 * a blocking stream captures (global or thread-local mode) fails with
 * cudaErrorStreamCaptureImplicit, as on CUDA. */
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);

cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);

/* Driver entry points: cuCtxGetCurrent, cuCtxSetCurrent, cuDeviceGet,
 * cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease (CUresult is an int,
 * CUcontext a pointer, CUdevice an int). */
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **func, unsigned version,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status);

/* ---- emulator only ---------------------------------------------------- */

/* What the hot-path requirement is about (allocations and host waits), and
 * what creating a backend instance costs (handles, events), which the
 * registry's availability queries must not pay. */
struct todre_emu_counters {
    uint64_t device_allocs;  /* cudaMalloc */
    uint64_t host_allocs;    /* cudaMallocHost */
    uint64_t host_waits;     /* synchronise or blocking copy while work was queued */
    uint64_t launches;       /* kernels, cooperative included */
    uint64_t blas_calls;     /* cuBLAS GEMMs */
    uint64_t violations;     /* contract breaches the emulator found (also on stderr) */
    uint64_t blas_handles;   /* cublasCreate */
    uint64_t events;         /* cudaEventCreate / cudaEventCreateWithFlags */
    uint64_t device_queries; /* cudaGetDeviceCount / cudaGetDeviceProperties */
    uint64_t capture_ops;    /* work, event records and waits on a capturing stream */
    uint64_t primary_inits;  /* primary contexts initialised */
    uint64_t device_alloc_max; /* largest cudaMalloc since todre_emu_reset_alloc_max() */
};
void todre_emu_get_counters(struct todre_emu_counters *out);
void todre_emu_reset_alloc_max(void);

/* The emulated driver's contexts, for tests: the calling thread's current
 * context (NULL: none), a new non-primary context on @p device made
 * current (as cuCtxCreate), and whether @p device's primary context is
 * initialised. */
void *todre_emu_ctx_get_current(void);
void todre_emu_ctx_set_current(void *ctx);
void *todre_emu_ctx_create(int device);
int todre_emu_primary_active(int device);
int todre_emu_primary_retains(int device); /* outstanding cuDevicePrimaryCtxRetain */


#ifdef __cplusplus
}
#endif

#endif
