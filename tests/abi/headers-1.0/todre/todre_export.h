/* Export macro of libtodre's public API. Internal use: the library is built
 * with -fvisibility=hidden and a linker version script; TODRE_API marks the
 * only symbols it exports. Define TODRE_STATIC when linking the static
 * archive on Windows. */
#ifndef TODRE_TODRE_EXPORT_H
#define TODRE_TODRE_EXPORT_H

#if defined(_WIN32) && !defined(TODRE_STATIC)
#  if defined(TODRE_BUILDING_LIBRARY)
#    define TODRE_API __declspec(dllexport)
#  else
#    define TODRE_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#  define TODRE_API __attribute__((visibility("default")))
#else
#  define TODRE_API
#endif

#endif /* TODRE_TODRE_EXPORT_H */
