/* A minimal backend module for the registry tests (libtodre-robustfake.so):
 * it registers as "robustfake" with no usable device, so the registry loads
 * it, keeps its path and reason, and never creates an instance. It exercises
 * the module path of the registry's first use (dlopen, registration, the
 * availability probe) without a GPU. */
#include <stdio.h>

#include "backend.h"

static todre_status fake_device_count(int *count, struct todre_diag *diag)
{
    *count = 0;
    snprintf(diag->buf, diag->cap, "robust test module: no device by design");
    return TODRE_OK;
}

static todre_status fake_device_props(int device, struct todre_backend_device_props *props,
                                      struct todre_diag *diag)
{
    (void)device;
    (void)props;
    snprintf(diag->buf, diag->cap, "robust test module: no device");
    return TODRE_ERR_BACKEND_UNAVAILABLE;
}

static todre_status fake_create(int device, struct todre_backend **out, struct todre_diag *diag)
{
    (void)device;
    (void)out;
    snprintf(diag->buf, diag->cap, "robust test module: no device");
    return TODRE_ERR_BACKEND_UNAVAILABLE;
}

static const struct todre_backend_reg fake_reg = {
    .abi_version = TODRE_BACKEND_ABI_VERSION,
    .name = "robustfake",
    .dl_device_type = kDLCPU,
    .device_count = fake_device_count,
    .device_props = fake_device_props,
    .create = fake_create,
};

__attribute__((visibility("default"))) const struct todre_backend_reg *
todre_backend_module_register(uint32_t abi_version, struct todre_diag *diag);

const struct todre_backend_reg *todre_backend_module_register(uint32_t abi_version,
                                                              struct todre_diag *diag)
{
    if (abi_version != TODRE_BACKEND_ABI_VERSION) {
        snprintf(diag->buf, diag->cap, "built for backend ABI %u", (unsigned)TODRE_BACKEND_ABI_VERSION);
        return NULL;
    }
    return &fake_reg;
}
