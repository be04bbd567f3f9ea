/* Validation classes found by the fuzzers (docs/testing.md, "Fuzzing"),
 * each on every call it applies to:
 *
 *  1. non-finite scores in the fused stage-2 path: finite q and k whose
 *     scale * q . k overflows float32 (to +Inf, -Inf or NaN), a scale above
 *     FLT_MAX, NaN / Inf keys under grouped-query attention (every key head,
 *     every query head of its group): TODRE_ERR_NONFINITE (or
 *     INVALID_ARGUMENT naming `scale`), outputs untouched, the handle usable;
 *     under UBSan (clang build) no float-cast-overflow on the way;
 *  2. misaligned arrays: data + byte_offset not a multiple of the element
 *     size, for every array of 2 bytes or more of every call, through the
 *     byte_offset and through the data pointer: INVALID_ARGUMENT naming the
 *     array, nothing read or written;
 *  3. attention probabilities near FLT_MAX: finite ratios equal to a float64
 *     reference (f32 and bf16, also with Inf - Inf in float partial sums);
 *  4. aliased outputs: a zero stride over an extent > 1 (and interleaved
 *     strides) at every output: INVALID_ARGUMENT naming the output.
 *
 * Every refused call is followed by the same call without the fault on the
 * same handles, which must succeed. */
#include "todre_test.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NB = 2, NH = 4, NHKV = 2, NK = 6, DH = 8, NL = 2, LAYER = 1 };
enum { N = 6, D = 4, KEEP = 3, SLACK = 8 };

/* [1 system | 3 visual | 2 text] */
#define N_SYS 1
#define N_VIS 3
#define N_TXT 2

struct fx {
    todre_context *ctx;
    todre_relevance *rel;
    todre_select_config *cfg, *cfg_both;
    /* inputs (each with SLACK elements past the end, so that a misaligned
     * view a broken library would read stays inside the buffer) */
    float emb[N * D + SLACK];
    uint16_t emb16[N * D + SLACK];
    float cls[N + SLACK];
    uint16_t cls16[N + SLACK];
    int64_t offsets[3 + SLACK], keep[2 + SLACK], layers[2 + SLACK];
    float src[4 + SLACK];
    float attn[NB * NH * NK * NK + SLACK];
    uint16_t attn16[NB * NH * NK * NK + SLACK];
    float q[NB * NH * NK * DH + SLACK], k[NB * NHKV * NK * DH + SLACK];
    uint16_t q16[NB * NH * NK * DH + SLACK], k16[NB * NHKV * NK * DH + SLACK];
    /* outputs: every byte is checked against the sentinel after a refusal */
    int64_t out[2 * N + SLACK];
    int64_t out_offsets[3 + SLACK];
    float dst[4 + SLACK];
    int32_t dec[NB + SLACK];
};

#define SENTINEL 0xA5

static void fill_outputs(struct fx *f)
{
    memset(f->out, SENTINEL, sizeof f->out);
    memset(f->out_offsets, SENTINEL, sizeof f->out_offsets);
    memset(f->dst, SENTINEL, sizeof f->dst);
    memset(f->dec, SENTINEL, sizeof f->dec);
}

static int untouched(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != SENTINEL) return 0;
    return 1;
}

static void assert_outputs_untouched(const struct fx *f)
{
    assert_true(untouched(f->out, sizeof f->out));
    assert_true(untouched(f->out_offsets, sizeof f->out_offsets));
    assert_true(untouched(f->dst, sizeof f->dst));
    assert_true(untouched(f->dec, sizeof f->dec));
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    if (!f) return -1;
    f->ctx = tt_cpu_context();
    f->cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, KEEP, TODRE_ORDER_POSITION);
    f->cfg_both = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, KEEP, TODRE_ORDER_BOTH);
    tt_assert_ok(todre_relevance_create(NL, NB, &f->rel));
    tt_assert_ok(todre_relevance_set_layout(f->rel, N_SYS, N_VIS, N_TXT));
    tt_rng r = {12};
    for (int i = 0; i < N * D; i++) f->emb[i] = (float)tt_rng_normal(&r);
    for (int i = 0; i < N; i++) f->cls[i] = (float)tt_rng_uniform(&r);
    tt_to_f16(f->emb16, f->emb, N * D);
    tt_to_bf16(f->cls16, f->cls, N);
    f->offsets[0] = 0, f->offsets[1] = 3, f->offsets[2] = N;
    f->keep[0] = 2, f->keep[1] = 1;
    f->layers[0] = 0, f->layers[1] = 1;
    for (int i = 0; i < 4; i++) f->src[i] = (float)i;
    for (int i = 0; i < NB * NH * NK * NK; i++) f->attn[i] = (float)tt_rng_uniform(&r);
    for (int i = 0; i < NB * NH * NK * DH; i++) f->q[i] = (float)tt_rng_normal(&r);
    for (int i = 0; i < NB * NHKV * NK * DH; i++) f->k[i] = (float)tt_rng_normal(&r);
    tt_to_bf16(f->attn16, f->attn, NB * NH * NK * NK);
    tt_to_f16(f->q16, f->q, NB * NH * NK * DH);
    tt_to_f16(f->k16, f->k, NB * NHKV * NK * DH);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    todre_relevance_destroy(f->rel);
    todre_select_config_destroy(f->cfg);
    todre_select_config_destroy(f->cfg_both);
    todre_context_destroy(f->ctx);
    free(f);
    return 0;
}

