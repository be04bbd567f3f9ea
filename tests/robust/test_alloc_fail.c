/* Allocation-failure injection: every allocation libtodre makes in a public
 * call fails in turn, and the call must cope.
 *
 * The allocator of this program is interposed (tests/robust/alloc_interpose.c):
 * it counts the allocations whose caller is libtodre.so.1 itself (never
 * OpenBLAS's, libgomp's or libc's) and fails the i-th one. For each public
 * call that allocates, with fresh handles each time:
 *   1. a reference run counts its allocations N and records its result;
 *   2. for i = 1 .. N, allocation i fails: the call must return
 *      TODRE_ERR_OUT_OF_MEMORY with a non-empty message (thread-local, and
 *      the context's for calls that take one), leave every output untouched
 *      (out-pointers, output arrays, the handle's observable state), and the
 *      next call on the same handles must succeed with the reference result;
 *   3. after the handles are destroyed, no allocation of libtodre is left
 *      (the interposer tracks them; the ASan stage adds LeakSanitizer).
 * The registry's first use is tested the same way in fresh child processes
 * (this program re-executed), with a backend module on $TODRE_BACKEND_PATH.
 *
 * Where the program cannot interpose the allocator (a sanitizer runtime
 * linked statically into it, clang's default) tests/robust/CMakeLists.txt does not
 * build it; should ai_init() still fail, the test fails. */
#define _GNU_SOURCE
#define TODRE_EXPERIMENTAL_API
#include "todre_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc_interpose.h"
#include "robust_util.h"

/* ---- inputs ------------------------------------------------------------------------ */

#define N 240   /* rows of the stage-1 input */
#define D 40
#define K 24    /* tokens kept */
#define SET0 60 /* select_batch: sets [0, 60) and [60, 240) */
#define RL 4    /* relevance: layers, batch, heads, key heads, positions, head dim */
#define RB 2
#define RH 2
#define RHKV 1
#define RK 40
#define RDH 16
#define PROBE 3 /* floor(7 * RL / 8): the default probe layer */

static float emb32[N * D], huge32[N * D], cls32[N];
static uint16_t emb16[N * D];
static float attn[RB * RH * RK * RK], qv[RB * RH * RK * RDH], kv[RB * RHKV * RK * RDH];
static uint8_t types_a[RB * RK], types_b[RB * RK];

static void make_inputs(void)
{
    tt_fill_clustered(emb32, N, D, D, 7, 0.4, 11);
    tt_to_f16(emb16, emb32, (size_t)N * D);
    memcpy(huge32, emb32, sizeof huge32);
    for (int i = 0; i < N; i += 7) /* rows whose raw products leave the fp32 range */
        for (int j = 0; j < D; j++) huge32[i * D + j] *= 1e16f;
    tt_rng r = {5};
    for (int i = 0; i < N; i++) cls32[i] = (float)tt_rng_uniform(&r);
    /* causal probabilities: row i spreads over keys 0..i */
    for (int s = 0; s < RB * RH; s++)
        for (int i = 0; i < RK; i++) {
            float *row = attn + ((size_t)s * RK + i) * RK;
            double sum = 0;
            for (int j = 0; j < RK; j++) {
                row[j] = j <= i ? (float)(0.1 + tt_rng_uniform(&r)) : 0.0f;
                sum += row[j];
            }
            for (int j = 0; j < RK; j++) row[j] = (float)(row[j] / sum);
        }
    tt_fill_clustered(qv, RB * RH * RK, RDH, RDH, 3, 0.7, 21);
    tt_fill_clustered(kv, RB * RHKV * RK, RDH, RDH, 3, 0.7, 22);
    /* A: [4 system | 24 visual | 12 text]; B: another split per sequence */
    for (int b = 0; b < RB; b++)
        for (int j = 0; j < RK; j++) {
            types_a[b * RK + j] = j < 4 ? TODRE_TOKEN_SYSTEM : j < 28 ? TODRE_TOKEN_VISUAL
                                                                      : TODRE_TOKEN_TEXT;
            int vis_end = b == 0 ? 30 : 20;
            types_b[b * RK + j] = j < 2 ? TODRE_TOKEN_SYSTEM : j < vis_end ? TODRE_TOKEN_VISUAL
                                                                            : TODRE_TOKEN_TEXT;
        }
}

