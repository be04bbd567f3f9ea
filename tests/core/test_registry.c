/* The backend registry and the memory API on the CPU backend:
 *  - todre_backend_count / todre_backend_get_props: index 0 is the built-in
 *    "cpu" (path "", available, one device), every entry is consistent,
 *    bad indices and small structs are rejected;
 *  - todre_device_get_props("cpu", 0): a name, an arch in {amx, avx512,
 *    avx2, generic}, memory, cores; bad devices and names are rejected;
 *  - todre_context_create(NULL / "auto") gives a working context on the
 *    first available backend after "cpu", else "cpu";
 *  - $TODRE_BACKEND_PATH naming files that are not modules (a text file, a
 *    text file named like a module, a missing path) registers nothing and
 *    does not crash, and "cuda" is then BACKEND_UNAVAILABLE with the reason.
 *    The registry is built once per process, so each of these runs in a
 *    fresh process (this program re-executed with --child);
 *  - todre_context_alloc / free / copy on the CPU: round trip, alignment,
 *    and the shape / dtype / compactness / device errors. */
#define _GNU_SOURCE /* setenv, mkdtemp, readlink */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "todre_test.h"

static todre_backend_props backend_props(int index)
{
    todre_backend_props p;
    memset(&p, 0x5a, sizeof p);
    p.struct_size = sizeof p;
    tt_assert_ok(todre_backend_get_props(index, &p));
    return p;
}

static int find_backend(const char *name, todre_backend_props *out)
{
    int count = 0;
    tt_assert_ok(todre_backend_count(&count));
    for (int i = 0; i < count; i++) {
        todre_backend_props p = backend_props(i);
        if (!strcmp(p.name, name)) {
            if (out) *out = p;
            return i;
        }
    }
    return -1;
}

/* A selection on the context proves it works: 4 orthogonal rows, keep 2. */
static void check_context_works(todre_context *ctx)
{
    float rows[4 * 4] = {1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 3, 0, 0, 0, 0, 4};
    int64_t out[2] = {-1, -1};
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_CENTER, 2,
                                         TODRE_ORDER_SELECTION);
    tt_array e, o;
    tt_assert_ok(todre_select(ctx, cfg, tt_array2(&e, rows, TODRE_DTYPE_F32, 4, 4, 4), NULL,
                              tt_array1(&o, out, TODRE_DTYPE_I64, 2)));
    assert_int_equal(out[0], 0); /* all tie at the centre: lowest index */
    assert_int_equal(out[1], 1);
    todre_select_config_destroy(cfg);
}

/* ---- the registry in this process ----------------------------------------------- */

/* Index 0 is the built-in CPU backend. */
static void test_cpu_backend(void **state)
{
    (void)state;
    int count = -1;
    tt_assert_ok(todre_backend_count(&count));
    assert_true(count >= 1);
    todre_backend_props p = backend_props(0);
    assert_int_equal(p.struct_size, sizeof p);
    assert_string_equal(p.name, "cpu");
    assert_string_equal(p.path, "");
    assert_int_equal(p.device_type, kDLCPU);
    assert_int_equal(p.available, 1);
    assert_int_equal(p.device_count, 1);
    assert_string_equal(p.reason, "");
}

/* Every entry: a distinct non-empty name, a path, and available with
 * devices and no reason, or unavailable with none and a reason. */
static void test_every_backend(void **state)
{
    (void)state;
    int count = 0;
    tt_assert_ok(todre_backend_count(&count));
    for (int i = 0; i < count; i++) {
        todre_backend_props p = backend_props(i);
        assert_non_null(p.name);
        assert_non_null(p.path);
        assert_non_null(p.reason);
        assert_true(strlen(p.name) > 0);
        if (i > 0) assert_true(strlen(p.path) > 0); /* loaded from a file */
        for (int j = 0; j < i; j++) assert_string_not_equal(backend_props(j).name, p.name);
        if (p.available) {
            assert_true(p.device_count >= 1);
            assert_string_equal(p.reason, "");
        } else {
            assert_int_equal(p.device_count, 0);
            assert_true(strlen(p.reason) > 0);
        }
        print_message("backend %d: %s (%s) available %d devices %d%s%s\n", i, p.name,
                      p.path[0] ? p.path : "built in", (int)p.available, (int)p.device_count,
                      p.reason[0] ? ": " : "", p.reason);
    }
}

