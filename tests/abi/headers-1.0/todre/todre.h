/**
 * @file todre.h
 * @brief libtodre 1.x - ToDRE visual token pruning (diversity selection + relevance drop).
 *
 * This header is the whole stable C ABI of libtodre (SONAME libtodre.so.1,
 * symbol version node TODRE_1.0). The rules, stated once:
 *
 *  - Every fallible function returns a ::todre_status; results come back
 *    through out-pointers, which are written only on success: a failed call
 *    leaves every out-pointer untouched. The one exception is the `count` of
 *    todre_relevance_get_probe_layers() and todre_relevance_keep_positions(),
 *    also written when the output array is too small. A call whose
 *    arguments are rejected does not write its output arrays either.
 *  - The library never aborts, exits or prints. On failure the detail text,
 *    which names the bad argument, is available from todre_last_error()
 *    (thread-local, every call) and, for calls that take a context, also
 *    from todre_context_last_error().
 *  - Handles are opaque. Parameters of every handle are set and read the
 *    same way: one ::todre_param enum with a range of values per handle kind,
 *    typed `_set_int` / `_get_int` / `_set_double` / `_get_double`
 *    functions, todre_param_get_bounds() for the valid range of any
 *    parameter, and a `_reset` function.
 *  - Every array, input or output, is a DLPack `DLTensor` (include/todre/
 *    dlpack.h, DLPack 0.6, Apache-2.0; the DLTensor layout is the same in
 *    every DLPack release since 0.5). The library reads the caller's struct
 *    during the call only and allocates nothing per array.
 *  - Public structs that the library fills (::todre_param_bounds,
 *    ::todre_backend_props, ::todre_device_props) begin with `struct_size`:
 *    the caller sets it to `sizeof` the struct it was compiled with, and a
 *    later 1.x library fills only that many bytes. Such structs only ever
 *    grow at the end.
 *  - Pointers given to the library are borrowed for the duration of the call;
 *    the library keeps no reference to caller memory after returning (but
 *    asynchronous device work reads and writes device arrays until it is
 *    complete on the context's stream; see todre_context_set_stream()).
 *  - Thread-safety: a context, a selection configuration or a relevance
 *    handle is used by one thread at a time. Distinct handles are fully
 *    independent; in particular a context's thread count does not change
 *    what any other context or library in the process sees. Functions
 *    without a handle are thread-safe.
 *  - Every `destroy` function accepts NULL.
 *  - Limits (anything beyond is rejected with TODRE_ERR_INVALID_ARGUMENT and
 *    a message naming the argument, never wrapped or truncated):
 *      arrays: see "Arrays" below (rank <= TODRE_MAX_RANK, element count and
 *        byte extent bounds);
 *      integer parameters: the ranges todre_param_get_bounds() reports
 *        (e.g. a context's thread count in [0, 1024], a relevance handle's
 *        num_layers and batch in [1, 2^20]);
 *      stage 2: at most 2^20 query (and key) heads per observation,
 *        B x H x Q x K attention entries at most INT64_MAX (also for
 *        todre_relevance_observe_qk()), each count of
 *        todre_relevance_set_layout() at most 2^31 - 1;
 *      todre_select_keep_count(): any n in [1, INT64_MAX];
 *      todre_context_alloc(): bytes in [1, INT64_MAX];
 *      backend names: 1 to 31 characters of [a-z0-9_]; at most 16 backends
 *        are registered;
 *      messages (todre_last_error(), todre_context_last_error()): at most
 *        511 bytes, longer ones are truncated.
 *    A backend may support less (e.g. CUDA: at most 2^31 - 1 rows per
 *    selection call); it then returns TODRE_ERR_UNSUPPORTED naming the
 *    argument.
 *
 * Normative semantics of both stages: docs/semantics.md. The API by task,
 * and the choices made where the paper is silent: docs/api.md.
 *
 * Since: 1.0 unless noted.
 */
#ifndef TODRE_TODRE_H
#define TODRE_TODRE_H

#include <stddef.h>
#include <stdint.h>

#include "todre/dlpack.h"
#include "todre/todre_export.h"
#include "todre/todre_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------- */
/* Version                                                                    */
/* ------------------------------------------------------------------------- */

