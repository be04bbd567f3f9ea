/* The parameter model, for every todre_param of todre.h (tt_params, written
 * out from the header in tests/common/todre_test.c): names, bounds (type,
 * range, default, read-only), defaults on a fresh handle, both ends of every
 * range accepted and one step beyond rejected (value unchanged, message
 * naming the parameter), the wrong type's and another handle kind's
 * functions rejected, unknown values rejected, the ratio/keep coupling,
 * reset, and the struct_size rule of todre_param_bounds. */
#include <float.h>
#include <math.h>
#include <string.h>

#define TODRE_EXPERIMENTAL_API /* describe TODRE_CONTEXT_EXP_SELECT_STRATEGY too */
#include "todre_test.h"

#define LAYERS 8
#define BATCH 3

/* What the header documents for each parameter. */
struct expect {
    todre_param param;
    todre_param_type type;
    int read_only;
    int64_t min, max, def;      /* INT */
    double dmin, dmax, ddef;    /* DOUBLE (dmin checked as a range, see below) */
};

static const struct expect expects[] = {
    {TODRE_CONTEXT_WORKSPACE_LIMIT, TODRE_PARAM_INT, 0, 0, INT64_MAX, 268435456, 0, 0, 0},
    {TODRE_CONTEXT_NUM_THREADS, TODRE_PARAM_INT, 0, 0, 1024, 0, 0, 0, 0},
    {TODRE_SELECT_OBJECTIVE, TODRE_PARAM_INT, 0, 0, 2, TODRE_OBJECTIVE_MAX_SUM, 0, 0, 0},
    {TODRE_SELECT_PIVOT, TODRE_PARAM_INT, 0, 0, 5, TODRE_PIVOT_AUTO, 0, 0, 0},
    {TODRE_SELECT_PIVOT_LO, TODRE_PARAM_INT, 0, 0, INT64_MAX - 1, 0, 0, 0, 0},
    {TODRE_SELECT_PIVOT_HI, TODRE_PARAM_INT, 0, -1, INT64_MAX, -1, 0, 0, 0},
    {TODRE_SELECT_KEEP, TODRE_PARAM_INT, 0, 0, INT64_MAX, 0, 0, 0, 0},
    /* (0, 1]: the inclusive minimum is the smallest accepted positive value */
    {TODRE_SELECT_RATIO, TODRE_PARAM_DOUBLE, 0, 0, 0, 0, 0.0, 1.0, 0.10},
    {TODRE_SELECT_SEED, TODRE_PARAM_INT, 0, INT64_MIN, INT64_MAX, 0, 0, 0, 0},
    {TODRE_SELECT_ORDER, TODRE_PARAM_INT, 0, 0, 2, TODRE_ORDER_POSITION, 0, 0, 0},
    {TODRE_SELECT_BUDGET, TODRE_PARAM_INT, 0, 0, 2, TODRE_BUDGET_SET, 0, 0, 0},
    {TODRE_SELECT_GROUP_MIN, TODRE_PARAM_INT, 0, 1, INT64_MAX, 1, 0, 0, 0},
    {TODRE_RELEVANCE_TAU, TODRE_PARAM_DOUBLE, 0, 0, 0, 0, 0.0, 1.0, 0.10},
    {TODRE_RELEVANCE_SCHEDULE, TODRE_PARAM_INT, 0, 0, 1, TODRE_PROBE_LIST, 0, 0, 0},
    {TODRE_RELEVANCE_NUM_LAYERS, TODRE_PARAM_INT, 1, 0, 0, 0, 0, 0, 0},
    {TODRE_RELEVANCE_BATCH, TODRE_PARAM_INT, 1, 0, 0, 0, 0, 0, 0},
    {TODRE_CONTEXT_EXP_SELECT_STRATEGY, TODRE_PARAM_INT, 0, 0, 3, 0, 0, 0, 0},
    {TODRE_CONTEXT_EXP_SELECT_ROWS_MADE, TODRE_PARAM_INT, 1, 0, 0, 0, 0, 0, 0},
};
#define NEXPECT (sizeof expects / sizeof expects[0])

