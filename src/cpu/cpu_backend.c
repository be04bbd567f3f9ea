/* The CPU backend's dispatch table, instance and workspace. */
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_internal.h"

static void cpu_destroy(struct todre_backend *base)
{
    struct todre_cpu_backend *be = (struct todre_cpu_backend *)base;
    if (!be) return;
    for (int i = 0; i < TODRE_CPU_WS_COUNT; i++) free(be->ws[i]);
    free(be);
}

static const struct todre_backend_ops cpu_ops = {
    .abi_version = TODRE_BACKEND_ABI_VERSION,
    .name = "cpu",
    .select = todre_cpu_select,
    .relevance_probs = todre_cpu_relevance_probs,
    .relevance_qk = todre_cpu_relevance_qk,
    .set_stream = NULL,  /* only the NULL stream */
    .synchronize = NULL, /* synchronous */
    .destroy = cpu_destroy,
};

todre_status todre_cpu_backend_create(struct todre_backend **out, struct todre_diag *diag)
{
    (void)diag;
    struct todre_cpu_backend *be = calloc(1, sizeof *be);
    if (!be) return TODRE_ERR_OUT_OF_MEMORY;
    be->base.ops = &cpu_ops;
    be->base.device_type = TODRE_DEVICE_HOST;
    be->base.device = 0;
    *out = &be->base;
    return TODRE_OK;
}

void *todre_cpu_workspace(struct todre_cpu_backend *be, enum todre_cpu_ws_slot slot, size_t bytes)
{
    if (bytes == 0) bytes = 64;
    if (be->ws_size[slot] >= bytes) return be->ws[slot];
    size_t rounded = (bytes + 63u) & ~(size_t)63u;
    void *p = NULL;
    if (posix_memalign(&p, 64, rounded) != 0) return NULL;
    free(be->ws[slot]);
    be->ws[slot] = p;
    be->ws_size[slot] = rounded;
    return p;
}

int todre_cpu_threads(const struct todre_cpu_backend *be)
{
    int64_t n = be->base.params.num_threads;
#ifdef _OPENMP
    int avail = omp_get_num_procs();
#else
    int avail = 1;
#endif
    if (n <= 0 || n > avail) return avail;
    return (int)n;
}