/* ---- faults ------------------------------------------------------------------ */

enum fault { F_NONE = 0, F_OFFSET, F_DATA, F_ALIAS, F_INTERLEAVE };

static const char *fault_name(enum fault k)
{
    static const char *names[] = {"none", "misaligned byte_offset", "misaligned data",
                                  "zero stride", "interleaved strides"};
    return names[k];
}

/* Apply @p k to @p a; 0 when it does not apply to this array (1-byte
 * elements cannot be misaligned; a layout needs an extent > 1 to alias). */
static int apply_fault(tt_array *a, enum fault k)
{
    DLTensor *dl = &a->dl;
    size_t esize = dl->dtype.bits / 8u;
    int64_t compact = 1;
    switch (k) {
    case F_NONE: return 1;
    case F_OFFSET:
    case F_DATA:
        if (esize < 2) return 0;
        /* half an element: aligned to every smaller power of two */
        if (k == F_OFFSET) dl->byte_offset += esize / 2;
        else dl->data = (char *)dl->data + esize / 2;
        return 1;
    case F_ALIAS:
    case F_INTERLEAVE:
        if (!dl->strides) { /* make the compact strides explicit */
            for (int i = dl->ndim - 1; i >= 0; i--) {
                a->strides[i] = compact;
                compact *= a->shape[i];
            }
            dl->strides = a->strides;
        }
        if (k == F_ALIAS) {
            for (int i = 0; i < dl->ndim; i++)
                if (a->shape[i] > 1) {
                    a->strides[i] = 0;
                    return 1;
                }
            return 0;
        }
        /* rank 2 with both extents > 1: rows one element apart, so row 1
         * starts inside row 0 */
        if (dl->ndim != 2 || a->shape[0] < 2 || a->shape[1] < 2) return 0;
        a->strides[0] = a->shape[1] - 1;
        return 1;
    }
    return 0;
}

/* ---- the calls, each with its arrays ---------------------------------------------- */

#define MAX_ARRAYS 6

struct call {
    const char *label;
    int narrays;
    int ctx_call; /* takes the context: its message is checked too */
    const char *names[MAX_ARRAYS];
    int is_output[MAX_ARRAYS];
    /* Build the arrays, apply @p k to array @p which (-1: none; *applied = 0
     * when it does not apply, and the call is not made), run the call. */
    todre_status (*run)(struct fx *f, int which, enum fault k, int *applied);
};

static todre_status finish(tt_array *arrs, int n, int which, enum fault k, int *applied)
{
    *applied = 1;
    if (which >= 0 && which < n) *applied = apply_fault(&arrs[which], k);
    return TODRE_OK;
}

static todre_status run_select(struct fx *f, int which, enum fault k, int *applied)
{
    tt_array a[3];
    tt_array2(&a[0], f->emb, TODRE_DTYPE_F32, N, D, D);
    tt_array1(&a[1], f->cls, TODRE_DTYPE_F32, N);
    tt_array1(&a[2], f->out, TODRE_DTYPE_I64, KEEP);
    finish(a, 3, which, k, applied);
    if (!*applied) return TODRE_OK;
    return todre_select(f->ctx, f->cfg, &a[0].dl, &a[1].dl, &a[2].dl);
}

/* 16-bit inputs and the [2, k] output of ORDER_BOTH. */
static todre_status run_select_both(struct fx *f, int which, enum fault k, int *applied)
{
    tt_array a[3];
    int64_t oshape[2] = {2, KEEP};
    tt_array2(&a[0], f->emb16, TODRE_DTYPE_F16, N, D, D);
    tt_array1(&a[1], f->cls16, TODRE_DTYPE_BF16, N);
    tt_array_init(&a[2], f->out, TODRE_DTYPE_I64, 2, oshape, NULL);
    finish(a, 3, which, k, applied);
    if (!*applied) return TODRE_OK;
    return todre_select(f->ctx, f->cfg_both, &a[0].dl, &a[1].dl, &a[2].dl);
}

static todre_status run_select_batch(struct fx *f, int which, enum fault k, int *applied)
{
    tt_array a[6];
    tt_array2(&a[0], f->emb, TODRE_DTYPE_F32, N, D, D);
    tt_array1(&a[1], f->cls, TODRE_DTYPE_F32, N);
    tt_array1(&a[2], f->offsets, TODRE_DTYPE_I64, 3);
    tt_array1(&a[3], f->keep, TODRE_DTYPE_I64, 2);
    tt_array1(&a[4], f->out, TODRE_DTYPE_I64, 3); /* keep 2 + 1 */
    tt_array1(&a[5], f->out_offsets, TODRE_DTYPE_I64, 3);
    finish(a, 6, which, k, applied);
    if (!*applied) return TODRE_OK;
    return todre_select_batch(f->ctx, f->cfg, &a[0].dl, &a[1].dl, &a[2].dl, &a[3].dl, &a[4].dl,
                              &a[5].dl);
}

