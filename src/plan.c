/* Prune plans: how a set's budget falls on its groups (from the sizes
 * alone), the position ids of kept tokens, and the canonical signatures of
 * a selection configuration and a relevance handle. Host arithmetic only;
 * docs/semantics.md states every rule. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* ---- budgets --------------------------------------------------------------- */

/* Group sizes from @p groups (host int64 [G + 1]) into sizes[0..G), with
 * the checks of the header: G >= 1, groups[0] = 0, non-decreasing, and the
 * set non-empty. @p first is the row the groups start at (0 for a set of its
 * own, the set's first row within a batch); @p set names the set in
 * messages (-1: a single set). */
static todre_status group_sizes(struct todre_context *ctx, const int64_t *groups, int64_t G,
                                int64_t first, int64_t set, int64_t *sizes)
{
    for (int64_t g = 0; g < G; g++) {
        if (groups[g + 1] < groups[g]) {
            if (set < 0)
                return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                                  "groups: groups[%lld] = %lld is below groups[%lld] = %lld "
                                  "(offsets must not decrease)",
                                  (long long)(g + 1), (long long)(groups[g + 1] - first),
                                  (long long)g, (long long)(groups[g] - first));
            return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT,
                              "groups: offsets decrease at group %lld of set %lld", (long long)g,
                              (long long)set);
        }
        sizes[g] = groups[g + 1] - groups[g];
    }
    return TODRE_OK;
}

/* The minimum group g keeps under SHARED. */
static int64_t group_floor(int64_t size, int64_t min) { return size < min ? size : min; }

/* Largest remainder: share r among the G groups by their room above the
 * minimum, c_g = size_g - floor_g (sum C >= r > 0), adding to counts[g].
 * Each group gets floor(r c_g / C); the r - sum of those left over go one
 * each to the largest remainders (ties: the lower group), never above c_g
 * (a remainder > 0 means floor(r c_g / C) < r c_g / C <= c_g). 128-bit
 * products: r, c_g < 2^63. rem: scratch [G]. */
static void share_rest(int64_t r, const int64_t *sizes, int64_t min, int64_t C, int64_t G,
                       int64_t *counts, int64_t *rem)
{
    int64_t given = 0;
    for (int64_t g = 0; g < G; g++) {
        int64_t c = sizes[g] - group_floor(sizes[g], min);
        unsigned __int128 prod = (unsigned __int128)(uint64_t)r * (uint64_t)c;
        int64_t share = (int64_t)(prod / (uint64_t)C);
        rem[g] = (int64_t)(prod % (uint64_t)C);
        counts[g] += share;
        given += share;
    }
    for (int64_t left = r - given; left > 0; left--) {
        int64_t best = -1;
        for (int64_t g = 0; g < G; g++)
            if (rem[g] > 0 && (best < 0 || rem[g] > rem[best])) best = g;
        counts[best] += 1;
        rem[best] = 0;
    }
}