/* todre_version.h (generated from CMakeLists.txt, the one place the version
 * is written) defines TODRE_VERSION_MAJOR, _MINOR, _PATCH, TODRE_VERSION_NUMBER
 * (MAJOR * 10000 + MINOR * 100 + PATCH) and TODRE_VERSION_STRING. */

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
    /** A NULL pointer, out-of-range value, unknown parameter, or a wrong
     *  dtype / rank / shape / stride / device. The message names the argument. */
    TODRE_ERR_INVALID_ARGUMENT = 1,
    /** A host or device allocation failed. */
    TODRE_ERR_OUT_OF_MEMORY = 2,
    /** The requested backend cannot run here (not built, no module, no
     *  driver, no device). The message carries the underlying reason. */
    TODRE_ERR_BACKEND_UNAVAILABLE = 3,
    /** NaN or Inf found in an input array. */
    TODRE_ERR_NONFINITE = 4,
    /** A valid request this backend / build does not support. */
    TODRE_ERR_UNSUPPORTED = 5,
    /** A device runtime call failed (the runtime's error text in the message). */
    TODRE_ERR_DEVICE = 6,
    /** The call is not valid in the handle's current state. */
    TODRE_ERR_STATE = 7,
    /** A bug in libtodre; please report it with the message. */
    TODRE_ERR_INTERNAL = 8
} todre_status;

/** @return a static, human-readable name for a status ("TODRE_OK", ...).
 *  Unknown values give "TODRE_ERR_UNKNOWN". */
TODRE_API const char *todre_status_string(todre_status status);

/** @return the detail message of the last libtodre call on this thread:
 *  "" if it succeeded. Valid until the next libtodre call on this thread.
 *  At most 511 bytes (a longer message is truncated). */
TODRE_API const char *todre_last_error(void);

/* ------------------------------------------------------------------------- */
/* Enumerations (values pinned forever)                                       */
/* ------------------------------------------------------------------------- */

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

/** Token type of one sequence position (stage 2), stored as uint8. */
typedef enum todre_token_type {
    TODRE_TOKEN_SYSTEM = 0, /**< Before the image (system prompt). */
    TODRE_TOKEN_VISUAL = 1, /**< A visual token. */
    TODRE_TOKEN_TEXT = 2    /**< Question text and anything generated. */
} todre_token_type;

/** Stage-2 probe schedule (::TODRE_RELEVANCE_SCHEDULE). */
typedef enum todre_probe_schedule {
    /** Only the listed probe layers (default list: { floor(7L/8) }). */
    TODRE_PROBE_LIST = 0,
    /** Every layer from the smallest listed probe layer on, until one decides. */
    TODRE_PROBE_UNTIL_DROP = 1
} todre_probe_schedule;

/** What one observation decided, per sequence (written as int32). */
typedef enum todre_decision {
    TODRE_DECISION_NOT_PROBED = 0,      /**< not a probe layer: nothing computed. */
    TODRE_DECISION_KEEP = 1,            /**< probed; a ratio is >= tau. */
    TODRE_DECISION_DROP = 2,            /**< probed; both ratios < tau: this is the drop layer. */
    TODRE_DECISION_ALREADY_DROPPED = 3, /**< an earlier layer dropped: nothing computed. */
    /** probed on a chunk of a chunked prefill that does not end at the last
     *  position: its sums are kept until that chunk decides. */
    TODRE_DECISION_PENDING = 4
} todre_decision;

/* ------------------------------------------------------------------------- */
/* Parameters: one model for every handle                                    */
/* ------------------------------------------------------------------------- */

/** Every parameter of every handle. Each handle kind owns a range of values:
 *  contexts 100-199, selection configurations 200-299, relevance handles
 *  300-399; experimental parameters (not part of the stable ABI, see the end
 *  of this header) start at 1000. A parameter is an integer or a double
 *  (todre_param_get_bounds() says which, its range and its default); using
 *  it with the other type's function, or with another kind of handle, is
 *  TODRE_ERR_INVALID_ARGUMENT. Out-of-range values are rejected and leave
 *  the handle unchanged. Values are pinned forever. */
