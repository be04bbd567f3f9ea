/*
 * .npy reader and writer. Format: "\x93NUMPY", major, minor, a little-endian
 * header length (u16 for 1.0, u32 for 2.0 / 3.0), then a Python dict literal
 * {'descr': ..., 'fortran_order': ..., 'shape': (...)} padded with spaces and
 * a newline, then the raw data.
 *
 * The header is parsed as a tiny subset of Python literal syntax (strings,
 * True/False, tuples of integers) by a cursor that checks its bound before
 * every byte, so no header, however malformed, is read past its end.
 */
#include "npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* numpy itself refuses headers above 10 000 bytes unless told otherwise;
 * anything beyond this bound is garbage, not a header. */
#define NPY_MAX_HEADER (1u << 20)

/* ------------------------------------------------------------------------- */
/* dtypes                                                                     */
/* ------------------------------------------------------------------------- */

struct npy_type {
    char kind;   /* 'f', 'i', 'u', 'b' */
    size_t size; /* bytes */
};

static const struct npy_type npy_types[] = {
    {'f', 2}, {'f', 4}, {'f', 8}, {'i', 1}, {'i', 2}, {'i', 4}, {'i', 8},
    {'u', 1}, {'u', 2}, {'u', 4}, {'u', 8}, {'b', 1},
};

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

size_t todre_npy_descr_itemsize(const char *descr, char *canon)
{
    if (!descr || strlen(descr) != 3) return 0;
    char order = descr[0], kind = descr[1], digit = descr[2];
    if (digit < '1' || digit > '9') return 0;
    size_t size = (size_t)(digit - '0');
    int known = 0;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (npy_types[i].kind == kind && npy_types[i].size == size) known = 1;
    if (!known) return 0;
    if (size == 1) {
        /* byte order is meaningless for one byte; numpy writes '|' */
        if (order != '|' && order != '<' && order != '>' && order != '=') return 0;
    } else {
        /* '=' is native order, which is little-endian on every host we accept */
        if (order != '<' && order != '=') return 0;
        if (!host_is_little_endian()) return 0;
    }
    if (canon) {
        canon[0] = size == 1 ? '|' : '<';
        canon[1] = kind;
        canon[2] = digit;
        canon[3] = '\0';
    }
    return size;
}

/* ------------------------------------------------------------------------- */
/* errors                                                                     */
/* ------------------------------------------------------------------------- */

static void set_err(char *err, size_t errcap, const char *path, const char *fmt, ...)
{
    if (!err || errcap == 0) return;
    int n = snprintf(err, errcap, "%s: ", path ? path : "(null)");
    if (n < 0 || (size_t)n >= errcap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errcap - (size_t)n, fmt, ap);
    va_end(ap);
    /* keep the message on one line whatever the path or strerror contain */
    for (char *p = err; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

/* ------------------------------------------------------------------------- */
/* header dict parsing                                                        */
/* ------------------------------------------------------------------------- */

struct cursor {
    const char *p;
    const char *end;
};

static void skip_ws(struct cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int accept(struct cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted Python string without escapes, copied into buf (cap bytes). */
static int parse_string(struct cursor *c, char *buf, size_t cap)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return -1;
    char quote = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != quote) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '\\' || ch < 0x20 || ch >= 0x7f) return -1;
        if (n + 1 >= cap) return -1;
        buf[n++] = (char)ch;
        c->p++;
    }
    if (c->p >= c->end) return -1;
    c->p++;
    buf[n] = '\0';
    return 0;
}

static int parse_word(struct cursor *c, const char *word)
{
    skip_ws(c);
    size_t len = strlen(word);
    if ((size_t)(c->end - c->p) < len || memcmp(c->p, word, len) != 0) return 0;
    const char *after = c->p + len;
    if (after < c->end && ((*after >= 'a' && *after <= 'z') || (*after >= 'A' && *after <= 'Z') ||
                           (*after >= '0' && *after <= '9') || *after == '_'))
        return 0;
    c->p = after;
    return 1;
}

static int parse_bool(struct cursor *c, int *out)
{
    if (parse_word(c, "True")) *out = 1;
    else if (parse_word(c, "False")) *out = 0;
    else return -1;
    return 0;
}

/* A non-negative decimal integer (an 'L' suffix, as Python 2 wrote, is allowed). */
static int parse_dim(struct cursor *c, int64_t *out)
{
    skip_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return -1;
    int64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int digit = *c->p - '0';
        if (v > (INT64_MAX - digit) / 10) return -2;
        v = v * 10 + digit;
        c->p++;
    }
    if (c->p < c->end && (*c->p == 'L' || *c->p == 'l')) c->p++;
    *out = v;
    return 0;
}

/* "()", "(n,)", "(n)", "(a, b, ...)" with an optional trailing comma. */
static int parse_shape(struct cursor *c, int *rank, int64_t *shape, const char **why)
{
    *why = "malformed shape tuple";
    if (!accept(c, '(')) return -1;
    int r = 0;
    if (accept(c, ')')) {
        *rank = 0;
        return 0;
    }
    for (;;) {
        if (r == TODRE_NPY_MAX_RANK) {
            *why = "rank above 8 is not supported";
            return -1;
        }
        int rc = parse_dim(c, &shape[r]);
        if (rc == -2) *why = "shape entry overflows int64";
        if (rc != 0) return -1;
        r++;
        if (accept(c, ')')) break;
        if (!accept(c, ',')) return -1;
        if (accept(c, ')')) break;
    }
    *rank = r;
    return 0;
}

