/* The CPU backend: its registration (device enumeration and properties),
 * dispatch table, capabilities, instance and workspace. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "blas_class.h"
#include "cpu_internal.h"
#include "select_amx.h"
#include "select_rows.h"

/* ---- capabilities --------------------------------------------------------- */

/* Rough machine constants of the planner's cost model (src/select_plan.c),
 * measured on a 2-core Xeon with AVX-512 and AMX (bench/results/cpu-sapphire-rapids-2026-11-22.json):
 * GEMV streams rows from cache at about 50 bytes/ns, a BLAS fp32 Gram matrix
 * does about 135 fused multiply-adds per ns, packing / converting writes
 * about 12 bytes/ns. AMX's rate, 500 bf16 products per ns, is what its Gram
 * matrices and rows achieve beside the FMA kernels on a 2-core Emerald
 * Rapids (bench/bench_select.c, `bench_select 2880 4096 k dtype strategy`:
 * at n = 2880, d = 4096 the bf16 Gram matrix took 74 ms, the f16 one 205
 * ms, bf16 rows at k = 288 36 ms, where FMA f16 rows took 66 ms; 1200,
 * the kernel's rate on its own, made f16 sets from k = 455 take AMX's Gram
 * matrix, slower than FMA rows up to k of about 1300). All scale alike
 * with the thread count, so only their ratios matter; near the crossover
 * both strategies cost about the same. */
#define CPU_GEMV_BYTES_PER_NS 50.0
#define CPU_GRAM_FMA_PER_NS 135.0
#define CPU_AMX_FMA_PER_NS 500.0
#define CPU_PACK_BYTES_PER_NS 12.0

/* OpenBLAS's own query, bound weakly: NULL where another BLAS stands behind
 * cblas (a distribution's BLAS alternatives). */
extern char *openblas_get_corename(void) __attribute__((weak));

/* Who makes Gram matrices (struct todre_cpu_backend, gram_fma): BLAS,
 * unless OpenBLAS runs kernels of a lesser class than the CPU's
 * (blas_class.h: Debian 12's OpenBLAS on Emerald Rapids runs its SSE3
 * kernels, 4.4x slower) and the FMA kernels serve this process; there they
 * make the matrix about as fast as a BLAS of the CPU's class (the ISOLATED
 * pivot at n = 2880, f32: 589-643 ms with OpenBLAS's Prescott kernels,
 * 221-226 ms on the FMA kernels, 178-193 ms with OPENBLAS_CORETYPE=SkylakeX;
 * bench/results/cpu-emerald-rapids-2026-11-26.json). $TODRE_CPU_GRAM=fma or blas overrides the choice
 * (diagnostics and tests, as $TODRE_CPU_ISA). */
/* $TODRE_CPU_GRAM: 1 = fma, 0 = blas, -1 = unset or any other value. */
static int gram_env(void)
{
    const char *e = getenv("TODRE_CPU_GRAM");
    return e && strcmp(e, "fma") == 0 ? 1 : e && strcmp(e, "blas") == 0 ? 0 : -1;
}

static int gram_on_fma(void)
{
    if (!todre_sel_rows_fma_usable()) return 0;
    if (gram_env() >= 0) return gram_env();
    const char *core = openblas_get_corename ? openblas_get_corename() : NULL;
    return todre_cpu_blas_rate_factor(core, todre_cpu_isa()) < 1.0;
}

