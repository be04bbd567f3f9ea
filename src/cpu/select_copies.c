/* Identical rows and the tie rule (docs/semantics.md: "the lowest index wins
 * everywhere").
 *
 * Rows that hold the same values have the same scores in exact arithmetic,
 * so the rule requires that a later copy is never taken before an earlier
 * one. The kernels of select_kernels.c compute each row's dot products from
 * that row's values alone, so copies get bitwise the same scores there
 * (GEMV, CENTER / FARTHEST). Products from BLAS and AMX do not: a blocked
 * sgemm / ssyrk (or an AMX tile) rounds the product of two rows differently
 * depending on where the rows sit in the blocks (edge kernels, diagonal
 * blocks), so two copies could get scores a rounding apart and the later one
 * win. Rather than giving up the blocked kernels, every product a Gram row
 * or an ISOLATED score takes from them is read through each row's first copy
 * (its representative): copies then see the very same numbers, and ties
 * fall to the argmin / argmax scans, which keep the lowest index.
 *
 * "The same values": equal as numbers, so -0 and +0 match (their products
 * are equal); NaN never reaches here (refused before any selection). */
#include <string.h>

#include "select_internal.h"

struct rec {
    uint64_t h;
    int64_t i;
};

/* One element's bits with -0 folded onto +0. */
static inline uint32_t elem_bits(const void *row, todre_dtype dt, int64_t j)
{
    if (dt == TODRE_DTYPE_F32) {
        uint32_t b;
        memcpy(&b, (const char *)row + j * 4, 4);
        return b == 0x80000000u ? 0 : b;
    }
    uint16_t b;
    memcpy(&b, (const char *)row + j * 2, 2);
    return b == 0x8000u ? 0 : b;
}

/* Eight bytes of a row (four 16-bit or two 32-bit elements) with every -0
 * lane folded onto +0: a lane is -0 when it equals the sign bit alone, i.e.
 * when lane ^ sign is zero; the zero-lane test adds without carries across
 * lanes (each lane's low bits plus all-but-sign ones sets the lane's sign
 * bit iff they are not all zero). */
static inline uint64_t word_bits(const void *p, uint64_t sign)
{
    uint64_t w, low = ~sign;
    memcpy(&w, p, 8);
    uint64_t t = w ^ sign;
    uint64_t nonzero = (((t & low) + low) | t) & sign; /* sign bit set iff lane != -0 */
    return w & ~(sign & ~nonzero);
}

/* FNV's low bits mix poorly: spread the high ones down. */
static inline uint64_t mix(uint64_t h)
{
    h ^= h >> 31;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 29);
}

/* FNV-style multiply-xor over 8-byte words in four independent lanes (one
 * serial chain per element made the hash about 10 % of a stage-1 call at
 * d = 4096), folded and mixed at the end. Equal rows (as numbers) hash
 * equal; collisions only cost a comparison (same_values). */
static uint64_t row_hash(const void *row, todre_dtype dt, int64_t d)
{
    const uint64_t P = 0x100000001b3ull;
    const int64_t es = dt == TODRE_DTYPE_F32 ? 4 : 2, per = 8 / es;
    const uint64_t sign = es == 4 ? 0x8000000080000000ull : 0x8000800080008000ull;
    const char *b = row;
    uint64_t h0 = 0xcbf29ce484222325ull, h1 = h0 ^ 1, h2 = h0 ^ 2, h3 = h0 ^ 3;
    int64_t j = 0;
    for (; j + 4 * per <= d; j += 4 * per) {
        h0 = (h0 ^ word_bits(b + j * es, sign)) * P;
        h1 = (h1 ^ word_bits(b + (j + per) * es, sign)) * P;
        h2 = (h2 ^ word_bits(b + (j + 2 * per) * es, sign)) * P;
        h3 = (h3 ^ word_bits(b + (j + 3 * per) * es, sign)) * P;
    }
    for (; j < d; j++) h0 = (h0 ^ elem_bits(row, dt, j)) * P;
    return mix(((h0 * P ^ h1) * P ^ h2) * P ^ h3);
}

/* A hash of SAMPLE_WORDS 8-byte words spread over the row (the whole row
 * when it is not longer): equal rows hash equal, as in row_hash; distinct
 * rows almost always differ in it, so only rows that share it are hashed in
 * full (find_copies). Reading the rows once less is about 8 % of a
 * stage-1 call on AMX (bf16, n = 2880, d = 4096). */
#define SAMPLE_WORDS 16

