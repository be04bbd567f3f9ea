/* libtodre 1.0.0 version header, as CMake generated it for that release:
 * the 1.0 headers a program built against 1.0 was compiled with. */
#ifndef TODRE_TODRE_VERSION_H
#define TODRE_TODRE_VERSION_H

/** Major version: changes only with an incompatible ABI (and the SONAME). */
#define TODRE_VERSION_MAJOR 1
/** Minor version: new functions, parameters or enum values, ABI-compatible. */
#define TODRE_VERSION_MINOR 0
/** Patch version: fixes only. */
#define TODRE_VERSION_PATCH 0
/** MAJOR * 10000 + MINOR * 100 + PATCH, e.g. 10000 for 1.0.0. */
#define TODRE_VERSION_NUMBER \
    (TODRE_VERSION_MAJOR * 10000 + TODRE_VERSION_MINOR * 100 + TODRE_VERSION_PATCH)
/** The compile-time version as a string. */
#define TODRE_VERSION_STRING "1.0.0"

#endif /* TODRE_TODRE_VERSION_H */
