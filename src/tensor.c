/* Tensor descriptors: non-owning views of caller memory. */
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "dlpack_abi.h"

size_t todre_dtype_size(todre_dtype dt)
{
    switch (dt) {
    case TODRE_DTYPE_F32: return 4;
    case TODRE_DTYPE_F16: return 2;
    case TODRE_DTYPE_BF16: return 2;
    case TODRE_DTYPE_I32: return 4;
    case TODRE_DTYPE_I64: return 8;
    case TODRE_DTYPE_U8: return 1;
    }
    return 0;
}

const char *todre_dtype_name(todre_dtype dt)
{
    switch (dt) {
    case TODRE_DTYPE_F32: return "f32";
    case TODRE_DTYPE_F16: return "f16";
    case TODRE_DTYPE_BF16: return "bf16";
    case TODRE_DTYPE_I32: return "i32";
    case TODRE_DTYPE_I64: return "i64";
    case TODRE_DTYPE_U8: return "u8";
    }
    return "unknown";
}

int todre_dtype_is_float(todre_dtype dt)
{
    return dt == TODRE_DTYPE_F32 || dt == TODRE_DTYPE_F16 || dt == TODRE_DTYPE_BF16;
}

/* Shared by both constructors: everything but the data pointer is checked. */
static todre_status tensor_init(struct todre_tensor *t, void *data, todre_dtype dtype,
                                todre_device_type device, int device_index, int rank,
                                const int64_t *shape, const int64_t *strides)
{
    if (todre_dtype_size(dtype) == 0)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "dtype: unknown value %d", (int)dtype);
    if (device != TODRE_DEVICE_HOST && device != TODRE_DEVICE_CUDA)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "device: unknown value %d", (int)device);
    if (device_index < 0)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "device_index: %d is negative", device_index);
    if (rank < 0 || rank > TODRE_MAX_RANK)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "rank: %d is outside [0, %d]", rank,
                          TODRE_MAX_RANK);
    if (rank > 0 && !shape)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "shape: NULL with rank %d", rank);
    int64_t count = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0)
            return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "shape[%d]: %lld is negative", i,
                              (long long)shape[i]);
        if (shape[i] > 0 && count > INT64_MAX / shape[i])
            return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "shape: element count overflows");
        count *= shape[i];
    }
    if (!data && count > 0)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "data: NULL for a non-empty tensor");
    memset(t, 0, sizeof *t);
    t->data = data;
    t->dtype = dtype;
    t->device = device;
    t->device_index = device == TODRE_DEVICE_HOST ? 0 : device_index;
    t->rank = rank;
    int64_t contiguous = 1;
    for (int i = rank - 1; i >= 0; i--) {
        t->shape[i] = shape[i];
        if (strides) {
            if (strides[i] < 0)
                return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                                  "strides[%d]: %lld is negative", i, (long long)strides[i]);
            t->strides[i] = strides[i];
        } else {
            t->strides[i] = contiguous;
        }
        contiguous *= shape[i] > 0 ? shape[i] : 1;
    }
    return TODRE_OK;
}

todre_status todre_tensor_create(void *data, todre_dtype dtype, todre_device_type device,
                                 int device_index, int rank, const int64_t *shape,
                                 const int64_t *strides, todre_tensor **out)
{
    todre_clear_error(NULL);
    if (!out) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "out: NULL");
    *out = NULL;
    struct todre_tensor tmp;
    todre_status st = tensor_init(&tmp, data, dtype, device, device_index, rank, shape, strides);
    if (st != TODRE_OK) return st;
    struct todre_tensor *t = malloc(sizeof *t);
    if (!t) return todre_fail(NULL, TODRE_ERR_OUT_OF_MEMORY, "tensor: out of memory");
    *t = tmp;
    *out = t;
    return TODRE_OK;
}

