/* Internal interface of the CUDA backend module (libtodre-cuda.so): the
 * instance struct, its device workspace and pinned staging ring, error
 * helpers, and the entry points of the stage-1 and stage-2 drivers.
 *
 * Everything here is hidden (-fvisibility=hidden plus a version script):
 * the module exports only todre_backend_module_register (src/backend.h). */
#ifndef TODRE_SRC_CUDA_INTERNAL_H
#define TODRE_SRC_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "../backend.h"

/* Device buffers, one per purpose so that no two kernels of one call alias.
 * Each grows (never shrinks) and is reused: after the first call of a given
 * size, the hot path allocates nothing. */
enum todre_cuda_buf_id {
    TODRE_CUDA_BUF_SEGS = 0,     /* staged segment table (stage 1) or types (stage 2) */
    TODRE_CUDA_BUF_INV,          /* float[N]: 1 / ||e_r|| (0 for a zero row) */
    TODRE_CUDA_BUF_FLAGS,        /* int[nseg]: per-set non-finite flags (sticky one: nonfinite_dev) */
    TODRE_CUDA_BUF_SCORE,        /* float[N]: pivot scores */
    TODRE_CUDA_BUF_CLS,          /* float[N]: the CLS map as float */
    TODRE_CUDA_BUF_PIVOT,        /* int[nseg]: resolved pivots (local) */
    TODRE_CUDA_BUF_MU,           /* float: centre partial sums and means */
    TODRE_CUDA_BUF_GRAM,         /* float: Gram matrices / ISOLATED panels (bounded by the limit) */
    TODRE_CUDA_BUF_COST,         /* float[N]: greedy state of the matrix-vector path */
    TODRE_CUDA_BUF_KEYS,         /* u64[3 * nseg]: argmin keys of the matrix-vector path */
    TODRE_CUDA_BUF_SEL,          /* int64[K]: selection order when the caller wants only positions */
    TODRE_CUDA_BUF_FLAGMAP,      /* u8[N]: membership map for the position order */
    TODRE_CUDA_BUF_SORT_IN,      /* u64[N]: CLS_TOPK keys (set, value) */
    TODRE_CUDA_BUF_SORT_OUT,     /* u64[N] */
    TODRE_CUDA_BUF_SORT_VAL,     /* u32[2N]: local row indices, in and out of the sort */
    TODRE_CUDA_BUF_SORT_TMP,     /* CUB temporary storage */
    TODRE_CUDA_BUF_REL_ROWS,     /* double: stage-2 per-row / per-tile partial sums */
    TODRE_CUDA_BUF_REL_SUMS,     /* double[4 * B + 1] (last: non-finite flag) */
    TODRE_CUDA_BUF_COUNT
};

struct todre_cuda_buf {
    void *ptr;
    size_t cap;
};

/* Pinned host staging: a small ring so that a call never overwrites a slot
 * whose host-to-device copy is still queued behind earlier work. */
#define TODRE_CUDA_RING 4
struct todre_cuda_stage {
    void *host;
    size_t cap;
    cudaEvent_t done; /* recorded after the copy out of this slot */
    int used;         /* done has been recorded at least once */
};

struct todre_cuda_backend {
    struct todre_backend base; /* first: the core sees only this */
    void *cu_ctx;              /* CUcontext: the device's primary context, retained */
    int cu_dev;                /* CUdevice of base.device */
    cudaStream_t stream;       /* NULL = legacy default stream */
    cublasHandle_t blas;
    void *blas_ws;             /* cuBLAS workspace (fixed, so cuBLAS never allocates) */
    size_t blas_ws_size;
    int sm_count;
    int smem_optin;            /* max dynamic shared memory per block (bytes) */
    int coop_supported;
    struct todre_cuda_buf buf[TODRE_CUDA_BUF_COUNT];
    struct todre_cuda_stage ring[TODRE_CUDA_RING];
    int ring_next;
    /* Non-finite input found by an asynchronous select: the device keeps a
     * sticky flag that each call copies here; synchronize() reports it. */
    int *nonfinite_host;       /* pinned int */
    int *nonfinite_dev;        /* int, sticky until reported */
};

/* ---- errors and device scope (module.cu) --------------------------------- */

/* Write "what: <CUDA error text>" into diag and map the error to a status
 * (allocation failures -> OUT_OF_MEMORY, others -> DEVICE). */
todre_status todre_cuda_fail(struct todre_diag *diag, cudaError_t err, const char *what);
todre_status todre_cublas_fail(struct todre_diag *diag, cublasStatus_t st, const char *what);
/* printf-style messages: todre_diag_set() in backend.h. */