/* ---- one case: a public call, its handles, its outputs ------------------------------- */

#define SENTINEL ((void *)(uintptr_t)0x5eed)
#define OUT_POISON INT64_C(-7777)

struct fx {
    todre_context *ctx;
    todre_select_config *cfg;
    todre_relevance *rel;
    void *made;                /* out-pointer of create / alloc calls */
    int64_t out[2 * N];        /* stage-1 output */
    int64_t out_off[3];        /* select_batch out_offsets */
    int32_t decisions[RB];
    /* per case */
    todre_objective obj;
    todre_pivot piv;
    todre_order order;
    int64_t strategy, limit;
    todre_dtype dt;
    const float *src32;        /* stage-1 f32 data (emb32 or huge32) */
    int with_cls;
};

/* What a case observes: raw bytes compared between runs. */
struct snap {
    unsigned char b[8192];
    size_t n;
};

static void snap_add(struct snap *s, const void *p, size_t n)
{
    assert_true(s->n + n <= sizeof s->b);
    memcpy(s->b + s->n, p, n);
    s->n += n;
}

struct alloc_case {
    const char *name;
    void (*setup)(struct fx *f);
    todre_status (*call)(struct fx *f);
    /* outputs a failed call must leave as they were (also compared with the
     * reference after the retry: the retry's result) */
    void (*outputs)(struct fx *f, struct snap *s);
    /* the result of a successful call, handle values excluded */
    void (*result)(struct fx *f, struct snap *s);
    void (*teardown)(struct fx *f);
    int takes_ctx;      /* the call reports on f->ctx too */
    int outputs_differ; /* outputs are new handles: compare result() only */
};

static void destroy_all(struct fx *f)
{
    todre_relevance_destroy(f->rel);
    todre_select_config_destroy(f->cfg);
    todre_context_destroy(f->ctx);
    f->rel = NULL;
    f->cfg = NULL;
    f->ctx = NULL;
}

/* ---- creation calls ------------------------------------------------------------------ */

static void setup_made(struct fx *f) { f->made = SENTINEL; }

static void outputs_made(struct fx *f, struct snap *s) { snap_add(s, &f->made, sizeof f->made); }

static todre_status call_ctx_cpu(struct fx *f)
{
    return todre_context_create("cpu", 0, (todre_context **)&f->made);
}

static todre_status call_ctx_auto(struct fx *f)
{
    return todre_context_create("auto", 0, (todre_context **)&f->made);
}

/* A context's result: its backend, device and parameters, and that it works. */
static void result_ctx(struct fx *f, struct snap *s)
{
    todre_context *ctx = f->made;
    assert_true(ctx != NULL && ctx != SENTINEL);
    const char *name = todre_context_backend(ctx);
    snap_add(s, name, strlen(name) + 1);
    DLDevice dev;
    tt_assert_ok(todre_context_device(ctx, &dev));
    snap_add(s, &dev, sizeof dev);
    int64_t v;
    tt_assert_ok(todre_context_get_int(ctx, TODRE_CONTEXT_WORKSPACE_LIMIT, &v));
    snap_add(s, &v, sizeof v);
    tt_assert_ok(todre_context_get_int(ctx, TODRE_CONTEXT_NUM_THREADS, &v));
    snap_add(s, &v, sizeof v);
}

static void teardown_ctx(struct fx *f)
{
    if (f->made != SENTINEL) todre_context_destroy(f->made);
    f->made = NULL;
}

static todre_status call_cfg(struct fx *f)
{
    return todre_select_config_create((todre_select_config **)&f->made);
}

