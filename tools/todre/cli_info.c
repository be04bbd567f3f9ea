/* `todre info`: the library version, every registered backend (where it was
 * loaded from, whether it can run here and why not) and every device's
 * properties. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *const CMD = "info";

struct device_state {
    todre_device_props props;
    char error[512]; /* "" when props were read */
};

struct backend_state {
    todre_backend_props props;
    char reason[512]; /* one line: why not available */
    struct device_state *devices;
    int device_count; /* entries in devices */
};

static void one_line(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
    for (char *p = dst; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

/* Query everything first, so that a failure prints nothing on stdout. */
static int probe(struct backend_state **out, int *count)
{
    todre_status st = todre_backend_count(count);
    if (st != TODRE_OK) return cli_lib_fail(CMD, "backends", st);
    struct backend_state *b = calloc((size_t)(*count > 0 ? *count : 1), sizeof *b);
    if (!b) return cli_fail(CMD, "out of memory");
    *out = b;
    for (int i = 0; i < *count; i++) {
        b[i].props.struct_size = sizeof b[i].props;
        st = todre_backend_get_props(i, &b[i].props);
        if (st != TODRE_OK) return cli_lib_fail(CMD, "backends", st);
        one_line(b[i].reason, sizeof b[i].reason, b[i].props.reason);
        if (!b[i].props.available || b[i].props.device_count <= 0) continue;
        b[i].devices = calloc((size_t)b[i].props.device_count, sizeof *b[i].devices);
        if (!b[i].devices) return cli_fail(CMD, "out of memory");
        b[i].device_count = b[i].props.device_count;
        for (int d = 0; d < b[i].device_count; d++) {
            struct device_state *dev = &b[i].devices[d];
            dev->props.struct_size = sizeof dev->props;
            st = todre_device_get_props(b[i].props.name, d, &dev->props);
            if (st != TODRE_OK) { /* reported with the device, not fatal */
                char why[480];
                one_line(why, sizeof why, todre_last_error());
                snprintf(dev->error, sizeof dev->error, "%s: %s", todre_status_string(st), why);
            }
        }
    }
    return 0;
}

/* "multiprocessors" for a GPU, "cores" for the CPU. */
static const char *cores_word(const struct backend_state *b)
{
    return b->props.device_type == kDLCPU ? "cores" : "multiprocessors";
}

static void print_text(const struct backend_state *b, int count)
{
    printf("libtodre %s (todre tool built against %s)\n", todre_version_string(),
           TODRE_VERSION_STRING);
    for (int i = 0; i < count; i++) {
        const todre_backend_props *p = &b[i].props;
        if (p->available)
            printf("backend %s: available, %d device%s", p->name, p->device_count,
                   p->device_count == 1 ? "" : "s");
        else
            printf("backend %s: unavailable (%s)", p->name, b[i].reason);
        if (p->path && *p->path) printf("; module %s\n", p->path);
        else printf("; built in\n");
        for (int d = 0; d < b[i].device_count; d++) {
            const struct device_state *dev = &b[i].devices[d];
            if (dev->error[0]) {
                printf("  device %d: error (%s)\n", d, dev->error);
                continue;
            }
            const todre_device_props *q = &dev->props;
            printf("  device %d: %s; arch %s; %.1f GiB memory; ", d, q->name, q->arch,
                   (double)q->total_memory / (1024.0 * 1024.0 * 1024.0));
            if (q->compute_major > 0)
                printf("compute capability %d.%d; ", (int)q->compute_major, (int)q->compute_minor);
            printf("%d %s\n", (int)q->cores, cores_word(&b[i]));
        }
    }
}

static void print_json(const struct backend_state *b, int count)
{
    printf("{\"version\": ");
    cli_json_string(stdout, todre_version_string());
    printf(", \"version_number\": %u, \"backends\": {", todre_version_number());
    for (int i = 0; i < count; i++) {
        const todre_backend_props *p = &b[i].props;
        fputs(i ? ", " : "", stdout);
        cli_json_string(stdout, p->name);
        printf(": {\"available\": %s", p->available ? "true" : "false");
        if (!p->available) {
            printf(", \"reason\": ");
            cli_json_string(stdout, b[i].reason);
        }
        printf(", \"path\": ");
        cli_json_string(stdout, p->path ? p->path : "");
        printf(", \"device_type\": %d, \"device_count\": %d, \"devices\": [", (int)p->device_type,
               (int)p->device_count);
        for (int d = 0; d < b[i].device_count; d++) {
            const struct device_state *dev = &b[i].devices[d];
            const todre_device_props *q = &dev->props;
            printf("%s{\"index\": %d", d ? ", " : "", d);
            if (dev->error[0]) {
                printf(", \"error\": ");
                cli_json_string(stdout, dev->error);
            } else {
                printf(", \"name\": ");
                cli_json_string(stdout, q->name);
                printf(", \"arch\": ");
                cli_json_string(stdout, q->arch);
                printf(", \"total_memory\": %lld, \"compute_major\": %d, \"compute_minor\": %d, "
                       "\"cores\": %d",
                       (long long)q->total_memory, (int)q->compute_major, (int)q->compute_minor,
                       (int)q->cores);
            }
            printf("}");
        }
        printf("]}");
    }
    printf("}}\n");
}

int cli_info_main(int argc, char **argv)
{
    struct cli_opt o[] = {{"--json", 0, 0, 0}};
    if (cli_parse_opts(CMD, argc, argv, o, 1)) return CLI_EXIT_ERROR;
    struct backend_state *b = NULL;
    int count = 0;
    int rc = probe(&b, &count);
    if (rc == 0) {
        if (o[0].given) print_json(b, count);
        else print_text(b, count);
        rc = cli_finish_output(CMD);
    }
    for (int i = 0; b && i < count; i++) free(b[i].devices);
    free(b);
    return rc;
}
