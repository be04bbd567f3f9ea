/* The prune plan's C contract (libtodre 1.1): todre_select_group_counts,
 * todre_select_ex, todre_positions and the signatures refuse bad input with
 * a status and a message naming the argument, and write nothing then; their
 * results on the cases docs/semantics.md works out; todre_select_ex equals
 * todre_select_batch without 1.1's inputs and todre_select on each group's
 * rows under SHARED; the struct_size rule. And the four contract gaps 1.1
 * closes: host arrays have device_id 0, todre_relevance_ratios refuses NULL
 * (test_relevance_contract), the registry never opens a FIFO, and
 * todre_device_get_props(NULL) is "auto". The values the groups and
 * positions take on random inputs are checked against a reference in
 * bindings/python/tests/test_plan.py. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, setenv, readlink */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "todre_test.h"

#define SENTINEL ((int64_t)0x5a5a5a5a5a5a5a5aLL)

static todre_select_config *shared_cfg(double ratio, int64_t min)
{
    todre_select_config *cfg = NULL;
    tt_assert_ok(todre_select_config_create(&cfg));
    tt_assert_ok(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, ratio));
    tt_cfg_set(cfg, TODRE_SELECT_BUDGET, TODRE_BUDGET_SHARED);
    tt_cfg_set(cfg, TODRE_SELECT_GROUP_MIN, min);
    return cfg;
}

/* ---- group counts ---------------------------------------------------------- */

/* The example of docs/semantics.md, and SET's -1. */
static void test_group_counts_example(void **state)
{
    (void)state;
    todre_select_config *cfg = shared_cfg(0.1, 10);
    int64_t groups[4] = {0, 576, 1152, 2880}, counts[3], total = 0;
    tt_array g, c;
    tt_assert_ok(todre_select_group_counts(cfg, tt_array1(&g, groups, TODRE_DTYPE_I64, 4),
                                           tt_array1(&c, counts, TODRE_DTYPE_I64, 3), &total));
    assert_int_equal(counts[0], 61);
    assert_int_equal(counts[1], 61);
    assert_int_equal(counts[2], 166);
    assert_int_equal(total, 288);
    tt_cfg_set(cfg, TODRE_SELECT_BUDGET, TODRE_BUDGET_SET);
    tt_assert_ok(todre_select_group_counts(cfg, tt_array1(&g, groups, TODRE_DTYPE_I64, 4),
                                           tt_array1(&c, counts, TODRE_DTYPE_I64, 3), &total));
    assert_int_equal(counts[0], -1);
    assert_int_equal(counts[2], -1);
    assert_int_equal(total, 288);
    tt_assert_ok(todre_select_group_counts(cfg, tt_array1(&g, groups, TODRE_DTYPE_I64, 4), NULL,
                                           &total)); /* counts may be NULL */
    todre_select_config_destroy(cfg);
}

