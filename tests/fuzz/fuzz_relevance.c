/*
 * libFuzzer harness: stage 2 end to end on small inputs. A relevance handle
 * (1-8 layers, batch 1-3, any tau, schedule, probe layers) with token types
 * of 1-32 positions (a layout, or arbitrary per-sequence types), then up to
 * 12 operations: observations from attention probabilities or from q / k
 * (any H, H_kv dividing it, Q <= K, head dim, float32/16/bfloat16, any
 * layout, chunks of a chunked prefill, any layer), resets, new types, new
 * parameters and probe lists.
 *
 * A model written from docs/semantics.md predicts every call, beyond ASan /
 * UBSan / LSan:
 *  - the status: INVALID_ARGUMENT for a layer outside [0, L), K above the
 *    types' length or a scale that is negative, not finite, above
 *    FLT_MAX or below FLT_MIN (0 is the default), STATE for a chunk that does not continue the previous one of
 *    its layer, NONFINITE exactly when an active sequence's input holds
 *    NaN / Inf or (q / k) a score the library computes overflows float32
 *    (either status within rounding of FLT_MAX), else OK; the message
 *    contract;
 *  - each sequence's decision (NOT_PROBED, ALREADY_DROPPED, PENDING, KEEP,
 *    DROP) from the schedule, the probe list, earlier drops and the chunk;
 *    KEEP / DROP agree with the returned ratios and tau (strict <);
 *  - the ratios against a double-precision reference of the formula (the
 *    probability path for non-negative inputs, relative 1e-5; the fused
 *    path when every logit is within +-50 and no score's fp32 sum can be
 *    off by more than 2e-5, absolute 1e-4), chunks summed
 *    across calls; ratios finite, and in [0, 1] for probabilities and q / k;
 *  - after every operation: drop_layer, is_probe, which ratios exist, and
 *    keep_positions (the non-visual positions) for every sequence.
 *
 * Input layout (little-endian, zeros past the end):
 *   u8 L-1, u8 B-1, u8 tau mode [u16 | double], u8 schedule, u8 probe count,
 *   probe layers, types (u8 mode, ...), then repeated: u8 opcode, operands.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

#define LMAX 8
#define BMAX 3
#define KMAX 32
#define HMAX 4
#define DHMAX 16

static const DLDataType DT_I32 = {kDLInt, 32, 1};
static const DLDataType DT_I64 = {kDLInt, 64, 1};
static const DLDataType DT_U8 = {kDLUInt, 8, 1};

struct model {
    int64_t L, B, K;            /* K: positions the types cover */
    uint8_t types[BMAX][KMAX];
    uint8_t probe[LMAX];
    int64_t schedule;
    double tau;
    int64_t drop[BMAX];
    uint8_t observed[BMAX][LMAX];
    double ratio[BMAX][LMAX][2];        /* as the library returned them */
    double pending[BMAX][LMAX][4];      /* reference sums of pending chunks */
    uint8_t pending_raw[BMAX][LMAX];    /* a pending chunk held raw values, not probabilities */
    double pending_logit[BMAX][LMAX];   /* largest |logit| of the pending q / k chunks */
    int64_t pending_end[LMAX];
};

static void reset_state(struct model *m)
{
    for (int64_t b = 0; b < m->B; b++) m->drop[b] = -1;
    memset(m->observed, 0, sizeof m->observed);
    memset(m->pending, 0, sizeof m->pending);
    memset(m->pending_raw, 0, sizeof m->pending_raw);
    memset(m->pending_logit, 0, sizeof m->pending_logit);
    memset(m->pending_end, 0, sizeof m->pending_end);
}

static void default_params(struct model *m)
{
    m->tau = 0.10;
    m->schedule = TODRE_PROBE_LIST;
    memset(m->probe, 0, sizeof m->probe);
    m->probe[7 * m->L / 8] = 1;
}

static int first_probe(const struct model *m)
{
    for (int64_t l = 0; l < m->L; l++)
        if (m->probe[l]) return (int)l;
    return (int)m->L;
}