static todre_status run_copy(struct fx *f, int which, enum fault k, int *applied)
{
    tt_array a[2];
    tt_array1(&a[0], f->dst, TODRE_DTYPE_F32, 4);
    tt_array1(&a[1], f->src, TODRE_DTYPE_F32, 4);
    finish(a, 2, which, k, applied);
    if (!*applied) return TODRE_OK;
    return todre_context_copy(f->ctx, &a[0].dl, &a[1].dl);
}

static todre_status run_set_probe_layers(struct fx *f, int which, enum fault k, int *applied)
{
    tt_array a[1];
    tt_array1(&a[0], f->layers, TODRE_DTYPE_I64, 2);
    finish(a, 1, which, k, applied);
    if (!*applied) return TODRE_OK;
    todre_status st = todre_relevance_set_probe_layers(f->rel, &a[0].dl);
    /* leave the default list (layer 1) for the observations */
    if (st == TODRE_OK) tt_assert_ok(todre_relevance_reset(f->rel, TODRE_RESET_PARAMS));
    return st;
}

/* Two probe layers, so that the output has an extent > 1. */
static todre_status run_get_probe_layers(struct fx *f, int which, enum fault k, int *applied)
{
    tt_array a[1], l;
    int64_t count = -7;
    tt_array1(&a[0], f->out, TODRE_DTYPE_I64, 2);
    finish(a, 1, which, k, applied);
    if (!*applied) return TODRE_OK;
    tt_assert_ok(todre_relevance_set_probe_layers(f->rel, tt_array1(&l, f->layers, TODRE_DTYPE_I64, 2)));
    /* the list stays {0, 1}: the observations at layer 1 still probe */
    todre_status st = todre_relevance_get_probe_layers(f->rel, &a[0].dl, &count);
    if (st == TODRE_OK) {
        assert_int_equal(count, 2);
        assert_int_equal(f->out[0], 0);
        assert_int_equal(f->out[1], 1);
    }
    return st;
}

static todre_status run_keep_positions(struct fx *f, int which, enum fault k, int *applied)
{
    tt_array a[1];
    int64_t count = -7;
    tt_array1(&a[0], f->out, TODRE_DTYPE_I64, NK);
    finish(a, 1, which, k, applied);
    if (!*applied) return TODRE_OK;
    todre_status st = todre_relevance_keep_positions(f->rel, 1, &a[0].dl, &count);
    if (st == TODRE_OK) {
        assert_int_equal(count, N_SYS + N_TXT);
        assert_int_equal(f->out[0], 0);
        assert_int_equal(f->out[1], N_SYS + N_VIS);
    }
    return st;
}

static todre_status run_set_types(struct fx *f, int which, enum fault k, int *applied)
{
    tt_array a[1];
    uint8_t types[NK + SLACK] = {0, 1, 1, 1, 2, 2};
    tt_array1(&a[0], types, TODRE_DTYPE_U8, NK);
    finish(a, 1, which, k, applied);
    if (!*applied) return TODRE_OK;
    return todre_relevance_set_types(f->rel, &a[0].dl);
}

static todre_status run_probs(struct fx *f, int which, enum fault k, int *applied)
{
    tt_array a[2];
    int64_t shape[4] = {NB, NH, NK, NK};
    tt_array_init(&a[0], f->attn, TODRE_DTYPE_F32, 4, shape, NULL);
    tt_array1(&a[1], f->dec, TODRE_DTYPE_I32, NB);
    finish(a, 2, which, k, applied);
    if (!*applied) return TODRE_OK;
    tt_assert_ok(todre_relevance_reset(f->rel, TODRE_RESET_STATE));
    return todre_relevance_observe_probs(f->ctx, f->rel, LAYER, &a[0].dl, &a[1].dl);
}

static todre_status run_probs16(struct fx *f, int which, enum fault k, int *applied)
{
    tt_array a[2];
    int64_t shape[4] = {NB, NH, NK, NK};
    tt_array_init(&a[0], f->attn16, TODRE_DTYPE_BF16, 4, shape, NULL);
    tt_array1(&a[1], f->dec, TODRE_DTYPE_I32, NB);
    finish(a, 2, which, k, applied);
    if (!*applied) return TODRE_OK;
    tt_assert_ok(todre_relevance_reset(f->rel, TODRE_RESET_STATE));
    return todre_relevance_observe_probs(f->ctx, f->rel, LAYER, &a[0].dl, &a[1].dl);
}

