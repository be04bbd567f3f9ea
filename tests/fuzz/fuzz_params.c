/*
 * libFuzzer harness: the parameter API of all three handle kinds, and the
 * other calls that take plain values (creation arguments, backend / device
 * queries with any struct_size, keep counts, resets, NULL handles).
 *
 * The input is a program: a relevance handle is created from two int64
 * values, then up to 64 operations run on a context, a selection
 * configuration and that handle (one opcode byte each, then its operands).
 * A model of every parameter, written from the header's documentation (not
 * read from the library), predicts each call: which succeed, what every get
 * returns, what a reset restores. Besides ASan / UBSan, a finding is:
 *  - a call whose status differs from the model's (a set out of range that
 *    succeeds, a valid set that fails, a get of the wrong type that succeeds);
 *  - a get that returns another value than the last successful set (or the
 *    default after a reset), an out-pointer written by a failed call;
 *  - todre_param_get_bounds() disagreeing with the header (range, default,
 *    type, read-only), or writing beyond the caller's struct_size;
 *  - the status / message contract (fz_check_status) broken by any call.
 *
 * Input layout (little-endian, zeros past the end):
 *   i64e num_layers, i64e batch          (fz_i64_edge each)
 *   repeated: u8 opcode, operands (see run_op)
 */
#define TODRE_EXPERIMENTAL_API 1
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

/* ---- the model: every parameter as the header documents it ---------------- */

enum kind { K_CTX = 0, K_SEL = 1, K_REL = 2 };

struct spec {
    todre_param param;
    const char *name;
    enum kind kind;
    int is_double;
    int read_only;
    int64_t imin, imax, idef;
    double dmin, dmax, ddef; /* dmin: the smallest accepted value (bounds are inclusive) */
};

#define RATIO_MIN 0x0.0000000000001p-1022 /* (0, 1]: the smallest double above 0 */

static const struct spec specs[] = {
    {TODRE_CONTEXT_WORKSPACE_LIMIT, "TODRE_CONTEXT_WORKSPACE_LIMIT", K_CTX, 0, 0, 0, INT64_MAX,
     268435456, 0, 0, 0},
    {TODRE_CONTEXT_NUM_THREADS, "TODRE_CONTEXT_NUM_THREADS", K_CTX, 0, 0, 0, 1024, 0, 0, 0, 0},
    {TODRE_CONTEXT_EXP_SELECT_STRATEGY, "TODRE_CONTEXT_EXP_SELECT_STRATEGY", K_CTX, 0, 0, 0, 3, 0,
     0, 0, 0},
    /* read-only, written by selections (none here): 0 from creation on */
    {TODRE_CONTEXT_EXP_SELECT_ROWS_MADE, "TODRE_CONTEXT_EXP_SELECT_ROWS_MADE", K_CTX, 0, 1, 0,
     INT64_MAX, 0, 0, 0, 0},
    {TODRE_SELECT_OBJECTIVE, "TODRE_SELECT_OBJECTIVE", K_SEL, 0, 0, 0, 2, 0, 0, 0, 0},
    {TODRE_SELECT_PIVOT, "TODRE_SELECT_PIVOT", K_SEL, 0, 0, 0, 5, 0, 0, 0, 0},
    {TODRE_SELECT_PIVOT_LO, "TODRE_SELECT_PIVOT_LO", K_SEL, 0, 0, 0, INT64_MAX - 1, 0, 0, 0, 0},
    {TODRE_SELECT_PIVOT_HI, "TODRE_SELECT_PIVOT_HI", K_SEL, 0, 0, -1, INT64_MAX, -1, 0, 0, 0},
    {TODRE_SELECT_KEEP, "TODRE_SELECT_KEEP", K_SEL, 0, 0, 0, INT64_MAX, 0, 0, 0, 0},
    {TODRE_SELECT_RATIO, "TODRE_SELECT_RATIO", K_SEL, 1, 0, 0, 0, 0, RATIO_MIN, 1.0, 0.10},
    {TODRE_SELECT_SEED, "TODRE_SELECT_SEED", K_SEL, 0, 0, INT64_MIN, INT64_MAX, 0, 0, 0, 0},
    {TODRE_SELECT_ORDER, "TODRE_SELECT_ORDER", K_SEL, 0, 0, 0, 2, 0, 0, 0, 0},
    {TODRE_SELECT_BUDGET, "TODRE_SELECT_BUDGET", K_SEL, 0, 0, 0, 2, 0, 0, 0, 0},
    {TODRE_SELECT_GROUP_MIN, "TODRE_SELECT_GROUP_MIN", K_SEL, 0, 0, 1, INT64_MAX, 1, 0, 0, 0},
    {TODRE_RELEVANCE_TAU, "TODRE_RELEVANCE_TAU", K_REL, 1, 0, 0, 0, 0, 0.0, 1.0, 0.10},
    {TODRE_RELEVANCE_SCHEDULE, "TODRE_RELEVANCE_SCHEDULE", K_REL, 0, 0, 0, 1, 0, 0, 0, 0},
    /* read-only; range checked against todre_param_get_bounds() at creation */
    {TODRE_RELEVANCE_NUM_LAYERS, "TODRE_RELEVANCE_NUM_LAYERS", K_REL, 0, 1, 0, 0, 0, 0, 0, 0},
    {TODRE_RELEVANCE_BATCH, "TODRE_RELEVANCE_BATCH", K_REL, 0, 1, 0, 0, 0, 0, 0, 0},
};
#define NSPECS (sizeof specs / sizeof specs[0])

