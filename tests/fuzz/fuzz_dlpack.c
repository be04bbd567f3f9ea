/*
 * libFuzzer harness: DLTensor import. Arbitrary DLTensor structs, pointing at
 * small real heap buffers, passed to every call that takes arrays:
 * todre_select, todre_select_batch, todre_relevance_set_types /
 * observe_probs / observe_qk / keep_positions / set_probe_layers /
 * get_probe_layers, todre_context_copy.
 *
 * Each array argument is built one of two ways (a bit of the input's mask
 * per argument):
 *  - valid: the argument's expected dtype and shape with an input-chosen
 *    layout (padded or permuted strides, any stride on size-1 dimensions,
 *    byte_offset, kDLCPU or kDLCUDAHost) over a buffer of exactly its extent,
 *    padding bytes 0xff (NaN), contents the call accepts; these reach the
 *    success paths;
 *  - arbitrary: any device, dtype, ndim (beyond 8 too), shape, strides (huge
 *    and negative), byte_offset, NULL data (fz_tensor_arbitrary), classified
 *    by an exact model of the bytes it spans (fz_tensor_classify): FITS
 *    (inside its buffer: the library may take it or not, ASan watches every
 *    access), REJECT (invalid by the header and unsafe: the call must fail)
 *    or SKIP (valid but larger than its buffer: NULL is passed instead).
 * Shape and stride arrays are heap copies of exactly ndim entries, so a read
 * past ndim is an ASan report too.
 *
 * A finding, beyond ASan / UBSan: a call that succeeds with a REJECT
 * argument (misaligned ones included) or with an output two of whose
 * elements share an address; a failed call that changed an output array; the status / message
 * contract broken; and, after a success with only FITS arguments, a result
 * that differs from the same call on compact copies of the arrays (strided
 * reads must read the same elements) or that is malformed (indices out of
 * range, out_offsets wrong, copies that differ).
 *
 * Input layout (little-endian, zeros past the end):
 *   u8 op (% 8), u8 mask (bit i: argument i arbitrary), then the call's
 *   sizes and configuration, then each argument's tensor (see the ops).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

#define MAXARGS 6
#define CAP 4096 /* elements of any FITS argument */

static const DLDataType DT_I64 = {kDLInt, 64, 1};
static const DLDataType DT_I32 = {kDLInt, 32, 1};
static const DLDataType DT_U8 = {kDLUInt, 8, 1};

struct call {
    const char *name;
    struct fz_tensor x[MAXARGS];
    const char *arg_name[MAXARGS];
    int is_out[MAXARGS];
    int used[MAXARGS];
    unsigned mask;
};

static void arg(struct fz *in, struct call *c, int i, const char *name, int is_out, DLDataType dt,
                int ndim, const int64_t *shape, unsigned flags)
{
    c->arg_name[i] = name;
    c->is_out[i] = is_out;
    c->used[i] = 1;
    if (c->mask & (1u << i)) fz_tensor_arbitrary(in, &c->x[i], dt, ndim, shape, CAP);
    else fz_tensor_valid(in, &c->x[i], dt, ndim, shape, flags);
}

static int arbitrary(const struct call *c, int i) { return (c->mask >> i) & 1; }

static const DLTensor *A(const struct call *c, int i)
{
    return c->used[i] ? fz_tensor_arg(&c->x[i]) : NULL;
}

static int all_fit(const struct call *c)
{
    for (int i = 0; i < MAXARGS; i++)
        if (c->used[i] && c->x[i].cls != FZ_FITS) return 0;
    return 1;
}

static void snapshot_outputs(struct call *c)
{
    for (int i = 0; i < MAXARGS; i++)
        if (c->used[i] && c->is_out[i]) fz_tensor_snapshot(&c->x[i]);
}

/* The checks every call gets: status contract, REJECT arguments refused,
 * outputs untouched by a failure. */