static int active(const struct model *m, int64_t b, int64_t layer)
{
    if (m->drop[b] >= 0) return 0;
    if (m->schedule == TODRE_PROBE_UNTIL_DROP) return layer >= first_probe(m);
    return m->probe[layer];
}

/* ---- checks of the whole state ------------------------------------------------ */

static void check_state(const struct model *m, todre_relevance *rel)
{
    for (int64_t b = 0; b < m->B; b++) {
        int64_t dl = -9;
        FZ_CHECK(todre_relevance_drop_layer(rel, b, &dl) == TODRE_OK, "drop_layer");
        FZ_CHECK(dl == m->drop[b], "seq %lld: drop layer %lld, the model says %lld", (long long)b,
                 (long long)dl, (long long)m->drop[b]);
        for (int64_t l = 0; l < m->L; l++) {
            int isp = -1;
            FZ_CHECK(todre_relevance_is_probe(rel, b, l, &isp) == TODRE_OK, "is_probe");
            FZ_CHECK(isp == active(m, b, l), "seq %lld layer %lld: is_probe %d, the model says %d",
                     (long long)b, (long long)l, isp, active(m, b, l));
            double a1 = -7, a2 = -7;
            todre_status st = todre_relevance_ratios(rel, b, l, &a1, &a2);
            fz_check_status("todre_relevance_ratios", st, NULL);
            if (m->observed[b][l]) {
                FZ_CHECK(st == TODRE_OK, "seq %lld layer %lld: ratios missing (%s)", (long long)b,
                         (long long)l, todre_last_error());
                FZ_CHECK(a1 == m->ratio[b][l][0] && a2 == m->ratio[b][l][1],
                         "seq %lld layer %lld: ratios changed", (long long)b, (long long)l);
            } else {
                FZ_CHECK(st == TODRE_ERR_STATE && a1 == -7 && a2 == -7,
                         "seq %lld layer %lld: ratios %s without an observation", (long long)b,
                         (long long)l, todre_status_string(st));
            }
        }
        /* keep_positions: the non-visual positions */
        int64_t want[KMAX], nw = 0, got[KMAX], count = -1, shape[1] = {KMAX};
        for (int64_t j = 0; j < m->K; j++)
            if (m->types[b][j] != TODRE_TOKEN_VISUAL) want[nw++] = j;
        DLTensor o = {got, {kDLCPU, 0}, 1, DT_I64, shape, NULL, 0};
        FZ_CHECK(todre_relevance_keep_positions(rel, b, &o, &count) == TODRE_OK, "keep_positions");
        FZ_CHECK(count == nw && memcmp(got, want, (size_t)nw * sizeof *want) == 0,
                 "seq %lld: keep_positions differ from the non-visual positions", (long long)b);
    }
}

/* ---- operations -------------------------------------------------------------------- */

static void set_types(struct fz *in, struct model *m, todre_relevance *rel)
{
    uint8_t mode = fz_u8(in);
    int64_t K = 1 + fz_u8(in) % KMAX;
    todre_status st;
    int ok = 1;
    if (mode % 3 == 0) {
        /* a layout [system | visual | text] */
        int64_t ns = fz_u8(in) % (K + 1), nv = fz_u8(in) % (K - ns + 1), nt = K - ns - nv;
        st = todre_relevance_set_layout(rel, ns, nv, nt);
        for (int64_t b = 0; b < m->B; b++)
            for (int64_t j = 0; j < K; j++)
                m->types[b][j] = j < ns ? 0 : j < ns + nv ? 1 : 2;
    } else {
        /* [K] for every sequence, or [B, K]; sometimes an invalid value */
        int per_seq = mode % 3 == 2;
        int64_t shape[2] = {m->B, K};
        struct fz_tensor t;
        fz_tensor_valid(in, &t, DT_U8, per_seq ? 2 : 1, per_seq ? shape : shape + 1,
                        FZ_VALID_INNER_STRIDE | FZ_VALID_ANY_ORDER);
        uint8_t v[BMAX][KMAX];
        for (int64_t b = 0; b < (per_seq ? m->B : 1); b++)
            for (int64_t j = 0; j < K; j++) {
                uint8_t x = fz_u8(in);
                v[b][j] = x < 0xfc ? x % 3 : x;
                if (v[b][j] > 2) ok = 0;
                *(uint8_t *)fz_tensor_flat(&t, b * K + j) = v[b][j];
            }
        st = todre_relevance_set_types(rel, &t.t);
        if (ok)
            for (int64_t b = 0; b < m->B; b++) memcpy(m->types[b], v[per_seq ? b : 0], (size_t)K);
        fz_tensor_free(&t);
    }
    fz_check_status("set_types", st, NULL);
    FZ_CHECK((st == TODRE_OK) == ok, "set_types returned %s (%s), the model says %s",
             todre_status_string(st), todre_last_error(), ok ? "OK" : "an error");
    if (ok) {
        m->K = K;
        reset_state(m);
    }
}

