/* The parameter table: every parameter of every handle kind, its name,
 * owner, type, inclusive range, default and access, in one place. Every
 * handle's set / get / reset, todre_param_get_bounds() and
 * todre_param_name() read it; no bound is written anywhere else. */
#define TODRE_EXPERIMENTAL_API 1 /* the table describes the experimental ones too */

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core.h"

struct param_desc {
    todre_param param;
    const char *name;
    enum todre_param_owner owner;
    todre_param_type type;
    int read_only;
    int min_open;        /* DOUBLE: the minimum itself is excluded ("(0, 1]") */
    size_t offset;       /* of the value in the owner's storage struct */
    int64_t int_min, int_max, int_default;
    double double_min, double_max, double_default;
};

#define P_INT(p, nm, own, st, field, lo, hi, def, ro)                                   \
    {p, nm, own, TODRE_PARAM_INT, ro, 0, offsetof(st, field), lo, hi, def, 0.0, 0.0, 0.0}
#define P_DBL(p, nm, own, st, field, lo, hi, def, open)                                 \
    {p, nm, own, TODRE_PARAM_DOUBLE, 0, open, offsetof(st, field), 0, 0, 0, lo, hi, def}

/* One owner per macro, so that #p names the parameter as written (the
 * experimental ones are macros themselves). */
