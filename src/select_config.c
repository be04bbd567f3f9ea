/* Stage-1 configuration handle: parameters, bounds, budget arithmetic. */
#include <math.h>
#include <stdlib.h>

#include "core.h"

#define DEFAULT_RATIO 0.10

struct bounds {
    int64_t lo, hi;
    const char *name;
};

static int param_bounds(todre_select_param param, struct bounds *b)
{
    switch (param) {
    case TODRE_SELECT_OBJECTIVE: *b = (struct bounds){0, 2, "objective"}; return 1;
    case TODRE_SELECT_PIVOT: *b = (struct bounds){0, 5, "pivot"}; return 1;
    case TODRE_SELECT_PIVOT_LO: *b = (struct bounds){0, INT64_MAX - 1, "pivot_lo"}; return 1;
    case TODRE_SELECT_PIVOT_HI: *b = (struct bounds){-1, INT64_MAX, "pivot_hi"}; return 1;
    case TODRE_SELECT_KEEP: *b = (struct bounds){0, INT64_MAX, "keep"}; return 1;
    case TODRE_SELECT_SEED: *b = (struct bounds){INT64_MIN, INT64_MAX, "seed"}; return 1;
    case TODRE_SELECT_ORDER: *b = (struct bounds){0, 2, "order"}; return 1;
    }
    return 0;
}

todre_status todre_select_config_create(todre_select_config **out)
{
    todre_clear_error(NULL);
    if (!out) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "out: NULL");
    struct todre_select_config *cfg = malloc(sizeof *cfg);
    *out = cfg;
    if (!cfg) return todre_fail(NULL, TODRE_ERR_OUT_OF_MEMORY, "config: out of memory");
    *cfg = (struct todre_select_config){
        .objective = TODRE_OBJECTIVE_MAX_SUM,
        .pivot = TODRE_PIVOT_AUTO,
        .pivot_lo = 0,
        .pivot_hi = -1,
        .keep = 0,
        .ratio = DEFAULT_RATIO,
        .seed = 0,
        .order = TODRE_ORDER_POSITION,
    };
    return TODRE_OK;
}

void todre_select_config_destroy(todre_select_config *cfg) { free(cfg); }

todre_status todre_select_param_bounds(todre_select_param param, int64_t *lo, int64_t *hi)
{
    todre_clear_error(NULL);
    struct bounds b;
    if (!param_bounds(param, &b))
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "param: unknown select parameter %d",
                          (int)param);
    if (!lo || !hi) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "%s: NULL", lo ? "hi" : "lo");
    *lo = b.lo;
    *hi = b.hi;
    return TODRE_OK;
}

todre_status todre_select_config_set(todre_select_config *cfg, todre_select_param param,
                                     int64_t value)
{
    todre_clear_error(NULL);
    if (!cfg) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    struct bounds b;
    if (!param_bounds(param, &b))
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "param: unknown select parameter %d",
                          (int)param);
    if (value < b.lo || value > b.hi || (param == TODRE_SELECT_PIVOT_HI && value == 0))
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "%s: value %lld is out of range",
                          b.name, (long long)value);
    switch (param) {
    case TODRE_SELECT_OBJECTIVE: cfg->objective = (todre_objective)value; break;
    case TODRE_SELECT_PIVOT: cfg->pivot = (todre_pivot)value; break;
    case TODRE_SELECT_PIVOT_LO: cfg->pivot_lo = value; break;
    case TODRE_SELECT_PIVOT_HI: cfg->pivot_hi = value; break;
    case TODRE_SELECT_KEEP: cfg->keep = value; break;
    case TODRE_SELECT_SEED: cfg->seed = value; break;
    case TODRE_SELECT_ORDER: cfg->order = (todre_order)value; break;
    }
    return TODRE_OK;
}

todre_status todre_select_config_get(const todre_select_config *cfg, todre_select_param param,
                                     int64_t *value)
{
    todre_clear_error(NULL);
    if (!cfg) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    if (!value) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "value: NULL");
    switch (param) {
    case TODRE_SELECT_OBJECTIVE: *value = cfg->objective; return TODRE_OK;
    case TODRE_SELECT_PIVOT: *value = cfg->pivot; return TODRE_OK;
    case TODRE_SELECT_PIVOT_LO: *value = cfg->pivot_lo; return TODRE_OK;
    case TODRE_SELECT_PIVOT_HI: *value = cfg->pivot_hi; return TODRE_OK;
    case TODRE_SELECT_KEEP: *value = cfg->keep; return TODRE_OK;
    case TODRE_SELECT_SEED: *value = cfg->seed; return TODRE_OK;
    case TODRE_SELECT_ORDER: *value = cfg->order; return TODRE_OK;
    }
    return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "param: unknown select parameter %d",
                      (int)param);
}

todre_status todre_select_config_set_ratio(todre_select_config *cfg, double ratio)
{
    todre_clear_error(NULL);
    if (!cfg) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    if (!(ratio > 0.0 && ratio <= 1.0)) /* also rejects NaN */
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ratio: %g is outside (0, 1]", ratio);
    cfg->ratio = ratio;
    cfg->keep = 0;
    return TODRE_OK;
}

todre_status todre_select_config_get_ratio(const todre_select_config *cfg, double *ratio)
{
    todre_clear_error(NULL);
    if (!cfg) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    if (!ratio) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "ratio: NULL");
    *ratio = cfg->ratio;
    return TODRE_OK;
}

/* k for n rows; shared by the public query and the selection calls. */
todre_status todre_resolve_keep(struct todre_context *ctx, const struct todre_select_config *cfg,
                                int64_t n, int64_t *k)
{
    if (n < 1)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "n: %lld tokens; need at least 1",
                          (long long)n);
    if (cfg->keep > 0) {
        if (cfg->keep > n)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "keep: k = %lld exceeds the %lld tokens", (long long)cfg->keep,
                              (long long)n);
        *k = cfg->keep;
        return TODRE_OK;
    }
    double kk = floor(cfg->ratio * (double)n + 0.5);
    if (kk < 1.0) kk = 1.0;
    if (kk > (double)n) kk = (double)n;
    *k = (int64_t)kk;
    return TODRE_OK;
}

todre_status todre_select_keep_count(const todre_select_config *cfg, int64_t n, int64_t *k)
{
    todre_clear_error(NULL);
    if (!cfg) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    if (!k) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "k: NULL");
    return todre_resolve_keep(NULL, cfg, n, k);
}