static void result_cfg(struct fx *f, struct snap *s)
{
    todre_select_config *cfg = f->made;
    assert_true(cfg != NULL && cfg != SENTINEL);
    int64_t k;
    tt_assert_ok(todre_select_keep_count(cfg, 2880, &k));
    snap_add(s, &k, sizeof k);
}

static void teardown_cfg(struct fx *f)
{
    if (f->made != SENTINEL) todre_select_config_destroy(f->made);
    f->made = NULL;
}

static todre_status call_rel(struct fx *f)
{
    return todre_relevance_create(RL, RB, (todre_relevance **)&f->made);
}

static void result_rel(struct fx *f, struct snap *s)
{
    todre_relevance *rel = f->made;
    assert_true(rel != NULL && rel != SENTINEL);
    int64_t v, layers[RL], count = 0;
    tt_assert_ok(todre_relevance_get_int(rel, TODRE_RELEVANCE_NUM_LAYERS, &v));
    snap_add(s, &v, sizeof v);
    tt_assert_ok(todre_relevance_get_int(rel, TODRE_RELEVANCE_BATCH, &v));
    snap_add(s, &v, sizeof v);
    tt_array a;
    tt_assert_ok(todre_relevance_get_probe_layers(rel, tt_array1(&a, layers, TODRE_DTYPE_I64, RL),
                                                  &count));
    snap_add(s, layers, (size_t)count * sizeof layers[0]);
    tt_assert_ok(todre_relevance_drop_layer(rel, RB - 1, &v));
    snap_add(s, &v, sizeof v);
}

static void teardown_rel(struct fx *f)
{
    if (f->made != SENTINEL) todre_relevance_destroy(f->made);
    f->made = NULL;
}

static void setup_ctx_and_made(struct fx *f)
{
    f->ctx = tt_cpu_context();
    f->made = SENTINEL;
}

static todre_status call_alloc(struct fx *f)
{
    return todre_context_alloc(f->ctx, (size_t)1 << 20, &f->made);
}

static void result_alloc(struct fx *f, struct snap *s)
{
    assert_true(f->made != NULL && f->made != SENTINEL);
    assert_int_equal((uintptr_t)f->made % 256, 0);
    memset(f->made, 0xab, (size_t)1 << 20); /* usable: ASan would catch a short block */
    int one = 1;
    snap_add(s, &one, sizeof one);
}

static void teardown_alloc(struct fx *f)
{
    if (f->made != SENTINEL) tt_assert_ok(todre_context_free(f->ctx, f->made));
    f->made = NULL;
    destroy_all(f);
}

/* ---- stage 1 ---------------------------------------------------------------------------- */

static void setup_select(struct fx *f)
{
    f->ctx = tt_cpu_context();
    if (f->strategy) tt_ctx_set(f->ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, f->strategy);
    if (f->limit >= 0) tt_ctx_set(f->ctx, TODRE_CONTEXT_WORKSPACE_LIMIT, f->limit);
    f->cfg = tt_config(f->obj, f->piv, K, f->order);
    tt_cfg_set(f->cfg, TODRE_SELECT_SEED, 99);
    for (size_t i = 0; i < sizeof f->out / sizeof f->out[0]; i++) f->out[i] = OUT_POISON;
    for (int i = 0; i < 3; i++) f->out_off[i] = OUT_POISON;
}

static const void *stage1_data(const struct fx *f)
{
    return f->dt == TODRE_DTYPE_F16 ? (const void *)emb16 : (const void *)f->src32;
}

static todre_status call_select(struct fx *f)
{
    tt_array e, c, o;
    const DLTensor *emb = tt_array2(&e, (void *)(uintptr_t)stage1_data(f), f->dt, N, D, D);
    const DLTensor *cls = f->with_cls ? tt_array1(&c, cls32, TODRE_DTYPE_F32, N) : NULL;
    int64_t shape[2] = {2, K};
    const DLTensor *out = f->order == TODRE_ORDER_BOTH
                              ? tt_array_init(&o, f->out, TODRE_DTYPE_I64, 2, shape, NULL)
                              : tt_array1(&o, f->out, TODRE_DTYPE_I64, K);
    return todre_select(f->ctx, f->cfg, emb, cls, out);
}