static void after_call(struct call *c, todre_status st, const todre_context *ctx)
{
    static int debug = -1; /* FZ_DEBUG=1: print every call (for triage) */
    if (debug < 0) debug = getenv("FZ_DEBUG") != NULL;
    if (debug) {
        fprintf(stderr, "%s: %s %s\n", c->name, todre_status_string(st), todre_last_error());
        for (int i = 0; i < MAXARGS; i++) {
            if (!c->used[i]) continue;
            char d[512];
            fz_tensor_describe(&c->x[i], d, sizeof d);
            fprintf(stderr, "  %s = %s\n", c->arg_name[i], d);
        }
    }
    fz_check_status(c->name, st, ctx);
    for (int i = 0; i < MAXARGS; i++) {
        if (!c->used[i]) continue;
        if (st == TODRE_OK && c->x[i].cls == FZ_REJECT) {
            char d[512];
            fz_tensor_describe(&c->x[i], d, sizeof d);
            fz_finding("%s accepted %s = %s", c->name, c->arg_name[i], d);
        }
        /* an output two of whose elements share an address must be refused */
        if (st == TODRE_OK && c->is_out[i] && fz_tensor_aliased(&c->x[i])) {
            char d[512];
            fz_tensor_describe(&c->x[i], d, sizeof d);
            fz_finding("%s accepted the aliased output %s = %s", c->name, c->arg_name[i], d);
        }
        if (st != TODRE_OK && c->is_out[i] && !fz_tensor_unchanged(&c->x[i])) {
            char d[512];
            fz_tensor_describe(&c->x[i], d, sizeof d);
            fz_finding("%s failed (%s: %s) but wrote its output %s = %s", c->name,
                       todre_status_string(st), todre_last_error(), c->arg_name[i], d);
        }
    }
}

static void free_call(struct call *c)
{
    for (int i = 0; i < MAXARGS; i++)
        if (c->used[i]) fz_tensor_free(&c->x[i]);
}

/* Fill the elements of a valid float tensor (finite values). */
static void fill_float(struct fz *in, struct fz_tensor *x, int finite)
{
    if (x->cls != FZ_FITS || x->count == 0) return;
    int dt = x->t.dtype.code == kDLBfloat ? 2 : x->t.dtype.bits == 16 ? 1 : 0;
    size_t isz = fz_float_size(dt);
    unsigned char *tmp = malloc((size_t)x->count * isz);
    if (!tmp) abort();
    fz_fill_floats(in, tmp, dt, (size_t)x->count, finite);
    for (int64_t f = 0; f < x->count; f++) memcpy(fz_tensor_flat(x, f), tmp + f * isz, isz);
    free(tmp);
}

static void put_i64(struct fz_tensor *x, int64_t f, int64_t v) { memcpy(fz_tensor_flat(x, f), &v, 8); }
static int64_t get_i64(const struct fz_tensor *x, int64_t f)
{
    int64_t v;
    memcpy(&v, fz_tensor_flat(x, f), 8);
    return v;
}

static todre_context *new_context(void)
{
    todre_context *ctx = NULL;
    FZ_CHECK(todre_context_create("cpu", 0, &ctx) == TODRE_OK, "context: %s", todre_last_error());
    FZ_CHECK(todre_context_set_int(ctx, TODRE_CONTEXT_NUM_THREADS, 1) == TODRE_OK, "threads");
    return ctx;
}

/* A selection configuration from 3 bytes: objective, pivot, budget, order. */
static todre_select_config *new_config(struct fz *in, int64_t n)
{
    todre_select_config *cfg = NULL;
    FZ_CHECK(todre_select_config_create(&cfg) == TODRE_OK, "config");
    uint8_t a = fz_u8(in), b = fz_u8(in), k = fz_u8(in);
    todre_select_config_set_int(cfg, TODRE_SELECT_OBJECTIVE, a % 3);
    todre_select_config_set_int(cfg, TODRE_SELECT_PIVOT, (a >> 2) % 6);
    todre_select_config_set_int(cfg, TODRE_SELECT_ORDER, b % 3);
    todre_select_config_set_int(cfg, TODRE_SELECT_SEED, b >> 2);
    if (k & 0x80) todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, (k & 0x7f) / 127.0 + 1e-3);
    else todre_select_config_set_int(cfg, TODRE_SELECT_KEEP, 1 + k % (n > 0 ? n : 1));
    return cfg;
}

static int64_t cfg_int(const todre_select_config *cfg, todre_param p)
{
    int64_t v = 0;
    todre_select_config_get_int(cfg, p, &v);
    return v;
}

/* ---- stage 1 -------------------------------------------------------------- */

