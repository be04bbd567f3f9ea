/* The CUDA backend's contract as seen through the public API, on any machine:
 *  - the registry lists "cuda" when the module is built, with its file, its
 *    availability (with the reason when it cannot run) and, when available,
 *    sensible device properties; asking creates no CUDA state;
 *  - "auto" falls back to the CPU silently; naming "cuda" where it cannot run
 *    is a clear BACKEND_UNAVAILABLE, and a missing module file is named;
 *  - arrays on the wrong side (host memory in a CUDA context, a CUDA
 *    descriptor in a CPU context) are INVALID_ARGUMENT naming the array;
 *  - with a device: the memory functions (alloc, copy both ways, free).
 *
 * Uses no CUDA header: it builds and runs without the toolkit. Cases that
 * need a usable CUDA device are reported as skipped where there is none.
 * Built again against the CPU emulator (TODRE_TEST_EMULATED_RT,
 * tests/cuda_emu/CMakeLists.txt) it also reads the emulator's counters, and checks
 * that a stream under CUDA-graph capture is refused (calls, copies and
 * set_stream, which touches neither stream then), that every call runs in
 * the context's own (primary) CUDA context and gives the caller's current
 * context back (a non-primary one on the same or another device, or none on
 * a thread that never chose a device), and that the workspace never grows
 * past the workspace limit. */
#define _POSIX_C_SOURCE 200809L
#define TODRE_EXPERIMENTAL_API

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "todre_test.h"

#ifdef TODRE_TEST_EMULATED_RT
#include <cuda_runtime_api.h> /* the emulator's: counters, TODRE_EMU_* */

static struct todre_emu_counters counters(void)
{
    struct todre_emu_counters c;
    todre_emu_get_counters(&c);
    return c;
}
#endif

#define MISSING_MODULE "/nonexistent/todre-test-dir/libtodre-cuda.so"

static char *self_exe; /* argv[0], for the child runs */

/* Registry index of "cuda", or -1; fills @p props when found. */
static int find_cuda(todre_backend_props *props)
{
    int n = 0;
    tt_assert_ok(todre_backend_count(&n));
    for (int i = 0; i < n; i++) {
        todre_backend_props p;
        memset(&p, 0, sizeof p);
        p.struct_size = sizeof p;
        tt_assert_ok(todre_backend_get_props(i, &p));
        if (p.name && strcmp(p.name, "cuda") == 0) {
            if (props) *props = p;
            return i;
        }
    }
    return -1;
}

static int cuda_available(void)
{
    todre_backend_props p;
    return find_cuda(&p) >= 0 && p.available;
}

/* The reason this run expects "cuda" to be unavailable for (set by the
 * emulated no-device / old-device runs), or NULL. */
static const char *expected_reason(void)
{
    const char *r = getenv("TODRE_TEST_EXPECT_REASON");
    return r && r[0] ? r : NULL;
}

/* ---- registry ---------------------------------------------------------------- */

/* "cuda" is registered from the module file, says whether it can run (and why
 * not), describes its devices, and none of this creates CUDA state. Runs
 * first, so that the registry's scan happens inside the emulator counters'
 * window. */