static const struct spec *find_spec(todre_param p)
{
    for (size_t i = 0; i < NSPECS; i++)
        if (specs[i].param == p) return &specs[i];
    return NULL;
}

/* The state the model predicts for each handle. */
struct model {
    union {
        int64_t i;
        double d;
    } v[NSPECS];
    int64_t num_layers, batch;
    uint8_t probe[4096]; /* relevance probe layers (num_layers <= 4096 here) */
};

static void model_defaults(struct model *m, enum kind k)
{
    for (size_t i = 0; i < NSPECS; i++) {
        if (specs[i].kind != k || specs[i].read_only) continue;
        if (specs[i].is_double) m->v[i].d = specs[i].ddef;
        else m->v[i].i = specs[i].idef;
    }
    if (k == K_REL) {
        memset(m->probe, 0, sizeof m->probe);
        m->probe[7 * m->num_layers / 8] = 1;
    }
}

struct state {
    todre_context *ctx;
    todre_select_config *cfg;
    todre_relevance *rel;
    struct model m[3];
};

/* ---- operands --------------------------------------------------------------- */

static todre_param pick_param(struct fz *in)
{
    uint8_t b = fz_u8(in);
    if (b < 0xe0) return specs[b % NSPECS].param;
    static const int32_t odd[] = {0, -1, 99, 102, 199, 210, 299, 304, 399, 999, 1002, INT32_MIN};
    if (b < 0xf0) return (todre_param)odd[b % 12];
    return (todre_param)(int32_t)fz_u32(in);
}

/* An int value: in the spec's range (mostly), at its edges, or anything. */
static int64_t pick_int(struct fz *in, const struct spec *s)
{
    uint8_t b = fz_u8(in);
    if (s && !s->is_double && !s->read_only && b < 0x60) {
        switch (b % 6) {
        case 0: return s->imin;
        case 1: return s->imax;
        case 2: return s->imin > INT64_MIN ? s->imin - 1 : s->imin;
        case 3: return s->imax < INT64_MAX ? s->imax + 1 : s->imax;
        case 4: return s->idef;
        default: return fz_range(in, s->imin, s->imax);
        }
    }
    return fz_i64_edge(in);
}

static double pick_double(struct fz *in, const struct spec *s)
{
    uint8_t b = fz_u8(in);
    if (s && s->is_double && b < 0x40) {
        switch (b % 5) {
        case 0: return s->dmin;
        case 1: return s->dmax;
        case 2: return nextafter(s->dmin, -INFINITY);
        case 3: return nextafter(s->dmax, INFINITY);
        default: return s->ddef;
        }
    }
    return fz_double_edge(in);
}

/* ---- checks ------------------------------------------------------------------ */

static const char *kind_name(enum kind k)
{
    return k == K_CTX ? "context" : k == K_SEL ? "select_config" : "relevance";
}

/* Status of a set the model predicts. */
static int set_ok(const struct spec *s, enum kind k, int is_double, int64_t iv, double dv)
{
    if (!s || s->kind != k || s->is_double != is_double || s->read_only) return 0;
    if (!is_double) return iv >= s->imin && iv <= s->imax;
    return !isnan(dv) && dv >= s->dmin && dv <= s->dmax;
}

static void expect(const char *what, todre_status st, int ok, const todre_context *ctx)
{
    fz_check_status(what, st, ctx);
    if (ok) FZ_CHECK(st == TODRE_OK, "%s failed (%s: %s); the header says it succeeds", what,
                     todre_status_string(st), todre_last_error());
    else FZ_CHECK(st == TODRE_ERR_INVALID_ARGUMENT,
                  "%s returned %s; the header says TODRE_ERR_INVALID_ARGUMENT", what,
                  todre_status_string(st));
}

static todre_status h_set_int(struct state *S, enum kind k, todre_param p, int64_t v)
{
    switch (k) {
    case K_CTX: return todre_context_set_int(S->ctx, p, v);
    case K_SEL: return todre_select_config_set_int(S->cfg, p, v);
    default: return todre_relevance_set_int(S->rel, p, v);
    }
}

static todre_status h_get_int(struct state *S, enum kind k, todre_param p, int64_t *v)
{
    switch (k) {
    case K_CTX: return todre_context_get_int(S->ctx, p, v);
    case K_SEL: return todre_select_config_get_int(S->cfg, p, v);
    default: return todre_relevance_get_int(S->rel, p, v);
    }
}