static void test_backend_contract(void **state)
{
    (void)state;
    int count = 0;
    tt_assert_ok(todre_backend_count(&count));
    tt_assert_fails(NULL, todre_backend_count(NULL), TODRE_ERR_INVALID_ARGUMENT, "count");
    todre_backend_props p;
    memset(&p, 0x5a, sizeof p);
    p.struct_size = sizeof p;
    tt_assert_fails(NULL, todre_backend_get_props(-1, &p), TODRE_ERR_INVALID_ARGUMENT, "index");
    tt_assert_fails(NULL, todre_backend_get_props(count, &p), TODRE_ERR_INVALID_ARGUMENT, "index");
    tt_assert_fails(NULL, todre_backend_get_props(0, NULL), TODRE_ERR_INVALID_ARGUMENT, "props");
    /* struct_size below the 1.0 struct: rejected, nothing written */
    const size_t small[] = {0, sizeof(size_t), sizeof p - 1};
    for (size_t i = 0; i < 3; i++) {
        memset(&p, 0x5a, sizeof p);
        p.struct_size = small[i];
        tt_assert_fails(NULL, todre_backend_get_props(0, &p), TODRE_ERR_INVALID_ARGUMENT,
                        "struct_size");
        assert_int_equal(p.available, 0x5a5a5a5a);
    }
    /* a larger struct (a later 1.x header): the 1.0 part is filled, the tail kept */
    struct {
        todre_backend_props p;
        unsigned char tail[24];
    } big;
    memset(&big, 0x5a, sizeof big);
    big.p.struct_size = sizeof big;
    tt_assert_ok(todre_backend_get_props(0, &big.p));
    assert_string_equal(big.p.name, "cpu");
    for (size_t i = 0; i < sizeof big.tail; i++) assert_int_equal(big.tail[i], 0x5a);
}

/* The CPU device: a model name, the code path, physical memory, cores. */
static void test_cpu_device(void **state)
{
    (void)state;
    todre_device_props d;
    memset(&d, 0x5a, sizeof d);
    d.struct_size = sizeof d;
    tt_assert_ok(todre_device_get_props("cpu", 0, &d));
    assert_non_null(memchr(d.name, '\0', sizeof d.name));
    assert_non_null(memchr(d.arch, '\0', sizeof d.arch));
    assert_true(strlen(d.name) > 0);
    static const char *const arch[] = {"amx", "avx512", "avx2", "generic"};
    int known = 0;
    for (int i = 0; i < 4; i++) known |= !strcmp(d.arch, arch[i]);
    if (!known) fail_msg("arch \"%s\" is none of amx, avx512, avx2, generic", d.arch);
    assert_true(d.total_memory > 0);
    assert_int_equal(d.compute_major, 0);
    assert_int_equal(d.compute_minor, 0);
    assert_true(d.cores >= 1);
    print_message("cpu: %s, arch %s, %lld MiB, %d cores\n", d.name, d.arch,
                  (long long)(d.total_memory >> 20), (int)d.cores);
    if (getenv("TT_EXPECT_ARCH")) assert_string_equal(d.arch, getenv("TT_EXPECT_ARCH"));
}