static todre_status dl_dtype(const struct todre_dl_dtype *d, todre_dtype *out)
{
    if (d->lanes != 1)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "dl_tensor: dtype lanes %u (only 1)",
                          (unsigned)d->lanes);
    if (d->code == TODRE_DL_FLOAT && d->bits == 32) *out = TODRE_DTYPE_F32;
    else if (d->code == TODRE_DL_FLOAT && d->bits == 16) *out = TODRE_DTYPE_F16;
    else if (d->code == TODRE_DL_BFLOAT && d->bits == 16) *out = TODRE_DTYPE_BF16;
    else if (d->code == TODRE_DL_INT && d->bits == 32) *out = TODRE_DTYPE_I32;
    else if (d->code == TODRE_DL_INT && d->bits == 64) *out = TODRE_DTYPE_I64;
    else if ((d->code == TODRE_DL_UINT || d->code == TODRE_DL_BOOL) && d->bits == 8) *out = TODRE_DTYPE_U8;
    else
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "dl_tensor: unsupported dtype (code %u, bits %u)", (unsigned)d->code,
                          (unsigned)d->bits);
    return TODRE_OK;
}

todre_status todre_tensor_from_dlpack(const void *dl_tensor, todre_tensor **out)
{
    todre_clear_error(NULL);
    if (!out) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "out: NULL");
    *out = NULL;
    if (!dl_tensor) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "dl_tensor: NULL");
    const struct todre_dl_tensor *dl = dl_tensor;
    todre_device_type device;
    switch (dl->device.device_type) {
    case TODRE_DL_CPU:
    case TODRE_DL_CUDA_HOST: device = TODRE_DEVICE_HOST; break;
    case TODRE_DL_CUDA:
    case TODRE_DL_CUDA_MANAGED: device = TODRE_DEVICE_CUDA; break;
    default:
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "dl_tensor: unsupported device type %d", (int)dl->device.device_type);
    }
    todre_dtype dtype = TODRE_DTYPE_F32;
    todre_status st = dl_dtype(&dl->dtype, &dtype);
    if (st != TODRE_OK) return st;
    if (dl->ndim < 0 || dl->ndim > TODRE_MAX_RANK)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "dl_tensor: ndim %d is outside [0, %d]",
                          (int)dl->ndim, TODRE_MAX_RANK);
    void *data = dl->data ? (char *)dl->data + dl->byte_offset : NULL;
    return todre_tensor_create(data, dtype, device, device == TODRE_DEVICE_HOST ? 0 : dl->device.device_id,
                               dl->ndim, dl->shape, dl->strides, out);
}

void todre_tensor_destroy(todre_tensor *t) { free(t); }

todre_status todre_tensor_set_data(todre_tensor *t, void *data)
{
    todre_clear_error(NULL);
    if (!t) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "t: NULL");
    int empty = 0;
    for (int i = 0; i < t->rank; i++) empty |= t->shape[i] == 0;
    if (!data && !empty)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "data: NULL for a non-empty tensor");
    t->data = data;
    return TODRE_OK;
}

todre_status todre_tensor_info(const todre_tensor *t, todre_dtype *dtype,
                               todre_device_type *device, int *rank, int64_t *shape,
                               int64_t *strides)
{
    todre_clear_error(NULL);
    if (!t) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "t: NULL");
    if (dtype) *dtype = t->dtype;
    if (device) *device = t->device;
    if (rank) *rank = t->rank;
    for (int i = 0; i < t->rank; i++) {
        if (shape) shape[i] = t->shape[i];
        if (strides) strides[i] = t->strides[i];
    }
    return TODRE_OK;
}

todre_status todre_check_tensor(struct todre_context *ctx, const struct todre_tensor *t,
                                const char *name, unsigned dtypes, todre_device_type device,
                                int device_index)
{
    if (!t) return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "%s: NULL", name);
    if (!(dtypes & TODRE_DT(t->dtype)))
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "%s: dtype %s is not accepted here", name,
                          todre_dtype_name(t->dtype));
    if (t->device != device)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "%s: lives in %s memory but the context runs on %s", name,
                          t->device == TODRE_DEVICE_HOST ? "host" : "CUDA device",
                          device == TODRE_DEVICE_HOST ? "the CPU" : "a CUDA device");
    if (device == TODRE_DEVICE_CUDA && t->device_index != device_index)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "%s: on CUDA device %d but the context uses device %d", name,
                          t->device_index, device_index);
    return TODRE_OK;
}