static uint64_t sample_hash(const void *row, todre_dtype dt, int64_t d)
{
    const int64_t es = dt == TODRE_DTYPE_F32 ? 4 : 2, per = 8 / es, words = d / per;
    if (words <= SAMPLE_WORDS) return row_hash(row, dt, d);
    const uint64_t P = 0x100000001b3ull;
    const uint64_t sign = es == 4 ? 0x8000000080000000ull : 0x8000800080008000ull;
    const char *b = row;
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t w = 0; w < SAMPLE_WORDS; w++) {
        int64_t at = w * (words - 1) / (SAMPLE_WORDS - 1); /* first and last included */
        h = (h ^ word_bits(b + at * per * es, sign)) * P;
    }
    return mix(h);
}

static int same_values(const struct todre_sel_seg *s, int64_t a, int64_t b)
{
    const void *ra = todre_sel_row(s->rows, s->dtype, s->stride, a);
    const void *rb = todre_sel_row(s->rows, s->dtype, s->stride, b);
    for (int64_t j = 0; j < s->d; j++)
        if (elem_bits(ra, s->dtype, j) != elem_bits(rb, s->dtype, j)) return 0;
    return 1;
}

static int rec_before(const struct rec *a, const struct rec *b)
{
    return a->h != b->h ? a->h < b->h : a->i < b->i;
}

static void sift_down(struct rec *r, int64_t root, int64_t n)
{
    for (;;) {
        int64_t c = 2 * root + 1;
        if (c >= n) return;
        if (c + 1 < n && rec_before(&r[c], &r[c + 1])) c++;
        if (!rec_before(&r[root], &r[c])) return;
        struct rec t = r[root];
        r[root] = r[c];
        r[c] = t;
        root = c;
    }
}

/* In-place heap sort by (hash, index): the hot path must not allocate. */
static void sort_recs(struct rec *r, int64_t n)
{
    for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(r, i, n);
    for (int64_t end = n - 1; end > 0; end--) {
        struct rec t = r[0];
        r[0] = r[end];
        r[end] = t;
        sift_down(r, 0, end);
    }
}

void todre_sel_find_copies(struct todre_sel_seg *s)
{
    struct rec *r = s->pairs; /* [n] 16-byte records */
    int64_t n = s->n, copies = 0;
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int64_t i = 0; i < n; i++)
        r[i] = (struct rec){sample_hash(todre_sel_row(s->rows, s->dtype, s->stride, i),
                                        s->dtype, s->d),
                            i};
    sort_recs(r, n);
    /* rows that share a sample hash: their full hashes (in parallel: all
     * rows may share one), each run sorted again (copies stay together,
     * indices ascending among equal hashes). rep_buf, filled below, first
     * holds each record's run start, or -1 alone. */
    int64_t *run = s->rep_buf;
    for (int64_t a = 0, b; a < n; a = b) {
        for (b = a + 1; b < n && r[b].h == r[a].h; b++) {}
        for (int64_t q = a; q < b; q++) run[q] = b - a < 2 ? -1 : a;
    }
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int64_t q = 0; q < n; q++)
        if (run[q] >= 0)
            r[q].h = row_hash(todre_sel_row(s->rows, s->dtype, s->stride, r[q].i), s->dtype, s->d);
    for (int64_t a = 0, b; a < n; a = b) {
        for (b = a + 1; b < n && run[b] == run[a]; b++) {}
        if (run[a] >= 0) sort_recs(r + a, b - a);
    }
    for (int64_t i = 0; i < n; i++) s->rep_buf[i] = i;
    /* within a run of equal hashes, indices ascend: the first equal row met
     * is the lowest copy */
    for (int64_t a = 0, b; a < n; a = b) {
        for (b = a + 1; b < n && r[b].h == r[a].h; b++) {
            for (int64_t q = a; q < b; q++) {
                int64_t root = r[q].i;
                if (s->rep_buf[root] != root || !same_values(s, root, r[b].i)) continue;
                s->rep_buf[r[b].i] = root;
                copies++;
                break;
            }
        }
    }
    s->rep = copies ? s->rep_buf : NULL;
}

void todre_sel_same_near(const struct todre_sel_seg *s, int64_t lo, int64_t hi, double *near)
{
    if (!s->rep) return;
    /* first[r]: the first copy in the range of a row r < lo (records no
     * longer needed: s->pairs is free scratch of 2 n int64) */
    int64_t *first = s->pairs;
    for (int64_t r = 0; r < lo; r++) first[r] = -1;
    for (int64_t v = lo; v < hi; v++) {
        int64_t r = s->rep[v];
        if (r == v) continue;
        if (r >= lo) {
            near[v - lo] = near[r - lo];
        } else if (first[r] < 0) {
            first[r] = v;
        } else {
            near[v - lo] = near[first[r] - lo];
        }
    }
}
