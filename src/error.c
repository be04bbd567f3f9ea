/* Status names, error messages (per context and thread-local), versions,
 * and the struct_size rule of the public structs the library fills. */
#include <stdio.h>
#include <string.h>

#include "core.h"

static _Thread_local char tls_msg[TODRE_MSG_CAP];

unsigned todre_version_number(void) { return TODRE_VERSION_NUMBER; }

const char *todre_version_string(void) { return TODRE_VERSION_STRING; }

const char *todre_status_string(todre_status status)
{
    switch (status) {
    case TODRE_OK: return "TODRE_OK";
    case TODRE_ERR_INVALID_ARGUMENT: return "TODRE_ERR_INVALID_ARGUMENT";
    case TODRE_ERR_OUT_OF_MEMORY: return "TODRE_ERR_OUT_OF_MEMORY";
    case TODRE_ERR_BACKEND_UNAVAILABLE: return "TODRE_ERR_BACKEND_UNAVAILABLE";
    case TODRE_ERR_NONFINITE: return "TODRE_ERR_NONFINITE";
    case TODRE_ERR_UNSUPPORTED: return "TODRE_ERR_UNSUPPORTED";
    case TODRE_ERR_DEVICE: return "TODRE_ERR_DEVICE";
    case TODRE_ERR_STATE: return "TODRE_ERR_STATE";
    case TODRE_ERR_INTERNAL: return "TODRE_ERR_INTERNAL";
    }
    return "TODRE_ERR_UNKNOWN";
}

const char *todre_last_error(void) { return tls_msg; }

const char *todre_context_last_error(const todre_context *ctx)
{
    return ctx ? ctx->msg : "";
}

/* A context's message is part of the handle's mutable state even in calls
 * that take it as const (its getters): contexts are only ever created by
 * todre_context_create(), so the object itself is never const. */
static char *ctx_msg(const struct todre_context *ctx)
{
    return ctx ? ((struct todre_context *)(uintptr_t)ctx)->msg : NULL;
}

static void set_message(const struct todre_context *ctx, const char *text)
{
    snprintf(tls_msg, sizeof tls_msg, "%s", text);
    char *m = ctx_msg(ctx);
    if (m) snprintf(m, TODRE_MSG_CAP, "%s", text);
}

todre_status todre_fail(const struct todre_context *ctx, todre_status st, const char *fmt, ...)
{
    char buf[TODRE_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    set_message(ctx, buf);
    return st;
}

todre_status todre_fail_diag(const struct todre_context *ctx, todre_status st, const char *what,
                             const char *diag_text)
{
    if (diag_text && diag_text[0])
        return todre_fail(ctx, st, "%s: %s", what, diag_text);
    return todre_fail(ctx, st, "%s: %s", what, todre_status_string(st));
}

void todre_clear_error(const struct todre_context *ctx)
{
    tls_msg[0] = '\0';
    char *m = ctx_msg(ctx);
    if (m) m[0] = '\0';
}

todre_status todre_fill_sized(void *dst, const void *src, size_t size, const char *name)
{
    if (!dst) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "%s: NULL", name);
    size_t have;
    memcpy(&have, dst, sizeof have);
    if (have < size)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "%s: struct_size %zu is smaller than the 1.0 struct (%zu bytes)", name,
                          have, size);
    /* Fill the 1.0 part; a larger (later) struct keeps its tail as it is. */
    memcpy((char *)dst + sizeof have, (const char *)src + sizeof have, size - sizeof have);
    return TODRE_OK;
}