static void test_group_counts_refusals(void **state)
{
    (void)state;
    todre_select_config *cfg = shared_cfg(0.1, 1);
    int64_t counts[3] = {SENTINEL, SENTINEL, SENTINEL}, total = SENTINEL;
    tt_array g, c, c2;
    int64_t dec[4] = {0, 10, 5, 20}, first[3] = {1, 5, 9}, empty[3] = {0, 0, 0};
    int64_t ok[4] = {0, 5, 10, 15};
    int32_t i32[4] = {0, 5, 10, 15};
    const DLTensor *cnt = tt_array1(&c, counts, TODRE_DTYPE_I64, 3);
    tt_assert_fails(NULL, todre_select_group_counts(NULL, tt_array1(&g, ok, TODRE_DTYPE_I64, 4), cnt, &total),
                    TODRE_ERR_INVALID_ARGUMENT, "cfg");
    tt_assert_fails(NULL, todre_select_group_counts(cfg, tt_array1(&g, ok, TODRE_DTYPE_I64, 4), cnt, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "total");
    tt_assert_fails(NULL, todre_select_group_counts(cfg, NULL, cnt, &total), TODRE_ERR_INVALID_ARGUMENT,
                    "groups");
    tt_assert_fails(NULL, todre_select_group_counts(cfg, tt_array1(&g, i32, TODRE_DTYPE_I32, 4), cnt, &total),
                    TODRE_ERR_INVALID_ARGUMENT, "groups");
    tt_assert_fails(NULL, todre_select_group_counts(cfg, tt_array1(&g, ok, TODRE_DTYPE_I64, 1), cnt, &total),
                    TODRE_ERR_INVALID_ARGUMENT, "groups");
    tt_array1(&g, ok, TODRE_DTYPE_I64, 4);
    tt_assert_fails(NULL, todre_select_group_counts(cfg, tt_array_on(&g, kDLCUDA, 0), cnt, &total),
                    TODRE_ERR_INVALID_ARGUMENT, "groups"); /* host only */
    tt_assert_fails(NULL, todre_select_group_counts(cfg, tt_array1(&g, dec, TODRE_DTYPE_I64, 4), cnt, &total),
                    TODRE_ERR_INVALID_ARGUMENT, "groups");
    tt_assert_fails(NULL, todre_select_group_counts(cfg, tt_array1(&g, first, TODRE_DTYPE_I64, 3),
                                                    tt_array1(&c2, counts, TODRE_DTYPE_I64, 2), &total),
                    TODRE_ERR_INVALID_ARGUMENT, "groups[0]");
    tt_assert_fails(NULL, todre_select_group_counts(cfg, tt_array1(&g, empty, TODRE_DTYPE_I64, 3),
                                                    tt_array1(&c2, counts, TODRE_DTYPE_I64, 2), &total),
                    TODRE_ERR_INVALID_ARGUMENT, "groups");
    tt_assert_fails(NULL, todre_select_group_counts(cfg, tt_array1(&g, ok, TODRE_DTYPE_I64, 4),
                                                    tt_array1(&c2, counts, TODRE_DTYPE_I64, 2), &total),
                    TODRE_ERR_INVALID_ARGUMENT, "counts");
    /* a keep count above the set's rows under SET and SHARED */
    tt_cfg_set(cfg, TODRE_SELECT_KEEP, 16);
    tt_assert_fails(NULL, todre_select_group_counts(cfg, tt_array1(&g, ok, TODRE_DTYPE_I64, 4), cnt, &total),
                    TODRE_ERR_INVALID_ARGUMENT, "keep");
    /* nothing was written by any of them */
    assert_true(counts[0] == SENTINEL && counts[1] == SENTINEL && counts[2] == SENTINEL);
    assert_true(total == SENTINEL);
    /* PER_GROUP: a group smaller than the keep count keeps all of it */
    tt_cfg_set(cfg, TODRE_SELECT_BUDGET, TODRE_BUDGET_PER_GROUP);
    tt_assert_ok(todre_select_group_counts(cfg, tt_array1(&g, ok, TODRE_DTYPE_I64, 4), cnt, &total));
    assert_int_equal(counts[0], 5);
    assert_int_equal(total, 15);
    todre_select_config_destroy(cfg);
}

/* ---- todre_select_ex ----------------------------------------------------------------- */

enum { N = 90, D = 12 };

struct fx {
    todre_context *ctx;
    float rows[N * D];
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    f->ctx = tt_cpu_context();
    tt_fill_clustered(f->rows, N, D, D, 7, 0.3, 11);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    todre_context_destroy(f->ctx);
    free(f);
    return 0;
}

static todre_select_args args_of(const DLTensor *emb, const DLTensor *out)
{
    todre_select_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.embeddings = emb;
    a.out = out;
    return a;
}

/* Without groups, scores and steps: todre_select_batch, bit for bit. */
static void test_select_ex_equals_select_batch(void **state)
{
    struct fx *f = *state;
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, 0,
                                         TODRE_ORDER_BOTH);
    tt_assert_ok(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 0.2));
    int64_t offs[3] = {0, 40, N}, want[2 * 18], got[2 * 18], oo_want[3], oo_got[3];
    tt_array e, o, w, g, ow, og;
    const DLTensor *emb = tt_array2(&e, f->rows, TODRE_DTYPE_F32, N, D, D);
    int64_t shape[2] = {2, 18};
    tt_assert_ok(todre_select_batch(f->ctx, cfg, emb, NULL, tt_array1(&o, offs, TODRE_DTYPE_I64, 3),
                                    NULL, tt_array_init(&w, want, TODRE_DTYPE_I64, 2, shape, NULL),
                                    tt_array1(&ow, oo_want, TODRE_DTYPE_I64, 3)));
    todre_select_args a = args_of(emb, tt_array_init(&g, got, TODRE_DTYPE_I64, 2, shape, NULL));
    a.offsets = tt_array1(&o, offs, TODRE_DTYPE_I64, 3);
    a.out_offsets = tt_array1(&og, oo_got, TODRE_DTYPE_I64, 3);
    tt_assert_ok(todre_select_ex(f->ctx, cfg, &a));
    assert_memory_equal(got, want, sizeof want);
    assert_memory_equal(oo_got, oo_want, sizeof oo_want);
    todre_select_config_destroy(cfg);
}

