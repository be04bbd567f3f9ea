/* An interposed allocator for allocation-failure injection (tests only).
 *
 * tests/robust/alloc_interpose.c defines malloc, calloc, realloc, free,
 * posix_memalign, aligned_alloc, memalign, strdup and strndup in the test
 * program itself. A definition in the executable comes first in the dynamic
 * linker's symbol search, so these serve every allocation of the process
 * (libtodre's, libc's, OpenBLAS's, libgomp's) and forward to the next
 * definition (dlsym(RTLD_NEXT): libc's, or the sanitizer runtime's in an
 * ASan build, so LeakSanitizer still sees every block).
 *
 * Only allocations whose immediate caller is libtodre's own code (the return
 * address lies in the text of the object that defines todre_version_number,
 * i.e. libtodre.so.1) are counted, tracked and possibly failed; OpenBLAS,
 * libgomp, libc and the test itself are never touched. */
#ifndef TODRE_TESTS_ALLOC_INTERPOSE_H
#define TODRE_TESTS_ALLOC_INTERPOSE_H

#include <stddef.h>

/* 1 when the interposer serves this process (it does unless the program was
 * built with a sanitizer runtime linked statically, which defines the
 * allocator itself: clang's default). Locates libtodre's text. */
int ai_init(void);

/* Count libtodre's allocations from now on; the @p fail_at-th one (1-based)
 * fails (NULL / ENOMEM); 0 fails none. */
void ai_arm(long fail_at);
/* Stop counting; returns the number of libtodre allocations since ai_arm. */
long ai_disarm(void);
/* Whether the armed allocation was reached and failed (since ai_arm). */
int ai_injected(void);

/* libtodre's allocations that have not been freed (counted since the process
 * started), and their bytes. */
long ai_live(void);
size_t ai_live_bytes(void);

#endif /* TODRE_TESTS_ALLOC_INTERPOSE_H */