static void test_registry_reports_cuda(void **state)
{
    (void)state;
#ifdef TODRE_TEST_EMULATED_RT
    struct todre_emu_counters before = counters();
#endif
    int n = 0;
    tt_assert_ok(todre_backend_count(&n));
    assert_true(n >= 1);
    todre_backend_props cpu;
    memset(&cpu, 0, sizeof cpu);
    cpu.struct_size = sizeof cpu;
    tt_assert_ok(todre_backend_get_props(0, &cpu));
    assert_string_equal(cpu.name, "cpu");

    todre_backend_props p;
    int idx = find_cuda(&p);
#ifndef TODRE_TEST_CUDA_MODULE_BUILT
    /* No module in this build: nothing registered to describe (a module
     * installed elsewhere on this machine may still be found). */
    if (idx < 0) {
        todre_context *ctx = NULL;
        assert_int_equal(todre_context_create("cuda", 0, &ctx), TODRE_ERR_BACKEND_UNAVAILABLE);
        assert_null(ctx);
        return;
    }
#endif
    assert_true(idx >= 1);
    assert_string_equal(p.name, "cuda");
    assert_int_equal(p.device_type, kDLCUDA);
    assert_non_null(p.path);
    assert_non_null(p.reason);
#ifdef TODRE_TEST_EMULATED_RT
    /* Loaded from the file TODRE_BACKEND_PATH names, whatever its name. */
    assert_non_null(getenv("TODRE_BACKEND_PATH"));
    assert_string_equal(p.path, getenv("TODRE_BACKEND_PATH"));
#else
    const char *base = strrchr(p.path, '/');
    assert_non_null(base);
    assert_string_equal(base + 1, "libtodre-cuda.so");
#endif

    const char *want_reason = expected_reason();
    if (p.available) {
        assert_null(want_reason);
        assert_true(p.device_count >= 1);
        assert_string_equal(p.reason, "");
    } else {
        assert_int_equal(p.device_count, 0);
        assert_true(strlen(p.reason) > 0);
        if (want_reason && !strstr(p.reason, want_reason))
            fail_msg("reason \"%s\" does not say \"%s\"", p.reason, want_reason);
    }
#ifdef TODRE_TEST_EMULATED_RT
    /* The emulated device is present unless this run hides it. */
    assert_int_equal(p.available, want_reason == NULL);
    if (p.available) assert_int_equal(p.device_count, 1);
#endif

    for (int dev = 0; dev < p.device_count; dev++) {
        todre_device_props d;
        memset(&d, 0, sizeof d);
        d.struct_size = sizeof d;
        tt_assert_ok(todre_device_get_props("cuda", dev, &d));
        assert_true(strlen(d.name) > 0);
        char arch[64];
        snprintf(arch, sizeof arch, "sm_%d%d", d.compute_major, d.compute_minor);
        assert_string_equal(d.arch, arch);
        assert_true(d.compute_major >= 8);
        assert_true(d.total_memory > 0);
        assert_true(d.cores > 0);
#ifdef TODRE_TEST_EMULATED_RT
        assert_string_equal(d.name, "libtodre CPU emulator");
        assert_string_equal(d.arch, "sm_90");
        assert_int_equal(d.total_memory, (int64_t)8 << 30);
        assert_int_equal(d.cores, getenv("TODRE_EMU_SMS") ? atoi(getenv("TODRE_EMU_SMS")) : 4);
#endif
    }
    if (p.available) {
        todre_device_props d;
        memset(&d, 0, sizeof d);
        d.struct_size = sizeof d;
        tt_assert_fails(NULL, todre_device_get_props("cuda", p.device_count, &d),
                        TODRE_ERR_INVALID_ARGUMENT, "device");
    }

#ifdef TODRE_TEST_EMULATED_RT
    /* The module was asked (device queries), and nothing was created: no
     * cuBLAS handle, no device or pinned memory, no event, no launch. */
    struct todre_emu_counters after = counters();
    assert_true(after.device_queries > before.device_queries);
    assert_int_equal(after.blas_handles - before.blas_handles, 0);
    assert_int_equal(after.device_allocs - before.device_allocs, 0);
    assert_int_equal(after.host_allocs - before.host_allocs, 0);
    assert_int_equal(after.events - before.events, 0);
    assert_int_equal(after.launches - before.launches, 0);
    /* Creating a context is what pays for them. */
    if (p.available) {
        todre_context *ctx = NULL;
        tt_assert_ok(todre_context_create("cuda", 0, &ctx));
        struct todre_emu_counters created = counters();
        assert_int_equal(created.blas_handles - after.blas_handles, 1);
        assert_true(created.device_allocs > after.device_allocs);
        todre_context_destroy(ctx);
    }
#endif
}

/* ---- choosing a backend -------------------------------------------------------------- */

/* Run fn with stdout and stderr redirected to a temporary file; return how
 * many bytes it printed. */
static long printed_by(void (*fn)(void *), void *arg)
{
    char path[] = "/tmp/todre_cuda_contract_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stdout);
    fflush(stderr);
    int out = dup(1), err = dup(2);
    dup2(fd, 1);
    dup2(fd, 2);
    fn(arg);
    fflush(stdout);
    fflush(stderr);
    dup2(out, 1);
    dup2(err, 2);
    close(out);
    close(err);
    long size = (long)lseek(fd, 0, SEEK_END);
    close(fd);
    unlink(path);
    return size;
}

struct auto_result {
    todre_status st[2];
    char name[2][32];
};

static void create_auto(void *arg)
{
    struct auto_result *r = arg;
    const char *names[2] = {"auto", NULL};
    for (int i = 0; i < 2; i++) {
        todre_context *ctx = NULL;
        r->st[i] = todre_context_create(names[i], 0, &ctx);
        snprintf(r->name[i], sizeof r->name[i], "%s", ctx ? todre_context_backend(ctx) : "");
        todre_context_destroy(ctx);
    }
}

/* "auto" and NULL succeed, run on CUDA exactly when CUDA is available, print
 * nothing and leave no error message behind. */
static void test_auto_falls_back_silently(void **state)
{
    (void)state;
    int avail = cuda_available();
    struct auto_result r;
    long bytes = printed_by(create_auto, &r);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r.st[i], TODRE_OK);
        assert_string_equal(r.name[i], avail ? "cuda" : "cpu");
    }
    assert_int_equal(bytes, 0);
    assert_string_equal(todre_last_error(), "");
}

/* Naming "cuda": where it cannot run, BACKEND_UNAVAILABLE with the reason
 * (the module's, with the CUDA error text, or that no module is registered);
 * where it can, a CUDA context on device 0, and a device index the machine
 * lacks is INVALID_ARGUMENT naming the device. The out-pointer is written
 * only on success. */
static void test_explicit_cuda(void **state)
{
    (void)state;
    todre_context *const sentinel = (todre_context *)(uintptr_t)0x5a5a;
    todre_context *ctx = sentinel;
    todre_status st = todre_context_create("cuda", 0, &ctx);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", todre_last_error());
    todre_backend_props p;
    int idx = find_cuda(&p);
    if (idx < 0 || !p.available) {
        assert_int_equal(st, TODRE_ERR_BACKEND_UNAVAILABLE);
        assert_ptr_equal(ctx, sentinel);
        if (idx >= 0) {
            if (!strstr(msg, p.reason)) fail_msg("message \"%s\" lacks the reason \"%s\"", msg, p.reason);
            assert_non_null(strstr(msg, "CUDA"));
        } else {
            assert_non_null(strstr(msg, "cuda"));
        }
        const char *want = expected_reason();
        if (want && !strstr(msg, want)) fail_msg("message \"%s\" does not say \"%s\"", msg, want);
        return;
    }
    tt_assert_ok(st);
    assert_string_equal(todre_context_backend(ctx), "cuda");
    DLDevice dev = {kDLCPU, -1};
    tt_assert_ok(todre_context_device(ctx, &dev));
    assert_int_equal(dev.device_type, kDLCUDA);
    assert_int_equal(dev.device_id, 0);
    todre_context_destroy(ctx);

    ctx = sentinel;
    tt_assert_fails(NULL, todre_context_create("cuda", p.device_count, &ctx),
                    TODRE_ERR_INVALID_ARGUMENT, "device");
    assert_ptr_equal(ctx, sentinel);
}

