/* todre_select_batch: a ragged batch gives, set by set, exactly what a
 * todre_select call on that set's rows gives (indices local to the set,
 * the same seed for every set), with the configuration's budget or per-set
 * keep counts, in every output order; plus its argument contract. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "todre_test.h"

#define B 6
#define D 40
#define LD 43 /* padded rows: padding is NaN, so reading it would fail */
static const int64_t set_n[B] = {1, 17, 300, 64, 1000, 5};
static const int64_t set_keep[B] = {1, 17, 30, 2, 100, 3};

struct batch {
    int64_t offsets[B + 1];
    int64_t total;
    float *rows;   /* [total, LD] */
    uint16_t *half; /* the same rows as f16 or bf16 */
    float *cls;    /* [total] */
    todre_context *ctx;
};

static int setup(void **state)
{
    struct batch *b = calloc(1, sizeof *b);
    if (!b) return -1;
    for (int i = 0; i < B; i++) b->offsets[i + 1] = b->offsets[i] + set_n[i];
    b->total = b->offsets[B];
    b->rows = malloc(sizeof(float) * (size_t)(b->total * LD));
    b->half = malloc(sizeof(uint16_t) * (size_t)(b->total * LD));
    b->cls = malloc(sizeof(float) * (size_t)b->total);
    if (!b->rows || !b->half || !b->cls) return -1;
    tt_fill_clustered(b->rows, b->total, D, LD, 9, 0.5, 3);
    tt_rng r = {77};
    for (int64_t i = 0; i < b->total; i++) b->cls[i] = (float)tt_rng_uniform(&r);
    b->ctx = tt_cpu_context();
    *state = b;
    return 0;
}

static int teardown(void **state)
{
    struct batch *b = *state;
    todre_context_destroy(b->ctx);
    free(b->rows);
    free(b->half);
    free(b->cls);
    free(b);
    return 0;
}

struct method {
    todre_objective obj;
    todre_pivot piv;
    int use_cls;
    int64_t lo, hi, seed;
};

static const struct method methods[] = {
    {TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, 1, 0, -1, 0},
    {TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_CENTER, 0, 0, -1, 0},
    {TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_RANDOM, 0, 0, -1, -5},
    {TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_ISOLATED, 1, 0, 1, 0}, /* range [0, 1) fits every set */
    {TODRE_OBJECTIVE_MAX_MIN, TODRE_PIVOT_AUTO, 0, 0, -1, 0},
    {TODRE_OBJECTIVE_MAX_MIN, TODRE_PIVOT_FARTHEST, 1, 0, -1, 0},
    {TODRE_OBJECTIVE_MAX_MIN, TODRE_PIVOT_CLS, 1, 0, -1, 0},
    {TODRE_OBJECTIVE_CLS_TOPK, TODRE_PIVOT_AUTO, 1, 0, -1, 0},
};

static todre_select_config *method_config(const struct method *m, todre_order order)
{
    todre_select_config *cfg = tt_config(m->obj, m->piv, 0, order);
    tt_assert_ok(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 0.25));
    tt_cfg_set(cfg, TODRE_SELECT_PIVOT_LO, m->lo);
    tt_cfg_set(cfg, TODRE_SELECT_PIVOT_HI, m->hi);
    tt_cfg_set(cfg, TODRE_SELECT_SEED, m->seed);
    return cfg;
}

/* k per set: the per-set keep array, or the configuration's budget. */
static void expected_k(const todre_select_config *cfg, const int64_t *keep, int64_t *k,
                       int64_t *out_off)
{
    out_off[0] = 0;
    for (int i = 0; i < B; i++) {
        if (keep) k[i] = keep[i];
        else tt_assert_ok(todre_select_keep_count(cfg, set_n[i], &k[i]));
        out_off[i + 1] = out_off[i] + k[i];
    }
}

