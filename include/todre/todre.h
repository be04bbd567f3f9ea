/**
 * @file todre.h
 * @brief libtodre - ToDRE visual token pruning (diversity selection + relevance drop).
 *
 * This header is the whole stable C ABI of libtodre. Everything here follows
 * a few rules, stated once:
 *
 *  - Every fallible function returns a ::todre_status; results come back
 *    through out-pointers, which are left untouched on failure unless stated.
 *  - The library never aborts, exits or prints. On failure the detail text is
 *    available from todre_last_error() (thread-local, every call) and, for
 *    calls that take a context, also from todre_context_last_error().
 *  - Handles are opaque (incomplete structs). No public struct is ever grown.
 *  - Pointers given to the library are borrowed for the duration of the call
 *    unless a function says otherwise; the library keeps no reference to
 *    caller memory after returning, except where documented (tensors).
 *  - Thread-safety: a context, a selection configuration, a relevance handle
 *    or a tensor descriptor is used by one thread at a time. Distinct handles
 *    are fully independent. Functions without a handle are thread-safe.
 *  - Every `destroy` function accepts NULL.
 *
 * Normative semantics: docs/semantics.md (from DESIGN.md sections 2 and 3).
 *
 * Since: 0.1 unless noted.
 */
#ifndef TODRE_TODRE_H
#define TODRE_TODRE_H

#include <stddef.h>
#include <stdint.h>

#include "todre/todre_export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------- */
/* Version                                                                    */
/* ------------------------------------------------------------------------- */

/** Major version: changes only with an incompatible ABI (and the SONAME). */
#define TODRE_VERSION_MAJOR 0
/** Minor version: new functions or enum values, ABI-compatible. */
#define TODRE_VERSION_MINOR 1
/** Patch version: fixes only. */
#define TODRE_VERSION_PATCH 0
/** MAJOR * 10000 + MINOR * 100 + PATCH, e.g. 100 for 0.1.0. */
#define TODRE_VERSION_NUMBER \
    (TODRE_VERSION_MAJOR * 10000 + TODRE_VERSION_MINOR * 100 + TODRE_VERSION_PATCH)
/** The compile-time version as a string. */
#define TODRE_VERSION_STRING "0.1.0"

/** @return the run-time library version as TODRE_VERSION_NUMBER encodes it.
 *  Compare with the compile-time macro to detect a mismatched library. */
TODRE_API unsigned todre_version_number(void);

/** @return the run-time library version as a static "MAJOR.MINOR.PATCH" string. */
TODRE_API const char *todre_version_string(void);

/* ------------------------------------------------------------------------- */
/* Status codes (values pinned forever)                                       */
/* ------------------------------------------------------------------------- */

/** Result of every fallible call. Values are pinned forever. */
typedef enum todre_status {
    TODRE_OK = 0, /**< Success. */
    /** A NULL pointer, out-of-range value, or a wrong dtype / rank / shape /
     *  stride / device. The message names the argument. */
    TODRE_ERR_INVALID_ARGUMENT = 1,
    /** A host or device allocation failed. */
    TODRE_ERR_OUT_OF_MEMORY = 2,
    /** The requested backend cannot run here (not built, no module, no
     *  driver, no device). The message carries the underlying reason. */
    TODRE_ERR_BACKEND_UNAVAILABLE = 3,
    /** NaN or Inf found in an input tensor. */
    TODRE_ERR_NONFINITE = 4,
    /** A valid request this backend / build does not support. */
    TODRE_ERR_UNSUPPORTED = 5,
    /** A device runtime call failed (CUDA error text in the message). */
    TODRE_ERR_DEVICE = 6,
    /** The call is not valid in the handle's current state. */
    TODRE_ERR_STATE = 7,
    /** A bug in libtodre; please report it with the message. */
    TODRE_ERR_INTERNAL = 8
} todre_status;

/** @return a static, human-readable name for a status ("TODRE_OK", ...).
 *  Unknown values give "TODRE_ERR_UNKNOWN". Thread-safe. */
TODRE_API const char *todre_status_string(todre_status status);

/** @return the detail message of the last libtodre call on this thread:
 *  "" if it succeeded. Valid until the next libtodre call on this thread. */
TODRE_API const char *todre_last_error(void);

/* ------------------------------------------------------------------------- */
/* Enumerations (values pinned forever)                                       */
/* ------------------------------------------------------------------------- */