/* Child of test_missing_module_is_named, in a process of its own because
 * the registry scans once per process: TODRE_BACKEND_PATH names a file that
 * does not exist. "cuda" fails naming that path; "auto" still works. */
static void child_missing_module(void **state)
{
    (void)state;
    assert_string_equal(getenv("TODRE_BACKEND_PATH"), MISSING_MODULE);
    assert_true(find_cuda(NULL) < 0);
    todre_context *ctx = NULL;
    assert_int_equal(todre_context_create("cuda", 0, &ctx), TODRE_ERR_BACKEND_UNAVAILABLE);
    assert_null(ctx);
    if (!strstr(todre_last_error(), MISSING_MODULE))
        fail_msg("message \"%s\" does not name %s", todre_last_error(), MISSING_MODULE);
    tt_assert_ok(todre_context_create("auto", 0, &ctx));
    assert_string_equal(todre_context_backend(ctx), "cpu");
    todre_context_destroy(ctx);
}

static void test_missing_module_is_named(void **state)
{
    (void)state;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("TODRE_BACKEND_PATH", MISSING_MODULE, 1);
        execl(self_exe, self_exe, "--child-missing-module", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- arrays on the wrong side ------------------------------------------------------- */

/* A descriptor that says CUDA given to a CPU context is rejected before any
 * memory is read (the pointer below is never dereferenced). */
static void test_cuda_descriptor_in_cpu_context(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    tt_array emb, out, attn;
    tt_array2(&emb, (void *)(uintptr_t)0x1000, TODRE_DTYPE_F32, 16, 8, 8);
    tt_array_on(&emb, kDLCUDA, 0);
    int64_t out_buf[4];
    tt_array1(&out, out_buf, TODRE_DTYPE_I64, 4);
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, 4,
                                         TODRE_ORDER_POSITION);
    tt_assert_fails(ctx, todre_select(ctx, cfg, &emb.dl, NULL, &out.dl),
                    TODRE_ERR_INVALID_ARGUMENT, "embeddings");

    tt_array3(&attn, (void *)(uintptr_t)0x1000, TODRE_DTYPE_F32, 2, 4, 4);
    tt_array_on(&attn, kDLCUDA, 0);
    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(1, 1, &rel));
    tt_assert_ok(todre_relevance_set_layout(rel, 1, 2, 1));
    tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, rel, 0, &attn.dl, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "attn");

    todre_relevance_destroy(rel);
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
}

/* With a device: host memory described as CUDA memory is caught by the
 * backend (cudaPointerGetAttributes) and named, for stage 1, stage 2 and a
 * copy; the context stays usable afterwards. */
static void test_host_memory_in_cuda_context(void **state)
{
    (void)state;
    if (!cuda_available()) skip();
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create("cuda", 0, &ctx));
    float *host = calloc(16 * 8, sizeof *host);
    int64_t *out_host = calloc(4, sizeof *out_host);
    assert_true(host && out_host);
    for (int i = 0; i < 16 * 8; i++) host[i] = (float)(i % 7) - 3.f;
    tt_array emb, out, attn, src;
    tt_array2(&emb, host, TODRE_DTYPE_F32, 16, 8, 8);
    tt_array_on(&emb, kDLCUDA, 0);
    tt_array1(&out, out_host, TODRE_DTYPE_I64, 4);
    tt_array_on(&out, kDLCUDA, 0);
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, 4,
                                         TODRE_ORDER_POSITION);
    tt_assert_fails(ctx, todre_select(ctx, cfg, &emb.dl, NULL, &out.dl),
                    TODRE_ERR_INVALID_ARGUMENT, "embeddings");

    tt_array3(&attn, host, TODRE_DTYPE_F32, 2, 4, 4);
    tt_array_on(&attn, kDLCUDA, 0);
    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(1, 1, &rel));
    tt_assert_ok(todre_relevance_set_layout(rel, 1, 2, 1));
    tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, rel, 0, &attn.dl, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "attn");

    /* A copy "to the device" whose destination is host memory. */
    float back[16 * 8];
    tt_array2(&src, back, TODRE_DTYPE_F32, 16, 8, 8);
    tt_assert_fails(ctx, todre_context_copy(ctx, &emb.dl, &src.dl), TODRE_ERR_INVALID_ARGUMENT,
                    "dst");
    tt_assert_ok(todre_context_synchronize(ctx));

    todre_relevance_destroy(rel);
    todre_select_config_destroy(cfg);
    free(out_host);
    free(host);
    todre_context_destroy(ctx);
}

/* ---- memory ------------------------------------------------------------------------ */

/* todre_context_alloc gives aligned device memory the context accepts;
 * copies host -> device -> device -> host round-trip exactly (pageable host
 * memory); free accepts NULL; a zero-byte request is refused. */
