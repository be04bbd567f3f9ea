/* Internal interface of the CPU backend: the instance struct, its workspace,
 * and the kernels behind the table in cpu_backend.c. */
#ifndef TODRE_SRC_CPU_INTERNAL_H
#define TODRE_SRC_CPU_INTERNAL_H

#include "../backend.h"

/* Workspace slots: each kernel family owns one so that their buffers never
 * alias. A slot grows (never shrinks) and is reused across calls: after the
 * first call of a given size the hot path allocates nothing. */
enum todre_cpu_ws_slot {
    TODRE_CPU_WS_SELECT_A = 0,
    TODRE_CPU_WS_SELECT_B = 1,
    TODRE_CPU_WS_SELECT_C = 2,
    TODRE_CPU_WS_RELEVANCE = 3,
    TODRE_CPU_WS_COUNT = 4
};

struct todre_cpu_backend {
    struct todre_backend base; /* first: the core sees only this */
    void *ws[TODRE_CPU_WS_COUNT];
    size_t ws_size[TODRE_CPU_WS_COUNT];
};

/* Return a 64-byte aligned buffer of at least @p bytes for @p slot (contents
 * unspecified), or NULL when the allocation fails (the caller reports
 * TODRE_ERR_OUT_OF_MEMORY). */
void *todre_cpu_workspace(struct todre_cpu_backend *be, enum todre_cpu_ws_slot slot, size_t bytes);

/* Threads to use for a call (params.num_threads, or all available). */
int todre_cpu_threads(const struct todre_cpu_backend *be);

/* Kernels (src/cpu/select.c, src/cpu/relevance.c). */
todre_status todre_cpu_select(struct todre_backend *be, const struct todre_select_job *job,
                              struct todre_diag *diag);
todre_status todre_cpu_relevance_probs(struct todre_backend *be,
                                       const struct todre_relevance_probs_job *job,
                                       struct todre_diag *diag);
todre_status todre_cpu_relevance_qk(struct todre_backend *be,
                                    const struct todre_relevance_qk_job *job,
                                    struct todre_diag *diag);

#endif /* TODRE_SRC_CPU_INTERNAL_H */
