/* Shared pieces of the libFuzzer harnesses: see fuzz_common.h. */
#define _GNU_SOURCE 1 /* setenv */
#include "fuzz_common.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half.h" /* src/half.h: exact f16 / bf16 conversions */

/* OpenBLAS's own thread count (the harness is single-threaded by default;
 * contexts still use their TODRE_CONTEXT_NUM_THREADS for libtodre's kernels). */
void openblas_set_num_threads(int num_threads);

void fz_finding(const char *fmt, ...)
{
    va_list ap;
    fputs("FUZZ FINDING: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

void fz_init(void)
{
    /* OpenMP workers that sleep at once instead of spinning (contexts with
     * 2 threads otherwise spend most of a small call waiting) */
    setenv("OMP_WAIT_POLICY", "passive", 0);
    setenv("KMP_BLOCKTIME", "0", 0);
    /* Only the CPU backend: no module from the build or install tree. */
    setenv("TODRE_BACKEND_PATH", "", 1);
    openblas_set_num_threads(1);
}

/* ---- input reader ---------------------------------------------------------- */

uint64_t fz_bytes(struct fz *in, int nbytes)
{
    uint64_t v = 0;
    for (int i = 0; i < nbytes; i++) {
        uint64_t b = 0;
        if (in->n > 0) {
            b = *in->p++;
            in->n--;
        }
        v |= b << (8 * i);
    }
    return v;
}

int64_t fz_range(struct fz *in, int64_t lo, int64_t hi)
{
    if (hi <= lo) return lo;
    uint64_t span = (uint64_t)hi - (uint64_t)lo + 1; /* 0: the full 2^64 range */
    uint64_t v;
    if (span != 0 && span <= 256) v = fz_bytes(in, 1);
    else if (span != 0 && span <= 65536) v = fz_bytes(in, 2);
    else v = fz_bytes(in, 8);
    if (span) v %= span;
    return (int64_t)((uint64_t)lo + v);
}

static const int64_t edge_i64[] = {
    0, 1, -1, 2, 3, 4, 7, 8, 16, 31, 32, 63, 64, 100, 255, 256, 1000, 1024, 1025,
    INT32_MAX, (int64_t)INT32_MAX + 1, INT32_MIN, (int64_t)UINT32_MAX, (int64_t)1 << 32,
    ((int64_t)1 << 32) + 1, (int64_t)1 << 20, ((int64_t)1 << 20) + 1, (int64_t)1 << 40,
    (int64_t)1 << 53, (int64_t)1 << 60, (int64_t)1 << 61, ((int64_t)1 << 61) + 1,
    (int64_t)1 << 62, ((int64_t)1 << 62) + 1, INT64_MAX, INT64_MAX - 1, INT64_MIN,
    INT64_MIN + 1, -2, -((int64_t)1 << 31), -((int64_t)1 << 62), INT64_MAX / 2, INT64_MAX / 3,
    INT64_MAX / 4 + 1, INT64_MAX / 8 + 1};

int64_t fz_i64_edge(struct fz *in)
{
    uint8_t b = fz_u8(in);
    if (b >= 0x80) return (int64_t)fz_u64(in);
    return edge_i64[b % (sizeof edge_i64 / sizeof edge_i64[0])];
}

double fz_double_edge(struct fz *in)
{
    static const double table[] = {
        NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0, 1.0, -1.0, 0.5, 0.1, 0.25, 0.75,
        0x1.fffffffffffffp-1 /* nextafter(1, 0) */, 0x1.0000000000001p+0, DBL_MIN,
        0x0.0000000000001p-1022 /* smallest subnormal */, DBL_MAX, -DBL_MAX, 1e-300, 2.0,
        1e308, -0.5, 1e-9, 0.999999, 1.0000001, 0x1.999999999999ap-4 /* 0.1 */, 1e-17,
        0.0999999999, 0.1000000001, 4.5e15, 9.3e18, -1e-300};
    uint8_t b = fz_u8(in);
    if (b >= 0xc0) {
        uint64_t bits = fz_u64(in);
        double d;
        memcpy(&d, &bits, sizeof d);
        return d;
    }
    if (b >= 0x80) return fz_u16(in) / 65535.0;
    return table[b % (sizeof table / sizeof table[0])];
}

/* ---- contract ------------------------------------------------------------------ */

const char *fz_status_problem(todre_status st, const todre_context *ctx)
{
    if ((unsigned)st > (unsigned)TODRE_ERR_INTERNAL) return "returned a value that is no todre_status";
    if (st == TODRE_ERR_INTERNAL) return "returned TODRE_ERR_INTERNAL (a library bug)";
    const char *msg = todre_last_error();
    if (!msg) return "todre_last_error() is NULL";
    const char *cmsg = ctx ? todre_context_last_error(ctx) : "";
    if (!cmsg) return "todre_context_last_error() is NULL";
    if (st == TODRE_OK) {
        if (msg[0]) return "succeeded but left a message in todre_last_error()";
        if (cmsg[0]) return "succeeded but left a message in todre_context_last_error()";
        return NULL;
    }
    if (!msg[0]) return "failed with an empty message";
    if (strlen(msg) >= 512) return "failed with a message longer than 511 bytes";
    if (ctx && strcmp(msg, cmsg) != 0)
        return "failed, and the context message differs from todre_last_error()";
    return NULL;
}

void fz_check_status(const char *what, todre_status st, const todre_context *ctx)
{
    const char *problem = fz_status_problem(st, ctx);
    if (problem)
        fz_finding("%s %s (status %d %s; message \"%s\")", what, problem, (int)st,
                   todre_status_string(st), todre_last_error() ? todre_last_error() : "(NULL)");
}

/* ---- data ------------------------------------------------------------------------- */

uint64_t fz_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unit(uint64_t *s) { return (double)(fz_splitmix64(s) >> 11) * 0x1.0p-53; }

size_t fz_float_size(int dt) { return dt == 0 ? 4 : 2; }

DLDataType fz_float_dtype(int dt)
{
    DLDataType t = {kDLFloat, 32, 1};
    if (dt == 1) t.bits = 16;
    if (dt == 2) {
        t.code = kDLBfloat;
        t.bits = 16;
    }
    return t;
}

FZ_NOCOV double fz_load(const void *data, int dt, size_t i)
{
    if (dt == 0) {
        float f;
        memcpy(&f, (const char *)data + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)data + 2 * i, 2);
    return dt == 1 ? todre_f16_to_f32(h) : todre_bf16_to_f32(h);
}

FZ_NOCOV void fz_store(void *data, int dt, size_t i, float v)
{
    if (dt == 0) {
        memcpy((char *)data + 4 * i, &v, 4);
        return;
    }
    uint16_t h = dt == 1 ? todre_f32_to_f16(v) : todre_f32_to_bf16(v);
    memcpy((char *)data + 2 * i, &h, 2);
}

void fz_fill_floats(struct fz *in, void *data, int dt, size_t count, int finite_only)
{
    uint64_t s = fz_u64(in);
    int dist = fz_u8(in) % 8;
    int clusters = 1 + (int)(s % 4);
    float big = dt == 1 ? 60000.0f : 1e38f;
    for (size_t i = 0; i < count; i++) {
        float v;
        switch (dist) {
        case 0: v = (float)(unit(&s) + unit(&s) + unit(&s) - 1.5); break;
        case 1: { /* a few distinct values: many exact ties */
            static const float alpha[] = {-1.0f, 0.0f, 1.0f, 2.0f};
            v = alpha[fz_splitmix64(&s) % (uint64_t)clusters];
            break;
        }
        case 2: v = 0.0f; break;
        case 3: v = (float)((unit(&s) - 0.5) * 1e-40); break; /* subnormal in f32 */
        case 4: v = (float)((unit(&s) * 2 - 1) * big); break;
        case 5: v = (float)((int64_t)(fz_splitmix64(&s) % 17) - 8); break;
        case 6: v = (float)unit(&s); break;
        default: v = (float)((unit(&s) - 0.5) * 4 + (double)(i % (size_t)clusters)); break;
        }
        fz_store(data, dt, i, v);
    }
    int npatch = fz_u8(in) % 4;
    for (int p = 0; p < npatch && count > 0; p++) {
        size_t at = fz_u16(in) % count;
        uint8_t kind = fz_u8(in);
        float v;
        switch (kind % 8) {
        case 0: v = NAN; break;
        case 1: v = INFINITY; break;
        case 2: v = -INFINITY; break;
        case 3: v = -0.0f; break;
        case 4: v = FLT_MAX; break;
        case 5: v = 1e-45f; break;
        case 6: v = 65504.0f; break;
        default: {
            uint32_t u = fz_u32(in);
            memcpy(&v, &u, 4);
            break;
        }
        }
        if (finite_only && !isfinite(v)) v = 1.0f;
        fz_store(data, dt, at, v);
        /* f16 turns FLT_MAX into Inf: */
        if (finite_only && !isfinite(fz_load(data, dt, at))) fz_store(data, dt, at, 1.0f);
    }
}

/* ---- tensors ------------------------------------------------------------------------ */

size_t fz_known_itemsize(DLDataType t)
{
    if (t.lanes != 1) return 0;
    switch (t.code) {
    case kDLFloat: return t.bits == 32 ? 4 : t.bits == 16 ? 2 : 0;
    case kDLBfloat: return t.bits == 16 ? 2 : 0;
    case kDLInt: return t.bits == 32 ? 4 : t.bits == 64 ? 8 : 0;
    case kDLUInt: return t.bits == 8 ? 1 : 0;
    case 6: /* kDLBool (DLPack >= 0.8) */ return t.bits == 8 ? 1 : 0;
    default: return 0;
    }
}

static void set_class(struct fz_tensor *x, enum fz_class c, const char *why)
{
    x->cls = c;
    x->why = why;
}

typedef __int128 i128;
#define I128_CAP ((i128)1 << 100) /* saturation: far above any int64 extent */

/* a * b for 0 <= a, b, saturated at I128_CAP (no i128 overflow). */
static i128 sat_mul(i128 a, i128 b)
{
    if (a > I128_CAP) a = I128_CAP;
    if (b > I128_CAP) b = I128_CAP;
    if (a != 0 && b > I128_CAP / a) return I128_CAP;
    return a * b;
}

static i128 sat_add(i128 a, i128 b)
{
    i128 r = a + b; /* both <= 2^100 */
    return r > I128_CAP ? I128_CAP : r;
}

void fz_tensor_classify(struct fz_tensor *x, int64_t max_count)
{
    const DLTensor *t = &x->t;
    x->count = 0;
    size_t isz = fz_known_itemsize(t->dtype);
    if (!isz) return set_class(x, FZ_REJECT, "dtype unknown to libtodre");
    if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost)
        return set_class(x, FZ_REJECT, "not host memory (CPU context)");
    if (t->ndim < 0 || t->ndim > TODRE_MAX_RANK) return set_class(x, FZ_REJECT, "ndim");
    if (t->ndim > 0 && !t->shape) return set_class(x, FZ_REJECT, "shape NULL");
    i128 count = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0) return set_class(x, FZ_REJECT, "negative shape");
        count = sat_mul(count, t->shape[i]);
    }
    x->count = count > INT64_MAX ? INT64_MAX : (int64_t)count;
    if (count == 0) return set_class(x, FZ_FITS, "empty");
    if (count > INT64_MAX) return set_class(x, FZ_REJECT, "element count overflows int64");
    if (!t->data) return set_class(x, FZ_REJECT, "NULL data, not empty");
    /* the harness's buffers are malloc'd, so only byte_offset can misalign */
    if (((uintptr_t)t->data + (uintptr_t)t->byte_offset) % isz != 0)
        return set_class(x, FZ_REJECT, "misaligned (data + byte_offset)");
    i128 last = 0, compact = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        i128 s = t->strides ? (i128)t->strides[i] : compact;
        compact = sat_mul(compact, t->shape[i]);
        if (t->shape[i] <= 1) continue;
        if (s < 0) return set_class(x, FZ_REJECT, "negative stride over a dimension > 1");
        last = sat_add(last, sat_mul(t->shape[i] - 1, s));
    }
    if (t->byte_offset > (uint64_t)INT64_MAX)
        return set_class(x, FZ_REJECT, "byte_offset above INT64_MAX");
    i128 end = (i128)t->byte_offset + (last + 1) * (i128)isz;
    if (end > INT64_MAX) return set_class(x, FZ_REJECT, "byte extent overflows int64");
    if ((const unsigned char *)t->data != x->buf || end > (i128)x->bufsize)
        return set_class(x, FZ_SKIP, "extends beyond its buffer");
    if (count > max_count) return set_class(x, FZ_SKIP, "more elements than the harness allows");
    set_class(x, FZ_FITS, "inside its buffer");
}

