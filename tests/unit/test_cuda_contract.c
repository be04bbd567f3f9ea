/* The CUDA backend's contract as seen through the public API, on any machine:
 * AUTO falls back to CPU silently, an explicit CUDA request that cannot run
 * is a clear BACKEND_UNAVAILABLE (naming a missing module file), and tensors
 * on the wrong side (host memory in a CUDA context, a CUDA descriptor in a
 * CPU context) are INVALID_ARGUMENT naming the tensor.
 *
 * Uses no CUDA header: it builds and runs without the toolkit. Cases that
 * need a GPU are reported as skipped on machines without one. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "todre_test.h"

static int cuda_available(void)
{
    int avail = 0;
    tt_assert_ok(todre_backend_available(TODRE_BACKEND_CUDA, &avail));
    return avail;
}

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
    todre_status st;
    todre_backend_kind kind;
};

static void create_auto(void *arg)
{
    struct auto_result *r = arg;
    todre_context *ctx = NULL;
    r->st = todre_context_create(TODRE_BACKEND_AUTO, 0, &ctx);
    r->kind = TODRE_BACKEND_AUTO;
    if (r->st == TODRE_OK) todre_context_backend(ctx, &r->kind);
    todre_context_destroy(ctx);
}

/* AUTO succeeds, runs on CUDA exactly when CUDA is available, prints
 * nothing and leaves no error message behind. */
static void test_auto_falls_back_silently(void **state)
{
    (void)state;
    int avail = cuda_available();
    struct auto_result r;
    long bytes = printed_by(create_auto, &r);
    assert_int_equal(r.st, TODRE_OK);
    assert_int_equal(r.kind, avail ? TODRE_BACKEND_CUDA : TODRE_BACKEND_CPU);
    assert_int_equal(bytes, 0);
    assert_string_equal(todre_last_error(), "");
}

/* Without a usable GPU, explicit CUDA is BACKEND_UNAVAILABLE with a reason,
 * the out-pointer is NULL, and todre_backend_available says 0 with the same
 * kind of reason. */
static void test_explicit_cuda_unavailable(void **state)
{
    (void)state;
    if (cuda_available()) skip();
    todre_context *ctx = (todre_context *)&ctx; /* must be overwritten */
    assert_int_equal(todre_context_create(TODRE_BACKEND_CUDA, 0, &ctx),
                     TODRE_ERR_BACKEND_UNAVAILABLE);
    assert_null(ctx);
    assert_true(strlen(todre_last_error()) > 0);
    assert_non_null(strstr(todre_last_error(), "CUDA"));

    int avail = 1;
    assert_int_equal(todre_backend_available(TODRE_BACKEND_CUDA, &avail), TODRE_OK);
    assert_int_equal(avail, 0);
    assert_true(strlen(todre_last_error()) > 0);
}

/* TODRE_CUDA_MODULE naming a missing file: explicit CUDA fails and the
 * message names that path (on any machine, GPU or not); AUTO still works. */
static void test_missing_module_is_named(void **state)
{
    (void)state;
    const char *path = "/nonexistent/todre-test-dir/libtodre-cuda.so";
    /* Restored afterwards: under the emulator it names the module to use. */
    char *saved = getenv("TODRE_CUDA_MODULE") ? strdup(getenv("TODRE_CUDA_MODULE")) : NULL;
    assert_int_equal(setenv("TODRE_CUDA_MODULE", path, 1), 0);
    todre_context *ctx = NULL;
    todre_status st = todre_context_create(TODRE_BACKEND_CUDA, 0, &ctx);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", todre_last_error());
    todre_context *auto_ctx = NULL;
    todre_status st_auto = todre_context_create(TODRE_BACKEND_AUTO, 0, &auto_ctx);
    todre_backend_kind kind = TODRE_BACKEND_AUTO;
    if (auto_ctx) todre_context_backend(auto_ctx, &kind);
    todre_context_destroy(auto_ctx);
    if (saved) setenv("TODRE_CUDA_MODULE", saved, 1);
    else unsetenv("TODRE_CUDA_MODULE");
    free(saved);

    assert_int_equal(st, TODRE_ERR_BACKEND_UNAVAILABLE);
    assert_null(ctx);
    assert_non_null(strstr(msg, path));
    assert_int_equal(st_auto, TODRE_OK);
    assert_int_equal(kind, TODRE_BACKEND_CPU);
}

/* A descriptor that says CUDA given to a CPU context is rejected before any
 * memory is read (the pointer below is never dereferenced). */
static void test_cuda_descriptor_in_cpu_context(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    int64_t shape[2] = {16, 8};
    todre_tensor *emb = NULL;
    tt_assert_ok(todre_tensor_create((void *)(uintptr_t)0x1000, TODRE_DTYPE_F32,
                                     TODRE_DEVICE_CUDA, 0, 2, shape, NULL, &emb));
    int64_t out_buf[4];
    todre_tensor *out = tt_tensor1(out_buf, TODRE_DTYPE_I64, 4);
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, 4,
                                         TODRE_ORDER_POSITION);
    tt_assert_fails(ctx, todre_select(ctx, cfg, emb, NULL, out), TODRE_ERR_INVALID_ARGUMENT,
                    "embeddings");

    int64_t ashape[3] = {2, 4, 4};
    todre_tensor *attn = NULL;
    tt_assert_ok(todre_tensor_create((void *)(uintptr_t)0x1000, TODRE_DTYPE_F32,
                                     TODRE_DEVICE_CUDA, 0, 3, ashape, NULL, &attn));
    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(1, 1, &rel));
    int64_t layer0 = 0;
    tt_assert_ok(todre_relevance_set_probe_layers(rel, &layer0, 1));
    tt_assert_ok(todre_relevance_set_layout(rel, 1, 2, 1));
    tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, rel, 0, attn, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "attn");

    todre_relevance_destroy(rel);
    todre_tensor_destroy(attn);
    todre_select_config_destroy(cfg);
    todre_tensor_destroy(out);
    todre_tensor_destroy(emb);
    todre_context_destroy(ctx);
}

