/* Gram matrix of f16 / bf16 rows on Intel AMX tiles, as fp32 accumulation
 * of exact products gives it.
 *
 * TDPBF16PS multiplies bf16 pairs into fp32 accumulators: for each 32-bit
 * pair (a0, a1) x (b0, b1) it adds a0*b0 + a1*b1 (products of bf16 values
 * are exact in fp32, and the pair is summed before it reaches the
 * accumulator, so swapping the two products changes nothing). A bf16 row is
 * used as is, in pairs of neighbouring values. An f16 value x (11
 * significant bits) splits exactly into x = h + l with h = bf16(x) and
 * l = x - h (at most 3 significant bits, also a bf16), and
 *   x.y = sum over k of (h_k h'_k + l_k l'_k) + (h_k l'_k + l_k h'_k):
 * two pair products per element, with A pairs (h_k, l_k) and then the
 * swapped A pairs (l_k, h_k) against B pairs (h'_k, l'_k). Both pair sums are
 * symmetric in the two rows, so G(i, j) and G(j, i) are bitwise equal and
 * identical rows give identical Gram rows (ties stay ties). The work is
 * four bf16 products per element pair, still about 4x faster than an fp32
 * GEMM at AMX's 16x the AVX-512 FMA rate.
 *
 * Layout: every operand tile is one contiguous KiB (16 rows x 16 pairs).
 * A side: the pairs of each row; B side: the same tiles transposed (VNNI).
 * For f16 the swapped A pairs are made per row block into L1 (A tiles are
 * reused from L1 while B tiles stream from L2). Only blocks on or above the
 * diagonal are computed, each copied to its mirror image below the diagonal
 * as soon as it is final.
 *
 * Linux on x86-64 only (the kernel must grant the tile state to the
 * process); elsewhere todre_sel_amx_usable() says no and BLAS is used. */
#include "select_amx.h"

#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "cpu_isa.h"
#include "select_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#define TODRE_SEL_AMX 1
#include <immintrin.h>
#endif

#define TILE_ROWS 16
#define TILE_PAIRS 16   /* 32-bit pairs per tile row (64 bytes) */
#define TILE_ELEMS (TILE_ROWS * TILE_PAIRS)
#define MICRO 32        /* C micro-block: 2 x 2 tiles */
/* Blocking (see panel()), tuned on the benchmark machine (2 MiB L2). */
#define PANEL_COLS 512
#define ICHUNK 128
#define KBLOCK 4 /* K chunks (tiles) per block */
/* batch_cols(): the A and swapped A tiles of a K block take 512 KiB of L2 */
#define BATCH_KBLOCK 128
/* todre_sel_amx_batch(): column blocks per chunk a thread takes (192 columns) */
#define BATCH_CHUNK 6

int64_t todre_sel_amx_pad(int64_t x) { return (x + MICRO - 1) / MICRO * MICRO; }

#ifdef TODRE_SEL_AMX

/* AMX is in use when the one ISA detection (cpu_isa.c) says so: the CPU has
 * AMX-BF16 and the AVX-512 parts the packing uses, the OS enabled the tile
 * state and granted it to the process, and TODRE_CPU_ISA does not cap it. */
int todre_sel_amx_usable(todre_dtype dtype)
{
    if (dtype != TODRE_DTYPE_F16 && dtype != TODRE_DTYPE_BF16) return 0;
    return todre_cpu_isa() == TODRE_CPU_ISA_AMX;
}

#define T_PACK __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,f16c")))
#define T_AMX __attribute__((target("amx-tile,amx-bf16,avx512f")))

/* 16 stored 16-bit values from element k of row, bit for bit, zero past d. */
T_PACK static inline __m256i load16_bits(const void *row, int64_t k, int64_t d)
{
    __mmask16 m = k + 16 <= d ? 0xffff : k >= d ? 0 : (__mmask16)((1u << (d - k)) - 1u);
    return _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k);
}

