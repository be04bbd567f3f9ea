/* libtodre prune plan (C, libtodre 1.1): what a runtime decides around the
 * selection, for a Qwen2.5-VL-style prompt of two images and a video.
 *
 *   text(4) image A (12 x 16 merged tokens) text(3) image B (8 x 8) text(2)
 *   video (8 temporal patches of 6 x 6) text(5)
 *
 * 1. Placeholders, before any embedding exists: how many tokens each image
 *    keeps, and each frame of the video (the video's budget is shared by its
 *    frames, at least 2 each: no frame is starved).
 * 2. Selection: one todre_select_ex() call over the three spans (a ragged
 *    batch), the video split into its frames.
 * 3. Positions: the kept tokens keep their (t, h, w) mRoPE ids
 *    (TODRE_POSITIONS_KEEP), the text after each span continues where it
 *    would after the unpruned span, and the spans' deltas add up to the
 *    offset decoding starts from.
 *
 * The embeddings are made up (a runtime passes its vision tower's output).
 * Build: cc -std=c99 prune_plan.c $(pkg-config --cflags --libs todre)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todre/todre.h>

enum { DIM = 64, N_SPANS = 3, FRAMES = 8 };

/* The spans: (t, h, w) merged-token grids, and the text before each. */
static const int64_t GRID[N_SPANS][3] = {{1, 12, 16}, {1, 8, 8}, {FRAMES, 6, 6}};
static const int64_t TEXT_BEFORE[N_SPANS] = {4, 3, 2};
static const int64_t TEXT_AFTER = 5;

static DLTensor host_tensor(void *data, DLDataType dtype, int ndim, int64_t *shape)
{
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.ndim = ndim;
    t.dtype = dtype;
    t.shape = shape;
    return t;
}

static const DLDataType f32 = {kDLFloat, 32, 1}, i64 = {kDLInt, 64, 1};

#define CHECK(call)                                                              \
    do {                                                                         \
        todre_status st_ = (call);                                               \
        if (st_ != TODRE_OK) {                                                   \
            fprintf(stderr, "%s: %s: %s\n", #call, todre_status_string(st_),     \
                    todre_last_error());                                         \
            goto done;                                                           \
        }                                                                        \
    } while (0)

