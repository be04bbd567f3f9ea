/* Element types and memory kinds as the core and the backends see them: the
 * one dtype utility header of libtodre. The public API speaks DLPack
 * (DLDataType, DLDevice); the core maps a DLTensor to these once, in
 * src/tensor.c, and no other file interprets DLPack codes. Internal: never
 * installed. Header-only, so a backend module (C or CUDA C++) uses it too. */
#ifndef TODRE_SRC_DTYPE_H
#define TODRE_SRC_DTYPE_H

#include <stddef.h>

typedef enum todre_dtype {
    TODRE_DTYPE_F32 = 0,  /* IEEE binary32 */
    TODRE_DTYPE_F16 = 1,  /* IEEE binary16 */
    TODRE_DTYPE_BF16 = 2, /* bfloat16 */
    TODRE_DTYPE_I32 = 3,  /* int32_t (decisions) */
    TODRE_DTYPE_I64 = 4,  /* int64_t (indices, offsets) */
    TODRE_DTYPE_U8 = 5    /* uint8_t (token types; DLPack bool too) */
} todre_dtype;

#define TODRE_DTYPE_COUNT 6

/* Where an array's memory lives, as far as a backend cares. */
typedef enum todre_device_type {
    TODRE_DEVICE_HOST = 0, /* kDLCPU, kDLCUDAHost */
    TODRE_DEVICE_CUDA = 1  /* kDLCUDA, kDLCUDAManaged */
} todre_device_type;

static inline size_t todre_dtype_size(todre_dtype dt)
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

/* Names as messages print them (DLPack / NumPy spelling). */
static inline const char *todre_dtype_name(todre_dtype dt)
{
    switch (dt) {
    case TODRE_DTYPE_F32: return "float32";
    case TODRE_DTYPE_F16: return "float16";
    case TODRE_DTYPE_BF16: return "bfloat16";
    case TODRE_DTYPE_I32: return "int32";
    case TODRE_DTYPE_I64: return "int64";
    case TODRE_DTYPE_U8: return "uint8";
    }
    return "unknown";
}

static inline int todre_dtype_is_float(todre_dtype dt)
{
    return dt == TODRE_DTYPE_F32 || dt == TODRE_DTYPE_F16 || dt == TODRE_DTYPE_BF16;
}

#endif /* TODRE_SRC_DTYPE_H */
