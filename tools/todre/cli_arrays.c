/* Loading the tool's .npy inputs and mapping their dtypes to libtodre's. */
#include <string.h>

#include "cli.h"

int cli_load(const char *cmd, const char *opt, const char *path, struct todre_npy *out)
{
    char err[512];
    if (todre_npy_load(path, out, err, sizeof err) != 0)
        return cli_fail(cmd, "%s: %s", opt, err);
    return 0;
}

int cli_float_dtype(const char *cmd, const char *opt, const struct todre_npy *a,
                    todre_dtype *out)
{
    if (!strcmp(a->descr, "<f4")) *out = TODRE_DTYPE_F32;
    else if (!strcmp(a->descr, "<f2")) *out = TODRE_DTYPE_F16;
    else
        return cli_fail(cmd, "%s: dtype %s is not supported (need float32 '<f4' or float16 "
                        "'<f2')", opt, a->descr);
    return 0;
}
