/* todre_select's contract: every invalid argument returns the right status
 * with a message naming the argument (thread-local and per context), never a
 * crash; non-finite data is NONFINITE; and the valid edge cases (k = 1,
 * k = n, d = 1, n = 1, each output order) behave as documented. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "todre_test.h"

#define N 12
#define D 6
#define K 4

struct fx {
    todre_context *ctx;
    todre_select_config *cfg; /* MAX_SUM, AUTO, keep K, POSITION */
    float rows[N * D];
    float cls[N];
    int64_t out_buf[2 * N];
    tt_array emb_a, cls_a, out_a;
    const DLTensor *emb, *cls_t, *out;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    if (!f) return -1;
    tt_fill_clustered(f->rows, N, D, D, 3, 0.3, 5);
    for (int i = 0; i < N; i++) f->cls[i] = (float)((i * 7) % N) / N;
    f->ctx = tt_cpu_context();
    f->cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, K, TODRE_ORDER_POSITION);
    f->emb = tt_array2(&f->emb_a, f->rows, TODRE_DTYPE_F32, N, D, D);
    f->cls_t = tt_array1(&f->cls_a, f->cls, TODRE_DTYPE_F32, N);
    f->out = tt_array1(&f->out_a, f->out_buf, TODRE_DTYPE_I64, K);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    todre_select_config_destroy(f->cfg);
    todre_context_destroy(f->ctx);
    free(f);
    return 0;
}

#define FAILS(f, emb, cls, out, want, name) \
    tt_assert_fails((f)->ctx, todre_select((f)->ctx, (f)->cfg, emb, cls, out), want, name)

/* The fixture itself is a valid call (so every failure below is the one
 * argument each case breaks). */
static void test_fixture_is_valid(void **state)
{
    struct fx *f = *state;
    tt_assert_ok(todre_select(f->ctx, f->cfg, f->emb, NULL, f->out));
    tt_assert_ok(todre_select(f->ctx, f->cfg, f->emb, f->cls_t, f->out));
}

static void test_null_arguments(void **state)
{
    struct fx *f = *state;
    tt_assert_fails(NULL, todre_select(NULL, f->cfg, f->emb, NULL, f->out),
                    TODRE_ERR_INVALID_ARGUMENT, "ctx");
    tt_assert_fails(f->ctx, todre_select(f->ctx, NULL, f->emb, NULL, f->out),
                    TODRE_ERR_INVALID_ARGUMENT, "cfg");
    FAILS(f, NULL, NULL, f->out, TODRE_ERR_INVALID_ARGUMENT, "embeddings");
    FAILS(f, f->emb, NULL, NULL, TODRE_ERR_INVALID_ARGUMENT, "out");
}

/* Wrong dtype, rank, stride or device (CUDA or managed memory on a CPU
 * context) of the embeddings. */
static void test_embeddings(void **state)
{
    struct fx *f = *state;
    int64_t shape[2] = {N, D}, shape3[3] = {1, N, D}, inner2[2] = {2 * D, 2}, overlap[2] = {D - 1, 1};
    static float wide[N * 2 * D];
    tt_array t[8];
    tt_array_init(&t[0], f->rows, TODRE_DTYPE_I32, 2, shape, NULL);
    tt_array_init(&t[1], f->rows, TODRE_DTYPE_F32, 1, shape, NULL);
    tt_array_init(&t[2], f->rows, TODRE_DTYPE_F32, 3, shape3, NULL);
    tt_array_init(&t[3], wide, TODRE_DTYPE_F32, 2, shape, inner2);
    tt_array_init(&t[4], f->rows, TODRE_DTYPE_F32, 2, shape, overlap);
    tt_array_init(&t[5], f->rows, TODRE_DTYPE_U8, 2, shape, NULL);
    tt_array_init(&t[6], f->rows, TODRE_DTYPE_F32, 2, shape, NULL);
    tt_array_on(&t[6], kDLCUDA, 0); /* device memory on a CPU context */
    tt_array_init(&t[7], f->rows, TODRE_DTYPE_F32, 2, shape, NULL);
    tt_array_on(&t[7], kDLCUDAManaged, 0);
    for (int i = 0; i < 8; i++) FAILS(f, &t[i].dl, NULL, f->out, TODRE_ERR_INVALID_ARGUMENT, "embeddings");
}