static void cpu_caps(struct todre_backend_caps *caps)
{
    int amx = todre_cpu_isa() == TODRE_CPU_ISA_AMX;
    memset(caps, 0, sizeof *caps);
    caps->strategies = 1u << TODRE_STRATEGY_GEMV | 1u << TODRE_STRATEGY_GRAM;
    caps->gram_max_n = 0; /* host memory: only the workspace limit bounds it */
    caps->gemv_bytes_per_ns = CPU_GEMV_BYTES_PER_NS;
    /* a BLAS of the CPU's class, or the FMA kernels where OpenBLAS is
     * weaker (gram_on_fma): about the same rate; the FMA kernels' ROWS rate
     * is ROWS_FMA_RATE_FACTOR times it (src/select_plan.c) */
    caps->gram_fma_per_ns = CPU_GRAM_FMA_PER_NS;
    caps->pack_bytes_per_ns = CPU_PACK_BYTES_PER_NS;
    if (amx) {
        /* AMX multiplies bf16 pairs exactly (f16 through the exact split),
         * in blocks of TODRE_SEL_AMX_BATCH rows; the ROWS store keeps fp32
         * rows padded to that block */
        caps->strategies |= 1u << TODRE_STRATEGY_ROWS;
        caps->gram_fast_fma_per_ns = CPU_AMX_FMA_PER_NS;
        caps->rows_batch = TODRE_SEL_AMX_BATCH;
        caps->rows_row_bytes_per_n = (int64_t)sizeof(float);
        /* ROWS: AMX makes bf16 rows; f32 (no exact AMX split) and f16 (the
         * split's packed rows stream twice the bytes) come from the
         * AVX-512 FMA kernel, as below */
        caps->rows_fast_dtypes = TODRE_SEL_AMX_ROWS_DTYPES;
        caps->rows_fma_batch = TODRE_SEL_ROWS_BATCH;
    } else if (todre_cpu_isa() >= TODRE_CPU_ISA_AVX2) {
        /* AVX2 / AVX-512: the FMA kernels (select_rows.h) make rows of any dtype,
         * TODRE_SEL_ROWS_BATCH at a time, at about the BLAS rate: ROWS
         * without a fast unit, costed at gram_fma_per_ns. Not on the generic
         * level: its portable kernel is slower than BLAS's GRAM there */
        caps->strategies |= 1u << TODRE_STRATEGY_ROWS;
        caps->rows_batch = TODRE_SEL_ROWS_BATCH;
        caps->rows_row_bytes_per_n = (int64_t)sizeof(float);
        /* bf16 by VDPBF16PS (AMD CPUs with AVX512_BF16): ROWS and GRAM
         * (select_gram.c, use_fma) at twice the FMA rate */
        caps->fma_dp_dtypes = todre_sel_rows_bf16_dp() ? 1u << TODRE_DTYPE_BF16 : 0u;
    }
}

/* ---- instance --------------------------------------------------------------- */

static void cpu_trim(struct todre_backend *base)
{
    struct todre_cpu_backend *be = (struct todre_cpu_backend *)base;
    for (int i = 0; i < TODRE_CPU_WS_COUNT; i++) {
        free(be->ws[i]);
        be->ws[i] = NULL;
        be->ws_size[i] = 0;
    }
}

static void cpu_destroy(struct todre_backend *base)
{
    if (!base) return;
    cpu_trim(base);
    free(base);
}

static todre_status cpu_mem_alloc(struct todre_backend *be, size_t bytes, void **ptr,
                                  struct todre_diag *diag)
{
    (void)be;
    void *p = NULL;
    if (bytes == 0 || posix_memalign(&p, 256, bytes) != 0)
        return todre_diag_set(diag, TODRE_ERR_OUT_OF_MEMORY,
                              "bytes: cannot allocate %zu bytes of host memory", bytes);
    *ptr = p;
    return TODRE_OK;
}

static todre_status cpu_mem_free(struct todre_backend *be, void *ptr, struct todre_diag *diag)
{
    (void)be;
    (void)diag;
    free(ptr);
    return TODRE_OK;
}

/* Both sides are host memory on the CPU, whatever dst_dev / src_dev say. */
static todre_status cpu_mem_copy(struct todre_backend *be, void *dst, int dst_dev,
                                 const void *src, int src_dev, size_t bytes,
                                 struct todre_diag *diag)
{
    (void)be;
    (void)dst_dev;
    (void)src_dev;
    (void)diag;
    if (bytes) memmove(dst, src, bytes);
    return TODRE_OK;
}

static const struct todre_backend_ops cpu_ops = {
    .abi_version = TODRE_BACKEND_ABI_VERSION,
    .name = "cpu",
    .select = todre_cpu_select,
    .relevance_probs = todre_cpu_relevance_probs,
    .relevance_qk = todre_cpu_relevance_qk,
    .set_stream = NULL,  /* only the NULL stream */
    .synchronize = NULL, /* synchronous */
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .mem_copy = cpu_mem_copy,
    .trim = cpu_trim,
    .destroy = cpu_destroy,
};

