/* DLTensor arguments: the one place DLPack codes are interpreted. Each
 * array argument is mapped, per call, into a struct todre_array on the
 * caller's stack (no allocation) and checked: dtype, device, rank, shape,
 * strides, data, byte extent (core.h: TODRE_MAX_ARRAY_BYTES, no wrap of
 * the address space) and alignment; outputs also must not alias themselves
 * (todre_array_map_out). Messages name the argument. */
#include <stdio.h>
#include <string.h>

#include "core.h"

/* DLPack's bool type code (DLPack >= 0.8; the vendored 0.6 header lacks it). */
#define DL_BOOL_CODE 6u

static int map_dtype(DLDataType t, todre_dtype *out)
{
    if (t.lanes != 1) return 0;
    switch (t.code) {
    case kDLFloat:
        if (t.bits == 32) { *out = TODRE_DTYPE_F32; return 1; }
        if (t.bits == 16) { *out = TODRE_DTYPE_F16; return 1; }
        return 0;
    case kDLBfloat:
        if (t.bits == 16) { *out = TODRE_DTYPE_BF16; return 1; }
        return 0;
    case kDLInt:
        if (t.bits == 32) { *out = TODRE_DTYPE_I32; return 1; }
        if (t.bits == 64) { *out = TODRE_DTYPE_I64; return 1; }
        return 0;
    case kDLUInt:
        if (t.bits == 8) { *out = TODRE_DTYPE_U8; return 1; }
        return 0;
    case DL_BOOL_CODE:
        if (t.bits == 8) { *out = TODRE_DTYPE_U8; return 1; }
        return 0;
    default:
        return 0;
    }
}

/* A DLPack dtype as NumPy would print it ("float64", "int16x4"). */
static void dl_dtype_name(DLDataType t, char *buf, size_t cap)
{
    const char *base;
    switch (t.code) {
    case kDLInt: base = "int"; break;
    case kDLUInt: base = "uint"; break;
    case kDLFloat: base = "float"; break;
    case kDLBfloat: base = "bfloat"; break;
    case kDLComplex: base = "complex"; break;
    case kDLOpaqueHandle: base = "opaque"; break;
    case DL_BOOL_CODE: base = "bool"; break;
    default: base = NULL; break;
    }
    if (!base)
        snprintf(buf, cap, "(code %u, bits %u, lanes %u)", (unsigned)t.code, (unsigned)t.bits,
                 (unsigned)t.lanes);
    else if (t.lanes != 1)
        snprintf(buf, cap, "%s%ux%u", base, (unsigned)t.bits, (unsigned)t.lanes);
    else
        snprintf(buf, cap, "%s%u", base, (unsigned)t.bits);
}

/* "float32, float16, bfloat16" for a dtype bitmask. */
static void accepted_names(unsigned dtypes, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int d = 0; d < TODRE_DTYPE_COUNT; d++) {
        if (!(dtypes & TODRE_DT(d))) continue;
        int w = snprintf(buf + len, cap - len, "%s%s", len ? ", " : "",
                         todre_dtype_name((todre_dtype)d));
        if (w < 0 || (size_t)w >= cap - len) break;
        len += (size_t)w;
    }
}

static const char *host_or_cuda(todre_device_type d)
{
    return d == TODRE_DEVICE_HOST ? "host" : "CUDA";
}

static todre_status check_device(struct todre_context *ctx, const struct todre_array *a,
                                 const char *name, enum todre_where where)
{
    if (where == TODRE_WHERE_HOST) {
        if (a->device != TODRE_DEVICE_HOST)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "%s: must be in host memory",
                              name);
        return TODRE_OK;
    }
    const struct todre_backend *be = ctx->be;
    if (where == TODRE_WHERE_ANY && a->device == TODRE_DEVICE_HOST) return TODRE_OK;
    if (a->device != be->device_type) {
        if (be->device_type == TODRE_DEVICE_HOST)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "%s: in %s memory but the context runs on the CPU", name,
                              host_or_cuda(a->device));
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "%s: in %s memory but the context runs on %s device %d", name,
                          host_or_cuda(a->device), host_or_cuda(be->device_type), be->device);
    }
    if (a->device != TODRE_DEVICE_HOST && a->device_index != be->device)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "%s: on %s device %d but the context uses device %d", name,
                          host_or_cuda(a->device), a->device_index, be->device);
    return TODRE_OK;
}

