/* The backend registry, built once per process.
 *
 * Index 0 is the built-in CPU backend. Then backend modules
 * (libtodre-<name>.so, exporting TODRE_MODULE_REGISTER_SYMBOL):
 *   - when $TODRE_BACKEND_PATH is set, only its ':'-separated entries (a file
 *     is loaded as is, a directory is scanned for libtodre-*.so);
 *   - otherwise every libtodre-*.so (in name order) of the directory
 *     libtodre.so itself was loaded from (build trees, wheels), of its todre/
 *     subdirectory (an installed tree moved to another prefix), and of the
 *     configured backend directory (TODRE_BACKEND_DIR_FULL, pkg-config's
 *     `backenddir`).
 * A file seen twice (same realpath) or a name already registered is skipped:
 * the first wins. A registered module stays loaded until the process exits.
 * Modules that could not be registered are remembered with their reason,
 * which the "not registered" error of todre_context_create() lists. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core.h"

#ifndef TODRE_BACKEND_DIR_FULL
#define TODRE_BACKEND_DIR_FULL "/usr/local/lib/todre"
#endif

#define MAX_BACKENDS 16
#define MAX_FAILURES 16
#define MAX_SEEN 64
#define MAX_SEARCHED 8
#define MAX_NAME 31
#define MODULE_PREFIX "libtodre-"
#define MODULE_SUFFIX ".so"

struct failure {
    const char *path;
    const char *reason;
};

static struct {
    struct todre_registry_entry entries[MAX_BACKENDS];
    int count;
    struct failure failures[MAX_FAILURES];
    int nfailures;
    const char *searched[MAX_SEARCHED]; /* directories and files looked at */
    int nsearched;
    const char *seen[MAX_SEEN];         /* realpaths of the module files tried */
    int nseen;
} registry;

static pthread_once_t registry_once = PTHREAD_ONCE_INIT;

/* Strings the registry keeps until the process exits; a string literal
 * stands in when there is no memory for the copy. */
static const char *keep(const char *s, const char *fallback)
{
    char *c = strdup(s ? s : "");
    return c ? c : fallback;
}

static void add_failure(const char *path, const char *reason)
{
    if (registry.nfailures >= MAX_FAILURES) return;
    struct failure *f = &registry.failures[registry.nfailures++];
    f->path = keep(path, "?");
    f->reason = keep(reason, "?");
}

static int valid_name(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return 0;
    }
    return n >= 1 && n <= MAX_NAME;
}

static const struct todre_registry_entry *find_entry(const char *name)
{
    for (int i = 0; i < registry.count; i++)
        if (strcmp(registry.entries[i].name, name) == 0) return &registry.entries[i];
    return NULL;
}

/* Fill availability: device_count() only, no instance. */
static void probe_entry(struct todre_registry_entry *e)
{
    char msg[TODRE_MSG_CAP] = "";
    struct todre_diag diag = {msg, sizeof msg};
    int n = 0;
    todre_status st = e->reg->device_count(&n, &diag);
    if (st == TODRE_OK && n > 0) {
        e->available = 1;
        e->device_count = n;
        e->reason = "";
        return;
    }
    e->available = 0;
    e->device_count = 0;
    if (!msg[0])
        snprintf(msg, sizeof msg, "%s", st == TODRE_OK ? "no device" : todre_status_string(st));
    e->reason = keep(msg, "unavailable");
}

/* Register @p reg (from @p path, "" when built in). 1 on success; on
 * failure @p why says why. */
static int add_backend(const struct todre_backend_reg *reg, const char *path, char *why,
                       size_t cap)
{
    if (reg->abi_version != TODRE_BACKEND_ABI_VERSION) {
        snprintf(why, cap, "backend ABI version %u, this libtodre needs %u",
                 (unsigned)reg->abi_version, TODRE_BACKEND_ABI_VERSION);
        return 0;
    }
    if (!reg->name || !valid_name(reg->name)) {
        snprintf(why, cap, "invalid backend name (need [a-z0-9_]{1,%d})", MAX_NAME);
        return 0;
    }
    if (!reg->device_count || !reg->device_props || !reg->create) {
        snprintf(why, cap, "backend \"%s\" lacks a registration function", reg->name);
        return 0;
    }
    const struct todre_registry_entry *dup = find_entry(reg->name);
    if (dup) {
        snprintf(why, cap, "backend \"%s\" is already registered from %s", reg->name,
                 dup->path[0] ? dup->path : "libtodre");
        return 0;
    }
    if (registry.count >= MAX_BACKENDS) {
        snprintf(why, cap, "too many backends (%d)", MAX_BACKENDS);
        return 0;
    }
    struct todre_registry_entry *e = &registry.entries[registry.count];
    e->reg = reg;
    e->name = reg->name; /* static in the module, which stays loaded */
    e->path = path[0] ? keep(path, "?") : "";
    e->dl_device_type = reg->dl_device_type;
    probe_entry(e);
    registry.count++;
    return 1;
}