static todre_status h_set_double(struct state *S, enum kind k, todre_param p, double v)
{
    switch (k) {
    case K_CTX: return todre_context_set_double(S->ctx, p, v);
    case K_SEL: return todre_select_config_set_double(S->cfg, p, v);
    default: return todre_relevance_set_double(S->rel, p, v);
    }
}

static todre_status h_get_double(struct state *S, enum kind k, todre_param p, double *v)
{
    switch (k) {
    case K_CTX: return todre_context_get_double(S->ctx, p, v);
    case K_SEL: return todre_select_config_get_double(S->cfg, p, v);
    default: return todre_relevance_get_double(S->rel, p, v);
    }
}

static const todre_context *msg_ctx(struct state *S, enum kind k)
{
    return k == K_CTX ? S->ctx : NULL;
}

/* expect() for the gets, which run often: the name is formatted only for a
 * finding. */
static void expect_get(todre_status st, int ok, const todre_context *ctx, enum kind k,
                       int as_double, todre_param p)
{
    const char *problem = fz_status_problem(st, ctx);
    if (!problem && ok && st != TODRE_OK) problem = "failed; the header says it succeeds";
    if (!problem && !ok && st != TODRE_ERR_INVALID_ARGUMENT)
        problem = "did not return TODRE_ERR_INVALID_ARGUMENT";
    if (problem)
        fz_finding("todre_%s_get_%s(%d) %s (%s: %s)", kind_name(k), as_double ? "double" : "int",
                   (int)p, problem, todre_status_string(st), todre_last_error());
}

/* Get one parameter and compare with the model (or the failure it predicts). */
static void check_get(struct state *S, enum kind k, todre_param p, int as_double)
{
    const struct spec *s = find_spec(p);
    int ok = s && s->kind == k && s->is_double == as_double;
    if (as_double) {
        double v = -12345.5;
        todre_status st = h_get_double(S, k, p, &v);
        expect_get(st, ok, msg_ctx(S, k), k, 1, p);
        if (!ok) {
            FZ_CHECK(v == -12345.5, "get_double(%d) failed but wrote its out-pointer", (int)p);
            return;
        }
        double want = S->m[k].v[s - specs].d;
        FZ_CHECK(memcmp(&v, &want, sizeof v) == 0, "todre_%s_get_double(%s) = %.17g, the model "
                 "says %.17g", kind_name(k), s->name, v, want);
    } else {
        int64_t v = -1234567;
        todre_status st = h_get_int(S, k, p, &v);
        expect_get(st, ok, msg_ctx(S, k), k, 0, p);
        if (!ok) {
            FZ_CHECK(v == -1234567, "get_int(%d) failed but wrote its out-pointer", (int)p);
            return;
        }
        int64_t want = p == TODRE_RELEVANCE_NUM_LAYERS ? S->m[k].num_layers
                       : p == TODRE_RELEVANCE_BATCH    ? S->m[k].batch
                                                       : S->m[k].v[s - specs].i;
        FZ_CHECK(v == want, "todre_%s_get_int(%s) = %lld, the model says %lld", kind_name(k),
                 s->name, (long long)v, (long long)want);
    }
}

/* Every parameter of every kind read from handle @p k (as its own type; with
 * @p wrong_types also as the other type, which must fail). */
static void check_all(struct state *S, enum kind k, int wrong_types)
{
    for (size_t i = 0; i < NSPECS; i++) {
        check_get(S, k, specs[i].param, specs[i].is_double);
        if (wrong_types) check_get(S, k, specs[i].param, !specs[i].is_double);
    }
}

/* todre_param_get_bounds() with a struct of exactly the declared size (or
 * 16 bytes beyond the 1.0 struct, whichever is smaller). */
