/*
 * libFuzzer harness: the .npy reader of the todre CLI (tools/todre/npy.c).
 *
 * Input: the bytes of a file, loaded with todre_npy_load() through a memfd
 * (/proc/self/fd/N), so no disk is touched. Checks, beyond ASan / UBSan:
 *  - a failure returns -1 with a one-line message that starts with the path,
 *    fits the caller's buffer (whatever its size, 0 included) and leaves the
 *    output zeroed;
 *  - a success describes the input exactly: a canonical descr whose item size
 *    is itemsize, rank <= 8, count = product of the shape, and the data equal
 *    to the last count * itemsize bytes of the file (nothing after them);
 *  - the array saves (todre_npy_save) and loads back identically.
 */
#define _GNU_SOURCE 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "npy.h"

static int memfd(const char *name, char *path, size_t cap)
{
    int fd = memfd_create(name, 0);
    if (fd < 0) {
        perror("memfd_create");
        abort();
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

static void put(int fd, const uint8_t *data, size_t size)
{
    if (ftruncate(fd, 0) != 0) abort();
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(fd, data + done, size - done, (off_t)done);
        if (w <= 0) abort();
        done += (size_t)w;
    }
}

static int is_zero(const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i]) return 0;
    return 1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd_in = -1, fd_out = -1;
    static char path_in[64], path_out[64];
    if (fd_in < 0) {
        fd_in = memfd("fuzz-in.npy", path_in, sizeof path_in);
        fd_out = memfd("fuzz-out.npy", path_out, sizeof path_out);
    }
    put(fd_in, data, size);

    /* The error buffer's size varies with the input: 256, 1, 0 (NULL), 23. */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 16777619u;
    static const size_t caps[] = {256, 1, 0, 23};
    size_t errcap = caps[h % 4];
    char errbuf[256 + 16];
    memset(errbuf, 'Z', sizeof errbuf);
    char *err = errcap ? errbuf : NULL;

    struct todre_npy a;
    memset(&a, 0xa5, sizeof a); /* "need not be initialised" */
    int rc = todre_npy_load(path_in, &a, err, errcap);
    FZ_CHECK(rc == 0 || rc == -1, "todre_npy_load returned %d", rc);
    if (errcap) {
        size_t len = strnlen(errbuf, errcap);
        FZ_CHECK(len < errcap, "the message is not terminated within errcap %zu", errcap);
        FZ_CHECK(errbuf[errcap] == 'Z', "the message overflowed errcap %zu", errcap);
        FZ_CHECK(!strchr(errbuf, '\n') && !strchr(errbuf, '\r'), "the message has a line break");
        if (rc == 0) FZ_CHECK(len == 0, "success left the message \"%s\"", errbuf);
        if (rc != 0 && errcap == 256) {
            FZ_CHECK(strncmp(errbuf, path_in, strlen(path_in)) == 0 &&
                         errbuf[strlen(path_in)] == ':' && len > strlen(path_in) + 2,
                     "the message \"%s\" does not start with the path and a reason", errbuf);
        }
    }
    if (rc != 0) {
        FZ_CHECK(is_zero(&a, sizeof a), "a failed load did not zero the output");
        return 0;
    }

    /* A successful load describes the file exactly. */
    char canon[8];
    size_t isz = todre_npy_descr_itemsize(a.descr, canon);
    FZ_CHECK(isz != 0 && isz == a.itemsize && strcmp(canon, a.descr) == 0,
             "loaded descr '%.8s' (itemsize %zu) is not canonical", a.descr, a.itemsize);
    FZ_CHECK(a.rank >= 0 && a.rank <= TODRE_NPY_MAX_RANK, "rank %d", a.rank);
    FZ_CHECK(a.data != NULL, "data NULL after a load");
    unsigned __int128 count = 1;
    for (int i = 0; i < a.rank; i++) {
        FZ_CHECK(a.shape[i] >= 0, "shape[%d] = %lld", i, (long long)a.shape[i]);
        count *= (unsigned __int128)a.shape[i];
    }
    FZ_CHECK(count == a.count, "count %zu is not the product of the shape", a.count);
    size_t bytes = a.count * a.itemsize;
    FZ_CHECK(bytes < size, "data of %zu bytes in a %zu-byte file", bytes, size);
    FZ_CHECK(memcmp(a.data, data + size - bytes, bytes) == 0,
             "the data differs from the file's last %zu bytes", bytes);

    /* Save and load back. */
    char err2[256];
    if (ftruncate(fd_out, 0) != 0) abort();
    FZ_CHECK(todre_npy_save(path_out, a.descr, a.rank, a.shape, a.data, err2, sizeof err2) == 0,
             "saving a loaded array failed: %s", err2);
    struct todre_npy b;
    FZ_CHECK(todre_npy_load(path_out, &b, err2, sizeof err2) == 0,
             "loading a saved array failed: %s", err2);
    FZ_CHECK(strcmp(a.descr, b.descr) == 0 && a.rank == b.rank && a.count == b.count &&
                 a.itemsize == b.itemsize &&
                 memcmp(a.shape, b.shape, sizeof a.shape[0] * (size_t)a.rank) == 0 &&
                 memcmp(a.data, b.data, bytes) == 0,
             "save + load does not round-trip");
    todre_npy_free(&b);
    todre_npy_free(&a);
    FZ_CHECK(is_zero(&a, sizeof a), "todre_npy_free did not zero the array");
    todre_npy_free(&a); /* zeroed arrays are accepted */
    return 0;
}
