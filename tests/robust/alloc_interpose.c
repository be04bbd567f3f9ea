/* An interposed allocator for allocation-failure injection: see
 * alloc_interpose.h. Linked into tests/robust/test_alloc_fail.c's program only
 * (tests/robust/CMakeLists.txt). */
#define _GNU_SOURCE /* RTLD_NEXT, dl_iterate_phdr, memalign */
#include "alloc_interpose.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <malloc.h> /* memalign */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "todre/todre.h"

/* Never instrumented by a sanitizer (tests/robust/CMakeLists.txt also compiles this
 * file with -fno-sanitize=all): the allocator is called while a shared
 * sanitizer runtime initialises itself, before its shadow memory exists. */
#if defined(__GNUC__)
#define NO_SANITIZE __attribute__((no_sanitize("address", "thread", "undefined")))
#else
#define NO_SANITIZE
#endif

typedef void *(*malloc_fn)(size_t);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef void (*free_fn)(void *);
typedef int (*posix_memalign_fn)(void **, size_t, size_t);
typedef void *(*aligned_alloc_fn)(size_t, size_t);

static malloc_fn real_malloc;
static calloc_fn real_calloc;
static realloc_fn real_realloc;
static free_fn real_free;
static posix_memalign_fn real_posix_memalign;
static aligned_alloc_fn real_aligned_alloc, real_memalign;

/* dlsym() may allocate (calloc) while the real functions are looked up: it
 * is served from this buffer, whose blocks are never freed for real. */
static _Alignas(64) char boot_buf[1 << 16];
static size_t boot_used;
static __thread int in_resolve;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;
static atomic_int served; /* the interposer is in use */

NO_SANITIZE
static void resolve(void)
{
    in_resolve = 1;
    real_malloc = (malloc_fn)(uintptr_t)dlsym(RTLD_NEXT, "malloc");
    real_calloc = (calloc_fn)(uintptr_t)dlsym(RTLD_NEXT, "calloc");
    real_realloc = (realloc_fn)(uintptr_t)dlsym(RTLD_NEXT, "realloc");
    real_free = (free_fn)(uintptr_t)dlsym(RTLD_NEXT, "free");
    real_posix_memalign = (posix_memalign_fn)(uintptr_t)dlsym(RTLD_NEXT, "posix_memalign");
    real_aligned_alloc = (aligned_alloc_fn)(uintptr_t)dlsym(RTLD_NEXT, "aligned_alloc");
    real_memalign = (aligned_alloc_fn)(uintptr_t)dlsym(RTLD_NEXT, "memalign");
    in_resolve = 0;
}

/* 0 while this thread is inside resolve() (serve from boot_buf). */
NO_SANITIZE
static int ready(void)
{
    if (in_resolve) return 0;
    pthread_once(&resolve_once, resolve);
    return 1;
}

NO_SANITIZE
static void *boot_alloc(size_t n)
{
    size_t at = (boot_used + 63) & ~(size_t)63;
    if (at + n > sizeof boot_buf) return NULL;
    boot_used = at + n;
    return boot_buf + at;
}

NO_SANITIZE
static int is_boot(const void *p)
{
    return (const char *)p >= boot_buf && (const char *)p < boot_buf + sizeof boot_buf;
}

/* ---- libtodre's address range ------------------------------------------------ */

static uintptr_t lib_lo, lib_hi; /* [lo, hi): libtodre's PT_LOAD segments */

struct find_ctx {
    uintptr_t addr, lo, hi;
    int found;
};

NO_SANITIZE
static int find_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct find_ctx *f = data;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (a < lo) lo = a;
        if (a + ph->p_memsz > hi) hi = a + ph->p_memsz;
    }
    if (f->addr >= lo && f->addr < hi) {
        f->lo = lo;
        f->hi = hi;
        f->found = 1;
        return 1;
    }
    return 0;
}

NO_SANITIZE
static int from_todre(const void *ra)
{
    uintptr_t a = (uintptr_t)ra;
    return a >= lib_lo && a < lib_hi;
}

/* ---- tracking and injection ---------------------------------------------------- */

#define MAX_TRACKED 65536

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    size_t n;
} tracked[MAX_TRACKED];
static long ntracked;
static size_t tracked_bytes;
static atomic_long live_hint; /* ntracked, read without the lock */

static atomic_int armed;
static atomic_long seen, fail_at;
static atomic_int injected;

NO_SANITIZE
static void track(void *p, size_t n)
{
    pthread_mutex_lock(&lock);
    if (ntracked < MAX_TRACKED) {
        tracked[ntracked].p = p;
        tracked[ntracked].n = n;
        ntracked++;
        tracked_bytes += n;
    }
    atomic_store(&live_hint, ntracked);
    pthread_mutex_unlock(&lock);
}

NO_SANITIZE
static void untrack(void *p)
{
    if (!p || atomic_load_explicit(&live_hint, memory_order_relaxed) == 0) return;
    pthread_mutex_lock(&lock);
    for (long i = ntracked - 1; i >= 0; i--) {
        if (tracked[i].p != p) continue;
        tracked_bytes -= tracked[i].n;
        tracked[i] = tracked[--ntracked];
        break;
    }
    atomic_store(&live_hint, ntracked);
    pthread_mutex_unlock(&lock);
}

