/*
 * The backend dispatch table. Internal: never installed.
 *
 * Data flows one way: public call (src/api_*.c) -> validation in the core ->
 * a fully resolved job struct below -> the context's backend table -> kernels.
 * Backends never validate user arguments again (the core has checked ranks,
 * shapes, strides, devices, budgets and ranges) and never see each other.
 * What the core guarantees every job, so that a backend's own size products
 * cannot overflow: every array's strided extent is at most 2^56 bytes and
 * does not wrap the address space; batch B and layer count L are at most
 * 2^20, heads H at most 2^20, B * H * Q * K fits int64; a planned Gram
 * matrix's n * n * 4 bytes fit int64 and size_t.
 * The only input property a backend checks is finiteness of the data, since
 * only the backend can read device memory cheaply.
 *
 * The core decides, backends execute: everything that does not depend on
 * reading the data (the RANDOM pivot, the pivot range, the stage-1 strategy
 * and its memory budget per set, from the backend's declared capabilities)
 * is resolved once in the core (src/select.c, src/select_plan.c) and
 * written into the job.
 *
 * The CPU backend is linked into libtodre; other backends are modules
 * (libtodre-<name>.so) that the core's registry (src/loader.c) dlopen()s and
 * that export the one entry point declared at the end of this file. A module
 * cannot call the core's (hidden) functions, so everything a backend needs
 * is in this file and dtype.h: plain structs, enums, and a message buffer.
 */
#ifndef TODRE_SRC_BACKEND_H
#define TODRE_SRC_BACKEND_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "todre/todre.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any change to the structs or the table below; the loader refuses
 * a module built against another value. 3: caps.rows_fma_batch and
 * caps.rows_fast_dtypes (a core reading them from a module built before
 * would read past its caps). 4: params.rows_made. 5: caps.fma_dp_dtypes.
 * 6: the select job's seg_index_base, out_scores and out_steps. */
#define TODRE_BACKEND_ABI_VERSION 6u

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

/* Stage-1 strategies. AUTO exists only as the requested value (the
 * experimental context parameter); a job's plan never holds it. */
enum todre_select_strategy {
    TODRE_STRATEGY_AUTO = 0,
    TODRE_STRATEGY_GEMV = 1, /* one matrix-vector product over the set per step */
    TODRE_STRATEGY_GRAM = 2, /* the set's Gram matrix up front */
    TODRE_STRATEGY_ROWS = 3  /* speculative Gram rows in a bounded store */
};

/* Context parameters the backend honours; the core writes them (validated)
 * into todre_backend.params, the backend reads them at each call. The
 * read-only ones the backend writes and the core reads. */
struct todre_backend_params {
    int64_t workspace_limit; /* bytes a strategy may use beyond O(n*d) */
    int64_t strategy;        /* requested enum todre_select_strategy (experimental) */
    int64_t num_threads;     /* 0 = all; bounds the backend's own threads only */
    /* Read-only (experimental): Gram rows the stage-1 call made under ROWS;
     * the core zeroes it before each call, the backend adds to it. */
    int64_t rows_made;
};

/* What a backend instance can do and how fast, declared once at creation;
 * the core's planner (src/select_plan.c) reads it to choose each set's
 * strategy. Rates are per thread-independent unit: only ratios matter;
 * a rate <= 0 means "not measured": that strategy costs infinity for AUTO. */
struct todre_backend_caps {
    uint32_t strategies;        /* bitmask of 1u << TODRE_STRATEGY_GEMV/GRAM/ROWS */
    int64_t gram_max_n;         /* largest n a GRAM plan may have (device limits); 0 = any */
    double gemv_bytes_per_ns;   /* GEMV: rows streamed */
    double gram_fma_per_ns;     /* GRAM from f32 (BLAS / tensor cores) */
    /* GRAM from f16/bf16 on a unit that multiplies bf16 pairs exactly (AMX):
     * f16 costs 4 products per pair (hi/lo split); 0 = no such unit. */
    double gram_fast_fma_per_ns;
    double pack_bytes_per_ns;   /* conversion / packing before a GRAM */
    /* ROWS: rows made per batch (32 on AMX), also the fast unit's padding of
     * n. ROWS needs the fast unit and a 16-bit dtype. */
    int64_t rows_batch;
    int64_t rows_row_bytes_per_n; /* ROWS: bytes of store per stored row, per token (4) */
    /* ROWS beside a fast unit: > 0 when FMA units also make rows, of the
     * dtypes the fast unit does not take (CPU with AMX: f32), this many per
     * batch, at gram_fma_per_ns (src/select_plan.c); 0 = no such units. */
    int64_t rows_fma_batch;
    /* ROWS: bitmask of 1u << todre_dtype whose rows the fast unit makes;
     * the other dtypes' rows come from the FMA units (rows_fma_batch). 0 =
     * every dtype the fast unit takes (CPU with AMX: bf16 only; f16 rows,
     * through the split, stream 4 bytes a value and ran 1.3-1.45x slower
     * than the AVX-512 FMA kernels: bench/results/cpu-emerald-rapids-2026-11-27-kernels.json). */
    uint32_t rows_fast_dtypes;
    /* Bitmask of 1u << todre_dtype whose products the FMA units (ROWS
     * without a fast unit, and GRAM) make two a lane per instruction, at
     * twice their rate, where d is even (CPU: bf16 by VDPBF16PS,
     * src/cpu/select_rows.c); 0 = none. */
    uint32_t fma_dp_dtypes;
};