FZ_NOCOV void *fz_tensor_elem(const struct fz_tensor *x, const int64_t *idx)
{
    const DLTensor *t = &x->t;
    size_t isz = fz_known_itemsize(t->dtype);
    int64_t off = 0, compact = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        int64_t s = t->strides ? t->strides[i] : compact;
        compact *= t->shape[i];
        if (idx[i]) off += idx[i] * s;
    }
    return (char *)t->data + t->byte_offset + (size_t)off * isz;
}

/* The element offsets (in elements, from data + byte_offset) of a FITS
 * tensor in flat order, by stepping an index odometer: what fz_tensor_elem
 * computes per element, without the divisions. */
FZ_NOCOV static int64_t *flat_offsets(const struct fz_tensor *x)
{
    const DLTensor *t = &x->t;
    int64_t *off = malloc((size_t)(x->count > 0 ? x->count : 1) * sizeof *off);
    if (!off) abort();
    int64_t st[TODRE_MAX_RANK], idx[TODRE_MAX_RANK] = {0}, compact = 1, o = 0;
    for (int i = t->ndim - 1; i >= 0; i--) {
        st[i] = t->strides ? t->strides[i] : compact;
        compact *= t->shape[i];
    }
    for (int64_t f = 0; f < x->count; f++) {
        off[f] = o;
        for (int i = t->ndim - 1; i >= 0; i--) {
            if (++idx[i] < t->shape[i]) {
                o += st[i];
                break;
            }
            o -= (t->shape[i] - 1) * st[i]; /* 0 for a dimension of size 1 */
            idx[i] = 0;
        }
    }
    return off;
}