static void test_device_contract(void **state)
{
    (void)state;
    todre_device_props d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    tt_assert_fails(NULL, todre_device_get_props("cpu", 1, &d), TODRE_ERR_INVALID_ARGUMENT, "device");
    tt_assert_fails(NULL, todre_device_get_props("cpu", -1, &d), TODRE_ERR_INVALID_ARGUMENT, "device");
    tt_assert_fails(NULL, todre_device_get_props("CPU", 0, &d), TODRE_ERR_INVALID_ARGUMENT, "backend");
    tt_assert_fails(NULL, todre_device_get_props("", 0, &d), TODRE_ERR_INVALID_ARGUMENT, "backend");
    tt_assert_fails(NULL, todre_device_get_props("nosuch", 0, &d), TODRE_ERR_BACKEND_UNAVAILABLE,
                    "nosuch");
    tt_assert_fails(NULL, todre_device_get_props("cpu", 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "props");
    d.struct_size = sizeof d - 1;
    tt_assert_fails(NULL, todre_device_get_props("cpu", 0, &d), TODRE_ERR_INVALID_ARGUMENT,
                    "struct_size");
    todre_backend_props cuda;
    if (find_backend("cuda", &cuda) < 0 || !cuda.available) {
        tt_assert_fails(NULL, todre_device_get_props("cuda", 0, &d), TODRE_ERR_BACKEND_UNAVAILABLE,
                        "cuda");
    }
}

/* NULL and "auto": the first available backend after "cpu", else "cpu";
 * the context works. */
static void test_auto_context(void **state)
{
    (void)state;
    int count = 0;
    tt_assert_ok(todre_backend_count(&count));
    const char *want = "cpu";
    for (int i = 1; i < count; i++) {
        todre_backend_props p = backend_props(i);
        if (p.available) {
            want = p.name;
            break;
        }
    }
    const char *names[2] = {NULL, "auto"};
    for (int i = 0; i < 2; i++) {
        todre_context *ctx = NULL;
        tt_assert_ok(todre_context_create(names[i], 0, &ctx));
        assert_string_equal(todre_context_backend(ctx), want);
        if (!strcmp(want, "cpu")) check_context_works(ctx);
        todre_context_destroy(ctx);
    }
}

/* "cuda" without a usable module: BACKEND_UNAVAILABLE, naming it, with the
 * reason (what was tried or searched, or why the module cannot run). */
static void test_cuda_unavailable(void **state)
{
    (void)state;
    todre_backend_props cuda;
    if (find_backend("cuda", &cuda) >= 0 && cuda.available) {
        print_message("cuda is available here: nothing to check\n");
        return;
    }
    todre_context *const sentinel = (todre_context *)&cuda;
    todre_context *ctx = sentinel;
    tt_assert_fails(NULL, todre_context_create("cuda", 0, &ctx), TODRE_ERR_BACKEND_UNAVAILABLE, "cuda");
    assert_ptr_equal(ctx, sentinel);
    const char *msg = todre_last_error();
    assert_true(strlen(msg) > strlen("backend: cuda is not available"));
    print_message("cuda: %s\n", msg);
    const char *expect = getenv("TT_EXPECT_IN_MESSAGE");
    if (expect && !strstr(msg, expect)) fail_msg("\"%s\" does not mention %s", msg, expect);
}

/* ---- $TODRE_BACKEND_PATH in fresh processes --------------------------------------- */

static char self_path[4096];

/* Run this program with --child under TODRE_BACKEND_PATH=path (and the
 * other variables); 0 when every child test passed. */
static int run_child(const char *path, const char *expect_in_message, const char *cpu_isa,
                     const char *expect_arch)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (path) setenv("TODRE_BACKEND_PATH", path, 1);
        else unsetenv("TODRE_BACKEND_PATH");
        if (expect_in_message) setenv("TT_EXPECT_IN_MESSAGE", expect_in_message, 1);
        if (cpu_isa) setenv("TODRE_CPU_ISA", cpu_isa, 1);
        if (expect_arch) setenv("TT_EXPECT_ARCH", expect_arch, 1);
        char *argv[] = {self_path, (char *)"--child", NULL};
        execv(self_path, argv);
        _exit(127);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) fail_msg("%s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

/* Files that are not modules register nothing: only "cpu", AUTO is "cpu",
 * "cuda" is unavailable and says what was tried. */
static void test_backend_path_not_modules(void **state)
{
    (void)state;
    char dir[] = "/tmp/todre-registry-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char text[256], fake_dir[256], fake[512], missing[256], list[1400];
    snprintf(text, sizeof text, "%s/notes.txt", dir);
    snprintf(fake_dir, sizeof fake_dir, "%s/modules", dir);
    snprintf(fake, sizeof fake, "%s/libtodre-cuda.so", fake_dir);
    snprintf(missing, sizeof missing, "%s/does-not-exist", dir);
    write_file(text, "this is not a shared object\n");
    assert_int_equal(mkdir(fake_dir, 0755), 0);
    write_file(fake, "not ELF either\n");
    if (snprintf(list, sizeof list, "%s:%s::%s", missing, text, fake_dir) >= (int)sizeof list)
        fail_msg("TODRE_BACKEND_PATH list too long");
    struct {
        const char *path, *expect;
    } cases[] = {
        {text, "notes.txt"},          /* a text file as a module file */
        {fake_dir, "libtodre-cuda.so"}, /* a directory with a fake module */
        {fake, "libtodre-cuda.so"},   /* the fake module as a file */
        {missing, NULL},              /* nothing there */
        {list, "notes.txt"},          /* ':'-separated, with an empty entry */
        {"", NULL},                   /* set but empty */
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run_child(cases[i].path, cases[i].expect, NULL, NULL);
        if (rc != 0) {
            print_error("TODRE_BACKEND_PATH=\"%s\": the child exited with %d\n", cases[i].path, rc);
            failures++;
        }
    }
    unlink(fake);
    rmdir(fake_dir);
    unlink(text);
    rmdir(dir);
    assert_int_equal(failures, 0);
}

/* TODRE_CPU_ISA=generic forces the portable code path, and the device
 * reports it (read once per process: a fresh one). */
static void test_cpu_isa_generic(void **state)
{
    (void)state;
    assert_int_equal(run_child(NULL, NULL, "generic", "generic"), 0);
}

/* What a child checks under its environment. */
static void test_child_only_cpu(void **state)
{
    (void)state;
    int count = 0;
    tt_assert_ok(todre_backend_count(&count));
    if (getenv("TODRE_BACKEND_PATH")) {
        assert_int_equal(count, 1); /* nothing was registered */
        assert_int_equal(find_backend("cuda", NULL), -1);
    }
    assert_string_equal(backend_props(0).name, "cpu");
}

static int child_main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_child_only_cpu),
        cmocka_unit_test(test_cpu_backend),
        cmocka_unit_test(test_every_backend),
        cmocka_unit_test(test_cpu_device),
        cmocka_unit_test(test_auto_context),
        cmocka_unit_test(test_cuda_unavailable),
    };
    return cmocka_run_group_tests_name("registry child", tests, NULL, NULL);
}

