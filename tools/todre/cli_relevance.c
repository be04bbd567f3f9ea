/*
 * `todre relevance`: the stage-2 ratios and drop decision for one layer's
 * attention, given as probabilities (--attn) or as queries and keys (--q,
 * --k). Runs a one-layer libtodre relevance handle that probes layer 0.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *const CMD = "relevance";

struct relevance_args {
    const char *attn, *q, *k, *types;
    double tau, scale; /* scale 0: 1/sqrt(dh) */
    int tau_given, json;
    const char *backend; /* a registered backend name or "auto" */
};

static int check_form(const struct relevance_args *a, int scale_given)
{
    if (a->attn && (a->q || a->k))
        return cli_fail(CMD, "--attn cannot be combined with --q/--k");
    if (!a->attn && !a->q && !a->k)
        return cli_fail(CMD, "give --attn A.npy, or --q Q.npy and --k K.npy");
    if (!a->attn && !(a->q && a->k)) return cli_fail(CMD, "--q and --k must be given together");
    if (a->attn && scale_given) return cli_fail(CMD, "--scale applies only to --q/--k");
    if (!a->types) return cli_fail(CMD, "--types is required");
    return 0;
}

static int parse_args(int argc, char **argv, struct relevance_args *a)
{
    struct cli_opt o[] = {
        {"--attn", 1, 0, 0}, {"--q", 1, 0, 0},     {"--k", 1, 0, 0},
        {"--types", 1, 0, 0}, {"--tau", 1, 0, 0},  {"--scale", 1, 0, 0},
        {"--backend", 1, 0, 0}, {"--json", 0, 0, 0},
    };
    const size_t n = sizeof o / sizeof o[0];
    if (cli_parse_opts(CMD, argc, argv, o, n)) return CLI_EXIT_ERROR;
    memset(a, 0, sizeof *a);
    a->backend = "auto";
    a->attn = cli_opt(o, n, "--attn")->value;
    a->q = cli_opt(o, n, "--q")->value;
    a->k = cli_opt(o, n, "--k")->value;
    a->types = cli_opt(o, n, "--types")->value;
    a->json = cli_opt(o, n, "--json")->given;
    struct cli_opt *v = cli_opt(o, n, "--scale");
    if (check_form(a, v->given)) return CLI_EXIT_ERROR;
    if (v->given) {
        if (cli_parse_f64(CMD, v->name, v->value, &a->scale)) return CLI_EXIT_ERROR;
        /* the library reads 0 as "default"; on the command line that is a mistake */
        if (a->scale <= 0) return cli_fail(CMD, "--scale: %s is not a positive number", v->value);
    }
    if ((v = cli_opt(o, n, "--tau"))->given) {
        if (cli_parse_f64(CMD, v->name, v->value, &a->tau)) return CLI_EXIT_ERROR;
        a->tau_given = 1;
    }
    if ((v = cli_opt(o, n, "--backend"))->given) a->backend = v->value;
    return 0;
}

/* One integer element of any integer dtype, widened. */
static int64_t int_at(const struct todre_npy *a, size_t i)
{
    const unsigned char *p = (const unsigned char *)a->data + i * a->itemsize;
    int is_signed = a->descr[1] == 'i';
    switch (a->itemsize) {
    case 1: return is_signed ? (int64_t)*(const int8_t *)p : (int64_t)*p;
    case 2: { uint16_t u; memcpy(&u, p, 2); return is_signed ? (int64_t)(int16_t)u : u; }
    case 4: { uint32_t u; memcpy(&u, p, 4); return is_signed ? (int64_t)(int32_t)u : u; }
    default: {
        uint64_t u;
        memcpy(&u, p, 8);
        /* values above INT64_MAX are invalid anyway; keep them out of 0..2 */
        return (!is_signed && u > (uint64_t)INT64_MAX) ? -1 : (int64_t)u;
    }
    }
}

/* Token types as u8 [K], every value 0 (system), 1 (visual) or 2 (text). */
static int load_types(const char *path, uint8_t **out, int64_t *count)
{
    struct todre_npy t;
    if (cli_load(CMD, "--types", path, &t)) return CLI_EXIT_ERROR;
    int rc = 0;
    if (t.descr[1] != 'i' && t.descr[1] != 'u')
        rc = cli_fail(CMD, "--types: dtype %s is not an integer dtype", t.descr);
    else if (t.rank != 1)
        rc = cli_fail(CMD, "--types: need a 1-d array [K], got rank %d", t.rank);
    else if (!(*out = malloc(t.count ? t.count : 1)))
        rc = cli_fail(CMD, "out of memory");
    for (size_t i = 0; rc == 0 && i < t.count; i++) {
        int64_t v = int_at(&t, i);
        if (v < 0 || v > 2)
            rc = cli_fail(CMD, "--types: value %lld at position %zu is not 0 (system), "
                          "1 (visual) or 2 (text)", (long long)v, i);
        else
            (*out)[i] = (uint8_t)v;
    }
    *count = (int64_t)t.count;
    todre_npy_free(&t);
    return rc;
}

/* A [rows, cols] array becomes one head: [1, rows, cols]. */
static int load_heads(const char *opt, const char *path, struct todre_npy *a, DLDataType *dt,
                      int64_t shape[3])
{
    if (cli_load(CMD, opt, path, a) || cli_float_dtype(CMD, opt, a, dt)) return CLI_EXIT_ERROR;
    if (a->rank != 2 && a->rank != 3)
        return cli_fail(CMD, "%s: need a 3-d [heads, rows, cols] or 2-d [rows, cols] array, "
                        "got rank %d", opt, a->rank);
    shape[0] = a->rank == 3 ? a->shape[0] : 1;
    shape[1] = a->shape[a->rank - 2];
    shape[2] = a->shape[a->rank - 1];
    return 0;
}