/* n = 0 and d = 0 are invalid arguments, not empty results. */
static void test_empty_input(void **state)
{
    struct fx *f = *state;
    int64_t no_rows[2] = {0, D}, no_cols[2] = {N, 0};
    tt_array a, b;
    FAILS(f, tt_array_init(&a, NULL, TODRE_DTYPE_F32, 2, no_rows, NULL), NULL, f->out,
          TODRE_ERR_INVALID_ARGUMENT, "embeddings");
    FAILS(f, tt_array_init(&b, NULL, TODRE_DTYPE_F32, 2, no_cols, NULL), NULL, f->out,
          TODRE_ERR_INVALID_ARGUMENT, "embeddings");
}

/* CLS map: wrong dtype, length, rank, frame split or device. */
static void test_cls(void **state)
{
    struct fx *f = *state;
    int64_t short_len = N - 1, video_bad[2] = {5, 2}, video_zero[2] = {N, 0}, rank3[3] = {2, 2, 3};
    tt_array t[6];
    tt_array1(&t[0], f->cls, TODRE_DTYPE_I64, N / 2);
    tt_array_init(&t[1], f->cls, TODRE_DTYPE_F32, 1, &short_len, NULL);
    tt_array_init(&t[2], f->cls, TODRE_DTYPE_F32, 2, video_bad, NULL);
    tt_array_init(&t[3], f->cls, TODRE_DTYPE_F32, 3, rank3, NULL);
    tt_array_init(&t[4], NULL, TODRE_DTYPE_F32, 2, video_zero, NULL);
    tt_array1(&t[5], f->cls, TODRE_DTYPE_F32, N);
    tt_array_on(&t[5], kDLCUDA, 0);
    for (int i = 0; i < 6; i++) FAILS(f, f->emb, &t[i].dl, f->out, TODRE_ERR_INVALID_ARGUMENT, "cls");
}

/* CLS pivot and CLS_TOPK need a CLS map. */
static void test_cls_required(void **state)
{
    struct fx *f = *state;
    tt_cfg_set(f->cfg, TODRE_SELECT_PIVOT, TODRE_PIVOT_CLS);
    FAILS(f, f->emb, NULL, f->out, TODRE_ERR_INVALID_ARGUMENT, "cls");
    tt_cfg_set(f->cfg, TODRE_SELECT_OBJECTIVE, TODRE_OBJECTIVE_MAX_MIN);
    FAILS(f, f->emb, NULL, f->out, TODRE_ERR_INVALID_ARGUMENT, "cls");
    tt_cfg_set(f->cfg, TODRE_SELECT_PIVOT, TODRE_PIVOT_AUTO);
    tt_cfg_set(f->cfg, TODRE_SELECT_OBJECTIVE, TODRE_OBJECTIVE_CLS_TOPK);
    FAILS(f, f->emb, NULL, f->out, TODRE_ERR_INVALID_ARGUMENT, "cls");
    tt_assert_ok(todre_select(f->ctx, f->cfg, f->emb, f->cls_t, f->out));
    tt_cfg_set(f->cfg, TODRE_SELECT_OBJECTIVE, TODRE_OBJECTIVE_MAX_SUM);
}

/* The output must be int64 [k] (or [2, k] for ORDER_BOTH), contiguous rows,
 * on the context's device. */
static void test_out(void **state)
{
    struct fx *f = *state;
    int64_t kp1 = K + 1, km1 = K - 1, both[2] = {2, K}, three[2] = {3, K}, strided[1] = {2};
    tt_array t[7];
    tt_array1(&t[0], f->out_buf, TODRE_DTYPE_F32, K);
    tt_array1(&t[1], f->out_buf, TODRE_DTYPE_I32, K);
    tt_array_init(&t[2], f->out_buf, TODRE_DTYPE_I64, 1, &kp1, NULL);
    tt_array_init(&t[3], f->out_buf, TODRE_DTYPE_I64, 1, &km1, NULL);
    tt_array_init(&t[4], f->out_buf, TODRE_DTYPE_I64, 2, both, NULL); /* BOTH layout, POSITION order */
    int64_t k = K;
    tt_array_init(&t[5], f->out_buf, TODRE_DTYPE_I64, 1, &k, strided);
    tt_array1(&t[6], f->out_buf, TODRE_DTYPE_I64, K);
    tt_array_on(&t[6], kDLCUDA, 0);
    for (int i = 0; i < 7; i++) FAILS(f, f->emb, NULL, &t[i].dl, TODRE_ERR_INVALID_ARGUMENT, "out");
    /* ORDER_BOTH needs [2, k]: [k] and [3, k] are wrong */
    tt_cfg_set(f->cfg, TODRE_SELECT_ORDER, TODRE_ORDER_BOTH);
    FAILS(f, f->emb, NULL, f->out, TODRE_ERR_INVALID_ARGUMENT, "out");
    tt_array t3;
    FAILS(f, f->emb, NULL, tt_array_init(&t3, f->out_buf, TODRE_DTYPE_I64, 2, three, NULL),
          TODRE_ERR_INVALID_ARGUMENT, "out");
    tt_cfg_set(f->cfg, TODRE_SELECT_ORDER, TODRE_ORDER_POSITION);
}

