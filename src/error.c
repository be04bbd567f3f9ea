/* Status names, error messages (per context and thread-local), versions. */
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

static void set_message(struct todre_context *ctx, const char *text)
{
    snprintf(tls_msg, sizeof tls_msg, "%s", text);
    if (ctx) snprintf(ctx->msg, sizeof ctx->msg, "%s", text);
}

todre_status todre_fail(struct todre_context *ctx, todre_status st, const char *fmt, ...)
{
    char buf[TODRE_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    set_message(ctx, buf);
    return st;
}

todre_status todre_fail_diag(struct todre_context *ctx, todre_status st, const char *what,
                             const char *diag_text)
{
    if (diag_text && diag_text[0])
        return todre_fail(ctx, st, "%s: %s", what, diag_text);
    return todre_fail(ctx, st, "%s: %s", what, todre_status_string(st));
}

void todre_clear_error(struct todre_context *ctx)
{
    tls_msg[0] = '\0';
    if (ctx) ctx->msg[0] = '\0';
}
