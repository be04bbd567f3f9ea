/* Stage-1 configuration handle: parameters (through the table in
 * src/params.c) and the budget arithmetic. */
#include <math.h>
#include <stdlib.h>

#include "core.h"

todre_status todre_select_config_create(todre_select_config **out)
{
    todre_clear_error(NULL);
    if (!out) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "out: NULL");
    struct todre_select_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg) return todre_fail(NULL, TODRE_ERR_OUT_OF_MEMORY, "config: out of memory");
    todre_param_defaults(TODRE_OWNER_SELECT, &cfg->p);
    *out = cfg;
    return TODRE_OK;
}

void todre_select_config_destroy(todre_select_config *cfg) { free(cfg); }

todre_status todre_select_config_set_int(todre_select_config *cfg, todre_param param,
                                         int64_t value)
{
    todre_clear_error(NULL);
    if (!cfg) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    return todre_param_set_int(NULL, TODRE_OWNER_SELECT, &cfg->p, param, value);
}

todre_status todre_select_config_get_int(const todre_select_config *cfg, todre_param param,
                                         int64_t *value)
{
    todre_clear_error(NULL);
    if (!cfg) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    return todre_param_get_int(NULL, TODRE_OWNER_SELECT, &cfg->p, param, value);
}

todre_status todre_select_config_set_double(todre_select_config *cfg, todre_param param,
                                            double value)
{
    todre_clear_error(NULL);
    if (!cfg) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    todre_status st = todre_param_set_double(NULL, TODRE_OWNER_SELECT, &cfg->p, param, value);
    /* Setting the ratio selects the ratio budget (header: KEEP becomes 0). */
    if (st == TODRE_OK && param == TODRE_SELECT_RATIO) cfg->p.keep = 0;
    return st;
}

todre_status todre_select_config_get_double(const todre_select_config *cfg, todre_param param,
                                            double *value)
{
    todre_clear_error(NULL);
    if (!cfg) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    return todre_param_get_double(NULL, TODRE_OWNER_SELECT, &cfg->p, param, value);
}

todre_status todre_select_config_reset(todre_select_config *cfg, todre_reset what)
{
    todre_clear_error(NULL);
    if (!cfg) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    if (what != TODRE_RESET_STATE && what != TODRE_RESET_PARAMS && what != TODRE_RESET_ALL)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "what: %d is not a todre_reset value (1 STATE, 2 PARAMS, 3 ALL)",
                          (int)what);
    /* A configuration has no state: STATE alone is a no-op. */
    if (what & TODRE_RESET_PARAMS) todre_param_defaults(TODRE_OWNER_SELECT, &cfg->p);
    return TODRE_OK;
}

/* k for n rows; shared by the public query and the selection calls. */
todre_status todre_resolve_keep(struct todre_context *ctx, const struct todre_select_config *cfg,
                                int64_t n, int64_t *k)
{
    if (n < 1)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "n: %lld tokens; need at least 1",
                          (long long)n);
    if (cfg->p.keep > 0) {
        if (cfg->p.keep > n)
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "keep: k = %lld exceeds the %lld tokens", (long long)cfg->p.keep,
                              (long long)n);
        *k = cfg->p.keep;
        return TODRE_OK;
    }
    /* k = clamp(floor(r n + 0.5), 1, n) for any n in [1, INT64_MAX] and r in
     * (0, 1]. (double)n may round up (to 2^63 for n near INT64_MAX), and
     * r n + 0.5 may too: the clamp happens in double before any conversion,
     * so no out-of-range double is ever converted and k never exceeds n. */
    double kk = floor(cfg->p.ratio * (double)n + 0.5);
    int64_t out;
    if (!(kk >= 1.0)) out = 1;               /* also a NaN, which the table excludes */
    else if (kk >= (double)n) out = n;
    else out = (int64_t)kk;                  /* 1 <= kk < (double)n <= 2^63 */
    if (out > n) out = n;
    *k = out;
    return TODRE_OK;
}

todre_status todre_select_keep_count(const todre_select_config *cfg, int64_t n, int64_t *k)
{
    todre_clear_error(NULL);
    if (!cfg) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    if (!k) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "k: NULL");
    return todre_resolve_keep(NULL, cfg, n, k);
}