static void outputs_select(struct fx *f, struct snap *s)
{
    snap_add(s, f->out, sizeof f->out);
    snap_add(s, f->out_off, sizeof f->out_off);
}

static todre_status call_select_batch(struct fx *f)
{
    tt_array e, c, off, kp, o, oo;
    int64_t offsets[3] = {0, SET0, N}, keep[2] = {8, K - 8};
    const DLTensor *emb = tt_array2(&e, (void *)(uintptr_t)stage1_data(f), f->dt, N, D, D);
    const DLTensor *cls = f->with_cls ? tt_array1(&c, cls32, TODRE_DTYPE_F32, N) : NULL;
    int64_t shape[2] = {2, K};
    const DLTensor *out = f->order == TODRE_ORDER_BOTH
                              ? tt_array_init(&o, f->out, TODRE_DTYPE_I64, 2, shape, NULL)
                              : tt_array1(&o, f->out, TODRE_DTYPE_I64, K);
    return todre_select_batch(f->ctx, f->cfg, emb, cls,
                              tt_array1(&off, offsets, TODRE_DTYPE_I64, 3),
                              tt_array1(&kp, keep, TODRE_DTYPE_I64, 2), out,
                              tt_array1(&oo, f->out_off, TODRE_DTYPE_I64, 3));
}

/* ---- stage 2 ---------------------------------------------------------------------------- */

static void setup_rel_types(struct fx *f)
{
    tt_assert_ok(todre_relevance_create(RL, RB, &f->rel));
    tt_array t;
    tt_assert_ok(todre_relevance_set_types(
        f->rel, tt_array_init(&t, types_a, TODRE_DTYPE_U8, 2, (int64_t[]){RB, RK}, NULL)));
}

/* What a relevance handle shows: its positions to keep, drop layers, and
 * which layers were observed with which ratios. */
static void rel_state(todre_relevance *rel, struct snap *s)
{
    for (int64_t b = 0; b < RB; b++) {
        int64_t pos[RK], count = -1, drop = -9;
        tt_array a;
        tt_assert_ok(todre_relevance_keep_positions(rel, b, tt_array1(&a, pos, TODRE_DTYPE_I64, RK),
                                                    &count));
        snap_add(s, &count, sizeof count);
        snap_add(s, pos, (size_t)count * sizeof pos[0]);
        tt_assert_ok(todre_relevance_drop_layer(rel, b, &drop));
        snap_add(s, &drop, sizeof drop);
        for (int64_t l = 0; l < RL; l++) {
            double r[2] = {-1, -1};
            todre_status st = todre_relevance_ratios(rel, b, l, &r[0], &r[1]);
            assert_true(st == TODRE_OK || st == TODRE_ERR_STATE);
            snap_add(s, &st, sizeof st);
            snap_add(s, r, sizeof r);
        }
    }
}

static void outputs_rel(struct fx *f, struct snap *s)
{
    snap_add(s, f->decisions, sizeof f->decisions);
    rel_state(f->rel, s);
}

static void teardown_all(struct fx *f) { destroy_all(f); }

static todre_status call_set_types(struct fx *f)
{
    tt_array t;
    return todre_relevance_set_types(
        f->rel, tt_array_init(&t, types_b, TODRE_DTYPE_U8, 2, (int64_t[]){RB, RK}, NULL));
}

static todre_status call_set_layout(struct fx *f)
{
    return todre_relevance_set_layout(f->rel, 3, 25, RK - 28);
}

static void setup_observe(struct fx *f)
{
    f->ctx = tt_cpu_context();
    setup_rel_types(f);
    for (int b = 0; b < RB; b++) f->decisions[b] = -5;
}

