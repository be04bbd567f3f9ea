/* `todre select`: stage-1 diversity selection of one token set from .npy files. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const char *const CMD = "select";

static const char *const OBJECTIVES[] = {"max-sum", "max-min", "cls-topk"};
/* Indexed by todre_pivot: "auto" and "isolated" are accepted beyond the
 * documented four so every library pivot is reachable. */
static const char *const PIVOTS[] = {"auto", "cls", "center", "farthest", "random", "isolated"};
static const char *const ORDERS[] = {"position", "selection"};

struct select_args {
    const char *emb_path, *cls_path;
    int64_t keep;  /* 0: use ratio */
    double ratio;
    int objective, pivot, order, json;
    const char *backend; /* a registered backend name or "auto" */
    int64_t pivot_lo, pivot_hi, seed;
};

/* "LO:HI" with HI empty or -1 meaning n. */
static int parse_range(const char *s, int64_t *lo, int64_t *hi)
{
    const char *colon = strchr(s, ':');
    if (!colon || colon == s)
        return cli_fail(CMD, "--pivot-range: '%s' is not LO:HI", s);
    char lo_text[32];
    size_t len = (size_t)(colon - s);
    if (len >= sizeof lo_text) return cli_fail(CMD, "--pivot-range: '%s' is not LO:HI", s);
    memcpy(lo_text, s, len);
    lo_text[len] = '\0';
    if (cli_parse_i64(CMD, "--pivot-range", lo_text, lo)) return CLI_EXIT_ERROR;
    if (colon[1] == '\0') {
        *hi = -1;
        return 0;
    }
    return cli_parse_i64(CMD, "--pivot-range", colon + 1, hi);
}

static int parse_args(int argc, char **argv, struct select_args *a)
{
    struct cli_opt o[] = {
        {"--embeddings", 1, 0, 0}, {"--cls", 1, 0, 0},   {"--keep", 1, 0, 0},
        {"--ratio", 1, 0, 0},      {"--objective", 1, 0, 0}, {"--pivot", 1, 0, 0},
        {"--pivot-range", 1, 0, 0}, {"--seed", 1, 0, 0},  {"--order", 1, 0, 0},
        {"--backend", 1, 0, 0},    {"--json", 0, 0, 0},
    };
    const size_t n = sizeof o / sizeof o[0];
    if (cli_parse_opts(CMD, argc, argv, o, n)) return CLI_EXIT_ERROR;
    memset(a, 0, sizeof *a);
    a->pivot_hi = -1;
    a->backend = "auto";

    struct cli_opt *v;
    if (!(v = cli_opt(o, n, "--embeddings"))->given)
        return cli_fail(CMD, "--embeddings is required");
    a->emb_path = v->value;
    a->cls_path = cli_opt(o, n, "--cls")->value;
    struct cli_opt *keep = cli_opt(o, n, "--keep"), *ratio = cli_opt(o, n, "--ratio");
    if (keep->given == ratio->given)
        return cli_fail(CMD, "give exactly one of --keep K and --ratio R");
    if (keep->given && cli_parse_i64(CMD, "--keep", keep->value, &a->keep)) return CLI_EXIT_ERROR;
    if (keep->given && a->keep < 1)
        return cli_fail(CMD, "--keep: %s is not a positive count", keep->value);
    if (ratio->given && cli_parse_f64(CMD, "--ratio", ratio->value, &a->ratio))
        return CLI_EXIT_ERROR;
    if ((v = cli_opt(o, n, "--objective"))->given &&
        cli_parse_choice(CMD, v->name, v->value, OBJECTIVES, 3, &a->objective))
        return CLI_EXIT_ERROR;
    if ((v = cli_opt(o, n, "--pivot"))->given &&
        cli_parse_choice(CMD, v->name, v->value, PIVOTS, 6, &a->pivot))
        return CLI_EXIT_ERROR;
    if ((v = cli_opt(o, n, "--pivot-range"))->given && parse_range(v->value, &a->pivot_lo,
                                                                   &a->pivot_hi))
        return CLI_EXIT_ERROR;
    if ((v = cli_opt(o, n, "--seed"))->given && cli_parse_i64(CMD, v->name, v->value, &a->seed))
        return CLI_EXIT_ERROR;
    if ((v = cli_opt(o, n, "--order"))->given &&
        cli_parse_choice(CMD, v->name, v->value, ORDERS, 2, &a->order))
        return CLI_EXIT_ERROR;
    if ((v = cli_opt(o, n, "--backend"))->given) a->backend = v->value;
    a->json = cli_opt(o, n, "--json")->given;
    return 0;
}

static int set_param(todre_select_config *cfg, todre_param p, int64_t value, const char *opt)
{
    todre_status st = todre_select_config_set_int(cfg, p, value);
    return st == TODRE_OK ? 0 : cli_lib_fail(CMD, opt, st);
}

/* The library configuration the options describe, always with ORDER_BOTH:
 * the pivot is reported and --order picks the row printed. */
