/* libtodre quickstart (C): keep 10% of a LLaVA-NeXT-sized set of visual tokens.
 *
 * A vision-language runtime would pass its own projector output here; this
 * program makes up 2,880 tokens of width 256 in f16 (576 thumbnail tokens
 * first, then the crops, as LLaVA-NeXT's AnyRes lays them out) plus a CLS
 * attention map, keeps k = 288 by ToDRE's diversity selection with the pivot
 * taken from the thumbnail, and prints the kept token indices.
 *
 * Build: cc -std=c99 quickstart.c $(pkg-config --cflags --libs todre)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todre/todre.h>

enum { N_TOKENS = 2880, N_THUMBNAIL = 576, DIM = 256 };

/* float -> IEEE binary16 bits, round to nearest even (values here are in
 * [-1, 1]; tiny ones flush to zero). Real f16 data needs no conversion. */
static uint16_t f16_from_float(float f)
{
    uint32_t x, mant, rest;
    int32_t exp;
    uint16_t h;
    memcpy(&x, &f, sizeof x);
    exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    mant = x & 0x7fffff;
    if (exp <= 0)
        return (uint16_t)((x >> 16) & 0x8000);
    if (exp >= 31)
        return (uint16_t)(((x >> 16) & 0x8000) | 0x7c00);
    h = (uint16_t)(((x >> 16) & 0x8000) | ((uint32_t)exp << 10) | (mant >> 13));
    rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++;
    return h;
}

/* Deterministic stand-in data: 40 clusters plus noise, so that
 * many tokens are near-duplicates, as in real images. */
static void make_tokens(uint16_t *emb, float *cls)
{
    uint32_t state = 12345;
    int64_t i, j;
    for (i = 0; i < N_TOKENS; i++) {
        int64_t cluster = (i * 7) % 40;
        for (j = 0; j < DIM; j++) {
            state = state * 1664525u + 1013904223u;
            float noise = (float)(state >> 8) / 16777216.0f - 0.5f;
            float base = ((cluster * 31 + j * 17) % 13) / 13.0f - 0.5f;
            emb[i * DIM + j] = f16_from_float(base + 0.2f * noise);
        }
        cls[i] = (float)((i * 37) % 101) / 101.0f;
    }
}

/* A compact host array: what a framework's DLPack export gives you. */
static DLTensor host_tensor(void *data, DLDataType dtype, int ndim, int64_t *shape)
{
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.device.device_id = 0;
    t.ndim = ndim;
    t.dtype = dtype;
    t.shape = shape;
    t.strides = NULL; /* compact row-major */
    t.byte_offset = 0;
    return t;
}

static const DLDataType f16 = {kDLFloat, 16, 1}, f32 = {kDLFloat, 32, 1}, i64 = {kDLInt, 64, 1};

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
    uint16_t *emb = malloc(sizeof *emb * N_TOKENS * DIM);
    float *cls = malloc(sizeof *cls * N_TOKENS);
    int64_t *kept = NULL;
    int64_t emb_shape[2] = {N_TOKENS, DIM}, cls_shape[1] = {N_TOKENS}, out_shape[1];
    int64_t k = 0, i;
    todre_context *ctx = NULL;
    todre_select_config *cfg = NULL;
    DLTensor t_emb, t_cls, t_out;
    int rc = 1;

    if (!emb || !cls) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    make_tokens(emb, cls);

    /* Host memory, so a CPU context (a CUDA context takes device memory:
     * see todre_context_alloc() and todre_context_copy()). */
    CHECK(todre_context_create("cpu", 0, &ctx));

    /* ToDRE defaults: max-sum objective, pivot = CLS argmax when a CLS map is
     * given. Keep 10%, and look for the pivot in the thumbnail only. */
    CHECK(todre_select_config_create(&cfg));
    CHECK(todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 0.10));
    CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_PIVOT_LO, 0));
    CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_PIVOT_HI, N_THUMBNAIL));
    CHECK(todre_select_keep_count(cfg, N_TOKENS, &k));

    kept = malloc(sizeof *kept * (size_t)k);
    if (!kept) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    out_shape[0] = k;

    /* DLPack views of the buffers, on the stack; nothing is copied. */
    t_emb = host_tensor(emb, f16, 2, emb_shape);
    t_cls = host_tensor(cls, f32, 1, cls_shape);
    t_out = host_tensor(kept, i64, 1, out_shape);

    CHECK(todre_select(ctx, cfg, &t_emb, &t_cls, &t_out));

    printf("kept %lld of %d tokens (ascending positions):\n", (long long)k, N_TOKENS);
    for (i = 0; i < k; i++)
        printf("%lld%c", (long long)kept[i], (i % 16 == 15 || i == k - 1) ? '\n' : ' ');
    rc = 0;
done:
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
    free(kept);
    free(cls);
    free(emb);
    return rc;
}