static todre_status call_observe_probs(struct fx *f)
{
    tt_array a, d;
    int64_t shape[4] = {RB, RH, RK, RK};
    return todre_relevance_observe_probs(f->ctx, f->rel, PROBE,
                                         tt_array_init(&a, attn, TODRE_DTYPE_F32, 4, shape, NULL),
                                         tt_array1(&d, f->decisions, TODRE_DTYPE_I32, RB));
}

static todre_status call_observe_qk(struct fx *f)
{
    tt_array q, k, d;
    int64_t qs[4] = {RB, RH, RK, RDH}, ks[4] = {RB, RHKV, RK, RDH};
    return todre_relevance_observe_qk(f->ctx, f->rel, PROBE,
                                      tt_array_init(&q, qv, TODRE_DTYPE_F32, 4, qs, NULL),
                                      tt_array_init(&k, kv, TODRE_DTYPE_F32, 4, ks, NULL), 0.0,
                                      tt_array1(&d, f->decisions, TODRE_DTYPE_I32, RB));
}

/* ---- the driver ----------------------------------------------------------------------- */

static void no_result(struct fx *f, struct snap *s)
{
    (void)f;
    (void)s;
}

/* The reference run (nothing fails), then each allocation failing in turn. */
static void run_case(const struct alloc_case *c, const struct fx *proto)
{
    const long live0 = ai_live();
    struct fx f = *proto;
    struct snap ref = {{0}, 0}, ref_out = {{0}, 0};

    c->setup(&f);
    ai_arm(0);
    todre_status st = c->call(&f);
    const long nalloc = ai_disarm();
    tt_assert_ok(st);
    c->outputs(&f, &ref_out);
    c->result(&f, &ref);
    c->teardown(&f);
    if (ai_live() != live0)
        fail_msg("%s: %ld allocations of libtodre outlive the handles (reference run)", c->name,
                 ai_live() - live0);
    if (nalloc < 1) fail_msg("%s: the call made no allocation to fail", c->name);

    for (long i = 1; i <= nalloc; i++) {
        f = *proto;
        c->setup(&f);
        struct snap before = {{0}, 0}, after = {{0}, 0}, retry = {{0}, 0}, retry_out = {{0}, 0};
        c->outputs(&f, &before);
        ai_arm(i);
        st = c->call(&f);
        ai_disarm();
        if (!ai_injected())
            fail_msg("%s: allocation %ld of %ld was not reached (the allocations are not "
                     "deterministic)", c->name, i, nalloc);
        if (st == TODRE_OK) {
            /* survived the failure: only acceptable with the reference result */
            c->outputs(&f, &after);
            c->result(&f, &retry);
            if ((!c->outputs_differ &&
                 (after.n != ref_out.n || memcmp(after.b, ref_out.b, after.n) != 0)) ||
                retry.n != ref.n || memcmp(retry.b, ref.b, ref.n) != 0)
                fail_msg("%s: allocation %ld of %ld failed, the call returned TODRE_OK with a "
                         "result other than the reference", c->name, i, nalloc);
            print_message("  %s: allocation %ld of %ld failed; the call recovered (same "
                          "result)\n", c->name, i, nalloc);
        } else {
            const char *msg = todre_last_error();
            if (st != TODRE_ERR_OUT_OF_MEMORY)
                fail_msg("%s: allocation %ld of %ld failed: returned %s, expected "
                         "TODRE_ERR_OUT_OF_MEMORY (message: \"%s\")",
                         c->name, i, nalloc, todre_status_string(st), msg);
            if (!msg[0])
                fail_msg("%s: allocation %ld of %ld failed: empty message", c->name, i, nalloc);
            if (c->takes_ctx && !todre_context_last_error(f.ctx)[0])
                fail_msg("%s: allocation %ld of %ld failed: empty context message", c->name, i,
                         nalloc);
            if (i == 1) print_message("  %s: \"%s\"\n", c->name, msg);
            c->outputs(&f, &after);
            if (after.n != before.n || memcmp(after.b, before.b, after.n) != 0)
                fail_msg("%s: allocation %ld of %ld failed: the call returned %s but changed "
                         "its outputs", c->name, i, nalloc, todre_status_string(st));
            /* the same call on the same handles, nothing failing */
            tt_assert_ok(c->call(&f));
            c->outputs(&f, &retry_out);
            c->result(&f, &retry);
            if ((!c->outputs_differ &&
                 (retry_out.n != ref_out.n || memcmp(retry_out.b, ref_out.b, ref_out.n) != 0)) ||
                retry.n != ref.n || memcmp(retry.b, ref.b, ref.n) != 0)
                fail_msg("%s: after allocation %ld of %ld failed, the next call succeeded "
                         "with another result", c->name, i, nalloc);
        }
        c->teardown(&f);
        if (ai_live() != live0)
            fail_msg("%s: allocation %ld of %ld failed: %ld allocations of libtodre (%zu "
                     "bytes) leaked", c->name, i, nalloc, ai_live() - live0,
                     ai_live_bytes());
    }
    print_message("  %s: %ld allocations, each failed in turn\n", c->name, nalloc);
}