/* keep above n is an error at selection time. */
static void test_keep_out_of_range(void **state)
{
    struct fx *f = *state;
    int64_t big = N + 1;
    tt_array out;
    tt_cfg_set(f->cfg, TODRE_SELECT_KEEP, N + 1);
    FAILS(f, f->emb, NULL, tt_array_init(&out, f->out_buf, TODRE_DTYPE_I64, 1, &big, NULL),
          TODRE_ERR_INVALID_ARGUMENT, "keep");
    tt_cfg_set(f->cfg, TODRE_SELECT_KEEP, K);
}

/* A pivot range that does not fit the token set is rejected; CLS_TOPK
 * ignores the range. */
static void test_pivot_range(void **state)
{
    struct fx *f = *state;
    static const int64_t bad[][2] = {{N, -1}, {0, N + 1}, {5, 3}, {4, 4}, {0, 0},
                                     {INT64_MAX - 1, INT64_MAX}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tt_cfg_set(f->cfg, TODRE_SELECT_PIVOT_LO, bad[i][0]);
        tt_cfg_set(f->cfg, TODRE_SELECT_PIVOT_HI, bad[i][1]);
        for (int piv = 0; piv <= 5; piv++) {
            tt_cfg_set(f->cfg, TODRE_SELECT_PIVOT, piv);
            FAILS(f, f->emb, f->cls_t, f->out, TODRE_ERR_INVALID_ARGUMENT, "pivot");
        }
        tt_cfg_set(f->cfg, TODRE_SELECT_OBJECTIVE, TODRE_OBJECTIVE_CLS_TOPK);
        tt_assert_ok(todre_select(f->ctx, f->cfg, f->emb, f->cls_t, f->out));
        tt_cfg_set(f->cfg, TODRE_SELECT_OBJECTIVE, TODRE_OBJECTIVE_MAX_SUM);
    }
    tt_cfg_set(f->cfg, TODRE_SELECT_PIVOT_LO, 0);
    tt_cfg_set(f->cfg, TODRE_SELECT_PIVOT_HI, -1);
    tt_cfg_set(f->cfg, TODRE_SELECT_PIVOT, TODRE_PIVOT_AUTO);
}

/* NaN or Inf anywhere in the embeddings (any dtype, any row, also a row
 * that would not be selected) or in the CLS map (also when the pivot does
 * not use it) is NONFINITE, naming the tensor. */
static void check_nonfinite_rows(struct fx *f, todre_dtype dt)
{
    static const double bad[] = {NAN, INFINITY, -INFINITY};
    uint16_t half[N * D];
    for (int b = 0; b < 3; b++) {
        for (int row = 0; row < N; row += N - 1) {
            float rows[N * D];
            memcpy(rows, f->rows, sizeof rows);
            rows[row * D + D / 2] = (float)bad[b];
            void *data = rows;
            if (dt == TODRE_DTYPE_F16) {
                tt_to_f16(half, rows, N * D);
                data = half;
            } else if (dt == TODRE_DTYPE_BF16) {
                tt_to_bf16(half, rows, N * D);
                data = half;
            }
            tt_array t;
            FAILS(f, tt_array2(&t, data, dt, N, D, D), NULL, f->out, TODRE_ERR_NONFINITE,
                  "embeddings");
        }
    }
}