static todre_status run_qk_dt(struct fx *f, int which, enum fault k, int *applied, int half)
{
    tt_array a[3];
    int64_t qs[4] = {NB, NH, NK, DH}, ks[4] = {NB, NHKV, NK, DH};
    todre_dtype dt = half ? TODRE_DTYPE_F16 : TODRE_DTYPE_F32;
    tt_array_init(&a[0], half ? (void *)f->q16 : (void *)f->q, dt, 4, qs, NULL);
    tt_array_init(&a[1], half ? (void *)f->k16 : (void *)f->k, dt, 4, ks, NULL);
    tt_array1(&a[2], f->dec, TODRE_DTYPE_I32, NB);
    finish(a, 3, which, k, applied);
    if (!*applied) return TODRE_OK;
    tt_assert_ok(todre_relevance_reset(f->rel, TODRE_RESET_STATE));
    return todre_relevance_observe_qk(f->ctx, f->rel, LAYER, &a[0].dl, &a[1].dl, 0.0, &a[2].dl);
}

static todre_status run_qk(struct fx *f, int which, enum fault k, int *applied)
{
    return run_qk_dt(f, which, k, applied, 0);
}

static todre_status run_qk16(struct fx *f, int which, enum fault k, int *applied)
{
    return run_qk_dt(f, which, k, applied, 1);
}

static const struct call calls[] = {
    {"todre_select", 3, 1, {"embeddings", "cls", "out"}, {0, 0, 1}, run_select},
    {"todre_select (f16, bf16, ORDER_BOTH)", 3, 1, {"embeddings", "cls", "out"}, {0, 0, 1},
     run_select_both},
    {"todre_select_batch", 6, 1, {"embeddings", "cls", "offsets", "keep", "out", "out_offsets"},
     {0, 0, 0, 0, 1, 1}, run_select_batch},
    {"todre_context_copy", 2, 1, {"dst", "src"}, {1, 0}, run_copy},
    {"todre_relevance_set_probe_layers", 1, 0, {"layers"}, {0}, run_set_probe_layers},
    {"todre_relevance_get_probe_layers", 1, 0, {"out"}, {1}, run_get_probe_layers},
    {"todre_relevance_keep_positions", 1, 0, {"out"}, {1}, run_keep_positions},
    {"todre_relevance_set_types", 1, 0, {"types"}, {0}, run_set_types},
    {"todre_relevance_observe_probs", 2, 1, {"attn", "decisions"}, {0, 1}, run_probs},
    {"todre_relevance_observe_probs (bf16)", 2, 1, {"attn", "decisions"}, {0, 1}, run_probs16},
    {"todre_relevance_observe_qk", 3, 1, {"q", "k", "decisions"}, {0, 0, 1}, run_qk},
    {"todre_relevance_observe_qk (f16)", 3, 1, {"q", "k", "decisions"}, {0, 0, 1}, run_qk16},
};
#define NCALLS (sizeof calls / sizeof calls[0])

/* The message (thread-local and, for context calls, the context's) begins
 * with "name:" and contains @p word. */
static void assert_message(const struct fx *f, int ctx_call, const char *name, const char *word,
                           const char *label, enum fault k)
{
    const char *msgs[2] = {todre_last_error(), todre_context_last_error(f->ctx)};
    size_t len = strlen(name);
    for (int m = 0; m < 1 + ctx_call; m++) {
        if (strncmp(msgs[m], name, len) != 0 || msgs[m][len] != ':' || !strstr(msgs[m], word)) {
            print_error("%s, %s of %s: message \"%s\" does not begin with \"%s:\" or lacks \"%s\"\n",
                        label, fault_name(k), name, msgs[m], name, word);
            fail();
        }
    }
}

/* Each fault at each array it applies to (@p outputs_only: outputs only). */
static int run_fault_class(struct fx *f, enum fault k, int outputs_only, const char *word)
{
    int tried = 0;
    for (size_t c = 0; c < NCALLS; c++) {
        const struct call *cl = &calls[c];
        int applied;
        fill_outputs(f);
        /* the call is valid without the fault */
        todre_status st = cl->run(f, -1, F_NONE, &applied);
        if (st != TODRE_OK) {
            print_error("%s without a fault: %s (%s)\n", cl->label, todre_status_string(st),
                        todre_last_error());
            fail();
        }
        for (int i = 0; i < cl->narrays; i++) {
            if (outputs_only && !cl->is_output[i]) continue;
            fill_outputs(f);
            st = cl->run(f, i, k, &applied);
            if (!applied) continue;
            tried++;
            if (st != TODRE_ERR_INVALID_ARGUMENT) {
                print_error("%s with %s %s: %s, expected TODRE_ERR_INVALID_ARGUMENT (%s)\n",
                            cl->label, cl->names[i], fault_name(k), todre_status_string(st),
                            todre_last_error());
                fail();
            }
            assert_message(f, cl->ctx_call, cl->names[i], word, cl->label, k);
            assert_outputs_untouched(f);
            /* the same call on the same handles, without the fault */
            fill_outputs(f);
            tt_assert_ok(cl->run(f, -1, F_NONE, &applied));
        }
    }
    return tried;
}

/* ---- class 2: misaligned arrays -------------------------------------------------- */

static void test_misaligned_byte_offset(void **state)
{
    /* every array of 2 bytes or more of every call: 27 arrays */
    assert_int_equal(run_fault_class(*state, F_OFFSET, 0, "misaligned"), 27);
}

