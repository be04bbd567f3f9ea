/* Helpers shared by the robustness tests (tests/robust/test_threads.c,
 * test_alloc_fail.c, test_memory_bound.c): running this program again in a
 * fresh child process, and reading the process's memory figures. */
#ifndef TODRE_TESTS_ROBUST_UTIL_H
#define TODRE_TESTS_ROBUST_UTIL_H

#include <stddef.h>

/* Run this program (/proc/self/exe) again with @p args (NULL-terminated, not
 * counting argv[0]) and the current environment changed by @p env
 * (NULL-terminated; "NAME=VALUE" sets, "NAME" removes; may be NULL). Its
 * standard output goes to @p out (NUL-terminated, truncated to @p cap - 1);
 * its standard error is this process's. Returns the wait status, or -1 if
 * it could not be started. */
int rb_run_self(const char *const *args, const char *const *env, char *out, size_t cap);

/* "exited 0", "exited 3", "killed by signal 11", for messages. */
const char *rb_status_text(int status, char *buf, size_t cap);

/* /proc/self/status fields in KiB ("VmHWM", "VmRSS"); -1 if absent. */
long rb_status_kib(const char *field);

#endif /* TODRE_TESTS_ROBUST_UTIL_H */