struct header {
    char descr[8];
    int fortran;
    int rank;
    int64_t shape[TODRE_NPY_MAX_RANK];
};

enum { KEY_DESCR = 1, KEY_FORTRAN = 2, KEY_SHAPE = 4 };

static int parse_entry(struct cursor *c, struct header *h, unsigned *seen, const char **why)
{
    char key[32], value[32];
    *why = "malformed header dict";
    if (parse_string(c, key, sizeof key) != 0 || !accept(c, ':')) return -1;
    unsigned bit = !strcmp(key, "descr") ? KEY_DESCR
                   : !strcmp(key, "fortran_order") ? KEY_FORTRAN
                   : !strcmp(key, "shape") ? KEY_SHAPE : 0;
    if (!bit) {
        *why = "unexpected key in header dict";
        return -1;
    }
    if (*seen & bit) {
        *why = "duplicate key in header dict";
        return -1;
    }
    *seen |= bit;
    if (bit == KEY_DESCR) {
        skip_ws(c);
        if (c->p < c->end && (*c->p == '[' || *c->p == '{')) {
            *why = "structured dtypes are not supported";
            return -1;
        }
        if (parse_string(c, value, sizeof value) != 0) {
            *why = "malformed descr";
            return -1;
        }
        if (strlen(value) >= sizeof h->descr) {
            *why = "unsupported dtype";
            return -1;
        }
        strcpy(h->descr, value);
        return 0;
    }
    if (bit == KEY_FORTRAN) {
        if (parse_bool(c, &h->fortran) != 0) {
            *why = "fortran_order is not True or False";
            return -1;
        }
        return 0;
    }
    return parse_shape(c, &h->rank, h->shape, why);
}

static int parse_header(const char *text, size_t len, struct header *h, const char **why)
{
    struct cursor c = {text, text + len};
    unsigned seen = 0;
    memset(h, 0, sizeof *h);
    *why = "header is not a dict";
    if (!accept(&c, '{')) return -1;
    while (!accept(&c, '}')) {
        if (parse_entry(&c, h, &seen, why) != 0) return -1;
        if (accept(&c, '}')) break;
        if (!accept(&c, ',')) {
            *why = "malformed header dict";
            return -1;
        }
    }
    skip_ws(&c);
    if (c.p != c.end) {
        *why = "trailing characters after the header dict";
        return -1;
    }
    if (seen != (KEY_DESCR | KEY_FORTRAN | KEY_SHAPE)) {
        *why = "header dict lacks descr, fortran_order or shape";
        return -1;
    }
    return 0;
}

/* count = product of shape; 0 if it (times itemsize) overflows size_t or int64. */
static int shape_count(int rank, const int64_t *shape, size_t itemsize, size_t *count)
{
    uint64_t n = 1;
    const uint64_t limit = (uint64_t)INT64_MAX < (uint64_t)SIZE_MAX ? (uint64_t)INT64_MAX
                                                                    : (uint64_t)SIZE_MAX;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0) return -1;
        uint64_t dim = (uint64_t)shape[i];
        if (dim != 0 && n > limit / dim) return -1;
        n *= dim;
    }
    if (itemsize && n > limit / itemsize) return -1;
    *count = (size_t)n;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* load                                                                       */
/* ------------------------------------------------------------------------- */

static int read_preamble(FILE *f, size_t *hlen, const char **why)
{
    unsigned char pre[12];
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        *why = "not a .npy file (bad magic)";
        return -1;
    }
    int major = pre[6], minor = pre[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0) {
        *why = "unsupported .npy format version";
        return -1;
    }
    size_t lenbytes = major == 1 ? 2 : 4;
    if (fread(pre + 8, 1, lenbytes, f) != lenbytes) {
        *why = "truncated header";
        return -1;
    }
    uint32_t len = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
    if (lenbytes == 4) len |= (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    if (len == 0 || len > NPY_MAX_HEADER) {
        *why = "header length out of bounds";
        return -1;
    }
    *hlen = len;
    return 0;
}

/* Bytes left in a seekable file after the current position, or -1 if unknown. */
static long long remaining_bytes(FILE *f)
{
    long here = ftell(f);
    if (here < 0 || fseek(f, 0, SEEK_END) != 0) return -1;
    long end = ftell(f);
    if (fseek(f, here, SEEK_SET) != 0 || end < here) return -1;
    return (long long)end - here;
}