/* SHARED: each group is todre_select on its rows with its count, indices
 * offset by the group's first row, groups in order; an empty group adds
 * nothing; scores and steps cover every row. */
static void test_shared_groups_select_each_group_alone(void **state)
{
    struct fx *f = *state;
    todre_select_config *cfg = shared_cfg(0.25, 2);
    int64_t groups[5] = {0, 30, 30, 31, N}, counts[4], total;
    tt_array g, c, e, o, sc, st;
    tt_assert_ok(todre_select_group_counts(cfg, tt_array1(&g, groups, TODRE_DTYPE_I64, 5),
                                           tt_array1(&c, counts, TODRE_DTYPE_I64, 4), &total));
    assert_int_equal(total, 23);
    int64_t kept[23];
    float scores[N];
    int64_t steps[N];
    todre_select_args a = args_of(tt_array2(&e, f->rows, TODRE_DTYPE_F32, N, D, D),
                                  tt_array1(&o, kept, TODRE_DTYPE_I64, total));
    a.groups = tt_array1(&g, groups, TODRE_DTYPE_I64, 5);
    a.scores = tt_array1(&sc, scores, TODRE_DTYPE_F32, N);
    a.steps = tt_array1(&st, steps, TODRE_DTYPE_I64, N);
    tt_assert_ok(todre_select_ex(f->ctx, cfg, &a));
    int64_t at = 0, taken = 0;
    for (int j = 0; j < 4; j++) {
        int64_t n = groups[j + 1] - groups[j];
        if (!n) {
            assert_int_equal(counts[j], 0);
            continue;
        }
        int64_t alone[N];
        todre_select_config *one = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, counts[j],
                                             TODRE_ORDER_POSITION);
        tt_array e1, o1;
        tt_assert_ok(todre_select(f->ctx, one,
                                  tt_array2(&e1, f->rows + groups[j] * D, TODRE_DTYPE_F32, n, D, D),
                                  NULL, tt_array1(&o1, alone, TODRE_DTYPE_I64, counts[j])));
        for (int64_t i = 0; i < counts[j]; i++) assert_int_equal(kept[at + i], alone[i] + groups[j]);
        at += counts[j];
        todre_select_config_destroy(one);
    }
    for (int64_t v = 0; v < N; v++) {
        taken += steps[v] >= 0;
        assert_true(scores[v] == scores[v]); /* finite, every row */
    }
    assert_int_equal(taken, total);
    todre_select_config_destroy(cfg);
}

/* SHARED minimums above the budget are kept: the counts are the minimums,
 * the total their sum, and the selection returns that many, each group's
 * minimum from its own rows. */