/* The reference sums of one sequence's chunk: probabilities. */
FZ_NOCOV static void ref_probs(const struct model *m, const double *a, int rank4, int64_t b,
                               int64_t H, int64_t Q, int64_t K, double s[4])
{
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Q; i++) {
            uint8_t t = m->types[b][K - Q + i];
            if (t == TODRE_TOKEN_SYSTEM) continue;
            uint8_t other = t == TODRE_TOKEN_TEXT ? TODRE_TOKEN_VISUAL : TODRE_TOKEN_TEXT;
            double total = 0, cross = 0;
            for (int64_t j = 0; j < K; j++) {
                int64_t f = (((rank4 ? b : 0) * H + h) * Q + i) * K + j;
                double v = a[f];
                total += v;
                if (m->types[b][j] == other) cross += v;
            }
            int base = t == TODRE_TOKEN_TEXT ? 0 : 2;
            s[base] += cross;
            s[base + 1] += total;
        }
}

/* ... and from q / k (causal softmax); *max_logit gets the largest |logit|. */
FZ_NOCOV static void ref_qk(const struct model *m, const double *q, const double *k, int rank4,
                            int64_t b, int64_t H, int64_t Hkv, int64_t Q, int64_t K, int64_t dh,
                            double scale, double s[4], double *max_logit)
{
    int64_t G = H / Hkv;
    double logit[KMAX + 1];
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Q; i++) {
            int64_t p = K - Q + i;
            uint8_t t = m->types[b][p];
            if (t == TODRE_TOKEN_SYSTEM) continue;
            uint8_t other = t == TODRE_TOKEN_TEXT ? TODRE_TOKEN_VISUAL : TODRE_TOKEN_TEXT;
            double mx = -INFINITY;
            for (int64_t j = 0; j <= p; j++) {
                double dot = 0, adot = 0;
                int exact = 1; /* integer terms: fp32 sums them exactly below 2^24 */
                for (int64_t e = 0; e < dh; e++) {
                    int64_t fq = (((rank4 ? b : 0) * H + h) * Q + i) * dh + e;
                    int64_t fk = (((rank4 ? b : 0) * Hkv + h / G) * K + j) * dh + e;
                    double x = q[fq], y = k[fk];
                    dot += x * y;
                    adot += fabs(x * y);
                    exact &= x == floor(x) && y == floor(y);
                }
                logit[j] = scale * dot;
                if (fabs(logit[j]) > *max_logit) *max_logit = fabs(logit[j]);
                /* The library sums q . k in fp32 (docs/semantics.md), in its
                 * BLAS's order: terms that cancel can leave a score off by up
                 * to dh * 2^-24 * scale * sum |q_e k_e| (a pair of 1e24 terms
                 * that cancel takes the small ones with them). Scores off by
                 * at most D move a ratio by at most about 2 D, so no
                 * reference check where D could exceed 2e-5 (the tolerance is
                 * 1e-4): max_logit is made infinite. */
                if (!(exact && adot < 0x1p24) && (double)dh * 0x1p-24 * scale * adot > 2e-5)
                    *max_logit = INFINITY;
                if (logit[j] > mx) mx = logit[j];
            }
            double all = 0, cross = 0;
            for (int64_t j = 0; j <= p; j++) {
                double e = exp(logit[j] - mx);
                all += e;
                if (m->types[b][j] == other) cross += e;
            }
            int base = t == TODRE_TOKEN_TEXT ? 0 : 2;
            s[base] += cross / all;
            s[base + 1] += 1.0;
        }
}