/* ---- the cases ------------------------------------------------------------------------- */

static const struct fx base = {.limit = -1, .dt = TODRE_DTYPE_F32, .src32 = emb32,
                               .obj = TODRE_OBJECTIVE_MAX_SUM, .piv = TODRE_PIVOT_CENTER,
                               .order = TODRE_ORDER_BOTH};

static void creation_calls(void **state)
{
    (void)state;
    const struct alloc_case cases[] = {
        {"todre_context_create(\"cpu\")", setup_made, call_ctx_cpu, outputs_made, result_ctx,
         teardown_ctx, 0, 1},
        {"todre_context_create(\"auto\")", setup_made, call_ctx_auto, outputs_made, result_ctx,
         teardown_ctx, 0, 1},
        {"todre_select_config_create", setup_made, call_cfg, outputs_made, result_cfg,
         teardown_cfg, 0, 1},
        {"todre_relevance_create", setup_made, call_rel, outputs_made, result_rel, teardown_rel,
         0, 1},
        {"todre_context_alloc", setup_ctx_and_made, call_alloc, outputs_made, result_alloc,
         teardown_alloc, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], &base);
}

static void select_calls(void **state)
{
    (void)state;
    struct alloc_case sel = {"", setup_select, call_select, outputs_select, no_result,
                             teardown_all, 1, 0};
    struct fx f = base;
    sel.name = "todre_select (MAX_SUM, GEMV, f32)"; /* the workspace, the host tables */
    f.strategy = 1;
    run_case(&sel, &f);
    sel.name = "todre_select (RANDOM pivot, ORDER_SELECTION)"; /* the drawn pivot's table */
    f.piv = TODRE_PIVOT_RANDOM;
    f.order = TODRE_ORDER_SELECTION;
    run_case(&sel, &f);
    sel.name = "todre_select (CLS pivot, GRAM, f16)"; /* fp32 copy or AMX packing, matrix */
    f = base;
    f.strategy = 2;
    f.dt = TODRE_DTYPE_F16;
    f.piv = TODRE_PIVOT_CLS;
    f.with_cls = 1;
    run_case(&sel, &f);
    sel.name = "todre_select (MAX_MIN, ISOLATED, f16, small limit)"; /* blocked products */
    f = base;
    f.obj = TODRE_OBJECTIVE_MAX_MIN;
    f.piv = TODRE_PIVOT_ISOLATED;
    f.dt = TODRE_DTYPE_F16;
    f.limit = 64 * N * 4;
    run_case(&sel, &f);
    sel.name = "todre_select (rows beyond the fp32 range, GRAM)"; /* normalised fp32 copy */
    f = base;
    f.src32 = huge32;
    f.strategy = 2;
    run_case(&sel, &f);
    sel.name = "todre_select (CLS_TOPK, ORDER_POSITION)";
    f = base;
    f.obj = TODRE_OBJECTIVE_CLS_TOPK;
    f.with_cls = 1;
    f.order = TODRE_ORDER_POSITION;
    run_case(&sel, &f);
}