/* The same widened (f16 or bf16). */
T_PACK static inline __m512 load16(const void *row, todre_dtype dt, int64_t k, int64_t d)
{
    __m256i h = load16_bits(row, k, d);
    if (dt == TODRE_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Pairs per row: neighbouring bf16 values, or (h, l) of each f16 value. */
static inline int64_t row_pairs(const struct todre_sel_amx_pack *p)
{
    return p->split ? p->dpad : p->dpad / 2;
}

/* Offset (uint32) of tile (row block b, K chunk kc) in a packed array:
 * tiles are contiguous so that loads read whole lines and never alias in L1
 * (a row stride of 8 KiB would put 16 rows in one cache set). */
static inline int64_t tile_at(const struct todre_sel_amx_pack *p, int64_t b, int64_t kc)
{
    return (b * (row_pairs(p) / TILE_PAIRS) + kc) * TILE_ELEMS;
}

/* The 16 rows ids[0..16) (-1: a zero row) into the A tiles at blk. */
T_PACK static void pack_block(const struct todre_sel_amx_pack *p, uint32_t *blk, const void *rows,
                              int64_t stride, todre_dtype dt, int64_t d, const int64_t *ids)
{
    int64_t per = p->split ? 1 : 2; /* values per pair */
    for (int64_t r = 0; r < TILE_ROWS; r++) {
        const void *row = (const char *)rows + (ids[r] < 0 ? 0 : ids[r]) * stride * 2;
        for (int64_t k = 0; k < p->dpad; k += 16) {
            int64_t q = k / per; /* first pair written */
            uint32_t *dst = blk + tile_at(p, 0, q / TILE_PAIRS) + r * TILE_PAIRS + q % TILE_PAIRS;
            if (!p->split) { /* bf16: 16 values = 8 pairs, as stored */
                _mm256_storeu_si256((__m256i *)dst, ids[r] >= 0 ? load16_bits(row, k, d)
                                                                : _mm256_setzero_si256());
                continue;
            }
            __m512 x = ids[r] >= 0 ? load16(row, dt, k, d) : _mm512_setzero_ps();
            __m256i h = (__m256i)_mm512_cvtneps_pbh(x);
            __m512i hw = _mm512_cvtepu16_epi32(h);
            __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(hw, 16));
            __m256i l = (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(x, hf)); /* exact */
            __m512i pr = _mm512_or_si512(hw, _mm512_slli_epi32(_mm512_cvtepu16_epi32(l), 16));
            _mm512_storeu_si512(dst, pr);
        }
    }
}

/* dst = the 16 x 16 32-bit values r transposed, row stride dld (two
 * rounds of unpacks within 128-bit lanes, then two of lane shuffles). */
T_PACK static inline void transpose16_regs(const __m512i *r, uint32_t *dst, int64_t dld)
{
    __m512i a[16], b[16];
    for (int i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        a[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* b[i + j] = column 4L + j of rows i..i+3 */
        b[i] = _mm512_unpacklo_epi64(a[i], a[i + 2]);
        b[i + 1] = _mm512_unpackhi_epi64(a[i], a[i + 2]);
        b[i + 2] = _mm512_unpacklo_epi64(a[i + 1], a[i + 3]);
        b[i + 3] = _mm512_unpackhi_epi64(a[i + 1], a[i + 3]);
    }
    for (int j = 0; j < 4; j++) {
        __m512i c0 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x88); /* lanes 0,2 | 0,2 */
        __m512i c1 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xdd); /* lanes 1,3 | 1,3 */
        __m512i d0 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x88);
        __m512i d1 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xdd);
        _mm512_storeu_si512(dst + dld * j, _mm512_shuffle_i32x4(c0, d0, 0x88));
        _mm512_storeu_si512(dst + dld * (8 + j), _mm512_shuffle_i32x4(c0, d0, 0xdd));
        _mm512_storeu_si512(dst + dld * (4 + j), _mm512_shuffle_i32x4(c1, d1, 0x88));
        _mm512_storeu_si512(dst + dld * (12 + j), _mm512_shuffle_i32x4(c1, d1, 0xdd));
    }
}

/* dst = src transposed, as 16 x 16 32-bit values with row strides sld and
 * dld. */
