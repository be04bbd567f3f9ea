/* Shared helpers of the CMocka test programs: error assertions that check the
 * message names the argument, DLTensor construction, deterministic test data,
 * and f16/bf16 input building. Not part of libtodre.
 *
 * Element types are named with the internal enum of src/dtype.h
 * (TODRE_DTYPE_F32, ...), which the tests share with the library's internals;
 * tt_dl_dtype() turns one into the DLPack DLDataType the API takes. */
#ifndef TODRE_TESTS_TODRE_TEST_H
#define TODRE_TESTS_TODRE_TEST_H

/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "todre/todre.h"
#include "dtype.h" /* src/dtype.h: todre_dtype, todre_dtype_size() */

/* Assert that `call` returns `want` and that the failure message (thread-local,
 * and the context's when ctx is non-NULL) contains `name`, the argument the
 * user must fix. */
#define tt_assert_fails(ctx, call, want, name) \
    tt_assert_fails_at((ctx), (call), (want), (name), #call, __FILE__, __LINE__)
void tt_assert_fails_at(const todre_context *ctx, todre_status got, todre_status want,
                        const char *name, const char *expr, const char *file, int line);

/* The same, where the argument to fix is parameter `param`: the message
 * must contain its name, todre_param_name(param) ("TODRE_SELECT_KEEP"). */
#define tt_assert_fails_param(ctx, call, want, param) \
    tt_assert_fails_at((ctx), (call), (want), tt_param_name(param), #call, __FILE__, __LINE__)

/* Every todre_param of todre.h (the experimental ones included), written out
 * in tests/common/todre_test.c from the header, never read from the library. */
enum tt_handle_kind { TT_KIND_CONTEXT = 0, TT_KIND_SELECT = 1, TT_KIND_RELEVANCE = 2 };
struct tt_param_info {
    todre_param param;
    const char *name; /* the enumerator's spelling */
    enum tt_handle_kind kind;
};
extern const struct tt_param_info tt_params[];
extern const size_t tt_nparams;
/* The name of a parameter from that table (fails the test for others). Does
 * not call the library, so it never disturbs todre_last_error(). */
const char *tt_param_name(todre_param param);

/* Assert that `call` returns TODRE_OK (prints the message otherwise). */
#define tt_assert_ok(call) tt_assert_ok_at((call), #call, __FILE__, __LINE__)
void tt_assert_ok_at(todre_status got, const char *expr, const char *file, int line);

/* ---- deterministic data -------------------------------------------------- */

/* A small portable generator for test inputs (not the library's PRNG). */
typedef struct tt_rng {
    uint64_t s;
} tt_rng;
uint64_t tt_rng_u64(tt_rng *r);
double tt_rng_uniform(tt_rng *r);  /* [0, 1) */
double tt_rng_normal(tt_rng *r);   /* standard normal */

/* n x d rows of `clusters` Gaussian centres plus `spread` noise, row stride
 * `ld` (>= d; padding set to NaN so reads of padding are caught). */
void tt_fill_clustered(float *x, int64_t n, int64_t d, int64_t ld, int clusters, double spread,
                       uint64_t seed);

/* ---- dtype conversion for building inputs ---------------------------------- */

void tt_to_f16(uint16_t *dst, const float *src, size_t count);
void tt_to_bf16(uint16_t *dst, const float *src, size_t count);
/* Value of element i of a float buffer of dtype dt (exact), as double. */
double tt_load_f64(const void *data, todre_dtype dt, size_t i);
/* Store v (rounded to dt) as element i. */
void tt_store(void *data, todre_dtype dt, size_t i, double v);
size_t tt_dtype_size(todre_dtype dt);

/* ---- DLTensors ------------------------------------------------------------------ */

/* The DLPack dtype of an internal dtype (uint8 as kDLUInt 8). */
DLDataType tt_dl_dtype(todre_dtype dt);

/* A host (kDLCPU, device 0) DLTensor over caller-owned shape and strides
 * (NULL = compact row-major), byte_offset 0. The DLTensor borrows @p shape
 * and @p strides: they must outlive its use. */
DLTensor todre_test_dl(void *data, DLDataType dtype, int ndim, int64_t *shape, int64_t *strides);

/* A DLTensor that owns copies of its shape and strides, for arrays built in
 * one line. dl.shape / dl.strides point into the struct itself, so a
 * tt_array must not be copied by value (fill it where it lives). */
typedef struct tt_array {
    DLTensor dl;
    int64_t shape[TODRE_MAX_RANK];
    int64_t strides[TODRE_MAX_RANK];
} tt_array;

/* Fill @p a as a host array (ndim <= TODRE_MAX_RANK; strides NULL =
 * compact) and return &a->dl. */
const DLTensor *tt_array_init(tt_array *a, void *data, todre_dtype dt, int ndim,
                              const int64_t *shape, const int64_t *strides);
/* [n], compact. */
const DLTensor *tt_array1(tt_array *a, void *data, todre_dtype dt, int64_t n);
/* [n, d] with row stride ld (elements). */
const DLTensor *tt_array2(tt_array *a, void *data, todre_dtype dt, int64_t n, int64_t d,
                          int64_t ld);
/* [n0, n1, n2], compact. */
const DLTensor *tt_array3(tt_array *a, void *data, todre_dtype dt, int64_t n0, int64_t n1,
                          int64_t n2);
/* Move @p a to another device (e.g. kDLCUDA to test device checks on a CPU
 * context; the data is never dereferenced then) and return &a->dl. */
const DLTensor *tt_array_on(tt_array *a, DLDeviceType type, int32_t id);

/* ---- test selection ---------------------------------------------------------- */

/* cmocka_run_group_tests(tests, NULL, NULL) with a selection from the
 * environment: only the tests whose names match a pattern of
 * $TODRE_TEST_ONLY, and none that match one of $TODRE_TEST_SKIP (each a
 * comma-separated list of shell patterns), when set. A registration that
 * changes only what some tests reach (e.g. $TODRE_CPU_GRAM, which only Gram
 * matrices read) runs those tests alone, and a long case can run in a
 * registration of its own. Tests left out are neither run nor counted. */
#define tt_run_tests(tests) tt_run_group(#tests, tests, sizeof(tests) / sizeof((tests)[0]))
int tt_run_group(const char *name, const struct CMUnitTest *tests, size_t count);

/* ---- library handles (assert on failure) ------------------------------------ */

todre_context *tt_cpu_context(void);
/* Whether the registry has a "cuda" backend with a usable device; if not,
 * prints why ("skipped: ...") for the test's exit 77. */
int tt_cuda_usable(void);
/* A configuration with keep = k (0 = leave the ratio) and the given order. */
todre_select_config *tt_config(todre_objective obj, todre_pivot piv, int64_t keep,
                               todre_order order);
/* Set an integer parameter, asserting success (works for every handle kind). */
void tt_cfg_set(todre_select_config *cfg, todre_param param, int64_t value);
int64_t tt_cfg_get(const todre_select_config *cfg, todre_param param);
void tt_ctx_set(todre_context *ctx, todre_param param, int64_t value);

/* Run todre_select with ORDER_BOTH into sel[k] and pos[k]; returns status. */
todre_status tt_select_both(todre_context *ctx, todre_select_config *cfg, const DLTensor *emb,
                            const DLTensor *cls, int64_t k, int64_t *sel, int64_t *pos);

/* Assert pos is the ascending sort of sel (k entries, all distinct, in [0, n)). */
void tt_assert_position_order(const int64_t *sel, const int64_t *pos, int64_t k, int64_t n);

#endif /* TODRE_TESTS_TODRE_TEST_H */