static const struct expect *expect_of(todre_param p)
{
    for (size_t i = 0; i < NEXPECT; i++)
        if (expects[i].param == p) return &expects[i];
    fail_msg("no expectation for parameter %d", (int)p);
    return NULL;
}

static todre_param_bounds bounds_of(todre_param p)
{
    todre_param_bounds b;
    memset(&b, 0x5a, sizeof b);
    b.struct_size = sizeof b;
    tt_assert_ok(todre_param_get_bounds(p, &b));
    return b;
}

/* ---- one set of handles, used generically ------------------------------------- */

struct handles {
    todre_context *ctx;
    todre_select_config *cfg;
    todre_relevance *rel;
};

static void open_handles(struct handles *h)
{
    h->ctx = tt_cpu_context();
    tt_assert_ok(todre_select_config_create(&h->cfg));
    tt_assert_ok(todre_relevance_create(LAYERS, BATCH, &h->rel));
}

static void close_handles(struct handles *h)
{
    todre_context_destroy(h->ctx);
    todre_select_config_destroy(h->cfg);
    todre_relevance_destroy(h->rel);
}

static todre_status set_int(struct handles *h, enum tt_handle_kind kind, todre_param p, int64_t v)
{
    switch (kind) {
    case TT_KIND_CONTEXT: return todre_context_set_int(h->ctx, p, v);
    case TT_KIND_SELECT: return todre_select_config_set_int(h->cfg, p, v);
    case TT_KIND_RELEVANCE: return todre_relevance_set_int(h->rel, p, v);
    }
    return TODRE_ERR_INTERNAL;
}

static todre_status get_int(struct handles *h, enum tt_handle_kind kind, todre_param p, int64_t *v)
{
    switch (kind) {
    case TT_KIND_CONTEXT: return todre_context_get_int(h->ctx, p, v);
    case TT_KIND_SELECT: return todre_select_config_get_int(h->cfg, p, v);
    case TT_KIND_RELEVANCE: return todre_relevance_get_int(h->rel, p, v);
    }
    return TODRE_ERR_INTERNAL;
}

static todre_status set_double(struct handles *h, enum tt_handle_kind kind, todre_param p, double v)
{
    switch (kind) {
    case TT_KIND_CONTEXT: return todre_context_set_double(h->ctx, p, v);
    case TT_KIND_SELECT: return todre_select_config_set_double(h->cfg, p, v);
    case TT_KIND_RELEVANCE: return todre_relevance_set_double(h->rel, p, v);
    }
    return TODRE_ERR_INTERNAL;
}

static todre_status get_double(struct handles *h, enum tt_handle_kind kind, todre_param p, double *v)
{
    switch (kind) {
    case TT_KIND_CONTEXT: return todre_context_get_double(h->ctx, p, v);
    case TT_KIND_SELECT: return todre_select_config_get_double(h->cfg, p, v);
    case TT_KIND_RELEVANCE: return todre_relevance_get_double(h->rel, p, v);
    }
    return TODRE_ERR_INTERNAL;
}

static todre_status reset(struct handles *h, enum tt_handle_kind kind, todre_reset what)
{
    switch (kind) {
    case TT_KIND_CONTEXT: return todre_context_reset(h->ctx, what);
    case TT_KIND_SELECT: return todre_select_config_reset(h->cfg, what);
    case TT_KIND_RELEVANCE: return todre_relevance_reset(h->rel, what);
    }
    return TODRE_ERR_INTERNAL;
}

/* The context of a handle kind for tt_assert_fails (only contexts have one). */
static const todre_context *msg_ctx(const struct handles *h, enum tt_handle_kind kind)
{
    return kind == TT_KIND_CONTEXT ? h->ctx : NULL;
}

static int64_t read_int(struct handles *h, enum tt_handle_kind kind, todre_param p)
{
    int64_t v = -777;
    tt_assert_ok(get_int(h, kind, p, &v));
    return v;
}

static double read_double(struct handles *h, enum tt_handle_kind kind, todre_param p)
{
    double v = -777.0;
    tt_assert_ok(get_double(h, kind, p, &v));
    return v;
}

/* ---- tests ---------------------------------------------------------------------- */

