/* Shared by the stage-2 fixture tests (test_relevance_ref.c,
 * test_relevance_long.c): the case list written by
 * tests/reference/gen_relevance_cases.py, loading its arrays, and running one
 * observation through the public API. Header-only so that each test program
 * stays one file plus this. */
#ifndef TODRE_TESTS_TEST_RELEVANCE_FIXTURE_H
#define TODRE_TESTS_TEST_RELEVANCE_FIXTURE_H

#include "todre_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

struct rf_case {
    char name[64];
    char dtype[8];
    int64_t B, H, Hkv, Q, K, dh;
    double scale;
    int probs;
};

struct rf_arrays {
    struct todre_npy types, q, k, attn, ref;
};

#define RF_MAX_CASES 64

static struct rf_case rf_cases[RF_MAX_CASES];
static int rf_ncases;
static char rf_dir[4096];

static int rf_field(const char *line, const char *key, char *out, size_t cap)
{
    char pat[32];
    snprintf(pat, sizeof pat, " %s=", key);
    char buf[1100];
    if (snprintf(buf, sizeof buf, " %s", line) >= (int)sizeof buf) return 0;
    const char *p = strstr(buf, pat);
    if (!p) return 0;
    p += strlen(pat);
    size_t n = strcspn(p, " \n");
    if (n >= cap) return 0;
    memcpy(out, p, n);
    out[n] = 0;
    return 1;
}

/* Read $TODRE_TEST_DATA/relevance/cases.txt. A missing fixture is a failure:
 * the ctest fixture relevance.fixtures writes it. */
static int rf_load_cases(void **state)
{
    (void)state;
    const char *root = getenv("TODRE_TEST_DATA");
    if (!root) {
        fprintf(stderr, "TODRE_TEST_DATA is not set (run through ctest)\n");
        return -1;
    }
    snprintf(rf_dir, sizeof rf_dir, "%s/relevance", root);
    char path[4200];
    snprintf(path, sizeof path, "%s/cases.txt", rf_dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: cannot open (fixture relevance.fixtures not run?)\n", path);
        return -1;
    }
    char line[1024], v[64];
    rf_ncases = 0;
    while (fgets(line, sizeof line, f) && rf_ncases < RF_MAX_CASES) {
        struct rf_case *c = &rf_cases[rf_ncases];
        if (!rf_field(line, "name", c->name, sizeof c->name)) continue;
        int ok = rf_field(line, "dtype", c->dtype, sizeof c->dtype);
        const char *ikeys[] = {"B", "H", "H_kv", "Q", "K", "dh"};
        int64_t *ivals[] = {&c->B, &c->H, &c->Hkv, &c->Q, &c->K, &c->dh};
        for (int i = 0; i < 6; i++) {
            ok = ok && rf_field(line, ikeys[i], v, sizeof v);
            if (ok) *ivals[i] = strtoll(v, NULL, 10);
        }
        ok = ok && rf_field(line, "scale", v, sizeof v);
        if (ok) c->scale = strtod(v, NULL);
        ok = ok && rf_field(line, "probs", v, sizeof v);
        if (ok) c->probs = atoi(v);
        if (!ok) {
            fprintf(stderr, "%s: malformed line: %s", path, line);
            fclose(f);
            return -1;
        }
        rf_ncases++;
    }
    fclose(f);
    return rf_ncases > 0 ? 0 : -1;
}

static todre_dtype rf_dtype(const struct rf_case *c)
{
    if (!strcmp(c->dtype, "f16")) return TODRE_DTYPE_F16;
    if (!strcmp(c->dtype, "bf16")) return TODRE_DTYPE_BF16;
    return TODRE_DTYPE_F32;
}

static void rf_load_one(const struct rf_case *c, const char *key, struct todre_npy *a)
{
    char path[4400], err[512];
    if (snprintf(path, sizeof path, "%s/%s_%s.npy", rf_dir, c->name, key) >= (int)sizeof path)
        fail_msg("%s: path too long", c->name);
    if (todre_npy_load(path, a, err, sizeof err) != 0) fail_msg("%s", err);
}

static void rf_load(const struct rf_case *c, struct rf_arrays *a)
{
    memset(a, 0, sizeof *a);
    rf_load_one(c, "types", &a->types);
    rf_load_one(c, "q", &a->q);
    rf_load_one(c, "k", &a->k);
    rf_load_one(c, "ref", &a->ref);
    if (c->probs) rf_load_one(c, "attn", &a->attn);
    assert_int_equal(a->types.count, (size_t)(c->B * c->K));
    assert_int_equal(a->q.count, (size_t)(c->B * c->H * c->Q * c->dh));
    assert_int_equal(a->k.count, (size_t)(c->B * c->Hkv * c->K * c->dh));
    assert_int_equal(a->ref.count, (size_t)(c->B * 4));
}

static void rf_free(struct rf_arrays *a)
{
    todre_npy_free(&a->types);
    todre_npy_free(&a->q);
    todre_npy_free(&a->k);
    todre_npy_free(&a->attn);
    todre_npy_free(&a->ref);
}

static const double *rf_ref(const struct rf_arrays *a) { return a->ref.data; }

/* One observation at layer 0 of a fresh 1-layer handle (whose default probe
 * layer is 0) with per-sequence types [B, K]; writes (t2v, v2t) per sequence.
 * x is attn (k == NULL) or q. */
static void rf_observe(todre_context *ctx, int64_t B, int64_t K, const uint8_t *types,
                       const DLTensor *x, const DLTensor *k, double scale, double *ratios)
{
    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(1, B, &rel));
    int64_t shape[2] = {B, K};
    tt_array ta, da;
    tt_assert_ok(todre_relevance_set_types(
        rel, tt_array_init(&ta, (void *)types, TODRE_DTYPE_U8, 2, shape, NULL)));
    int32_t *dec = calloc((size_t)B, sizeof *dec);
    assert_non_null(dec);
    const DLTensor *decisions = tt_array1(&da, dec, TODRE_DTYPE_I32, B);
    if (k)
        tt_assert_ok(todre_relevance_observe_qk(ctx, rel, 0, x, k, scale, decisions));
    else
        tt_assert_ok(todre_relevance_observe_probs(ctx, rel, 0, x, decisions));
    for (int64_t b = 0; b < B; b++) {
        assert_true(dec[b] == TODRE_DECISION_KEEP || dec[b] == TODRE_DECISION_DROP);
        tt_assert_ok(todre_relevance_ratios(rel, b, 0, &ratios[2 * b], &ratios[2 * b + 1]));
    }
    free(dec);
    todre_relevance_destroy(rel);
}

/* |got - want| <= rtol * |want| + atol, with a message naming the case. */
static void rf_assert_close(double got, double want, double rtol, double atol, const char *what,
                            const char *name, int64_t b)
{
    if (!(fabs(got - want) <= rtol * fabs(want) + atol))
        fail_msg("%s: %s, sequence %lld: got %.12g, want %.12g (rel err %.3g)", name, what,
                 (long long)b, got, want, fabs(got - want) / (fabs(want) + 1e-300));
}

#endif /* TODRE_TESTS_TEST_RELEVANCE_FIXTURE_H */
