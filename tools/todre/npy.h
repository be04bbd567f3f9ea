/*
 * A small, strict reader and writer for NumPy .npy files (format 1.0, 2.0,
 * 3.0), shared by the todre command-line tool, the tests and the benchmarks.
 *
 * Accepted: C-order, little-endian (or byte-order-free) plain dtypes, whose
 * canonical descr strings are listed in npy.c. Everything else (Fortran order,
 * big-endian data, structured or object dtypes, a malformed header, a data
 * section shorter or longer than the shape says) is refused with a one-line
 * message; a malformed file never makes the reader read out of bounds.
 * Internal to the project: not part of libtodre's ABI.
 */
#ifndef TODRE_TOOLS_NPY_H
#define TODRE_TOOLS_NPY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TODRE_NPY_MAX_RANK 8

struct todre_npy {
    /* Canonical descr: "<f4" "<f2" "<f8" "<i4" "<i8" "<i2" "|i1" "|u1" "<u2"
     * "<u4" "<u8" "|b1" (1-byte types always with '|'). */
    char descr[8];
    size_t itemsize;
    int rank;                          /* 0 .. TODRE_NPY_MAX_RANK */
    int64_t shape[TODRE_NPY_MAX_RANK];
    void *data;                        /* malloc'd, C order; never NULL after a load */
    size_t count;                      /* product of the shape (1 for rank 0) */
};

/* Load @p path into @p out (which need not be initialised).
 * @return 0 on success; -1 on failure with a one-line message (no newline,
 *         starting with the path) in @p err (if errcap > 0), @p out zeroed. */
int todre_npy_load(const char *path, struct todre_npy *out, char *err, size_t errcap);

/* Free the data of a loaded array and zero it. Accepts NULL and zeroed arrays. */
void todre_npy_free(struct todre_npy *a);

/* Write a C-order array (format 1.0, or 2.0 when the header needs it).
 * @param descr one of the canonical descr strings (non-canonical spellings
 *        such as "<u1" or "=f4" are accepted and written canonically).
 * @param data  count * itemsize bytes; may be NULL when the count is 0.
 * @return 0 on success; -1 with a one-line message in @p err. */
int todre_npy_save(const char *path, const char *descr, int rank, const int64_t *shape,
                   const void *data, char *err, size_t errcap);

/* The item size of a descr (canonical or not), or 0 if it is not supported;
 * writes the canonical spelling to @p canon (8 bytes) when non-NULL. */
size_t todre_npy_descr_itemsize(const char *descr, char *canon);

#ifdef __cplusplus
}
#endif

#endif /* TODRE_TOOLS_NPY_H */
