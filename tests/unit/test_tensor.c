/* Tensor descriptors: creation, queries, re-pointing, and DLPack import. The
 * DLPack struct is written out here from the published specification (not
 * taken from libtodre's sources), so a layout mistake on either side shows. */
#include <string.h>

#include "todre_test.h"

/* DLPack DLTensor (>= 0.5, unchanged in 1.x). */
typedef struct {
    int32_t device_type; /* kDLCPU 1, kDLCUDA 2, kDLCUDAHost 3, kDLOpenCL 4, kDLCUDAManaged 13 */
    int32_t device_id;
} dl_device;
typedef struct {
    uint8_t code; /* kDLInt 0, kDLUInt 1, kDLFloat 2, kDLOpaqueHandle 3, kDLBfloat 4, kDLBool 6 */
    uint8_t bits;
    uint16_t lanes;
} dl_dtype;
typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape;
    int64_t *strides; /* elements; NULL = compact row-major */
    uint64_t byte_offset;
} dl_tensor;

static void assert_info(const todre_tensor *t, todre_dtype dt, todre_device_type dev, int rank,
                        const int64_t *shape, const int64_t *strides)
{
    todre_dtype got_dt;
    todre_device_type got_dev;
    int got_rank;
    int64_t got_shape[TODRE_MAX_RANK], got_strides[TODRE_MAX_RANK];
    tt_assert_ok(todre_tensor_info(t, &got_dt, &got_dev, &got_rank, got_shape, got_strides));
    assert_int_equal(got_dt, dt);
    assert_int_equal(got_dev, dev);
    assert_int_equal(got_rank, rank);
    for (int i = 0; i < rank; i++) {
        assert_int_equal(got_shape[i], shape[i]);
        assert_int_equal(got_strides[i], strides[i]);
    }
}

/* Without strides a descriptor is C-contiguous; given strides are kept. */
static void test_create_and_info(void **state)
{
    (void)state;
    float buf[64];
    int64_t shape[3] = {2, 3, 4}, contig[3] = {12, 4, 1}, custom[3] = {20, 5, 1};
    todre_tensor *t = tt_tensor(buf, TODRE_DTYPE_F32, 3, shape, NULL);
    assert_info(t, TODRE_DTYPE_F32, TODRE_DEVICE_HOST, 3, shape, contig);
    tt_assert_ok(todre_tensor_info(t, NULL, NULL, NULL, NULL, NULL)); /* every out may be NULL */
    todre_tensor_destroy(t);
    t = tt_tensor(buf, TODRE_DTYPE_BF16, 3, shape, custom);
    assert_info(t, TODRE_DTYPE_BF16, TODRE_DEVICE_HOST, 3, shape, custom);
    float other[64];
    tt_assert_ok(todre_tensor_set_data(t, other));
    assert_info(t, TODRE_DTYPE_BF16, TODRE_DEVICE_HOST, 3, shape, custom);
    todre_tensor_destroy(t);
    todre_tensor_destroy(NULL);
    /* rank 0 (a scalar) and empty tensors (NULL data allowed) */
    t = tt_tensor(buf, TODRE_DTYPE_I64, 0, NULL, NULL);
    todre_tensor_destroy(t);
    int64_t empty[2] = {0, 5};
    t = tt_tensor(NULL, TODRE_DTYPE_F16, 2, empty, NULL);
    tt_assert_ok(todre_tensor_set_data(t, NULL));
    todre_tensor_destroy(t);
}

/* A CUDA descriptor keeps its device and ordinal. */
static void test_cuda_descriptor(void **state)
{
    (void)state;
    todre_tensor *t = NULL;
    int64_t shape[1] = {4}, strides[1] = {1};
    float fake[4]; /* never dereferenced by a descriptor */
    tt_assert_ok(todre_tensor_create(fake, TODRE_DTYPE_F32, TODRE_DEVICE_CUDA, 3, 1, shape, NULL, &t));
    assert_info(t, TODRE_DTYPE_F32, TODRE_DEVICE_CUDA, 1, shape, strides);
    todre_tensor_destroy(t);
}

