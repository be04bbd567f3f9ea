/*
 * The .npy reader/writer (tools/todre/npy.c): round trips, the header forms
 * numpy and hand-written files use, every refusal, and a fuzz-style sweep of
 * truncations and byte mutations that must never crash or read out of bounds
 * (the sanitizer build turns an out-of-bounds read into a failure).
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "npy.h"

static char g_path[512];

static const char *tmp_path(const char *name)
{
    const char *dir = getenv("TODRE_TEST_DATA");
    snprintf(g_path, sizeof g_path, "%s/npy_%ld_%s", dir && *dir ? dir : "/tmp", (long)getpid(),
             name);
    return g_path;
}

static void write_bytes(const char *path, const void *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* A .npy file: version, header text verbatim (no padding added), data bytes. */
static size_t build_file(unsigned char *buf, size_t cap, int major, const char *header,
                         const void *data, size_t datalen)
{
    size_t hlen = strlen(header), n = 0;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    n = 8;
    buf[n++] = (unsigned char)(hlen & 0xff);
    buf[n++] = (unsigned char)((hlen >> 8) & 0xff);
    if (major >= 2) {
        buf[n++] = (unsigned char)((hlen >> 16) & 0xff);
        buf[n++] = (unsigned char)((hlen >> 24) & 0xff);
    }
    assert_true(n + hlen + datalen <= cap);
    memcpy(buf + n, header, hlen);
    n += hlen;
    if (datalen) memcpy(buf + n, data, datalen);
    return n + datalen;
}

static int load_header(int major, const char *header, const void *data, size_t datalen,
                       struct todre_npy *a, char *err, size_t errcap)
{
    unsigned char buf[4096];
    size_t len = build_file(buf, sizeof buf, major, header, data, datalen);
    const char *path = tmp_path("hdr.npy");
    write_bytes(path, buf, len);
    return todre_npy_load(path, a, err, errcap);
}

/* Refusal: -1, a zeroed array, and one line that names the file and the reason. */
static void expect_refused(int major, const char *header, const void *data, size_t datalen,
                           const char *reason)
{
    struct todre_npy a;
    char err[256];
    memset(&a, 0x5a, sizeof a);
    int rc = load_header(major, header, data, datalen, &a, err, sizeof err);
    if (rc == 0) fail_msg("accepted a bad header: %s", header);
    assert_null(a.data);
    assert_int_equal(a.count, 0);
    assert_non_null(strstr(err, g_path));
    assert_null(strchr(err, '\n'));
    if (!strstr(err, reason)) fail_msg("message '%s' lacks '%s'", err, reason);
}

static const float k_six[6] = {1, 2, 3, 4, 5, 6};

/* Every dtype and ranks 0, 1, 2 and 8 survive a save / load round trip. */
static void round_trip_all_dtypes(void **state)
{
    (void)state;
    static const char *descrs[] = {"<f4", "<f2", "<f8", "<i4", "<i8", "<i2",
                                   "|i1", "|u1", "<u2", "<u4", "<u8", "|b1"};
    unsigned char data[64 * 8];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 7 + 1);
    const int64_t shapes[][8] = {{0}, {5}, {2, 3}, {1, 2, 1, 2, 1, 2, 1, 2}};
    const int ranks[] = {0, 1, 2, 8};
    for (size_t d = 0; d < sizeof descrs / sizeof descrs[0]; d++) {
        for (size_t s = 0; s < 4; s++) {
            char err[256];
            struct todre_npy a;
            const char *path = tmp_path("rt.npy");
            assert_int_equal(todre_npy_save(path, descrs[d], ranks[s], shapes[s], data, err,
                                            sizeof err), 0);
            assert_int_equal(todre_npy_load(path, &a, err, sizeof err), 0);
            assert_string_equal(a.descr, descrs[d]);
            assert_int_equal(a.rank, ranks[s]);
            size_t count = 1;
            for (int r = 0; r < ranks[s]; r++) {
                assert_int_equal(a.shape[r], shapes[s][r]);
                count *= (size_t)shapes[s][r];
            }
            assert_int_equal(a.count, count);
            assert_int_equal(a.itemsize, (size_t)(descrs[d][2] - '0'));
            assert_memory_equal(a.data, data, count * a.itemsize);
            todre_npy_free(&a);
            assert_null(a.data);
        }
    }
}

