/* Status names, the version API, and where failure messages go: the
 * thread-local todre_last_error() and the per-context message. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "todre_test.h"

/* The run-time version equals the header the test was compiled against. */
static void test_version_matches_header(void **state)
{
    (void)state;
    assert_int_equal(todre_version_number(), TODRE_VERSION_NUMBER);
    assert_int_equal(TODRE_VERSION_NUMBER,
                     TODRE_VERSION_MAJOR * 10000 + TODRE_VERSION_MINOR * 100 + TODRE_VERSION_PATCH);
    assert_string_equal(todre_version_string(), TODRE_VERSION_STRING);
    /* 1.x: SONAME libtodre.so.1, symbol version node TODRE_1.0 */
    assert_int_equal(TODRE_VERSION_MAJOR, 1);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", TODRE_VERSION_MAJOR, TODRE_VERSION_MINOR,
             TODRE_VERSION_PATCH);
    assert_string_equal(todre_version_string(), want);
}

/* Every pinned status has its own name; unknown values get the fallback. */
static void test_status_strings(void **state)
{
    (void)state;
    static const struct { todre_status st; const char *name; } pinned[] = {
        {TODRE_OK, "TODRE_OK"},
        {TODRE_ERR_INVALID_ARGUMENT, "TODRE_ERR_INVALID_ARGUMENT"},
        {TODRE_ERR_OUT_OF_MEMORY, "TODRE_ERR_OUT_OF_MEMORY"},
        {TODRE_ERR_BACKEND_UNAVAILABLE, "TODRE_ERR_BACKEND_UNAVAILABLE"},
        {TODRE_ERR_NONFINITE, "TODRE_ERR_NONFINITE"},
        {TODRE_ERR_UNSUPPORTED, "TODRE_ERR_UNSUPPORTED"},
        {TODRE_ERR_DEVICE, "TODRE_ERR_DEVICE"},
        {TODRE_ERR_STATE, "TODRE_ERR_STATE"},
        {TODRE_ERR_INTERNAL, "TODRE_ERR_INTERNAL"},
    };
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++) {
        assert_int_equal(pinned[i].st, (int)i); /* values pinned forever */
        assert_string_equal(todre_status_string(pinned[i].st), pinned[i].name);
    }
    assert_string_equal(todre_status_string((todre_status)9), "TODRE_ERR_UNKNOWN");
    assert_string_equal(todre_status_string((todre_status)-1), "TODRE_ERR_UNKNOWN");
}

/* A failing call leaves a message naming the argument, in the thread-local
 * slot and in the context; a NULL context has the empty message. */
static void test_messages_name_the_argument(void **state)
{
    (void)state;
    assert_string_equal(todre_context_last_error(NULL), "");
    todre_context *ctx = tt_cpu_context();
    assert_string_equal(todre_context_last_error(ctx), "");
    tt_assert_fails_param(ctx, todre_context_set_int(ctx, TODRE_CONTEXT_NUM_THREADS, 1025),
                          TODRE_ERR_INVALID_ARGUMENT, TODRE_CONTEXT_NUM_THREADS);
    /* a successful call on the context clears its message */
    tt_assert_ok(todre_context_set_int(ctx, TODRE_CONTEXT_NUM_THREADS, 1));
    assert_string_equal(todre_context_last_error(ctx), "");
    assert_string_equal(todre_last_error(), "");
    tt_assert_fails(NULL, todre_context_create("cpu", 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "out");
    todre_context_destroy(ctx);
}

static void *fail_in_thread(void *arg)
{
    (void)arg;
    todre_select_config *cfg = NULL;
    todre_select_config_create(&cfg);
    todre_status st = todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, 7.0);
    int named = strstr(todre_last_error(), "TODRE_SELECT_RATIO") != NULL;
    todre_select_config_destroy(cfg);
    return st == TODRE_ERR_INVALID_ARGUMENT && named ? (void *)1 : NULL;
}

/* Messages are per thread: a failure in another thread does not change
 * this thread's message. */
static void test_last_error_is_thread_local(void **state)
{
    (void)state;
    tt_assert_fails(NULL, todre_context_create("cpu", 0, NULL), TODRE_ERR_INVALID_ARGUMENT, "out");
    char mine[512];
    strncpy(mine, todre_last_error(), sizeof mine - 1);
    mine[sizeof mine - 1] = '\0';
    pthread_t th;
    void *ok = NULL;
    assert_int_equal(pthread_create(&th, NULL, fail_in_thread, NULL), 0);
    assert_int_equal(pthread_join(th, &ok), 0);
    assert_non_null(ok);
    assert_string_equal(todre_last_error(), mine);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_matches_header),
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_messages_name_the_argument),
        cmocka_unit_test(test_last_error_is_thread_local),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