/* Every parameter has its enumerator's name; values are pinned; the list
 * covers the three ranges; non-parameters have no name. */
static void test_names(void **state)
{
    (void)state;
    assert_int_equal(tt_nparams, NEXPECT);
    for (size_t i = 0; i < tt_nparams; i++) {
        const char *name = todre_param_name(tt_params[i].param);
        if (!name) fail_msg("todre_param_name(%d) is NULL", (int)tt_params[i].param);
        assert_string_equal(name, tt_params[i].name);
        int v = (int)tt_params[i].param;
        int lo = tt_params[i].kind == TT_KIND_CONTEXT ? 100 : tt_params[i].kind == TT_KIND_SELECT ? 200 : 300;
        assert_true((v >= lo && v < lo + 100) || v >= 1000);
    }
    static const struct { todre_param p; int v; } pinned[] = {
        {TODRE_CONTEXT_WORKSPACE_LIMIT, 100}, {TODRE_CONTEXT_NUM_THREADS, 101},
        {TODRE_SELECT_OBJECTIVE, 200}, {TODRE_SELECT_PIVOT, 201}, {TODRE_SELECT_PIVOT_LO, 202},
        {TODRE_SELECT_PIVOT_HI, 203}, {TODRE_SELECT_KEEP, 204}, {TODRE_SELECT_RATIO, 205},
        {TODRE_SELECT_SEED, 206}, {TODRE_SELECT_ORDER, 207}, {TODRE_SELECT_BUDGET, 208},
        {TODRE_SELECT_GROUP_MIN, 209}, {TODRE_RELEVANCE_TAU, 300},
        {TODRE_RELEVANCE_SCHEDULE, 301}, {TODRE_RELEVANCE_NUM_LAYERS, 302},
        {TODRE_RELEVANCE_BATCH, 303}, {TODRE_CONTEXT_EXP_SELECT_STRATEGY, 1000},
        {TODRE_CONTEXT_EXP_SELECT_ROWS_MADE, 1001},
    };
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++)
        assert_int_equal((int)pinned[i].p, pinned[i].v);
    static const int unknown[] = {-1, 0, 1, 99, 102, 199, 210, 250, 299, 304, 399, 400, 999, 1002, 100000};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        assert_null(todre_param_name((todre_param)unknown[i]));
    /* the list is complete: the library knows no parameter it lacks */
    for (int v = -16; v < 2000; v++) {
        const char *name = todre_param_name((todre_param)v);
        int listed = 0;
        for (size_t i = 0; i < tt_nparams; i++) listed |= (int)tt_params[i].param == v;
        if (name && !listed) fail_msg("parameter %d (%s) is missing from tt_params", v, name);
        if (!name && listed) fail_msg("parameter %d has no name", v);
    }
}

/* Bounds of every parameter: what the header documents. */
static void test_bounds(void **state)
{
    (void)state;
    for (size_t i = 0; i < tt_nparams; i++) {
        const struct expect *e = expect_of(tt_params[i].param);
        todre_param_bounds b = bounds_of(e->param);
        const char *name = tt_params[i].name;
        assert_int_equal(b.struct_size, sizeof b);
        if (b.type != e->type || b.read_only != e->read_only)
            fail_msg("%s: type %d read_only %d, want %d %d", name, (int)b.type, (int)b.read_only,
                     (int)e->type, e->read_only);
        if (e->type == TODRE_PARAM_INT) {
            /* only the pair of the parameter's type is meaningful: the other is 0 */
            assert_true(b.double_min == 0 && b.double_max == 0 && b.double_default == 0);
            if (e->read_only) {
                assert_true(b.int_min <= b.int_max); /* the range the handle's value lies in */
                continue;
            }
            if (b.int_min != e->min || b.int_max != e->max || b.int_default != e->def)
                fail_msg("%s: [%lld, %lld] default %lld, want [%lld, %lld] default %lld", name,
                         (long long)b.int_min, (long long)b.int_max, (long long)b.int_default,
                         (long long)e->min, (long long)e->max, (long long)e->def);
        } else {
            assert_true(b.int_min == 0 && b.int_max == 0 && b.int_default == 0);
            if (e->param == TODRE_SELECT_RATIO) {
                /* (0, 1]: an inclusive minimum above 0 that still lets a
                 * 1e-300 ratio through (it keeps 1 token) */
                if (!(b.double_min > 0.0 && b.double_min <= 1e-300))
                    fail_msg("%s: minimum %g, want in (0, 1e-300]", name, b.double_min);
            } else if (b.double_min != e->dmin) {
                fail_msg("%s: minimum %g, want %g", name, b.double_min, e->dmin);
            }
            if (b.double_max != e->dmax || b.double_default != e->ddef)
                fail_msg("%s: maximum %g default %g, want %g %g", name, b.double_max,
                         b.double_default, e->dmax, e->ddef);
        }
    }
}