static void test_memory_roundtrip(void **state)
{
    (void)state;
    if (!cuda_available()) skip();
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create("cuda", 0, &ctx));
    enum { N = 1000 };
    int64_t *src = malloc(sizeof(int64_t) * N), *dst = malloc(sizeof(int64_t) * N);
    assert_true(src && dst);
    for (int i = 0; i < N; i++) {
        src[i] = (int64_t)i * 7919 - 31;
        dst[i] = -1;
    }
#ifdef TODRE_TEST_EMULATED_RT
    struct todre_emu_counters before = counters();
#endif
    void *a = NULL, *b = NULL;
    tt_assert_ok(todre_context_alloc(ctx, sizeof(int64_t) * N, &a));
    tt_assert_ok(todre_context_alloc(ctx, sizeof(int64_t) * N, &b));
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal((uintptr_t)a % 256, 0);
    assert_int_equal((uintptr_t)b % 256, 0);
#ifdef TODRE_TEST_EMULATED_RT
    assert_int_equal(counters().device_allocs - before.device_allocs, 2);
#endif
    tt_array h_src, h_dst, d_a, d_b;
    tt_array1(&h_src, src, TODRE_DTYPE_I64, N);
    tt_array1(&h_dst, dst, TODRE_DTYPE_I64, N);
    tt_array1(&d_a, a, TODRE_DTYPE_I64, N);
    tt_array_on(&d_a, kDLCUDA, 0);
    tt_array1(&d_b, b, TODRE_DTYPE_I64, N);
    tt_array_on(&d_b, kDLCUDA, 0);
    tt_assert_ok(todre_context_copy(ctx, &d_a.dl, &h_src.dl));
    tt_assert_ok(todre_context_copy(ctx, &d_b.dl, &d_a.dl));
    tt_assert_ok(todre_context_copy(ctx, &h_dst.dl, &d_b.dl));
    assert_memory_equal(src, dst, sizeof(int64_t) * N);

    /* The memory is usable as a CUDA array of the context: select from it. */
    float emb_host[32 * 16];
    tt_fill_clustered(emb_host, 32, 16, 16, 4, 0.5, 3);
    void *emb_dev = NULL;
    tt_assert_ok(todre_context_alloc(ctx, sizeof emb_host, &emb_dev));
    tt_array e_h, e_d, o_d;
    tt_array2(&e_h, emb_host, TODRE_DTYPE_F32, 32, 16, 16);
    tt_array2(&e_d, emb_dev, TODRE_DTYPE_F32, 32, 16, 16);
    tt_array_on(&e_d, kDLCUDA, 0);
    tt_assert_ok(todre_context_copy(ctx, &e_d.dl, &e_h.dl));
    tt_array1(&o_d, a, TODRE_DTYPE_I64, 8);
    tt_array_on(&o_d, kDLCUDA, 0);
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, 8,
                                         TODRE_ORDER_POSITION);
    tt_assert_ok(todre_select(ctx, cfg, &e_d.dl, NULL, &o_d.dl));
    tt_assert_ok(todre_context_synchronize(ctx));
    int64_t pos[8];
    tt_array o_h;
    tt_array1(&o_h, pos, TODRE_DTYPE_I64, 8);
    tt_assert_ok(todre_context_copy(ctx, &o_h.dl, &o_d.dl));
    for (int i = 0; i < 8; i++) { /* 8 distinct rows, in position order */
        assert_true(pos[i] >= 0 && pos[i] < 32);
        if (i > 0) assert_true(pos[i] > pos[i - 1]);
    }
    todre_select_config_destroy(cfg);

    tt_assert_ok(todre_context_free(ctx, emb_dev));
    tt_assert_ok(todre_context_free(ctx, b));
    tt_assert_ok(todre_context_free(ctx, a));
    tt_assert_ok(todre_context_free(ctx, NULL));
    void *z = (void *)&z;
    tt_assert_fails(ctx, todre_context_alloc(ctx, 0, &z), TODRE_ERR_INVALID_ARGUMENT, "bytes");
    free(dst);
    free(src);
    todre_context_destroy(ctx);
}

#ifdef TODRE_TEST_EMULATED_RT
/* A stream being captured into a CUDA graph is refused (UNSUPPORTED, named)
 * rather than recorded with staging buffers that later calls overwrite; so
 * is a copy, which waits on the stream. The context works again once
 * capture ends. The emulator reports capture while TODRE_EMU_CAPTURING=1. */
static void test_graph_capture_is_refused(void **state)
{
    (void)state;
    if (!cuda_available()) skip();
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create("cuda", 0, &ctx));
    float host[16 * 8];
    for (int i = 0; i < 16 * 8; i++) host[i] = (float)((i * 7) % 11) - 5.f;
    void *emb = NULL, *out = NULL;
    tt_assert_ok(todre_context_alloc(ctx, sizeof host, &emb));
    tt_assert_ok(todre_context_alloc(ctx, sizeof(int64_t) * 4, &out));
    tt_array e_h, e_d, o_d;
    tt_array2(&e_h, host, TODRE_DTYPE_F32, 16, 8, 8);
    tt_array2(&e_d, emb, TODRE_DTYPE_F32, 16, 8, 8);
    tt_array_on(&e_d, kDLCUDA, 0);
    tt_array1(&o_d, out, TODRE_DTYPE_I64, 4);
    tt_array_on(&o_d, kDLCUDA, 0);
    tt_assert_ok(todre_context_copy(ctx, &e_d.dl, &e_h.dl));
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, 4,
                                         TODRE_ORDER_POSITION);
    setenv("TODRE_EMU_CAPTURING", "1", 1);
    todre_status st = todre_select(ctx, cfg, &e_d.dl, NULL, &o_d.dl);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", todre_context_last_error(ctx));
    todre_status st_copy = todre_context_copy(ctx, &e_d.dl, &e_h.dl);
    char msg_copy[512];
    snprintf(msg_copy, sizeof msg_copy, "%s", todre_context_last_error(ctx));
    unsetenv("TODRE_EMU_CAPTURING");
    assert_int_equal(st, TODRE_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg, "graph"));
    assert_int_equal(st_copy, TODRE_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg_copy, "graph"));
    tt_assert_ok(todre_select(ctx, cfg, &e_d.dl, NULL, &o_d.dl));
    tt_assert_ok(todre_context_synchronize(ctx));
    todre_select_config_destroy(cfg);
    tt_assert_ok(todre_context_free(ctx, out));
    tt_assert_ok(todre_context_free(ctx, emb));
    todre_context_destroy(ctx);
}