/* Whether scale * q . k overflows float32 in the library (which then returns
 * TODRE_ERR_NONFINITE) for sequence b: over the rows it scores (a text row
 * that sees a visual key, a visual row that sees a text key) and their
 * visible keys. 2: surely (|scale * q . k| above FLT_MAX by 1% with no
 * cancellation to speak of, so float rounding cannot bring it back); 1:
 * maybe (some product, partial sum or scaled sum comes within 0.1% of
 * FLT_MAX); 0: no. */
FZ_NOCOV static int qk_overflow(const struct model *m, const double *q, const double *k,
                                int rank4, int64_t b, int64_t H, int64_t Hkv, int64_t Q, int64_t K,
                                int64_t dh, double scale)
{
    int64_t G = H / Hkv, first_vis = K, first_txt = K;
    for (int64_t j = K - 1; j >= 0; j--) {
        if (m->types[b][j] == TODRE_TOKEN_VISUAL) first_vis = j;
        if (m->types[b][j] == TODRE_TOKEN_TEXT) first_txt = j;
    }
    const double top = FLT_MAX;
    int worst = 0;
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Q; i++) {
            int64_t p = K - Q + i;
            uint8_t t = m->types[b][p];
            if (!((t == TODRE_TOKEN_TEXT && first_vis <= p) ||
                  (t == TODRE_TOKEN_VISUAL && first_txt <= p)))
                continue;
            for (int64_t j = 0; j <= p; j++) {
                double dot = 0, bound = 0;
                for (int64_t e = 0; e < dh; e++) {
                    int64_t fq = (((rank4 ? b : 0) * H + h) * Q + i) * dh + e;
                    int64_t fk = (((rank4 ? b : 0) * Hkv + h / G) * K + j) * dh + e;
                    double x = q[fq] * k[fk];
                    dot += x;
                    bound += fabs(x);
                }
                if (fabs(scale * dot) > top * 1.01 && bound <= 1.5 * fabs(dot)) return 2;
                if (bound > top * 0.999 || scale * bound > top * 0.999) worst = 1;
            }
        }
    return worst;
}

FZ_NOCOV static int all_finite(const double *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return 0;
    return 1;
}

/* Attention probabilities: softmax rows (causal or over all K), or raw values. */
static void fill_probs(struct fz *in, struct fz_tensor *a, int64_t count, int64_t Q, int64_t K,
                       int dt, int mode)
{
    size_t isz = fz_float_size(dt);
    if (mode >= 2) { /* raw values, NaN and Inf included */
        unsigned char *tmp = malloc((size_t)count * isz);
        if (!tmp) abort();
        fz_fill_floats(in, tmp, dt, (size_t)count, mode == 3);
        fz_tensor_scatter(a, tmp);
        free(tmp);
        return;
    }
    unsigned char *tmp = malloc((size_t)count * isz);
    if (!tmp) abort();
    uint64_t s = fz_u64(in);
    double spread = 1 + fz_u8(in) % 8;
    for (int64_t row = 0; row < count / K; row++) {
        int64_t i = row % Q, p = K - Q + i, end = mode == 0 ? p + 1 : K;
        double e[KMAX + 1], sum = 0;
        for (int64_t j = 0; j < end; j++) {
            e[j] = exp(spread * ((double)(fz_splitmix64(&s) >> 11) * 0x1.0p-53 - 0.5));
            sum += e[j];
        }
        for (int64_t j = 0; j < K; j++)
            fz_store(tmp, dt, (size_t)(row * K + j), j < end ? (float)(e[j] / sum) : 0.0f);
    }
    fz_tensor_scatter(a, tmp);
    free(tmp);
}