static void load_module(const char *path)
{
    char real[PATH_MAX];
    if (!realpath(path, real)) snprintf(real, sizeof real, "%s", path);
    for (int i = 0; i < registry.nseen; i++)
        if (strcmp(registry.seen[i], real) == 0) return;
    if (registry.nseen < MAX_SEEN) registry.seen[registry.nseen++] = keep(real, "?");

    /* Only a regular file (or a link to one) is opened: dlopen() of a FIFO
     * blocks until a writer comes, and of a device reads it. */
    struct stat sb;
    if (stat(path, &sb) != 0) {
        add_failure(path, strerror(errno));
        return;
    }
    if (!S_ISREG(sb.st_mode)) {
        add_failure(path, "not a regular file");
        return;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        add_failure(path, e ? e : "cannot be loaded");
        return;
    }
    todre_module_register_fn fn;
    void *sym = dlsym(h, TODRE_MODULE_REGISTER_SYMBOL);
    if (!sym) {
        add_failure(path, "no " TODRE_MODULE_REGISTER_SYMBOL " entry point");
        dlclose(h);
        return;
    }
    memcpy(&fn, &sym, sizeof fn);
    char why[TODRE_MSG_CAP] = "";
    struct todre_diag diag = {why, sizeof why};
    const struct todre_backend_reg *reg = fn(TODRE_BACKEND_ABI_VERSION, &diag);
    if (!reg) {
        add_failure(path, why[0] ? why : "the module declined to register");
        dlclose(h);
        return;
    }
    if (!add_backend(reg, path, why, sizeof why)) {
        add_failure(path, why);
        dlclose(h);
    }
    /* registered: never closed */
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int is_module_name(const char *s)
{
    size_t n = strlen(s), p = strlen(MODULE_PREFIX), x = strlen(MODULE_SUFFIX);
    return n > p + x && strncmp(s, MODULE_PREFIX, p) == 0 && strcmp(s + n - x, MODULE_SUFFIX) == 0;
}

static void note_searched(const char *what)
{
    if (registry.nsearched < MAX_SEARCHED) registry.searched[registry.nsearched++] = keep(what, "?");
}

/* Every libtodre-*.so of @p dir, in name order. The names are kept in
 * static storage, not on the heap: an allocation failure must not drop a
 * module from the registry, which is built once (under registry_once, so
 * one thread at a time). */
static char scan_names[256][256];

static void scan_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    char *names[256];
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < sizeof names / sizeof names[0]) {
        if (!is_module_name(de->d_name) || strlen(de->d_name) >= sizeof scan_names[0]) continue;
        names[n] = scan_names[n];
        snprintf(names[n], sizeof scan_names[0], "%s", de->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof names[0], cmp_names);
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX];
        int w = snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (w > 0 && (size_t)w < sizeof path) load_module(path);
    }
}

/* A $TODRE_BACKEND_PATH entry: a module file or a directory of modules. */
static void load_entry(const char *entry)
{
    struct stat sb;
    note_searched(entry);
    if (stat(entry, &sb) != 0) {
        add_failure(entry, strerror(errno));
        return;
    }
    if (S_ISDIR(sb.st_mode)) scan_dir(entry);
    else load_module(entry);
}

/* Directory of the loaded libtodre.so, or "" if it cannot be told. */
static void core_dir(char *buf, size_t cap)
{
    Dl_info info;
    buf[0] = '\0';
    if (dladdr((void *)&todre_registry_count, &info) && info.dli_fname) {
        snprintf(buf, cap, "%s", info.dli_fname);
        char *slash = strrchr(buf, '/');
        if (slash) *slash = '\0';
        else buf[0] = '\0';
    }
}

static void build_registry(void)
{
    char why[TODRE_MSG_CAP] = "";
    if (!add_backend(&todre_cpu_backend_reg, "", why, sizeof why)) add_failure("(built in)", why);

    const char *env = getenv("TODRE_BACKEND_PATH");
    if (env) {
        /* entries copied one at a time into a buffer: no allocation that
         * could fail and silently drop the whole list */
        for (const char *p = env; *p;) {
            size_t len = strcspn(p, ":");
            char tok[PATH_MAX];
            if (len >= sizeof tok) add_failure("$TODRE_BACKEND_PATH", "an entry is longer than PATH_MAX");
            else if (len > 0) {
                memcpy(tok, p, len);
                tok[len] = '\0';
                load_entry(tok);
            }
            p += len;
            if (*p == ':') p++;
        }
        return;
    }
    char dir[PATH_MAX], sub[PATH_MAX + 8];
    core_dir(dir, sizeof dir);
    if (dir[0]) {
        note_searched(dir);
        scan_dir(dir);
        snprintf(sub, sizeof sub, "%s/todre", dir);
        note_searched(sub);
        scan_dir(sub);
    }
    note_searched(TODRE_BACKEND_DIR_FULL);
    scan_dir(TODRE_BACKEND_DIR_FULL);
}

int todre_registry_count(void)
{
    pthread_once(&registry_once, build_registry);
    return registry.count;
}

const struct todre_registry_entry *todre_registry_get(int index)
{
    if (index < 0 || index >= todre_registry_count()) return NULL;
    return &registry.entries[index];
}

static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    if (*len >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (w > 0) *len += (size_t)w < cap - *len ? (size_t)w : cap - *len - 1;
}

