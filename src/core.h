/* Core internals: handle structs, error reporting, the array view, the
 * parameter table's interface, the backend registry. Internal: never
 * installed. */
#ifndef TODRE_SRC_CORE_H
#define TODRE_SRC_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#define TODRE_MSG_CAP 512

/* ---- checked arithmetic and size limits (the one place overflow is tested) -- */

/* Every size, span, offset and count the core computes from caller input goes
 * through these: *r = a * b or a + b, returning 0 on overflow (*r is then
 * unspecified). */
static inline int todre_mul_i64(int64_t a, int64_t b, int64_t *r)
{
    return !__builtin_mul_overflow(a, b, r);
}
static inline int todre_sub_i64(int64_t a, int64_t b, int64_t *r)
{
    return !__builtin_sub_overflow(a, b, r);
}
static inline int todre_add_i64(int64_t a, int64_t b, int64_t *r)
{
    return !__builtin_add_overflow(a, b, r);
}
static inline int todre_mul_size(size_t a, size_t b, size_t *r)
{
    return !__builtin_mul_overflow(a, b, r);
}
static inline int todre_add_size(size_t a, size_t b, size_t *r)
{
    return !__builtin_add_overflow(a, b, r);
}
/* *r = n elements of @p size bytes, as a size_t; 0 when n < 0 or the product
 * does not fit (host scratch sizes). */
static inline int todre_bytes(int64_t n, size_t size, size_t *r)
{
    return n >= 0 && (uint64_t)n <= SIZE_MAX && todre_mul_size((size_t)n, size, r);
}

/* The largest byte extent of one array: its strided span (sum over the
 * dimensions of (shape - 1) x stride, plus one element, in bytes) plus its
 * byte_offset. 2^56 bytes is the largest user address space of any 64-bit
 * platform (x86-64 with 5-level paging, RISC-V Sv57), so no real array is
 * larger; an extent below it leaves every index and byte computation on the
 * array inside int64 with a factor of 64 to spare. On 32-bit hosts:
 * PTRDIFF_MAX. */
#if UINTPTR_MAX > 0xFFFFFFFFu
#define TODRE_MAX_ARRAY_BYTES ((int64_t)1 << 56)
#else
#define TODRE_MAX_ARRAY_BYTES ((int64_t)PTRDIFF_MAX)
#endif

/* Stage 2: the most query heads (and key heads) of one observation. Together
 * with num_layers and batch <= 2^20 (the parameter table) and attention
 * entries B * H * Q * K <= INT64_MAX, it bounds every per-head and
 * per-sequence product a backend forms (B * H results, B * H * Q rows). */
#define TODRE_MAX_HEADS ((int64_t)1 << 20)

/* ---- errors -------------------------------------------------------------- */

struct todre_context;

/* Record a failure: formats the message into the thread-local buffer and,
 * when ctx is non-NULL, into ctx->msg. Returns st, so callers can write
 * `return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "k: ...")`. */
todre_status todre_fail(const struct todre_context *ctx, todre_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Clear the context's (and thread's) message at the start of a call. */
void todre_clear_error(const struct todre_context *ctx);
/* Report a backend failure: its diag text becomes the message. */
todre_status todre_fail_diag(const struct todre_context *ctx, todre_status st, const char *what,
                             const char *diag_text);

/* Copy a filled 1.0 public struct (whose first member is size_t struct_size)
 * into the caller's, honouring the caller's struct_size: smaller than the
 * 1.0 struct (@p size) is an error naming @p name; at most struct_size bytes
 * are written, and the caller's struct_size is kept. */
todre_status todre_fill_sized(void *dst, const void *src, size_t size, const char *name);

/* ---- arrays ------------------------------------------------------------- */

/* A DLTensor as the core sees it during one call (on the stack). */
struct todre_array {
    void *data;                      /* data + byte_offset */
    todre_dtype dtype;
    todre_device_type device;
    int device_index;                /* 0 for host memory */
    int rank;
    int64_t count;                   /* elements (product of the shape) */
    int64_t shape[TODRE_MAX_RANK];
    int64_t strides[TODRE_MAX_RANK]; /* elements, >= 0; compact when NULL */
};