/* ---- memory on the CPU ---------------------------------------------------------------- */

static void test_alloc_free(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    const size_t sizes[] = {1, 255, 256, 1000, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = NULL;
        tt_assert_ok(todre_context_alloc(ctx, sizes[i], &p));
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 256, 0);
        memset(p, 0xab, sizes[i]); /* host memory: writable */
        tt_assert_ok(todre_context_free(ctx, p));
    }
    tt_assert_ok(todre_context_free(ctx, NULL));
    static char sentinel_storage;
    void *const sentinel = &sentinel_storage;
    void *p = sentinel;
    tt_assert_fails(ctx, todre_context_alloc(ctx, 0, &p), TODRE_ERR_INVALID_ARGUMENT, "bytes");
    assert_ptr_equal(p, sentinel);
    tt_assert_fails(ctx, todre_context_alloc(ctx, 16, NULL), TODRE_ERR_INVALID_ARGUMENT, "ptr");
    tt_assert_fails(NULL, todre_context_alloc(NULL, 16, &p), TODRE_ERR_INVALID_ARGUMENT, "ctx");
    tt_assert_fails(NULL, todre_context_free(NULL, p), TODRE_ERR_INVALID_ARGUMENT, "ctx");
    assert_ptr_equal(p, sentinel);
    todre_context_destroy(ctx);
}