static int create_handle(const struct relevance_args *a, uint8_t *types, int64_t count,
                         todre_relevance **rel)
{
    int64_t layer0 = 0, one = 1;
    DLTensor layers, tt;
    cli_host_tensor(&layers, &layer0, CLI_DTYPE_I64, 1, &one);
    todre_status st = todre_relevance_create(1, 1, rel);
    if (st == TODRE_OK) st = todre_relevance_set_probe_layers(*rel, &layers);
    if (st != TODRE_OK) return cli_lib_fail(CMD, "relevance handle", st);
    if (a->tau_given &&
        (st = todre_relevance_set_double(*rel, TODRE_RELEVANCE_TAU, a->tau)) != TODRE_OK)
        return cli_lib_fail(CMD, "--tau", st);
    cli_host_tensor(&tt, types, CLI_DTYPE_U8, 1, &count);
    st = todre_relevance_set_types(*rel, &tt);
    return st == TODRE_OK ? 0 : cli_lib_fail(CMD, "--types", st);
}

/* Observe layer 0 from whichever form was given. */
static int observe(const struct relevance_args *a, struct cli_run *run, todre_relevance *rel,
                   struct todre_npy arr[2], int64_t ntypes, int32_t *decision)
{
    int64_t s0[3], s1[3], one = 1;
    DLDataType d0, d1;
    const DLTensor *t0, *t1;
    DLTensor dec; /* host int32 [1]: the one sequence's decision */
    cli_host_tensor(&dec, decision, CLI_DTYPE_I32, 1, &one);
    todre_status st;
    if (a->attn) {
        if (load_heads("--attn", a->attn, &arr[0], &d0, s0)) return CLI_EXIT_ERROR;
        if (s0[2] != ntypes)
            return cli_fail(CMD, "--types has %lld entries but --attn has %lld keys",
                            (long long)ntypes, (long long)s0[2]);
        if (cli_run_open(CMD, a->backend, run) ||
            cli_run_array(CMD, run, "--attn", arr[0].data, d0, 3, s0, &t0))
            return CLI_EXIT_ERROR;
        st = todre_relevance_observe_probs(run->ctx, rel, 0, t0, &dec);
    } else {
        if (load_heads("--q", a->q, &arr[0], &d0, s0) || load_heads("--k", a->k, &arr[1], &d1, s1))
            return CLI_EXIT_ERROR;
        if (s1[1] != ntypes)
            return cli_fail(CMD, "--types has %lld entries but --k has %lld keys",
                            (long long)ntypes, (long long)s1[1]);
        if (cli_run_open(CMD, a->backend, run) ||
            cli_run_array(CMD, run, "--q", arr[0].data, d0, 3, s0, &t0) ||
            cli_run_array(CMD, run, "--k", arr[1].data, d1, 3, s1, &t1))
            return CLI_EXIT_ERROR;
        st = todre_relevance_observe_qk(run->ctx, rel, 0, t0, t1, a->scale, &dec);
    }
    return st == TODRE_OK ? 0 : cli_lib_fail(CMD, a->attn ? "--attn" : "--q/--k", st);
}

static int report(const struct relevance_args *a, const todre_relevance *rel,
                  int32_t decision)
{
    double t2v = 0, v2t = 0, tau = 0;
    todre_status st = todre_relevance_ratios(rel, 0, 0, &t2v, &v2t);
    if (st == TODRE_OK) st = todre_relevance_get_double(rel, TODRE_RELEVANCE_TAU, &tau);
    if (st != TODRE_OK) return cli_lib_fail(CMD, "ratios", st);
    int drop = decision == TODRE_DECISION_DROP;
    if (a->json) {
        printf("{\"alpha_t2v\": ");
        cli_json_double(stdout, t2v);
        printf(", \"alpha_v2t\": ");
        cli_json_double(stdout, v2t);
        printf(", \"drop\": %s, \"tau\": ", drop ? "true" : "false");
        cli_json_double(stdout, tau);
        printf("}\n");
    } else
        printf("%.9g %.9g %d\n", t2v, v2t, drop);
    return cli_finish_output(CMD);
}

int cli_relevance_main(int argc, char **argv)
{
    struct relevance_args a;
    if (parse_args(argc, argv, &a)) return CLI_EXIT_ERROR;
    uint8_t *types = NULL;
    int64_t ntypes = 0;
    todre_relevance *rel = NULL;
    struct todre_npy arr[2];
    memset(arr, 0, sizeof arr);
    struct cli_run run;
    memset(&run, 0, sizeof run);
    int32_t decision = TODRE_DECISION_NOT_PROBED;
    int rc = load_types(a.types, &types, &ntypes);
    if (rc == 0) rc = create_handle(&a, types, ntypes, &rel);
    if (rc == 0) rc = observe(&a, &run, rel, arr, ntypes, &decision);
    if (rc == 0) rc = report(&a, rel, decision);
    cli_run_close(&run);
    todre_relevance_destroy(rel);
    todre_npy_free(&arr[0]);
    todre_npy_free(&arr[1]);
    free(types);
    return rc;
}