/* The core's resolved choice for one token set. */
struct todre_select_plan {
    int32_t strategy;   /* GEMV, GRAM or ROWS, supported by the backend */
    int32_t reserved;
    int64_t store_rows; /* ROWS: rows the store holds (>= rows_batch); else 0 */
};

/* ---- stage 1 ----------------------------------------------------------- */

/* A pivot given by row: what the core turns TODRE_PIVOT_RANDOM into. Not a
 * todre_pivot value (in C++ an enum holds only its enumerators' bit range),
 * so the job stores the pivot as a plain int. */
#define TODRE_PIVOT_FIXED 100

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
    /* Resolved pivot: a todre_pivot value, never AUTO nor RANDOM, or
     * TODRE_PIVOT_FIXED (the core drew it: see seg_pivot). For CLS_TOPK
     * unused. CLS implies cls != NULL. */
    int32_t pivot;
    /* Host [nseg]: under TODRE_PIVOT_FIXED, set b's pivot row (local);
     * otherwise NULL. */
    const int64_t *seg_pivot;
    /* Host [nseg]: the strategy of each set, chosen by the core. */
    const struct todre_select_plan *seg_plan;
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

    /* Host [nseg] or NULL (all 0): added to every index segment b writes to
     * out_sel / out_pos (a group's first row within its set, so that the
     * indices are local to the set). */
    const int64_t *seg_index_base;
    /* Optional per-row outputs in the context's device memory, compact, one
     * entry per global row [0, seg_offsets[nseg]); NULL = not asked for
     * (then nothing is computed). out_scores: float32, the row's objective
     * value against the rows kept in its segment (MAX_SUM: the sum of its
     * similarities to them; MAX_MIN: the largest; CLS_TOPK: its CLS value);
     * out_steps: int64, the place of the row in its segment's selection
     * order, -1 if not kept. Written, like the rest, only on success. */
    float *out_scores;
    int64_t *out_steps;
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
    /* Memory of the backend's device, for todre_context_alloc/free/copy.
     * alloc: >= 256-byte aligned, bytes > 0. free: after the queued work.
     * copy: `bytes` bytes; dst_dev / src_dev say whether each pointer is on
     * the device (1) or host memory (0); ordered after the queued work, and
     * complete on return. Required. */
    todre_status (*mem_alloc)(struct todre_backend *be, size_t bytes, void **ptr,
                              struct todre_diag *diag);
    todre_status (*mem_free)(struct todre_backend *be, void *ptr, struct todre_diag *diag);
    todre_status (*mem_copy)(struct todre_backend *be, void *dst, int dst_dev, const void *src,
                             int src_dev, size_t bytes, struct todre_diag *diag);
    /* Optional: drop cached workspace (todre_context_reset STATE). */
    void (*trim)(struct todre_backend *be);
    /* Required. Frees the instance and its workspace. */
    void (*destroy)(struct todre_backend *be);
};

/* Every backend instance starts with this header (its own state follows). */
struct todre_backend {
    const struct todre_backend_ops *ops;
    todre_device_type device_type; /* where its arrays must live */
    int device;                    /* device ordinal (0 for host) */
    struct todre_backend_params params;
    struct todre_backend_caps caps; /* filled by the backend at creation */
};

/* ---- registration ---------------------------------------------------------- */

/* What a device is, as a backend reports it (the core copies it into the
 * public todre_device_props). */
struct todre_backend_device_props {
    char name[256];
    char arch[64];
    int64_t total_memory;
    int32_t compute_major, compute_minor;
    int32_t cores;
};

/* A backend as the registry knows it: the CPU backend's is built in, a
 * module returns its own from its register entry point. Every function is
 * thread-safe. device_count and device_props must not create heavy state
 * (no library handles, no device memory, no streams): they answer the
 * availability and enumeration queries. */
struct todre_backend_reg {
    uint32_t abi_version;   /* TODRE_BACKEND_ABI_VERSION */
    const char *name;       /* "cpu", "cuda": [a-z0-9_]+, unique */
    int32_t dl_device_type; /* DLDeviceType of its arrays (kDLCPU, kDLCUDA) */
    /* Usable devices; 0 with the reason in diag when none (no driver, ...). */
    todre_status (*device_count)(int *count, struct todre_diag *diag);
    todre_status (*device_props)(int device, struct todre_backend_device_props *props,
                                 struct todre_diag *diag);
    /* Create an instance on @p device (0 <= device < count). */
    todre_status (*create)(int device, struct todre_backend **out, struct todre_diag *diag);
};

/* ---- the CPU backend (linked in) ---------------------------------------- */

extern const struct todre_backend_reg todre_cpu_backend_reg;

/* ---- modules ------------------------------------------------------------- */

/* The one symbol a backend module exports. Returns its registration, or
 * NULL with a reason in diag when built against another abi_version. */
typedef const struct todre_backend_reg *(*todre_module_register_fn)(uint32_t abi_version,
                                                                    struct todre_diag *diag);
#define TODRE_MODULE_REGISTER_SYMBOL "todre_backend_module_register"

#ifdef __cplusplus
}
#endif

#endif /* TODRE_SRC_BACKEND_H */
