/* Internal interface of the CPU backend: the instance struct, its workspace,
 * and the kernels behind the table in cpu_backend.c. */
#ifndef TODRE_SRC_CPU_INTERNAL_H
#define TODRE_SRC_CPU_INTERNAL_H

#include "../backend.h"
#include "cpu_isa.h"

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
    /* A slot's contents kept for a later use in the same call
     * (todre_cpu_workspace_claim): the claim's number (from ws_claims,
     * counting up), 0 once any request for the slot may have replaced them
     * (todre_cpu_workspace clears it). */
    uint64_t ws_claim[TODRE_CPU_WS_COUNT];
    uint64_t ws_claims;
    /* Gram matrices of fp32 / widened rows (GRAM, the ISOLATED pivot): 1 =
     * libtodre's FMA kernels (select_rows.h), where OpenBLAS runs kernels of
     * a lesser class than the CPU's (blas_class.h) or $TODRE_CPU_GRAM=fma;
     * 0 = BLAS (cpu_backend.c, cpu_create). */
    int gram_fma;
    /* The same for bf16 rows of even d alone: 1 where the FMA kernels
     * multiply them by VDPBF16PS (select_rows.h, todre_sel_rows_bf16_dp),
     * at twice BLAS's rate, unless $TODRE_CPU_GRAM=blas. */
    int gram_fma_bf16;
};

/* Return a 64-byte aligned buffer of at least @p bytes for @p slot (contents
 * unspecified, the slot's claim cleared), or NULL when the allocation fails
 * (the caller reports TODRE_ERR_OUT_OF_MEMORY). */
void *todre_cpu_workspace(struct todre_cpu_backend *be, enum todre_cpu_ws_slot slot, size_t bytes);

/* Keep @p slot's current contents for a later use: returns the claim's
 * number (never 0), which todre_cpu_workspace_kept then checks. Used for
 * rows packed ahead of a set's run (slot B: todre_sel_rows_fma_prepack,
 * todre_sel_amx_rows_prepack). */
uint64_t todre_cpu_workspace_claim(struct todre_cpu_backend *be, enum todre_cpu_ws_slot slot);

/* Whether @p slot still holds what claim @p claim kept: no request for the
 * slot since (0: never). */
int todre_cpu_workspace_kept(const struct todre_cpu_backend *be, enum todre_cpu_ws_slot slot,
                             uint64_t claim);

/* Threads for the backend's own OpenMP regions in a call: params.num_threads,
 * or todre_cpu_default_threads() when 0 (or above it). Used only in
 * num_threads clauses: no process-wide OpenMP or OpenBLAS setting is ever
 * changed, so BLAS calls run with OpenBLAS's own thread count. */
int todre_cpu_threads(const struct todre_cpu_backend *be);

/* Threads a context uses by default: the processors available to the process
 * ($TODRE_CPU_PROCS overrides: cpu_backend.c). */
int todre_cpu_default_threads(void);

/* Kernels (src/cpu/select.c, src/cpu/relevance.c, src/cpu/relevance_qk.c). */
todre_status todre_cpu_select(struct todre_backend *be, const struct todre_select_job *job,
                              struct todre_diag *diag);
todre_status todre_cpu_relevance_probs(struct todre_backend *be,
                                       const struct todre_relevance_probs_job *job,
                                       struct todre_diag *diag);
todre_status todre_cpu_relevance_qk(struct todre_backend *be,
                                    const struct todre_relevance_qk_job *job,
                                    struct todre_diag *diag);

#endif /* TODRE_SRC_CPU_INTERNAL_H */