static void observe(struct fz *in, struct model *m, todre_relevance *rel, todre_context *ctx,
                    int qk)
{
    uint8_t lb = fz_u8(in);
    int64_t layer = lb < 0xf0 ? lb % m->L : (int64_t)(lb % 3) * (m->L + 1) - 1; /* -1, L, 2L+1 */
    /* a chunk that continues this layer's pending one, mostly */
    int64_t K, Q;
    uint8_t cb = fz_u8(in);
    if (m->pending_end[layer >= 0 && layer < m->L ? layer : 0] > 0 && layer >= 0 && layer < m->L &&
        cb < 0xc0) {
        int64_t start = m->pending_end[layer];
        K = start + 1 + fz_u8(in) % (m->K - start > 0 ? m->K - start : 1);
        if (K > m->K) K = m->K;
        Q = K - start;
        if (Q < 1) Q = 1;
    } else {
        K = 1 + (cb < 0x80 ? m->K - 1 : fz_u8(in) % (m->K + 1)); /* mostly the whole prefill */
        if (K > m->K + 1) K = m->K + 1;
        Q = 1 + fz_u8(in) % K;
        if (cb & 1) Q = K; /* a full prefill */
    }
    int64_t H = 1 + fz_u8(in) % HMAX, Hkv = H, dh = 1 + fz_u8(in) % DHMAX;
    if (qk) {
        uint8_t g = fz_u8(in);
        if (H % 2 == 0 && (g & 1)) Hkv = H / 2;
        if (H % 4 == 0 && (g & 2)) Hkv = H / 4;
    }
    int dt = fz_u8(in) % 3;
    int rank4 = m->B > 1 || (fz_u8(in) & 1);
    uint8_t vmode = fz_u8(in);
    double scale = 0;
    if (qk) {
        uint8_t sb = fz_u8(in);
        scale = sb < 0x80 ? 0.0 : sb < 0xe0 ? (sb - 0x80) / 16.0 : fz_double_edge(in);
    }
    int with_dec = fz_u8(in) % 4 != 0;

    struct fz_tensor a, kk, dec;
    int64_t B = m->B;
    int64_t shp[4] = {B, H, Q, qk ? dh : K}, kshp[4] = {B, Hkv, K, dh};
    fz_tensor_valid(in, &a, fz_float_dtype(dt), rank4 ? 4 : 3, rank4 ? shp : shp + 1,
                    FZ_VALID_INNER_STRIDE | FZ_VALID_ANY_ORDER);
    if (qk) {
        fz_tensor_valid(in, &kk, fz_float_dtype(dt), rank4 ? 4 : 3, rank4 ? kshp : kshp + 1,
                        FZ_VALID_INNER_STRIDE | FZ_VALID_ANY_ORDER);
        size_t isz = fz_float_size(dt);
        for (int w = 0; w < 2; w++) {
            struct fz_tensor *x = w ? &kk : &a;
            unsigned char *tmp = malloc((size_t)x->count * isz);
            if (!tmp) abort();
            int finite = (vmode & (w ? 2 : 1)) == 0;
            fz_fill_floats(in, tmp, dt, (size_t)x->count, finite);
            fz_tensor_scatter(x, tmp);
            free(tmp);
        }
    } else {
        fill_probs(in, &a, a.count, Q, K, dt, vmode % 4);
    }
    if (with_dec) {
        fz_tensor_valid(in, &dec, DT_I32, 1, &B, FZ_VALID_INNER_STRIDE);
        fz_tensor_snapshot(&dec);
    }

    todre_status st = qk ? todre_relevance_observe_qk(ctx, rel, layer, &a.t, &kk.t, scale,
                                                      with_dec ? &dec.t : NULL)
                         : todre_relevance_observe_probs(ctx, rel, layer, &a.t,
                                                         with_dec ? &dec.t : NULL);
    const char *what = qk ? "observe_qk" : "observe_probs";
    fz_check_status(what, st, ctx);

    /* the inputs' values, in flat (logical) order, for the model */
    double *av = fz_tensor_doubles(&a, dt), *kv = qk ? fz_tensor_doubles(&kk, dt) : NULL;

    /* the model's status */
    todre_status want = TODRE_OK;
    int act[BMAX] = {0}, maybe_overflow = 0;
    if (layer < 0 || layer >= m->L || K > m->K)
        want = TODRE_ERR_INVALID_ARGUMENT;
    else if (qk && !(scale >= 0 && isfinite(scale)))
        want = TODRE_ERR_INVALID_ARGUMENT;
    else if (qk && scale > FLT_MAX) /* it would round to Inf in float32 */
        want = TODRE_ERR_INVALID_ARGUMENT;
    else if (qk && scale > 0 && scale < FLT_MIN) /* to a subnormal or 0 */
        want = TODRE_ERR_INVALID_ARGUMENT;
    else if (m->pending_end[layer] > 0 && K - Q != m->pending_end[layer])
        want = TODRE_ERR_STATE;
    else {
        for (int64_t b = 0; b < B; b++) {
            act[b] = active(m, b, layer);
        }
        int64_t per_b = a.count / B;
        for (int64_t b = 0; b < B && want == TODRE_OK; b++) {
            if (!act[b]) continue;
            if (!all_finite(av + (rank4 ? b : 0) * per_b, per_b)) want = TODRE_ERR_NONFINITE;
            if (qk) {
                int64_t kb = kk.count / B;
                if (want == TODRE_OK && !all_finite(kv + (rank4 ? b : 0) * kb, kb))
                    want = TODRE_ERR_NONFINITE;
            }
        }
        /* finite q and k whose scores overflow float32: NONFINITE too */
        for (int64_t b = 0; qk && b < B && want == TODRE_OK; b++) {
            if (!act[b]) continue;
            int ov = qk_overflow(m, av, kv, rank4, b, H, Hkv, Q, K, dh,
                                 scale == 0 ? 1 / sqrt((double)dh) : scale);
            if (ov == 2) want = TODRE_ERR_NONFINITE;
            if (ov == 1) maybe_overflow = 1;
        }
    }
    /* within rounding of FLT_MAX either outcome is right */
    if (maybe_overflow && want == TODRE_OK && st == TODRE_ERR_NONFINITE) want = st;
    FZ_CHECK(st == want, "%s(layer %lld, H %lld, Q %lld, K %lld of %lld) returned %s (%s), the "
             "model says %s", what, (long long)layer, (long long)H, (long long)Q, (long long)K,
             (long long)m->K, todre_status_string(st), todre_last_error(), todre_status_string(want));
    if (st != TODRE_OK) {
        if (with_dec) FZ_CHECK(fz_tensor_unchanged(&dec), "%s failed but wrote decisions", what);
        goto done;
    }

    int any_pending = 0;
    for (int64_t b = 0; b < B; b++) {
        int32_t d = -1;
        if (with_dec) memcpy(&d, fz_tensor_flat(&dec, b), 4);
        double *acc = m->pending[b][layer];
        if (!act[b]) {
            int32_t e = m->drop[b] >= 0 ? TODRE_DECISION_ALREADY_DROPPED : TODRE_DECISION_NOT_PROBED;
            if (with_dec) FZ_CHECK(d == e, "seq %lld: decision %d, the model says %d", (long long)b,
                                   (int)d, (int)e);
            memset(acc, 0, 4 * sizeof *acc);
            m->pending_raw[b][layer] = 0;
            m->pending_logit[b][layer] = 0;
            continue;
        }
        double s[4] = {0, 0, 0, 0}, max_logit = 0;
        if (qk) ref_qk(m, av, kv, rank4, b, H, Hkv, Q, K, dh, scale == 0 ? 1 / sqrt((double)dh) : scale,
                       s, &max_logit);
        else ref_probs(m, av, rank4, b, H, Q, K, s);
        if (K < m->K) {
            if (with_dec) FZ_CHECK(d == TODRE_DECISION_PENDING, "seq %lld: decision %d, the model "
                                   "says PENDING", (long long)b, (int)d);
            for (int i = 0; i < 4; i++) acc[i] += s[i];
            if (!qk && vmode % 4 >= 2) m->pending_raw[b][layer] = 1;
            if (max_logit > m->pending_logit[b][layer]) m->pending_logit[b][layer] = max_logit;
            any_pending = 1;
            continue;
        }
        for (int i = 0; i < 4; i++) {
            s[i] += acc[i];
            acc[i] = 0;
        }
        double r1 = -1, r2 = -1;
        FZ_CHECK(todre_relevance_ratios(rel, b, layer, &r1, &r2) == TODRE_OK, "seq %lld: no ratios "
                 "after a deciding observation: %s", (long long)b, todre_last_error());
        FZ_CHECK(isfinite(r1) && isfinite(r2), "%s: seq %lld ratios (%g, %g) with TODRE_OK", what,
                 (long long)b, r1, r2);
        /* raw (non-probability) values in this chunk or a pending one of the
         * same layer: no sign or reference check */
        int nonneg = (qk || vmode % 4 < 2) && !m->pending_raw[b][layer];
        m->pending_raw[b][layer] = 0;
        if (m->pending_logit[b][layer] > max_logit) max_logit = m->pending_logit[b][layer];
        m->pending_logit[b][layer] = 0;
        if (nonneg)
            FZ_CHECK(r1 >= 0 && r1 <= 1 + 1e-6 && r2 >= 0 && r2 <= 1 + 1e-6,
                     "%s: seq %lld layer %lld ratios (%.9g, %.9g) outside [0, 1] (K %lld, Q %lld, "
                     "H %lld, reference sums %g %g %g %g)", what, (long long)b, (long long)layer,
                     r1, r2, (long long)K, (long long)Q, (long long)H, s[0], s[1], s[2], s[3]);
        /* the reference, where its precision is meaningful */
        double e1 = s[1] > 0 ? s[0] / s[1] : 0, e2 = s[3] > 0 ? s[2] / s[3] : 0;
        int check = nonneg && max_logit <= 50; /* max_logit: 0 for probabilities */
        double tol1 = qk ? 1e-4 : 1e-5 * (1 + fabs(e1)), tol2 = qk ? 1e-4 : 1e-5 * (1 + fabs(e2));
        if (check)
            FZ_CHECK(fabs(r1 - e1) <= tol1 && fabs(r2 - e2) <= tol2,
                     "%s: seq %lld layer %lld ratios (%.9g, %.9g), the reference says (%.9g, %.9g)",
                     what, (long long)b, (long long)layer, r1, r2, e1, e2);
        int drop = r1 < m->tau && r2 < m->tau;
        int32_t e = drop ? TODRE_DECISION_DROP : TODRE_DECISION_KEEP;
        if (with_dec) FZ_CHECK(d == e, "seq %lld: decision %d with ratios (%.9g, %.9g), tau %.9g",
                               (long long)b, (int)d, r1, r2, m->tau);
        m->observed[b][layer] = 1;
        m->ratio[b][layer][0] = r1;
        m->ratio[b][layer][1] = r2;
        if (drop) m->drop[b] = layer;
    }
    m->pending_end[layer] = any_pending ? K : 0;
done:
    free(av);
    free(kv);
    fz_tensor_free(&a);
    if (qk) fz_tensor_free(&kk);
    if (with_dec) fz_tensor_free(&dec);
}