static void test_shared_minimums_above_the_budget_are_kept(void **state)
{
    struct fx *f = *state;
    todre_select_config *cfg = shared_cfg(0.05, 4);    /* k = round(0.05 * N) < 3 * 4 */
    int64_t groups[4] = {0, 2, 20, N}, counts[3], total = 0;
    tt_array g, c, e, o;
    tt_assert_ok(todre_select_group_counts(cfg, tt_array1(&g, groups, TODRE_DTYPE_I64, 4),
                                           tt_array1(&c, counts, TODRE_DTYPE_I64, 3), &total));
    assert_int_equal(counts[0], 2); /* a group smaller than the minimum keeps all */
    assert_int_equal(counts[1], 4);
    assert_int_equal(counts[2], 4);
    assert_int_equal(total, 10);
    int64_t kept[10];
    todre_select_args a = args_of(tt_array2(&e, f->rows, TODRE_DTYPE_F32, N, D, D),
                                  tt_array1(&o, kept, TODRE_DTYPE_I64, total));
    a.groups = tt_array1(&g, groups, TODRE_DTYPE_I64, 4);
    tt_assert_ok(todre_select_ex(f->ctx, cfg, &a));
    int64_t per[3] = {0, 0, 0};
    for (int i = 0; i < 10; i++) per[(kept[i] >= 2) + (kept[i] >= 20)]++;
    assert_int_equal(per[0], 2);
    assert_int_equal(per[1], 4);
    assert_int_equal(per[2], 4);
    todre_select_config_destroy(cfg);
}