/** Which backend a context runs on. */
typedef enum todre_backend_kind {
    TODRE_BACKEND_AUTO = 0, /**< CUDA if it can run, else CPU (silently). */
    TODRE_BACKEND_CPU = 1,  /**< OpenBLAS, always built in. */
    TODRE_BACKEND_CUDA = 2  /**< cuBLAS + kernels, a dlopen'ed module. */
} todre_backend_kind;

/** Element type of a tensor. */
typedef enum todre_dtype {
    TODRE_DTYPE_F32 = 0,  /**< IEEE binary32. */
    TODRE_DTYPE_F16 = 1,  /**< IEEE binary16. */
    TODRE_DTYPE_BF16 = 2, /**< bfloat16. */
    TODRE_DTYPE_I32 = 3,  /**< int32_t. */
    TODRE_DTYPE_I64 = 4,  /**< int64_t (indices, offsets). */
    TODRE_DTYPE_U8 = 5    /**< uint8_t (token types). */
} todre_dtype;

/** Where a tensor's memory lives. */
typedef enum todre_device_type {
    TODRE_DEVICE_HOST = 0, /**< Host memory (pageable or pinned). */
    TODRE_DEVICE_CUDA = 1  /**< CUDA device memory of one device. */
} todre_device_type;

/** Stage-1 objective. */
typedef enum todre_objective {
    TODRE_OBJECTIVE_MAX_SUM = 0,  /**< ToDRE greedy max-sum diversification (default). */
    TODRE_OBJECTIVE_MAX_MIN = 1,  /**< DivPrune greedy max-min diversity. */
    TODRE_OBJECTIVE_CLS_TOPK = 2  /**< The k largest CLS attentions (FasterVLM-style). */
} todre_objective;

/** Stage-1 pivot (first selected token). */
typedef enum todre_pivot {
    /** MAX_SUM: CLS if a CLS map is given, else CENTER. MAX_MIN: ISOLATED.
     *  CLS_TOPK: not used. */
    TODRE_PIVOT_AUTO = 0,
    TODRE_PIVOT_CLS = 1,      /**< argmax of the CLS attention in the pivot range. */
    TODRE_PIVOT_CENTER = 2,   /**< argmax x_i . mu, mu = mean of normalised rows. */
    TODRE_PIVOT_FARTHEST = 3, /**< argmin x_i . mu. */
    TODRE_PIVOT_RANDOM = 4,   /**< uniform in the range from the seed (portable PRNG). */
    TODRE_PIVOT_ISOLATED = 5  /**< token whose nearest other token is farthest (DivPrune). */
} todre_pivot;

/** Which order the kept indices are written in. */
typedef enum todre_order {
    TODRE_ORDER_POSITION = 0,  /**< ascending token position (default; what a runtime gathers). */
    TODRE_ORDER_SELECTION = 1, /**< greedy selection order, first = pivot. */
    TODRE_ORDER_BOTH = 2       /**< output [2, k]: row 0 selection order, row 1 position order. */
} todre_order;

/** Token type of one sequence position (stage 2), stored as u8. */
typedef enum todre_token_type {
    TODRE_TOKEN_SYSTEM = 0, /**< Before the image (system prompt). */
    TODRE_TOKEN_VISUAL = 1, /**< A visual token. */
    TODRE_TOKEN_TEXT = 2    /**< Question text and anything generated. */
} todre_token_type;

/* ------------------------------------------------------------------------- */
/* Context                                                                    */
/* ------------------------------------------------------------------------- */

/** A context owns one backend instance, its workspace (reused across calls)
 *  and its error message. One thread at a time. */
typedef struct todre_context todre_context;

/** Context parameters, set with todre_context_set_param(). */
typedef enum todre_context_param {
    /** Upper bound in bytes on working memory a strategy may use beyond O(n*d)
     *  (e.g. an n x n Gram matrix). Default 268435456 (256 MiB); range
     *  [0, INT64_MAX]; 0 means only O(n) extra-memory strategies. */
    TODRE_CONTEXT_WORKSPACE_LIMIT = 0,
    /** Stage-1 strategy: 0 = automatic (cost model), 1 = per-step matrix-vector
     *  products, 2 = Gram matrix (still bounded by WORKSPACE_LIMIT; a Gram
     *  request that does not fit falls back to 1), 3 = Gram rows computed
     *  on demand in speculative batches (CPU with AMX; elsewhere as 2; same
     *  memory bound). All give the same selection up to near-ties. Default 0. */
    TODRE_CONTEXT_SELECT_STRATEGY = 1,
    /** Threads the CPU backend may use; 0 = all available (default). A
     *  non-zero value also sets OpenBLAS's process-wide thread count for the
     *  duration of each BLAS call the context makes (restored afterwards), so
     *  use it from one thread at a time across contexts; with 0, OpenBLAS's
     *  own setting (OPENBLAS_NUM_THREADS) is left alone. */
    TODRE_CONTEXT_NUM_THREADS = 2
} todre_context_param;