static void check_bounds(struct fz *in, todre_param p)
{
    static const size_t sizes[] = {0, 1, 8, sizeof(todre_param_bounds) - 1,
                                   sizeof(todre_param_bounds), sizeof(todre_param_bounds) + 8,
                                   sizeof(todre_param_bounds) + 16};
    uint8_t b = fz_u8(in);
    size_t declared = b < 0xf0 ? sizes[b % 7] : (size_t)fz_u64(in);
    size_t alloc = declared < sizeof(size_t) ? sizeof(size_t) : declared;
    if (alloc > sizeof(todre_param_bounds) + 16) alloc = sizeof(todre_param_bounds) + 16;
    unsigned char *buf = malloc(alloc);
    if (!buf) abort();
    memset(buf, 0x5a, alloc);
    memcpy(buf, &declared, sizeof declared);
    todre_status st = todre_param_get_bounds(p, (todre_param_bounds *)buf);
    const struct spec *s = find_spec(p);
    char what[64];
    snprintf(what, sizeof what, "todre_param_get_bounds(%d, struct_size %zu)", (int)p, declared);
    expect(what, st, s && declared >= sizeof(todre_param_bounds), NULL);
    size_t kept;
    memcpy(&kept, buf, sizeof kept);
    FZ_CHECK(kept == declared, "%s changed struct_size to %zu", what, kept);
    if (st != TODRE_OK) {
        for (size_t i = sizeof(size_t); i < alloc; i++)
            FZ_CHECK(buf[i] == 0x5a, "%s failed but wrote byte %zu", what, i);
    } else {
        for (size_t i = sizeof(todre_param_bounds); i < alloc; i++)
            FZ_CHECK(buf[i] == 0x5a, "%s wrote byte %zu, beyond the 1.0 struct", what, i);
        todre_param_bounds bd;
        memcpy(&bd, buf, sizeof bd);
        FZ_CHECK(bd.type == (s->is_double ? TODRE_PARAM_DOUBLE : TODRE_PARAM_INT),
                 "%s: %s has type %d", what, s->name, (int)bd.type);
        FZ_CHECK(bd.read_only == s->read_only, "%s: %s read_only = %d", what, s->name,
                 (int)bd.read_only);
        if (s->read_only && s->kind == K_REL) { /* creation arguments' ranges */
            FZ_CHECK(bd.int_min >= 1 && bd.int_min <= bd.int_max, "%s: %s range [%lld, %lld]",
                     what, s->name, (long long)bd.int_min, (long long)bd.int_max);
        } else if (s->read_only) {
            FZ_CHECK(bd.int_min == s->imin && bd.int_max == s->imax && bd.int_default == s->idef,
                     "%s: %s range [%lld, %lld] default %lld", what, s->name,
                     (long long)bd.int_min, (long long)bd.int_max, (long long)bd.int_default);
        } else if (s->is_double) {
            FZ_CHECK(bd.double_min == s->dmin && bd.double_max == s->dmax &&
                         bd.double_default == s->ddef && bd.int_min == 0 && bd.int_max == 0 &&
                         bd.int_default == 0,
                     "%s: %s is [%.17g, %.17g] default %.17g; the header says [%.17g, %.17g] "
                     "default %.17g",
                     what, s->name, bd.double_min, bd.double_max, bd.double_default, s->dmin,
                     s->dmax, s->ddef);
        } else {
            FZ_CHECK(bd.int_min == s->imin && bd.int_max == s->imax && bd.int_default == s->idef &&
                         bd.double_min == 0 && bd.double_max == 0 && bd.double_default == 0,
                     "%s: %s is [%lld, %lld] default %lld; the header says [%lld, %lld] "
                     "default %lld",
                     what, s->name, (long long)bd.int_min, (long long)bd.int_max,
                     (long long)bd.int_default, (long long)s->imin, (long long)s->imax,
                     (long long)s->idef);
        }
    }
    const char *name = todre_param_name(p);
    FZ_CHECK(s ? name && strcmp(name, s->name) == 0 : name == NULL,
             "todre_param_name(%d) = %s", (int)p, name ? name : "NULL");
    free(buf);
}

/* Read-only range of a relevance creation argument, from the library. */
static void ro_range(todre_param p, int64_t *lo, int64_t *hi)
{
    todre_param_bounds bd;
    memset(&bd, 0, sizeof bd);
    bd.struct_size = sizeof bd;
    FZ_CHECK(todre_param_get_bounds(p, &bd) == TODRE_OK, "bounds of %d", (int)p);
    *lo = bd.int_min;
    *hi = bd.int_max;
}

/* Create the relevance handle; the model predicts success from the bounds.
 * Sizes are capped (layers * batch <= 65536, layers <= 4096) so that the
 * handle stays small: allocation of a large, valid handle is legitimate. */
static int create_rel(struct state *S, int64_t L, int64_t B)
{
    int64_t llo, lhi, blo, bhi;
    ro_range(TODRE_RELEVANCE_NUM_LAYERS, &llo, &lhi);
    ro_range(TODRE_RELEVANCE_BATCH, &blo, &bhi);
    int ok = L >= llo && L <= lhi && B >= blo && B <= bhi;
    if (ok && (L > 4096 || L * B > 65536)) {
        L = 1 + L % 4096;
        B = 1 + B % (65536 / L);
    }
    todre_relevance *sentinel = (todre_relevance *)(uintptr_t)0x1234;
    todre_relevance *r = sentinel;
    char what[96];
    snprintf(what, sizeof what, "todre_relevance_create(%lld, %lld)", (long long)L, (long long)B);
    todre_status st = todre_relevance_create(L, B, &r);
    expect(what, st, ok, NULL);
    if (!ok) {
        FZ_CHECK(r == sentinel, "%s failed but wrote *out", what);
        return 0;
    }
    todre_relevance_destroy(S->rel);
    S->rel = r;
    S->m[K_REL].num_layers = L;
    S->m[K_REL].batch = B;
    model_defaults(&S->m[K_REL], K_REL);
    return 1;
}