/* The GRAM strategy's size limit comes from the device's shared memory:
 * with 9216 bytes of opt-in shared memory per block, gram_max_n is
 * (9216 - 1024) / 8 = 1024, so a requested GRAM runs (cuBLAS) for a set of
 * 1000 rows and falls back to GEMV (no GEMM) for one of 1100; both select
 * k distinct rows. */
static void test_gram_limit_follows_shared_memory(void **state)
{
    (void)state;
    if (!cuda_available()) skip();
    setenv("TODRE_EMU_SMEM_OPTIN", "9216", 1);
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create("cuda", 0, &ctx));
    tt_ctx_set(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, 2);
    const int64_t ns[2] = {1000, 1100}, d = 16, k = 5;
    float *host = malloc(sizeof(float) * (size_t)(1100 * d));
    assert_non_null(host);
    tt_fill_clustered(host, 1100, d, d, 7, 0.5, 23);
    void *emb = NULL, *out = NULL;
    tt_assert_ok(todre_context_alloc(ctx, sizeof(float) * (size_t)(1100 * d), &emb));
    tt_assert_ok(todre_context_alloc(ctx, sizeof(int64_t) * (size_t)k, &out));
    tt_array e_h, e_d, o_d, o_h;
    tt_array2(&e_h, host, TODRE_DTYPE_F32, 1100, d, d);
    tt_array2(&e_d, emb, TODRE_DTYPE_F32, 1100, d, d);
    tt_array_on(&e_d, kDLCUDA, 0);
    tt_assert_ok(todre_context_copy(ctx, &e_d.dl, &e_h.dl));
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, k,
                                         TODRE_ORDER_POSITION);
    for (int i = 0; i < 2; i++) {
        tt_array2(&e_d, emb, TODRE_DTYPE_F32, ns[i], d, d);
        tt_array_on(&e_d, kDLCUDA, 0);
        tt_array1(&o_d, out, TODRE_DTYPE_I64, k);
        tt_array_on(&o_d, kDLCUDA, 0);
        struct todre_emu_counters before = counters();
        tt_assert_ok(todre_select(ctx, cfg, &e_d.dl, NULL, &o_d.dl));
        tt_assert_ok(todre_context_synchronize(ctx));
        struct todre_emu_counters after = counters();
        if (i == 0) assert_true(after.blas_calls > before.blas_calls);
        else assert_int_equal(after.blas_calls - before.blas_calls, 0);
        int64_t pos[5];
        tt_assert_ok(todre_context_copy(ctx, tt_array1(&o_h, pos, TODRE_DTYPE_I64, k), &o_d.dl));
        for (int64_t t = 0; t < k; t++) {
            assert_true(pos[t] >= 0 && pos[t] < ns[i]);
            if (t > 0) assert_true(pos[t] > pos[t - 1]);
        }
    }
    todre_select_config_destroy(cfg);
    tt_assert_ok(todre_context_free(ctx, out));
    tt_assert_ok(todre_context_free(ctx, emb));
    todre_context_destroy(ctx);
    unsetenv("TODRE_EMU_SMEM_OPTIN");
    free(host);
    assert_int_equal(counters().violations, 0);
}

/* todre_context_reset(STATE) releases the cached workspace (the next call
 * grows it again) and changes no result. */