/* A fresh handle reads every default; reading the read-only relevance
 * parameters gives the creation values. */
static void test_fresh_defaults(void **state)
{
    (void)state;
    struct handles h;
    open_handles(&h);
    for (size_t i = 0; i < tt_nparams; i++) {
        const struct tt_param_info *p = &tt_params[i];
        todre_param_bounds b = bounds_of(p->param);
        if (b.read_only) {
            int64_t v = read_int(&h, p->kind, p->param);
            assert_true(v >= b.int_min && v <= b.int_max);
            continue;
        }
        if (b.type == TODRE_PARAM_INT) {
            int64_t v = read_int(&h, p->kind, p->param);
            if (v != b.int_default)
                fail_msg("%s: fresh value %lld, default %lld", p->name, (long long)v,
                         (long long)b.int_default);
        } else {
            double v = read_double(&h, p->kind, p->param);
            if (v != b.double_default) fail_msg("%s: fresh value %g, default %g", p->name, v, b.double_default);
        }
    }
    assert_int_equal(read_int(&h, TT_KIND_RELEVANCE, TODRE_RELEVANCE_NUM_LAYERS), LAYERS);
    assert_int_equal(read_int(&h, TT_KIND_RELEVANCE, TODRE_RELEVANCE_BATCH), BATCH);
    close_handles(&h);
}

/* Both ends of every range are accepted and read back; one step beyond
 * (when representable) is rejected, names the parameter and leaves the
 * value unchanged. Read-only parameters reject every value. */
static void test_ranges(void **state)
{
    (void)state;
    struct handles h;
    open_handles(&h);
    for (size_t i = 0; i < tt_nparams; i++) {
        const struct tt_param_info *p = &tt_params[i];
        todre_param_bounds b = bounds_of(p->param);
        const todre_context *mc = msg_ctx(&h, p->kind);
        if (b.read_only) {
            int64_t before = read_int(&h, p->kind, p->param);
            const int64_t tries[] = {before, before + 1, 0, -1};
            for (size_t t = 0; t < 4; t++)
                tt_assert_fails_param(mc, set_int(&h, p->kind, p->param, tries[t]),
                                      TODRE_ERR_INVALID_ARGUMENT, p->param);
            assert_int_equal(read_int(&h, p->kind, p->param), before);
            continue;
        }
        if (b.type == TODRE_PARAM_INT) {
            const int64_t ends[2] = {b.int_min, b.int_max};
            for (int e = 0; e < 2; e++) {
                tt_assert_ok(set_int(&h, p->kind, p->param, ends[e]));
                assert_true(read_int(&h, p->kind, p->param) == ends[e]);
            }
            /* the value is now int_max */
            if (b.int_min > INT64_MIN)
                tt_assert_fails_param(mc, set_int(&h, p->kind, p->param, b.int_min - 1),
                                      TODRE_ERR_INVALID_ARGUMENT, p->param);
            if (b.int_max < INT64_MAX)
                tt_assert_fails_param(mc, set_int(&h, p->kind, p->param, b.int_max + 1),
                                      TODRE_ERR_INVALID_ARGUMENT, p->param);
            assert_true(read_int(&h, p->kind, p->param) == b.int_max);
            tt_assert_ok(set_int(&h, p->kind, p->param, b.int_default));
        } else {
            const double ends[2] = {b.double_min, b.double_max};
            for (int e = 0; e < 2; e++) {
                tt_assert_ok(set_double(&h, p->kind, p->param, ends[e]));
                assert_true(read_double(&h, p->kind, p->param) == ends[e]);
            }
            const double beyond[] = {nextafter(b.double_min, -INFINITY), nextafter(b.double_max, INFINITY),
                                     NAN, INFINITY, -INFINITY, b.double_min - 1.0, b.double_max + 1.0};
            for (size_t t = 0; t < sizeof beyond / sizeof beyond[0]; t++)
                tt_assert_fails_param(mc, set_double(&h, p->kind, p->param, beyond[t]),
                                      TODRE_ERR_INVALID_ARGUMENT, p->param);
            assert_true(read_double(&h, p->kind, p->param) == b.double_max);
            tt_assert_ok(set_double(&h, p->kind, p->param, b.double_default));
        }
    }
    close_handles(&h);
}

