/*
 * Shared pieces of the libFuzzer harnesses in tests/fuzz (see docs/testing.md,
 * "Fuzzing"): a reader that turns the fuzzer's bytes into values, the checks
 * every libtodre call must pass whatever its input (the status / message /
 * out-pointer contract of include/todre/todre.h), deterministic data, and a
 * DLTensor builder with an exact (128-bit) model of the memory a tensor
 * describes.
 *
 * A harness reports a finding by printing "FUZZ FINDING: ..." and calling
 * abort(): libFuzzer records the input as a crash artifact and exits non-zero,
 * like it does for an ASan or UBSan report.
 *
 * Input encoding: every value is read from the front of the input, little-
 * endian; a read past the end yields zeros, so every input, however short, is
 * a valid program. tests/fuzz/make_seeds.py writes seeds in this encoding.
 */
#ifndef TODRE_TESTS_FUZZ_COMMON_H
#define TODRE_TESTS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "todre/todre.h"

/* Harness code that only checks results (references, comparisons) is not
 * worth coverage feedback and runs hot: keep libFuzzer's instrumentation out
 * of it. clang 14 still traces comparisons in such functions, so each is
 * listed in tests/fuzz/nocov.ignorelist too (tests/fuzz/CMakeLists.txt). */
#define FZ_NOCOV __attribute__((no_sanitize("coverage")))

/* ---- findings ------------------------------------------------------------ */

/* Print "FUZZ FINDING: <message>" on stderr and abort(). */
void fz_finding(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2), noreturn))
#endif
    ;

#define FZ_CHECK(cond, ...)                  \
    do {                                     \
        if (!(cond)) fz_finding(__VA_ARGS__); \
    } while (0)

/* Process-wide setup for every harness (call from LLVMFuzzerInitialize):
 * only the built-in CPU backend is registered ($TODRE_BACKEND_PATH set to ""),
 * and OpenBLAS runs on one thread. */
void fz_init(void);

/* ---- the input reader ------------------------------------------------------ */

struct fz {
    const uint8_t *p;
    size_t n;
};

uint64_t fz_bytes(struct fz *in, int nbytes); /* 1..8 bytes, little-endian */
static inline uint8_t fz_u8(struct fz *in) { return (uint8_t)fz_bytes(in, 1); }
static inline uint16_t fz_u16(struct fz *in) { return (uint16_t)fz_bytes(in, 2); }
static inline uint32_t fz_u32(struct fz *in) { return (uint32_t)fz_bytes(in, 4); }
static inline uint64_t fz_u64(struct fz *in) { return fz_bytes(in, 8); }
/* lo + (one byte, or two when the range needs them) mod (hi - lo + 1). */
int64_t fz_range(struct fz *in, int64_t lo, int64_t hi);
/* An int64 that exercises boundaries: one byte picks an edge value (0, +-1,
 * INT64_MIN/MAX, 2^31, 2^32, 2^61, 2^62, ...) or, for bytes >= 0x80, eight
 * raw bytes follow. */
int64_t fz_i64_edge(struct fz *in);
/* A double: one byte picks an edge value (NaN, +-Inf, -0, DBL_MIN, the
 * smallest subnormal, 0, 1, nextafter(1, 0), 0.5, 1e308, ...) or a raw bit
 * pattern (8 bytes follow) or a fraction u16 / 65535. */
double fz_double_edge(struct fz *in);

/* ---- the library's contract -------------------------------------------------- */

/* Every status is one of the pinned values; failure comes with a non-empty
 * message in todre_last_error() (and, when @p ctx is non-NULL, the same text
 * in todre_context_last_error()); success leaves "" in both. @p what names the
 * call in a finding. */
void fz_check_status(const char *what, todre_status st, const todre_context *ctx);
/* The same check without a name: NULL when the contract holds, else what is
 * wrong (for callers that format the call's name only for a finding). */
const char *fz_status_problem(todre_status st, const todre_context *ctx);

/* ---- deterministic data ------------------------------------------------------ */

/* splitmix64: the generator of the data (and, by documentation, of the
 * library's RANDOM pivot; the harnesses reuse it as the reference). */
uint64_t fz_splitmix64(uint64_t *state);

/* Fill @p count float values of dtype @p dt (0 f32, 1 f16, 2 bf16, stored as
 * that dtype) at @p data from a distribution chosen by the input, then apply
 * a few input-chosen patches (NaN, +-Inf, -0, FLT_MAX, a subnormal, a raw bit
 * pattern) unless @p finite_only. Values are read back with fz_load(). */
void fz_fill_floats(struct fz *in, void *data, int dt, size_t count, int finite_only);
/* Element @p i of a float buffer of dtype @p dt (0 f32, 1 f16, 2 bf16). */
double fz_load(const void *data, int dt, size_t i);
/* Store @p v, rounded to dtype @p dt, as element @p i. */
void fz_store(void *data, int dt, size_t i, float v);
size_t fz_float_size(int dt);
DLDataType fz_float_dtype(int dt);

/* ---- DLTensors ------------------------------------------------------------------ */

/* What a DLTensor means for memory safety, from an exact model (128-bit
 * arithmetic) of the bytes it spans, against the buffer it points into. */
enum fz_class {
    /* Everything it describes lies inside its buffer (or it is empty): the
     * library may accept or reject it; ASan checks every access. */
    FZ_FITS = 0,
    /* Invalid by the header's rules, and unsafe if accepted: a device other
     * than host memory (the harnesses use CPU contexts), an unknown device or
     * dtype, lanes != 1, ndim outside [0, TODRE_MAX_RANK], shape NULL with
     * ndim > 0, a negative shape entry, NULL data for a non-empty array, a
     * negative stride over a dimension > 1, byte_offset above INT64_MAX, a
     * byte extent (offset + span) that exceeds INT64_MAX, or a non-empty
     * array whose data + byte_offset is not a multiple of the element size
     * (misaligned). The call taking it must fail. */
    FZ_REJECT = 1,
    /* Valid by the header's rules but larger than its buffer (or more
     * elements than the harness allows): the caller would be lying about its
     * memory. Never passed to the library. */
    FZ_SKIP = 2
};