FZ_NOCOV void fz_tensor_scatter(struct fz_tensor *x, const void *src)
{
    size_t isz = fz_known_itemsize(x->t.dtype);
    char *base = (char *)x->t.data + x->t.byte_offset;
    int64_t *off = flat_offsets(x);
    for (int64_t f = 0; f < x->count; f++)
        memcpy(base + (size_t)off[f] * isz, (const char *)src + (size_t)f * isz, isz);
    free(off);
}

FZ_NOCOV double *fz_tensor_doubles(const struct fz_tensor *x, int dt)
{
    double *v = malloc((size_t)(x->count > 0 ? x->count : 1) * sizeof *v);
    if (!v) abort();
    const char *base = (const char *)x->t.data + x->t.byte_offset;
    size_t isz = fz_float_size(dt);
    int64_t *off = flat_offsets(x);
    for (int64_t f = 0; f < x->count; f++) v[f] = fz_load(base + (size_t)off[f] * isz, dt, 0);
    free(off);
    return v;
}

static void alloc_dims(struct fz_tensor *x, int ndim, int want_strides);
static void alloc_buf(struct fz_tensor *x, size_t size);

FZ_NOCOV void *fz_tensor_flat(const struct fz_tensor *x, int64_t flat)
{
    int64_t idx[TODRE_MAX_RANK] = {0};
    for (int i = x->t.ndim - 1; i >= 0; i--) {
        int64_t n = x->t.shape[i];
        idx[i] = n ? flat % n : 0;
        flat = n ? flat / n : 0;
    }
    return fz_tensor_elem(x, idx);
}