/* Run the batch in ORDER_BOTH; returns the [2, K] output (malloc'd). */
static int64_t *run_batch(struct batch *b, todre_select_config *cfg, const void *rows,
                          todre_dtype dt, int use_cls, const int64_t *keep, int64_t K,
                          int64_t *out_off)
{
    int64_t *out = malloc(sizeof(int64_t) * (size_t)(2 * K));
    assert_non_null(out);
    int64_t shape[2] = {2, K};
    tt_array a[6];
    const DLTensor *emb = tt_array2(&a[0], (void *)rows, dt, b->total, D, LD);
    const DLTensor *cls = use_cls ? tt_array1(&a[1], b->cls, TODRE_DTYPE_F32, b->total) : NULL;
    const DLTensor *off = tt_array1(&a[2], b->offsets, TODRE_DTYPE_I64, B + 1);
    const DLTensor *kt = keep ? tt_array1(&a[3], (void *)keep, TODRE_DTYPE_I64, B) : NULL;
    const DLTensor *o = tt_array_init(&a[4], out, TODRE_DTYPE_I64, 2, shape, NULL);
    const DLTensor *oo = tt_array1(&a[5], out_off, TODRE_DTYPE_I64, B + 1);
    tt_cfg_set(cfg, TODRE_SELECT_ORDER, TODRE_ORDER_BOTH);
    tt_assert_ok(todre_select_batch(b->ctx, cfg, emb, cls, off, kt, o, oo));
    return out;
}

/* Set i alone through todre_select (a view of its rows) must equal the
 * batch's slice for that set, in both rows of the output. */
static void compare_with_single(struct batch *b, todre_select_config *cfg, const void *rows,
                                todre_dtype dt, int use_cls, const int64_t *k,
                                const int64_t *out, int64_t K, const int64_t *out_off)
{
    int64_t keep_before = tt_cfg_get(cfg, TODRE_SELECT_KEEP);
    for (int i = 0; i < B; i++) {
        size_t es = tt_dtype_size(dt);
        const char *first = (const char *)rows + es * (size_t)(b->offsets[i] * LD);
        tt_array emb_a, cls_a;
        const DLTensor *emb = tt_array2(&emb_a, (void *)first, dt, set_n[i], D, LD);
        const DLTensor *cls =
            use_cls ? tt_array1(&cls_a, b->cls + b->offsets[i], TODRE_DTYPE_F32, set_n[i]) : NULL;
        int64_t *sel = malloc(sizeof(int64_t) * (size_t)(2 * k[i]));
        assert_non_null(sel);
        tt_cfg_set(cfg, TODRE_SELECT_KEEP, k[i]);
        tt_assert_ok(tt_select_both(b->ctx, cfg, emb, cls, k[i], sel, sel + k[i]));
        for (int64_t j = 0; j < k[i]; j++) {
            if (out[out_off[i] + j] != sel[j] || out[K + out_off[i] + j] != sel[k[i] + j])
                fail_msg("set %d index %lld: batch (%lld, %lld) vs single (%lld, %lld)", i,
                         (long long)j, (long long)out[out_off[i] + j],
                         (long long)out[K + out_off[i] + j], (long long)sel[j],
                         (long long)sel[k[i] + j]);
        }
        free(sel);
    }
    /* restore the budget: KEEP = 0 means the ratio */
    if (keep_before == 0) tt_assert_ok(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 0.25));
}

static void check_method(struct batch *b, const struct method *m, const void *rows, todre_dtype dt,
                         const int64_t *keep)
{
    todre_select_config *cfg = method_config(m, TODRE_ORDER_BOTH);
    int64_t k[B], want_off[B + 1], out_off[B + 1];
    expected_k(cfg, keep, k, want_off);
    int64_t K = want_off[B];
    int64_t *out = run_batch(b, cfg, rows, dt, m->use_cls, keep, K, out_off);
    assert_memory_equal(out_off, want_off, sizeof out_off);
    for (int i = 0; i < B; i++) tt_assert_position_order(out + want_off[i], out + K + want_off[i], k[i], set_n[i]);
    if (m->hi == 1 && m->obj != TODRE_OBJECTIVE_CLS_TOPK)
        for (int i = 0; i < B; i++) assert_int_equal(out[want_off[i]], 0); /* pivot range [0, 1) */
    compare_with_single(b, cfg, rows, dt, m->use_cls, k, out, K, want_off);
    int64_t *again = run_batch(b, cfg, rows, dt, m->use_cls, keep, K, out_off);
    assert_memory_equal(again, out, sizeof(int64_t) * (size_t)(2 * K)); /* repeatable */
    free(again);
    free(out);
    todre_select_config_destroy(cfg);
}