int main(void)
{
    int64_t n[N_SPANS], offsets[N_SPANS + 1], groups[N_SPANS + FRAMES], G = 0;
    int64_t kept_count[N_SPANS], frame_counts[FRAMES], out_offsets[N_SPANS + 1];
    int64_t N, K = 0, s, i, j;
    float *emb = NULL;
    int64_t *kept = NULL, *pos = NULL, *ids = NULL;
    todre_context *ctx = NULL;
    todre_select_config *cfg = NULL;
    int rc = 1;

    offsets[0] = 0;
    for (s = 0; s < N_SPANS; s++) {
        n[s] = GRID[s][0] * GRID[s][1] * GRID[s][2];
        offsets[s + 1] = offsets[s] + n[s];
    }
    N = offsets[N_SPANS];

    /* Keep a quarter of every span; under SHARED a span's budget is shared
     * by its groups (an image is one group: it keeps its quarter). */
    CHECK(todre_select_config_create(&cfg));
    CHECK(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 0.25));
    CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_BUDGET, TODRE_BUDGET_SHARED));
    CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_GROUP_MIN, 2));

    /* 1. Placeholders from the sizes alone. */
    for (s = 0; s < N_SPANS; s++) {
        int frames = s == N_SPANS - 1 ? FRAMES : 1;
        int64_t local[FRAMES + 1], image_count[1], shape[1] = {frames + 1}, cshape[1] = {frames};
        for (i = 0; i <= frames; i++) local[i] = i * (n[s] / frames);
        DLTensor t_groups = host_tensor(local, i64, 1, shape);
        DLTensor t_counts = host_tensor(frames > 1 ? frame_counts : image_count, i64, 1, cshape);
        CHECK(todre_select_group_counts(cfg, &t_groups, &t_counts, &kept_count[s]));
        for (i = 0; i < frames; i++) groups[G++] = offsets[s] + local[i];
        K += kept_count[s];
        printf("span %lld: %lld tokens, %lld placeholders\n", (long long)s, (long long)n[s],
               (long long)kept_count[s]);
    }
    groups[G] = N;
    printf("video frames keep:");
    for (i = 0; i < FRAMES; i++) printf(" %lld", (long long)frame_counts[i]);
    printf("\n");

    /* 2. Select: three sets in one call, the video by frames. */
    emb = malloc(sizeof *emb * (size_t)(N * DIM));
    kept = malloc(sizeof *kept * (size_t)K);
    if (!emb || !kept) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    for (i = 0; i < N * DIM; i++) /* 37 clusters, so that many tokens repeat */
        emb[i] = (float)(((i / DIM) % 37 * 31 + (i % DIM) * 17) % 13) / 13.0f - 0.5f +
                 0.01f * (float)((i * 2654435761u) % 101) / 101.0f;
    CHECK(todre_context_create("cpu", 0, &ctx));
    {
        int64_t emb_shape[2] = {N, DIM}, off_shape[1] = {N_SPANS + 1}, grp_shape[1] = {G + 1};
        int64_t out_shape[1] = {K};
        DLTensor t_emb = host_tensor(emb, f32, 2, emb_shape);
        DLTensor t_off = host_tensor(offsets, i64, 1, off_shape);
        DLTensor t_grp = host_tensor(groups, i64, 1, grp_shape);
        DLTensor t_out = host_tensor(kept, i64, 1, out_shape);
        DLTensor t_oo = host_tensor(out_offsets, i64, 1, off_shape);
        todre_select_args args;
        memset(&args, 0, sizeof args);
        args.struct_size = sizeof args;
        args.embeddings = &t_emb;
        args.offsets = &t_off;
        args.groups = &t_grp;
        args.out = &t_out;
        args.out_offsets = &t_oo;
        CHECK(todre_select_ex(ctx, cfg, &args));
    }

    /* 3. Positions: walk the prompt, text one by one, each span in 3-D. */
    {
        int64_t cursor = 0, column = 0, delta_sum = 0;
        for (s = 0; s < N_SPANS; s++) {
            int64_t k = out_offsets[s + 1] - out_offsets[s];
            int64_t pshape[2] = {n[s], 3}, kshape[1] = {k}, oshape[2] = {k, 3};
            int64_t next, delta, t, h, w;
            cursor += TEXT_BEFORE[s]; /* text positions before the span */
            column += TEXT_BEFORE[s];
            free(pos);
            free(ids);
            pos = malloc(sizeof *pos * (size_t)(n[s] * 3));
            ids = malloc(sizeof *ids * (size_t)(k * 3));
            if (!pos || !ids) {
                fprintf(stderr, "out of memory\n");
                goto done;
            }
            for (t = 0, i = 0; t < GRID[s][0]; t++) /* raster (t, h, w), from the cursor */
                for (h = 0; h < GRID[s][1]; h++)
                    for (w = 0; w < GRID[s][2]; w++, i++) {
                        pos[3 * i] = cursor + t;
                        pos[3 * i + 1] = cursor + h;
                        pos[3 * i + 2] = cursor + w;
                    }
            DLTensor t_pos = host_tensor(pos, i64, 2, pshape);
            DLTensor t_kept = host_tensor(kept + out_offsets[s], i64, 1, kshape);
            DLTensor t_ids = host_tensor(ids, i64, 2, oshape);
            CHECK(todre_positions(TODRE_POSITIONS_KEEP, &t_pos, &t_kept, &t_ids, &next, &delta));
            printf("span %lld: kept %lld, first (t, h, w) = (%lld, %lld, %lld), text continues "
                   "at %lld, delta %lld\n",
                   (long long)s, (long long)k, (long long)ids[0], (long long)ids[1],
                   (long long)ids[2], (long long)next, (long long)delta);
            cursor = next;
            column += k;
            delta_sum += delta;
            if (cursor != column + delta_sum) {
                fprintf(stderr, "the deltas do not add up at span %lld\n", (long long)s);
                goto done;
            }
        }
        cursor += TEXT_AFTER;
        column += TEXT_AFTER;
        for (j = 0, i = 0; j < N_SPANS; j++) i += TEXT_BEFORE[j] + n[j];
        printf("prompt %lld -> %lld columns; decoding starts at position %lld "
               "(column %lld + rope delta %lld)\n",
               (long long)(i + TEXT_AFTER), (long long)column, (long long)(column + delta_sum),
               (long long)column, (long long)delta_sum);
        printf("prune plan: %lld visual tokens -> %lld kept\n", (long long)N, (long long)K);
    }
    rc = 0;
done:
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
    free(ids);
    free(pos);
    free(kept);
    free(emb);
    return rc;
}