void fz_tensor_compact_copy(const struct fz_tensor *src, struct fz_tensor *dst)
{
    memset(dst, 0, sizeof *dst);
    const DLTensor *s = &src->t;
    size_t isz = fz_known_itemsize(s->dtype);
    alloc_dims(dst, s->ndim, 0);
    for (int i = 0; i < s->ndim; i++) dst->shape[i] = s->shape[i];
    dst->t.ndim = s->ndim;
    dst->t.shape = dst->shape;
    dst->t.strides = NULL;
    dst->t.dtype = s->dtype;
    dst->t.device.device_type = kDLCPU;
    dst->t.byte_offset = 0;
    alloc_buf(dst, (size_t)src->count * isz);
    dst->t.data = dst->buf;
    for (int64_t f = 0; f < src->count; f++)
        memcpy(dst->buf + (size_t)f * isz, fz_tensor_flat(src, f), isz);
    fz_tensor_classify(dst, INT64_MAX);
}

FZ_NOCOV int fz_tensor_same_elems(const struct fz_tensor *a, const struct fz_tensor *b)
{
    size_t isz = fz_known_itemsize(a->t.dtype);
    if (a->count != b->count || isz != fz_known_itemsize(b->t.dtype)) return 0;
    for (int64_t f = 0; f < a->count; f++)
        if (memcmp(fz_tensor_flat(a, f), fz_tensor_flat(b, f), isz) != 0) return 0;
    return 1;
}