T_PACK static void transpose16(const uint32_t *src, int64_t sld, uint32_t *dst, int64_t dld)
{
    __m512i r[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(src + sld * i);
    transpose16_regs(r, dst, dld);
}

/* The B tiles of the bf16 rows ids[0..16) (-1: a zero row) at dst, straight
 * from the rows: each K chunk's 16 pairs of the 16 rows loaded and
 * transposed in registers, bit for bit (what pack_block then pack_b make,
 * without the A tiles in between). */
T_PACK static void pack_b_bf16(const struct todre_sel_amx_pack *p, uint32_t *dst, const void *rows,
                               int64_t stride, int64_t d, const int64_t *ids)
{
    for (int64_t kc = 0; kc < row_pairs(p) / TILE_PAIRS; kc++) {
        int64_t k = kc * 2 * TILE_PAIRS; /* first value of the chunk */
        __mmask32 m = k + 32 <= d ? 0xffffffffu : k >= d ? 0 : (__mmask32)((1ull << (d - k)) - 1u);
        __m512i r[16];
        for (int i = 0; i < 16; i++)
            r[i] = ids[i] < 0 ? _mm512_setzero_si512()
                              : _mm512_maskz_loadu_epi16(m, (const uint16_t *)rows + ids[i] * stride + k);
        transpose16_regs(r, dst + tile_at(p, 0, kc), TILE_ROWS);
    }
}

/* B tiles of one row block (dst) from its A tiles (src): each tile
 * transposed (the VNNI form). */
T_PACK static void pack_b(const struct todre_sel_amx_pack *p, const uint32_t *src, uint32_t *dst)
{
    for (int64_t kc = 0; kc < row_pairs(p) / TILE_PAIRS; kc++) {
        int64_t at = tile_at(p, 0, kc);
        transpose16(src + at, TILE_PAIRS, dst + at, TILE_ROWS);
    }
}

/* ids of the consecutive rows [r0, r0 + 16), -1 past n */
static void block_ids(int64_t r0, int64_t n, int64_t *ids)
{
    for (int r = 0; r < TILE_ROWS; r++) ids[r] = r0 + r < n ? r0 + r : -1;
}

void todre_sel_amx_pack(const struct todre_sel_amx_pack *p, const void *rows, int64_t stride,
                        todre_dtype dtype, int64_t n, int64_t d, int nthreads, double *ss)
{
    const struct todre_sel_kernels *k = todre_sel_kernels_for(dtype);
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t r0 = 0; r0 < p->npad; r0 += TILE_ROWS) {
        int64_t ids[TILE_ROWS], at = tile_at(p, r0 / TILE_ROWS, 0);
        block_ids(r0, n, ids);
        if (p->a) {
            pack_block(p, p->a + at, rows, stride, dtype, d, ids);
            pack_b(p, p->a + at, p->b + at);
        } else if (!p->split) { /* B only, bf16: no A tiles needed */
            pack_b_bf16(p, p->b + at, rows, stride, d, ids);
        } else { /* B only: each thread's block of A tiles stays in L2 */
            uint32_t *tmp = p->tmp + tile_at(p, omp_get_thread_num(), 0);
            pack_block(p, tmp, rows, stride, dtype, d, ids);
            pack_b(p, tmp, p->b + at);
        }
        for (int i = 0; ss && i < TILE_ROWS && ids[i] >= 0; i++)
            ss[ids[i]] = todre_sel_sumsq(
                k, (const char *)rows + ids[i] * stride * todre_sel_elem_size(dtype), d);
    }
}

T_PACK void todre_sel_amx_pack_rows(const struct todre_sel_amx_pack *p, const void *rows,
                                    int64_t stride, todre_dtype dtype, int64_t d, const int64_t *ids)
{
    int64_t size = tile_at(p, TODRE_SEL_AMX_BATCH / TILE_ROWS, 0);
    for (int b = 0; b < TODRE_SEL_AMX_BATCH / TILE_ROWS; b++)
        pack_block(p, p->a + tile_at(p, b, 0), rows, stride, dtype, d, ids + b * TILE_ROWS);
    for (int64_t i = 0; p->split && i < size; i += 16) /* (l, h) pairs, see swap_tiles() */
        _mm512_storeu_si512(p->sw + i, _mm512_rol_epi32(_mm512_loadu_si512(p->a + i), 16));
}

struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

T_AMX static void tiles_on(void)
{
    struct tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.colsb[t] = 64;
        c.rows[t] = TILE_ROWS;
    }
    _tile_loadconfig(&c);
}

T_AMX static void tiles_off(void) { _tile_release(); }

/* C[i0.., j0..] (32 x 32, ld ldc floats) += the products of K chunks
 * [c0, c1); the first K block starts from zero. sw0 / sw1 (f16): the
 * swapped A tiles of the two row blocks from chunk c0 on, consecutive.
 * Tiles: 0-3 C, 4-5 A, 6-7 B. */
