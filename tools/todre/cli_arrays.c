/* Loading the tool's .npy inputs and describing them as DLPack arrays. */
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
                    DLDataType *out)
{
    if (!strcmp(a->descr, "<f4")) *out = CLI_DTYPE_F32;
    else if (!strcmp(a->descr, "<f2")) *out = CLI_DTYPE_F16;
    else
        return cli_fail(cmd, "%s: dtype %s is not supported (need float32 '<f4' or float16 "
                        "'<f2')", opt, a->descr);
    return 0;
}

void cli_host_tensor(DLTensor *t, void *data, DLDataType dtype, int ndim, int64_t *shape)
{
    memset(t, 0, sizeof *t);
    t->data = data;
    t->device.device_type = kDLCPU;
    t->device.device_id = 0;
    t->ndim = ndim;
    t->dtype = dtype;
    t->shape = shape;
    t->strides = NULL;
    t->byte_offset = 0;
}
