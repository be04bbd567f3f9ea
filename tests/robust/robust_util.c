/* Helpers of the robustness tests: see robust_util.h. */
#define _GNU_SOURCE /* posix_spawn, environ */
#include "robust_util.h"

#include <signal.h>
#include <stdint.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* 1 if @p var ("NAME=...") is named by @p entry ("NAME=VALUE" or "NAME"). */
static int same_name(const char *var, const char *entry)
{
    size_t n = strcspn(entry, "=");
    return strncmp(var, entry, n) == 0 && var[n] == '=';
}

int rb_run_self(const char *const *args, const char *const *env, char *out, size_t cap)
{
    size_t nenv = 0, nadd = 0, nargs = 0;
    while (environ[nenv]) nenv++;
    while (env && env[nadd]) nadd++;
    while (args && args[nargs]) nargs++;
    char **envp = calloc(nenv + nadd + 1, sizeof *envp);
    char **argv = calloc(nargs + 2, sizeof *argv);
    if (!envp || !argv) {
        free(envp);
        free(argv);
        return -1;
    }
    size_t m = 0;
    for (size_t i = 0; i < nenv; i++) {
        int replaced = 0;
        for (size_t j = 0; j < nadd; j++) replaced |= same_name(environ[i], env[j]);
        if (!replaced) envp[m++] = environ[i];
    }
    for (size_t j = 0; j < nadd; j++)
        if (strchr(env[j], '=')) envp[m++] = (char *)(uintptr_t)env[j];
    char self[] = "/proc/self/exe";
    argv[0] = self;
    for (size_t i = 0; i < nargs; i++) argv[i + 1] = (char *)(uintptr_t)args[i];

    int fds[2];
    if (pipe(fds) != 0) {
        free(envp);
        free(argv);
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    fflush(stdout);
    fflush(stderr);
    pid_t pid;
    int rc = posix_spawn(&pid, self, &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    free(envp);
    free(argv);
    size_t len = 0;
    if (rc == 0) {
        ssize_t r;
        char sink[4096];
        while ((r = read(fds[0], len + 1 < cap ? out + len : sink,
                         len + 1 < cap ? cap - 1 - len : sizeof sink)) > 0)
            if (len + 1 < cap) len += (size_t)r;
    }
    if (cap) out[len] = '\0';
    close(fds[0]);
    if (rc != 0) return -1;
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return status;
}

const char *rb_status_text(int status, char *buf, size_t cap)
{
    if (status == -1) snprintf(buf, cap, "could not be started");
    else if (WIFEXITED(status)) snprintf(buf, cap, "exited %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status)) snprintf(buf, cap, "killed by signal %d", WTERMSIG(status));
    else snprintf(buf, cap, "wait status %d", status);
    return buf;
}

long rb_status_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    size_t n = strlen(field);
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}