/** Create a context.
 *  @param kind   backend to use; AUTO picks CUDA when it can run, else CPU.
 *  @param device device index for CUDA (>= 0); ignored for CPU.
 *  @param out    receives the new context; set to NULL on failure.
 *  @return TODRE_OK, TODRE_ERR_INVALID_ARGUMENT, TODRE_ERR_OUT_OF_MEMORY, or
 *          TODRE_ERR_BACKEND_UNAVAILABLE (explicit CUDA that cannot run; the
 *          message from todre_last_error() says why). */
TODRE_API todre_status todre_context_create(todre_backend_kind kind, int device,
                                            todre_context **out);

/** Destroy a context and its workspace. Accepts NULL. For CUDA, waits for
 *  work queued by this context first. */
TODRE_API void todre_context_destroy(todre_context *ctx);

/** @return the backend the context actually runs on (CPU or CUDA, never AUTO)
 *  through @p out. */
TODRE_API todre_status todre_context_backend(const todre_context *ctx,
                                             todre_backend_kind *out);

/** @return the detail message of the last call on @p ctx ("" if it succeeded).
 *  Valid until the next call on @p ctx. Accepts NULL (returns ""). */
TODRE_API const char *todre_context_last_error(const todre_context *ctx);

/** Set a ::todre_context_param. Out-of-range values are rejected. */
TODRE_API todre_status todre_context_set_param(todre_context *ctx, todre_context_param param,
                                               int64_t value);
/** Read a ::todre_context_param. */
TODRE_API todre_status todre_context_get_param(const todre_context *ctx,
                                               todre_context_param param, int64_t *value);

/** Set the CUDA stream (a `cudaStream_t` passed as `void *`; NULL = the
 *  default stream) that the context enqueues its work on. CPU contexts accept
 *  only NULL. Results written to device memory are ready when that stream
 *  reaches the point after the call (or after todre_context_synchronize()). */
TODRE_API todre_status todre_context_set_stream(todre_context *ctx, void *stream);

/** Block until all work queued by @p ctx has finished (no-op on CPU). */
TODRE_API todre_status todre_context_synchronize(todre_context *ctx);

/** Tell whether a backend can run here, without creating a context.
 *  @param kind      the backend to ask about (AUTO and CPU: always 1).
 *  @param available receives 1 or 0; when 0, todre_last_error() says why.
 *  Loads the CUDA module on first use. Thread-safe. */
TODRE_API todre_status todre_backend_available(todre_backend_kind kind, int *available);

/* ------------------------------------------------------------------------- */
/* Tensor descriptors                                                         */
/* ------------------------------------------------------------------------- */

/** A non-owning view of caller memory: data pointer, dtype, device, shape and
 *  strides (in elements). The memory must stay valid while a call uses it. */
typedef struct todre_tensor todre_tensor;

/** Largest rank a descriptor can have. */
#define TODRE_MAX_RANK 8

/** Create a descriptor.
 *  @param data    first element (may be NULL only if some shape entry is 0).
 *  @param dtype   element type.
 *  @param device  where @p data lives.
 *  @param rank    number of dimensions, 0..TODRE_MAX_RANK.
 *  @param shape   @p rank extents (>= 0); may be NULL when rank is 0.
 *  @param strides per-dimension strides in elements (may be NULL: C-contiguous).
 *                 Negative strides are rejected.
 *  @param device_index CUDA device ordinal (0 for host).
 *  @param out     receives the descriptor. */
TODRE_API todre_status todre_tensor_create(void *data, todre_dtype dtype,
                                           todre_device_type device, int device_index,
                                           int rank, const int64_t *shape,
                                           const int64_t *strides, todre_tensor **out);

/** Create a descriptor from a DLPack tensor.
 *  @param dl_tensor a `const DLTensor *` (DLPack >= 0.5 layout, i.e. the
 *         `dl_tensor` field of a DLManagedTensor or DLManagedTensorVersioned).
 *         Supported: kDLCPU / kDLCUDAHost (host), kDLCUDA / kDLCUDAManaged
 *         (CUDA); float16/32, bfloat16, int32/64, uint8 and bool, lanes 1.
 *         Shape, strides and byte_offset are copied; data is borrowed.
 *  @param out receives the descriptor. */