static void select_batch_calls(void **state)
{
    (void)state;
    struct alloc_case batch = {"", setup_select, call_select_batch, outputs_select, no_result,
                               teardown_all, 1, 0};
    struct fx f = base;
    batch.name = "todre_select_batch (GEMV, f32)";
    f.strategy = 1;
    run_case(&batch, &f);
    /* the second (larger) set grows the workspace after the first set is done */
    batch.name = "todre_select_batch (GRAM, f16)";
    f.strategy = 2;
    f.dt = TODRE_DTYPE_F16;
    run_case(&batch, &f);
}

static void relevance_calls(void **state)
{
    (void)state;
    const struct alloc_case cases[] = {
        {"todre_relevance_set_types", setup_rel_types, call_set_types, outputs_rel, no_result,
         teardown_all, 0, 0},
        {"todre_relevance_set_layout", setup_rel_types, call_set_layout, outputs_rel, no_result,
         teardown_all, 0, 0},
        {"todre_relevance_observe_probs", setup_observe, call_observe_probs, outputs_rel,
         no_result, teardown_all, 1, 0},
        {"todre_relevance_observe_qk", setup_observe, call_observe_qk, outputs_rel, no_result,
         teardown_all, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], &base);
}

/* ---- the registry's first use, in fresh processes ---------------------------------------- */

/* Child: the first libtodre call of the process with allocation @p fail_at
 * failing, then a description of the registry (nothing failing). */
static int registry_child(const char *first, long fail_at)
{
    if (!ai_init()) return 3;
    int count = -1;
    todre_context *ctx = (todre_context *)SENTINEL;
    ai_arm(fail_at);
    todre_status st = strcmp(first, "count") == 0 ? todre_backend_count(&count)
                                                   : todre_context_create("auto", 0, &ctx);
    long n = ai_disarm();
    printf("allocs %ld injected %d\n", n, ai_injected());
    printf("status %s%s%s\n", todre_status_string(st), st ? " " : "", st ? todre_last_error() : "");
    if (st != TODRE_OK && ctx != SENTINEL) printf("ctx written on failure\n");
    if (st == TODRE_OK && ctx != SENTINEL) todre_context_destroy(ctx);
    if (todre_backend_count(&count) != TODRE_OK) return 4;
    /* what the process can use: the backends, their availability and devices */
    printf("count %d\n", count);
    todre_backend_props p[16];
    for (int i = 0; i < count && i < 16; i++) {
        memset(&p[i], 0, sizeof p[i]);
        p[i].struct_size = sizeof p[i];
        if (todre_backend_get_props(i, &p[i]) != TODRE_OK) return 5;
        printf("backend %s available %d devices %d\n", p[i].name, (int)p[i].available,
               (int)p[i].device_count);
    }
    /* what it says about them */
    printf("-- details\n");
    for (int i = 0; i < count && i < 16; i++)
        printf("backend %s path %s reason %s\n", p[i].name, p[i].path, p[i].reason);
    ctx = NULL;
    st = todre_context_create("nosuch", 0, &ctx);
    printf("nosuch: %s: %s\n", todre_status_string(st), todre_last_error());
    st = todre_context_create("robustfake", 0, &ctx);
    printf("robustfake: %s: %s\n", todre_status_string(st), todre_last_error());
    return 0;
}

/* The directory of the test module (the registry scans it). */
static const char *module_dir(void)
{
    static char path[4096];
    const char *dir = getenv("TODRE_BINARY_DIR");
    snprintf(path, sizeof path, "%s/tests/robust", dir ? dir : ".");
    return path;
}