static void test_misaligned_data(void **state)
{
    assert_int_equal(run_fault_class(*state, F_DATA, 0, "misaligned"), 27);
}

/* An offset that is a multiple of the element size (but not of 8 or 16) is
 * accepted: the rule is the element size, nothing stricter. */
static void test_aligned_offsets_accepted(void **state)
{
    struct fx *f = *state;
    tt_array a, o;
    float src[5] = {9, 1, 2, 3, 4};
    float dst[5] = {0};
    tt_array1(&a, src, TODRE_DTYPE_F32, 4);
    a.dl.byte_offset = 4;
    tt_array1(&o, dst, TODRE_DTYPE_F32, 4);
    o.dl.data = (char *)dst + 4;
    tt_assert_ok(todre_context_copy(f->ctx, &o.dl, &a.dl));
    assert_true(dst[0] == 0 && dst[1] == 1 && dst[4] == 4);
    /* f16 at an odd multiple of 2 bytes */
    uint16_t q16[NK * DH * NH + 1], k16[NK * DH * NHKV + 1];
    memcpy(q16 + 1, f->q16, sizeof q16 - sizeof q16[0]);
    memcpy(k16 + 1, f->k16, sizeof k16 - sizeof k16[0]);
    todre_relevance *r;
    tt_assert_ok(todre_relevance_create(NL, 1, &r));
    tt_assert_ok(todre_relevance_set_layout(r, N_SYS, N_VIS, N_TXT));
    tt_array tq, tk;
    tt_array3(&tq, q16, TODRE_DTYPE_F16, NH, NK, DH);
    tq.dl.byte_offset = 2;
    tt_array3(&tk, k16, TODRE_DTYPE_F16, NHKV, NK, DH);
    tk.dl.byte_offset = 2;
    tt_assert_ok(todre_relevance_observe_qk(f->ctx, r, LAYER, &tq.dl, &tk.dl, 0.0, NULL));
    /* an empty array is never read: its alignment does not matter */
    tt_array e;
    int64_t zero = 0;
    tt_array_init(&e, (char *)f->src + 1, TODRE_DTYPE_F32, 1, &zero, NULL);
    tt_array_init(&o, (char *)dst + 1, TODRE_DTYPE_F32, 1, &zero, NULL);
    tt_assert_ok(todre_context_copy(f->ctx, &o.dl, &e.dl));
    todre_relevance_destroy(r);
}

/* ---- class 4: aliased outputs ------------------------------------------------------ */

static void test_aliased_outputs(void **state)
{
    /* out x 3, out_offsets, dst, get_probe_layers, keep_positions, decisions x 4 */
    assert_int_equal(run_fault_class(*state, F_ALIAS, 1, "alias"), 11);
}

static void test_interleaved_outputs(void **state)
{
    /* only the [2, k] out of ORDER_BOTH is rank 2 */
    assert_int_equal(run_fault_class(*state, F_INTERLEAVE, 1, "alias"), 1);
}

/* Layouts that do not alias stay accepted: outputs with gaps, a zero stride
 * over an extent of 1, and broadcast (zero-stride) inputs. */
static void test_non_aliasing_layouts_accepted(void **state)
{
    struct fx *f = *state;
    tt_array e, c, o, d, a;
    /* decisions [B] with a stride of 3 */
    int64_t dshape = NB, dstride = 3;
    int32_t dec[3 * NB];
    memset(dec, SENTINEL, sizeof dec);
    int64_t shape[4] = {NB, NH, NK, NK};
    tt_array_init(&a, f->attn, TODRE_DTYPE_F32, 4, shape, NULL);
    tt_array_init(&d, dec, TODRE_DTYPE_I32, 1, &dshape, &dstride);
    tt_assert_ok(todre_relevance_reset(f->rel, TODRE_RESET_STATE));
    tt_assert_ok(todre_relevance_observe_probs(f->ctx, f->rel, LAYER, &a.dl, &d.dl));
    assert_true(dec[0] == TODRE_DECISION_KEEP || dec[0] == TODRE_DECISION_DROP);
    assert_true(dec[3] == TODRE_DECISION_KEEP || dec[3] == TODRE_DECISION_DROP);
    assert_true(untouched(&dec[1], 2 * sizeof dec[0]));
    /* a [1] output with stride 0 has one element: nothing aliases */
    todre_relevance *r;
    tt_assert_ok(todre_relevance_create(NL, 1, &r));
    tt_assert_ok(todre_relevance_set_layout(r, N_SYS, N_VIS, N_TXT));
    int64_t one = 1, zero = 0;
    int32_t dec1 = -5;
    tt_array_init(&d, &dec1, TODRE_DTYPE_I32, 1, &one, &zero);
    tt_array3(&a, f->attn, TODRE_DTYPE_F32, NH, NK, NK);
    tt_assert_ok(todre_relevance_observe_probs(f->ctx, r, LAYER, &a.dl, &d.dl));
    assert_true(dec1 == TODRE_DECISION_KEEP || dec1 == TODRE_DECISION_DROP);
    todre_relevance_destroy(r);
    /* [2, k] out with a row stride above k */
    int64_t oshape[2] = {2, KEEP}, ostr[2] = {KEEP + 2, 1};
    int64_t out[2 * (KEEP + 2)];
    tt_array2(&e, f->emb, TODRE_DTYPE_F32, N, D, D);
    tt_array1(&c, f->cls, TODRE_DTYPE_F32, N);
    tt_array_init(&o, out, TODRE_DTYPE_I64, 2, oshape, ostr);
    tt_assert_ok(todre_select(f->ctx, f->cfg_both, &e.dl, &c.dl, &o.dl));
    /* an empty output with strides whose span would overflow (found by
     * fuzz_dlpack: the alias test must not multiply them) */
    int64_t zshape[2] = {5, 0}, zstr[2] = {INT64_MAX / 4, INT64_MAX / 2};
    float zbuf[1];
    tt_array_init(&d, zbuf, TODRE_DTYPE_F32, 2, zshape, zstr);
    tt_array_init(&a, zbuf, TODRE_DTYPE_F32, 2, zshape, NULL);
    tt_assert_ok(todre_context_copy(f->ctx, &d.dl, &a.dl));
    /* a broadcast input (zero stride) is fine: only outputs must not alias */
    float c0 = 0.5f;
    int64_t cshape = N, cstr = 0;
    tt_array_init(&c, &c0, TODRE_DTYPE_F32, 1, &cshape, &cstr);
    tt_array1(&o, out, TODRE_DTYPE_I64, KEEP);
    tt_assert_ok(todre_select(f->ctx, f->cfg, &e.dl, &c.dl, &o.dl));
}