/* Every refusal names its argument and leaves every output as it was. */
static void test_select_ex_refusals(void **state)
{
    struct fx *f = *state;
    todre_select_config *cfg = shared_cfg(0.2, 1);
    int64_t kept[18], oo[3], steps[N];
    float scores[N];
    for (int i = 0; i < 18; i++) kept[i] = SENTINEL;
    for (int i = 0; i < N; i++) steps[i] = SENTINEL, scores[i] = -3.0f;
    oo[0] = oo[1] = oo[2] = SENTINEL;
    tt_array e, o, g, s, oa, sc, st;
    const DLTensor *emb = tt_array2(&e, f->rows, TODRE_DTYPE_F32, N, D, D);
    const DLTensor *out = tt_array1(&o, kept, TODRE_DTYPE_I64, 18);
    todre_select_args a = args_of(emb, out);
    tt_assert_fails(NULL, todre_select_ex(NULL, cfg, &a), TODRE_ERR_INVALID_ARGUMENT, "ctx");
    tt_assert_fails(f->ctx, todre_select_ex(f->ctx, NULL, &a), TODRE_ERR_INVALID_ARGUMENT, "cfg");
    tt_assert_fails(f->ctx, todre_select_ex(f->ctx, cfg, NULL), TODRE_ERR_INVALID_ARGUMENT, "args");
    a.struct_size = sizeof a - 1;
    tt_assert_fails(f->ctx, todre_select_ex(f->ctx, cfg, &a), TODRE_ERR_INVALID_ARGUMENT, "struct_size");
    /* a larger struct from a later header: accepted when the unknown tail is 0 */
    struct {
        todre_select_args a;
        void *later;
    } big;
    memset(&big, 0, sizeof big);
    big.a = args_of(emb, out);
    big.a.struct_size = sizeof big;
    big.later = &big;
    tt_assert_fails(f->ctx, todre_select_ex(f->ctx, cfg, &big.a), TODRE_ERR_UNSUPPORTED, "args");
    a = args_of(emb, NULL);
    tt_assert_fails(f->ctx, todre_select_ex(f->ctx, cfg, &a), TODRE_ERR_INVALID_ARGUMENT, "out");
    /* groups that cross a set, that do not end at N, that decrease */
    int64_t offs[3] = {0, 40, N}, cross[3] = {0, 45, N}, short_[3] = {0, 45, 80}, dec[4] = {0, 50, 40, N};
    a = args_of(emb, out);
    a.offsets = tt_array1(&s, offs, TODRE_DTYPE_I64, 3);
    a.out_offsets = tt_array1(&oa, oo, TODRE_DTYPE_I64, 3);
    a.groups = tt_array1(&g, cross, TODRE_DTYPE_I64, 3);
    tt_assert_fails(f->ctx, todre_select_ex(f->ctx, cfg, &a), TODRE_ERR_INVALID_ARGUMENT, "groups");
    a.groups = tt_array1(&g, short_, TODRE_DTYPE_I64, 3);
    tt_assert_fails(f->ctx, todre_select_ex(f->ctx, cfg, &a), TODRE_ERR_INVALID_ARGUMENT, "groups");
    a.groups = tt_array1(&g, dec, TODRE_DTYPE_I64, 4);
    tt_assert_fails(f->ctx, todre_select_ex(f->ctx, cfg, &a), TODRE_ERR_INVALID_ARGUMENT, "groups");
    /* scores and steps: dtype, shape, compactness */
    a = args_of(emb, out);
    a.scores = tt_array1(&sc, steps, TODRE_DTYPE_I64, N);
    tt_assert_fails(f->ctx, todre_select_ex(f->ctx, cfg, &a), TODRE_ERR_INVALID_ARGUMENT, "scores");
    a.scores = tt_array1(&sc, scores, TODRE_DTYPE_F32, N - 1);
    tt_assert_fails(f->ctx, todre_select_ex(f->ctx, cfg, &a), TODRE_ERR_INVALID_ARGUMENT, "scores");
    int64_t two = 2, half = N / 2;
    a.scores = tt_array_init(&sc, scores, TODRE_DTYPE_F32, 1, &half, &two);
    tt_assert_fails(f->ctx, todre_select_ex(f->ctx, cfg, &a), TODRE_ERR_INVALID_ARGUMENT, "scores");
    a.scores = NULL;
    a.steps = tt_array1(&st, scores, TODRE_DTYPE_F32, N);
    tt_assert_fails(f->ctx, todre_select_ex(f->ctx, cfg, &a), TODRE_ERR_INVALID_ARGUMENT, "steps");
    /* out sized for another count */
    a = args_of(emb, tt_array1(&o, kept, TODRE_DTYPE_I64, 17));
    tt_assert_fails(f->ctx, todre_select_ex(f->ctx, cfg, &a), TODRE_ERR_INVALID_ARGUMENT, "out");
    /* a pivot range that does not fit a group */
    int64_t groups[3] = {0, 5, N};
    tt_cfg_set(cfg, TODRE_SELECT_PIVOT_HI, 10);
    a = args_of(emb, tt_array1(&o, kept, TODRE_DTYPE_I64, 18));
    a.groups = tt_array1(&g, groups, TODRE_DTYPE_I64, 3);
    tt_assert_fails(f->ctx, todre_select_ex(f->ctx, cfg, &a), TODRE_ERR_INVALID_ARGUMENT, "group 0");
    for (int i = 0; i < 18; i++) assert_true(kept[i] == SENTINEL);
    for (int i = 0; i < N; i++) assert_true(steps[i] == SENTINEL && scores[i] == -3.0f);
    assert_true(oo[0] == SENTINEL && oo[2] == SENTINEL);
    todre_select_config_destroy(cfg);
}

/* ---- positions ---------------------------------------------------------------------- */