FZ_NOCOV static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

FZ_NOCOV int fz_tensor_aliased(const struct fz_tensor *x)
{
    if (x->cls != FZ_FITS || x->count < 2) return 0;
    uintptr_t *at = malloc((size_t)x->count * sizeof *at);
    if (!at) abort();
    for (int64_t f = 0; f < x->count; f++) at[f] = (uintptr_t)fz_tensor_flat(x, f);
    qsort(at, (size_t)x->count, sizeof *at, cmp_ptr);
    int dup = 0;
    for (int64_t f = 1; f < x->count && !dup; f++) dup = at[f] == at[f - 1];
    free(at);
    return dup;
}

const DLTensor *fz_tensor_arg(const struct fz_tensor *x)
{
    return x->cls == FZ_SKIP ? NULL : &x->t;
}

static void alloc_dims(struct fz_tensor *x, int ndim, int want_strides)
{
    int n = ndim < 0 ? 0 : ndim > FZ_MAX_SHAPE_ALLOC ? FZ_MAX_SHAPE_ALLOC : ndim;
    /* exactly n entries: ASan reports a read of entry n */
    x->shape = n ? malloc((size_t)n * sizeof *x->shape) : NULL;
    x->strides = n && want_strides ? malloc((size_t)n * sizeof *x->strides) : NULL;
    if ((n && !x->shape) || (n && want_strides && !x->strides)) abort();
}

static void alloc_buf(struct fz_tensor *x, size_t size)
{
    x->bufsize = size ? size : 1;
    x->buf = malloc(x->bufsize);
    if (!x->buf) abort();
    memset(x->buf, 0xff, x->bufsize);
}

/* Exact end in bytes of the elements of t relative to its data pointer, or
 * -1 when it is not small and non-negative (used to size buffers). */
static int64_t small_extent(const DLTensor *t, size_t isz)
{
    if (t->ndim < 0 || t->ndim > TODRE_MAX_RANK || (t->ndim > 0 && !t->shape)) return -1;
    i128 last = 0, compact = 1, count = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] < 0) return -1;
        i128 s = t->strides ? (i128)t->strides[i] : compact;
        compact = sat_mul(compact, t->shape[i]);
        count = sat_mul(count, t->shape[i]);
        if (t->shape[i] > 1) {
            if (s < 0) return -1;
            last = sat_add(last, sat_mul(t->shape[i] - 1, s));
        }
    }
    if (last >= I128_CAP) return -1;
    i128 end = (i128)t->byte_offset + (count ? (last + 1) * (i128)isz : 0);
    return end > (1 << 20) ? -1 : (int64_t)end;
}