todre_status todre_plan_counts(struct todre_context *ctx, const struct todre_select_config *cfg,
                               const int64_t *sizes, int64_t G, int64_t set_keep, int64_t set,
                               int64_t *counts, int64_t *rem, int64_t *total)
{
    int64_t n = 0;
    for (int64_t g = 0; g < G; g++) n += sizes[g]; /* the set's rows: fits, N does */
    const char *in = set < 0 ? "" : " of set";
    char which[32] = "";
    if (set >= 0) snprintf(which, sizeof which, " %lld", (long long)set);
    if (n < 1)
        return todre_fail(ctx, TODRE_ERR_INVALID_ARGUMENT, "groups: the set%s%s has no rows",
                          in, which);
    switch ((todre_budget)cfg->p.budget) {
    case TODRE_BUDGET_SET: {
        int64_t k = set_keep;
        if (k < 0) {
            todre_status st = todre_resolve_keep(ctx, cfg, n, &k);
            if (st != TODRE_OK) return st;
        }
        for (int64_t g = 0; g < G; g++) counts[g] = -1;
        *total = k;
        return TODRE_OK;
    }
    case TODRE_BUDGET_SHARED: {
        int64_t k = set_keep;
        if (k < 0) {
            todre_status st = todre_resolve_keep(ctx, cfg, n, &k);
            if (st != TODRE_OK) return st;
        }
        /* each non-empty group its minimum, then the rest by the room above
         * it; minimums above k are kept (the set keeps base > k tokens) */
        int64_t base = 0;
        for (int64_t g = 0; g < G; g++) {
            counts[g] = group_floor(sizes[g], cfg->p.group_min);
            base += counts[g]; /* <= n */
        }
        if (k > base) share_rest(k - base, sizes, cfg->p.group_min, n - base, G, counts, rem);
        *total = k > base ? k : base;
        return TODRE_OK;
    }
    case TODRE_BUDGET_PER_GROUP: {
        int64_t sum = 0;
        for (int64_t g = 0; g < G; g++) {
            int64_t k = 0;
            if (sizes[g] > 0) {
                if (set_keep >= 0) {
                    k = set_keep < sizes[g] ? set_keep : sizes[g];
                } else if (cfg->p.keep > 0) {
                    k = cfg->p.keep < sizes[g] ? cfg->p.keep : sizes[g];
                } else {
                    todre_status st = todre_resolve_keep(ctx, cfg, sizes[g], &k);
                    if (st != TODRE_OK) return st;
                }
            }
            counts[g] = k;
            sum += k; /* <= n */
        }
        *total = sum;
        return TODRE_OK;
    }
    }
    return todre_fail(ctx, TODRE_ERR_INTERNAL, "budget: %lld", (long long)cfg->p.budget);
}

todre_status todre_select_group_counts(const todre_select_config *cfg, const DLTensor *groups,
                                       const DLTensor *counts, int64_t *total)
{
    todre_clear_error(NULL);
    if (!cfg) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    if (!total) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "total: NULL");
    struct todre_array ga;
    todre_status st = todre_array_map(NULL, groups, "groups", TODRE_DT(TODRE_DTYPE_I64),
                                      TODRE_WHERE_HOST, &ga);
    if (st != TODRE_OK) return st;
    if (ga.rank != 1 || ga.shape[0] < 2)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "groups: shape must be [G + 1] with G >= 1");
    int64_t G = ga.shape[0] - 1;
    struct todre_array ca;
    if (counts) {
        st = todre_array_map_out(NULL, counts, "counts", TODRE_DT(TODRE_DTYPE_I64),
                                 TODRE_WHERE_HOST, &ca);
        if (st != TODRE_OK) return st;
        if (ca.rank != 1 || ca.shape[0] != G)
            return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "counts: shape must be [%lld]",
                              (long long)G);
    }
    /* groups copy | sizes | counts | scratch: 4G + 1 int64 */
    int64_t len;
    size_t bytes;
    if (!todre_mul_i64(G, 4, &len) || !todre_add_i64(len, 1, &len) ||
        !todre_bytes(len, sizeof(int64_t), &bytes))
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "groups: %lld groups are too many",
                          (long long)G);
    int64_t *buf = malloc(bytes);
    if (!buf) return todre_fail(NULL, TODRE_ERR_OUT_OF_MEMORY, "groups: out of host memory");
    int64_t *off = buf, *sizes = buf + G + 1, *cnt = sizes + G, *rem = cnt + G;
    const int64_t *p = ga.data;
    for (int64_t g = 0; g <= G; g++) off[g] = p[g * ga.strides[0]];
    int64_t t = 0;
    if (off[0] != 0)
        st = todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "groups: groups[0] = %lld, must be 0",
                        (long long)off[0]);
    if (st == TODRE_OK) st = group_sizes(NULL, off, G, 0, -1, sizes);
    if (st == TODRE_OK) st = todre_plan_counts(NULL, cfg, sizes, G, -1, -1, cnt, rem, &t);
    if (st == TODRE_OK) {
        if (counts) {
            int64_t *o = ca.data;
            for (int64_t g = 0; g < G; g++) o[g * ca.strides[0]] = cnt[g];
        }
        *total = t;
    }
    free(buf);
    return st;
}

todre_status todre_plan_group_sizes(struct todre_context *ctx, const int64_t *groups, int64_t G,
                                    int64_t first, int64_t set, int64_t *sizes)
{
    return group_sizes(ctx, groups, G, first, set, sizes);
}