todre_status todre_array_map(struct todre_context *ctx, const DLTensor *dl, const char *name,
                             unsigned dtypes, enum todre_where where, struct todre_array *a)
{
    if (!dl) return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "%s: NULL", name);

    todre_dtype dt;
    if (!map_dtype(dl->dtype, &dt) || !(dtypes & TODRE_DT(dt))) {
        char have[48], want[64];
        dl_dtype_name(dl->dtype, have, sizeof have);
        accepted_names(dtypes, want, sizeof want);
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "%s: dtype %s is not accepted here (%s)", name, have, want);
    }

    switch ((int)dl->device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
        /* DLPack: "for vanilla CPU memory, pinned memory ... this is set to 0" */
        if (dl->device.device_id != 0)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "%s: device_id %d on host memory (kDLCPU, kDLCUDAHost): DLPack "
                              "gives host memory device_id 0",
                              name, (int)dl->device.device_id);
        a->device = TODRE_DEVICE_HOST;
        a->device_index = 0;
        break;
    case kDLCUDA:
    case kDLCUDAManaged:
        a->device = TODRE_DEVICE_CUDA;
        a->device_index = dl->device.device_id;
        if (a->device_index < 0)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "%s: device_id %d is negative",
                              name, a->device_index);
        break;
    default:
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "%s: DLPack device type %d is not supported (kDLCPU, kDLCUDAHost, "
                          "kDLCUDA, kDLCUDAManaged)",
                          name, (int)dl->device.device_type);
    }

    if (dl->ndim < 0 || dl->ndim > TODRE_MAX_RANK)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "%s: ndim %d is outside [0, %d]", name,
                          (int)dl->ndim, TODRE_MAX_RANK);
    if (dl->ndim > 0 && !dl->shape)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "%s: shape is NULL with ndim %d", name,
                          (int)dl->ndim);
    a->dtype = dt;
    a->rank = dl->ndim;

    /* Shape and element count. */
    int64_t count = 1;
    for (int i = 0; i < a->rank; i++) {
        int64_t s = dl->shape[i];
        if (s < 0)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "%s: shape[%d] = %lld is negative",
                              name, i, (long long)s);
        if (!todre_mul_i64(count, s, &count))
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "%s: the element count (product of the shape) overflows int64",
                              name);
        a->shape[i] = s;
    }
    a->count = count;

    /* Strides (elements); NULL = compact row-major. The compact strides of an
     * empty array may not fit (the product of its nonzero extents): they are
     * never used, and are 0 from the one that does not on. */
    int64_t compact = 1;
    for (int i = a->rank - 1; i >= 0; i--) {
        if (dl->strides) {
            if (dl->strides[i] < 0)
                return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                                  "%s: strides[%d] = %lld is negative", name, i,
                                  (long long)dl->strides[i]);
            a->strides[i] = dl->strides[i];
        } else {
            a->strides[i] = compact;
        }
        if (!todre_mul_i64(compact, a->shape[i] > 0 ? a->shape[i] : 1, &compact)) compact = 0;
    }

    /* Byte extent: from the data pointer to one past the last byte of the
     * last element, byte_offset included (byte_offset alone for an empty
     * array). At most TODRE_MAX_ARRAY_BYTES, so that every index and byte
     * computation on the array fits int64, and data + extent must not wrap
     * the address space. */
    const int64_t limit = TODRE_MAX_ARRAY_BYTES;
    if (dl->byte_offset > (uint64_t)limit)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "%s: byte_offset %llu is above the %lld-byte limit of one array", name,
                          (unsigned long long)dl->byte_offset, (long long)limit);
    int64_t extent = 0;
    if (count > 0) {
        int64_t last = 0, t;
        int ok = 1;
        for (int i = 0; i < a->rank && ok; i++)
            ok = todre_mul_i64(a->shape[i] - 1, a->strides[i], &t) &&
                 todre_add_i64(last, t, &last);
        ok = ok && todre_add_i64(last, 1, &extent) &&
             todre_mul_i64(extent, (int64_t)todre_dtype_size(dt), &extent) &&
             todre_add_i64(extent, (int64_t)dl->byte_offset, &extent) && extent <= limit;
        if (!ok) {
            /* name the dimension that reaches farthest */
            int far = 0;
            double reach = -1;
            for (int i = 0; i < a->rank; i++) {
                double r = (double)(a->shape[i] - 1) * (double)a->strides[i];
                if (r > reach) reach = r, far = i;
            }
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "%s: the strided extent (shape[%d] = %lld with strides[%d] = %lld, "
                              "%s, byte_offset %llu) exceeds the %lld-byte limit of one array",
                              name, far, (long long)a->shape[far], far,
                              (long long)a->strides[far], todre_dtype_name(dt),
                              (unsigned long long)dl->byte_offset, (long long)limit);
        }
    } else {
        extent = (int64_t)dl->byte_offset;
    }

    if (!dl->data && count > 0)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "%s: data is NULL for a non-empty array",
                          name);
    if (dl->data && (uintptr_t)dl->data > UINTPTR_MAX - (uintptr_t)extent)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "%s: data %p + %lld bytes (byte_offset and extent) wraps around the "
                          "address space",
                          name, dl->data, (long long)extent);
    a->data = dl->data ? (char *)dl->data + dl->byte_offset : NULL;

    /* Every element is loaded and stored as its type (float, int64_t, ...),
     * which C and the vector and GPU loads require to be aligned to the
     * element size; an empty array is never read. */
    size_t esize = todre_dtype_size(dt);
    if (count > 0 && (uintptr_t)a->data % esize != 0)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                          "%s: data + byte_offset (%p + %llu) is not a multiple of %zu bytes, "
                          "the size of one %s element (misaligned array)",
                          name, dl->data, (unsigned long long)dl->byte_offset, esize,
                          todre_dtype_name(dt));

    return check_device(ctx, a, name, where);
}