static void run_registry_child(const char *first, long fail_at, char *out, size_t cap)
{
    char arg[32], env[8192], why[64];
    snprintf(arg, sizeof arg, "%ld", fail_at);
    snprintf(env, sizeof env, "TODRE_BACKEND_PATH=/nonexistent/libtodre-gone.so:%s",
             module_dir());
    const char *args[] = {"--registry-child", first, arg, NULL};
    const char *envs[] = {env, NULL};
    int status = rb_run_self(args, envs, out, cap);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("registry child (first call %s, allocation %ld failing) %s; output:\n%s", first,
                 fail_at, rb_status_text(status, why, sizeof why), out);
}

static void registry_first_use(void **state)
{
    (void)state;
    struct stat sb;
    char module[4200];
    snprintf(module, sizeof module, "%s/libtodre-robustfake.so", module_dir());
    if (stat(module, &sb) != 0) fail_msg("test module %s is missing", module);
    static const char *firsts[] = {"count", "context"};
    char ref[16384], got[16384];
    for (int f = 0; f < 2; f++) {
        run_registry_child(firsts[f], 0, ref, sizeof ref);
        long n = -1;
        assert_int_equal(sscanf(ref, "allocs %ld", &n), 1);
        assert_non_null(strstr(ref, "backend robustfake path")); /* the module registered */
        assert_true(n >= 1);
        const char *ref_reg = strstr(ref, "count ");
        assert_non_null(ref_reg);
        int degraded = 0;
        for (long i = 1; i <= n; i++) {
            run_registry_child(firsts[f], i, got, sizeof got);
            if (!strstr(got, "injected 1"))
                fail_msg("registry (first call %s): allocation %ld of %ld not reached:\n%s",
                         firsts[f], i, n, got);
            const char *st = strstr(got, "status ");
            assert_non_null(st);
            if (strncmp(st, "status TODRE_OK", 15) != 0 &&
                strncmp(st, "status TODRE_ERR_OUT_OF_MEMORY ", 31) != 0)
                fail_msg("registry (first call %s): allocation %ld of %ld failed: %.*s",
                         firsts[f], i, n, (int)strcspn(st, "\n"), st);
            if (strstr(got, "ctx written on failure"))
                fail_msg("registry (first call %s): allocation %ld of %ld failed: out-pointer "
                         "written", firsts[f], i, n);
            /* the registry the process keeps must hold the backends it would
             * have had; its texts may fall back to placeholders ("?") */
            const char *reg = strstr(got, "count "), *det = strstr(got, "-- details");
            const char *ref_det = strstr(ref_reg, "-- details");
            assert_non_null(ref_det);
            if (!reg || !det || det - reg != ref_det - ref_reg ||
                strncmp(reg, ref_reg, (size_t)(det - reg)) != 0)
                fail_msg("registry (first call %s): allocation %ld of %ld failed during the "
                         "scan; the process keeps another set of backends.\nexpected:\n%.*s"
                         "got:\n%s", firsts[f], i, n, (int)(ref_det - ref_reg), ref_reg,
                         reg ? reg : got);
            if (strcmp(det, ref_det) != 0) degraded++;
        }
        print_message("  registry first use (%s): %ld allocations, each failed in turn; %d "
                      "left a placeholder text\n", firsts[f], n, degraded);
    }
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--registry-child") == 0)
        return registry_child(argv[2], strtol(argv[3], NULL, 10));
    if (!ai_init()) {
        printf("allocation interposition is not possible in this build (a statically linked "
               "sanitizer runtime defines the allocator); tests/robust/CMakeLists.txt should not have "
               "registered this test\n");
        return 1;
    }
    make_inputs();
    /* the registry is built once per process: build it now, so that the cases
     * below see only their own call's allocations */
    int count = 0;
    tt_assert_ok(todre_backend_count(&count));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(creation_calls),
        cmocka_unit_test(select_calls),
        cmocka_unit_test(select_batch_calls),
        cmocka_unit_test(relevance_calls),
        cmocka_unit_test(registry_first_use),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
