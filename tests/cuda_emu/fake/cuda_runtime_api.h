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
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorCooperativeLaunchTooLarge = 720,
    cudaErrorStreamCaptureImplicit = 906
} cudaError_t;

enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2
};

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

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
/* Emulated streams are never captured, unless TODRE_EMU_CAPTURING=1. */
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);

cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);

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
};
void todre_emu_get_counters(struct todre_emu_counters *out);

#ifdef __cplusplus
}
#endif

#endif