TODRE_API todre_status todre_tensor_from_dlpack(const void *dl_tensor, todre_tensor **out);

/** Destroy a descriptor (not the memory it views). Accepts NULL. */
TODRE_API void todre_tensor_destroy(todre_tensor *t);

/** Point an existing descriptor at new memory of the same layout (no
 *  allocation: for reusing descriptors on a hot path). */
TODRE_API todre_status todre_tensor_set_data(todre_tensor *t, void *data);

/** Query a descriptor. Any out-pointer may be NULL. @p shape and @p strides,
 *  when given, must have room for TODRE_MAX_RANK entries. */
TODRE_API todre_status todre_tensor_info(const todre_tensor *t, todre_dtype *dtype,
                                         todre_device_type *device, int *rank,
                                         int64_t *shape, int64_t *strides);

/* ------------------------------------------------------------------------- */
/* Stage 1: diversity selection                                               */
/* ------------------------------------------------------------------------- */

/** A stage-1 configuration: objective, pivot, budget, order. Host-only state;
 *  one configuration may be used with any number of contexts (one thread at a
 *  time). */
typedef struct todre_select_config todre_select_config;

/** Integer parameters of a ::todre_select_config. */
typedef enum todre_select_param {
    TODRE_SELECT_OBJECTIVE = 0, /**< ::todre_objective; default MAX_SUM. */
    TODRE_SELECT_PIVOT = 1,     /**< ::todre_pivot; default AUTO. */
    /** First row of the pivot range (relative to each token set); default 0. */
    TODRE_SELECT_PIVOT_LO = 2,
    /** One past the last row of the pivot range; -1 (default) = n. A range
     *  that does not fit the token set is an error at selection time. */
    TODRE_SELECT_PIVOT_HI = 3,
    /** Number of tokens to keep, >= 1; 0 (default) = use the ratio. */
    TODRE_SELECT_KEEP = 4,
    /** Seed of the RANDOM pivot; any int64; default 0. */
    TODRE_SELECT_SEED = 5,
    TODRE_SELECT_ORDER = 6      /**< ::todre_order; default POSITION. */
} todre_select_param;

/** Create a configuration with the defaults (MAX_SUM, AUTO pivot, ratio 0.10,
 *  POSITION order). */
TODRE_API todre_status todre_select_config_create(todre_select_config **out);
/** Destroy a configuration. Accepts NULL. */
TODRE_API void todre_select_config_destroy(todre_select_config *cfg);

/** Set an integer parameter; out-of-range values are rejected and leave the
 *  configuration unchanged. */
TODRE_API todre_status todre_select_config_set(todre_select_config *cfg,
                                               todre_select_param param, int64_t value);
/** Read an integer parameter. */
TODRE_API todre_status todre_select_config_get(const todre_select_config *cfg,
                                               todre_select_param param, int64_t *value);
/** Valid range [*lo, *hi] of an integer parameter. Thread-safe. */
TODRE_API todre_status todre_select_param_bounds(todre_select_param param, int64_t *lo,
                                                 int64_t *hi);

/** Set the keep ratio r in (0, 1]; k = clamp(floor(r * n + 0.5), 1, n).
 *  Also resets TODRE_SELECT_KEEP to 0 (ratio budget). Default 0.10. */
TODRE_API todre_status todre_select_config_set_ratio(todre_select_config *cfg, double ratio);
/** Read the ratio. */
TODRE_API todre_status todre_select_config_get_ratio(const todre_select_config *cfg,
                                                     double *ratio);

/** Compute k for a token set of @p n rows under @p cfg (validating the
 *  budget: a keep count above n is an error). */
TODRE_API todre_status todre_select_keep_count(const todre_select_config *cfg, int64_t n,
                                               int64_t *k);

/** Select the tokens to keep from one token set.
 *  @param ctx        the context (its backend and workspace).
 *  @param cfg        objective, pivot, budget and order.
 *  @param embeddings [n, d] f32/f16/bf16, inner stride 1, row stride >= d
 *         allowed; on the context's device.
 *  @param cls        NULL, or CLS attention [n] or [frames, tokens_per_frame]
 *         (frames * tokens_per_frame = n, frame-major), f32/f16/bf16, on the
 *         context's device. Required by PIVOT_CLS and CLS_TOPK.
 *  @param out        int64 [k] (or [2, k] for ORDER_BOTH), contiguous, on the
 *         context's device; k from todre_select_keep_count().
 *  On CUDA the call is asynchronous on the context's stream: a NaN or Inf
 *  found in the data cannot be returned by this call; the affected set's
 *  outputs are all -1 and the next todre_context_synchronize() returns
 *  TODRE_ERR_NONFINITE naming the tensor. On the CPU this call returns it. */
