/* Shared helpers of the CMocka test programs: error assertions that check the
 * message names the argument, tensor construction, deterministic test data,
 * and f16/bf16 input building. Not part of libtodre. */
#ifndef TODRE_TESTS_TODRE_TEST_H
#define TODRE_TESTS_TODRE_TEST_H

/* cmocka.h needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "todre/todre.h"

/* Assert that `call` returns `want` and that the failure message (thread-local,
 * and the context's when ctx is non-NULL) contains `name`, the argument the
 * user must fix. */
#define tt_assert_fails(ctx, call, want, name) \
    tt_assert_fails_at((ctx), (call), (want), (name), #call, __FILE__, __LINE__)
void tt_assert_fails_at(const todre_context *ctx, todre_status got, todre_status want,
                        const char *name, const char *expr, const char *file, int line);

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

/* ---- tensors (assert on failure) ------------------------------------------- */

todre_tensor *tt_tensor(void *data, todre_dtype dt, int rank, const int64_t *shape,
                        const int64_t *strides);
todre_tensor *tt_tensor1(void *data, todre_dtype dt, int64_t n);
/* [n, d] with row stride ld (elements). */
todre_tensor *tt_tensor2(void *data, todre_dtype dt, int64_t n, int64_t d, int64_t ld);

/* ---- library handles (assert on failure) ------------------------------------ */

todre_context *tt_cpu_context(void);
/* A configuration with keep = k (0 = leave the ratio) and the given order. */
todre_select_config *tt_config(todre_objective obj, todre_pivot piv, int64_t keep,
                               todre_order order);

/* Run todre_select with ORDER_BOTH into sel[k] and pos[k]; returns status. */
todre_status tt_select_both(todre_context *ctx, todre_select_config *cfg, const todre_tensor *emb,
                            const todre_tensor *cls, int64_t k, int64_t *sel, int64_t *pos);

/* Assert pos is the ascending sort of sel (k entries, all distinct, in [0, n)). */
void tt_assert_position_order(const int64_t *sel, const int64_t *pos, int64_t k, int64_t n);

#endif /* TODRE_TESTS_TODRE_TEST_H */