/* Where an array must live. */
enum todre_where {
    TODRE_WHERE_CONTEXT = 0, /* on the context's device (ctx required) */
    TODRE_WHERE_HOST = 1,    /* host memory, whatever the context */
    TODRE_WHERE_ANY = 2      /* host memory or the context's device (ctx required) */
};

#define TODRE_DT(x) (1u << (x))
#define TODRE_DT_FLOAT \
    (TODRE_DT(TODRE_DTYPE_F32) | TODRE_DT(TODRE_DTYPE_F16) | TODRE_DT(TODRE_DTYPE_BF16))

/* Map @p dl (named @p name in messages) into @p a and check it: non-NULL,
 * dtype in the bitmask @p dtypes, device per @p where, rank, shape, strides,
 * data, the byte extent (at most TODRE_MAX_ARRAY_BYTES, no wrap of the
 * address space) and alignment (data + byte_offset a multiple of the element
 * size, unless the array is empty). On success a->count and every offset
 * sum_i idx_i * strides[i] (idx_i < shape[i]) fit int64. Errors are reported
 * on @p ctx (may be NULL with TODRE_WHERE_HOST); @p a is then unspecified. */
todre_status todre_array_map(struct todre_context *ctx, const DLTensor *dl, const char *name,
                             unsigned dtypes, enum todre_where where, struct todre_array *a);

/* todre_array_map() for an output array: also refuses a layout in which two
 * indices reach the same element (a zero stride over an extent > 1, or
 * strides that interleave; see tensor.c), naming @p name. Every output
 * array of every call is mapped with this. */
todre_status todre_array_map_out(struct todre_context *ctx, const DLTensor *dl, const char *name,
                                 unsigned dtypes, enum todre_where where, struct todre_array *a);

/* 1 if @p a is compact row-major (dimensions of size 1 are ignored). */
int todre_array_is_compact(const struct todre_array *a);

/* ---- parameters (src/params.c) ------------------------------------------ */

enum todre_param_owner {
    TODRE_OWNER_CONTEXT = 0,   /* storage: struct todre_backend_params */
    TODRE_OWNER_SELECT = 1,    /* storage: struct todre_select_params */
    TODRE_OWNER_RELEVANCE = 2  /* storage: struct todre_relevance_params */
};

struct todre_select_params {
    int64_t objective; /* todre_objective */
    int64_t pivot;     /* todre_pivot */
    int64_t pivot_lo, pivot_hi;
    int64_t keep;      /* 0 = ratio */
    double ratio;
    int64_t seed;
    int64_t order;     /* todre_order */
    int64_t budget;    /* todre_budget */
    int64_t group_min; /* TODRE_BUDGET_SHARED's per-group minimum */
};

struct todre_relevance_params {
    double tau;
    int64_t schedule;   /* todre_probe_schedule */
    int64_t num_layers; /* read-only */
    int64_t batch;      /* read-only */
};

/* Typed access through the table: checks kind, type, read-only and range,
 * and reports failures on @p ctx (may be NULL). @p store is the owner's
 * storage struct. */
todre_status todre_param_set_int(const struct todre_context *ctx, enum todre_param_owner owner,
                                 void *store, todre_param param, int64_t value);
todre_status todre_param_get_int(const struct todre_context *ctx, enum todre_param_owner owner,
                                 const void *store, todre_param param, int64_t *value);
todre_status todre_param_set_double(const struct todre_context *ctx,
                                    enum todre_param_owner owner, void *store,
                                    todre_param param, double value);
todre_status todre_param_get_double(const struct todre_context *ctx,
                                    enum todre_param_owner owner, const void *store,
                                    todre_param param, double *value);
/* Every settable parameter of @p owner back to its default. */
void todre_param_defaults(enum todre_param_owner owner, void *store);
/* Check @p value against @p param's range (for values that are not set
 * through a setter, e.g. creation arguments); the message names @p arg. */
todre_status todre_param_check_int(const struct todre_context *ctx, todre_param param,
                                   const char *arg, int64_t value);