T_AMX static void micro(const struct todre_sel_amx_pack *p, const uint32_t *sw0,
                        const uint32_t *sw1, float *c, int64_t ldc, int64_t i0, int64_t j0,
                        int64_t c0, int64_t c1, int first)
{
    const int64_t sc = ldc * 4;
    const int64_t a0 = tile_at(p, i0 / TILE_ROWS, 0), a1 = tile_at(p, i0 / TILE_ROWS + 1, 0);
    const uint32_t *b0 = p->b + tile_at(p, j0 / TILE_ROWS, 0);
    const uint32_t *b1 = p->b + tile_at(p, j0 / TILE_ROWS + 1, 0);
    float *r0 = c + i0 * ldc + j0, *r1 = r0 + TILE_ROWS * ldc;
    if (first) {
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    } else {
        _tile_loadd(0, r0, sc); _tile_loadd(1, r0 + TILE_ROWS, sc);
        _tile_loadd(2, r1, sc); _tile_loadd(3, r1 + TILE_ROWS, sc);
    }
    if (!p->split) {
        for (int64_t kc = c0; kc < c1; kc++) {
            int64_t o = kc * TILE_ELEMS;
            _tile_loadd(4, p->a + a0 + o, 64);
            _tile_loadd(6, b0 + o, 64);
            _tile_loadd(7, b1 + o, 64);
            _tile_loadd(5, p->a + a1 + o, 64);
            _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
        }
    } else {
        /* software pipelined: each tile is reloaded right after its last
         * use, so that the load overlaps the products still running */
        int64_t o = c0 * TILE_ELEMS;
        _tile_loadd(4, p->a + a0 + o, 64);
        _tile_loadd(6, b0 + o, 64);
        _tile_loadd(7, b1 + o, 64);
        _tile_loadd(5, p->a + a1 + o, 64);
        for (int64_t kc = c0; kc < c1; kc++) {
            o = kc * TILE_ELEMS;
            int64_t on = o + TILE_ELEMS, more = kc + 1 < c1;
            _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); /* h.h' + l.l' */
            _tile_loadd(4, sw0 + (kc - c0) * TILE_ELEMS, 64);
            _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
            _tile_loadd(5, sw1 + (kc - c0) * TILE_ELEMS, 64);
            _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(2, 5, 6); /* h.l' + l.h' */
            if (more) _tile_loadd(6, b0 + on, 64);
            _tile_dpbf16ps(1, 4, 7);
            if (more) _tile_loadd(4, p->a + a0 + on, 64);
            _tile_dpbf16ps(3, 5, 7);
            if (more) {
                _tile_loadd(7, b1 + on, 64);
                _tile_loadd(5, p->a + a1 + on, 64);
            }
        }
    }
    _tile_stored(0, r0, sc); _tile_stored(1, r0 + TILE_ROWS, sc);
    _tile_stored(2, r1, sc); _tile_stored(3, r1 + TILE_ROWS, sc);
}

/* G[j.., i..] = G[i.., j..] transposed, for a finished 32 x 32 block above
 * the diagonal, while it is still in L1. (Diagonal blocks need nothing:
 * the pair sums make them symmetric bit for bit.) */
T_PACK static void mirror_block(float *g, int64_t ld, int64_t i0, int64_t j0)
{
    uint32_t *u = (uint32_t *)g;
    for (int64_t i = 0; i < MICRO; i += 16)
        for (int64_t j = 0; j < MICRO; j += 16)
            transpose16(u + (i0 + i) * ld + j0 + j, ld, u + (j0 + j) * ld + i0 + i, ld);
}

/* sw <- the A tiles of row blocks i0/16 and i0/16 + 1, K chunks [c0, c1),
 * with the halves of each pair swapped: (l, h) for the cross products. Made
 * here, into L1, rather than packed: it is reused across a whole row of
 * column blocks and would otherwise cost a third packed array. */
T_PACK static void swap_tiles(const struct todre_sel_amx_pack *p, uint32_t *sw, int64_t i0,
                              int64_t c0, int64_t c1)
{
    for (int r = 0; r < 2; r++)
        for (int64_t kc = c0; kc < c1; kc++) {
            const uint32_t *src = p->a + tile_at(p, i0 / TILE_ROWS + r, kc);
            uint32_t *dst = sw + (r * KBLOCK + kc - c0) * TILE_ELEMS;
            for (int i = 0; i < TILE_ELEMS; i += 16)
                _mm512_store_si512(dst + i, _mm512_rol_epi32(_mm512_loadu_si512(src + i), 16));
        }
}

/* One panel of columns [j0, j1): every 32 x 32 block of it on or above the
 * diagonal. Three levels of reuse: the C values of ICHUNK rows x the panel
 * stay in L2 across K blocks; the panel's B tiles of one K block stay in L2
 * across the row blocks of a chunk; a row block's A tiles of one K block
 * stay in L1 across the panel's column blocks. */