/* Why @p name is not registered: what was searched and what failed. */
static todre_status not_registered(const char *name)
{
    char buf[TODRE_MSG_CAP];
    size_t len = 0;
    append(buf, sizeof buf, &len, "backend: \"%s\" is not registered (", name);
    if (registry.nfailures) {
        append(buf, sizeof buf, &len, "tried ");
        for (int i = 0; i < registry.nfailures; i++)
            append(buf, sizeof buf, &len, "%s%s (%s)", i ? "; " : "", registry.failures[i].path,
                   registry.failures[i].reason);
    } else {
        append(buf, sizeof buf, &len, "no backend module found");
    }
    if (registry.nsearched) {
        append(buf, sizeof buf, &len, "; searched %s",
               getenv("TODRE_BACKEND_PATH") ? "$TODRE_BACKEND_PATH: " : "");
        for (int i = 0; i < registry.nsearched; i++)
            append(buf, sizeof buf, &len, "%s%s", i ? ", " : "", registry.searched[i]);
    } else if (getenv("TODRE_BACKEND_PATH")) {
        append(buf, sizeof buf, &len, "; $TODRE_BACKEND_PATH lists nothing");
    }
    append(buf, sizeof buf, &len, ")");
    return todre_fail(NULL, TODRE_ERR_BACKEND_UNAVAILABLE, "%s", buf);
}

todre_status todre_registry_resolve(const char *name, int device,
                                    const struct todre_registry_entry **entry, int *device_out)
{
    int count = todre_registry_count();
    if (count < 1)
        return todre_fail(NULL, TODRE_ERR_INTERNAL, "backend: the CPU backend did not register (%s)",
                          registry.nfailures ? registry.failures[0].reason : "?");
    if (device < 0)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "device: %d is negative", device);
    if (!name || strcmp(name, "auto") == 0) {
        /* The first available backend after the CPU whose device index
         * exists, else the CPU. */
        for (int i = 1; i < count; i++) {
            const struct todre_registry_entry *e = &registry.entries[i];
            if (e->available) {
                if (device >= e->device_count) break;
                *entry = e;
                *device_out = device;
                return TODRE_OK;
            }
        }
        *entry = &registry.entries[0];
        *device_out = 0;
        return TODRE_OK;
    }
    if (!valid_name(name))
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "backend: \"%.40s\" is not a backend name ([a-z0-9_], at most %d "
                          "characters)",
                          name, MAX_NAME);
    const struct todre_registry_entry *e = find_entry(name);
    if (!e) return not_registered(name);
    if (!e->available)
        return todre_fail(NULL, TODRE_ERR_BACKEND_UNAVAILABLE, "backend: %s is not available: %s",
                          e->name, e->reason);
    if (device >= e->device_count)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT,
                          "device: %d is outside [0, %d) for backend %s", device,
                          (int)e->device_count, e->name);
    *entry = e;
    *device_out = device;
    return TODRE_OK;
}

/* ---- public queries ---------------------------------------------------- */

todre_status todre_backend_count(int *count)
{
    todre_clear_error(NULL);
    if (!count) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "count: NULL");
    *count = todre_registry_count();
    return TODRE_OK;
}

todre_status todre_backend_get_props(int index, todre_backend_props *props)
{
    todre_clear_error(NULL);
    int count = todre_registry_count();
    if (index < 0 || index >= count)
        return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "index: %d is outside [0, %d)", index,
                          count);
    const struct todre_registry_entry *e = &registry.entries[index];
    todre_backend_props p;
    memset(&p, 0, sizeof p);
    p.name = e->name;
    p.path = e->path;
    p.device_type = e->dl_device_type;
    p.available = e->available;
    p.device_count = e->device_count;
    p.reason = e->reason;
    return todre_fill_sized(props, &p, sizeof p, "props");
}

todre_status todre_device_get_props(const char *backend, int device, todre_device_props *props)
{
    todre_clear_error(NULL);
    if (!props) return todre_fail(NULL, TODRE_ERR_INVALID_ARGUMENT, "props: NULL");
    const struct todre_registry_entry *e;
    int dev;
    todre_status st = todre_registry_resolve(backend, device, &e, &dev);
    if (st != TODRE_OK) return st;
    struct todre_backend_device_props bp;
    memset(&bp, 0, sizeof bp);
    char msg[TODRE_MSG_CAP] = "";
    struct todre_diag diag = {msg, sizeof msg};
    st = e->reg->device_props(dev, &bp, &diag);
    if (st != TODRE_OK) return todre_fail_diag(NULL, st, e->name, msg);
    todre_device_props p;
    memset(&p, 0, sizeof p);
    memcpy(p.name, bp.name, sizeof p.name);
    p.name[sizeof p.name - 1] = '\0';
    memcpy(p.arch, bp.arch, sizeof p.arch);
    p.arch[sizeof p.arch - 1] = '\0';
    p.total_memory = bp.total_memory;
    p.compute_major = bp.compute_major;
    p.compute_minor = bp.compute_minor;
    p.cores = bp.cores;
    return todre_fill_sized(props, &p, sizeof p, "props");
}