/* Every objective and pivot, with the ratio budget and with per-set keep. */
static void test_batch_equals_single_calls(void **state)
{
    struct batch *b = *state;
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        check_method(b, &methods[i], b->rows, TODRE_DTYPE_F32, NULL);
        check_method(b, &methods[i], b->rows, TODRE_DTYPE_F32, set_keep);
    }
}

/* The same with f16 and bf16 rows. */
static void test_batch_half_inputs(void **state)
{
    struct batch *b = *state;
    tt_to_f16(b->half, b->rows, (size_t)(b->total * LD));
    check_method(b, &methods[0], b->half, TODRE_DTYPE_F16, set_keep);
    check_method(b, &methods[4], b->half, TODRE_DTYPE_F16, NULL);
    tt_to_bf16(b->half, b->rows, (size_t)(b->total * LD));
    check_method(b, &methods[1], b->half, TODRE_DTYPE_BF16, NULL);
}

/* ORDER_SELECTION and ORDER_POSITION write [K] equal to the rows of
 * ORDER_BOTH. */
static void test_batch_orders(void **state)
{
    struct batch *b = *state;
    todre_select_config *cfg = method_config(&methods[0], TODRE_ORDER_BOTH);
    int64_t k[B], off[B + 1], out_off[B + 1];
    expected_k(cfg, set_keep, k, off);
    int64_t K = off[B];
    int64_t *both = run_batch(b, cfg, b->rows, TODRE_DTYPE_F32, 1, set_keep, K, out_off);
    int64_t *one = malloc(sizeof(int64_t) * (size_t)K);
    assert_non_null(one);
    tt_array a[5];
    const DLTensor *emb = tt_array2(&a[0], b->rows, TODRE_DTYPE_F32, b->total, D, LD);
    const DLTensor *cls = tt_array1(&a[1], b->cls, TODRE_DTYPE_F32, b->total);
    const DLTensor *offt = tt_array1(&a[2], b->offsets, TODRE_DTYPE_I64, B + 1);
    const DLTensor *kt = tt_array1(&a[3], (void *)set_keep, TODRE_DTYPE_I64, B);
    const DLTensor *o = tt_array1(&a[4], one, TODRE_DTYPE_I64, K);
    for (int order = 0; order < 2; order++) {
        tt_cfg_set(cfg, TODRE_SELECT_ORDER, order);
        tt_assert_ok(todre_select_batch(b->ctx, cfg, emb, cls, offt, kt, o, NULL));
        const int64_t *row = order == TODRE_ORDER_SELECTION ? both : both + K;
        assert_memory_equal(one, row, sizeof(int64_t) * (size_t)K);
    }
    free(one);
    free(both);
    todre_select_config_destroy(cfg);
}

/* ---- contract ------------------------------------------------------------------ */

/* A valid call (per-set keep, CLS map, output offsets) that each contract
 * test breaks in one argument. */
struct call {
    todre_select_config *cfg;
    const DLTensor *emb, *cls, *off, *keep, *out, *out_off;
    tt_array arrays[6]; /* what the pointers above point to in the valid call */
    int64_t K, want_off[B + 1];
    int64_t out_buf[2000], oo_buf[B + 1];
};

static struct call *valid_call(struct batch *b)
{
    struct call *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, 0, TODRE_ORDER_POSITION);
    int64_t k[B];
    expected_k(c->cfg, set_keep, k, c->want_off);
    c->K = c->want_off[B];
    c->emb = tt_array2(&c->arrays[0], b->rows, TODRE_DTYPE_F32, b->total, D, LD);
    c->cls = tt_array1(&c->arrays[1], b->cls, TODRE_DTYPE_F32, b->total);
    c->off = tt_array1(&c->arrays[2], b->offsets, TODRE_DTYPE_I64, B + 1);
    c->keep = tt_array1(&c->arrays[3], (void *)set_keep, TODRE_DTYPE_I64, B);
    c->out = tt_array1(&c->arrays[4], c->out_buf, TODRE_DTYPE_I64, c->K);
    c->out_off = tt_array1(&c->arrays[5], c->oo_buf, TODRE_DTYPE_I64, B + 1);
    return c;
}

static void free_call(struct call *c)
{
    todre_select_config_destroy(c->cfg);
    free(c);
}