static void test_positions_worked_example(void **state)
{
    (void)state;
    int64_t pos[6][3] = {{5, 5, 5}, {5, 5, 6}, {5, 5, 7}, {5, 6, 5}, {5, 6, 6}, {5, 6, 7}};
    int64_t kept[2] = {0, 4}, ids[2][3], next, delta;
    int64_t pshape[2] = {6, 3}, oshape[2] = {2, 3};
    tt_array p, k, o;
    const DLTensor *P = tt_array_init(&p, pos, TODRE_DTYPE_I64, 2, pshape, NULL);
    const DLTensor *K = tt_array1(&k, kept, TODRE_DTYPE_I64, 2);
    const DLTensor *O = tt_array_init(&o, ids, TODRE_DTYPE_I64, 2, oshape, NULL);
    tt_assert_ok(todre_positions(TODRE_POSITIONS_KEEP, P, K, O, &next, &delta));
    assert_int_equal(ids[1][1], 6);
    assert_int_equal(ids[1][2], 6);
    assert_int_equal(next, 8);
    assert_int_equal(delta, 1);
    tt_assert_ok(todre_positions(TODRE_POSITIONS_COMPACT, P, K, O, &next, &delta));
    assert_int_equal(ids[1][0], 6);
    assert_int_equal(ids[1][2], 6);
    assert_int_equal(next, 7);
    assert_int_equal(delta, 0);
    tt_assert_ok(todre_positions(TODRE_POSITIONS_KEEP_MAX, P, K, O, NULL, &delta));
    assert_int_equal(delta, 0);
}

static void test_positions_refusals(void **state)
{
    (void)state;
    int64_t pos[4] = {10, 11, 12, 13}, kept[3] = {2, 1, 3}, ids[3] = {SENTINEL, SENTINEL, SENTINEL};
    int64_t next = SENTINEL, delta = SENTINEL, big[1] = {INT64_MAX};
    int64_t pshape[2] = {4, 1}, oshape[2] = {3, 1}, wide[2] = {1, 9}, one[2] = {1, 1};
    tt_array p, k, o;
    const DLTensor *P = tt_array_init(&p, pos, TODRE_DTYPE_I64, 2, pshape, NULL);
    const DLTensor *O = tt_array_init(&o, ids, TODRE_DTYPE_I64, 2, oshape, NULL);
    tt_assert_fails(NULL, todre_positions((todre_positions_policy)3, P, tt_array1(&k, kept, TODRE_DTYPE_I64, 3), O, &next, &delta),
                    TODRE_ERR_INVALID_ARGUMENT, "policy");
    tt_assert_fails(NULL, todre_positions(TODRE_POSITIONS_KEEP, P, tt_array1(&k, kept, TODRE_DTYPE_I64, 3), O, &next, &delta),
                    TODRE_ERR_INVALID_ARGUMENT, "kept"); /* not ascending */
    kept[0] = 1;
    tt_assert_fails(NULL, todre_positions(TODRE_POSITIONS_KEEP, P, tt_array1(&k, kept, TODRE_DTYPE_I64, 3), O, &next, &delta),
                    TODRE_ERR_INVALID_ARGUMENT, "kept"); /* repeated */
    kept[0] = 0, kept[2] = 4;
    tt_assert_fails(NULL, todre_positions(TODRE_POSITIONS_KEEP, P, tt_array1(&k, kept, TODRE_DTYPE_I64, 3), O, &next, &delta),
                    TODRE_ERR_INVALID_ARGUMENT, "kept"); /* out of range */
    kept[2] = 3;
    tt_assert_fails(NULL, todre_positions(TODRE_POSITIONS_KEEP, tt_array1(&p, pos, TODRE_DTYPE_I64, 4), tt_array1(&k, kept, TODRE_DTYPE_I64, 3), O, &next, &delta),
                    TODRE_ERR_INVALID_ARGUMENT, "positions"); /* rank 1 */
    tt_assert_fails(NULL, todre_positions(TODRE_POSITIONS_KEEP, tt_array_init(&p, pos, TODRE_DTYPE_I64, 2, wide, NULL), tt_array1(&k, kept, TODRE_DTYPE_I64, 1), O, &next, &delta),
                    TODRE_ERR_INVALID_ARGUMENT, "positions"); /* P = 9 */
    tt_assert_fails(NULL, todre_positions(TODRE_POSITIONS_KEEP, tt_array_init(&p, pos, TODRE_DTYPE_I64, 2, pshape, NULL), tt_array1(&k, kept, TODRE_DTYPE_I64, 3), tt_array1(&o, ids, TODRE_DTYPE_I64, 3), &next, &delta),
                    TODRE_ERR_INVALID_ARGUMENT, "out"); /* out [3], not [3, 1] */
    tt_assert_fails(NULL, todre_positions(TODRE_POSITIONS_KEEP, tt_array_init(&p, big, TODRE_DTYPE_I64, 2, one, NULL), tt_array1(&k, kept, TODRE_DTYPE_I64, 1), tt_array_init(&o, ids, TODRE_DTYPE_I64, 2, one, NULL), &next, &delta),
                    TODRE_ERR_INVALID_ARGUMENT, "int64"); /* no next id */
    assert_true(ids[0] == SENTINEL && ids[1] == SENTINEL && ids[2] == SENTINEL);
    assert_true(next == SENTINEL && delta == SENTINEL);
}