/* ---- class 1: non-finite scores in the fused stage-2 path ---------------------------- */

/* The observation failed with @p want and a message naming @p prefix;
 * nothing was written: decisions, ratios, drop layers. Then the same handle
 * observes valid input. */
static void assert_refused_untouched(struct fx *f, todre_status got, todre_status want,
                                     const char *prefix, const char *word)
{
    if (got != want) {
        print_error("returned %s, expected %s (%s)\n", todre_status_string(got),
                    todre_status_string(want), todre_last_error());
        fail();
    }
    /* backend messages come as "relevance: <argument>: ..." */
    const char *msg = todre_last_error();
    if (!strstr(msg, prefix) || !strstr(msg, word)) {
        print_error("message \"%s\" lacks \"%s\" or \"%s\"\n", msg, prefix, word);
        fail();
    }
    assert_string_equal(todre_context_last_error(f->ctx), msg);
    assert_true(untouched(f->dec, sizeof f->dec));
    for (int64_t b = 0; b < NB; b++) {
        double t2v = -1, v2t = -1;
        int64_t l = 7;
        assert_int_equal(todre_relevance_ratios(f->rel, b, LAYER, &t2v, &v2t), TODRE_ERR_STATE);
        assert_true(t2v == -1 && v2t == -1);
        tt_assert_ok(todre_relevance_drop_layer(f->rel, b, &l));
        assert_int_equal(l, -1);
    }
}

static todre_status observe_qk(struct fx *f, const void *q, const void *k, todre_dtype dt,
                               double scale)
{
    tt_array a[3];
    int64_t qs[4] = {NB, NH, NK, DH}, ks[4] = {NB, NHKV, NK, DH};
    tt_array_init(&a[0], (void *)q, dt, 4, qs, NULL);
    tt_array_init(&a[1], (void *)k, dt, 4, ks, NULL);
    tt_array1(&a[2], f->dec, TODRE_DTYPE_I32, NB);
    fill_outputs(f);
    tt_assert_ok(todre_relevance_reset(f->rel, TODRE_RESET_STATE));
    return todre_relevance_observe_qk(f->ctx, f->rel, LAYER, &a[0].dl, &a[1].dl, scale, &a[2].dl);
}

static void assert_valid_after(struct fx *f)
{
    tt_assert_ok(observe_qk(f, f->q, f->k, TODRE_DTYPE_F32, 0.0));
    for (int b = 0; b < NB; b++)
        assert_true(f->dec[b] == TODRE_DECISION_KEEP || f->dec[b] == TODRE_DECISION_DROP);
}

/* Finite q and k whose scores overflow float32: to +Inf, to -Inf, and to NaN
 * (+Inf and -Inf products in one dot product), in each sequence, for f32 and
 * bf16 (whose range is float32's). */