/* ---- positions ------------------------------------------------------------- */

todre_status todre_positions(todre_positions_policy policy, const DLTensor *positions,
                             const DLTensor *kept, const DLTensor *out, int64_t *next,
                             int64_t *delta)
{
    todre_clear_error(NULL);
    if (policy != TODRE_POSITIONS_KEEP && policy != TODRE_POSITIONS_COMPACT &&
        policy != TODRE_POSITIONS_KEEP_MAX)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "policy: %d is not a todre_positions_policy value (0 KEEP, 1 COMPACT, "
                          "2 KEEP_MAX)",
                          (int)policy);
    struct todre_array pa, ka, oa;
    todre_status st = todre_array_map(NULL, positions, "positions", TODRE_DT(TODRE_DTYPE_I64),
                                      TODRE_WHERE_HOST, &pa);
    if (st != TODRE_OK) return st;
    if (pa.rank != 2 || pa.shape[0] < 1 || pa.shape[1] < 1 || pa.shape[1] > 8)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "positions: shape must be [n, P] with n >= 1 and 1 <= P <= 8");
    int64_t n = pa.shape[0], P = pa.shape[1];
    st = todre_array_map(NULL, kept, "kept", TODRE_DT(TODRE_DTYPE_I64), TODRE_WHERE_HOST, &ka);
    if (st != TODRE_OK) return st;
    if (ka.rank != 1 || ka.shape[0] < 1 || ka.shape[0] > n)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "kept: shape must be [k] with 1 <= k <= n = %lld", (long long)n);
    int64_t k = ka.shape[0];
    st = todre_array_map_out(NULL, out, "out", TODRE_DT(TODRE_DTYPE_I64), TODRE_WHERE_HOST, &oa);
    if (st != TODRE_OK) return st;
    if (oa.rank != 2 || oa.shape[0] != k || oa.shape[1] != P)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "out: shape must be [%lld, %lld]",
                          (long long)k, (long long)P);
    const int64_t *pos = pa.data, *kp = ka.data;
#define POS(i, c) pos[(i) * pa.strides[0] + (c) * pa.strides[1]]
    int64_t lo = POS(0, 0), hi = POS(0, 0);
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < P; c++) {
            int64_t v = POS(i, c);
            if (v < lo) lo = v;
            if (v > hi) hi = v;
        }
    int64_t prev = -1, kept_hi = INT64_MIN;
    for (int64_t j = 0; j < k; j++) {
        int64_t i = kp[j * ka.strides[0]];
        if (i < 0 || i >= n)
            return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                              "kept: kept[%lld] = %lld is outside [0, %lld)", (long long)j,
                              (long long)i, (long long)n);
        if (i <= prev)
            return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                              "kept: kept[%lld] = %lld does not follow kept[%lld] = %lld "
                              "(indices must ascend, without repeats)",
                              (long long)j, (long long)i, (long long)(j - 1), (long long)prev);
        prev = i;
        for (int64_t c = 0; c < P; c++)
            if (POS(i, c) > kept_hi) kept_hi = POS(i, c);
    }
    /* next and delta in int64: the largest id + 1 and start + k must fit */
    int64_t nx, end;
    switch (policy) {
    case TODRE_POSITIONS_KEEP: end = hi; break;
    case TODRE_POSITIONS_KEEP_MAX: end = kept_hi; break;
    default:
        if (!todre_add_i64(lo, k - 1, &end))
            return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                              "positions: the first id %lld plus %lld kept tokens overflows "
                              "int64",
                              (long long)lo, (long long)k);
        break;
    }
    int64_t dl;
    if (!todre_add_i64(end, 1, &nx) || !todre_sub_i64(nx, lo, &dl) || !todre_sub_i64(dl, k, &dl))
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "positions: ids up to %lld leave no next id in int64", (long long)end);
    int64_t *o = oa.data;
    for (int64_t j = 0; j < k; j++) {
        int64_t i = kp[j * ka.strides[0]];
        for (int64_t c = 0; c < P; c++)
            o[j * oa.strides[0] + c * oa.strides[1]] =
                policy == TODRE_POSITIONS_COMPACT ? lo + j : POS(i, c);
    }
