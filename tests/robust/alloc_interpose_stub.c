/* alloc_interpose.h without an interposed allocator: for programs whose
 * sanitizer runtime is linked in statically and defines the allocator
 * itself (clang's default), where a second definition cannot take over.
 * ai_init() says so and the test skips. */
#include "alloc_interpose.h"

int ai_init(void) { return 0; }
void ai_arm(long fail_at) { (void)fail_at; }
long ai_disarm(void) { return 0; }
int ai_injected(void) { return 0; }
long ai_live(void) { return 0; }
size_t ai_live_bytes(void) { return 0; }