static const DLDataType dtype_table[] = {
    {kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}, {kDLInt, 32, 1},
    {kDLInt, 64, 1},   {kDLUInt, 8, 1},   {6, 8, 1} /* bool */, {kDLFloat, 64, 1},
    {kDLInt, 8, 1},    {kDLInt, 16, 1},   {kDLUInt, 16, 1},      {kDLUInt, 32, 1},
    {kDLUInt, 64, 1},  {kDLInt, 1, 1},    {kDLComplex, 64, 1},   {kDLFloat, 32, 4},
    {kDLFloat, 32, 0}, {kDLOpaqueHandle, 64, 1}, {kDLBfloat, 32, 1}, {6, 1, 1},
    {kDLInt, 64, 2},   {kDLFloat, 8, 1}};

void fz_tensor_arbitrary(struct fz *in, struct fz_tensor *x, DLDataType want_dtype, int want_ndim,
                         const int64_t *want_shape, int64_t max_count)
{
    memset(x, 0, sizeof *x);
    DLTensor *t = &x->t;
    uint8_t knobs = fz_u8(in);

    t->device.device_type = kDLCPU;
    t->device.device_id = 0;
    if (knobs & 1) {
        uint8_t b = fz_u8(in);
        static const int devs[] = {kDLCPU, kDLCUDAHost, kDLCUDA, kDLCUDAManaged, kDLOpenCL,
                                   kDLROCM, 0, -1};
        t->device.device_type = (DLDeviceType)devs[b % 8];
        if ((b & 0x38) == 0x38) t->device.device_type = (DLDeviceType)(int32_t)fz_u32(in);
        if (b & 0x80) t->device.device_id = (int32_t)fz_u32(in);
    }

    t->dtype = want_dtype;
    if (knobs & 2) {
        uint8_t b = fz_u8(in);
        if (b == 0xff) {
            t->dtype.code = fz_u8(in);
            t->dtype.bits = fz_u8(in);
            t->dtype.lanes = fz_u16(in);
        } else {
            t->dtype = dtype_table[b % (sizeof dtype_table / sizeof dtype_table[0])];
        }
    }

    int ndim = want_ndim;
    if (knobs & 4) {
        static const int32_t nd[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 127, -1, INT32_MIN,
                                     INT32_MAX, 255};
        ndim = nd[fz_u8(in) % 16];
    }
    t->ndim = ndim;

    int null_shape = (knobs & 8) && fz_u8(in) % 4 == 0;
    alloc_dims(x, ndim, (knobs & 32) != 0);
    int nalloc = ndim < 0 ? 0 : ndim > FZ_MAX_SHAPE_ALLOC ? FZ_MAX_SHAPE_ALLOC : ndim;
    for (int i = 0; i < nalloc; i++) {
        int64_t want = want_shape && i < want_ndim ? want_shape[i] : 1;
        int64_t v = want;
        if (knobs & 16) {
            uint8_t b = fz_u8(in);
            v = b < 0x80 ? b % 10 : b < 0xc0 ? want : fz_i64_edge(in);
        }
        x->shape[i] = v;
    }
    if (x->strides) {
        int64_t compact = 1;
        for (int i = nalloc - 1; i >= 0; i--) {
            uint8_t b = fz_u8(in);
            int64_t v;
            if (b < 0x60) v = compact;
            else if (b < 0xa0) v = b % 9;
            else if (b < 0xb0) v = -(int64_t)(b % 4) - 1;
            else v = fz_i64_edge(in);
            x->strides[i] = v;
            if (x->shape[i] > 0 && compact <= INT64_MAX / x->shape[i]) compact *= x->shape[i];
        }
    }
    t->shape = null_shape ? NULL : x->shape;
    t->strides = x->strides;

    t->byte_offset = 0;
    if (knobs & 64) {
        uint8_t b = fz_u8(in);
        static const uint64_t big[] = {(uint64_t)1 << 63, UINT64_MAX, (uint64_t)INT64_MAX,
                                       (uint64_t)1 << 62, ((uint64_t)1 << 63) + 8, 1u << 20};
        /* any offset: one that is not a multiple of the element size makes
         * a misaligned array, which the library must refuse */
        t->byte_offset = b < 0x80 ? b % 33 : b < 0xc0 ? big[b % 6] : (uint64_t)fz_i64_edge(in);
    }

    int64_t end = small_extent(t, fz_known_itemsize(t->dtype) ? fz_known_itemsize(t->dtype) : 1);
    alloc_buf(x, end > 0 ? (size_t)end : 64);
    /* contents: raw bytes from a generator, small element values, or zero */
    uint8_t fill = fz_u8(in);
    uint64_t s = fz_u64(in);
    size_t isz = fz_known_itemsize(t->dtype);
    if (!isz) isz = 1;
    for (size_t i = 0; i + isz <= x->bufsize; i += isz) {
        switch (fill % 4) {
        case 0: {
            uint64_t r = fz_splitmix64(&s);
            memcpy(x->buf + i, &r, isz < 8 ? isz : 8);
            break;
        }
        case 1: { /* small integers / floats: 0..3 */
            uint64_t r = fz_splitmix64(&s) % 4;
            if (t->dtype.code == kDLFloat && isz == 4) {
                float f = (float)r;
                memcpy(x->buf + i, &f, 4);
            } else if ((t->dtype.code == kDLFloat || t->dtype.code == kDLBfloat) && isz == 2) {
                uint16_t h = t->dtype.code == kDLFloat ? todre_f32_to_f16((float)r)
                                                       : todre_f32_to_bf16((float)r);
                memcpy(x->buf + i, &h, 2);
            } else {
                memset(x->buf + i, 0, isz);
                memcpy(x->buf + i, &r, 1);
            }
            break;
        }
        case 2: { /* increasing: offsets-like */
            uint64_t r = i / isz;
            memset(x->buf + i, 0, isz);
            memcpy(x->buf + i, &r, isz < 8 ? isz : 8);
            break;
        }
        default: memset(x->buf + i, 0, isz); break;
        }
    }
    t->data = (knobs & 128) && fz_u8(in) % 4 == 0 ? NULL : x->buf;
    fz_tensor_classify(x, max_count);
}