static todre_status cpu_create(int device, struct todre_backend **out, struct todre_diag *diag)
{
    if (device != 0)
        return todre_diag_set(diag, TODRE_ERR_INVALID_ARGUMENT,
                              "device: %d is not a CPU device (only 0)", device);
    struct todre_cpu_backend *be = calloc(1, sizeof *be);
    if (!be)
        return todre_diag_set(diag, TODRE_ERR_OUT_OF_MEMORY,
                              "backend: cannot allocate the CPU backend instance");
    be->base.ops = &cpu_ops;
    be->base.device_type = TODRE_DEVICE_HOST;
    be->base.device = 0;
    cpu_caps(&be->base.caps);
    be->gram_fma = gram_on_fma();
    be->gram_fma_bf16 = todre_sel_rows_bf16_dp() && gram_env() != 0;
    *out = &be->base;
    return TODRE_OK;
}

void *todre_cpu_workspace(struct todre_cpu_backend *be, enum todre_cpu_ws_slot slot, size_t bytes)
{
    be->ws_claim[slot] = 0;
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

uint64_t todre_cpu_workspace_claim(struct todre_cpu_backend *be, enum todre_cpu_ws_slot slot)
{
    return be->ws_claim[slot] = ++be->ws_claims;
}

int todre_cpu_workspace_kept(const struct todre_cpu_backend *be, enum todre_cpu_ws_slot slot,
                             uint64_t claim)
{
    return claim != 0 && be->ws_claim[slot] == claim;
}

/* $TODRE_CPU_PROCS=N (1 to 1024) stands for the processors available, read
 * once: so that the tests run the lookahead's teams of 3 and 4 threads
 * (select_greedy.c) on the 2-core CI machines, oversubscribed (diagnostics
 * and tests, as $TODRE_CPU_ISA). 0: unset or not such a number. */
static int procs_env;
static pthread_once_t procs_once = PTHREAD_ONCE_INIT;

static void procs_read(void)
{
    const char *e = getenv("TODRE_CPU_PROCS");
    char *end = NULL;
    long v = e ? strtol(e, &end, 10) : 0;
    procs_env = e && *e && end && *end == '\0' && v >= 1 && v <= 1024 ? (int)v : 0;
}

int todre_cpu_default_threads(void)
{
    pthread_once(&procs_once, procs_read);
    if (procs_env > 0) return procs_env;
#ifdef _OPENMP
    int n = omp_get_num_procs();
    return n > 0 ? n : 1;
#else
    return 1;
#endif
}

int todre_cpu_threads(const struct todre_cpu_backend *be)
{
    int64_t n = be->base.params.num_threads;
    int avail = todre_cpu_default_threads();
    if (n <= 0 || n > avail) return avail;
    return (int)n;
}

/* ---- registration -------------------------------------------------------- */

static todre_status cpu_device_count(int *count, struct todre_diag *diag)
{
    (void)diag;
    *count = 1;
    return TODRE_OK;
}

/* The "model name" of the first processor in /proc/cpuinfo, or "CPU". */
static void cpu_model_name(char *name, size_t cap)
{
    snprintf(name, cap, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "re");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        size_t len = strcspn(v, "\r\n");
        while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t')) len--;
        if (len > 0) snprintf(name, cap, "%.*s", (int)len, v);
        break;
    }
    fclose(f);
}

static todre_status cpu_device_props(int device, struct todre_backend_device_props *props,
                                     struct todre_diag *diag)
{
    if (device != 0)
        return todre_diag_set(diag, TODRE_ERR_INVALID_ARGUMENT,
                              "device: %d is not a CPU device (only 0)", device);
    memset(props, 0, sizeof *props);
    cpu_model_name(props->name, sizeof props->name);
    snprintf(props->arch, sizeof props->arch, "%s", todre_cpu_isa_name(todre_cpu_isa()));
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    props->total_memory = pages > 0 && page > 0 ? (int64_t)pages * (int64_t)page : 0;
    props->compute_major = 0;
    props->compute_minor = 0;
    props->cores = todre_cpu_default_threads();
    return TODRE_OK;
}

const struct todre_backend_reg todre_cpu_backend_reg = {
    .abi_version = TODRE_BACKEND_ABI_VERSION,
    .name = "cpu",
    .dl_device_type = kDLCPU,
    .device_count = cpu_device_count,
    .device_props = cpu_device_props,
    .create = cpu_create,
};