static void set_probes(struct fz *in, struct model *m, todre_relevance *rel)
{
    int64_t n = 1 + fz_u8(in) % 4, v[4];
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        v[i] = fz_u8(in) % (m->L + 1);
        if (v[i] >= m->L) ok = fz_u8(in) & 1 ? (v[i] = m->L - 1, ok) : 0;
    }
    int64_t shape[1] = {n};
    DLTensor t = {v, {kDLCPU, 0}, 1, DT_I64, shape, NULL, 0};
    todre_status st = todre_relevance_set_probe_layers(rel, &t);
    fz_check_status("set_probe_layers", st, NULL);
    FZ_CHECK((st == TODRE_OK) == ok, "set_probe_layers returned %s", todre_status_string(st));
    if (ok) {
        memset(m->probe, 0, sizeof m->probe);
        for (int64_t i = 0; i < n; i++) m->probe[v[i]] = 1;
    }
}

static void set_params(struct fz *in, struct model *m, todre_relevance *rel)
{
    uint8_t b = fz_u8(in);
    if (b & 1) {
        double tau = b < 0xc0 ? fz_u16(in) / 65535.0 : fz_double_edge(in);
        todre_status st = todre_relevance_set_double(rel, TODRE_RELEVANCE_TAU, tau);
        int ok = tau >= 0 && tau <= 1;
        FZ_CHECK((st == TODRE_OK) == ok, "set tau %.17g: %s", tau, todre_status_string(st));
        if (ok) m->tau = tau;
    } else {
        int64_t s = (b >> 1) % 3; /* 2: invalid */
        todre_status st = todre_relevance_set_int(rel, TODRE_RELEVANCE_SCHEDULE, s);
        FZ_CHECK((st == TODRE_OK) == (s < 2), "set schedule %lld: %s", (long long)s,
                 todre_status_string(st));
        if (s < 2) m->schedule = s;
    }
}