void fz_tensor_valid(struct fz *in, struct fz_tensor *x, DLDataType dtype, int ndim,
                     const int64_t *shape, unsigned flags)
{
    memset(x, 0, sizeof *x);
    DLTensor *t = &x->t;
    size_t isz = fz_known_itemsize(dtype);
    if (!isz || ndim < 0 || ndim > TODRE_MAX_RANK) abort(); /* harness bug */
    uint8_t b = fz_u8(in);
    int mode = b & 3;
    t->dtype = dtype;
    t->ndim = ndim;
    t->device.device_type = (b & 4) ? kDLCUDAHost : kDLCPU;
    t->device.device_id = 0;
    alloc_dims(x, ndim, mode != 0);
    for (int i = 0; i < ndim; i++) x->shape[i] = shape[i];
    t->shape = x->shape;
    t->strides = x->strides;
    if (mode != 0) {
        /* memory order of the dimensions: row-major, or a permutation */
        int order[TODRE_MAX_RANK];
        for (int i = 0; i < ndim; i++) order[i] = i;
        if ((flags & FZ_VALID_ANY_ORDER) && (b & 8))
            for (int i = ndim - 1; i > 0; i--) {
                int j = (int)(fz_u8(in) % (uint8_t)(i + 1));
                int tmp = order[i];
                order[i] = order[j];
                order[j] = tmp;
            }
        /* innermost first: stride = elements spanned by the inner
         * dimensions, plus 0-2 elements of padding */
        int64_t extent = 1;
        for (int r = ndim - 1; r >= 0; r--) { /* r: rank in memory, innermost last */
            int i = order[r];
            int64_t pad = 0;
            if (mode >= 2 && (r != ndim - 1 || (flags & FZ_VALID_INNER_STRIDE))) pad = fz_u8(in) % 3;
            x->strides[i] = extent + pad;
            extent = x->strides[i] * (shape[i] > 0 ? shape[i] : 1);
        }
        /* a size-1 dimension's stride is never used: any non-negative value */
        if (mode == 3)
            for (int i = 0; i < ndim; i++)
                if (shape[i] == 1) {
                    uint8_t c = fz_u8(in);
                    x->strides[i] = c < 0x80 ? c : c < 0xc0 ? INT64_MAX : (int64_t)1 << 62;
                }
    }
    switch ((b >> 4) & 3) {
    case 0: t->byte_offset = 0; break;
    case 1: t->byte_offset = isz * (fz_u8(in) % 8); break;
    case 2: t->byte_offset = 256; break;
    default: t->byte_offset = isz * fz_u8(in); break;
    }
    int64_t end = small_extent(t, isz);
    if (end < 0) abort(); /* harness bug: shapes are small */
    alloc_buf(x, (size_t)end);
    t->data = x->buf;
    fz_tensor_classify(x, INT64_MAX);
    if (x->cls != FZ_FITS) abort();
}