/* host -> context memory -> host, and memory from todre_context_alloc used
 * as a selection input. */
static void test_copy_round_trip(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    float rows[4 * 4] = {1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 3, 0, 0, 0, 0, 4}, back[16];
    void *dev = NULL;
    tt_assert_ok(todre_context_alloc(ctx, sizeof rows, &dev));
    DLDevice where;
    tt_assert_ok(todre_context_device(ctx, &where));
    tt_array d, s, b;
    tt_array_init(&d, dev, TODRE_DTYPE_F32, 2, (int64_t[]){4, 4}, NULL);
    tt_array_on(&d, where.device_type, where.device_id);
    tt_assert_ok(todre_context_copy(ctx, &d.dl, tt_array_init(&s, rows, TODRE_DTYPE_F32, 2, (int64_t[]){4, 4}, NULL)));
    memset(back, 0, sizeof back);
    tt_assert_ok(todre_context_copy(ctx, tt_array_init(&b, back, TODRE_DTYPE_F32, 2, (int64_t[]){4, 4}, NULL), &d.dl));
    assert_memory_equal(back, rows, sizeof rows);
    /* the same through pinned-host descriptors and explicit compact strides */
    memset(back, 0, sizeof back);
    tt_array_init(&b, back, TODRE_DTYPE_F32, 2, (int64_t[]){4, 4}, (int64_t[]){4, 1});
    tt_array_on(&b, kDLCUDAHost, 0);
    tt_assert_ok(todre_context_copy(ctx, &b.dl, &d.dl));
    assert_memory_equal(back, rows, sizeof rows);
    /* a selection reads the allocated copy */
    int64_t out[2] = {-1, -1};
    todre_select_config *cfg = tt_config(TODRE_OBJECTIVE_MAX_SUM, TODRE_PIVOT_CENTER, 2,
                                         TODRE_ORDER_SELECTION);
    tt_array o;
    tt_assert_ok(todre_select(ctx, cfg, &d.dl, NULL, tt_array1(&o, out, TODRE_DTYPE_I64, 2)));
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 1);
    todre_select_config_destroy(cfg);
    /* every dtype copies bit-exactly */
    uint8_t u8[7] = {0, 1, 2, 3, 250, 7, 9}, u8b[7] = {0};
    tt_assert_ok(todre_context_copy(ctx, tt_array1(&b, u8b, TODRE_DTYPE_U8, 7), tt_array1(&s, u8, TODRE_DTYPE_U8, 7)));
    assert_memory_equal(u8, u8b, sizeof u8);
    int64_t i64[3] = {INT64_MIN, -1, INT64_MAX}, i64b[3] = {0};
    tt_assert_ok(todre_context_copy(ctx, tt_array1(&b, i64b, TODRE_DTYPE_I64, 3), tt_array1(&s, i64, TODRE_DTYPE_I64, 3)));
    assert_memory_equal(i64, i64b, sizeof i64);
    /* an empty copy may have NULL data */
    tt_assert_ok(todre_context_copy(ctx, tt_array1(&b, NULL, TODRE_DTYPE_F32, 0), tt_array1(&s, NULL, TODRE_DTYPE_F32, 0)));
    tt_assert_ok(todre_context_free(ctx, dev));
    todre_context_destroy(ctx);
}