static int build_config(const struct select_args *a, todre_select_config **out)
{
    todre_status st = todre_select_config_create(out);
    if (st != TODRE_OK) return cli_lib_fail(CMD, "configuration", st);
    todre_select_config *cfg = *out;
    if (set_param(cfg, TODRE_SELECT_OBJECTIVE, a->objective, "--objective") ||
        set_param(cfg, TODRE_SELECT_PIVOT, a->pivot, "--pivot") ||
        set_param(cfg, TODRE_SELECT_PIVOT_LO, a->pivot_lo, "--pivot-range") ||
        set_param(cfg, TODRE_SELECT_PIVOT_HI, a->pivot_hi, "--pivot-range") ||
        set_param(cfg, TODRE_SELECT_SEED, a->seed, "--seed") ||
        set_param(cfg, TODRE_SELECT_ORDER, TODRE_ORDER_BOTH, "--order"))
        return CLI_EXIT_ERROR;
    if (a->keep) return set_param(cfg, TODRE_SELECT_KEEP, a->keep, "--keep");
    st = todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, a->ratio);
    return st == TODRE_OK ? 0 : cli_lib_fail(CMD, "--ratio", st);
}

static int load_inputs(const struct select_args *a, struct todre_npy *emb, struct todre_npy *cls,
                       DLDataType *emb_dt, DLDataType *cls_dt)
{
    if (cli_load(CMD, "--embeddings", a->emb_path, emb) ||
        cli_float_dtype(CMD, "--embeddings", emb, emb_dt))
        return CLI_EXIT_ERROR;
    if (emb->rank != 2)
        return cli_fail(CMD, "--embeddings: need a 2-d array [n, d], got rank %d", emb->rank);
    if (emb->shape[0] < 1 || emb->shape[1] < 1)
        return cli_fail(CMD, "--embeddings: empty array [%lld, %lld] (need n >= 1, d >= 1)",
                        (long long)emb->shape[0], (long long)emb->shape[1]);
    if (!a->cls_path) return 0;
    if (cli_load(CMD, "--cls", a->cls_path, cls) || cli_float_dtype(CMD, "--cls", cls, cls_dt))
        return CLI_EXIT_ERROR;
    if (cls->rank != 1 && cls->rank != 2)
        return cli_fail(CMD, "--cls: need [n] or [frames, tokens], got rank %d", cls->rank);
    return 0;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void print_result(const struct select_args *a, const int64_t *both, int64_t n, int64_t k,
                         const char *backend, double seconds)
{
    const int64_t *row = both + (a->order == TODRE_ORDER_SELECTION ? 0 : k);
    if (!a->json) {
        for (int64_t i = 0; i < k; i++) printf(i ? " %lld" : "%lld", (long long)row[i]);
        printf("\n");
        return;
    }
    printf("{\"indices\": [");
    for (int64_t i = 0; i < k; i++) printf(i ? ", %lld" : "%lld", (long long)row[i]);
    printf("], \"order\": \"%s\", \"n\": %lld, \"k\": %lld, \"pivot\": %lld, "
           "\"backend\": \"%s\", \"seconds\": %.9f}\n",
           ORDERS[a->order], (long long)n, (long long)k, (long long)both[0],
           backend, seconds);
}

/* Everything after parsing; the caller frees what this creates. */
static int run_select(const struct select_args *a, struct todre_npy *emb, struct todre_npy *cls,
                      todre_select_config **cfg, struct cli_run *run, int64_t **out)
{
    DLDataType emb_dt = CLI_DTYPE_F32, cls_dt = CLI_DTYPE_F32;
    if (load_inputs(a, emb, cls, &emb_dt, &cls_dt) || build_config(a, cfg)) return CLI_EXIT_ERROR;
    int64_t n = emb->shape[0], k = 0;
    todre_status st = todre_select_keep_count(*cfg, n, &k);
    if (st != TODRE_OK) return cli_lib_fail(CMD, a->keep ? "--keep" : "--ratio", st);
    *out = calloc((size_t)(2 * k), sizeof **out);
    if (!*out) return cli_fail(CMD, "out of memory");

    const DLTensor *te, *tc = NULL, *to;
    const int64_t out_shape[2] = {2, k};
    if (cli_run_open(CMD, a->backend, run) ||
        cli_run_array(CMD, run, "--embeddings", emb->data, emb_dt, 2, emb->shape, &te) ||
        (a->cls_path &&
         cli_run_array(CMD, run, "--cls", cls->data, cls_dt, cls->rank, cls->shape, &tc)) ||
        cli_run_array(CMD, run, "output", *out, CLI_DTYPE_I64, 2, out_shape, &to))
        return CLI_EXIT_ERROR;

    double t0 = now_seconds();
    st = todre_select(run->ctx, *cfg, te, tc, to);
    if (st == TODRE_OK) st = todre_context_synchronize(run->ctx);
    double seconds = now_seconds() - t0;
    if (st != TODRE_OK) return cli_lib_fail(CMD, "selection", st);
    if (cli_run_fetch(CMD, run, to)) return CLI_EXIT_ERROR;
    print_result(a, *out, n, k, run->backend, seconds);
    return cli_finish_output(CMD);
}

int cli_select_main(int argc, char **argv)
{
    struct select_args a;
    if (parse_args(argc, argv, &a)) return CLI_EXIT_ERROR;
    struct todre_npy emb, cls;
    memset(&emb, 0, sizeof emb);
    memset(&cls, 0, sizeof cls);
    todre_select_config *cfg = NULL;
    struct cli_run run;
    memset(&run, 0, sizeof run);
    int64_t *out = NULL;
    int rc = run_select(&a, &emb, &cls, &cfg, &run, &out);
    free(out);
    cli_run_close(&run);
    todre_select_config_destroy(cfg);
    todre_npy_free(&cls);
    todre_npy_free(&emb);
    return rc;
}