typedef enum todre_param {
    /* ---- context ---- */
    /** int. Bytes of working memory a strategy may use beyond O(n*d) (e.g. an
     *  n x n Gram matrix). Range [0, INT64_MAX]; default 268435456 (256 MiB);
     *  0 allows only O(n)-memory strategies. */
    TODRE_CONTEXT_WORKSPACE_LIMIT = 100,
    /** int. Threads libtodre's own CPU kernels may use; 0 = every available
     *  core (default). Range [0, 1024]. Affects this context only: the
     *  process-wide settings of OpenBLAS and OpenMP are never changed (BLAS
     *  calls run with OpenBLAS's own setting, e.g. OPENBLAS_NUM_THREADS). */
    TODRE_CONTEXT_NUM_THREADS = 101,

    /* ---- selection configuration ---- */
    TODRE_SELECT_OBJECTIVE = 200, /**< int, ::todre_objective; default MAX_SUM. */
    TODRE_SELECT_PIVOT = 201,     /**< int, ::todre_pivot; default AUTO. */
    /** int. First row of the pivot range, relative to each token set; range
     *  [0, INT64_MAX - 1]; default 0. */
    TODRE_SELECT_PIVOT_LO = 202,
    /** int. One past the last row of the pivot range; range [-1, INT64_MAX];
     *  -1 (default) = n. A range that does not fit a token set is an error at
     *  selection time. */
    TODRE_SELECT_PIVOT_HI = 203,
    /** int. Tokens to keep per set, in [1, INT64_MAX] (above a set's n is an
     *  error at selection time); 0 (default) = use the ratio. */
    TODRE_SELECT_KEEP = 204,
    /** double. Keep ratio r in (0, 1]: k = clamp(floor(r * n + 0.5), 1, n).
     *  Setting it also sets TODRE_SELECT_KEEP to 0. Default 0.10. */
    TODRE_SELECT_RATIO = 205,
    /** int. Seed of the RANDOM pivot; any int64; default 0. */
    TODRE_SELECT_SEED = 206,
    TODRE_SELECT_ORDER = 207,     /**< int, ::todre_order; default POSITION. */

    /* ---- relevance handle ---- */
    /** double. Drop threshold tau in [0, 1]; default 0.10. */
    TODRE_RELEVANCE_TAU = 300,
    /** int, ::todre_probe_schedule; default LIST. */
    TODRE_RELEVANCE_SCHEDULE = 301,
    /** int, read-only: the decoder layer count given at creation, in
     *  [1, 2^20]. */
    TODRE_RELEVANCE_NUM_LAYERS = 302,
    /** int, read-only: the sequence count given at creation, in [1, 2^20]. */
    TODRE_RELEVANCE_BATCH = 303
} todre_param;

/** The value type of a parameter. */
typedef enum todre_param_type {
    TODRE_PARAM_INT = 0,   /**< int64_t: use the `_int` functions. */
    TODRE_PARAM_DOUBLE = 1 /**< double: use the `_double` functions. */
} todre_param_type;

/** What todre_param_get_bounds() reports. Bounds are inclusive; only the
 *  pair of the parameter's type is meaningful (the other pair is 0). */
typedef struct todre_param_bounds {
    size_t struct_size;      /**< set by the caller: sizeof(todre_param_bounds). */
    todre_param_type type;   /**< INT or DOUBLE. */
    int32_t read_only;       /**< 1: can be read, not set. */
    int64_t int_min;         /**< smallest valid value (INT). */
    int64_t int_max;         /**< largest valid value (INT). */
    int64_t int_default;     /**< value after create or reset (INT). */
    double double_min;       /**< smallest valid value (DOUBLE). */
    double double_max;       /**< largest valid value (DOUBLE). */
    double double_default;   /**< value after create or reset (DOUBLE). */
} todre_param_bounds;

/** Describe @p param: type, inclusive range, default. Experimental
 *  parameters are described too. Thread-safe. */
TODRE_API todre_status todre_param_get_bounds(todre_param param, todre_param_bounds *bounds);

/** @return the static name of @p param ("TODRE_SELECT_PIVOT"), or NULL for
 *  a value that is no parameter. Thread-safe. */
TODRE_API const char *todre_param_name(todre_param param);

/** What a `_reset` function resets. */
typedef enum todre_reset {
    /** Per-use state: a context's cached workspace, a relevance handle's
     *  observations and decisions. Parameters are kept. */
    TODRE_RESET_STATE = 1,
    /** Every parameter back to its default (also the probe layer list of a
     *  relevance handle). State is kept. */
    TODRE_RESET_PARAMS = 2,
    TODRE_RESET_ALL = 3 /**< Both. */
} todre_reset;

/* ------------------------------------------------------------------------- */
/* Backends and devices                                                       */
/* ------------------------------------------------------------------------- */