static void reset(struct fz *in, struct model *m, todre_relevance *rel)
{
    int what = 1 + fz_u8(in) % 3;
    FZ_CHECK(todre_relevance_reset(rel, (todre_reset)what) == TODRE_OK, "reset");
    if (what & TODRE_RESET_STATE) reset_state(m);
    if (what & TODRE_RESET_PARAMS) default_params(m);
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
    struct fz in = {data, size};
    static struct model m;
    memset(&m, 0, sizeof m);
    m.L = 1 + fz_u8(&in) % LMAX;
    m.B = 1 + fz_u8(&in) % BMAX;
    todre_relevance *rel = NULL;
    FZ_CHECK(todre_relevance_create(m.L, m.B, &rel) == TODRE_OK, "create");
    todre_context *ctx = NULL;
    FZ_CHECK(todre_context_create("cpu", 0, &ctx) == TODRE_OK, "context");
    uint8_t th = fz_u8(&in);
    FZ_CHECK(todre_context_set_int(ctx, TODRE_CONTEXT_NUM_THREADS, 1 + (th & 1)) == TODRE_OK,
             "threads");
    default_params(&m);
    reset_state(&m);
    set_params(&in, &m, rel);
    set_params(&in, &m, rel);
    if (fz_u8(&in) & 1) set_probes(&in, &m, rel);
    set_types(&in, &m, rel);
    if (m.K == 0) { /* the types were refused: a layout, then */
        FZ_CHECK(todre_relevance_set_layout(rel, 1, 2, 1) == TODRE_OK, "layout");
        m.K = 4;
        for (int64_t b = 0; b < m.B; b++) memcpy(m.types[b], "\0\1\1\2", 4);
    }
    check_state(&m, rel);
    for (int ops = 0; ops < 12 && in.n > 0; ops++) {
        uint8_t op = fz_u8(&in) % 10;
        switch (op) {
        case 0: case 1: case 2: observe(&in, &m, rel, ctx, 0); break;
        case 3: case 4: case 5: observe(&in, &m, rel, ctx, 1); break;
        case 6: reset(&in, &m, rel); break;
        case 7: set_types(&in, &m, rel); break;
        case 8: set_probes(&in, &m, rel); break;
        default: set_params(&in, &m, rel); break;
        }
        check_state(&m, rel);
    }
    todre_context_destroy(ctx);
    todre_relevance_destroy(rel);
    return 0;
}
