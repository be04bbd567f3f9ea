/* The DLPack tensor layout (DLPack >= 0.5, unchanged in 1.x), mirrored from
 * the published specification so that libtodre needs no copy of dlpack.h.
 * DLPack guarantees this layout within a major version; the DLTensor struct
 * itself has been stable since 0.5. Only the fields libtodre reads are
 * interpreted. Internal: never installed. */
#ifndef TODRE_SRC_DLPACK_ABI_H
#define TODRE_SRC_DLPACK_ABI_H

#include <stdint.h>

enum {
    TODRE_DL_CPU = 1,
    TODRE_DL_CUDA = 2,
    TODRE_DL_CUDA_HOST = 3,
    TODRE_DL_CUDA_MANAGED = 13
};

enum { TODRE_DL_INT = 0, TODRE_DL_UINT = 1, TODRE_DL_FLOAT = 2, TODRE_DL_BFLOAT = 4,
       TODRE_DL_BOOL = 6 };

struct todre_dl_device {
    int32_t device_type;
    int32_t device_id;
};

struct todre_dl_dtype {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
};

struct todre_dl_tensor {
    void *data;
    struct todre_dl_device device;
    int32_t ndim;
    struct todre_dl_dtype dtype;
    int64_t *shape;
    int64_t *strides; /* NULL = compact row-major (legacy producers) */
    uint64_t byte_offset;
};

#endif /* TODRE_SRC_DLPACK_ABI_H */