static void test_reset_state_releases_workspace(void **state)
{
    (void)state;
    if (!cuda_available()) skip();
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create("cuda", 0, &ctx));
    float host[64 * 16];
    tt_fill_clustered(host, 64, 16, 16, 5, 0.4, 17);
    void *emb = NULL, *out = NULL;
    tt_assert_ok(todre_context_alloc(ctx, sizeof host, &emb));
    tt_assert_ok(todre_context_alloc(ctx, sizeof(int64_t) * 10, &out));
    tt_array e_h, e_d, o_d, o_h;
    tt_array2(&e_h, host, TODRE_DTYPE_F32, 64, 16, 16);
    tt_array2(&e_d, emb, TODRE_DTYPE_F32, 64, 16, 16);
    tt_array_on(&e_d, kDLCUDA, 0);
    tt_array1(&o_d, out, TODRE_DTYPE_I64, 10);
    tt_array_on(&o_d, kDLCUDA, 0);
    tt_assert_ok(todre_context_copy(ctx, &e_d.dl, &e_h.dl));
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, 10,
                                         TODRE_ORDER_SELECTION);
    int64_t first[10], again[10], after[10];
    tt_assert_ok(todre_select(ctx, cfg, &e_d.dl, NULL, &o_d.dl));
    tt_array1(&o_h, first, TODRE_DTYPE_I64, 10);
    tt_assert_ok(todre_context_copy(ctx, &o_h.dl, &o_d.dl));
    struct todre_emu_counters c0 = counters();
    tt_assert_ok(todre_select(ctx, cfg, &e_d.dl, NULL, &o_d.dl));
    tt_array1(&o_h, again, TODRE_DTYPE_I64, 10);
    tt_assert_ok(todre_context_copy(ctx, &o_h.dl, &o_d.dl));
    struct todre_emu_counters c1 = counters();
    assert_int_equal(c1.device_allocs - c0.device_allocs, 0); /* warm: reused */
    tt_assert_ok(todre_context_reset(ctx, TODRE_RESET_STATE));
    tt_assert_ok(todre_select(ctx, cfg, &e_d.dl, NULL, &o_d.dl));
    tt_array1(&o_h, after, TODRE_DTYPE_I64, 10);
    tt_assert_ok(todre_context_copy(ctx, &o_h.dl, &o_d.dl));
    struct todre_emu_counters c2 = counters();
    assert_true(c2.device_allocs > c1.device_allocs); /* released, grown again */
    assert_memory_equal(first, again, sizeof first);
    assert_memory_equal(first, after, sizeof first);
    todre_select_config_destroy(cfg);
    tt_assert_ok(todre_context_free(ctx, out));
    tt_assert_ok(todre_context_free(ctx, emb));
    todre_context_destroy(ctx);
    assert_int_equal(counters().violations, 0);
}
#endif

#ifdef TODRE_TEST_EMULATED_RT
/* One small selection on ctx from device memory, on the GRAM strategy (a
 * cuBLAS GEMM), synchronised, read back and checked. Asserts nothing (it
 * also runs on threads of the test's own): returns the first failure, -1
 * for a wrong result. */
static int small_select_run(todre_context *ctx)
{
    float host[48 * 16];
    tt_fill_clustered(host, 48, 16, 16, 4, 0.5, 5);
    void *emb = NULL, *out = NULL;
    DLDevice dev;
    todre_status st = todre_context_device(ctx, &dev);
    if (st == TODRE_OK) st = todre_context_alloc(ctx, sizeof host, &emb);
    if (st == TODRE_OK) st = todre_context_alloc(ctx, sizeof(int64_t) * 6, &out);
    if (st != TODRE_OK) return st;
    tt_array e_h, e_d, o_d, o_h;
    tt_array2(&e_h, host, TODRE_DTYPE_F32, 48, 16, 16);
    tt_array2(&e_d, emb, TODRE_DTYPE_F32, 48, 16, 16);
    tt_array_on(&e_d, kDLCUDA, dev.device_id);
    tt_array1(&o_d, out, TODRE_DTYPE_I64, 6);
    tt_array_on(&o_d, kDLCUDA, dev.device_id);
    int64_t pos[6] = {0};
    st = todre_context_copy(ctx, &e_d.dl, &e_h.dl);
    if (st == TODRE_OK) st = todre_context_set_int(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, 2);
    todre_select_config *cfg = NULL;
    if (st == TODRE_OK) st = todre_select_config_create(&cfg);
    if (st == TODRE_OK) st = todre_select_config_set_int(cfg, TODRE_SELECT_KEEP, 6);
    if (st == TODRE_OK) st = todre_select_config_set_int(cfg, TODRE_SELECT_ORDER, TODRE_ORDER_POSITION);
    if (st == TODRE_OK) st = todre_select(ctx, cfg, &e_d.dl, NULL, &o_d.dl);
    if (st == TODRE_OK) st = todre_context_synchronize(ctx);
    if (st == TODRE_OK) st = todre_context_copy(ctx, tt_array1(&o_h, pos, TODRE_DTYPE_I64, 6), &o_d.dl);
    todre_select_config_destroy(cfg);
    todre_status st_free = todre_context_free(ctx, out);
    if (st_free == TODRE_OK) st_free = todre_context_free(ctx, emb);
    if (st == TODRE_OK) st = st_free;
    if (st != TODRE_OK) return st;
    for (int i = 0; i < 6; i++) /* 6 distinct rows, in position order */
        if (pos[i] < 0 || pos[i] >= 48 || (i > 0 && pos[i] <= pos[i - 1])) return -1;
    return TODRE_OK;
}

static void small_select(todre_context *ctx)
{
    int st = small_select_run(ctx);
    if (st != TODRE_OK)
        fail_msg("small selection: %s (%s)", st < 0 ? "wrong result" : todre_status_string(st),
                 todre_context_last_error(ctx));
}

/* todre_context_set_stream() with the old or the new stream under CUDA-graph
 * capture is refused (UNSUPPORTED, naming the capture) before it records an
 * event on one or makes the other wait: nothing is captured and the
 * context keeps its stream. Without capture it works. */