static void test_qk_score_overflow(void **state)
{
    struct fx *f = *state;
    enum { NQ = NB * NH * NK * DH, NKK = NB * NHKV * NK * DH };
    float *q = malloc(sizeof(float) * NQ), *k = malloc(sizeof(float) * NKK);
    uint16_t *q16 = malloc(2 * NQ), *k16 = malloc(2 * NKK);
    assert_non_null(q); assert_non_null(k); assert_non_null(q16); assert_non_null(k16);
    for (int dtc = 0; dtc < 2; dtc++)
        for (int seq = 0; seq < NB; seq++)
            for (int how = 0; how < 3; how++) {
                memcpy(q, f->q, sizeof(float) * NQ);
                memcpy(k, f->k, sizeof(float) * NKK);
                /* sequence seq: key head 1 (query heads 2, 3), every key
                 * row; query head 3, every row */
                for (int j = 0; j < NK; j++)
                    for (int e = 0; e < DH; e++) {
                        float kv = 1e20f;
                        if (how == 1) kv = -1e20f;
                        if (how == 2) kv = e % 2 ? -1e20f : 1e20f;
                        k[((seq * NHKV + 1) * NK + j) * DH + e] = kv;
                        q[((seq * NH + 3) * NK + j) * DH + e] = 1e20f;
                    }
                todre_status st;
                if (dtc == 0) {
                    st = observe_qk(f, q, k, TODRE_DTYPE_F32, 1.0);
                } else {
                    tt_to_bf16(q16, q, NQ);
                    tt_to_bf16(k16, k, NKK);
                    st = observe_qk(f, q16, k16, TODRE_DTYPE_BF16, 1.0);
                }
                assert_refused_untouched(f, st, TODRE_ERR_NONFINITE, "q, k:", "overflows float32");
                assert_valid_after(f);
            }
    free(q); free(k); free(q16); free(k16);
}

/* The scale: a double above FLT_MAX would round to Inf in float32, one
 * below FLT_MIN to a subnormal or 0 (fuzz_relevance found 1e-75 with
 * |q . k| near 1e75 gave uniform scores and wrong ratios with TODRE_OK). */
static void test_qk_scale_bounds(void **state)
{
    struct fx *f = *state;
    double below = nextafter((double)FLT_MIN, 0.0);
    assert_refused_untouched(f, observe_qk(f, f->q, f->k, TODRE_DTYPE_F32, below),
                             TODRE_ERR_INVALID_ARGUMENT, "scale:", "FLT_MIN");
    assert_refused_untouched(f, observe_qk(f, f->q, f->k, TODRE_DTYPE_F32, 1e-75),
                             TODRE_ERR_INVALID_ARGUMENT, "scale:", "FLT_MIN");
    assert_valid_after(f);
    tt_assert_ok(observe_qk(f, f->q, f->k, TODRE_DTYPE_F32, (double)FLT_MIN));
    double above = nextafter((double)FLT_MAX, INFINITY);
    assert_refused_untouched(f, observe_qk(f, f->q, f->k, TODRE_DTYPE_F32, above),
                             TODRE_ERR_INVALID_ARGUMENT, "scale:", "FLT_MAX");
    assert_refused_untouched(f, observe_qk(f, f->q, f->k, TODRE_DTYPE_F32, 1e300),
                             TODRE_ERR_INVALID_ARGUMENT, "scale:", "FLT_MAX");
    assert_valid_after(f);
    /* FLT_MAX itself is accepted: zero queries give zero scores... */
    float *q0 = calloc(NB * NH * NK * DH, sizeof(float));
    assert_non_null(q0);
    tt_assert_ok(observe_qk(f, q0, f->k, TODRE_DTYPE_F32, (double)FLT_MAX));
    /* ...uniform softmax: text row p sees N_VIS visual keys of p + 1 */
    double t2v, v2t;
    tt_assert_ok(todre_relevance_ratios(f->rel, 0, LAYER, &t2v, &v2t));
    double want = 0;
    for (int p = N_SYS + N_VIS; p < NK; p++) want += (double)N_VIS / (p + 1);
    want /= N_TXT;
    assert_true(fabs(t2v - want) < 1e-6);
    /* ...and ordinary ones overflow at that scale */
    assert_refused_untouched(f, observe_qk(f, f->q, f->k, TODRE_DTYPE_F32, (double)FLT_MAX),
                             TODRE_ERR_NONFINITE, "q, k:", "overflows float32");
    assert_valid_after(f);
    free(q0);
}

/* NaN, +Inf or -Inf in one key row of either key head of either sequence,
 * for each dtype: every query head of the group must refuse before scoring
 * it (UBSan: no float-cast-overflow in the exp), naming k and the key head. */
static void test_qk_nonfinite_keys_grouped(void **state)
{
    struct fx *f = *state;
    enum { NKK = NB * NHKV * NK * DH };
    static const todre_dtype dts[3] = {TODRE_DTYPE_F32, TODRE_DTYPE_F16, TODRE_DTYPE_BF16};
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    float *k = malloc(sizeof(float) * NKK);
    uint16_t *k16 = malloc(2 * NKK), *q16 = malloc(2 * NB * NH * NK * DH);
    assert_non_null(k); assert_non_null(k16); assert_non_null(q16);
    for (int d = 0; d < 3; d++)
        for (int seq = 0; seq < NB; seq++)
            for (int g = 0; g < NHKV; g++)
                for (int v = 0; v < 3; v++) {
                    memcpy(k, f->k, sizeof(float) * NKK);
                    int row = (seq + g + v) % NK; /* some row seen by text queries */
                    k[((seq * NHKV + g) * NK + row) * DH + (v + 3) % DH] = bad[v];
                    todre_status st;
                    if (dts[d] == TODRE_DTYPE_F32) {
                        st = observe_qk(f, f->q, k, TODRE_DTYPE_F32, 0.0);
                    } else {
                        void (*conv)(uint16_t *, const float *, size_t) =
                            dts[d] == TODRE_DTYPE_F16 ? tt_to_f16 : tt_to_bf16;
                        conv(k16, k, NKK);
                        conv(q16, f->q, NB * NH * NK * DH);
                        st = observe_qk(f, q16, k16, dts[d], 0.0);
                    }
                    char want[64];
                    snprintf(want, sizeof want, "sequence %d, key head %d, key row %d", seq, g,
                             row);
                    assert_refused_untouched(f, st, TODRE_ERR_NONFINITE, "k:", want);
                    assert_valid_after(f);
                }
    free(k); free(k16); free(q16);
}