todre_status todre_array_map_out(struct todre_context *ctx, const DLTensor *dl, const char *name,
                                 unsigned dtypes, enum todre_where where, struct todre_array *a)
{
    todre_status st = todre_array_map(ctx, dl, name, dtypes, where, a);
    if (st != TODRE_OK) return st;
    /* Distinct indices must reach distinct elements, or only the last value
     * written to a shared element survives. Sufficient test: taken by
     * increasing stride, each dimension of extent > 1 steps past everything
     * the smaller ones reach ((shape - 1) * stride each; the extent check
     * bounded these sums, for a non-empty array). A zero stride over an
     * extent > 1 always fails. An array of fewer than 2 elements cannot
     * alias (and an empty one's strides were never bounded). */
    if (a->count < 2) return TODRE_OK;
    int dims[TODRE_MAX_RANK], n = 0;
    for (int i = 0; i < a->rank; i++) {
        if (a->shape[i] < 2) continue;
        int j = n++;
        for (; j > 0 && a->strides[dims[j - 1]] > a->strides[i]; j--) dims[j] = dims[j - 1];
        dims[j] = i;
    }
    int64_t reach = 0;
    for (int j = 0; j < n; j++) {
        int i = dims[j];
        if (a->strides[i] <= reach) {
            if (a->strides[i] == 0)
                return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                                  "%s: strides[%d] = 0 over shape[%d] = %lld: an output's "
                                  "elements must not alias each other",
                                  name, i, i, (long long)a->shape[i]);
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "%s: strides[%d] = %lld overlaps the elements of the dimensions "
                              "with smaller strides: an output's elements must not alias each "
                              "other",
                              name, i, (long long)a->strides[i]);
        }
        reach += (a->shape[i] - 1) * a->strides[i];
    }
    return TODRE_OK;
}

int todre_array_is_compact(const struct todre_array *a)
{
    if (a->count == 0) return 1; /* nothing to lay out; and want below fits */
    int64_t want = 1;
    for (int i = a->rank - 1; i >= 0; i--) {
        if (a->shape[i] != 1 && a->strides[i] != want) return 0;
        want *= a->shape[i];
    }
    return 1;
}
