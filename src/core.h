/* Core internals: handle structs, error reporting, validation helpers.
 * Internal: never installed. */
#ifndef TODRE_SRC_CORE_H
#define TODRE_SRC_CORE_H

#include <stdarg.h>
#include <stdint.h>

#include "backend.h"

#define TODRE_MSG_CAP 512

struct todre_tensor {
    void *data;
    todre_dtype dtype;
    todre_device_type device;
    int device_index;
    int rank;
    int64_t shape[TODRE_MAX_RANK];
    int64_t strides[TODRE_MAX_RANK]; /* elements, >= 0 */
};

struct todre_context {
    struct todre_backend *be;
    todre_backend_kind kind;   /* CPU or CUDA */
    void *module_handle;       /* dlopen handle of a backend module, or NULL */
    char msg[TODRE_MSG_CAP];
    /* host scratch reused across calls (segment tables, relevance sums) */
    int64_t *i64_scratch;
    size_t i64_scratch_len;
    double *f64_scratch;
    size_t f64_scratch_len;
};

struct todre_select_config {
    todre_objective objective;
    todre_pivot pivot;
    int64_t pivot_lo, pivot_hi;
    int64_t keep;   /* 0 = ratio */
    double ratio;
    int64_t seed;
    todre_order order;
};

/* ---- errors -------------------------------------------------------------- */

/* Record a failure: formats the message into the thread-local buffer and,
 * when ctx is non-NULL, into ctx->msg. Returns st, so callers can write
 * `return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "k: ...")`. */
todre_status todre_fail(struct todre_context *ctx, todre_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Clear the context's (and thread's) message at the start of a call. */
void todre_clear_error(struct todre_context *ctx);
/* Report a backend failure: its diag text becomes the message. */
todre_status todre_fail_diag(struct todre_context *ctx, todre_status st, const char *what,
                             const char *diag_text);

/* ---- tensors -------------------------------------------------------------- */

size_t todre_dtype_size(todre_dtype dt);
const char *todre_dtype_name(todre_dtype dt);
int todre_dtype_is_float(todre_dtype dt);

/* Check that tensor @p t (named @p name in messages) is non-NULL, lives where
 * the context's backend runs, and has a dtype in the bitmask @p dtypes
 * (bit = 1u << todre_dtype). */
todre_status todre_check_tensor(struct todre_context *ctx, const struct todre_tensor *t,
                                const char *name, unsigned dtypes, todre_device_type device,
                                int device_index);
#define TODRE_DT(x) (1u << (x))
#define TODRE_DT_FLOAT (TODRE_DT(TODRE_DTYPE_F32) | TODRE_DT(TODRE_DTYPE_F16) | TODRE_DT(TODRE_DTYPE_BF16))

/* Host scratch owned by the context (grown, reused). NULL on OOM. */
int64_t *todre_ctx_i64(struct todre_context *ctx, size_t n);
double *todre_ctx_f64(struct todre_context *ctx, size_t n);

/* ---- stage 1 -------------------------------------------------------------- */

/* k for a set of n rows under cfg (validates the budget against n). */
todre_status todre_resolve_keep(struct todre_context *ctx, const struct todre_select_config *cfg,
                                int64_t n, int64_t *k);

/* ---- backends ------------------------------------------------------------- */

/* Load the module for @p kind (CUDA) and create an instance; see loader.c. */
todre_status todre_module_backend_create(todre_backend_kind kind, int device,
                                         struct todre_backend **out, void **handle,
                                         char *msg, size_t cap);
void todre_module_release(void *handle);

#endif /* TODRE_SRC_CORE_H */