/* An integer parameter through the double functions and the reverse: an
 * invalid argument naming the parameter. */
static void test_wrong_type(void **state)
{
    (void)state;
    struct handles h;
    open_handles(&h);
    for (size_t i = 0; i < tt_nparams; i++) {
        const struct tt_param_info *p = &tt_params[i];
        todre_param_bounds b = bounds_of(p->param);
        const todre_context *mc = msg_ctx(&h, p->kind);
        int64_t iv = 0;
        double dv = 0;
        if (b.type == TODRE_PARAM_INT) {
            int64_t before = read_int(&h, p->kind, p->param);
            tt_assert_fails_param(mc, set_double(&h, p->kind, p->param, (double)b.int_default),
                                  TODRE_ERR_INVALID_ARGUMENT, p->param);
            tt_assert_fails_param(mc, get_double(&h, p->kind, p->param, &dv),
                                  TODRE_ERR_INVALID_ARGUMENT, p->param);
            assert_true(read_int(&h, p->kind, p->param) == before);
        } else {
            double before = read_double(&h, p->kind, p->param);
            tt_assert_fails_param(mc, set_int(&h, p->kind, p->param, 1),
                                  TODRE_ERR_INVALID_ARGUMENT, p->param);
            tt_assert_fails_param(mc, get_int(&h, p->kind, p->param, &iv),
                                  TODRE_ERR_INVALID_ARGUMENT, p->param);
            assert_true(read_double(&h, p->kind, p->param) == before);
        }
    }
    close_handles(&h);
}

/* A parameter of one handle kind through another kind's functions: an
 * invalid argument naming the parameter. */
static void test_wrong_handle(void **state)
{
    (void)state;
    struct handles h;
    open_handles(&h);
    for (size_t i = 0; i < tt_nparams; i++) {
        const struct tt_param_info *p = &tt_params[i];
        todre_param_bounds b = bounds_of(p->param);
        for (int kind = 0; kind < 3; kind++) {
            if (kind == (int)p->kind) continue;
            enum tt_handle_kind k = (enum tt_handle_kind)kind;
            const todre_context *mc = msg_ctx(&h, k);
            int64_t iv;
            double dv;
            if (b.type == TODRE_PARAM_INT) {
                tt_assert_fails_param(mc, set_int(&h, k, p->param, b.int_default),
                                      TODRE_ERR_INVALID_ARGUMENT, p->param);
                tt_assert_fails_param(mc, get_int(&h, k, p->param, &iv), TODRE_ERR_INVALID_ARGUMENT,
                                      p->param);
            } else {
                tt_assert_fails_param(mc, set_double(&h, k, p->param, b.double_default),
                                      TODRE_ERR_INVALID_ARGUMENT, p->param);
                tt_assert_fails_param(mc, get_double(&h, k, p->param, &dv),
                                      TODRE_ERR_INVALID_ARGUMENT, p->param);
            }
        }
    }
    close_handles(&h);
}

/* Values that are no parameter: every set/get of every kind and
 * todre_param_get_bounds reject them naming "param". */