/* Shapes of one select call's arguments. */
struct sel_shapes {
    int64_t n, d, k, frames, tokens;
    int cls_rank; /* 0: none */
    int dt;
    todre_order order;
};

static void op_select(struct fz *in, unsigned mask)
{
    struct sel_shapes s;
    s.n = 1 + fz_u8(in) % 16;
    s.d = 1 + fz_u8(in) % 8;
    s.dt = fz_u8(in) % 3;
    uint8_t cm = fz_u8(in);
    s.cls_rank = cm % 3;
    s.frames = 1;
    for (int64_t f = 1 + (cm >> 2) % 4; f >= 1; f--)
        if (s.n % f == 0) {
            s.frames = f;
            break;
        }
    s.tokens = s.n / s.frames;
    todre_context *ctx = new_context();
    todre_select_config *cfg = new_config(in, s.n);
    s.order = (todre_order)cfg_int(cfg, TODRE_SELECT_ORDER);
    if (todre_select_keep_count(cfg, s.n, &s.k) != TODRE_OK) s.k = 1;

    struct call c;
    memset(&c, 0, sizeof c);
    c.name = "todre_select";
    c.mask = mask;
    int64_t eshape[2] = {s.n, s.d};
    arg(in, &c, 0, "embeddings", 0, fz_float_dtype(s.dt), 2, eshape, 0);
    if (!arbitrary(&c, 0)) fill_float(in, &c.x[0], 1);
    int64_t cshape[2] = {s.cls_rank == 2 ? s.frames : s.n, s.tokens};
    if (s.cls_rank) {
        arg(in, &c, 1, "cls", 0, fz_float_dtype(s.dt), s.cls_rank, cshape,
            FZ_VALID_INNER_STRIDE | FZ_VALID_ANY_ORDER);
        if (!arbitrary(&c, 1)) fill_float(in, &c.x[1], 1);
    }
    int both = s.order == TODRE_ORDER_BOTH;
    int64_t oshape[2] = {both ? 2 : s.k, s.k};
    arg(in, &c, 2, "out", 1, DT_I64, both ? 2 : 1, oshape, 0);

    snapshot_outputs(&c);
    todre_status st = todre_select(ctx, cfg, A(&c, 0), A(&c, 1), A(&c, 2));
    after_call(&c, st, ctx);

    if (st == TODRE_OK && all_fit(&c)) {
        /* indices in range, and the same result from compact copies */
        const struct fz_tensor *out = &c.x[2];
        int64_t n = c.x[0].t.shape[0];
        for (int64_t f = 0; f < out->count; f++) {
            int64_t v = get_i64(out, f);
            FZ_CHECK(v >= 0 && v < n, "todre_select wrote index %lld for n = %lld", (long long)v,
                     (long long)n);
        }
        struct fz_tensor e2, c2, o2;
        fz_tensor_compact_copy(&c.x[0], &e2);
        if (c.used[1]) fz_tensor_compact_copy(&c.x[1], &c2);
        fz_tensor_compact_copy(out, &o2);
        memset(o2.buf, 0xff, o2.bufsize);
        todre_status st2 = todre_select(ctx, cfg, &e2.t, c.used[1] ? &c2.t : NULL, &o2.t);
        FZ_CHECK(st2 == TODRE_OK, "todre_select failed on compact copies: %s", todre_last_error());
        if (!fz_tensor_same_elems(out, &o2)) {
            char d0[512], d2[512];
            fz_tensor_describe(&c.x[0], d0, sizeof d0);
            fz_tensor_describe(out, d2, sizeof d2);
            fz_finding("todre_select: strided arrays give another selection than compact "
                       "copies (embeddings %s; out %s)", d0, d2);
        }
        fz_tensor_free(&e2);
        if (c.used[1]) fz_tensor_free(&c2);
        fz_tensor_free(&o2);
    }
    free_call(&c);
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
}

