/* A program written for libtodre 1.0 and compiled against the 1.0 headers
 * (tests/abi/headers-1.0), run with the library being tested: every 1.x
 * release must run it unchanged. It uses the 1.0 API broadly (versions,
 * the parameter model, contexts, todre_select, todre_select_batch, stage 2,
 * errors) and checks what 1.0 promised of each; it prints one line and
 * exits 0 when all hold. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todre/todre.h>

#if TODRE_VERSION_NUMBER != 10000
#error "compile against the 1.0 headers (tests/abi/headers-1.0)"
#endif

static int failures;

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: %s failed (%s)\n", __FILE__, __LINE__, \
                    #cond, todre_last_error());                            \
            failures++;                                                    \
        }                                                                  \
    } while (0)

static DLTensor host(void *data, uint8_t code, uint8_t bits, int ndim, int64_t *shape)
{
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.ndim = ndim;
    t.dtype.code = code;
    t.dtype.bits = bits;
    t.dtype.lanes = 1;
    t.shape = shape;
    return t;
}

enum { N = 200, D = 16 };

int main(void)
{
    /* the library is some 1.x, at least the 1.0 this was built for */
    unsigned v = todre_version_number();
    CHECK(v / 10000 == 1 && v >= TODRE_VERSION_NUMBER);

    /* the 1.0 parameters: names and bounds as 1.0 defined them */
    static const todre_param params[] = {
        TODRE_CONTEXT_WORKSPACE_LIMIT, TODRE_CONTEXT_NUM_THREADS, TODRE_SELECT_OBJECTIVE,
        TODRE_SELECT_PIVOT, TODRE_SELECT_PIVOT_LO, TODRE_SELECT_PIVOT_HI, TODRE_SELECT_KEEP,
        TODRE_SELECT_RATIO, TODRE_SELECT_SEED, TODRE_SELECT_ORDER, TODRE_RELEVANCE_TAU,
        TODRE_RELEVANCE_SCHEDULE, TODRE_RELEVANCE_NUM_LAYERS, TODRE_RELEVANCE_BATCH};
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
        todre_param_bounds b;
        memset(&b, 0, sizeof b);
        b.struct_size = sizeof b;
        CHECK(todre_param_get_bounds(params[i], &b) == TODRE_OK);
        CHECK(todre_param_name(params[i]) != NULL);
    }
    todre_param_bounds rb;
    memset(&rb, 0, sizeof rb);
    rb.struct_size = sizeof rb;
    CHECK(todre_param_get_bounds(TODRE_SELECT_RATIO, &rb) == TODRE_OK &&
          rb.type == TODRE_PARAM_DOUBLE && rb.double_default == 0.10);

    /* stage 1: data with repeats, 10 % kept, ascending, distinct, in range */
    static float rows[N * D];
    for (int i = 0; i < N * D; i++)
        rows[i] = (float)((i / D % 23) * 7 + (i % D) * 3 % 11) / 11.0f - 1.0f +
                  (float)((i * 2654435761u) % 97) / 970.0f;
    todre_context *ctx = NULL;
    todre_select_config *cfg = NULL;
    CHECK(todre_context_create("cpu", 0, &ctx) == TODRE_OK);
    CHECK(todre_select_config_create(&cfg) == TODRE_OK);
    int64_t k = 0;
    CHECK(todre_select_keep_count(cfg, N, &k) == TODRE_OK && k == 20);
    int64_t shape[2] = {N, D}, kshape[1] = {20}, kept[20];
    DLTensor e = host(rows, kDLFloat, 32, 2, shape), o = host(kept, kDLInt, 64, 1, kshape);
    CHECK(todre_select(ctx, cfg, &e, NULL, &o) == TODRE_OK);
    for (int i = 0; i < 20; i++) CHECK(kept[i] >= 0 && kept[i] < N && (i == 0 || kept[i] > kept[i - 1]));

    /* the same rows as two sets: each as todre_select on its rows */
    int64_t offs[3] = {0, 120, N}, oshape[1] = {3}, out[20], out_off[3], bshape[1] = {20};
    DLTensor off = host(offs, kDLInt, 64, 1, oshape), bo = host(out, kDLInt, 64, 1, bshape);
    DLTensor boo = host(out_off, kDLInt, 64, 1, oshape);
    CHECK(todre_select_batch(ctx, cfg, &e, NULL, &off, NULL, &bo, &boo) == TODRE_OK);
    CHECK(out_off[0] == 0 && out_off[1] == 12 && out_off[2] == 20);
    int64_t first[12], fshape[2] = {120, D}, f1[1] = {12};
    DLTensor e1 = host(rows, kDLFloat, 32, 2, fshape), o1 = host(first, kDLInt, 64, 1, f1);
    CHECK(todre_select(ctx, cfg, &e1, NULL, &o1) == TODRE_OK);
    CHECK(memcmp(first, out, sizeof first) == 0);

    /* errors: a status and a message naming the argument, nothing written */
    int64_t before = kept[0];
    kshape[0] = 19;
    CHECK(todre_select(ctx, cfg, &e, NULL, &o) == TODRE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(todre_last_error(), "out") != NULL);
    CHECK(kept[0] == before);

    /* stage 2: [system 2 | visual 4 | text 2], uniform causal attention */
    todre_relevance *rel = NULL;
    CHECK(todre_relevance_create(8, 1, &rel) == TODRE_OK);
    CHECK(todre_relevance_set_layout(rel, 2, 4, 2) == TODRE_OK);
    enum { K = 8 };
    static float attn[K * K];
    for (int i = 0; i < K; i++)
        for (int j = 0; j <= i; j++) attn[i * K + j] = 1.0f / (float)(i + 1);
    int64_t ashape[3] = {1, K, K}, dshape[1] = {1};
    int32_t decision = -1;
    DLTensor a = host(attn, kDLFloat, 32, 3, ashape), dd = host(&decision, kDLInt, 32, 1, dshape);
    CHECK(todre_relevance_set_double(rel, TODRE_RELEVANCE_TAU, 0.9) == TODRE_OK);
    CHECK(todre_relevance_observe_probs(ctx, rel, 7, &a, &dd) == TODRE_OK);
    CHECK(decision == TODRE_DECISION_DROP);
    double t2v = -1, v2t = -1;
    CHECK(todre_relevance_ratios(rel, 0, 7, &t2v, &v2t) == TODRE_OK && v2t == 0.0 && t2v > 0.4);
    int64_t layer = -2, count = 0;
    CHECK(todre_relevance_drop_layer(rel, 0, &layer) == TODRE_OK && layer == 7);
    CHECK(todre_relevance_keep_positions(rel, 0, NULL, &count) == TODRE_OK && count == 4);
    todre_relevance_destroy(rel);
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);

    if (failures) return 1;
    printf("a program built against libtodre 1.0 ran with libtodre %s\n", todre_version_string());
    return 0;
}