/* Empty arrays load with a non-NULL data pointer and count 0. */
static void empty_array(void **state)
{
    (void)state;
    struct todre_npy a;
    char err[256];
    const int64_t shape[2] = {0, 7};
    const char *path = tmp_path("empty.npy");
    assert_int_equal(todre_npy_save(path, "<f4", 2, shape, NULL, err, sizeof err), 0);
    assert_int_equal(todre_npy_load(path, &a, err, sizeof err), 0);
    assert_int_equal(a.count, 0);
    assert_non_null(a.data);
    todre_npy_free(&a);
}

/* Header spellings other writers produce: any key order, whitespace, no
 * trailing comma, double quotes, (n) without comma, 'L' suffixes, versions 2
 * and 3, '=' and '<' for byte-sized types. */
static void accepts_header_variants(void **state)
{
    (void)state;
    struct {
        int major;
        const char *header;
        const char *descr;
        int rank;
        int64_t d0, d1;
    } cases[] = {
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", "<f4", 2, 2, 3},
        {1, "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}", "<f4", 2, 2, 3},
        {1, "  {  \"descr\" :\"<f4\",\n'fortran_order':False ,'shape':( 6 , ) , }   \n", "<f4",
         1, 6, 0},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", "<f4", 1, 6, 0},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }", "<f4", 2, 2, 3},
        {2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }\n", "<f4", 2, 3, 2},
        {3, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }\n", "<f4", 1, 6, 0},
        {1, "{'descr': '=f4', 'fortran_order': False, 'shape': (6,), }\n", "<f4", 1, 6, 0},
        {1, "{'descr': '<u1', 'fortran_order': False, 'shape': (24,), }\n", "|u1", 1, 24, 0},
        {1, "{'descr': '>i1', 'fortran_order': False, 'shape': (24,), }\n", "|i1", 1, 24, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct todre_npy a;
        char err[256];
        if (load_header(cases[i].major, cases[i].header, k_six, sizeof k_six, &a, err,
                        sizeof err) != 0)
            fail_msg("refused '%s': %s", cases[i].header, err);
        assert_string_equal(a.descr, cases[i].descr);
        assert_int_equal(a.rank, cases[i].rank);
        assert_int_equal(a.shape[0], cases[i].d0);
        if (cases[i].rank > 1) assert_int_equal(a.shape[1], cases[i].d1);
        assert_memory_equal(a.data, k_six, sizeof k_six);
        todre_npy_free(&a);
    }
}

/* A scalar: shape () holds exactly one element. */
static void accepts_scalar(void **state)
{
    (void)state;
    struct todre_npy a;
    char err[256];
    assert_int_equal(load_header(1, "{'descr': '<f4', 'fortran_order': False, 'shape': ()}",
                                 k_six, 4, &a, err, sizeof err), 0);
    assert_int_equal(a.rank, 0);
    assert_int_equal(a.count, 1);
    todre_npy_free(&a);
}

#define HDR(descr, fortran, shape) \
    "{'descr': " descr ", 'fortran_order': " fortran ", 'shape': " shape ", }\n"