/** What todre_backend_get_props() reports. */
typedef struct todre_backend_props {
    size_t struct_size;  /**< set by the caller: sizeof(todre_backend_props). */
    /** Name to pass to todre_context_create(): "cpu", "cuda", ... Static
     *  while the library is loaded, as are the other strings. */
    const char *name;
    /** File the backend was loaded from; "" for the built-in CPU backend. */
    const char *path;
    int32_t device_type;  /**< DLDeviceType of the memory its arrays live in. */
    int32_t available;    /**< 1 if it has at least one usable device here. */
    int32_t device_count; /**< devices it can use (0 when not available). */
    /** Why it is not available (driver missing, no device, ...); "" if it is. */
    const char *reason;
} todre_backend_props;

/** Number of registered backends (1 to 16; index 0 is always "cpu").
 *  The first call of any backend, device or context function scans for
 *  backend modules once per process: every `libtodre-*.so` in the directory
 *  libtodre was loaded from, in its `todre/` subdirectory and in the
 *  configured backend directory (pkg-config variable `backenddir`), or only
 *  the files and directories listed in $TODRE_BACKEND_PATH (':'-separated)
 *  when that is set. A module that cannot be loaded is not registered (its
 *  reason is kept, see docs/api.md). A registered backend answers whether it
 *  can run without creating any heavy state (no context, no library handle,
 *  no memory on a device). Modules stay loaded until the process exits. */
TODRE_API todre_status todre_backend_count(int *count);

/** Describe backend @p index in [0, todre_backend_count()). */
TODRE_API todre_status todre_backend_get_props(int index, todre_backend_props *props);

/** What todre_device_get_props() reports. */
typedef struct todre_device_props {
    size_t struct_size;  /**< set by the caller: sizeof(todre_device_props). */
    /** "NVIDIA H100 80GB HBM3", the CPU model name, ...; NUL-terminated,
     *  at most 255 bytes (truncated). */
    char name[256];
    /** Code path in use: CPU "amx", "avx512", "avx2" or "generic" (after
     *  $TODRE_CPU_ISA); CUDA "sm_90" etc. */
    char arch[64];
    int64_t total_memory;  /**< bytes of device (or physical host) memory. */
    int32_t compute_major; /**< CUDA compute capability; 0 for the CPU. */
    int32_t compute_minor;
    /** CPU: threads a context uses by default; CUDA: multiprocessors. */
    int32_t cores;
} todre_device_props;

/** Describe device @p device of backend @p backend ("cpu": device 0 only). */
TODRE_API todre_status todre_device_get_props(const char *backend, int device,
                                              todre_device_props *props);

/* ------------------------------------------------------------------------- */
/* Context                                                                    */
/* ------------------------------------------------------------------------- */

/** A context owns one backend instance on one device, its workspace (reused
 *  across calls), its parameters and its error message. One thread at a time. */
typedef struct todre_context todre_context;

/** Create a context.
 *  @param backend a registered backend name ("cpu", "cuda"), or NULL or
 *         "auto": the first backend after "cpu" that is available, else "cpu".
 *  @param device  device index of that backend (>= 0; 0 for "cpu"; ignored
 *         under "auto" when it falls back to "cpu").
 *  @param out     receives the new context.
 *  @return TODRE_OK; TODRE_ERR_INVALID_ARGUMENT (a malformed name: empty,
 *          longer than 31 characters or outside [a-z0-9_]; a bad device
 *          index); TODRE_ERR_BACKEND_UNAVAILABLE (no backend of that name is
 *          registered, or it cannot run here: the message says why, listing
 *          the modules tried); or TODRE_ERR_OUT_OF_MEMORY. */
TODRE_API todre_status todre_context_create(const char *backend, int device,
                                            todre_context **out);

/** Destroy a context and its workspace. Accepts NULL. Waits for work queued
 *  by this context first. */
TODRE_API void todre_context_destroy(todre_context *ctx);

/** @return the name of the backend @p ctx runs on ("cpu", "cuda"; never
 *  "auto"), static; "" for NULL. */
TODRE_API const char *todre_context_backend(const todre_context *ctx);

/** The device @p ctx computes on: its arrays must have this device_type
 *  (kDLCPU or kDLCUDAHost count as host) and device_id. */
TODRE_API todre_status todre_context_device(const todre_context *ctx, DLDevice *device);

/** @return the detail message of the last call on @p ctx ("" if it
 *  succeeded). Valid until the next call on @p ctx. Accepts NULL (returns ""). */