static int load_stream(FILE *f, struct todre_npy *out, const char **why, char *detail,
                       size_t detailcap)
{
    size_t hlen;
    if (read_preamble(f, &hlen, why) != 0) return -1;
    char *text = malloc(hlen);
    if (!text) {
        *why = "out of memory";
        return -1;
    }
    struct header h;
    int rc = fread(text, 1, hlen, f) == hlen ? parse_header(text, hlen, &h, why) : -1;
    if (rc != 0 && !*why) *why = "truncated header";
    free(text);
    if (rc != 0) return -1;

    size_t itemsize = todre_npy_descr_itemsize(h.descr, out->descr);
    if (!itemsize) {
        snprintf(detail, detailcap, "unsupported dtype '%s' (need a little-endian plain "
                 "numeric dtype)", h.descr);
        *why = detail;
        return -1;
    }
    if (h.fortran) {
        *why = "Fortran-order arrays are not supported (save with np.ascontiguousarray)";
        return -1;
    }
    if (shape_count(h.rank, h.shape, itemsize, &out->count) != 0) {
        *why = "shape too large (element count overflows)";
        return -1;
    }
    size_t bytes = out->count * itemsize;
    long long left = remaining_bytes(f);
    if (left >= 0 && (unsigned long long)left != (unsigned long long)bytes) {
        snprintf(detail, detailcap, "%s data: the shape needs %zu bytes, the file has %lld",
                 (unsigned long long)left < bytes ? "truncated" : "extra bytes after the",
                 bytes, left);
        *why = detail;
        return -1;
    }
    out->data = malloc(bytes ? bytes : 1);
    if (!out->data) {
        *why = "out of memory for the data";
        return -1;
    }
    if (fread(out->data, 1, bytes, f) != bytes) {
        *why = "truncated data";
        return -1;
    }
    if (fgetc(f) != EOF) {
        *why = "extra bytes after the data";
        return -1;
    }
    out->itemsize = itemsize;
    out->rank = h.rank;
    memcpy(out->shape, h.shape, sizeof h.shape);
    return 0;
}

int todre_npy_load(const char *path, struct todre_npy *out, char *err, size_t errcap)
{
    if (err && errcap) err[0] = '\0';
    if (!out) {
        set_err(err, errcap, path, "no output array given");
        return -1;
    }
    memset(out, 0, sizeof *out);
    if (!path) {
        set_err(err, errcap, path, "no path given");
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        set_err(err, errcap, path, "cannot open: %s", strerror(errno));
        return -1;
    }
    const char *why = NULL;
    char detail[160];
    int rc = load_stream(f, out, &why, detail, sizeof detail);
    fclose(f);
    if (rc != 0) {
        set_err(err, errcap, path, "%s", why ? why : "cannot read");
        todre_npy_free(out);
        return -1;
    }
    return 0;
}

void todre_npy_free(struct todre_npy *a)
{
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

/* ------------------------------------------------------------------------- */
/* save                                                                       */
/* ------------------------------------------------------------------------- */

/* The header dict, padded with spaces and a newline so that the data starts
 * at a multiple of 64 bytes, as numpy writes it. */
static size_t format_header(char *buf, size_t cap, const char *canon, int rank,
                            const int64_t *shape, size_t prefix)
{
    char dims[TODRE_NPY_MAX_RANK * 24 + 4];
    size_t n = 0;
    dims[n++] = '(';
    for (int i = 0; i < rank; i++)
        n += (size_t)snprintf(dims + n, sizeof dims - n, i ? ", %lld" : "%lld",
                              (long long)shape[i]);
    if (rank == 1) dims[n++] = ',';
    dims[n++] = ')';
    dims[n] = '\0';
    int len = snprintf(buf, cap, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                       canon, dims);
    size_t total = prefix + (size_t)len + 1;
    size_t pad = (64 - total % 64) % 64;
    memset(buf + len, ' ', pad);
    buf[(size_t)len + pad] = '\n';
    return (size_t)len + pad + 1;
}

int todre_npy_save(const char *path, const char *descr, int rank, const int64_t *shape,
                   const void *data, char *err, size_t errcap)
{
    char canon[8];
    size_t count = 0;
    if (err && errcap) err[0] = '\0';
    if (!path) {
        set_err(err, errcap, path, "no path given");
        return -1;
    }
    size_t itemsize = todre_npy_descr_itemsize(descr, canon);
    if (!itemsize) {
        set_err(err, errcap, path, "unsupported dtype '%s'", descr ? descr : "(null)");
        return -1;
    }
    if (rank < 0 || rank > TODRE_NPY_MAX_RANK || (rank > 0 && !shape) ||
        shape_count(rank, shape, itemsize, &count) != 0) {
        set_err(err, errcap, path, "invalid rank or shape");
        return -1;
    }
    if (count && !data) {
        set_err(err, errcap, path, "no data given");
        return -1;
    }
    char header[512];
    size_t hlen = format_header(header, sizeof header, canon, rank, shape, 10);
    FILE *f = fopen(path, "wb");
    if (!f) {
        set_err(err, errcap, path, "cannot create: %s", strerror(errno));
        return -1;
    }
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                             (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
    int ok = fwrite(pre, 1, sizeof pre, f) == sizeof pre &&
             fwrite(header, 1, hlen, f) == hlen &&
             (count == 0 || fwrite(data, itemsize, count, f) == count);
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        set_err(err, errcap, path, "write failed: %s", strerror(errno));
        return -1;
    }
    return 0;
}