/* A DLTensor with heap copies of everything it points to, sized exactly, so
 * that ASan catches the library reading a shape or stride entry beyond ndim
 * or a byte beyond the data. */
struct fz_tensor {
    DLTensor t;
    int64_t *shape;   /* exactly min(max(ndim, 0), FZ_MAX_SHAPE_ALLOC) entries, or NULL */
    int64_t *strides; /* same, or NULL */
    unsigned char *buf; /* exactly bufsize bytes (malloc'd; at least 1) */
    size_t bufsize;
    unsigned char *snapshot; /* copy of buf before the call (fz_tensor_snapshot) */
    enum fz_class cls;
    int64_t count; /* elements, saturated at INT64_MAX; meaningful when not REJECT */
    const char *why; /* why REJECT or SKIP */
};

#define FZ_MAX_SHAPE_ALLOC 16

/* Element size of a DLPack dtype the library knows (float32/16, bfloat16,
 * int32/64, uint8, bool8, lanes 1), else 0. */
size_t fz_known_itemsize(DLDataType t);

/* Build a tensor from the input: anything at all (device, dtype, ndim up to
 * and beyond TODRE_MAX_RANK, shape and strides including huge and negative
 * values, byte_offset, NULL data), mostly close to @p want_dtype / @p want
 * _ndim / @p want_shape (the argument's expected form, so that the library's
 * deeper checks are reached too). The buffer is sized to the tensor's exact
 * extent when that is small, so the tensor is usually FZ_FITS with no slack
 * byte; its contents come from the input. @p max_count caps the elements of
 * a FITS tensor (larger ones are FZ_SKIP). */
void fz_tensor_arbitrary(struct fz *in, struct fz_tensor *x, DLDataType want_dtype, int want_ndim,
                         const int64_t *want_shape, int64_t max_count);

/* Build a valid host tensor of @p ndim / @p shape / @p dtype with an
 * input-chosen layout: compact (strides NULL or explicit), padded strides
 * (outer dimensions; the innermost too with FZ_VALID_INNER_STRIDE), any
 * order of the dimensions in memory (FZ_VALID_ANY_ORDER), any non-negative
 * stride (up to INT64_MAX) on dimensions of size 1, a byte_offset that is a
 * multiple of the item size, device kDLCPU or kDLCUDAHost. Elements and
 * padding are 0xff bytes (NaN for floats, -1 for ints, 255 for uint8), so a
 * read of padding shows; write the elements with fz_tensor_elem(). */
#define FZ_VALID_INNER_STRIDE 1u /* the innermost stride may exceed 1 */
#define FZ_VALID_ANY_ORDER 2u    /* dimensions may be laid out in any order */
void fz_tensor_valid(struct fz *in, struct fz_tensor *x, DLDataType dtype, int ndim,
                     const int64_t *shape, unsigned flags);

/* Classify @p x (sets cls, count, why) against its buffer. */
void fz_tensor_classify(struct fz_tensor *x, int64_t max_count);

/* Address of the element at @p idx (ndim indices) of a FITS tensor. */
FZ_NOCOV void *fz_tensor_elem(const struct fz_tensor *x, const int64_t *idx);

/* Address of the element with row-major flat index @p flat (0 .. count-1)
 * of a FITS tensor. */
FZ_NOCOV void *fz_tensor_flat(const struct fz_tensor *x, int64_t flat);

/* The elements of a FITS float tensor (dtype index @p dt: 0 float32, 1
 * float16, 2 bfloat16) as doubles in flat order, malloc'd (free() them):
 * references read these instead of addressing each element per use. */
double *fz_tensor_doubles(const struct fz_tensor *x, int dt);

/* Store the elements of a FITS tensor from @p src, which holds them compact,
 * in flat order (the inverse of fz_tensor_compact_copy's gather). */
void fz_tensor_scatter(struct fz_tensor *x, const void *src);

/* A compact host copy (strides NULL, byte_offset 0, kDLCPU) of a FITS
 * tensor: same dtype, shape and elements. */
void fz_tensor_compact_copy(const struct fz_tensor *src, struct fz_tensor *dst);

/* 1 if two FITS tensors of the same dtype and count hold the same elements
 * (bytewise, in row-major order). */
int fz_tensor_same_elems(const struct fz_tensor *a, const struct fz_tensor *b);

/* 1 if two elements of a FITS tensor share an address (a stride of 0, or
 * strides that interleave): an output whose elements overwrite each other,
 * which every call must refuse (docs/api.md, "Arrays"). */
int fz_tensor_aliased(const struct fz_tensor *x);

/* The DLTensor to pass: &x->t, or NULL for an FZ_SKIP tensor. */
const DLTensor *fz_tensor_arg(const struct fz_tensor *x);

/* Remember the buffer's bytes / check they did not change (outputs of a
 * failed call must stay untouched). */
void fz_tensor_snapshot(struct fz_tensor *x);
int fz_tensor_unchanged(const struct fz_tensor *x);

void fz_tensor_free(struct fz_tensor *x);

/* One line describing a tensor (for findings). */
void fz_tensor_describe(const struct fz_tensor *x, char *buf, size_t cap);

#endif /* TODRE_TESTS_FUZZ_COMMON_H */