#define CTX_INT(p, field, lo, hi, def) \
    P_INT(p, #p, TODRE_OWNER_CONTEXT, struct todre_backend_params, field, lo, hi, def, 0)
#define CTX_INT_RO(p, field, lo, hi) \
    P_INT(p, #p, TODRE_OWNER_CONTEXT, struct todre_backend_params, field, lo, hi, lo, 1)
#define SEL_INT(p, field, lo, hi, def) \
    P_INT(p, #p, TODRE_OWNER_SELECT, struct todre_select_params, field, lo, hi, def, 0)
#define SEL_DBL(p, field, lo, hi, def, open) \
    P_DBL(p, #p, TODRE_OWNER_SELECT, struct todre_select_params, field, lo, hi, def, open)
#define REL_INT(p, field, lo, hi, def, ro) \
    P_INT(p, #p, TODRE_OWNER_RELEVANCE, struct todre_relevance_params, field, lo, hi, def, ro)
#define REL_DBL(p, field, lo, hi, def) \
    P_DBL(p, #p, TODRE_OWNER_RELEVANCE, struct todre_relevance_params, field, lo, hi, def, 0)

static const struct param_desc params[] = {
    /* context */
    CTX_INT(TODRE_CONTEXT_WORKSPACE_LIMIT, workspace_limit, 0, INT64_MAX, (int64_t)256 << 20),
    CTX_INT(TODRE_CONTEXT_NUM_THREADS, num_threads, 0, 1024, 0),
    /* selection configuration */
    SEL_INT(TODRE_SELECT_OBJECTIVE, objective, TODRE_OBJECTIVE_MAX_SUM, TODRE_OBJECTIVE_CLS_TOPK,
            TODRE_OBJECTIVE_MAX_SUM),
    SEL_INT(TODRE_SELECT_PIVOT, pivot, TODRE_PIVOT_AUTO, TODRE_PIVOT_ISOLATED, TODRE_PIVOT_AUTO),
    SEL_INT(TODRE_SELECT_PIVOT_LO, pivot_lo, 0, INT64_MAX - 1, 0),
    SEL_INT(TODRE_SELECT_PIVOT_HI, pivot_hi, -1, INT64_MAX, -1),
    SEL_INT(TODRE_SELECT_KEEP, keep, 0, INT64_MAX, 0),
    SEL_DBL(TODRE_SELECT_RATIO, ratio, 0.0, 1.0, 0.10, 1), /* (0, 1] */
    SEL_INT(TODRE_SELECT_SEED, seed, INT64_MIN, INT64_MAX, 0),
    SEL_INT(TODRE_SELECT_ORDER, order, TODRE_ORDER_POSITION, TODRE_ORDER_BOTH,
            TODRE_ORDER_POSITION),
    SEL_INT(TODRE_SELECT_BUDGET, budget, TODRE_BUDGET_SET, TODRE_BUDGET_PER_GROUP,
            TODRE_BUDGET_SET),
    SEL_INT(TODRE_SELECT_GROUP_MIN, group_min, 1, INT64_MAX, 1),
    /* relevance handle */
    REL_DBL(TODRE_RELEVANCE_TAU, tau, 0.0, 1.0, 0.10),
    REL_INT(TODRE_RELEVANCE_SCHEDULE, schedule, TODRE_PROBE_LIST, TODRE_PROBE_UNTIL_DROP,
            TODRE_PROBE_LIST, 0),
    /* Read-only: fixed by todre_relevance_create(), whose arguments are
     * checked against these ranges; the "default" is the smallest value. */
    REL_INT(TODRE_RELEVANCE_NUM_LAYERS, num_layers, 1, (int64_t)1 << 20, 1, 1),
    REL_INT(TODRE_RELEVANCE_BATCH, batch, 1, (int64_t)1 << 20, 1, 1),
    /* experimental */
    CTX_INT(TODRE_CONTEXT_EXP_SELECT_STRATEGY, strategy, TODRE_STRATEGY_AUTO, TODRE_STRATEGY_ROWS,
            TODRE_STRATEGY_AUTO),
    /* written by the backend at each stage-1 call; the "default" is 0 */
    CTX_INT_RO(TODRE_CONTEXT_EXP_SELECT_ROWS_MADE, rows_made, 0, INT64_MAX),
};

#define NPARAMS (sizeof params / sizeof params[0])

static const struct param_desc *find(todre_param param)
{
    for (size_t i = 0; i < NPARAMS; i++)
        if (params[i].param == param) return &params[i];
    return NULL;
}

static const char *owner_noun(enum todre_param_owner owner)
{
    switch (owner) {
    case TODRE_OWNER_CONTEXT: return "context";
    case TODRE_OWNER_SELECT: return "selection configuration";
    case TODRE_OWNER_RELEVANCE: return "relevance";
    }
    return "?";
}

static const char *owner_prefix(enum todre_param_owner owner)
{
    switch (owner) {
    case TODRE_OWNER_CONTEXT: return "todre_context";
    case TODRE_OWNER_SELECT: return "todre_select_config";
    case TODRE_OWNER_RELEVANCE: return "todre_relevance";
    }
    return "?";
}

/* The parameter @p param of handle kind @p owner, used as @p type (set or
 * get: @p setting), or NULL after reporting why not. */
static const struct param_desc *lookup(const struct todre_context *ctx,
                                       enum todre_param_owner owner, todre_param param,
                                       todre_param_type type, int setting)
{
    const struct param_desc *p = find(param);
    if (!p) {
        todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "param: %d is not a libtodre parameter",
                   (int)param);
        return NULL;
    }
    if (p->owner != owner) {
        todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "param: %s is not a %s parameter", p->name,
                   owner_noun(owner));
        return NULL;
    }
    if (p->type != type) {
        const char *t = p->type == TODRE_PARAM_INT ? "int" : "double";
        todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "param: %s is %s %s parameter; use %s_%s_%s",
                   p->name, p->type == TODRE_PARAM_INT ? "an" : "a", t, owner_prefix(owner),
                   setting ? "set" : "get", t);
        return NULL;
    }
    if (setting && p->read_only) {
        todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "param: %s is read-only", p->name);
        return NULL;
    }
    return p;
}

static todre_status check_int(const struct todre_context *ctx, const struct param_desc *p,
                              const char *arg, int64_t value)
{
    if (value < p->int_min || value > p->int_max)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "%s: %lld is outside [%lld, %lld] for %s",
                          arg, (long long)value, (long long)p->int_min, (long long)p->int_max,
                          p->name);
    return TODRE_OK;
}

todre_status todre_param_set_int(const struct todre_context *ctx, enum todre_param_owner owner,
                                 void *store, todre_param param, int64_t value)
{
    const struct param_desc *p = lookup(ctx, owner, param, TODRE_PARAM_INT, 1);
    if (!p) return TODRE_ERR_INVALID_ARGUMENT;
    todre_status st = check_int(ctx, p, "value", value);
    if (st != TODRE_OK) return st;
    memcpy((char *)store + p->offset, &value, sizeof value);
    return TODRE_OK;
}

todre_status todre_param_get_int(const struct todre_context *ctx, enum todre_param_owner owner,
                                 const void *store, todre_param param, int64_t *value)
{
    const struct param_desc *p = lookup(ctx, owner, param, TODRE_PARAM_INT, 0);
    if (!p) return TODRE_ERR_INVALID_ARGUMENT;
    if (!value) return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "value: NULL");
    memcpy(value, (const char *)store + p->offset, sizeof *value);
    return TODRE_OK;
}