/* ---- handles -------------------------------------------------------------- */

struct todre_registry_entry;

struct todre_context {
    struct todre_backend *be;
    const struct todre_registry_entry *entry;
    char msg[TODRE_MSG_CAP];
    /* host scratch reused across calls (segment tables, plans) */
    int64_t *i64_scratch;
    size_t i64_scratch_len;
    struct todre_select_plan *plan_scratch;
    size_t plan_scratch_len;
};

struct todre_select_config {
    struct todre_select_params p;
};

/* Host scratch owned by the context (grown, reused). NULL on OOM. */
int64_t *todre_ctx_i64(struct todre_context *ctx, size_t n);
struct todre_select_plan *todre_ctx_plans(struct todre_context *ctx, size_t n);
/* Free the scratch above. */
void todre_ctx_trim(struct todre_context *ctx);

/* ---- stage 1 -------------------------------------------------------------- */

/* Choose the strategy of every set of @p job (src/select_plan.c): reads the
 * sets, k, d, dtype, objective and pivot from the job, the requested
 * strategy, workspace limit and capabilities from @p be, and writes
 * plans[0 .. job->nseg). The one place stage-1 strategies are chosen, for
 * every backend. Cannot fail. */
void todre_select_plan_sets(const struct todre_backend *be, const struct todre_select_job *job,
                            struct todre_select_plan *plans);

/* The RANDOM pivot of a range [lo, hi) from a seed: the portable generator
 * pinned in docs/semantics.md (splitmix64 with rejection sampling). */
int64_t todre_random_pivot(uint64_t seed, int64_t lo, int64_t hi);

/* k for a set of n rows under cfg (validates the budget against n). */
todre_status todre_resolve_keep(struct todre_context *ctx, const struct todre_select_config *cfg,
                                int64_t n, int64_t *k);

/* ---- prune plans (src/plan.c) --------------------------------------------- */

/* Sizes of the G groups whose row offsets are groups[0..G] (absolute rows,
 * the set starting at row @p first), checked non-decreasing; @p set names
 * the set in messages (-1: a single set). */
todre_status todre_plan_group_sizes(struct todre_context *ctx, const int64_t *groups, int64_t G,
                                    int64_t first, int64_t set, int64_t *sizes);
/* The count of every group of one set (sizes[0..G), n = their sum >= 1)
 * under cfg's budget policy, and the set's total; set_keep >= 0 replaces the
 * configuration's budget (the set's k, or each group's under PER_GROUP;
 * the caller has checked it). counts: -1 each under SET. rem: scratch [G]. */
todre_status todre_plan_counts(struct todre_context *ctx, const struct todre_select_config *cfg,
                               const int64_t *sizes, int64_t G, int64_t set_keep, int64_t set,
                               int64_t *counts, int64_t *rem, int64_t *total);
/* The relevance signature's text from its parameters and probe layers
 * (ascending). */
todre_status todre_relevance_signature_text(const struct todre_relevance_params *p,
                                            const int64_t *probes, int64_t nprobes, char *buf,
                                            size_t size, size_t *len);

/* ---- backend registry (src/loader.c) -------------------------------------- */

/* One registered backend. Strings are owned by the registry and live until
 * the process exits. */
struct todre_registry_entry {
    const struct todre_backend_reg *reg;
    const char *name;
    const char *path;   /* "" for the built-in CPU backend */
    int32_t dl_device_type;
    int32_t available;
    int32_t device_count;
    const char *reason; /* "" when available */
};

/* Build the registry once per process (thread-safe) and return its size. */
int todre_registry_count(void);
/* Entry @p index in [0, todre_registry_count()). */
const struct todre_registry_entry *todre_registry_get(int index);
/* Resolve a backend name (NULL / "auto" included) and a device index to an
 * entry and the device to use, reporting failures (invalid name or device:
 * INVALID_ARGUMENT; not registered or not available: BACKEND_UNAVAILABLE). */
todre_status todre_registry_resolve(const char *name, int device,
                                    const struct todre_registry_entry **entry, int *device_out);

#endif /* TODRE_SRC_CORE_H */