/* Each malformed or unsupported header is refused with its reason. */
static void refuses_bad_headers(void **state)
{
    (void)state;
    const void *d = k_six;
    const size_t n = sizeof k_six;
    expect_refused(1, HDR("'<f4'", "True", "(2, 3)"), d, n, "Fortran");
    expect_refused(1, HDR("'>f4'", "False", "(2, 3)"), d, n, "dtype");
    expect_refused(1, HDR("'<c8'", "False", "(3,)"), d, n, "dtype");
    expect_refused(1, HDR("'|O'", "False", "(6,)"), d, n, "dtype");
    expect_refused(1, HDR("'<f3'", "False", "(6,)"), d, n, "dtype");
    expect_refused(1, HDR("'<f4extra'", "False", "(6,)"), d, n, "dtype");
    expect_refused(1, HDR("[('a', '<f4')]", "False", "(6,)"), d, n, "structured");
    expect_refused(1, HDR("'<f4'", "0", "(6,)"), d, n, "fortran_order");
    expect_refused(1, HDR("'<f4'", "Falsey", "(6,)"), d, n, "fortran_order");
    expect_refused(1, HDR("'<f4'", "False", "(-6,)"), d, n, "shape");
    expect_refused(1, HDR("'<f4'", "False", "(6, 1.5)"), d, n, "shape");
    expect_refused(1, HDR("'<f4'", "False", "(6,,)"), d, n, "shape");
    expect_refused(1, HDR("'<f4'", "False", "[6]"), d, n, "shape");
    expect_refused(1, HDR("'<f4'", "False", "(1, 1, 1, 1, 1, 1, 1, 1, 6)"), d, n, "rank");
    expect_refused(1, HDR("'<f4'", "False", "(99999999999999999999,)"), d, n, "overflow");
    expect_refused(1, HDR("'<f4'", "False", "(4294967296, 4294967296)"), d, n, "overflow");
    expect_refused(1, HDR("'<f4'", "False", "(3037000500, 3037000500)"), d, n, "overflow");
    expect_refused(1, "{'descr': '<f4', 'shape': (6,)}", d, n, "lacks");
    expect_refused(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}",
                   d, n, "duplicate");
    expect_refused(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}", d, n,
                   "unexpected key");
    expect_refused(1, "{'descr': '<f4' 'fortran_order': False, 'shape': (6,)}", d, n,
                   "malformed");
    expect_refused(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,)} x", d, n,
                   "trailing");
    expect_refused(1, "{'descr: '<f4', 'fortran_order': False, 'shape': (6,)}", d, n,
                   "header");
    expect_refused(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,)", d, n,
                   "malformed");
    expect_refused(1, "['descr', '<f4']", d, n, "not a dict");
    expect_refused(1, "{'descr': '<\\x66\\x34', 'fortran_order': False, 'shape': (6,)}", d, n,
                   "descr");
}

/* The data section must hold exactly what the shape says. */
static void refuses_wrong_data_length(void **state)
{
    (void)state;
    expect_refused(1, HDR("'<f4'", "False", "(7,)"), k_six, sizeof k_six, "truncated");
    expect_refused(1, HDR("'<f4'", "False", "(5,)"), k_six, sizeof k_six, "extra");
    expect_refused(1, HDR("'<f4'", "False", "(1000000000000,)"), k_six, sizeof k_six,
                   "truncated");
}

/* Preamble checks: magic, version, header length bounds, missing file. */
static void refuses_bad_preamble(void **state)
{
    (void)state;
    struct todre_npy a;
    char err[256];
    const char *path = tmp_path("pre.npy");
    unsigned char buf[256];
    size_t len = build_file(buf, sizeof buf, 1, HDR("'<f4'", "False", "(6,)"), k_six,
                            sizeof k_six);

    unsigned char bad[256];
    memcpy(bad, buf, len);
    bad[1] = 'X';
    write_bytes(path, bad, len);
    assert_int_equal(todre_npy_load(path, &a, err, sizeof err), -1);
    assert_non_null(strstr(err, "magic"));

    memcpy(bad, buf, len);
    bad[6] = 4;
    write_bytes(path, bad, len);
    assert_int_equal(todre_npy_load(path, &a, err, sizeof err), -1);
    assert_non_null(strstr(err, "version"));

    memcpy(bad, buf, len);
    bad[8] = 0;
    bad[9] = 0;
    write_bytes(path, bad, len);
    assert_int_equal(todre_npy_load(path, &a, err, sizeof err), -1);
    assert_non_null(strstr(err, "header length"));

    /* a 2.0 header claiming 4 GiB */
    len = build_file(buf, sizeof buf, 2, HDR("'<f4'", "False", "(6,)"), k_six, sizeof k_six);
    buf[11] = 0xff;
    write_bytes(path, buf, len);
    assert_int_equal(todre_npy_load(path, &a, err, sizeof err), -1);
    assert_non_null(strstr(err, "header length"));

    write_bytes(path, "", 0);
    assert_int_equal(todre_npy_load(path, &a, err, sizeof err), -1);
    assert_non_null(strstr(err, "magic"));

    assert_int_equal(todre_npy_load(tmp_path("does-not-exist.npy"), &a, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));
    assert_non_null(strstr(err, "does-not-exist.npy"));
}