static void test_unknown(void **state)
{
    (void)state;
    struct handles h;
    open_handles(&h);
    static const int unknown[] = {-1, 0, 99, 102, 199, 210, 250, 304, 999, 1002, 100000};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        todre_param p = (todre_param)unknown[i];
        for (int kind = 0; kind < 3; kind++) {
            enum tt_handle_kind k = (enum tt_handle_kind)kind;
            int64_t iv;
            double dv;
            tt_assert_fails(msg_ctx(&h, k), set_int(&h, k, p, 0), TODRE_ERR_INVALID_ARGUMENT, "param");
            tt_assert_fails(msg_ctx(&h, k), get_int(&h, k, p, &iv), TODRE_ERR_INVALID_ARGUMENT, "param");
            tt_assert_fails(msg_ctx(&h, k), set_double(&h, k, p, 0.5), TODRE_ERR_INVALID_ARGUMENT, "param");
            tt_assert_fails(msg_ctx(&h, k), get_double(&h, k, p, &dv), TODRE_ERR_INVALID_ARGUMENT, "param");
        }
        todre_param_bounds b;
        memset(&b, 0, sizeof b);
        b.struct_size = sizeof b;
        tt_assert_fails(NULL, todre_param_get_bounds(p, &b), TODRE_ERR_INVALID_ARGUMENT, "param");
    }
    close_handles(&h);
}

/* Setting the ratio sets KEEP back to 0 (the ratio budget); setting KEEP
 * leaves the ratio. */
static void test_ratio_resets_keep(void **state)
{
    (void)state;
    todre_select_config *cfg = NULL;
    tt_assert_ok(todre_select_config_create(&cfg));
    tt_cfg_set(cfg, TODRE_SELECT_KEEP, 9);
    double r = 0;
    tt_assert_ok(todre_select_config_get_double(cfg, TODRE_SELECT_RATIO, &r));
    assert_true(r == 0.10);
    tt_assert_ok(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 0.5));
    assert_int_equal(tt_cfg_get(cfg, TODRE_SELECT_KEEP), 0);
    int64_t k = -1;
    tt_assert_ok(todre_select_keep_count(cfg, 10, &k));
    assert_int_equal(k, 5);
    tt_cfg_set(cfg, TODRE_SELECT_KEEP, 2);
    tt_assert_ok(todre_select_keep_count(cfg, 10, &k));
    assert_int_equal(k, 2);
    tt_assert_ok(todre_select_config_get_double(cfg, TODRE_SELECT_RATIO, &r));
    assert_true(r == 0.5);
    todre_select_config_destroy(cfg);
}

/* Set every writable parameter to a non-default valid value. */
static void change_all(struct handles *h)
{
    for (size_t i = 0; i < tt_nparams; i++) {
        const struct tt_param_info *p = &tt_params[i];
        todre_param_bounds b = bounds_of(p->param);
        if (b.read_only) continue;
        if (b.type == TODRE_PARAM_INT) {
            int64_t v = b.int_default == b.int_max ? b.int_default - 1 : b.int_default + 1;
            if (p->param == TODRE_SELECT_PIVOT_HI) v = 5; /* 0 is an empty range */
            tt_assert_ok(set_int(h, p->kind, p->param, v));
        } else {
            tt_assert_ok(set_double(h, p->kind, p->param, 0.5 * (b.double_default + b.double_max)));
        }
    }
    tt_cfg_set(h->cfg, TODRE_SELECT_KEEP, 1); /* setting the ratio set it back to 0 */
}

static int all_default(struct handles *h, enum tt_handle_kind kind)
{
    for (size_t i = 0; i < tt_nparams; i++) {
        const struct tt_param_info *p = &tt_params[i];
        todre_param_bounds b = bounds_of(p->param);
        if (b.read_only || p->kind != kind) continue;
        if (b.type == TODRE_PARAM_INT ? read_int(h, kind, p->param) != b.int_default
                                      : read_double(h, kind, p->param) != b.double_default)
            return 0;
    }
    return 1;
}

static int none_default(struct handles *h, enum tt_handle_kind kind)
{
    for (size_t i = 0; i < tt_nparams; i++) {
        const struct tt_param_info *p = &tt_params[i];
        todre_param_bounds b = bounds_of(p->param);
        if (b.read_only || p->kind != kind) continue;
        if (b.type == TODRE_PARAM_INT ? read_int(h, kind, p->param) == b.int_default
                                      : read_double(h, kind, p->param) == b.double_default)
            return 0;
    }
    return 1;
}