void fz_tensor_snapshot(struct fz_tensor *x)
{
    free(x->snapshot);
    x->snapshot = malloc(x->bufsize);
    if (!x->snapshot) abort();
    memcpy(x->snapshot, x->buf, x->bufsize);
}

int fz_tensor_unchanged(const struct fz_tensor *x)
{
    return !x->snapshot || memcmp(x->snapshot, x->buf, x->bufsize) == 0;
}

void fz_tensor_free(struct fz_tensor *x)
{
    free(x->shape);
    free(x->strides);
    free(x->buf);
    free(x->snapshot);
    memset(x, 0, sizeof *x);
}

void fz_tensor_describe(const struct fz_tensor *x, char *buf, size_t cap)
{
    const DLTensor *t = &x->t;
    size_t len = 0;
#define APPEND(...)                                                          \
    do {                                                                     \
        int w_ = snprintf(buf + len, len < cap ? cap - len : 0, __VA_ARGS__); \
        if (w_ > 0) len += (size_t)w_;                                       \
    } while (0)
    APPEND("device (%d, %d) dtype (code %u, bits %u, lanes %u) ndim %d shape ",
           (int)t->device.device_type, (int)t->device.device_id, (unsigned)t->dtype.code,
           (unsigned)t->dtype.bits, (unsigned)t->dtype.lanes, (int)t->ndim);
    int n = t->ndim < 0 ? 0 : t->ndim > FZ_MAX_SHAPE_ALLOC ? FZ_MAX_SHAPE_ALLOC : t->ndim;
    if (!t->shape) APPEND("NULL");
    else {
        APPEND("[");
        for (int i = 0; i < n; i++) APPEND("%s%lld", i ? ", " : "", (long long)t->shape[i]);
        APPEND("]");
    }
    APPEND(" strides ");
    if (!t->strides) APPEND("NULL");
    else {
        APPEND("[");
        for (int i = 0; i < n; i++) APPEND("%s%lld", i ? ", " : "", (long long)t->strides[i]);
        APPEND("]");
    }
    APPEND(" byte_offset %llu data %s buffer %zu bytes: %s (%s)",
           (unsigned long long)t->byte_offset, t->data ? "buf" : "NULL", x->bufsize,
           x->cls == FZ_FITS ? "FITS" : x->cls == FZ_REJECT ? "REJECT" : "SKIP",
           x->why ? x->why : "");
#undef APPEND
    if (len >= cap && cap > 0) buf[cap - 1] = '\0';
}