/* With a GPU: host memory described as CUDA memory is caught by the backend
 * (cudaPointerGetAttributes) and named, for stage 1 and stage 2. */
static void test_host_memory_in_cuda_context(void **state)
{
    (void)state;
    if (!cuda_available()) skip();
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create(TODRE_BACKEND_CUDA, 0, &ctx));
    float *host = calloc(16 * 8, sizeof *host);
    for (int i = 0; i < 16 * 8; i++) host[i] = (float)(i % 7) - 3.f;
    int64_t shape[2] = {16, 8};
    todre_tensor *emb = NULL, *out = NULL;
    tt_assert_ok(todre_tensor_create(host, TODRE_DTYPE_F32, TODRE_DEVICE_CUDA, 0, 2, shape, NULL,
                                     &emb));
    int64_t *out_host = calloc(4, sizeof *out_host);
    int64_t k = 4;
    tt_assert_ok(todre_tensor_create(out_host, TODRE_DTYPE_I64, TODRE_DEVICE_CUDA, 0, 1, &k, NULL,
                                     &out));
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, 4,
                                         TODRE_ORDER_POSITION);
    tt_assert_fails(ctx, todre_select(ctx, cfg, emb, NULL, out), TODRE_ERR_INVALID_ARGUMENT,
                    "embeddings");

    int64_t ashape[3] = {2, 4, 4};
    todre_tensor *attn = NULL;
    tt_assert_ok(todre_tensor_create(host, TODRE_DTYPE_F32, TODRE_DEVICE_CUDA, 0, 3, ashape, NULL,
                                     &attn));
    todre_relevance *rel = NULL;
    tt_assert_ok(todre_relevance_create(1, 1, &rel));
    int64_t layer0 = 0;
    tt_assert_ok(todre_relevance_set_probe_layers(rel, &layer0, 1));
    tt_assert_ok(todre_relevance_set_layout(rel, 1, 2, 1));
    tt_assert_fails(ctx, todre_relevance_observe_probs(ctx, rel, 0, attn, NULL),
                    TODRE_ERR_INVALID_ARGUMENT, "attn");
    /* The context stays usable after a rejected call. */
    tt_assert_ok(todre_context_synchronize(ctx));

    todre_relevance_destroy(rel);
    todre_tensor_destroy(attn);
    todre_select_config_destroy(cfg);
    todre_tensor_destroy(out);
    todre_tensor_destroy(emb);
    free(out_host);
    free(host);
    todre_context_destroy(ctx);
}

#ifdef TODRE_TEST_EMULATED_RT
#include <cuda_runtime_api.h>
/* A stream being captured into a CUDA graph is refused (UNSUPPORTED, named)
 * rather than recorded with staging buffers that later calls overwrite; the
 * context works again once capture ends. The emulator reports capture while
 * TODRE_EMU_CAPTURING=1. */
static void test_graph_capture_is_refused(void **state)
{
    (void)state;
    if (!cuda_available()) skip();
    todre_context *ctx = NULL;
    tt_assert_ok(todre_context_create(TODRE_BACKEND_CUDA, 0, &ctx));
    int64_t shape[2] = {16, 8}, k = 4;
    float host[16 * 8];
    for (int i = 0; i < 16 * 8; i++) host[i] = (float)((i * 7) % 11) - 5.f;
    void *emb = NULL, *out = NULL;
    assert_int_equal(cudaMalloc(&emb, sizeof host), cudaSuccess);
    assert_int_equal(cudaMalloc(&out, sizeof(int64_t) * 4), cudaSuccess);
    assert_int_equal(cudaMemcpy(emb, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
    todre_tensor *emb_t = NULL, *out_t = NULL;
    tt_assert_ok(todre_tensor_create(emb, TODRE_DTYPE_F32, TODRE_DEVICE_CUDA, 0, 2, shape, NULL,
                                     &emb_t));
    tt_assert_ok(todre_tensor_create(out, TODRE_DTYPE_I64, TODRE_DEVICE_CUDA, 0, 1, &k, NULL,
                                     &out_t));
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_AUTO, 4,
                                         TODRE_ORDER_POSITION);
    setenv("TODRE_EMU_CAPTURING", "1", 1);
    todre_status st = todre_select(ctx, cfg, emb_t, NULL, out_t);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", todre_context_last_error(ctx));
    unsetenv("TODRE_EMU_CAPTURING");
    assert_int_equal(st, TODRE_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg, "graph"));
    tt_assert_ok(todre_select(ctx, cfg, emb_t, NULL, out_t));
    tt_assert_ok(todre_context_synchronize(ctx));
    todre_select_config_destroy(cfg);
    todre_tensor_destroy(out_t);
    todre_tensor_destroy(emb_t);
    cudaFree(out);
    cudaFree(emb);
    todre_context_destroy(ctx);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_falls_back_silently),
        cmocka_unit_test(test_explicit_cuda_unavailable),
        cmocka_unit_test(test_missing_module_is_named),
        cmocka_unit_test(test_cuda_descriptor_in_cpu_context),
        cmocka_unit_test(test_host_memory_in_cuda_context),
#ifdef TODRE_TEST_EMULATED_RT
        cmocka_unit_test(test_graph_capture_is_refused),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