static void op_select_batch(struct fz *in, unsigned mask)
{
    int64_t B = 1 + fz_u8(in) % 4, len[4], off[5] = {0}, N = 0;
    for (int b = 0; b < B; b++) {
        len[b] = 1 + fz_u8(in) % 6;
        N += len[b];
        off[b + 1] = N;
    }
    int64_t d = 1 + fz_u8(in) % 6;
    int dt = fz_u8(in) % 3;
    uint8_t opt = fz_u8(in); /* bit 0 cls, 1 keep, 2 out_offsets */
    todre_context *ctx = new_context();
    todre_select_config *cfg = new_config(in, 1);
    todre_order order = (todre_order)cfg_int(cfg, TODRE_SELECT_ORDER);
    int64_t keep[4], K = 0;
    for (int b = 0; b < B; b++) {
        keep[b] = 1 + fz_u8(in) % len[b];
        int64_t kb = keep[b];
        if (!(opt & 2) && todre_select_keep_count(cfg, len[b], &kb) != TODRE_OK) kb = 1;
        K += kb;
    }

    struct call c;
    memset(&c, 0, sizeof c);
    c.name = "todre_select_batch";
    c.mask = mask;
    int64_t eshape[2] = {N, d};
    arg(in, &c, 0, "embeddings", 0, fz_float_dtype(dt), 2, eshape, 0);
    if (!arbitrary(&c, 0)) fill_float(in, &c.x[0], 1);
    if (opt & 1) {
        arg(in, &c, 1, "cls", 0, fz_float_dtype(dt), 1, &N, FZ_VALID_INNER_STRIDE);
        if (!arbitrary(&c, 1)) fill_float(in, &c.x[1], 1);
    }
    int64_t oshape[1] = {B + 1};
    arg(in, &c, 2, "offsets", 0, DT_I64, 1, oshape, FZ_VALID_INNER_STRIDE);
    if (!arbitrary(&c, 2))
        for (int b = 0; b <= B; b++) put_i64(&c.x[2], b, off[b]);
    if (opt & 2) {
        arg(in, &c, 3, "keep", 0, DT_I64, 1, &B, FZ_VALID_INNER_STRIDE);
        if (!arbitrary(&c, 3))
            for (int b = 0; b < B; b++) put_i64(&c.x[3], b, keep[b]);
    }
    int both = order == TODRE_ORDER_BOTH;
    int64_t outshape[2] = {both ? 2 : K, K};
    arg(in, &c, 4, "out", 1, DT_I64, both ? 2 : 1, outshape, 0);
    if (opt & 4) arg(in, &c, 5, "out_offsets", 1, DT_I64, 1, oshape, FZ_VALID_INNER_STRIDE);

    snapshot_outputs(&c);
    todre_status st = todre_select_batch(ctx, cfg, A(&c, 0), A(&c, 1), A(&c, 2), A(&c, 3),
                                         A(&c, 4), A(&c, 5));
    after_call(&c, st, ctx);

    if (st == TODRE_OK && all_fit(&c)) {
        /* the accepted offsets and the written out_offsets are consistent */
        const struct fz_tensor *o = &c.x[2];
        int64_t nb = o->count - 1;
        int64_t *outoff = malloc((size_t)(nb + 1) * sizeof *outoff);
        if (!outoff) abort();
        outoff[0] = 0;
        for (int64_t b = 0; b < nb; b++) {
            int64_t n_b = get_i64(o, b + 1) - get_i64(o, b), k_b;
            FZ_CHECK(n_b >= 1, "todre_select_batch accepted an empty set %lld", (long long)b);
            if (c.used[3]) k_b = get_i64(&c.x[3], b);
            else FZ_CHECK(todre_select_keep_count(cfg, n_b, &k_b) == TODRE_OK, "keep count");
            FZ_CHECK(k_b >= 1 && k_b <= n_b, "todre_select_batch accepted keep %lld for %lld rows",
                     (long long)k_b, (long long)n_b);
            outoff[b + 1] = outoff[b] + k_b;
        }
        if (c.used[5])
            for (int64_t b = 0; b <= nb; b++)
                FZ_CHECK(get_i64(&c.x[5], b) == outoff[b], "out_offsets[%lld] = %lld, expected %lld",
                         (long long)b, (long long)get_i64(&c.x[5], b), (long long)outoff[b]);
        const struct fz_tensor *out = &c.x[4];
        int64_t Kt = outoff[nb];
        FZ_CHECK(out->count == (both ? 2 : 1) * Kt, "out has %lld elements for K = %lld",
                 (long long)out->count, (long long)Kt);
        for (int64_t b = 0; b < nb; b++) {
            int64_t n_b = get_i64(o, b + 1) - get_i64(o, b);
            for (int64_t r = 0; r < (both ? 2 : 1); r++)
                for (int64_t j = outoff[b]; j < outoff[b + 1]; j++) {
                    int64_t v = get_i64(out, r * Kt + j);
                    FZ_CHECK(v >= 0 && v < n_b, "set %lld: index %lld for %lld rows", (long long)b,
                             (long long)v, (long long)n_b);
                }
        }
        /* compact copies give the same result */
        struct fz_tensor cp[MAXARGS];
        const DLTensor *ta[MAXARGS];
        for (int i = 0; i < MAXARGS; i++) {
            ta[i] = NULL;
            if (!c.used[i]) continue;
            fz_tensor_compact_copy(&c.x[i], &cp[i]);
            if (c.is_out[i]) memset(cp[i].buf, 0xff, cp[i].bufsize);
            ta[i] = &cp[i].t;
        }
        todre_status st2 = todre_select_batch(ctx, cfg, ta[0], ta[1], ta[2], ta[3], ta[4], ta[5]);
        FZ_CHECK(st2 == TODRE_OK, "todre_select_batch failed on compact copies: %s",
                 todre_last_error());
        FZ_CHECK(fz_tensor_same_elems(out, &cp[4]),
                 "todre_select_batch: strided arrays give another selection than compact copies");
        for (int i = 0; i < MAXARGS; i++)
            if (c.used[i]) fz_tensor_free(&cp[i]);
        free(outoff);
    }
    free_call(&c);
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
}