TODRE_API todre_status todre_select(todre_context *ctx, const todre_select_config *cfg,
                                    const todre_tensor *embeddings, const todre_tensor *cls,
                                    const todre_tensor *out);

/** Select from a ragged batch of token sets (images / videos of different
 *  lengths) concatenated along rows. Each set is handled exactly as a
 *  todre_select() call on its rows would (indices are local to the set).
 *  @param ctx        the context.
 *  @param cfg        objective, pivot, budget (used per set unless @p keep) and order.
 *  @param embeddings [N, d], all sets' rows concatenated.
 *  @param cls        NULL or [N] (f32/f16/bf16), concatenated likewise.
 *  @param offsets    host int64 [B + 1]: set b is rows [offsets[b], offsets[b+1]);
 *         offsets[0] = 0, non-decreasing with non-empty sets, offsets[B] = N.
 *  @param keep       NULL (use @p cfg's budget per set), or host int64 [B].
 *  @param out        int64 [K] (or [2, K] for ORDER_BOTH) on the context's
 *         device, K = sum of the per-set k; set b's indices start at
 *         out_offsets[b].
 *  @param out_offsets NULL, or host int64 [B + 1] receiving the output offsets
 *         (written before the call returns, also on CUDA). */
TODRE_API todre_status todre_select_batch(todre_context *ctx, const todre_select_config *cfg,
                                          const todre_tensor *embeddings,
                                          const todre_tensor *cls, const todre_tensor *offsets,
                                          const todre_tensor *keep, const todre_tensor *out,
                                          const todre_tensor *out_offsets);

/* ------------------------------------------------------------------------- */
/* Stage 2: relevance drop                                                    */
/* ------------------------------------------------------------------------- */

/** Per-prefill state of the stage-2 decision: layers, threshold, probe
 *  schedule, token types, and what each probe observed. Host-side state; it
 *  is used with a context for the computation. One thread at a time. */
typedef struct todre_relevance todre_relevance;

/** Probe schedule. */
typedef enum todre_probe_schedule {
    /** Only the listed probe layers (default list: { floor(7L/8) }). */
    TODRE_PROBE_LIST = 0,
    /** Every layer from the smallest listed probe layer on, until one decides. */
    TODRE_PROBE_UNTIL_DROP = 1
} todre_probe_schedule;

/** What one observation decided, per sequence. */
typedef enum todre_decision {
    TODRE_DECISION_NOT_PROBED = 0,      /**< not a probe layer: nothing computed. */
    TODRE_DECISION_KEEP = 1,            /**< probed; a ratio is >= tau. */
    TODRE_DECISION_DROP = 2,            /**< probed; both ratios < tau: this is the drop layer. */
    TODRE_DECISION_ALREADY_DROPPED = 3, /**< an earlier layer dropped: nothing computed. */
    /** probed on a chunk of a chunked prefill that does not end at the last
     *  position: its sums are kept until that chunk decides. */
    TODRE_DECISION_PENDING = 4
} todre_decision;

/** Create a relevance handle for a model with @p num_layers decoder layers
 *  (>= 1) and @p batch sequences (>= 1). Defaults: tau = 0.10, schedule
 *  LIST with probe layers { floor(7 * num_layers / 8) }; token types must be
 *  set before the first observation. */
TODRE_API todre_status todre_relevance_create(int64_t num_layers, int64_t batch,
                                              todre_relevance **out);
/** Destroy a relevance handle. Accepts NULL. */
TODRE_API void todre_relevance_destroy(todre_relevance *rel);

/** Set tau in [0, 1]. */
TODRE_API todre_status todre_relevance_set_tau(todre_relevance *rel, double tau);
/** Read tau. */
TODRE_API todre_status todre_relevance_get_tau(const todre_relevance *rel, double *tau);

/** Set the probe layers (0-based, each in [0, num_layers), any order,
 *  duplicates ignored; count >= 1). */
TODRE_API todre_status todre_relevance_set_probe_layers(todre_relevance *rel,
                                                        const int64_t *layers, int64_t count);
/** Set the probe schedule. */
TODRE_API todre_status todre_relevance_set_schedule(todre_relevance *rel,
                                                    todre_probe_schedule schedule);