/* Counts one libtodre allocation; 1 if it must fail. */
NO_SANITIZE
static int should_fail(void)
{
    if (!atomic_load(&armed)) return 0;
    long i = atomic_fetch_add(&seen, 1) + 1;
    if (i == atomic_load(&fail_at)) {
        atomic_store(&injected, 1);
        return 1;
    }
    return 0;
}

NO_SANITIZE
int ai_init(void)
{
    if (!ready()) return 0;
    struct find_ctx f = {(uintptr_t)&todre_version_number, 0, 0, 0};
    dl_iterate_phdr(find_object, &f);
    Dl_info info;
    if (!f.found || !dladdr((void *)(uintptr_t)&todre_version_number, &info) || !info.dli_fname)
        return 0;
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    if (strcmp(base, "libtodre.so.1") != 0) return 0;
    lib_lo = f.lo;
    lib_hi = f.hi;
    /* the interposer serves this process only if calls to malloc reach it */
    void *(*volatile m)(size_t) = malloc;
    free(m(1));
    return atomic_load(&served);
}

NO_SANITIZE
void ai_arm(long n)
{
    atomic_store(&seen, 0);
    atomic_store(&fail_at, n);
    atomic_store(&injected, 0);
    atomic_store(&armed, 1);
}

NO_SANITIZE
long ai_disarm(void)
{
    atomic_store(&armed, 0);
    return atomic_load(&seen);
}

int ai_injected(void) { return atomic_load(&injected); }

NO_SANITIZE
long ai_live(void)
{
    pthread_mutex_lock(&lock);
    long n = ntracked;
    pthread_mutex_unlock(&lock);
    return n;
}

NO_SANITIZE
size_t ai_live_bytes(void)
{
    pthread_mutex_lock(&lock);
    size_t n = tracked_bytes;
    pthread_mutex_unlock(&lock);
    return n;
}

/* ---- the allocator ---------------------------------------------------------------- */

NO_SANITIZE
static void *do_malloc(size_t n, int todre)
{
    if (!ready()) return boot_alloc(n);
    if (todre && should_fail()) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = real_malloc(n);
    if (todre && p) track(p, n);
    return p;
}

NO_SANITIZE
void *malloc(size_t n)
{
    atomic_store_explicit(&served, 1, memory_order_relaxed);
    return do_malloc(n, from_todre(__builtin_return_address(0)));
}

NO_SANITIZE
void *calloc(size_t m, size_t n)
{
    int todre = from_todre(__builtin_return_address(0));
    if (!ready()) {
        void *p = m && n > SIZE_MAX / m ? NULL : boot_alloc(m * n);
        if (p) memset(p, 0, m * n);
        return p;
    }
    if (todre && should_fail()) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = real_calloc(m, n);
    if (todre && p) track(p, m * n);
    return p;
}

NO_SANITIZE
void *realloc(void *old, size_t n)
{
    int todre = from_todre(__builtin_return_address(0));
    if (!ready() || is_boot(old)) {
        void *p = ready() ? real_malloc(n) : boot_alloc(n);
        if (p && old) { /* a boot block: copy what it can hold */
            size_t room = (size_t)(boot_buf + sizeof boot_buf - (char *)old);
            memcpy(p, old, n < room ? n : room);
        }
        return p;
    }
    if (todre && should_fail()) {
        errno = ENOMEM;
        return NULL; /* old stays valid, as realloc promises */
    }
    void *p = real_realloc(old, n);
    if (p || n == 0) untrack(old);
    if (todre && p) track(p, n);
    return p;
}

NO_SANITIZE
void free(void *p)
{
    if (!p || is_boot(p)) return;
    untrack(p);
    if (ready()) real_free(p);
}

NO_SANITIZE
int posix_memalign(void **out, size_t align, size_t n)
{
    int todre = from_todre(__builtin_return_address(0));
    if (!ready()) return ENOMEM;
    if (todre && should_fail()) return ENOMEM; /* *out untouched */
    int rc = real_posix_memalign(out, align, n);
    if (todre && rc == 0) track(*out, n);
    return rc;
}

NO_SANITIZE
void *aligned_alloc(size_t align, size_t n)
{
    int todre = from_todre(__builtin_return_address(0));
    if (!ready()) return NULL;
    if (todre && should_fail()) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = real_aligned_alloc(align, n);
    if (todre && p) track(p, n);
    return p;
}

NO_SANITIZE
void *memalign(size_t align, size_t n)
{
    int todre = from_todre(__builtin_return_address(0));
    if (!ready()) return NULL;
    if (todre && should_fail()) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = real_memalign(align, n);
    if (todre && p) track(p, n);
    return p;
}

/* libc's own strdup would allocate from inside libc (not counted): these
 * count libtodre's strdup calls as its allocations. */
NO_SANITIZE
char *strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = do_malloc(n, from_todre(__builtin_return_address(0)));
    if (p) memcpy(p, s, n);
    return p;
}

NO_SANITIZE
char *strndup(const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    char *p = do_malloc(n + 1, from_todre(__builtin_return_address(0)));
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}