/* reset(STATE) keeps every parameter; reset(PARAMS) and reset(ALL) restore
 * every default (and the default probe layer list); read-only parameters
 * keep their creation values; other values of `what` are rejected. */
static void test_reset(void **state)
{
    (void)state;
    struct handles h;
    open_handles(&h);
    int64_t layers[2] = {1, 2}, got[2] = {-1, -1}, count = -1;
    tt_array t;
    for (int kind = 0; kind < 3; kind++) {
        enum tt_handle_kind k = (enum tt_handle_kind)kind;
        change_all(&h);
        tt_assert_ok(todre_relevance_set_probe_layers(h.rel, tt_array1(&t, layers, TODRE_DTYPE_I64, 2)));
        assert_true(none_default(&h, k));
        tt_assert_ok(reset(&h, k, TODRE_RESET_STATE));
        assert_true(none_default(&h, k));
        tt_assert_ok(reset(&h, k, kind == 1 ? TODRE_RESET_ALL : TODRE_RESET_PARAMS));
        assert_true(all_default(&h, k));
        tt_assert_fails(msg_ctx(&h, k), reset(&h, k, (todre_reset)0), TODRE_ERR_INVALID_ARGUMENT, "what");
        tt_assert_fails(msg_ctx(&h, k), reset(&h, k, (todre_reset)4), TODRE_ERR_INVALID_ARGUMENT, "what");
        tt_assert_fails(msg_ctx(&h, k), reset(&h, k, (todre_reset)-1), TODRE_ERR_INVALID_ARGUMENT, "what");
    }
    /* the relevance handle's PARAMS reset restored the default probe list */
    tt_assert_ok(todre_relevance_get_probe_layers(h.rel, tt_array1(&t, got, TODRE_DTYPE_I64, 2), &count));
    assert_int_equal(count, 1);
    assert_int_equal(got[0], 7 * LAYERS / 8);
    assert_int_equal(read_int(&h, TT_KIND_RELEVANCE, TODRE_RELEVANCE_NUM_LAYERS), LAYERS);
    assert_int_equal(read_int(&h, TT_KIND_RELEVANCE, TODRE_RELEVANCE_BATCH), BATCH);
    tt_assert_ok(todre_relevance_reset(h.rel, TODRE_RESET_ALL));
    assert_int_equal(read_int(&h, TT_KIND_RELEVANCE, TODRE_RELEVANCE_NUM_LAYERS), LAYERS);
    close_handles(&h);
}

/* reset(STATE) of a relevance handle forgets observations but keeps the
 * parameters and the token types; reset(PARAMS) keeps the observations. */
static void test_reset_relevance_state(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(1, 1, &rel));
    tt_assert_ok(todre_relevance_set_layout(rel, 1, 2, 1));
    tt_assert_ok(todre_relevance_set_double(rel, TODRE_RELEVANCE_TAU, 0.75));
    float attn[16] = {0};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j <= i; j++) attn[i * 4 + j] = 1.0f / (float)(i + 1);
    tt_array a;
    const DLTensor *at = tt_array3(&a, attn, TODRE_DTYPE_F32, 1, 4, 4);
    tt_assert_ok(todre_relevance_observe_probs(ctx, rel, 0, at, NULL));
    double x, y, tau;
    tt_assert_ok(todre_relevance_ratios(rel, 0, 0, &x, &y));
    tt_assert_ok(todre_relevance_reset(rel, TODRE_RESET_PARAMS)); /* observations kept */
    tt_assert_ok(todre_relevance_ratios(rel, 0, 0, &x, &y));
    tt_assert_ok(todre_relevance_get_double(rel, TODRE_RELEVANCE_TAU, &tau));
    assert_true(tau == 0.10);
    tt_assert_ok(todre_relevance_set_double(rel, TODRE_RELEVANCE_TAU, 0.75));
    tt_assert_ok(todre_relevance_reset(rel, TODRE_RESET_STATE));
    tt_assert_fails(NULL, todre_relevance_ratios(rel, 0, 0, &x, &y), TODRE_ERR_STATE, "layer");
    tt_assert_ok(todre_relevance_get_double(rel, TODRE_RELEVANCE_TAU, &tau));
    assert_true(tau == 0.75);
    int64_t count = -1;
    tt_assert_ok(todre_relevance_keep_positions(rel, 0, NULL, &count)); /* types kept */
    assert_int_equal(count, 2);
    tt_assert_ok(todre_relevance_observe_probs(ctx, rel, 0, at, NULL));
    todre_relevance_destroy(rel);
    todre_context_destroy(ctx);
}