T_AMX static void panel(const struct todre_sel_amx_pack *p, float *g, int64_t j0, int64_t j1)
{
    _Alignas(64) uint32_t sw[2 * KBLOCK * TILE_ELEMS];
    int64_t chunks = row_pairs(p) / TILE_PAIRS;
    for (int64_t ic = 0; ic < j1; ic += ICHUNK) {
        int64_t ie = ic + ICHUNK < j1 ? ic + ICHUNK : j1;
        for (int64_t k0 = 0; k0 < chunks; k0 += KBLOCK) {
            int64_t k1 = k0 + KBLOCK < chunks ? k0 + KBLOCK : chunks;
            for (int64_t i0 = ic; i0 < ie; i0 += MICRO) {
                if (p->split) swap_tiles(p, sw, i0, k0, k1);
                for (int64_t jc = j0; jc < j1; jc += MICRO) {
                    if (jc + MICRO <= i0) continue; /* below the diagonal */
                    micro(p, sw, sw + KBLOCK * TILE_ELEMS, g, p->npad, i0, jc, k0, k1, k0 == 0);
                    if (k1 == chunks && jc > i0) mirror_block(g, p->npad, i0, jc);
                }
            }
        }
    }
}

T_AMX void todre_sel_amx_gram(const struct todre_sel_amx_pack *p, float *g, int nthreads)
{
    int64_t npanels = (p->npad + PANEL_COLS - 1) / PANEL_COLS;
#pragma omp parallel num_threads(nthreads)
    {
        tiles_on();
        /* the widest panels (most blocks above the diagonal) first */
#pragma omp for schedule(dynamic, 1)
        for (int64_t q = npanels - 1; q >= 0; q--) {
            int64_t j0 = q * PANEL_COLS;
            int64_t j1 = j0 + PANEL_COLS < p->npad ? j0 + PANEL_COLS : p->npad;
            panel(p, g, j0, j1);
        }
        tiles_off();
    }
}

/* Columns [j0, j1) of the batch's rows, in long K blocks: each 32 x 32
 * block's B tiles are then read as long contiguous streams (which the
 * prefetchers follow; short ones ran about 10% slower) while the batch's A
 * tiles stay in L2. Same kernel and K order as panel(), hence the same
 * values bit for bit. */
T_AMX static void batch_cols(const struct todre_sel_amx_pack *p, float *c, int64_t j0, int64_t j1)
{
    int64_t chunks = row_pairs(p) / TILE_PAIRS;
    for (int64_t k0 = 0; k0 < chunks; k0 += BATCH_KBLOCK) {
        int64_t k1 = k0 + BATCH_KBLOCK < chunks ? k0 + BATCH_KBLOCK : chunks;
        /* the swapped tiles (f16 only) of both row blocks from chunk k0 */
        const uint32_t *sw0 = p->split ? p->sw + tile_at(p, 0, k0) : NULL;
        const uint32_t *sw1 = p->split ? p->sw + tile_at(p, 1, k0) : NULL;
        for (int64_t jc = j0; jc < j1; jc += MICRO)
            micro(p, sw0, sw1, c, p->npad, 0, jc, k0, k1, k0 == 0);
    }
}

T_AMX void todre_sel_amx_batch(const struct todre_sel_amx_pack *p, float *c, int nthreads)
{
    /* chunks of BATCH_CHUNK column blocks handed out in order: a thread
     * slowed by another process does less, instead of the others waiting */
    int64_t nb = p->npad / MICRO, nchunks = (nb + BATCH_CHUNK - 1) / BATCH_CHUNK;
#pragma omp parallel num_threads(nthreads)
    {
        tiles_on();
#pragma omp for schedule(dynamic, 1)
        for (int64_t q = 0; q < nchunks; q++) {
            int64_t b1 = (q + 1) * BATCH_CHUNK < nb ? (q + 1) * BATCH_CHUNK : nb;
            batch_cols(p, c, q * BATCH_CHUNK * MICRO, b1 * MICRO);
        }
        tiles_off();
    }
}

#else /* no AMX on this platform */

int todre_sel_amx_usable(todre_dtype dtype)
{
    (void)dtype;
    return 0;
}
void todre_sel_amx_pack(const struct todre_sel_amx_pack *p, const void *rows, int64_t stride,
                        todre_dtype dtype, int64_t n, int64_t d, int nthreads, double *ss)
{
    (void)p; (void)rows; (void)stride; (void)dtype; (void)n; (void)d; (void)nthreads; (void)ss;
}
void todre_sel_amx_pack_rows(const struct todre_sel_amx_pack *p, const void *rows,
                             int64_t stride, todre_dtype dtype, int64_t d, const int64_t *ids)
{
    (void)p; (void)rows; (void)stride; (void)dtype; (void)d; (void)ids;
}
void todre_sel_amx_gram(const struct todre_sel_amx_pack *p, float *g, int nthreads)
{
    (void)p; (void)g; (void)nthreads;
}
void todre_sel_amx_batch(const struct todre_sel_amx_pack *p, float *c, int nthreads)
{
    (void)p; (void)c; (void)nthreads;
}

#endif