static void test_nonfinite(void **state)
{
    struct fx *f = *state;
    check_nonfinite_rows(f, TODRE_DTYPE_F32);
    check_nonfinite_rows(f, TODRE_DTYPE_F16);
    check_nonfinite_rows(f, TODRE_DTYPE_BF16);
    static const double bad[] = {NAN, INFINITY, -INFINITY};
    for (int b = 0; b < 3; b++) {
        float cls[N];
        memcpy(cls, f->cls, sizeof cls);
        cls[N - 1] = (float)bad[b];
        tt_array ta;
        const DLTensor *t = tt_array1(&ta, cls, TODRE_DTYPE_F32, N);
        for (int piv = 0; piv <= 5; piv++) { /* also pivots that ignore the map */
            tt_cfg_set(f->cfg, TODRE_SELECT_PIVOT, piv);
            FAILS(f, f->emb, t, f->out, TODRE_ERR_NONFINITE, "cls");
        }
        tt_cfg_set(f->cfg, TODRE_SELECT_OBJECTIVE, TODRE_OBJECTIVE_CLS_TOPK);
        FAILS(f, f->emb, t, f->out, TODRE_ERR_NONFINITE, "cls");
        tt_cfg_set(f->cfg, TODRE_SELECT_OBJECTIVE, TODRE_OBJECTIVE_MAX_SUM);
    }
    tt_cfg_set(f->cfg, TODRE_SELECT_PIVOT, TODRE_PIVOT_AUTO);
    /* f16 CLS map with an Inf (0x7c00) */
    uint16_t hcls[N];
    tt_to_f16(hcls, f->cls, N);
    hcls[3] = 0x7c00;
    tt_array t;
    FAILS(f, f->emb, tt_array1(&t, hcls, TODRE_DTYPE_F16, N), f->out, TODRE_ERR_NONFINITE, "cls");
}

/* Each order writes what it promises: SELECTION starts at the pivot,
 * POSITION is ascending, BOTH holds the two rows of the same set. */
static void test_orders(void **state)
{
    struct fx *f = *state;
    int64_t sel[K], pos[K], both_sel[K], both_pos[K];
    tt_array o;
    tt_cfg_set(f->cfg, TODRE_SELECT_ORDER, TODRE_ORDER_SELECTION);
    tt_assert_ok(todre_select(f->ctx, f->cfg, f->emb, f->cls_t, tt_array1(&o, sel, TODRE_DTYPE_I64, K)));
    tt_cfg_set(f->cfg, TODRE_SELECT_ORDER, TODRE_ORDER_POSITION);
    tt_assert_ok(todre_select(f->ctx, f->cfg, f->emb, f->cls_t, tt_array1(&o, pos, TODRE_DTYPE_I64, K)));
    tt_assert_ok(tt_select_both(f->ctx, f->cfg, f->emb, f->cls_t, K, both_sel, both_pos));
    tt_cfg_set(f->cfg, TODRE_SELECT_ORDER, TODRE_ORDER_POSITION);
    assert_memory_equal(sel, both_sel, sizeof sel);
    assert_memory_equal(pos, both_pos, sizeof pos);
    tt_assert_position_order(sel, pos, K, N);
    int argmax = 0; /* AUTO with a CLS map is the CLS pivot */
    for (int i = 1; i < N; i++) if (f->cls[i] > f->cls[argmax]) argmax = i;
    assert_int_equal(sel[0], argmax);
}

/* ORDER_BOTH with a padded row stride in the output ([2, k], row stride > k). */
static void test_both_row_stride(void **state)
{
    struct fx *f = *state;
    int64_t buf[2 * (K + 3)], sel[K], pos[K];
    for (int i = 0; i < 2 * (K + 3); i++) buf[i] = -9;
    int64_t shape[2] = {2, K}, strides[2] = {K + 3, 1};
    tt_array o;
    tt_cfg_set(f->cfg, TODRE_SELECT_ORDER, TODRE_ORDER_BOTH);
    tt_assert_ok(todre_select(f->ctx, f->cfg, f->emb, NULL,
                              tt_array_init(&o, buf, TODRE_DTYPE_I64, 2, shape, strides)));
    tt_assert_ok(tt_select_both(f->ctx, f->cfg, f->emb, NULL, K, sel, pos));
    assert_memory_equal(buf, sel, sizeof sel);
    assert_memory_equal(buf + K + 3, pos, sizeof pos);
    for (int i = K; i < K + 3; i++) assert_int_equal(buf[i], -9); /* padding untouched */
    tt_cfg_set(f->cfg, TODRE_SELECT_ORDER, TODRE_ORDER_POSITION);
}

