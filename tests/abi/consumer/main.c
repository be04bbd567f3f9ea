/* Out-of-tree consumer of an installed libtodre (tests/abi/install_consumer.sh).
 * It sees only the installed headers (todre.h with dlpack.h and
 * todre_version.h) and library, so it proves that they, todre.pc and the
 * CMake package are enough to build and run a real selection. The expected
 * output was computed with NumPy from docs/semantics.md ("Stage 1: diversity
 * selection"): pivot = CLS argmax 2, then greedy max-sum picks 4, then 0. */
#include <stdio.h>

#include <todre/todre.h>

static int fail(const char *what, todre_status st)
{
    fprintf(stderr, "%s: %s: %s\n", what, todre_status_string(st), todre_last_error());
    return 1;
}

int main(void)
{
    /* Non-degenerate geometry: the greedy choices win by margins > 0.1. */
    float emb[6][3] = {{1.0f, 0.0f, 0.0f},   {0.9f, 0.3f, 0.1f},   {0.2f, 1.0f, 0.0f},
                       {0.0f, 0.0f, 1.0f},   {-0.5f, -0.5f, 0.2f}, {0.3f, 0.3f, 0.9f}};
    float cls[6] = {0.05f, 0.1f, 0.4f, 0.2f, 0.15f, 0.1f};
    int64_t kept[2][3] = {{-1, -1, -1}, {-1, -1, -1}};
    int64_t emb_shape[2] = {6, 3}, cls_shape[1] = {6}, out_shape[2] = {2, 3};
    DLTensor te = {emb, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, emb_shape, NULL, 0};
    DLTensor tc = {cls, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, cls_shape, NULL, 0};
    DLTensor to = {kept, {kDLCPU, 0}, 2, {kDLInt, 64, 1}, out_shape, NULL, 0};
    todre_context *ctx = NULL;
    todre_select_config *cfg = NULL;
    todre_status st;
    int rc = 1;

    if (todre_version_number() != TODRE_VERSION_NUMBER) {
        fprintf(stderr, "header %d != library %u\n", TODRE_VERSION_NUMBER,
                todre_version_number());
        return 1;
    }
    printf("todre %s (%u)\n", todre_version_string(), todre_version_number());

    if ((st = todre_context_create("cpu", 0, &ctx)) != TODRE_OK)
        return fail("todre_context_create", st);
    if ((st = todre_select_config_create(&cfg)) != TODRE_OK ||
        (st = todre_select_config_set_int(cfg, TODRE_SELECT_PIVOT, TODRE_PIVOT_CLS)) != TODRE_OK ||
        (st = todre_select_config_set_int(cfg, TODRE_SELECT_KEEP, 3)) != TODRE_OK ||
        (st = todre_select_config_set_int(cfg, TODRE_SELECT_ORDER, TODRE_ORDER_BOTH)) != TODRE_OK) {
        rc = fail("todre_select_config", st);
        goto done;
    }
    if ((st = todre_select(ctx, cfg, &te, &tc, &to)) != TODRE_OK) {
        rc = fail("todre_select", st);
        goto done;
    }
    printf("selection: %lld %lld %lld\n", (long long)kept[0][0], (long long)kept[0][1],
           (long long)kept[0][2]);
    printf("kept: %lld %lld %lld\n", (long long)kept[1][0], (long long)kept[1][1],
           (long long)kept[1][2]);
    rc = 0;
done:
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
    return rc;
}