/* dst and src: same dtype and shape, compact, host or the context's device. */
static void test_copy_contract(void **state)
{
    (void)state;
    todre_context *ctx = tt_cpu_context();
    float a[12], b2[24];
    for (int i = 0; i < 12; i++) a[i] = (float)i;
    memset(b2, 0, sizeof b2);
    tt_array d, s;
    const DLTensor *src = tt_array_init(&s, a, TODRE_DTYPE_F32, 2, (int64_t[]){3, 4}, NULL);
#define COPY_FAILS(dst_expr, name) \
    tt_assert_fails(ctx, todre_context_copy(ctx, dst_expr, src), TODRE_ERR_INVALID_ARGUMENT, name)
    COPY_FAILS(tt_array_init(&d, b2, TODRE_DTYPE_I32, 2, (int64_t[]){3, 4}, NULL), "dst"); /* dtype */
    COPY_FAILS(tt_array_init(&d, b2, TODRE_DTYPE_F32, 2, (int64_t[]){4, 3}, NULL), "dst"); /* shape */
    COPY_FAILS(tt_array_init(&d, b2, TODRE_DTYPE_F32, 1, (int64_t[]){12}, NULL), "dst");   /* rank */
    COPY_FAILS(tt_array_init(&d, b2, TODRE_DTYPE_F32, 2, (int64_t[]){3, 4}, (int64_t[]){5, 1}), "dst");
    COPY_FAILS(tt_array_init(&d, b2, TODRE_DTYPE_F32, 2, (int64_t[]){3, 4}, (int64_t[]){4, 2}), "dst");
    COPY_FAILS(NULL, "dst");
    tt_array_init(&d, b2, TODRE_DTYPE_F32, 2, (int64_t[]){3, 4}, NULL);
    COPY_FAILS(tt_array_on(&d, kDLCUDA, 0), "dst"); /* not this context's device */
    tt_array_init(&d, b2, TODRE_DTYPE_F32, 2, (int64_t[]){3, 4}, NULL);
    COPY_FAILS(tt_array_on(&d, kDLOpenCL, 0), "dst");
#undef COPY_FAILS
    const DLTensor *dst = tt_array_init(&d, b2, TODRE_DTYPE_F32, 2, (int64_t[]){3, 2}, NULL);
    tt_array_init(&s, a, TODRE_DTYPE_F32, 2, (int64_t[]){3, 2}, (int64_t[]){4, 1}); /* strided */
    tt_assert_fails(ctx, todre_context_copy(ctx, dst, &s.dl), TODRE_ERR_INVALID_ARGUMENT, "src");
    tt_array_init(&s, a, TODRE_DTYPE_F32, 2, (int64_t[]){3, 2}, NULL);
    tt_assert_fails(ctx, todre_context_copy(ctx, dst, tt_array_on(&s, kDLCUDA, 0)), TODRE_ERR_INVALID_ARGUMENT,
                    "src");
    tt_assert_fails(ctx, todre_context_copy(ctx, dst, NULL), TODRE_ERR_INVALID_ARGUMENT, "src");
    tt_assert_fails(NULL, todre_context_copy(NULL, dst, dst), TODRE_ERR_INVALID_ARGUMENT, "ctx");
    for (int i = 0; i < 24; i++) assert_true(b2[i] == 0.0f); /* nothing was written */
    todre_context_destroy(ctx);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--child")) return child_main();
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (n <= 0) {
        fprintf(stderr, "cannot read /proc/self/exe\n");
        return 1;
    }
    self_path[n] = '\0';
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_backend),
        cmocka_unit_test(test_every_backend),
        cmocka_unit_test(test_backend_contract),
        cmocka_unit_test(test_cpu_device),
        cmocka_unit_test(test_device_contract),
        cmocka_unit_test(test_auto_context),
        cmocka_unit_test(test_cuda_unavailable),
        cmocka_unit_test(test_backend_path_not_modules),
        cmocka_unit_test(test_cpu_isa_generic),
        cmocka_unit_test(test_alloc_free),
        cmocka_unit_test(test_copy_round_trip),
        cmocka_unit_test(test_copy_contract),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