static void test_set_stream_refuses_capture(void **state)
{
    (void)state;
    if (!cuda_available()) skip();
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create("cuda", 0, &ctx));
    cudaStream_t s1, s2;
    assert_int_equal(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
    assert_int_equal(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
    cudaGraph_t g;

    /* The new stream captures. */
    struct todre_emu_counters c0 = counters();
    assert_int_equal(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal), cudaSuccess);
    tt_assert_fails(ctx, todre_context_set_stream(ctx, (void *)s1), TODRE_ERR_UNSUPPORTED,
                    "graph");
    assert_int_equal(cudaStreamEndCapture(s1, &g), cudaSuccess);
    cudaGraphDestroy(g);
    struct todre_emu_counters c1 = counters();
    assert_int_equal(c1.capture_ops - c0.capture_ops, 0);
    assert_int_equal(c1.events - c0.events, 0);

    /* Not capturing: accepted; then the old stream (s1) captures. */
    tt_assert_ok(todre_context_set_stream(ctx, (void *)s1));
    assert_int_equal(cudaStreamBeginCapture(s1, cudaStreamCaptureModeRelaxed), cudaSuccess);
    c0 = counters();
    tt_assert_fails(ctx, todre_context_set_stream(ctx, (void *)s2), TODRE_ERR_UNSUPPORTED,
                    "graph");
    tt_assert_fails(ctx, todre_context_set_stream(ctx, NULL), TODRE_ERR_UNSUPPORTED, "graph");
    c1 = counters();
    assert_int_equal(c1.capture_ops - c0.capture_ops, 0);
    assert_int_equal(c1.events - c0.events, 0);
    assert_int_equal(cudaStreamEndCapture(s1, &g), cudaSuccess);
    cudaGraphDestroy(g);

    /* The refused calls kept s1: work goes there, and s2 can go away. */
    assert_int_equal(cudaStreamDestroy(s2), cudaSuccess);
    small_select(ctx);

    /* The legacy stream as the new one while a blocking stream captures in
     * global mode: CUDA answers cudaErrorStreamCaptureImplicit. */
    cudaStream_t s3;
    assert_int_equal(cudaStreamCreate(&s3), cudaSuccess);
    assert_int_equal(cudaStreamBeginCapture(s3, cudaStreamCaptureModeGlobal), cudaSuccess);
    c0 = counters();
    tt_assert_fails(ctx, todre_context_set_stream(ctx, NULL), TODRE_ERR_UNSUPPORTED, "graph");
    c1 = counters();
    assert_int_equal(c1.capture_ops - c0.capture_ops, 0);
    assert_int_equal(cudaStreamEndCapture(s3, &g), cudaSuccess);
    cudaGraphDestroy(g);

    tt_assert_ok(todre_context_set_stream(ctx, NULL));
    small_select(ctx);
    todre_context_destroy(ctx);
    assert_int_equal(cudaStreamDestroy(s3), cudaSuccess);
    assert_int_equal(cudaStreamDestroy(s1), cudaSuccess);
    assert_int_equal(counters().violations, 0);
}

/* Every call runs in the context's own CUDA context (the device's primary
 * context, in which its events, cuBLAS handle and memory were made) and
 * gives the caller's current context back exactly:
 *  - a non-primary context of the caller's on the same device (the emulator
 *    reports events or a cuBLAS handle used under another context);
 *  - a non-primary context on another device (two emulated devices);
 *  - no context at all, on a thread that never chose a device: the call
 *    leaves none current (it must not bind, or create, device 0's primary
 *    context there). */
struct thread_run {
    todre_context *ctx;
    void *cur_before, *cur_after;
    int st;
};

static void *thread_calls(void *arg)
{
    struct thread_run *r = arg;
    r->cur_before = todre_emu_ctx_get_current();
    r->st = small_select_run(r->ctx);
    r->cur_after = todre_emu_ctx_get_current();
    return NULL;
}

static void run_in_fresh_thread(struct thread_run *r)
{
    pthread_t t;
    r->cur_before = r->cur_after = (void *)1;
    r->st = -2;
    assert_int_equal(pthread_create(&t, NULL, thread_calls, r), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(r->st, TODRE_OK);
}

static void test_caller_context_same_device(void **state)
{
    (void)state;
    if (!cuda_available()) skip();
    void *saved = todre_emu_ctx_get_current();
    uint64_t v0 = counters().violations;
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create("cuda", 0, &ctx));
    void *mine = todre_emu_ctx_create(0);
    small_select(ctx);
    assert_ptr_equal(todre_emu_ctx_get_current(), mine);
    todre_context_destroy(ctx);
    assert_ptr_equal(todre_emu_ctx_get_current(), mine);
    todre_emu_ctx_set_current(saved);
    assert_int_equal(counters().violations - v0, 0);
}

static void test_caller_context_none_on_fresh_thread(void **state)
{
    (void)state;
    if (!cuda_available()) skip();
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create("cuda", 0, &ctx));
    struct thread_run r = {ctx, NULL, NULL, 0};
    run_in_fresh_thread(&r);
    assert_null(r.cur_before);
    assert_null(r.cur_after);
    todre_context_destroy(ctx);
}