static todre_status call_batch(struct batch *b, const struct call *c)
{
    return todre_select_batch(b->ctx, c->cfg, c->emb, c->cls, c->off, c->keep, c->out, c->out_off);
}

/* Replace one array of the valid call by `bad`, expect INVALID_ARGUMENT
 * naming `name`, and restore. */
static void expect_rejected(struct batch *b, struct call *c, const DLTensor **slot,
                            const DLTensor *bad, const char *name)
{
    const DLTensor *saved = *slot;
    *slot = bad;
    tt_assert_fails(b->ctx, call_batch(b, c), TODRE_ERR_INVALID_ARGUMENT, name);
    *slot = saved;
}

/* The valid call works and writes the output offsets; NULL handles are named. */
static void test_batch_valid_call_and_nulls(void **state)
{
    struct batch *b = *state;
    struct call *c = valid_call(b);
    tt_assert_ok(call_batch(b, c));
    assert_memory_equal(c->oo_buf, c->want_off, sizeof c->want_off);
    tt_assert_fails(NULL, todre_select_batch(NULL, c->cfg, c->emb, NULL, c->off, NULL, c->out, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "ctx");
    tt_assert_fails(b->ctx, todre_select_batch(b->ctx, NULL, c->emb, NULL, c->off, NULL, c->out, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "cfg");
    expect_rejected(b, c, &c->emb, NULL, "embeddings");
    expect_rejected(b, c, &c->off, NULL, "offsets");
    expect_rejected(b, c, &c->out, NULL, "out");
    free_call(c);
}

/* offsets: first entry not 0, decreasing, an empty set, a total that is not
 * N, wrong dtype, rank or length (B = 0), device memory. */
static void test_batch_bad_offsets(void **state)
{
    struct batch *b = *state;
    struct call *c = valid_call(b);
    static int64_t bad[4][B + 1];
    for (int i = 0; i < 4; i++) memcpy(bad[i], b->offsets, sizeof bad[i]);
    bad[0][0] = 1;
    bad[1][3] = bad[1][2] - 1;
    bad[2][1] = bad[2][0];
    bad[3][B] -= 1;
    tt_array t;
    for (int i = 0; i < 4; i++)
        expect_rejected(b, c, &c->off, tt_array1(&t, bad[i], TODRE_DTYPE_I64, B + 1), "offsets");
    int64_t two_by[2] = {1, B + 1}, single = 0, strided[1] = {2};
    expect_rejected(b, c, &c->off, tt_array1(&t, b->offsets, TODRE_DTYPE_I32, B + 1), "offsets");
    expect_rejected(b, c, &c->off, tt_array_init(&t, b->offsets, TODRE_DTYPE_I64, 2, two_by, NULL),
                    "offsets");
    expect_rejected(b, c, &c->off, tt_array1(&t, &single, TODRE_DTYPE_I64, 1), "offsets");
    tt_array1(&t, b->offsets, TODRE_DTYPE_I64, B + 1);
    expect_rejected(b, c, &c->off, tt_array_on(&t, kDLCUDA, 0), "offsets"); /* must be host */
    /* host arrays may be strided: every other entry of a wider array */
    static int64_t wide[2 * (B + 1)];
    for (int i = 0; i <= B; i++) {
        wide[2 * i] = b->offsets[i];
        wide[2 * i + 1] = -1;
    }
    int64_t n1 = B + 1;
    c->off = tt_array_init(&t, wide, TODRE_DTYPE_I64, 1, &n1, strided);
    tt_assert_ok(call_batch(b, c));
    assert_memory_equal(c->oo_buf, c->want_off, sizeof c->want_off);
    free_call(c);
}

/* keep: wrong length or dtype, a zero entry, an entry above its set's n; and
 * the configuration's keep must fit every set when no array is given. */
static void test_batch_bad_keep(void **state)
{
    struct batch *b = *state;
    struct call *c = valid_call(b);
    static int64_t zero_keep[B], big_keep[B];
    memcpy(zero_keep, set_keep, sizeof zero_keep);
    zero_keep[2] = 0;
    memcpy(big_keep, set_keep, sizeof big_keep);
    big_keep[0] = 2; /* set 0 has one row */
    tt_array t;
    expect_rejected(b, c, &c->keep, tt_array1(&t, (void *)set_keep, TODRE_DTYPE_I64, B - 1), "keep");
    expect_rejected(b, c, &c->keep, tt_array1(&t, (void *)set_keep, TODRE_DTYPE_I32, B), "keep");
    expect_rejected(b, c, &c->keep, tt_array1(&t, zero_keep, TODRE_DTYPE_I64, B), "keep");
    expect_rejected(b, c, &c->keep, tt_array1(&t, big_keep, TODRE_DTYPE_I64, B), "keep");
    tt_array1(&t, (void *)set_keep, TODRE_DTYPE_I64, B);
    expect_rejected(b, c, &c->keep, tt_array_on(&t, kDLCUDA, 0), "keep"); /* must be host */
    tt_cfg_set(c->cfg, TODRE_SELECT_KEEP, 2);
    c->keep = NULL;
    tt_assert_fails(b->ctx, call_batch(b, c), TODRE_ERR_INVALID_ARGUMENT, "keep");
    free_call(c);
}

/* out must be int64 [K]; out_offsets int64 [B + 1]. */
static void test_batch_bad_outputs(void **state)
{
    struct batch *b = *state;
    struct call *c = valid_call(b);
    tt_array t;
    expect_rejected(b, c, &c->out, tt_array1(&t, c->out_buf, TODRE_DTYPE_I64, c->K - 1), "out");
    expect_rejected(b, c, &c->out, tt_array1(&t, c->out_buf, TODRE_DTYPE_I64, c->K + 1), "out");
    expect_rejected(b, c, &c->out, tt_array1(&t, c->out_buf, TODRE_DTYPE_F32, c->K), "out");
    expect_rejected(b, c, &c->out_off, tt_array1(&t, c->oo_buf, TODRE_DTYPE_I64, B), "out_offsets");
    expect_rejected(b, c, &c->out_off, tt_array1(&t, c->oo_buf, TODRE_DTYPE_I32, B + 1),
                    "out_offsets");
    tt_array1(&t, c->oo_buf, TODRE_DTYPE_I64, B + 1);
    expect_rejected(b, c, &c->out_off, tt_array_on(&t, kDLCUDA, 0), "out_offsets"); /* host */
    free_call(c);
}

/* The CLS map must be [N] (no video split in a batch); the pivot range must
 * fit every set; NaN/Inf anywhere is NONFINITE naming the tensor. */
static void test_batch_bad_inputs(void **state)
{
    struct batch *b = *state;
    struct call *c = valid_call(b);
    int64_t video[2] = {1, b->total};
    tt_array t;
    expect_rejected(b, c, &c->cls, tt_array_init(&t, b->cls, TODRE_DTYPE_F32, 2, video, NULL), "cls");
    expect_rejected(b, c, &c->cls, tt_array1(&t, b->cls, TODRE_DTYPE_F32, b->total - 1), "cls");

    tt_cfg_set(c->cfg, TODRE_SELECT_PIVOT_LO, 1); /* set 0: one row */
    tt_cfg_set(c->cfg, TODRE_SELECT_PIVOT_HI, 2);
    tt_assert_fails(b->ctx, call_batch(b, c), TODRE_ERR_INVALID_ARGUMENT, "pivot");
    tt_cfg_set(c->cfg, TODRE_SELECT_PIVOT_LO, 0);
    tt_cfg_set(c->cfg, TODRE_SELECT_PIVOT_HI, -1);

    float *last = &b->rows[(b->total - 1) * LD + 1], saved = *last;
    *last = NAN;
    tt_assert_fails(b->ctx, call_batch(b, c), TODRE_ERR_NONFINITE, "embeddings");
    *last = saved;
    float saved_cls = b->cls[0];
    b->cls[0] = INFINITY;
    tt_assert_fails(b->ctx, call_batch(b, c), TODRE_ERR_NONFINITE, "cls");
    b->cls[0] = saved_cls;
    tt_assert_ok(call_batch(b, c));
    free_call(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_equals_single_calls),
        cmocka_unit_test(test_batch_half_inputs),
        cmocka_unit_test(test_batch_orders),
        cmocka_unit_test(test_batch_valid_call_and_nulls),
        cmocka_unit_test(test_batch_bad_offsets),
        cmocka_unit_test(test_batch_bad_keep),
        cmocka_unit_test(test_batch_bad_outputs),
        cmocka_unit_test(test_batch_bad_inputs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