TODRE_API const char *todre_context_last_error(const todre_context *ctx);

/** Set an integer context parameter (TODRE_CONTEXT_*). */
TODRE_API todre_status todre_context_set_int(todre_context *ctx, todre_param param,
                                             int64_t value);
/** Read an integer context parameter. */
TODRE_API todre_status todre_context_get_int(const todre_context *ctx, todre_param param,
                                             int64_t *value);
/** Set a double context parameter (none in 1.0; reserved for the model). */
TODRE_API todre_status todre_context_set_double(todre_context *ctx, todre_param param,
                                                double value);
/** Read a double context parameter. */
TODRE_API todre_status todre_context_get_double(const todre_context *ctx, todre_param param,
                                                double *value);
/** Reset parameters and/or free the cached workspace. The stream is kept. */
TODRE_API todre_status todre_context_reset(todre_context *ctx, todre_reset what);

/** Set the stream the context enqueues its work on: a `cudaStream_t` passed
 *  as `void *` on CUDA (NULL = the default stream). A CPU context accepts
 *  only NULL. Device results are ready when that stream reaches the point
 *  after the call, or after todre_context_synchronize(). The stream must
 *  outlive its use by the context. */
TODRE_API todre_status todre_context_set_stream(todre_context *ctx, void *stream);

/** Block until all work queued by @p ctx has finished (no-op on the CPU). */
TODRE_API todre_status todre_context_synchronize(todre_context *ctx);

/** Allocate @p bytes (in [1, INT64_MAX]) of memory on the context's device
 *  (host memory on the CPU), aligned to at least 256 bytes, for arrays passed
 *  to libtodre. Free it with todre_context_free() on the same context. */
TODRE_API todre_status todre_context_alloc(todre_context *ctx, size_t bytes, void **ptr);

/** Free memory from todre_context_alloc() on @p ctx. Accepts NULL. Waits for
 *  the context's queued work first. */
TODRE_API todre_status todre_context_free(todre_context *ctx, void *ptr);

/** Copy between host memory and the context's device, or within either:
 *  @p dst and @p src have the same dtype and shape, are compact (strides
 *  NULL or row-major), and each lives on the host or on the context's
 *  device. Ordered after the work already queued on the context's stream;
 *  returns when the copy is complete. This is all a runtime needs to hand
 *  host data to a device backend without loading a device runtime itself. */
TODRE_API todre_status todre_context_copy(todre_context *ctx, const DLTensor *dst,
                                          const DLTensor *src);

/* ------------------------------------------------------------------------- */
/* Arrays                                                                     */
/* ------------------------------------------------------------------------- */

/** Arrays are `DLTensor` views, read during the call:
 *  - device: kDLCPU or kDLCUDAHost (host memory), kDLCUDA or kDLCUDAManaged
 *    (CUDA memory of device_id); inputs and outputs of a computation live on
 *    the context's device unless a function says "host";
 *  - dtype, lanes 1: float32, float16, bfloat16 for data; int64 for indices
 *    and offsets; int32 for decisions; uint8 (or bool, 8 bits) for token types;
 *  - ndim in [0, TODRE_MAX_RANK]; shape entries >= 0, and their product
 *    (the element count) at most INT64_MAX;
 *  - strides in elements, NULL = compact row-major; negative strides are
 *    rejected, zero strides (broadcast) are accepted for inputs; byte_offset
 *    is honoured;
 *  - data + byte_offset is a multiple of the element size for a non-empty
 *    array (misaligned arrays are rejected);
 *  - no two indices of an output may reach the same element: a zero stride
 *    over an extent > 1, or strides that interleave, are rejected;
 *  - the byte extent, byte_offset + (1 + sum over the dimensions of
 *    (shape[i] - 1) * strides[i]) * element size (byte_offset alone for an
 *    empty array), is at most 2^56 bytes (the largest 64-bit address space;
 *    PTRDIFF_MAX on 32-bit hosts), and data + extent does not wrap around
 *    the address space;
 *  - data may be NULL only for an empty array. */
#define TODRE_MAX_RANK 8

/* ------------------------------------------------------------------------- */
/* Stage 1: diversity selection                                               */
/* ------------------------------------------------------------------------- */

/** A stage-1 configuration: objective, pivot, budget, order (TODRE_SELECT_*
 *  parameters). Host-only state; one configuration may be used with any
 *  number of contexts (one thread at a time). */