/* A CLS map may be strided (a column of a wider array, or a video map with
 * padded frames): the result equals that of a contiguous copy. */
static void test_strided_cls(void **state)
{
    struct fx *f = *state;
    float column[N * 3], frames[3 * (N / 3 + 2)];
    for (int i = 0; i < N; i++) {
        column[3 * i] = f->cls[i];
        column[3 * i + 1] = column[3 * i + 2] = NAN; /* never read */
    }
    for (int fr = 0; fr < 3; fr++)
        for (int t = 0; t < N / 3 + 2; t++)
            frames[fr * (N / 3 + 2) + t] = t < N / 3 ? f->cls[fr * (N / 3) + t] : NAN;
    int64_t n = N, s3 = 3, vshape[2] = {3, N / 3}, vstrides[2] = {N / 3 + 2, 1};
    tt_array col_a, vid_a;
    const DLTensor *col = tt_array_init(&col_a, column, TODRE_DTYPE_F32, 1, &n, &s3);
    const DLTensor *vid = tt_array_init(&vid_a, frames, TODRE_DTYPE_F32, 2, vshape, vstrides);
    for (int obj = 0; obj < 3; obj += 2) { /* MAX_SUM with the CLS pivot; CLS_TOPK */
        todre_select_config *cfg = tt_config((todre_objective)obj, TODRE_PIVOT_CLS, K, TODRE_ORDER_BOTH);
        int64_t want[K], want_pos[K], got[K], got_pos[K];
        tt_assert_ok(tt_select_both(f->ctx, cfg, f->emb, f->cls_t, K, want, want_pos));
        tt_assert_ok(tt_select_both(f->ctx, cfg, f->emb, col, K, got, got_pos));
        assert_memory_equal(got, want, sizeof want);
        tt_assert_ok(tt_select_both(f->ctx, cfg, f->emb, vid, K, got, got_pos));
        assert_memory_equal(got, want, sizeof want);
        todre_select_config_destroy(cfg);
    }
}

/* k = n keeps every token; k = 1 keeps only the pivot; n = 1 works for every
 * objective; keep via ratio = 1.0 equals keep = n. */
static void test_extreme_budgets(void **state)
{
    struct fx *f = *state;
    int64_t sel[N], pos[N];
    int argmax = 0;
    for (int i = 1; i < N; i++) if (f->cls[i] > f->cls[argmax]) argmax = i;
    for (int obj = 0; obj < 3; obj++) {
        todre_select_config *cfg = tt_config((todre_objective)obj, TODRE_PIVOT_AUTO, N, TODRE_ORDER_BOTH);
        tt_assert_ok(tt_select_both(f->ctx, cfg, f->emb, f->cls_t, N, sel, pos));
        for (int i = 0; i < N; i++) assert_int_equal(pos[i], i);
        tt_cfg_set(cfg, TODRE_SELECT_KEEP, 1);
        tt_assert_ok(tt_select_both(f->ctx, cfg, f->emb, f->cls_t, 1, sel, pos));
        if (obj != TODRE_OBJECTIVE_MAX_MIN) assert_int_equal(sel[0], argmax); /* CLS pivot / top-1 */
        tt_array one, one_cls;
        tt_assert_ok(tt_select_both(f->ctx, cfg, tt_array2(&one, f->rows, TODRE_DTYPE_F32, 1, D, D),
                                    tt_array1(&one_cls, f->cls, TODRE_DTYPE_F32, 1), 1, sel, pos));
        assert_int_equal(sel[0], 0);
        assert_int_equal(pos[0], 0);
        todre_select_config_destroy(cfg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_is_valid),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_embeddings),
        cmocka_unit_test(test_empty_input),
        cmocka_unit_test(test_cls),
        cmocka_unit_test(test_cls_required),
        cmocka_unit_test(test_out),
        cmocka_unit_test(test_keep_out_of_range),
        cmocka_unit_test(test_pivot_range),
        cmocka_unit_test(test_nonfinite),
        cmocka_unit_test(test_orders),
        cmocka_unit_test(test_both_row_stride),
        cmocka_unit_test(test_strided_cls),
        cmocka_unit_test(test_extreme_budgets),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