/* ---- stage 2 ---------------------------------------------------------------- */

struct relcfg {
    int64_t L, B, nsys, nvis, ntext, Kt, layer;
};

static todre_relevance *new_rel(struct fz *in, struct relcfg *r)
{
    r->L = 1 + fz_u8(in) % 8;
    r->B = 1 + fz_u8(in) % 2;
    r->nsys = fz_u8(in) % 3;
    r->nvis = fz_u8(in) % 6;
    r->ntext = fz_u8(in) % 5;
    if (r->nsys + r->nvis + r->ntext == 0) r->ntext = 1;
    r->Kt = r->nsys + r->nvis + r->ntext;
    uint8_t l = fz_u8(in);
    r->layer = l < 0xc0 ? 7 * r->L / 8 : l % r->L; /* mostly the default probe layer */
    todre_relevance *rel = NULL;
    FZ_CHECK(todre_relevance_create(r->L, r->B, &rel) == TODRE_OK, "relevance: %s",
             todre_last_error());
    FZ_CHECK(todre_relevance_set_layout(rel, r->nsys, r->nvis, r->ntext) == TODRE_OK, "layout");
    return rel;
}

/* The same handle again (same layout and parameters, no observation). */
static todre_relevance *twin_rel(const struct relcfg *r)
{
    todre_relevance *rel = NULL;
    FZ_CHECK(todre_relevance_create(r->L, r->B, &rel) == TODRE_OK, "relevance");
    FZ_CHECK(todre_relevance_set_layout(rel, r->nsys, r->nvis, r->ntext) == TODRE_OK, "layout");
    return rel;
}