/* Every bad argument is rejected with a message naming it; out is NULL. */
static void test_create_contract(void **state)
{
    (void)state;
    float buf[16];
    int64_t shape[2] = {4, 4}, neg_shape[2] = {4, -1}, neg_strides[2] = {-4, 1};
    todre_tensor *t = (todre_tensor *)&t;
#define CREATE(data, dt, dev, idx, rank, sh, st) todre_tensor_create(data, dt, dev, idx, rank, sh, st, &t)
    tt_assert_fails(NULL, todre_tensor_create(buf, TODRE_DTYPE_F32, TODRE_DEVICE_HOST, 0, 2, shape,
                                              NULL, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "out");
    tt_assert_fails(NULL, CREATE(buf, (todre_dtype)6, TODRE_DEVICE_HOST, 0, 2, shape, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "dtype");
    assert_null(t);
    tt_assert_fails(NULL, CREATE(buf, (todre_dtype)-1, TODRE_DEVICE_HOST, 0, 2, shape, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "dtype");
    tt_assert_fails(NULL, CREATE(buf, TODRE_DTYPE_F32, (todre_device_type)2, 0, 2, shape, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "device");
    tt_assert_fails(NULL, CREATE(buf, TODRE_DTYPE_F32, TODRE_DEVICE_CUDA, -1, 2, shape, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "device_index");
    tt_assert_fails(NULL, CREATE(buf, TODRE_DTYPE_F32, TODRE_DEVICE_HOST, 0, -1, shape, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "rank");
    tt_assert_fails(NULL, CREATE(buf, TODRE_DTYPE_F32, TODRE_DEVICE_HOST, 0, TODRE_MAX_RANK + 1,
                                 shape, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "rank");
    tt_assert_fails(NULL, CREATE(buf, TODRE_DTYPE_F32, TODRE_DEVICE_HOST, 0, 2, NULL, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "shape");
    tt_assert_fails(NULL, CREATE(buf, TODRE_DTYPE_F32, TODRE_DEVICE_HOST, 0, 2, neg_shape, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "shape");
    tt_assert_fails(NULL, CREATE(buf, TODRE_DTYPE_F32, TODRE_DEVICE_HOST, 0, 2, shape, neg_strides),
                    TODRE_ERR_INVALID_ARGUMENT, "strides");
    tt_assert_fails(NULL, CREATE(NULL, TODRE_DTYPE_F32, TODRE_DEVICE_HOST, 0, 2, shape, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "data");
    int64_t huge[3] = {INT64_MAX / 2, 4, 4};
    tt_assert_fails(NULL, CREATE(buf, TODRE_DTYPE_F32, TODRE_DEVICE_HOST, 0, 3, huge, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "shape");
    assert_null(t);
#undef CREATE
}

/* set_data / info / destroy on bad handles. */
static void test_handle_contract(void **state)
{
    (void)state;
    float buf[16];
    int rank;
    tt_assert_fails(NULL, todre_tensor_set_data(NULL, buf), TODRE_ERR_INVALID_ARGUMENT, "t");
    tt_assert_fails(NULL, todre_tensor_info(NULL, NULL, NULL, &rank, NULL, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "t");
    todre_tensor *t = tt_tensor1(buf, TODRE_DTYPE_F32, 16);
    tt_assert_fails(NULL, todre_tensor_set_data(t, NULL), TODRE_ERR_INVALID_ARGUMENT, "data");
    todre_tensor_destroy(t);
}

/* ---- DLPack -------------------------------------------------------------------- */

static todre_tensor *import(dl_tensor *dl)
{
    todre_tensor *t = NULL;
    tt_assert_ok(todre_tensor_from_dlpack(dl, &t));
    assert_non_null(t);
    return t;
}

/* dtype codes map onto libtodre dtypes; strides NULL means compact. */
static void test_dlpack_dtypes(void **state)
{
    (void)state;
    static const struct { dl_dtype dl; todre_dtype want; } map[] = {
        {{2, 32, 1}, TODRE_DTYPE_F32}, {{2, 16, 1}, TODRE_DTYPE_F16},
        {{4, 16, 1}, TODRE_DTYPE_BF16}, {{0, 32, 1}, TODRE_DTYPE_I32},
        {{0, 64, 1}, TODRE_DTYPE_I64}, {{1, 8, 1}, TODRE_DTYPE_U8}, {{6, 8, 1}, TODRE_DTYPE_U8},
    };
    int64_t buf[64], shape[2] = {3, 5}, contig[2] = {5, 1};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        dl_tensor dl = {buf, {1, 0}, 2, map[i].dl, shape, NULL, 0};
        todre_tensor *t = import(&dl);
        assert_info(t, map[i].want, TODRE_DEVICE_HOST, 2, shape, contig);
        todre_tensor_destroy(t);
    }
}

/* Devices: CPU and CUDA-host memory are host; CUDA and managed are CUDA with
 * the DLPack device id; explicit strides are kept. */
static void test_dlpack_devices_and_strides(void **state)
{
    (void)state;
    float buf[64];
    int64_t shape[2] = {4, 6}, strides[2] = {8, 1};
    static const struct { int32_t type, id; todre_device_type want; } dev[] = {
        {1, 0, TODRE_DEVICE_HOST}, {3, 0, TODRE_DEVICE_HOST},
        {2, 1, TODRE_DEVICE_CUDA}, {13, 0, TODRE_DEVICE_CUDA},
    };
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) {
        dl_tensor dl = {buf, {dev[i].type, dev[i].id}, 2, {2, 32, 1}, shape, strides, 0};
        todre_tensor *t = import(&dl);
        assert_info(t, TODRE_DTYPE_F32, dev[i].want, 2, shape, strides);
        todre_tensor_destroy(t);
    }
}

/* byte_offset is applied to data: a CLS_TOPK selection through an imported
 * view starting 3 floats in sees the shifted values. */
static void test_dlpack_byte_offset(void **state)
{
    (void)state;
    float cls[10] = {9, 9, 9, 0.1f, 0.5f, 0.2f, 0.9f, 0.3f, 0.0f, 0.4f};
    float emb[7] = {1, 2, 3, 4, 5, 6, 7};
    int64_t cls_shape[1] = {7}, emb_shape[2] = {7, 1};
    dl_tensor dl_cls = {cls, {1, 0}, 1, {2, 32, 1}, cls_shape, NULL, 3 * sizeof(float)};
    dl_tensor dl_emb = {emb, {1, 0}, 2, {2, 32, 1}, emb_shape, NULL, 0};
    todre_tensor *tc = import(&dl_cls), *te = import(&dl_emb);
    int64_t top[2] = {-1, -1};
    todre_tensor *out = tt_tensor1(top, TODRE_DTYPE_I64, 2);
    todre_context *ctx = tt_cpu_context();
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_CLS_TOPK, TODRE_PIVOT_AUTO, 2,
                                         TODRE_ORDER_SELECTION);
    tt_assert_ok(todre_select(ctx, cfg, te, tc, out));
    assert_int_equal(top[0], 3); /* 0.9 */
    assert_int_equal(top[1], 1); /* 0.5 */
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
    todre_tensor_destroy(out);
    todre_tensor_destroy(tc);
    todre_tensor_destroy(te);
}

/* Unsupported DLPack tensors are rejected naming dl_tensor (or out). */
static void test_dlpack_contract(void **state)
{
    (void)state;
    float buf[16];
    int64_t shape[2] = {4, 4}, neg[2] = {4, -4};
    todre_tensor *t = (todre_tensor *)&t;
    dl_tensor ok = {buf, {1, 0}, 2, {2, 32, 1}, shape, NULL, 0};
    tt_assert_fails(NULL, todre_tensor_from_dlpack(&ok, NULL), TODRE_ERR_INVALID_ARGUMENT, "out");
    tt_assert_fails(NULL, todre_tensor_from_dlpack(NULL, &t), TODRE_ERR_INVALID_ARGUMENT, "dl_tensor");
    assert_null(t);
    static const struct { dl_tensor dl; const char *name; } bad[] = {
        {{NULL, {1, 0}, 2, {2, 64, 1}, NULL, NULL, 0}, "dl_tensor"}, /* float64 */
        {{NULL, {1, 0}, 2, {2, 32, 4}, NULL, NULL, 0}, "dl_tensor"}, /* 4 lanes */
        {{NULL, {1, 0}, 2, {3, 64, 1}, NULL, NULL, 0}, "dl_tensor"}, /* opaque handle */
        {{NULL, {1, 0}, 2, {4, 32, 1}, NULL, NULL, 0}, "dl_tensor"}, /* bfloat32 */
        {{NULL, {4, 0}, 2, {2, 32, 1}, NULL, NULL, 0}, "dl_tensor"}, /* OpenCL */
        {{NULL, {1, 0}, 9, {2, 32, 1}, NULL, NULL, 0}, "dl_tensor"}, /* rank 9 */
        {{NULL, {1, 0}, -1, {2, 32, 1}, NULL, NULL, 0}, "dl_tensor"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dl_tensor dl = bad[i].dl;
        dl.data = buf;
        dl.shape = shape;
        tt_assert_fails(NULL, todre_tensor_from_dlpack(&dl, &t), TODRE_ERR_INVALID_ARGUMENT,
                        bad[i].name);
        assert_null(t);
    }
    dl_tensor negative = {buf, {1, 0}, 2, {2, 32, 1}, shape, neg, 0};
    tt_assert_fails(NULL, todre_tensor_from_dlpack(&negative, &t), TODRE_ERR_INVALID_ARGUMENT,
                    "strides");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_and_info),
        cmocka_unit_test(test_cuda_descriptor),
        cmocka_unit_test(test_create_contract),
        cmocka_unit_test(test_handle_contract),
        cmocka_unit_test(test_dlpack_dtypes),
        cmocka_unit_test(test_dlpack_devices_and_strides),
        cmocka_unit_test(test_dlpack_byte_offset),
        cmocka_unit_test(test_dlpack_contract),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