todre_status todre_param_set_double(const struct todre_context *ctx,
                                    enum todre_param_owner owner, void *store,
                                    todre_param param, double value)
{
    const struct param_desc *p = lookup(ctx, owner, param, TODRE_PARAM_DOUBLE, 1);
    if (!p) return TODRE_ERR_INVALID_ARGUMENT;
    if (isnan(value))
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "value: NaN is not a value of %s",
                          p->name);
    int below = p->min_open ? !(value > p->double_min) : !(value >= p->double_min);
    if (below || !(value <= p->double_max))
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "value: %g is outside %c%g, %g] for %s",
                          value, p->min_open ? '(' : '[', p->double_min, p->double_max, p->name);
    memcpy((char *)store + p->offset, &value, sizeof value);
    return TODRE_OK;
}

todre_status todre_param_get_double(const struct todre_context *ctx,
                                    enum todre_param_owner owner, const void *store,
                                    todre_param param, double *value)
{
    const struct param_desc *p = lookup(ctx, owner, param, TODRE_PARAM_DOUBLE, 0);
    if (!p) return TODRE_ERR_INVALID_ARGUMENT;
    if (!value) return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "value: NULL");
    memcpy(value, (const char *)store + p->offset, sizeof *value);
    return TODRE_OK;
}

void todre_param_defaults(enum todre_param_owner owner, void *store)
{
    for (size_t i = 0; i < NPARAMS; i++) {
        const struct param_desc *p = &params[i];
        if (p->owner != owner || p->read_only) continue;
        if (p->type == TODRE_PARAM_INT)
            memcpy((char *)store + p->offset, &p->int_default, sizeof p->int_default);
        else
            memcpy((char *)store + p->offset, &p->double_default, sizeof p->double_default);
    }
}

todre_status todre_param_check_int(const struct todre_context *ctx, todre_param param,
                                   const char *arg, int64_t value)
{
    const struct param_desc *p = find(param);
    if (!p || p->type != TODRE_PARAM_INT)
        return todre_fail(ctx, TODRE_ERR_INTERNAL, "%s: no integer parameter %d", arg, (int)param);
    return check_int(ctx, p, arg, value);
}

todre_status todre_param_get_bounds(todre_param param, todre_param_bounds *bounds)
{
    todre_clear_error(NULL);
    const struct param_desc *p = find(param);
    if (!p)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "param: %d is not a libtodre parameter", (int)param);
    todre_param_bounds b;
    memset(&b, 0, sizeof b);
    b.type = p->type;
    b.read_only = p->read_only;
    if (p->type == TODRE_PARAM_INT) {
        b.int_min = p->int_min;
        b.int_max = p->int_max;
        b.int_default = p->int_default;
    } else {
        /* Bounds are inclusive: an open minimum reports the next double. */
        b.double_min = p->min_open ? nextafter(p->double_min, INFINITY) : p->double_min;
        b.double_max = p->double_max;
        b.double_default = p->double_default;
    }
    return todre_fill_sized(bounds, &b, sizeof b, "bounds");
}

const char *todre_param_name(todre_param param)
{
    const struct param_desc *p = find(param);
    return p ? p->name : NULL;
}
