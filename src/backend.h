/*
 * The backend dispatch table. Internal: never installed.
 *
 * Data flows one way: public call (src/api_*.c) -> validation in the core ->
 * a fully resolved job struct below -> the context's backend table -> kernels.
 * Backends never validate user arguments again (the core has checked ranks,
 * shapes, strides, devices, budgets and ranges) and never see each other.
 * The only input property a backend checks is finiteness of the data, since
 * only the backend can read device memory cheaply.
 *
 * The CPU backend is linked into libtodre; the CUDA backend is a separate
 * module (libtodre-cuda.so) that the core dlopen()s and that exports the two
 * entry points declared at the end of this file. A module cannot call the
 * core's (hidden) functions, so everything a backend needs is in this file:
 * plain structs, enums from the public header, and a message buffer.
 */
#ifndef TODRE_SRC_BACKEND_H
#define TODRE_SRC_BACKEND_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "todre/todre.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any change to the structs or the table below; the loader refuses
 * a module built against another value. */
#define TODRE_BACKEND_ABI_VERSION 1u

/* Where a backend writes the detail text of a failure (NUL-terminated,
 * truncated to cap). The core copies it into the context's message. */
struct todre_diag {
    char *buf;
    size_t cap;
};

/* Write a failure's detail into diag (when there is room) and return st, so
 * that a kernel can `return todre_diag_set(diag, TODRE_ERR_..., "...", ...)`. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline todre_status todre_diag_set(struct todre_diag *diag, todre_status st,
                                          const char *fmt, ...)
{
    if (diag && diag->buf && diag->cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(diag->buf, diag->cap, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* Context parameters the backend honours; the core writes them (validated)
 * into todre_backend.params, the backend reads them at each call. */
enum todre_select_strategy {
    TODRE_STRATEGY_AUTO = 0,
    TODRE_STRATEGY_GEMV = 1,
    TODRE_STRATEGY_GRAM = 2,
    TODRE_STRATEGY_ROWS = 3 /* speculative Gram rows; GRAM where unsupported */
};

struct todre_backend_params {
    int64_t workspace_limit; /* bytes a strategy may use beyond O(n*d) */
    int64_t strategy;        /* enum todre_select_strategy */
    int64_t num_threads;     /* 0 = all */
};

/* ---- stage 1 ----------------------------------------------------------- */

/* One selection call over nseg token sets (nseg = 1 for todre_select). Every
 * pointer is valid and every value in range; host pointers are marked. */
struct todre_select_job {
    /* Embeddings: element (r, c) of the concatenated [N, d] array, r a global
     * row, is at emb + r * emb_row_stride + c (elements; inner stride 1). */
    const void *emb;
    todre_dtype emb_dtype; /* F32, F16 or BF16 */
    int64_t d;             /* >= 1 */
    int64_t emb_row_stride;

    /* CLS attention, NULL when not given. Element for global row r is at
     * cls + (r / cls_inner) * cls_outer_stride + (r % cls_inner) * cls_inner_stride
     * (a flat [N] map has cls_inner = N, outer stride 0; a video map
     * [frames, t] has cls_inner = t). */
    const void *cls;
    todre_dtype cls_dtype; /* F32, F16 or BF16 */
    int64_t cls_inner;
    int64_t cls_outer_stride;
    int64_t cls_inner_stride;

    /* Segments (host): set b is global rows [seg_offsets[b], seg_offsets[b+1]),
     * non-empty; it keeps seg_k[b] (1..n_b) indices, written at
     * out_offsets[b] .. out_offsets[b+1]. */
    int64_t nseg;
    const int64_t *seg_offsets;
    const int64_t *seg_k;
    const int64_t *out_offsets;

    todre_objective objective;
    /* Resolved pivot: never AUTO. For CLS_TOPK unused. CLS implies cls != NULL. */
    todre_pivot pivot;
    /* Pivot range relative to each set: [pivot_lo, pivot_hi or n_b). The core
     * has checked 0 <= lo < hi_b <= n_b for every set. */
    int64_t pivot_lo;
    int64_t pivot_hi; /* -1 = the set's n */
    uint64_t seed;

    /* Outputs, in the context's device memory, int64, local indices (0..n_b-1).
     * out_sel: selection order (first = pivot); out_pos: ascending positions.
     * Either may be NULL, not both. */
    int64_t *out_sel;
    int64_t *out_pos;
};

/* ---- stage 2 ----------------------------------------------------------- */