typedef struct todre_select_config todre_select_config;

/** Create a configuration with the defaults. */
TODRE_API todre_status todre_select_config_create(todre_select_config **out);
/** Destroy a configuration. Accepts NULL. */
TODRE_API void todre_select_config_destroy(todre_select_config *cfg);
/** Set an integer selection parameter. */
TODRE_API todre_status todre_select_config_set_int(todre_select_config *cfg, todre_param param,
                                                   int64_t value);
/** Read an integer selection parameter. */
TODRE_API todre_status todre_select_config_get_int(const todre_select_config *cfg,
                                                   todre_param param, int64_t *value);
/** Set a double selection parameter (TODRE_SELECT_RATIO). */
TODRE_API todre_status todre_select_config_set_double(todre_select_config *cfg,
                                                      todre_param param, double value);
/** Read a double selection parameter. */
TODRE_API todre_status todre_select_config_get_double(const todre_select_config *cfg,
                                                      todre_param param, double *value);
/** Reset the parameters to their defaults (a configuration has no state). */
TODRE_API todre_status todre_select_config_reset(todre_select_config *cfg, todre_reset what);

/** Compute k for a token set of @p n rows under @p cfg: any n in
 *  [1, INT64_MAX]; k is always in [1, n] (the ratio's k = floor(r * n + 0.5)
 *  is clamped before it is converted, so no n overflows it). A keep count
 *  above n is an error; @p k is then untouched. */
TODRE_API todre_status todre_select_keep_count(const todre_select_config *cfg, int64_t n,
                                               int64_t *k);

/** Select the tokens to keep from one token set.
 *  @param ctx        the context (its backend and workspace).
 *  @param cfg        objective, pivot, budget and order.
 *  @param embeddings [n, d] float32/float16/bfloat16, inner stride 1, row
 *         stride >= d allowed; on the context's device.
 *  @param cls        NULL, or CLS attention [n] or [frames, tokens_per_frame]
 *         (frames * tokens_per_frame = n, frame-major), float32/16/bfloat16,
 *         on the context's device. Required by PIVOT_CLS and CLS_TOPK.
 *  @param out        int64 [k] (or [2, k] for ORDER_BOTH), compact, on the
 *         context's device; k from todre_select_keep_count().
 *  On CUDA the call is asynchronous on the context's stream: a NaN or Inf
 *  found in the data cannot be returned by this call; the affected set's
 *  outputs are all -1 and the next todre_context_synchronize() returns
 *  TODRE_ERR_NONFINITE naming the array. On the CPU this call returns it. */
TODRE_API todre_status todre_select(todre_context *ctx, const todre_select_config *cfg,
                                    const DLTensor *embeddings, const DLTensor *cls,
                                    const DLTensor *out);

/** Select from a ragged batch of token sets (images / videos of different
 *  lengths) concatenated along rows. Each set is handled exactly as a
 *  todre_select() call on its rows would be (indices are local to the set).
 *  @param embeddings [N, d], all sets' rows concatenated.
 *  @param cls        NULL or [N] (float32/16/bfloat16), concatenated likewise.
 *  @param offsets    host int64 [B + 1]: set b is rows [offsets[b], offsets[b+1]);
 *         offsets[0] = 0, increasing (no empty set), offsets[B] = N.
 *  @param keep       NULL (@p cfg's budget for every set), or host int64 [B].
 *  @param out        int64 [K] (or [2, K] for ORDER_BOTH), compact, on the
 *         context's device, K = sum of the per-set k; set b's indices start
 *         at out_offsets[b].
 *  @param out_offsets NULL, or host int64 [B + 1] receiving the output offsets
 *         (written before the call returns, also on CUDA). */
TODRE_API todre_status todre_select_batch(todre_context *ctx, const todre_select_config *cfg,
                                          const DLTensor *embeddings, const DLTensor *cls,
                                          const DLTensor *offsets, const DLTensor *keep,
                                          const DLTensor *out, const DLTensor *out_offsets);

/* ------------------------------------------------------------------------- */
/* Stage 2: relevance drop                                                    */
/* ------------------------------------------------------------------------- */

/** Per-prefill state of the stage-2 decision: layers, threshold, probe
 *  schedule, token types, and what each probe observed. Host-side state,
 *  used with a context for the computation. One thread at a time. */
typedef struct todre_relevance todre_relevance;