static int same_double(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

/* Decisions and ratios of two handles after the same observation agree. */
static void same_observation(const char *what, todre_relevance *a, todre_relevance *b,
                             const struct relcfg *r, const struct fz_tensor *dec_a,
                             const struct fz_tensor *dec_b)
{
    if (dec_a && dec_b)
        FZ_CHECK(fz_tensor_same_elems(dec_a, dec_b),
                 "%s: decisions differ between strided arrays and compact copies", what);
    for (int64_t s = 0; s < r->B; s++) {
        double a1 = -1, a2 = -1, b1 = -1, b2 = -1;
        todre_status sa = todre_relevance_ratios(a, s, r->layer, &a1, &a2);
        todre_status sb = todre_relevance_ratios(b, s, r->layer, &b1, &b2);
        FZ_CHECK(sa == sb, "%s: ratios available on one handle only", what);
        if (sa == TODRE_OK)
            FZ_CHECK(same_double(a1, b1) && same_double(a2, b2),
                     "%s: ratios (%.17g, %.17g) from strided arrays, (%.17g, %.17g) from compact "
                     "copies", what, a1, a2, b1, b2);
        int64_t da = -5, db = -5;
        todre_relevance_drop_layer(a, s, &da);
        todre_relevance_drop_layer(b, s, &db);
        FZ_CHECK(da == db, "%s: drop layers differ", what);
    }
}

static void op_observe(struct fz *in, unsigned mask, int qk)
{
    struct relcfg r;
    todre_relevance *rel = new_rel(in, &r);
    todre_context *ctx = new_context();
    int64_t H = 1 + fz_u8(in) % 3, Hkv = 1, K = 1 + fz_u8(in) % r.Kt, Q = 1 + fz_u8(in) % K;
    int64_t dh = 1 + fz_u8(in) % 6;
    int dt = fz_u8(in) % 3, rank4 = r.B > 1 || (fz_u8(in) & 1);
    if (qk && H % 2 == 0 && (fz_u8(in) & 1)) Hkv = H / 2;
    double scale = qk ? fz_double_edge(in) : 0;

    struct call c;
    memset(&c, 0, sizeof c);
    c.name = qk ? "todre_relevance_observe_qk" : "todre_relevance_observe_probs";
    c.mask = mask;
    int o = rank4 ? 1 : 0;
    int64_t shape_a[4] = {r.B, H, Q, qk ? dh : K}, shape_k[4] = {r.B, Hkv, K, dh};
    arg(in, &c, 0, qk ? "q" : "attn", 0, fz_float_dtype(dt), 3 + o, shape_a + 1 - o,
        FZ_VALID_INNER_STRIDE | FZ_VALID_ANY_ORDER);
    if (!arbitrary(&c, 0)) fill_float(in, &c.x[0], 1);
    if (qk) {
        arg(in, &c, 1, "k", 0, fz_float_dtype(dt), 3 + o, shape_k + 1 - o,
            FZ_VALID_INNER_STRIDE | FZ_VALID_ANY_ORDER);
        if (!arbitrary(&c, 1)) fill_float(in, &c.x[1], 1);
    }
    int with_dec = fz_u8(in) % 4 != 0;
    if (with_dec) arg(in, &c, 2, "decisions", 1, DT_I32, 1, &r.B, FZ_VALID_INNER_STRIDE);

    snapshot_outputs(&c);
    todre_status st = qk ? todre_relevance_observe_qk(ctx, rel, r.layer, A(&c, 0), A(&c, 1),
                                                      scale, A(&c, 2))
                         : todre_relevance_observe_probs(ctx, rel, r.layer, A(&c, 0), A(&c, 2));
    after_call(&c, st, ctx);

    if (st == TODRE_OK && all_fit(&c)) {
        todre_relevance *twin = twin_rel(&r);
        struct fz_tensor cp[3];
        const DLTensor *ta[3] = {NULL, NULL, NULL};
        for (int i = 0; i < 3; i++) {
            if (!c.used[i]) continue;
            fz_tensor_compact_copy(&c.x[i], &cp[i]);
            ta[i] = &cp[i].t;
        }
        todre_status st2 = qk ? todre_relevance_observe_qk(ctx, twin, r.layer, ta[0], ta[1], scale,
                                                           ta[2])
                              : todre_relevance_observe_probs(ctx, twin, r.layer, ta[0], ta[2]);
        FZ_CHECK(st2 == TODRE_OK, "%s failed on compact copies: %s", c.name, todre_last_error());
        same_observation(c.name, rel, twin, &r, c.used[2] ? &c.x[2] : NULL,
                         c.used[2] ? &cp[2] : NULL);
        if (c.used[2])
            for (int64_t s = 0; s < c.x[2].count; s++) {
                int32_t v;
                memcpy(&v, fz_tensor_flat(&c.x[2], s), 4);
                FZ_CHECK(v >= TODRE_DECISION_NOT_PROBED && v <= TODRE_DECISION_PENDING,
                         "decision %d", (int)v);
            }
        for (int i = 0; i < 3; i++)
            if (c.used[i]) fz_tensor_free(&cp[i]);
        todre_relevance_destroy(twin);
    }
    free_call(&c);
    todre_context_destroy(ctx);
    todre_relevance_destroy(rel);
}

static void op_types(struct fz *in, unsigned mask)
{
    struct relcfg r;
    todre_relevance *rel = new_rel(in, &r);
    int64_t K = 1 + fz_u8(in) % 12;
    int per_seq = fz_u8(in) & 1;
    struct call c;
    memset(&c, 0, sizeof c);
    c.name = "todre_relevance_set_types";
    c.mask = mask;
    int64_t shape[2] = {r.B, K};
    arg(in, &c, 0, "types", 0, DT_U8, per_seq ? 2 : 1, per_seq ? shape : shape + 1,
        FZ_VALID_INNER_STRIDE | FZ_VALID_ANY_ORDER);
    if (!arbitrary(&c, 0))
        for (int64_t f = 0; f < c.x[0].count; f++) {
            uint8_t b = fz_u8(in);
            *(uint8_t *)fz_tensor_flat(&c.x[0], f) = b < 0xf0 ? b % 3 : b; /* 3..: invalid */
        }
    todre_status st = todre_relevance_set_types(rel, A(&c, 0));
    after_call(&c, st, NULL);
    if (st == TODRE_OK && all_fit(&c)) {
        /* keep_positions = the non-visual positions of each sequence */
        const struct fz_tensor *t = &c.x[0];
        int64_t Kt = t->t.shape[t->t.ndim - 1];
        for (int64_t s = 0; s < r.B; s++) {
            int64_t want = 0;
            int64_t *pos = malloc((size_t)Kt * sizeof *pos);
            if (!pos) abort();
            int64_t row = t->t.ndim == 2 ? s : 0;
            for (int64_t j = 0; j < Kt; j++) {
                uint8_t v = *(const uint8_t *)fz_tensor_flat(t, row * Kt + j);
                FZ_CHECK(v <= TODRE_TOKEN_TEXT, "set_types accepted type %u", (unsigned)v);
                if (v != TODRE_TOKEN_VISUAL) pos[want++] = j;
            }
            int64_t *got = malloc((size_t)Kt * sizeof *got);
            if (!got) abort();
            int64_t shape1[1] = {Kt}, count = -1;
            DLTensor o = {got, {kDLCPU, 0}, 1, DT_I64, shape1, NULL, 0};
            FZ_CHECK(todre_relevance_keep_positions(rel, s, &o, &count) == TODRE_OK,
                     "keep_positions: %s", todre_last_error());
            FZ_CHECK(count == want && memcmp(got, pos, (size_t)want * sizeof *pos) == 0,
                     "keep_positions after set_types: %lld positions, expected %lld",
                     (long long)count, (long long)want);
            free(got);
            free(pos);
        }
    }
    free_call(&c);
    todre_relevance_destroy(rel);
}

/* keep_positions, set_probe_layers, get_probe_layers. */
static void op_lists(struct fz *in, unsigned mask, int which)
{
    struct relcfg r;
    todre_relevance *rel = new_rel(in, &r);
    struct call c;
    memset(&c, 0, sizeof c);
    c.mask = mask;
    int64_t n = fz_u8(in) % 10;
    todre_status st;
    int64_t count = -77, seq = fz_u8(in) % r.B;
    if (which == 0) {
        c.name = "todre_relevance_keep_positions";
        arg(in, &c, 0, "out", 1, DT_I64, 1, &n, FZ_VALID_INNER_STRIDE);
        snapshot_outputs(&c);
        st = todre_relevance_keep_positions(rel, seq, A(&c, 0), &count);
    } else if (which == 1) {
        c.name = "todre_relevance_set_probe_layers";
        arg(in, &c, 0, "layers", 0, DT_I64, 1, &n, FZ_VALID_INNER_STRIDE);
        if (!arbitrary(&c, 0))
            for (int64_t f = 0; f < n; f++) put_i64(&c.x[0], f, fz_u8(in) % (r.L + 1));
        st = todre_relevance_set_probe_layers(rel, A(&c, 0));
    } else {
        c.name = "todre_relevance_get_probe_layers";
        arg(in, &c, 0, "out", 1, DT_I64, 1, &n, FZ_VALID_INNER_STRIDE);
        snapshot_outputs(&c);
        st = todre_relevance_get_probe_layers(rel, A(&c, 0), &count);
    }
    after_call(&c, st, NULL);
    if (which != 1) {
        /* count: written on success, and when the output is too small */
        int64_t want = -1;
        if (which == 0) {
            want = r.nsys + r.ntext;
        } else {
            FZ_CHECK(todre_relevance_get_probe_layers(rel, NULL, &want) == TODRE_OK, "count");
        }
        if (st == TODRE_OK) FZ_CHECK(count == want, "%s: count %lld, expected %lld", c.name,
                                     (long long)count, (long long)want);
        else FZ_CHECK(count == -77 || count == want, "%s failed and wrote count %lld", c.name,
                      (long long)count);
        /* (an accepted output is never aliased: after_call checks it) */
        if (st == TODRE_OK && c.x[0].cls == FZ_FITS) {
            for (int64_t f = 0; f < want; f++) {
                int64_t v = get_i64(&c.x[0], f);
                int64_t expect = which == 0 ? (f < r.nsys ? f : f + r.nvis) : 7 * r.L / 8;
                if (v != expect) {
                    char d[512];
                    fz_tensor_describe(&c.x[0], d, sizeof d);
                    fz_finding("%s: entry %lld is %lld, expected %lld (out = %s; layout %lld "
                               "system, %lld visual, %lld text)", c.name, (long long)f,
                               (long long)v, (long long)expect, d, (long long)r.nsys,
                               (long long)r.nvis, (long long)r.ntext);
                }
            }
        }
    } else if (st == TODRE_OK && all_fit(&c)) {
        /* the probe list is the set of the given layers */
        uint8_t want[8] = {0};
        for (int64_t f = 0; f < c.x[0].count; f++) {
            int64_t v = get_i64(&c.x[0], f);
            FZ_CHECK(v >= 0 && v < r.L, "set_probe_layers accepted layer %lld of %lld",
                     (long long)v, (long long)r.L);
            want[v] = 1;
        }
        int64_t got[8], cnt = 0, shape1[1] = {8};
        DLTensor o = {got, {kDLCPU, 0}, 1, DT_I64, shape1, NULL, 0};
        FZ_CHECK(todre_relevance_get_probe_layers(rel, &o, &cnt) == TODRE_OK, "get_probe_layers");
        int64_t w = 0;
        for (int64_t l = 0; l < r.L; l++)
            if (want[l]) {
                FZ_CHECK(w < cnt && got[w] == l, "probe layers differ from the set list");
                w++;
            }
        FZ_CHECK(w == cnt, "probe layer count %lld, expected %lld", (long long)cnt, (long long)w);
    }
    free_call(&c);
    todre_relevance_destroy(rel);
}

static void op_copy(struct fz *in, unsigned mask)
{
    todre_context *ctx = new_context();
    static const DLDataType dts[] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1},
                                     {kDLInt, 32, 1},   {kDLInt, 64, 1},   {kDLUInt, 8, 1}};
    DLDataType dt = dts[fz_u8(in) % 6];
    int ndim = fz_u8(in) % 4;
    int64_t shape[3];
    for (int i = 0; i < ndim; i++) shape[i] = fz_u8(in) % 5;
    struct call c;
    memset(&c, 0, sizeof c);
    c.name = "todre_context_copy";
    c.mask = mask;
    /* valid: compact only (strides NULL or row-major, size-1 dimensions any) */
    arg(in, &c, 0, "dst", 1, dt, ndim, shape, 0);
    arg(in, &c, 1, "src", 0, dt, ndim, shape, 0);
    for (size_t i = 0; i < c.x[1].bufsize; i++) c.x[1].buf[i] = (unsigned char)(i * 7 + 1);
    snapshot_outputs(&c);
    todre_status st = todre_context_copy(ctx, A(&c, 0), A(&c, 1));
    after_call(&c, st, ctx);
    if (st == TODRE_OK && all_fit(&c))
        FZ_CHECK(fz_tensor_same_elems(&c.x[0], &c.x[1]), "todre_context_copy: dst differs from src");
    free_call(&c);
    todre_context_destroy(ctx);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz in = {data, size};
    uint8_t op = fz_u8(&in) % 9;
    unsigned mask = fz_u8(&in);
    switch (op) {
    case 0: op_select(&in, mask); break;
    case 1: op_select_batch(&in, mask); break;
    case 2: op_types(&in, mask); break;
    case 3: op_observe(&in, mask, 0); break;
    case 4: op_observe(&in, mask, 1); break;
    case 5: op_lists(&in, mask, 0); break;
    case 6: op_lists(&in, mask, 1); break;
    case 7: op_lists(&in, mask, 2); break;
    default: op_copy(&in, mask); break;
    }
    return 0;
}