/* ---- signatures ---------------------------------------------------------------------- */

static void test_signatures(void **state)
{
    (void)state;
    todre_select_config *cfg = NULL;
    tt_assert_ok(todre_select_config_create(&cfg));
    const char *want = "todre-select-1;objective=max-sum;pivot=auto;range=0,n;"
                       "ratio=0x1.999999999999ap-4;budget=set";
    size_t len = 0;
    tt_assert_ok(todre_select_config_signature(cfg, NULL, 0, &len)); /* the length only */
    assert_int_equal(len, strlen(want));
    char buf[256];
    memset(buf, '#', sizeof buf);
    tt_assert_fails(NULL, todre_select_config_signature(cfg, buf, len, &len), TODRE_ERR_INVALID_ARGUMENT,
                    "size");                       /* no room for the NUL */
    assert_int_equal(len, strlen(want));
    assert_true(buf[0] == '#');                    /* untouched */
    tt_assert_ok(todre_select_config_signature(cfg, buf, sizeof buf, &len));
    assert_string_equal(buf, want);
    tt_assert_fails(NULL, todre_select_config_signature(cfg, buf, sizeof buf, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "len");
    tt_assert_fails(NULL, todre_select_config_signature(NULL, buf, sizeof buf, &len),
                    TODRE_ERR_INVALID_ARGUMENT, "cfg");
    /* ORDER is not in it; SEED only for the RANDOM pivot */
    char other[256];
    tt_cfg_set(cfg, TODRE_SELECT_ORDER, TODRE_ORDER_SELECTION);
    tt_cfg_set(cfg, TODRE_SELECT_SEED, 99);
    tt_assert_ok(todre_select_config_signature(cfg, other, sizeof other, &len));
    assert_string_equal(other, want);
    tt_cfg_set(cfg, TODRE_SELECT_PIVOT, TODRE_PIVOT_RANDOM);
    tt_assert_ok(todre_select_config_signature(cfg, other, sizeof other, &len));
    assert_non_null(strstr(other, ";seed=99"));
    todre_select_config_destroy(cfg);

    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(32, 2, &rel));
    tt_assert_ok(todre_relevance_signature(rel, buf, sizeof buf, &len));
    assert_string_equal(buf, "todre-relevance-1;layers=32;tau=0x1.999999999999ap-4;schedule=list;"
                             "probes=28");
    tt_assert_fails(NULL, todre_relevance_signature(NULL, buf, sizeof buf, &len),
                    TODRE_ERR_INVALID_ARGUMENT, "rel");
    todre_relevance_destroy(rel);
}

/* ---- the contract gaps 1.1 closes --------------------------------------------------- */