/* todre_param_get_bounds and struct_size: a size below the 1.0 struct is
 * rejected (nothing written); a larger one (a caller built against a later
 * 1.x header) is filled up to the 1.0 size only; NULL is rejected. */
static void test_struct_size(void **state)
{
    (void)state;
    todre_param_bounds b;
    const size_t small[] = {0, 1, sizeof(size_t), offsetof(todre_param_bounds, double_default),
                            sizeof b - 1};
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
        memset(&b, 0x5a, sizeof b);
        b.struct_size = small[i];
        tt_assert_fails(NULL, todre_param_get_bounds(TODRE_SELECT_KEEP, &b), TODRE_ERR_INVALID_ARGUMENT,
                        "struct_size");
        assert_true(b.struct_size == small[i]);
        assert_int_equal(b.int_min, 0x5a5a5a5a5a5a5a5all);
    }
    struct {
        todre_param_bounds b;
        unsigned char tail[32];
    } big;
    memset(&big, 0x5a, sizeof big);
    big.b.struct_size = sizeof big;
    tt_assert_ok(todre_param_get_bounds(TODRE_SELECT_KEEP, &big.b));
    assert_int_equal(big.b.int_max, INT64_MAX);
    for (size_t i = 0; i < sizeof big.tail; i++) assert_int_equal(big.tail[i], 0x5a);
    tt_assert_fails(NULL, todre_param_get_bounds(TODRE_SELECT_KEEP, NULL), TODRE_ERR_INVALID_ARGUMENT,
                    "bounds");
}

/* Out-pointers and handles of the typed functions. */
static void test_null_arguments(void **state)
{
    (void)state;
    struct handles h;
    open_handles(&h);
    double dv;
    int64_t iv;
    tt_assert_fails(h.ctx, todre_context_get_int(h.ctx, TODRE_CONTEXT_NUM_THREADS, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "value");
    tt_assert_fails(NULL, todre_relevance_get_double(h.rel, TODRE_RELEVANCE_TAU, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "value");
    tt_assert_fails(NULL, todre_select_config_get_double(h.cfg, TODRE_SELECT_RATIO, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "value");
    tt_assert_fails(NULL, todre_relevance_get_int(h.rel, TODRE_RELEVANCE_BATCH, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "value");
    tt_assert_fails(NULL, todre_context_set_double(NULL, TODRE_CONTEXT_NUM_THREADS, 1),
                    TODRE_ERR_INVALID_ARGUMENT, "ctx");
    tt_assert_fails(NULL, todre_context_get_double(NULL, TODRE_CONTEXT_NUM_THREADS, &dv),
                    TODRE_ERR_INVALID_ARGUMENT, "ctx");
    tt_assert_fails(NULL, todre_context_reset(NULL, TODRE_RESET_ALL), TODRE_ERR_INVALID_ARGUMENT, "ctx");
    tt_assert_fails(NULL, todre_relevance_get_int(NULL, TODRE_RELEVANCE_BATCH, &iv),
                    TODRE_ERR_INVALID_ARGUMENT, "rel");
    tt_assert_fails(NULL, todre_relevance_set_int(NULL, TODRE_RELEVANCE_SCHEDULE, 0),
                    TODRE_ERR_INVALID_ARGUMENT, "rel");
    close_handles(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_fresh_defaults),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_wrong_type),
        cmocka_unit_test(test_wrong_handle),
        cmocka_unit_test(test_unknown),
        cmocka_unit_test(test_ratio_resets_keep),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_reset_relevance_state),
        cmocka_unit_test(test_struct_size),
        cmocka_unit_test(test_null_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