static void check_probes(struct state *S, struct fz *in)
{
    const struct model *m = &S->m[K_REL];
    int64_t want = 0;
    for (int64_t l = 0; l < m->num_layers; l++) want += m->probe[l];
    int64_t cap = fz_u8(in) % 3 == 0 ? want - 1 : want; /* sometimes one too few */
    if (cap < 0) cap = 0;
    int64_t *buf = malloc((size_t)(cap ? cap : 1) * sizeof *buf);
    if (!buf) abort();
    int64_t shape[1] = {cap};
    DLTensor t = {buf, {kDLCPU, 0}, 1, {kDLInt, 64, 1}, shape, NULL, 0};
    int64_t count = -7;
    todre_status st = todre_relevance_get_probe_layers(S->rel, &t, &count);
    expect("todre_relevance_get_probe_layers", st, cap >= want, NULL);
    FZ_CHECK(count == want, "probe layer count %lld, the model says %lld", (long long)count,
             (long long)want);
    if (st == TODRE_OK) {
        int64_t w = 0;
        for (int64_t l = 0; l < m->num_layers; l++)
            if (m->probe[l]) {
                FZ_CHECK(buf[w] == l, "probe layer %lld is %lld, the model says %lld",
                         (long long)w, (long long)buf[w], (long long)l);
                w++;
            }
    }
    count = -7;
    st = todre_relevance_get_probe_layers(S->rel, NULL, &count);
    expect("todre_relevance_get_probe_layers(NULL)", st, 1, NULL);
    FZ_CHECK(count == want, "probe layer count (NULL out) %lld, model %lld", (long long)count,
             (long long)want);
    free(buf);
}

static void set_probes(struct state *S, struct fz *in)
{
    struct model *m = &S->m[K_REL];
    int64_t n = fz_u8(in) % 6;
    int64_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) abort();
    int ok = n >= 1;
    for (int64_t i = 0; i < n; i++) {
        uint8_t b = fz_u8(in);
        v[i] = b < 0xc0 ? b % (m->num_layers + 1) : fz_i64_edge(in); /* num_layers: invalid */
        if (v[i] < 0 || v[i] >= m->num_layers) ok = 0;
    }
    int64_t shape[1] = {n};
    DLTensor t = {v, {kDLCPU, 0}, 1, {kDLInt, 64, 1}, shape, NULL, 0};
    todre_status st = todre_relevance_set_probe_layers(S->rel, &t);
    expect("todre_relevance_set_probe_layers", st, ok, NULL);
    if (ok) {
        memset(m->probe, 0, sizeof m->probe);
        for (int64_t i = 0; i < n; i++) m->probe[v[i]] = 1;
    }
    free(v);
}

static void do_reset(struct state *S, struct fz *in)
{
    enum kind k = (enum kind)(fz_u8(in) % 3);
    uint8_t b = fz_u8(in);
    int what = b < 0xc0 ? 1 + b % 3 : (int)(int32_t)fz_u32(in);
    int ok = what == TODRE_RESET_STATE || what == TODRE_RESET_PARAMS || what == TODRE_RESET_ALL;
    todre_status st = k == K_CTX   ? todre_context_reset(S->ctx, (todre_reset)what)
                      : k == K_SEL ? todre_select_config_reset(S->cfg, (todre_reset)what)
                                   : todre_relevance_reset(S->rel, (todre_reset)what);
    char name[64];
    snprintf(name, sizeof name, "todre_%s_reset(%d)", kind_name(k), what);
    expect(name, st, ok, msg_ctx(S, k));
    if (ok && (what & TODRE_RESET_PARAMS)) model_defaults(&S->m[k], k);
    check_all(S, k, 0);
}

static void keep_count(struct state *S, struct fz *in)
{
    uint8_t b = fz_u8(in);
    int64_t n = b < 0x80 ? (int64_t)(b % 64) : fz_i64_edge(in);
    int64_t k = -99;
    todre_status st = todre_select_keep_count(S->cfg, n, &k);
    const struct model *m = &S->m[K_SEL];
    int64_t keep = m->v[find_spec(TODRE_SELECT_KEEP) - specs].i;
    double r = m->v[find_spec(TODRE_SELECT_RATIO) - specs].d;
    int ok = n >= 1 && keep <= n;
    char what[96];
    snprintf(what, sizeof what, "todre_select_keep_count(n = %lld, keep %lld, ratio %.17g)",
             (long long)n, (long long)keep, r);
    expect(what, st, ok, NULL);
    if (!ok) {
        FZ_CHECK(k == -99, "%s failed but wrote *k", what);
        return;
    }
    FZ_CHECK(k >= 1 && k <= n, "%s = %lld, outside [1, n]", what, (long long)k);
    if (keep > 0) {
        FZ_CHECK(k == keep, "%s = %lld, not the keep count", what, (long long)k);
    } else {
        /* clamp(floor(r * n + 0.5), 1, n), exactly up to double rounding */
        long double exact = floorl((long double)r * (long double)n + 0.5L);
        if (exact < 1) exact = 1;
        if (exact > (long double)n) exact = (long double)n;
        long double diff = fabsl(exact - (long double)k);
        FZ_CHECK(diff <= 1 + (long double)n * 0x1p-52L, "%s = %lld; clamp(floor(r n + 0.5)) = %.0Lf",
                 what, (long long)k, exact);
    }
}