/* The four sums per sequence a relevance job produces (host doubles):
 *   sums[4*b + 0] = sum over h, text queries i, visual keys j   of A[h,i,j]
 *   sums[4*b + 1] = sum over h, text queries i, all keys j      of A[h,i,j]
 *   sums[4*b + 2] = sum over h, visual queries i, text keys j   of A[h,i,j]
 *   sums[4*b + 3] = sum over h, visual queries i, all keys j    of A[h,i,j]
 * The core turns them into ratios and decisions. */
enum { TODRE_SUM_T2V_NUM = 0, TODRE_SUM_T2V_DEN = 1, TODRE_SUM_V2T_NUM = 2,
       TODRE_SUM_V2T_DEN = 3, TODRE_NUM_SUMS = 4 };

struct todre_relevance_common {
    int64_t B, H, Q, K;     /* queries are positions K-Q .. K-1 */
    const uint8_t *types;   /* host [B, K] contiguous, values todre_token_type */
    const uint8_t *active;  /* host [B]: 0 = skip this sequence (sums untouched) */
    double *sums;           /* host [B, 4], zeroed by the core */
};

struct todre_relevance_probs_job {
    struct todre_relevance_common c;
    const void *attn; /* element (b,h,i,j) at attn + b*s_b + h*s_h + i*s_q + j*s_k */
    todre_dtype dtype;
    int64_t s_b, s_h, s_q, s_k;
};

struct todre_relevance_qk_job {
    struct todre_relevance_common c;
    int64_t H_kv, dh; /* H % H_kv == 0; query head h uses key head h / (H / H_kv) */
    const void *q;    /* (b,h,i,e) at q + b*qs_b + h*qs_h + i*qs_q + e*qs_d */
    const void *k;    /* (b,g,j,e) at k + b*ks_b + g*ks_h + j*ks_k + e*ks_d */
    todre_dtype dtype;
    int64_t qs_b, qs_h, qs_q, qs_d;
    int64_t ks_b, ks_h, ks_k, ks_d;
    double scale;     /* > 0 */
};

/* ---- the table --------------------------------------------------------- */

struct todre_backend;

struct todre_backend_ops {
    uint32_t abi_version;  /* TODRE_BACKEND_ABI_VERSION */
    const char *name;      /* "cpu", "cuda" */

    /* Stage 1 over all segments of the job. Required. */
    todre_status (*select)(struct todre_backend *be, const struct todre_select_job *job,
                           struct todre_diag *diag);
    /* Stage 2 sums from probabilities. Required. */
    todre_status (*relevance_probs)(struct todre_backend *be,
                                    const struct todre_relevance_probs_job *job,
                                    struct todre_diag *diag);
    /* Stage 2 sums from Q and K (online softmax). Required. */
    todre_status (*relevance_qk)(struct todre_backend *be,
                                 const struct todre_relevance_qk_job *job,
                                 struct todre_diag *diag);
    /* Optional: NULL = only a NULL stream is accepted. */
    todre_status (*set_stream)(struct todre_backend *be, void *stream,
                               struct todre_diag *diag);
    /* Optional: NULL = no-op (synchronous backend). */
    todre_status (*synchronize)(struct todre_backend *be, struct todre_diag *diag);
    /* Required. Frees the instance and its workspace. */
    void (*destroy)(struct todre_backend *be);
};

/* Every backend instance starts with this header (its own state follows). */
struct todre_backend {
    const struct todre_backend_ops *ops;
    todre_device_type device_type; /* where its tensors must live */
    int device;                    /* device ordinal (0 for host) */
    struct todre_backend_params params;
};

/* ---- the CPU backend (linked in) ---------------------------------------- */

todre_status todre_cpu_backend_create(struct todre_backend **out, struct todre_diag *diag);

/* ---- module entry points (exported by a dlopen'ed backend module) --------- */

/* Tell whether the module can run here (driver, device count). Returns
 * TODRE_OK or TODRE_ERR_BACKEND_UNAVAILABLE with the reason in diag. */
typedef todre_status (*todre_module_probe_fn)(uint32_t abi_version, struct todre_diag *diag);
#define TODRE_MODULE_PROBE_SYMBOL "todre_backend_module_probe"

/* Create an instance on device @p device. */
typedef todre_status (*todre_module_init_fn)(uint32_t abi_version, int device,
                                             struct todre_backend **out,
                                             struct todre_diag *diag);
#define TODRE_MODULE_INIT_SYMBOL "todre_backend_module_init"

#ifdef __cplusplus
}
#endif

#endif /* TODRE_SRC_BACKEND_H */