/* Early returns inside functions that have a `struct todre_diag *diag`:
 * CK for a CUDA runtime call, CKS for a call returning todre_status. */
#define CK(call, what)                                                  \
    do {                                                                \
        cudaError_t err_ = (call);                                      \
        if (err_ != cudaSuccess) return todre_cuda_fail(diag, err_, what); \
    } while (0)
#define CKS(call)                                  \
    do {                                           \
        todre_status st_ = (call);                 \
        if (st_ != TODRE_OK) return st_;           \
    } while (0)

/* Make the instance's CUDA context (its device's primary context) current
 * for the duration of a call and restore the calling thread's current
 * context afterwards, whatever it was: a non-primary context, another
 * device's, or none (module.cu, through the driver API). */
struct todre_cuda_scope {
    void *prev; /* CUcontext current before the call (NULL: none) */
    int changed;
};
todre_status todre_cuda_enter(struct todre_cuda_backend *be, struct todre_cuda_scope *sc,
                              struct todre_diag *diag);
void todre_cuda_leave(struct todre_cuda_scope *sc);

/* Start of a select / relevance call: todre_cuda_enter(), then drop a
 * launch error the caller's own earlier launch left pending (the launchers
 * report cudaGetLastError(), which must be ours), and refuse a stream under
 * CUDA-graph capture with UNSUPPORTED (a replay would reread pinned staging
 * slots that later calls overwrote). On success, todre_cuda_leave() ends
 * the call; on failure the scope is already left. */
todre_status todre_cuda_begin_call(struct todre_cuda_backend *be, struct todre_cuda_scope *sc,
                                   struct todre_diag *diag);

/* Reject memory the device cannot use as a CUDA array of this context:
 * host (pageable or pinned) memory or another device's memory. @p name is
 * the public array name used in the message. */
todre_status todre_cuda_check_pointer(struct todre_cuda_backend *be, const void *ptr,
                                      const char *name, struct todre_diag *diag);

/* ---- workspace (workspace.cu) -------------------------------------------- */

/* Device buffer @p id with room for @p bytes (contents unspecified). */
todre_status todre_cuda_buf(struct todre_cuda_backend *be, enum todre_cuda_buf_id id,
                            size_t bytes, void **out, struct todre_diag *diag);
/* A pinned staging slot of at least @p bytes, free to overwrite now. After
 * queueing the copy out of it, call todre_cuda_stage_release(). */
todre_status todre_cuda_stage_acquire(struct todre_cuda_backend *be, size_t bytes,
                                      struct todre_cuda_stage **out, struct todre_diag *diag);
todre_status todre_cuda_stage_release(struct todre_cuda_backend *be, struct todre_cuda_stage *s,
                                      struct todre_diag *diag);
/* Copy @p bytes from host memory @p src to device buffer @p id through a
 * staging slot, asynchronously on the backend's stream. */
todre_status todre_cuda_upload(struct todre_cuda_backend *be, enum todre_cuda_buf_id id,
                               const void *src, size_t bytes, void **dev_out,
                               struct todre_diag *diag);
/* Free the device buffers and the staging memory after the queued work
 * (todre_context_reset STATE); the next call grows them again. The staging
 * events, the cuBLAS workspace and the non-finite flag stay. */
void todre_cuda_workspace_trim(struct todre_cuda_backend *be);
/* Free everything todre_cuda_workspace_trim() does, and the staging events. */
void todre_cuda_workspace_free(struct todre_cuda_backend *be);

/* ---- drivers ---------------------------------------------------------------- */

/* Largest set the Gram strategy can run with @p smem_optin bytes of opt-in
 * shared memory per block (select.cu): the backend's caps.gram_max_n. */
int64_t todre_cuda_gram_max_n(int smem_optin);

todre_status todre_cuda_select(struct todre_backend *be, const struct todre_select_job *job,
                               struct todre_diag *diag);
todre_status todre_cuda_relevance_probs(struct todre_backend *be,
                                        const struct todre_relevance_probs_job *job,
                                        struct todre_diag *diag);
todre_status todre_cuda_relevance_qk(struct todre_backend *be,
                                     const struct todre_relevance_qk_job *job,
                                     struct todre_diag *diag);

/* Kernel attributes that must be set once per device (select_kernels.cu,
 * relevance_kernels.cu): opt-in shared memory sizes. */
cudaError_t todre_cuda_select_kernels_init(int smem_optin);
cudaError_t todre_cuda_relevance_kernels_init(int smem_optin);

#endif /* TODRE_SRC_CUDA_INTERNAL_H */
