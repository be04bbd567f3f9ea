/* Device workspace and pinned staging of the CUDA backend.
 *
 * Buffers grow geometrically (1.5x, capped at the workspace limit) and are
 * never shrunk, so a steady stream of calls of similar sizes performs no
 * cudaMalloc and no synchronisation.
 * Growing a buffer waits for the stream first, because queued kernels of an
 * earlier call may still read the old one. */
#include <string.h>

#include "cuda_internal.h"

/* New capacity for a buffer of @p have bytes that must hold @p want: 1.5x
 * (so that slowly growing calls reallocate rarely), but never past the
 * workspace limit when @p want fits it, and never less than @p want. */
static size_t grown(size_t have, size_t want, int64_t limit)
{
    size_t next = have + have / 2;
    next = (next + 255u) & ~(size_t)255u;
    if (limit >= 0 && next > (uint64_t)limit) next = (size_t)limit;
    if (next < want) next = want;
    return next;
}

todre_status todre_cuda_buf(struct todre_cuda_backend *be, enum todre_cuda_buf_id id,
                            size_t bytes, void **out, struct todre_diag *diag)
{
    struct todre_cuda_buf *b = &be->buf[id];
    if (bytes == 0) bytes = 256;
    if (b->cap >= bytes) {
        *out = b->ptr;
        return TODRE_OK;
    }
    cudaError_t err = cudaStreamSynchronize(be->stream);
    if (err != cudaSuccess) return todre_cuda_fail(diag, err, "cudaStreamSynchronize (growing workspace)");
    size_t cap = grown(b->cap, bytes, be->base.params.workspace_limit);
    if (b->ptr) cudaFree(b->ptr);
    b->ptr = NULL;
    b->cap = 0;
    err = cudaMalloc(&b->ptr, cap);
    if (err != cudaSuccess) {
        b->ptr = NULL;
        return todre_cuda_fail(diag, err, "cudaMalloc (workspace)");
    }
    b->cap = cap;
    *out = b->ptr;
    return TODRE_OK;
}

static todre_status stage_grow(struct todre_cuda_stage *s, size_t cap, struct todre_diag *diag)
{
    if (s->host) cudaFreeHost(s->host);
    s->host = NULL;
    s->cap = 0;
    cudaError_t err = cudaMallocHost(&s->host, cap);
    if (err != cudaSuccess) {
        s->host = NULL;
        return todre_cuda_fail(diag, err, "cudaMallocHost (staging)");
    }
    s->cap = cap;
    return TODRE_OK;
}

todre_status todre_cuda_stage_acquire(struct todre_cuda_backend *be, size_t bytes,
                                      struct todre_cuda_stage **out, struct todre_diag *diag)
{
    struct todre_cuda_stage *s = &be->ring[be->ring_next];
    be->ring_next = (be->ring_next + 1) % TODRE_CUDA_RING;
    /* Blocks only when TODRE_CUDA_RING calls are queued and this slot's copy
     * has not run yet. */
    if (s->used) {
        cudaError_t err = cudaEventSynchronize(s->done);
        if (err != cudaSuccess) return todre_cuda_fail(diag, err, "cudaEventSynchronize (staging)");
    }
    if (bytes == 0) bytes = 64;
    if (s->cap < bytes) {
        /* Slots that no copy has used yet grow with this one, so that the
         * next calls of this size find room and allocate nothing. */
        size_t cap = grown(s->cap, bytes, be->base.params.workspace_limit);
        for (int i = 0; i < TODRE_CUDA_RING; i++) {
            struct todre_cuda_stage *g = &be->ring[i];
            if (g != s && (g->used || g->cap >= cap)) continue;
            todre_status st = stage_grow(g, cap, diag);
            if (st != TODRE_OK) return st;
        }
    }
    *out = s;
    return TODRE_OK;
}

todre_status todre_cuda_stage_release(struct todre_cuda_backend *be, struct todre_cuda_stage *s,
                                      struct todre_diag *diag)
{
    cudaError_t err = cudaEventRecord(s->done, be->stream);
    if (err != cudaSuccess) return todre_cuda_fail(diag, err, "cudaEventRecord (staging)");
    s->used = 1;
    return TODRE_OK;
}

todre_status todre_cuda_upload(struct todre_cuda_backend *be, enum todre_cuda_buf_id id,
                               const void *src, size_t bytes, void **dev_out,
                               struct todre_diag *diag)
{
    void *dev = NULL;
    todre_status st = todre_cuda_buf(be, id, bytes, &dev, diag);
    if (st != TODRE_OK) return st;
    struct todre_cuda_stage *s;
    st = todre_cuda_stage_acquire(be, bytes, &s, diag);
    if (st != TODRE_OK) return st;
    memcpy(s->host, src, bytes);
    cudaError_t err = cudaMemcpyAsync(dev, s->host, bytes, cudaMemcpyHostToDevice, be->stream);
    if (err != cudaSuccess) return todre_cuda_fail(diag, err, "cudaMemcpyAsync (staging upload)");
    st = todre_cuda_stage_release(be, s, diag);
    if (st != TODRE_OK) return st;
    *dev_out = dev;
    return TODRE_OK;
}

void todre_cuda_workspace_trim(struct todre_cuda_backend *be)
{
    /* Queued kernels and copies may still use the buffers and the slots. */
    (void)cudaStreamSynchronize(be->stream);
    for (int i = 0; i < TODRE_CUDA_BUF_COUNT; i++) {
        if (be->buf[i].ptr) cudaFree(be->buf[i].ptr);
        be->buf[i].ptr = NULL;
        be->buf[i].cap = 0;
    }
    for (int i = 0; i < TODRE_CUDA_RING; i++) {
        if (be->ring[i].host) cudaFreeHost(be->ring[i].host);
        be->ring[i].host = NULL;
        be->ring[i].cap = 0;
    }
}

void todre_cuda_workspace_free(struct todre_cuda_backend *be)
{
    todre_cuda_workspace_trim(be);
    for (int i = 0; i < TODRE_CUDA_RING; i++) {
        if (be->ring[i].done) cudaEventDestroy(be->ring[i].done);
        be->ring[i].done = NULL;
        be->ring[i].used = 0;
    }
}