/** Create a relevance handle for a model with @p num_layers decoder layers
 *  and @p batch sequences, each in [1, 2^20] (the bounds of
 *  TODRE_RELEVANCE_NUM_LAYERS and TODRE_RELEVANCE_BATCH). Defaults: tau =
 *  0.10, schedule LIST with probe layers { floor(7 * num_layers / 8) }; token
 *  types must be set before the first observation. */
TODRE_API todre_status todre_relevance_create(int64_t num_layers, int64_t batch,
                                              todre_relevance **out);
/** Destroy a relevance handle. Accepts NULL. */
TODRE_API void todre_relevance_destroy(todre_relevance *rel);
/** Set an integer relevance parameter (TODRE_RELEVANCE_SCHEDULE). */
TODRE_API todre_status todre_relevance_set_int(todre_relevance *rel, todre_param param,
                                               int64_t value);
/** Read an integer relevance parameter. */
TODRE_API todre_status todre_relevance_get_int(const todre_relevance *rel, todre_param param,
                                               int64_t *value);
/** Set a double relevance parameter (TODRE_RELEVANCE_TAU). */
TODRE_API todre_status todre_relevance_set_double(todre_relevance *rel, todre_param param,
                                                  double value);
/** Read a double relevance parameter. */
TODRE_API todre_status todre_relevance_get_double(const todre_relevance *rel,
                                                  todre_param param, double *value);
/** STATE forgets every observation and decision (token types are kept);
 *  PARAMS restores tau, the schedule and the default probe layer list. */
TODRE_API todre_status todre_relevance_reset(todre_relevance *rel, todre_reset what);

/** Set the probe layers: host int64 [count], count >= 1, each in
 *  [0, num_layers), any order, duplicates ignored. */
TODRE_API todre_status todre_relevance_set_probe_layers(todre_relevance *rel,
                                                        const DLTensor *layers);
/** Read the probe layers, ascending and distinct.
 *  @param out   NULL to only count, or host int64 [capacity] (1-D).
 *  @param count receives the number of layers (written also when @p out is
 *         too small, which is TODRE_ERR_INVALID_ARGUMENT). */
TODRE_API todre_status todre_relevance_get_probe_layers(const todre_relevance *rel,
                                                        const DLTensor *out, int64_t *count);
/** Whether @p layer will be probed for sequence @p seq, given the schedule
 *  and the decisions so far: lets a runtime compute only what the probe needs. */
TODRE_API todre_status todre_relevance_is_probe(const todre_relevance *rel, int64_t seq,
                                                int64_t layer, int *is_probe);

/** Set the token types: host uint8 [K] (same for every sequence) or
 *  [batch, K], values ::todre_token_type. Copied. Resets observations. */
TODRE_API todre_status todre_relevance_set_types(todre_relevance *rel, const DLTensor *types);
/** Convenience for the contiguous layout [system | visual | text], the same
 *  for every sequence: each count in [0, 2^31 - 1], K = their sum >= 1.
 *  Resets observations. */
TODRE_API todre_status todre_relevance_set_layout(todre_relevance *rel, int64_t n_system,
                                                  int64_t n_visual, int64_t n_text);

/** Observe layer @p layer from attention probabilities.
 *  @param ctx   the context that computes (its device must hold @p attn).
 *  @param rel   the relevance handle (types set).
 *  @param layer 0-based decoder layer, in [0, num_layers).
 *  @param attn  [H, Q, K] (batch 1) or [B, H, Q, K], float32/16/bfloat16, on
 *         the context's device, any strides; 1 <= H <= 2^20. Queries are the
 *         last Q of the K positions (Q = K: full prefill; Q < K: a chunk of a chunked
 *         prefill). K may be below the number of positions the types cover:
 *         such a chunk returns ::TODRE_DECISION_PENDING and its sums are
 *         added to those of the following chunks of the same layer (each
 *         must start where the previous one ended) until the chunk that ends
 *         at the last position decides on all of them.
 *  @param decisions NULL or host int32 [B] receiving each sequence's
 *         ::todre_decision for this layer.
 *  Non-probe layers and layers after a sequence's drop are no-ops
 *  (NOT_PROBED / ALREADY_DROPPED). Synchronous. */
TODRE_API todre_status todre_relevance_observe_probs(todre_context *ctx, todre_relevance *rel,
                                                     int64_t layer, const DLTensor *attn,
                                                     const DLTensor *decisions);