static void make_name(struct fz *in, char *buf, size_t cap)
{
    static const char *names[] = {"cpu", "auto", "cuda", "", "CPU", "cpu ", "a_b_9",
                                  "abcdefghijklmnopqrstuvwxyz01234", /* 31 */
                                  "abcdefghijklmnopqrstuvwxyz012345" /* 32 */, "c\xc3\xa9"};
    uint8_t b = fz_u8(in);
    if (b < 0xc0) {
        snprintf(buf, cap, "%s", names[b % 10]);
        return;
    }
    size_t len = fz_u8(in) % 40;
    if (len >= cap) len = cap - 1;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = fz_u8(in);
        buf[i] = c ? (char)c : 'x';
    }
    buf[len] = '\0';
}

static int well_formed(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 31) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return 0;
    return 1;
}

static void create_context(struct fz *in)
{
    char name[48];
    make_name(in, name, sizeof name);
    int use_null = fz_u8(in) % 8 == 0;
    uint8_t b = fz_u8(in);
    int device = b < 0xc0 ? (int)(b % 3) - 1 : (int)(int32_t)fz_u32(in);
    const char *nm = use_null ? NULL : name;
    todre_context *sentinel = (todre_context *)(uintptr_t)0x4321, *c = sentinel;
    todre_status st = todre_context_create(nm, device, &c);
    fz_check_status("todre_context_create", st, NULL);
    todre_status want;
    if (device < 0) want = TODRE_ERR_INVALID_ARGUMENT;
    else if (!nm || strcmp(nm, "auto") == 0) want = TODRE_OK;
    else if (!well_formed(nm)) want = TODRE_ERR_INVALID_ARGUMENT;
    else if (strcmp(nm, "cpu") != 0) want = TODRE_ERR_BACKEND_UNAVAILABLE;
    else want = device == 0 ? TODRE_OK : TODRE_ERR_INVALID_ARGUMENT;
    FZ_CHECK(st == want, "todre_context_create(\"%s\", %d) = %s, expected %s",
             nm ? nm : "(NULL)", device, todre_status_string(st), todre_status_string(want));
    if (st != TODRE_OK) {
        FZ_CHECK(c == sentinel, "todre_context_create failed but wrote *out");
        return;
    }
    FZ_CHECK(strcmp(todre_context_backend(c), "cpu") == 0, "context backend %s",
             todre_context_backend(c));
    todre_context_destroy(c);
}

static void props(struct fz *in)
{
    uint8_t which = fz_u8(in);
    static const size_t extra[] = {0, 1, 8, 16};
    uint8_t b = fz_u8(in);
    size_t full = which & 1 ? sizeof(todre_device_props) : sizeof(todre_backend_props);
    size_t declared = b < 0x40 ? full - (size_t)(b % 9) : b < 0xf0 ? full + extra[b % 4]
                                                                    : (size_t)fz_u64(in);
    size_t alloc = declared < sizeof(size_t) ? sizeof(size_t) : declared;
    if (alloc > full + 16) alloc = full + 16;
    unsigned char *buf = malloc(alloc);
    if (!buf) abort();
    memset(buf, 0x77, alloc);
    memcpy(buf, &declared, sizeof declared);
    todre_status st;
    int ok;
    char what[96];
    if (which & 1) {
        char name[48];
        make_name(in, name, sizeof name);
        uint8_t d = fz_u8(in);
        int device = d < 0xc0 ? (int)(d % 3) - 1 : (int)(int32_t)fz_u32(in);
        st = todre_device_get_props(name, device, (todre_device_props *)buf);
        /* resolve the backend and device first (as todre_context_create), then
         * the struct_size */
        int auto_name = !strcmp(name, "auto");
        ok = device >= 0 && (auto_name || (!strcmp(name, "cpu") && device == 0)) &&
             declared >= full;
        snprintf(what, sizeof what, "todre_device_get_props(\"%s\", %d, struct_size %zu)", name,
                 device, declared);
        fz_check_status(what, st, NULL);
        if (ok) FZ_CHECK(st == TODRE_OK, "%s failed: %s", what, todre_last_error());
        else FZ_CHECK(st != TODRE_OK, "%s succeeded", what);
        if (st == TODRE_OK) {
            todre_device_props p;
            memcpy(&p, buf, sizeof p);
            FZ_CHECK(memchr(p.name, 0, sizeof p.name) && memchr(p.arch, 0, sizeof p.arch),
                     "%s: unterminated name or arch", what);
        }
    } else {
        uint8_t i = fz_u8(in);
        int index = i < 0xc0 ? (int)(i % 3) - 1 : (int)(int32_t)fz_u32(in);
        int count = 0;
        FZ_CHECK(todre_backend_count(&count) == TODRE_OK && count == 1,
                 "backend count %d (only cpu is registered here)", count);
        st = todre_backend_get_props(index, (todre_backend_props *)buf);
        ok = declared >= full && index == 0;
        snprintf(what, sizeof what, "todre_backend_get_props(%d, struct_size %zu)", index, declared);
        expect(what, st, ok, NULL);
        if (st == TODRE_OK) {
            todre_backend_props p;
            memcpy(&p, buf, sizeof p);
            FZ_CHECK(p.name && !strcmp(p.name, "cpu") && p.path && !strcmp(p.path, "") &&
                         p.available == 1 && p.device_count >= 1 && p.reason &&
                         !strcmp(p.reason, ""),
                     "%s: props of the CPU backend are wrong", what);
        }
    }
    size_t kept;
    memcpy(&kept, buf, sizeof kept);
    FZ_CHECK(kept == declared, "%s changed struct_size", what);
    size_t from = st == TODRE_OK ? full : sizeof(size_t);
    for (size_t i = from; i < alloc; i++)
        FZ_CHECK(buf[i] == 0x77, "%s wrote byte %zu (%s)", what, i,
                 st == TODRE_OK ? "beyond the 1.0 struct" : "after failing");
    free(buf);
}