#undef POS
    if (next) *next = nx;
    if (delta) *delta = dl;
    return TODRE_OK;
}

/* ---- signatures ------------------------------------------------------------ */

struct text {
    char buf[8192];
    size_t len;
};

static void put(struct text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(t->buf + t->len, sizeof t->buf - t->len, fmt, ap);
    va_end(ap);
    if (w > 0) t->len += (size_t)w < sizeof t->buf - t->len ? (size_t)w : sizeof t->buf - t->len - 1;
}

static todre_status deliver(const struct text *t, char *buf, size_t size, size_t *len)
{
    if (!len) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "len: NULL");
    if (buf && size < t->len + 1) {
        *len = t->len;
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "size: %zu bytes hold no signature of %zu characters and its NUL", size,
                          t->len);
    }
    if (buf) memcpy(buf, t->buf, t->len + 1);
    *len = t->len;
    return TODRE_OK;
}

static const char *objective_name(int64_t o)
{
    switch (o) {
    case TODRE_OBJECTIVE_MAX_SUM: return "max-sum";
    case TODRE_OBJECTIVE_MAX_MIN: return "max-min";
    default: return "cls-topk";
    }
}

static const char *pivot_name(int64_t p)
{
    static const char *const names[] = {"auto", "cls", "center", "farthest", "random",
                                        "isolated"};
    return p >= 0 && p < 6 ? names[p] : "?";
}

todre_status todre_select_config_signature(const todre_select_config *cfg, char *buf,
                                           size_t size, size_t *len)
{
    todre_clear_error(NULL);
    if (!cfg) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "cfg: NULL");
    const struct todre_select_params *p = &cfg->p;
    struct text t = {{0}, 0};
    put(&t, "todre-select-1;objective=%s", objective_name(p->objective));
    if (p->objective != TODRE_OBJECTIVE_CLS_TOPK) {
        int64_t pivot = p->pivot;
        /* AUTO is ISOLATED for MAX_MIN on every input; for MAX_SUM it is CLS
         * or CENTER after the input, so it stays its own */
        if (pivot == TODRE_PIVOT_AUTO && p->objective == TODRE_OBJECTIVE_MAX_MIN)
            pivot = TODRE_PIVOT_ISOLATED;
        put(&t, ";pivot=%s;range=%" PRId64 ",", pivot_name(pivot), p->pivot_lo);
        if (p->pivot_hi < 0) put(&t, "n");
        else put(&t, "%" PRId64, p->pivot_hi);
        if (pivot == TODRE_PIVOT_RANDOM) put(&t, ";seed=%" PRId64, p->seed);
    }
    if (p->keep > 0) put(&t, ";keep=%" PRId64, p->keep);
    else put(&t, ";ratio=%a", p->ratio);
    switch ((todre_budget)p->budget) {
    case TODRE_BUDGET_SET: put(&t, ";budget=set"); break;
    case TODRE_BUDGET_SHARED: put(&t, ";budget=shared;group-min=%" PRId64, p->group_min); break;
    case TODRE_BUDGET_PER_GROUP: put(&t, ";budget=per-group"); break;
    }
    return deliver(&t, buf, size, len);
}

todre_status todre_relevance_signature_text(const struct todre_relevance_params *p,
                                            const int64_t *probes, int64_t nprobes, char *buf,
                                            size_t size, size_t *len)
{
    struct text t = {{0}, 0};
    put(&t, "todre-relevance-1;layers=%" PRId64 ";tau=%a;schedule=%s;probes=", p->num_layers,
        p->tau, p->schedule == TODRE_PROBE_UNTIL_DROP ? "until-drop" : "list");
    if (p->schedule == TODRE_PROBE_UNTIL_DROP) {
        /* only the first probe layer matters: every later one is probed */
        put(&t, "%" PRId64 "+", nprobes ? probes[0] : 0);
    } else {
        for (int64_t i = 0; i < nprobes; i++) put(&t, i ? ",%" PRId64 : "%" PRId64, probes[i]);
    }
    if (t.len >= sizeof t.buf - 1)
        return todre_fail(NULL, TODRE_ERR_INTERNAL, "signature: longer than %zu characters",
                          sizeof t.buf - 2);
    return deliver(&t, buf, size, len);
}