/** Observe layer @p layer from post-RoPE queries and keys (fused-attention
 *  runtimes): the ratios of causal softmax(scale * q . k), computed with an
 *  online softmax in blocks; working memory independent of K.
 *  @param q [H, Q, dh] or [B, H, Q, dh]; @param k [H_kv, K, dh] or
 *         [B, H_kv, K, dh]; H a multiple of H_kv (grouped-query attention),
 *         H <= 2^20, B x H x Q x K <= INT64_MAX; float32/16/bfloat16, same
 *         dtype, on the context's device, any strides.
 *  @param scale softmax scale (in [FLT_MIN, FLT_MAX]); 0 means
 *         1/sqrt(dh). Scores scale * q . k that overflow float32 return
 *         TODRE_ERR_NONFINITE.
 *  @param decisions NULL or host int32 [B], as for observe_probs.
 *  Otherwise as todre_relevance_observe_probs(). */
TODRE_API todre_status todre_relevance_observe_qk(todre_context *ctx, todre_relevance *rel,
                                                  int64_t layer, const DLTensor *q,
                                                  const DLTensor *k, double scale,
                                                  const DLTensor *decisions);

/** Ratios observed at @p layer for sequence @p seq.
 *  @return TODRE_ERR_STATE if that layer was not probed for that sequence. */
TODRE_API todre_status todre_relevance_ratios(const todre_relevance *rel, int64_t seq,
                                              int64_t layer, double *alpha_t2v,
                                              double *alpha_v2t);

/** The drop layer of sequence @p seq, or -1 if no probe has decided to drop. */
TODRE_API todre_status todre_relevance_drop_layer(const todre_relevance *rel, int64_t seq,
                                                  int64_t *layer);

/** Positions to keep after the drop (every non-visual position, ascending).
 *  @param seq   sequence index in [0, batch).
 *  @param out   NULL to only count, or host int64 [capacity] (1-D).
 *  @param count receives the number of positions (written also when @p out
 *         is too small, which is TODRE_ERR_INVALID_ARGUMENT). */
TODRE_API todre_status todre_relevance_keep_positions(const todre_relevance *rel, int64_t seq,
                                                      const DLTensor *out, int64_t *count);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TODRE_TODRE_H */

/* ------------------------------------------------------------------------- */
/* Experimental (not part of the stable ABI)                                  */
/* ------------------------------------------------------------------------- */

#if defined(TODRE_EXPERIMENTAL_API) && !defined(TODRE_EXPERIMENTAL_API_DEFINED)
#define TODRE_EXPERIMENTAL_API_DEFINED
/* Outside the include guard on purpose: a file may include todre.h, then
 * define TODRE_EXPERIMENTAL_API and include it again (zstd's pattern).
 * Tuning knobs that name implementation details. They go through the same
 * set/get/bounds functions, but their values, meaning and existence may
 * change in any release (zstd's ZSTD_STATIC_LINKING_ONLY model): define
 * TODRE_EXPERIMENTAL_API only in code built together with one libtodre
 * version (its tests, benchmarks and tools). */

/** int. Stage-1 strategy on this context: 0 = automatic (the core's cost
 *  model, default), 1 = per-step matrix-vector products, 2 = Gram matrix, 3
 *  = Gram rows on demand in speculative batches (CPU with AMX). A request
 *  the backend or the workspace limit cannot honour falls back (3 -> 2 ->
 *  1). All give the same selection up to near-ties. */
#ifdef __cplusplus
#define TODRE_CONTEXT_EXP_SELECT_STRATEGY (static_cast<todre_param>(1000))
#else
#define TODRE_CONTEXT_EXP_SELECT_STRATEGY ((todre_param)1000)
#endif

/** int, read-only. Gram rows the last todre_select() or
 *  todre_select_batch() call on this context made under strategy 3, summed
 *  over its sets, speculative ones included (0 when no set ran that way; a
 *  call that fails leaves any value). A set of k tokens uses k - 1 rows, so
 *  the surplus measures the speculation, where timings on a shared machine
 *  cannot. */
#ifdef __cplusplus
#define TODRE_CONTEXT_EXP_SELECT_ROWS_MADE (static_cast<todre_param>(1001))
#else
#define TODRE_CONTEXT_EXP_SELECT_ROWS_MADE ((todre_param)1001)
#endif
#endif /* TODRE_EXPERIMENTAL_API */