/* Every proper prefix of a valid file is refused. */
static void refuses_every_truncation(void **state)
{
    (void)state;
    unsigned char buf[256];
    size_t len = build_file(buf, sizeof buf, 1, HDR("'<f4'", "False", "(6,)"), k_six,
                            sizeof k_six);
    const char *path = tmp_path("trunc.npy");
    for (size_t cut = 0; cut < len; cut++) {
        struct todre_npy a;
        char err[256];
        write_bytes(path, buf, cut);
        if (todre_npy_load(path, &a, err, sizeof err) != -1)
            fail_msg("accepted a file cut at %zu of %zu bytes", cut, len);
        assert_true(err[0] != '\0');
    }
}

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Random byte mutations of the preamble and header: the loader either refuses
 * with a message or returns an array consistent with the file size. */
static void survives_random_mutations(void **state)
{
    (void)state;
    unsigned char buf[256], mut[256];
    size_t len = build_file(buf, sizeof buf, 1, HDR("'<f4'", "False", "(2, 3)"), k_six,
                            sizeof k_six);
    size_t hdr_end = len - sizeof k_six;
    static const unsigned char alphabet[] = "{}()[],:'\" 0123456789<>|=fiubTrueFalsL\n\x93\xff";
    const char *path = tmp_path("fuzz.npy");
    uint64_t seed = 12345;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(mut, buf, len);
        int flips = 1 + (int)(lcg(&seed) % 4);
        for (int f = 0; f < flips; f++) {
            size_t at = lcg(&seed) % hdr_end;
            mut[at] = alphabet[lcg(&seed) % (sizeof alphabet - 1)];
        }
        size_t mlen = (lcg(&seed) % 8 == 0) ? lcg(&seed) % (len + 1) : len;
        write_bytes(path, mut, mlen);
        struct todre_npy a;
        char err[256];
        if (todre_npy_load(path, &a, err, sizeof err) == 0) {
            size_t hl = (size_t)mut[8] | (size_t)mut[9] << 8;
            assert_true(mut[6] == 1);
            assert_int_equal(10 + hl + a.count * a.itemsize, mlen);
            todre_npy_free(&a);
        } else {
            assert_true(err[0] != '\0');
            assert_null(strchr(err, '\n'));
        }
    }
}

/* save refuses what it cannot write, with a message. */
static void save_refusals(void **state)
{
    (void)state;
    char err[256];
    const int64_t shape[1] = {6};
    const int64_t neg[1] = {-1};
    const char *path = tmp_path("save.npy");
    assert_int_equal(todre_npy_save(path, ">f4", 1, shape, k_six, err, sizeof err), -1);
    assert_non_null(strstr(err, "dtype"));
    assert_int_equal(todre_npy_save(path, "<f4", 9, shape, k_six, err, sizeof err), -1);
    assert_int_equal(todre_npy_save(path, "<f4", 1, neg, k_six, err, sizeof err), -1);
    assert_int_equal(todre_npy_save(path, "<f4", 1, shape, NULL, err, sizeof err), -1);
    assert_int_equal(todre_npy_save("/nonexistent-dir/x.npy", "<f4", 1, shape, k_six, err,
                                    sizeof err), -1);
    assert_non_null(strstr(err, "cannot create"));
    /* the data section written by save starts at a multiple of 64 */
    assert_int_equal(todre_npy_save(path, "<f4", 1, shape, k_six, err, sizeof err), 0);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char pre[10];
    assert_int_equal(fread(pre, 1, 10, f), 10);
    fclose(f);
    assert_int_equal((10 + (pre[8] | pre[9] << 8)) % 64, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip_all_dtypes),
        cmocka_unit_test(empty_array),
        cmocka_unit_test(accepts_header_variants),
        cmocka_unit_test(accepts_scalar),
        cmocka_unit_test(refuses_bad_headers),
        cmocka_unit_test(refuses_wrong_data_length),
        cmocka_unit_test(refuses_bad_preamble),
        cmocka_unit_test(refuses_every_truncation),
        cmocka_unit_test(survives_random_mutations),
        cmocka_unit_test(save_refusals),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(tmp_path("hdr.npy"));
    unlink(tmp_path("rt.npy"));
    unlink(tmp_path("empty.npy"));
    unlink(tmp_path("pre.npy"));
    unlink(tmp_path("trunc.npy"));
    unlink(tmp_path("fuzz.npy"));
    unlink(tmp_path("save.npy"));
    return rc;
}