/* Every call with a NULL handle or NULL out-pointer fails cleanly. */
static void null_calls(struct state *S, struct fz *in)
{
    todre_param p = pick_param(in);
    int64_t iv = 5;
    double dv = 0.5;
    expect("ctx NULL set_int", todre_context_set_int(NULL, p, 1), 0, NULL);
    expect("ctx NULL get_int", todre_context_get_int(NULL, p, &iv), 0, NULL);
    expect("ctx NULL set_double", todre_context_set_double(NULL, p, 0.5), 0, NULL);
    expect("ctx NULL get_double", todre_context_get_double(NULL, p, &dv), 0, NULL);
    expect("ctx NULL reset", todre_context_reset(NULL, TODRE_RESET_ALL), 0, NULL);
    expect("cfg NULL set_int", todre_select_config_set_int(NULL, p, 1), 0, NULL);
    expect("cfg NULL get_int", todre_select_config_get_int(NULL, p, &iv), 0, NULL);
    expect("cfg NULL set_double", todre_select_config_set_double(NULL, p, 0.5), 0, NULL);
    expect("cfg NULL get_double", todre_select_config_get_double(NULL, p, &dv), 0, NULL);
    expect("cfg NULL reset", todre_select_config_reset(NULL, TODRE_RESET_ALL), 0, NULL);
    expect("rel NULL set_int", todre_relevance_set_int(NULL, p, 1), 0, NULL);
    expect("rel NULL get_int", todre_relevance_get_int(NULL, p, &iv), 0, NULL);
    expect("rel NULL set_double", todre_relevance_set_double(NULL, p, 0.5), 0, NULL);
    expect("rel NULL get_double", todre_relevance_get_double(NULL, p, &dv), 0, NULL);
    expect("rel NULL reset", todre_relevance_reset(NULL, TODRE_RESET_ALL), 0, NULL);
    FZ_CHECK(iv == 5 && dv == 0.5, "a call with a NULL handle wrote its out-pointer");
    expect("keep_count NULL cfg", todre_select_keep_count(NULL, 10, &iv), 0, NULL);
    expect("keep_count NULL k", todre_select_keep_count(S->cfg, 10, NULL), 0, NULL);
    const struct spec *s = find_spec(p);
    enum kind k = s ? s->kind : K_CTX;
    if (s) {
        if (s->is_double) expect("get_double NULL value", h_get_double(S, k, p, NULL), 0, msg_ctx(S, k));
        else expect("get_int NULL value", h_get_int(S, k, p, NULL), 0, msg_ctx(S, k));
    }
    expect("get_bounds NULL", todre_param_get_bounds(p, NULL), 0, NULL);
    expect("create NULL out", todre_relevance_create(1, 1, NULL), 0, NULL);
    expect("config_create NULL out", todre_select_config_create(NULL), 0, NULL);
    expect("context_create NULL out", todre_context_create("cpu", 0, NULL), 0, NULL);
    expect("probe_layers NULL count", todre_relevance_get_probe_layers(S->rel, NULL, NULL), 0, NULL);
    expect("set_probe_layers NULL", todre_relevance_set_probe_layers(S->rel, NULL), 0, NULL);
    expect("backend_count NULL", todre_backend_count(NULL), 0, NULL);
    expect("backend_props NULL", todre_backend_get_props(0, NULL), 0, NULL);
    expect("device_props NULL", todre_device_get_props("cpu", 0, NULL), 0, NULL);
    int isp = 3;
    expect("is_probe NULL rel", todre_relevance_is_probe(NULL, 0, 0, &isp), 0, NULL);
    expect("is_probe NULL out", todre_relevance_is_probe(S->rel, 0, 0, NULL), 0, NULL);
    FZ_CHECK(isp == 3, "is_probe with a NULL handle wrote its out-pointer");
    todre_context_destroy(NULL);
    todre_select_config_destroy(NULL);
    todre_relevance_destroy(NULL);
}