/* Two devices: a child process, because the registry counts devices once. */
static void test_caller_context_other_device(void **state)
{
    (void)state;
    if (!cuda_available()) skip();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("TODRE_EMU_DEVICES", "2", 1);
        execl(self_exe, self_exe, "--child-two-devices", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* Child of test_caller_context_other_device, with two emulated devices: a
 * context on device 1 while the caller's non-primary context on device 0 is
 * current, and from a fresh thread, whose primary context of device 0 must
 * not be bound (nor created) by the call. */
static void child_two_devices(void **state)
{
    (void)state;
    assert_true(cuda_available());
    void *mine = todre_emu_ctx_create(0);
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create("cuda", 1, &ctx));
    assert_ptr_equal(todre_emu_ctx_get_current(), mine);
    small_select(ctx);
    assert_ptr_equal(todre_emu_ctx_get_current(), mine);
    uint64_t inits = counters().primary_inits;
    struct thread_run r = {ctx, NULL, NULL, 0};
    run_in_fresh_thread(&r);
    assert_null(r.cur_before);
    assert_null(r.cur_after);
    assert_int_equal(counters().primary_inits - inits, 0);
    assert_int_equal(todre_emu_primary_active(0), 0);
    /* The instance holds one retain of its primary context, and gives it back. */
    assert_int_equal(todre_emu_primary_retains(1), 1);
    todre_context_destroy(ctx);
    assert_int_equal(todre_emu_primary_retains(1), 0);
    assert_ptr_equal(todre_emu_ctx_get_current(), mine);
    assert_int_equal(counters().violations, 0);
}

/* Growing a workspace buffer never goes past the workspace limit: a Gram
 * matrix of 360 rows, then one of 380, under a limit of 400 x 400 x 4 bytes
 * (1.5 x the first would be 777,600 bytes, above the 640,000 allowed). */
static void test_workspace_growth_stays_within_limit(void **state)
{
    (void)state;
    if (!cuda_available()) skip();
    const int64_t limit = 400 * 400 * 4, d = 16, k = 8, ns[2] = {360, 380};
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create("cuda", 0, &ctx));
    tt_ctx_set(ctx, TODRE_CONTEXT_WORKSPACE_LIMIT, limit);
    tt_ctx_set(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, 2);
    float *host = malloc(sizeof(float) * (size_t)(400 * d));
    assert_non_null(host);
    tt_fill_clustered(host, 400, d, d, 6, 0.5, 41);
    void *emb = NULL, *out = NULL;
    tt_assert_ok(todre_context_alloc(ctx, sizeof(float) * (size_t)(400 * d), &emb));
    tt_assert_ok(todre_context_alloc(ctx, sizeof(int64_t) * (size_t)k, &out));
    tt_array e_h, e_d, o_d;
    tt_array2(&e_h, host, TODRE_DTYPE_F32, 400, d, d);
    tt_array2(&e_d, emb, TODRE_DTYPE_F32, 400, d, d);
    tt_array_on(&e_d, kDLCUDA, 0);
    tt_assert_ok(todre_context_copy(ctx, &e_d.dl, &e_h.dl));
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, k,
                                         TODRE_ORDER_SELECTION);
    for (int i = 0; i < 2; i++) {
        tt_array2(&e_d, emb, TODRE_DTYPE_F32, ns[i], d, d);
        tt_array_on(&e_d, kDLCUDA, 0);
        tt_array1(&o_d, out, TODRE_DTYPE_I64, k);
        tt_array_on(&o_d, kDLCUDA, 0);
        todre_emu_reset_alloc_max();
        struct todre_emu_counters before = counters();
        tt_assert_ok(todre_select(ctx, cfg, &e_d.dl, NULL, &o_d.dl));
        tt_assert_ok(todre_context_synchronize(ctx));
        struct todre_emu_counters after = counters();
        assert_true(after.blas_calls > before.blas_calls); /* GRAM ran */
        /* The Gram buffer grew (to at least n * n * 4), within the limit. */
        assert_true(after.device_alloc_max >= (uint64_t)(ns[i] * ns[i] * 4));
        if (after.device_alloc_max > (uint64_t)limit)
            fail_msg("n = %lld: a workspace buffer of %llu bytes under a limit of %lld",
                     (long long)ns[i], (unsigned long long)after.device_alloc_max,
                     (long long)limit);
    }
    todre_select_config_destroy(cfg);
    tt_assert_ok(todre_context_free(ctx, out));
    tt_assert_ok(todre_context_free(ctx, emb));
    todre_context_destroy(ctx);
    free(host);
    assert_int_equal(counters().violations, 0);
}
#endif

int main(int argc, char **argv)
{
    self_exe = argv[0];
    if (argc > 1 && strcmp(argv[1], "--child-missing-module") == 0) {
        const struct CMUnitTest child[] = {cmocka_unit_test(child_missing_module)};
        return cmocka_run_group_tests(child, NULL, NULL);
    }
#ifdef TODRE_TEST_EMULATED_RT
    if (argc > 1 && strcmp(argv[1], "--child-two-devices") == 0) {
        const struct CMUnitTest child[] = {cmocka_unit_test(child_two_devices)};
        return cmocka_run_group_tests(child, NULL, NULL);
    }
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_reports_cuda), /* first: see there */
        cmocka_unit_test(test_auto_falls_back_silently),
        cmocka_unit_test(test_explicit_cuda),
        cmocka_unit_test(test_missing_module_is_named),
        cmocka_unit_test(test_cuda_descriptor_in_cpu_context),
        cmocka_unit_test(test_host_memory_in_cuda_context),
        cmocka_unit_test(test_memory_roundtrip),
#ifdef TODRE_TEST_EMULATED_RT
        cmocka_unit_test(test_graph_capture_is_refused),
        cmocka_unit_test(test_reset_state_releases_workspace),
        cmocka_unit_test(test_gram_limit_follows_shared_memory),
        cmocka_unit_test(test_set_stream_refuses_capture),
        cmocka_unit_test(test_caller_context_same_device),
        cmocka_unit_test(test_caller_context_none_on_fresh_thread),
        cmocka_unit_test(test_caller_context_other_device),
        cmocka_unit_test(test_workspace_growth_stays_within_limit),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