/* ---- class 3: attention probabilities near FLT_MAX ------------------------------------ */

/* Ratios of sequence b from attn [NB, NH, NK, NK] (values read as double),
 * the formula of docs/semantics.md in float64. */
static void probs_reference(const void *attn, todre_dtype dt, int b, double *t2v, double *v2t)
{
    static const uint8_t ty[NK] = {0, 1, 1, 1, 2, 2};
    double num[3] = {0}, den[3] = {0};
    for (int h = 0; h < NH; h++)
        for (int i = 0; i < NK; i++) {
            uint8_t t = ty[i];
            if (t == 0) continue;
            uint8_t other = t == 2 ? 1 : 2;
            for (int j = 0; j < NK; j++) {
                double a = tt_load_f64(attn, dt, (size_t)(((b * NH + h) * NK + i) * NK + j));
                den[t] += a;
                if (ty[j] == other) num[t] += a;
            }
        }
    *t2v = den[2] > 0 ? num[2] / den[2] : 0;
    *v2t = den[1] > 0 ? num[1] / den[1] : 0;
}

static void test_probs_near_flt_max(void **state)
{
    struct fx *f = *state;
    enum { NA = NB * NH * NK * NK };
    float *a = malloc(sizeof(float) * NA);
    uint16_t *a16 = malloc(2 * NA);
    assert_non_null(a); assert_non_null(a16);
    for (int how = 0; how < 3; how++)
        for (int dtc = 0; dtc < 2; dtc++) {
            tt_rng r = {(uint64_t)(40 + how)};
            for (int i = 0; i < NA; i++) {
                double u = tt_rng_uniform(&r);
                /* 0: all near FLT_MAX (Inf in float sums); 1: mixed signs
                 * (Inf - Inf = NaN in float sums); 2: a few huge among
                 * ordinary probabilities */
                double v = how == 0 ? 2e38 + 1e38 * u
                         : how == 1 ? (i % 3 ? 3e38 : -2.5e38) * (0.5 + u / 2)
                                    : (i % 7 == 0 ? 3.3e38 : u);
                a[i] = (float)v;
            }
            const void *data = a;
            todre_dtype dt = TODRE_DTYPE_F32;
            if (dtc == 1) {
                tt_to_bf16(a16, a, NA); /* bf16 has float32's range */
                data = a16;
                dt = TODRE_DTYPE_BF16;
            }
            tt_array t, d;
            int64_t shape[4] = {NB, NH, NK, NK};
            tt_array_init(&t, (void *)data, dt, 4, shape, NULL);
            tt_array1(&d, f->dec, TODRE_DTYPE_I32, NB);
            tt_assert_ok(todre_relevance_reset(f->rel, TODRE_RESET_STATE));
            tt_assert_ok(todre_relevance_observe_probs(f->ctx, f->rel, LAYER, &t.dl, &d.dl));
            for (int b = 0; b < NB; b++) {
                double t2v, v2t, rt, rv;
                tt_assert_ok(todre_relevance_ratios(f->rel, b, LAYER, &t2v, &v2t));
                probs_reference(data, dt, b, &rt, &rv);
                /* float partial sums where they do not overflow: the 1e-5
                 * the paths agree to, relative (absolute near 0) */
                if (!isfinite(t2v) || !isfinite(v2t) ||
                    fabs(t2v - rt) > 1e-5 * fmax(1.0, fabs(rt)) ||
                    fabs(v2t - rv) > 1e-5 * fmax(1.0, fabs(rv))) {
                    print_error("case %d, %s, sequence %d: ratios %g %g, reference %g %g\n", how,
                                todre_dtype_name(dt), b, t2v, v2t, rt, rv);
                    fail();
                }
            }
        }
    free(a);
    free(a16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_misaligned_byte_offset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_misaligned_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_aligned_offsets_accepted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_aliased_outputs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_interleaved_outputs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_non_aliasing_layouts_accepted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_qk_score_overflow, setup, teardown),
        cmocka_unit_test_setup_teardown(test_qk_scale_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_qk_nonfinite_keys_grouped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probs_near_flt_max, setup, teardown),
    };
    /* TT_FILTER=test_name runs one test (e.g. under a sanitizer) */
    if (getenv("TT_FILTER")) cmocka_set_test_filter(getenv("TT_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