/* Host memory has device_id 0 (DLPack), on every array of every call. */
static void test_host_arrays_have_device_id_zero(void **state)
{
    struct fx *f = *state;
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, 5,
                                         TODRE_ORDER_POSITION);
    int64_t kept[5] = {SENTINEL, SENTINEL, SENTINEL, SENTINEL, SENTINEL};
    tt_array e, o;
    const DLTensor *out = tt_array1(&o, kept, TODRE_DTYPE_I64, 5);
    tt_array_init(&e, f->rows, TODRE_DTYPE_F32, 2, (int64_t[]){N, D}, NULL);
    e.dl.device.device_id = 1;
    tt_assert_fails(f->ctx, todre_select(f->ctx, cfg, &e.dl, NULL, out), TODRE_ERR_INVALID_ARGUMENT,
                    "device_id");
    e.dl.device.device_type = kDLCUDAHost;
    tt_assert_fails(f->ctx, todre_select(f->ctx, cfg, &e.dl, NULL, out), TODRE_ERR_INVALID_ARGUMENT,
                    "device_id");
    assert_true(kept[0] == SENTINEL);
    e.dl.device.device_id = 0;
    tt_assert_ok(todre_select(f->ctx, cfg, &e.dl, NULL, out));
    todre_select_config_destroy(cfg);
}

/* The registry opens only regular files: a FIFO named libtodre-*.so on
 * $TODRE_BACKEND_PATH (it blocked the first registry call forever) is
 * listed as not loaded, and every call returns. In a fresh process (the
 * registry is built once per process: this program re-executed with
 * --fifo-child) under a 20-second alarm, which a hang would ring. */
static char self_path[4096];

static int fifo_child(void)
{
    int count = 0;
    if (todre_backend_count(&count) != TODRE_OK || count != 1) return 2;
    todre_context *ctx = NULL;
    if (todre_context_create("fifo", 0, &ctx) != TODRE_ERR_BACKEND_UNAVAILABLE) return 3;
    if (!strstr(todre_last_error(), "not a regular file")) {
        fprintf(stderr, "message: %s\n", todre_last_error());
        return 4;
    }
    return 0;
}

static void test_the_registry_skips_a_fifo(void **state)
{
    (void)state;
    char dir[] = "/tmp/todre-fifo-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char fifo[256];
    snprintf(fifo, sizeof fifo, "%s/libtodre-fifo.so", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20); /* kept across execv */
        setenv("TODRE_BACKEND_PATH", dir, 1);
        char *argv[] = {self_path, (char *)"--fifo-child", NULL};
        execv(self_path, argv);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    unlink(fifo);
    rmdir(dir);
    if (WIFSIGNALED(status)) fail_msg("the registry hung on a FIFO (signal %d)", WTERMSIG(status));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* todre_device_get_props(NULL, ...) is the device "auto" resolves to. */
static void test_device_props_of_null_is_auto(void **state)
{
    (void)state;
    todre_device_props a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.struct_size = b.struct_size = sizeof a;
    tt_assert_ok(todre_device_get_props(NULL, 0, &a));
    tt_assert_ok(todre_device_get_props("auto", 0, &b));
    assert_string_equal(a.name, b.name);
    assert_string_equal(a.arch, b.arch);
    assert_int_equal(a.cores, b.cores);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--fifo-child")) return fifo_child();
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (n <= 0) {
        fprintf(stderr, "cannot read /proc/self/exe\n");
        return 1;
    }
    self_path[n] = '\0';
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_counts_example),
        cmocka_unit_test(test_group_counts_refusals),
        cmocka_unit_test_setup_teardown(test_select_ex_equals_select_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_groups_select_each_group_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_minimums_above_the_budget_are_kept, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_select_ex_refusals, setup, teardown),
        cmocka_unit_test(test_positions_worked_example),
        cmocka_unit_test(test_positions_refusals),
        cmocka_unit_test(test_signatures),
        cmocka_unit_test_setup_teardown(test_host_arrays_have_device_id_zero, setup, teardown),
        cmocka_unit_test(test_the_registry_skips_a_fifo),
        cmocka_unit_test(test_device_props_of_null_is_auto),
    };
    return tt_run_tests(tests);
}
