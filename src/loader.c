/* Finding and loading backend modules (the CUDA backend) with dlopen.
 *
 * Search order for libtodre-cuda.so:
 *   1. $TODRE_CUDA_MODULE (a path to the module file; when set, only it),
 *   2. the directory libtodre.so itself was loaded from (build trees, wheels),
 *   3. its todre/ subdirectory (an installed tree moved to another prefix:
 *      <libdir>/libtodre.so next to <libdir>/todre/libtodre-cuda.so),
 *   4. the configured backend directory (TODRE_BACKEND_DIR_FULL, also named by
 *      todre.pc as `backenddir`).
 * A module must export the probe and init entry points of backend.h and be
 * built against the same TODRE_BACKEND_ABI_VERSION. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#ifndef TODRE_BACKEND_DIR_FULL
#define TODRE_BACKEND_DIR_FULL "/usr/local/lib/todre"
#endif

#define CUDA_MODULE_NAME "libtodre-cuda.so"

static void append(char *msg, size_t cap, const char *fmt, const char *a, const char *b)
{
    size_t len = strlen(msg);
    if (len < cap) snprintf(msg + len, cap - len, fmt, a, b);
}

/* Directory of the loaded libtodre.so, or "" if it cannot be told. */
static void core_dir(char *buf, size_t cap)
{
    Dl_info info;
    buf[0] = '\0';
    if (dladdr((void *)&todre_module_backend_create, &info) && info.dli_fname) {
        snprintf(buf, cap, "%s", info.dli_fname);
        char *slash = strrchr(buf, '/');
        if (slash) *slash = '\0';
        else buf[0] = '\0';
    }
}

static void *try_open(const char *path, char *msg, size_t cap)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        append(msg, cap, "%s%s", msg[0] ? "; " : "tried ", path);
        append(msg, cap, " (%s)%s", why ? why : "cannot load", "");
    }
    return h;
}

static void *open_cuda_module(char *msg, size_t cap)
{
    char path[4096];
    const char *env = getenv("TODRE_CUDA_MODULE");
    if (env && env[0]) return try_open(env, msg, cap);

    char dir[4096];
    core_dir(dir, sizeof dir);
    if (dir[0]) {
        snprintf(path, sizeof path, "%s/%s", dir, CUDA_MODULE_NAME);
        void *h = try_open(path, msg, cap);
        if (h) return h;
        snprintf(path, sizeof path, "%s/todre/%s", dir, CUDA_MODULE_NAME);
        if ((h = try_open(path, msg, cap))) return h;
    }
    snprintf(path, sizeof path, "%s/%s", TODRE_BACKEND_DIR_FULL, CUDA_MODULE_NAME);
    return try_open(path, msg, cap);
}

todre_status todre_module_backend_create(todre_backend_kind kind, int device,
                                         struct todre_backend **out, void **handle,
                                         char *msg, size_t cap)
{
    *out = NULL;
    *handle = NULL;
    msg[0] = '\0';
    if (kind != TODRE_BACKEND_CUDA) {
        snprintf(msg, cap, "no module provides backend kind %d", (int)kind);
        return TODRE_ERR_BACKEND_UNAVAILABLE;
    }
    void *h = open_cuda_module(msg, cap);
    if (!h) return TODRE_ERR_BACKEND_UNAVAILABLE;

    todre_module_probe_fn probe;
    todre_module_init_fn init;
    *(void **)&probe = dlsym(h, TODRE_MODULE_PROBE_SYMBOL);
    *(void **)&init = dlsym(h, TODRE_MODULE_INIT_SYMBOL);
    if (!probe || !init) {
        snprintf(msg, cap, "module lacks the %s / %s entry points", TODRE_MODULE_PROBE_SYMBOL,
                 TODRE_MODULE_INIT_SYMBOL);
        dlclose(h);
        return TODRE_ERR_BACKEND_UNAVAILABLE;
    }
    msg[0] = '\0';
    struct todre_diag diag = {msg, cap};
    todre_status st = probe(TODRE_BACKEND_ABI_VERSION, &diag);
    if (st == TODRE_OK) st = init(TODRE_BACKEND_ABI_VERSION, device, out, &diag);
    if (st == TODRE_OK && (*out)->ops->abi_version != TODRE_BACKEND_ABI_VERSION) {
        snprintf(msg, cap, "module ABI version %u, this libtodre needs %u",
                 (unsigned)(*out)->ops->abi_version, TODRE_BACKEND_ABI_VERSION);
        (*out)->ops->destroy(*out);
        *out = NULL;
        st = TODRE_ERR_BACKEND_UNAVAILABLE;
    }
    if (st != TODRE_OK) {
        /* A bad device ordinal stays an argument error; anything else means
         * the backend cannot run here. */
        if (st != TODRE_ERR_OUT_OF_MEMORY && st != TODRE_ERR_INVALID_ARGUMENT)
            st = TODRE_ERR_BACKEND_UNAVAILABLE;
        dlclose(h);
        return st;
    }
    *handle = h;
    return TODRE_OK;
}

void todre_module_release(void *handle)
{
    if (handle) dlclose(handle);
}