/** @return through @p is_probe whether @p layer will be probed (given the
 *  schedule and the decisions so far, for sequence @p seq). Lets a runtime
 *  compute only what the probe needs. */
TODRE_API todre_status todre_relevance_is_probe(const todre_relevance *rel, int64_t seq,
                                                int64_t layer, int *is_probe);

/** Set the token types: host u8 tensor [K] (same for every sequence) or
 *  [batch, K], values ::todre_token_type. Copied. Resets observations. */
TODRE_API todre_status todre_relevance_set_types(todre_relevance *rel,
                                                 const todre_tensor *types);
/** Convenience for the contiguous layout [system | visual | text], the same
 *  for every sequence. Resets observations. */
TODRE_API todre_status todre_relevance_set_layout(todre_relevance *rel, int64_t n_system,
                                                  int64_t n_visual, int64_t n_text);

/** Forget every observation (keep layers, tau, schedule, types). */
TODRE_API todre_status todre_relevance_reset(todre_relevance *rel);

/** Observe layer @p layer from attention probabilities.
 *  @param ctx   the context that computes (its device must hold @p attn).
 *  @param rel   the relevance handle (types set).
 *  @param layer 0-based decoder layer, in [0, num_layers).
 *  @param attn [H, Q, K] (batch 1) or [B, H, Q, K], f32/f16/bf16, on the
 *         context's device, any strides. Queries are the last Q of the K
 *         positions (Q = K: full prefill; Q < K: a chunk of a chunked
 *         prefill). K may be below the number of positions the types cover:
 *         such a chunk returns ::TODRE_DECISION_PENDING and its sums are
 *         added to those of the following chunks of the same layer (each
 *         must start where the previous one ended) until the chunk that ends
 *         at the last position decides on all of them.
 *  @param decisions NULL or host array of B entries receiving each sequence's
 *         ::todre_decision for this layer.
 *  Non-probe layers and layers after a sequence's drop are no-ops
 *  (NOT_PROBED / ALREADY_DROPPED). Synchronous. */
TODRE_API todre_status todre_relevance_observe_probs(todre_context *ctx, todre_relevance *rel,
                                                     int64_t layer, const todre_tensor *attn,
                                                     todre_decision *decisions);

/** Observe layer @p layer from post-RoPE queries and keys (fused-attention
 *  runtimes): the ratios of causal softmax(scale * q . k), computed with an
 *  online softmax in blocks; working memory independent of K.
 *  @param ctx   the context that computes (its device must hold q and k).
 *  @param rel   the relevance handle (types set).
 *  @param layer 0-based decoder layer, in [0, num_layers).
 *  @param q [H, Q, dh] or [B, H, Q, dh]; @param k [H_kv, K, dh] or
 *         [B, H_kv, K, dh]; H a multiple of H_kv (grouped-query attention);
 *         f32/f16/bf16, same dtype, on the context's device, any strides.
 *  @param scale softmax scale (> 0, finite); 0 means 1/sqrt(dh).
 *  @param decisions NULL or host array of B entries, as for observe_probs.
 *  Otherwise as todre_relevance_observe_probs(). */
TODRE_API todre_status todre_relevance_observe_qk(todre_context *ctx, todre_relevance *rel,
                                                  int64_t layer, const todre_tensor *q,
                                                  const todre_tensor *k, double scale,
                                                  todre_decision *decisions);

/** Ratios observed at @p layer for sequence @p seq.
 *  @return TODRE_ERR_STATE if that layer was not probed for that sequence. */
TODRE_API todre_status todre_relevance_ratios(const todre_relevance *rel, int64_t seq,
                                              int64_t layer, double *alpha_t2v,
                                              double *alpha_v2t);

/** The drop layer of sequence @p seq, or -1 if no probe has decided to drop. */
TODRE_API todre_status todre_relevance_drop_layer(const todre_relevance *rel, int64_t seq,
                                                  int64_t *layer);

/** Positions to keep after the drop (every non-visual position, ascending).
 *  @param rel   the relevance handle (types set).
 *  @param seq   sequence index in [0, batch).
 *  @param capacity entries available at @p out.
 *  @param out host int64 array of @p capacity entries, or NULL to only count.
 *  @param count receives the number of positions (always written). */
TODRE_API todre_status todre_relevance_keep_positions(const todre_relevance *rel, int64_t seq,
                                                      int64_t *out, int64_t capacity,
                                                      int64_t *count);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TODRE_TODRE_H */