static void is_probe(struct state *S, struct fz *in)
{
    const struct model *m = &S->m[K_REL];
    uint8_t b = fz_u8(in);
    int64_t seq = b < 0xc0 ? (int64_t)(b % 3) - 1 + (b & 1 ? m->batch - 1 : 0) : fz_i64_edge(in);
    uint8_t c = fz_u8(in);
    int64_t layer = c < 0xc0 ? (int64_t)(c % (m->num_layers + 2)) - 1 : fz_i64_edge(in);
    int out = 7;
    todre_status st = todre_relevance_is_probe(S->rel, seq, layer, &out);
    int ok = seq >= 0 && seq < m->batch && layer >= 0 && layer < m->num_layers;
    expect("todre_relevance_is_probe", st, ok, NULL);
    if (!ok) {
        FZ_CHECK(out == 7, "is_probe failed but wrote *is_probe");
        return;
    }
    /* no observation ever happens here: the schedule alone decides */
    int first = -1;
    for (int64_t l = 0; l < m->num_layers && first < 0; l++)
        if (m->probe[l]) first = (int)l;
    int64_t sched = m->v[find_spec(TODRE_RELEVANCE_SCHEDULE) - specs].i;
    int want = sched == TODRE_PROBE_UNTIL_DROP ? layer >= first : m->probe[layer];
    FZ_CHECK(out == want, "is_probe(seq %lld, layer %lld) = %d, the model says %d", (long long)seq,
             (long long)layer, out, want);
}

static void run_op(struct state *S, struct fz *in)
{
    uint8_t op = fz_u8(in) % 20;
    switch (op) {
    case 0: case 1: case 2: { /* set_int on a handle */
        enum kind k = (enum kind)op;
        todre_param p = pick_param(in);
        const struct spec *s = find_spec(p);
        int64_t v = pick_int(in, s);
        char what[96];
        snprintf(what, sizeof what, "todre_%s_set_int(%d, %lld)", kind_name(k), (int)p,
                 (long long)v);
        int ok = set_ok(s, k, 0, v, 0);
        expect(what, h_set_int(S, k, p, v), ok, msg_ctx(S, k));
        if (ok) S->m[k].v[s - specs].i = v;
        check_get(S, k, p, 0);
        break;
    }
    case 3: case 4: case 5: { /* set_double */
        enum kind k = (enum kind)(op - 3);
        todre_param p = pick_param(in);
        const struct spec *s = find_spec(p);
        double v = pick_double(in, s);
        char what[96];
        snprintf(what, sizeof what, "todre_%s_set_double(%d, %.17g)", kind_name(k), (int)p, v);
        int ok = set_ok(s, k, 1, 0, v);
        expect(what, h_set_double(S, k, p, v), ok, msg_ctx(S, k));
        if (ok) {
            S->m[k].v[s - specs].d = v;
            /* header: setting the ratio also sets TODRE_SELECT_KEEP to 0 */
            if (p == TODRE_SELECT_RATIO) S->m[k].v[find_spec(TODRE_SELECT_KEEP) - specs].i = 0;
        }
        check_get(S, k, p, 1);
        check_get(S, k, TODRE_SELECT_KEEP, 0);
        break;
    }
    case 6: case 7: case 8: { /* get of any parameter as either type */
        enum kind k = (enum kind)(op - 6);
        todre_param p = pick_param(in);
        check_get(S, k, p, fz_u8(in) & 1);
        break;
    }
    case 9: do_reset(S, in); break;
    case 10: check_bounds(in, pick_param(in)); break;
    case 11: keep_count(S, in); break;
    case 12: {
        int64_t L = fz_i64_edge(in), B = fz_i64_edge(in);
        create_rel(S, L, B);
        check_all(S, K_REL, 0);
        break;
    }
    case 13: create_context(in); break;
    case 14: props(in); break;
    case 15: null_calls(S, in); break;
    case 16: set_probes(S, in); break;
    case 17: check_probes(S, in); break;
    case 18: is_probe(S, in); break;
    default: check_all(S, (enum kind)(fz_u8(in) % 3), 1); break;
    }
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
    static struct state S; /* large (the probe model): not on the stack */
    memset(&S, 0, sizeof S);
    FZ_CHECK(todre_context_create("cpu", 0, &S.ctx) == TODRE_OK, "context: %s", todre_last_error());
    FZ_CHECK(todre_select_config_create(&S.cfg) == TODRE_OK, "config: %s", todre_last_error());
    model_defaults(&S.m[K_CTX], K_CTX);
    model_defaults(&S.m[K_SEL], K_SEL);
    int64_t L = fz_i64_edge(&in), B = fz_i64_edge(&in);
    if (!create_rel(&S, L, B)) FZ_CHECK(create_rel(&S, 1 + (L & 63), 1 + (B & 3)), "create");
    for (int ops = 0; ops < 64 && in.n > 0; ops++) run_op(&S, &in);
    for (int i = 0; i < 3; i++) check_all(&S, (enum kind)i, 1);
    todre_relevance_destroy(S.rel);
    todre_select_config_destroy(S.cfg);
    todre_context_destroy(S.ctx);
    return 0;
}
