/*
 * libFuzzer harness: stage 1 end to end (todre_select, todre_select_batch)
 * on small inputs: n <= 64 rows, d <= 32, float32 / float16 / bfloat16 with
 * arbitrary values (NaN, Inf, -0, subnormals, FLT_MAX, exact ties,
 * duplicated and zero rows), every objective, pivot, pivot range, order,
 * keep count and ratio, seed, CLS map ([n] or [frames, tokens]), thread
 * count, workspace limit and (experimental) strategy, in a valid layout
 * (padded rows whose padding is NaN, byte_offset, kDLCUDAHost).
 *
 * Checked against docs/semantics.md, beyond ASan / UBSan / LSan:
 *  - the status: INVALID_ARGUMENT exactly for a configuration that does not
 *    fit the input (CLS needed but absent, pivot range outside the set,
 *    keep > n), else NONFINITE exactly when a used element is NaN / Inf,
 *    else OK; the message contract; outputs untouched by a failure;
 *  - the output: k distinct indices in [0, n); ascending for ORDER_POSITION;
 *    ORDER_BOTH's row 1 = sorted row 0;
 *  - the selection order is a valid greedy trajectory, in double precision
 *    with a tolerance for fp32 accumulation: the pivot rule (CLS and RANDOM
 *    exactly, CENTER / FARTHEST / ISOLATED within tolerance), then each
 *    MAX_SUM / MAX_MIN step within tolerance of the best remaining score;
 *    CLS_TOPK exactly (descending, ties to the lower index);
 *  - determinism: the same call again gives the same output;
 *  - todre_select_batch: each set's result equals todre_select on a view of
 *    its rows; out_offsets are the running sums of the keep counts.
 * The trajectory check is skipped (the rest is not) when a row norm is below
 * 1e-15 or above 1e15: fp32 products of such rows underflow or overflow by
 * design ("fp32 accumulation" in docs/semantics.md).
 *
 * Input layout (little-endian, zeros past the end):
 *   u8 dtype, u8 n-1, u8 d-1, u8 flags (bit 0 non-finite data allowed,
 *   1 cls given, 2 video cls, 3 non-finite cls allowed, 4 batch, 5 keep
 *   array, 6 out_offsets, 7 duplicate rows), u8 dup, u8 context knobs,
 *   config bytes (see read_config), the embeddings layout and values, the
 *   cls layout and values, the output layout, batch cut points.
 */
#define TODRE_EXPERIMENTAL_API 1
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

#define NMAX 64
#define DMAX 32

static const DLDataType DT_I64 = {kDLInt, 64, 1};

struct cfgv {
    int64_t objective, pivot, lo, hi, keep, seed, order;
    double ratio;
    int64_t strategy; /* the context's TODRE_CONTEXT_EXP_SELECT_STRATEGY */
};

static todre_select_config *read_config(struct fz *in, int64_t n, struct cfgv *v)
{
    todre_select_config *cfg = NULL;
    FZ_CHECK(todre_select_config_create(&cfg) == TODRE_OK, "config");
    uint8_t a = fz_u8(in), r = fz_u8(in), b = fz_u8(in);
    v->objective = a % 3;
    v->pivot = (a >> 2) % 6;
    v->order = (a >> 5) % 3;
    v->lo = 0;
    v->hi = -1;
    switch (r % 8) {
    case 0: case 1: case 2: break; /* the whole set */
    case 3: case 4: case 5:        /* a valid range [lo, hi) */
        v->lo = fz_u8(in) % n;
        v->hi = v->lo + 1 + fz_u8(in) % (n - v->lo);
        break;
    case 6: /* small, possibly invalid */
        v->lo = fz_u8(in) % (n + 2);
        v->hi = (int64_t)(fz_u8(in) % (n + 3)) - 1;
        break;
    default: /* anything the setters take */
        v->lo = fz_i64_edge(in);
        v->hi = fz_i64_edge(in);
        break;
    }
    if (todre_select_config_set_int(cfg, TODRE_SELECT_PIVOT_LO, v->lo) != TODRE_OK) v->lo = 0;
    if (todre_select_config_set_int(cfg, TODRE_SELECT_PIVOT_HI, v->hi) != TODRE_OK) v->hi = -1;
    v->keep = 0;
    v->ratio = 0.10;
    if (b < 0x70) {
        v->keep = 1 + b % n;
    } else if (b < 0x78) {
        v->keep = n + 1 + b % 2; /* too many */
    } else if (b < 0xf0) {
        v->ratio = fz_u16(in) / 65535.0;
    } else {
        v->ratio = fz_double_edge(in);
    }
    if (v->keep) {
        FZ_CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_KEEP, v->keep) == TODRE_OK, "keep");
    } else if (todre_select_config_set_double(cfg, TODRE_SELECT_RATIO, v->ratio) != TODRE_OK) {
        FZ_CHECK(!(v->ratio > 0 && v->ratio <= 1), "ratio %.17g refused", v->ratio);
        v->ratio = 0.10;
    }
    v->seed = (int64_t)fz_u64(in);
    FZ_CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_OBJECTIVE, v->objective) == TODRE_OK &&
                 todre_select_config_set_int(cfg, TODRE_SELECT_PIVOT, v->pivot) == TODRE_OK &&
                 todre_select_config_set_int(cfg, TODRE_SELECT_ORDER, v->order) == TODRE_OK &&
                 todre_select_config_set_int(cfg, TODRE_SELECT_SEED, v->seed) == TODRE_OK,
             "config setters");
    return cfg;
}

static todre_context *read_context(struct fz *in, struct cfgv *v)
{
    uint8_t b = fz_u8(in);
    todre_context *ctx = NULL;
    FZ_CHECK(todre_context_create("cpu", 0, &ctx) == TODRE_OK, "context");
    static const int64_t ws[] = {0, 4096, (int64_t)256 << 20, INT64_MAX};
    FZ_CHECK(todre_context_set_int(ctx, TODRE_CONTEXT_NUM_THREADS, 1 + (b & 1)) == TODRE_OK &&
                 todre_context_set_int(ctx, TODRE_CONTEXT_WORKSPACE_LIMIT, ws[(b >> 1) % 4]) ==
                     TODRE_OK &&
                 todre_context_set_int(ctx, TODRE_CONTEXT_EXP_SELECT_STRATEGY, (b >> 3) % 4) ==
                     TODRE_OK,
             "context setters");
    v->strategy = (b >> 3) % 4;
    return ctx;
}

/* ---- the inputs as the reference sees them --------------------------------- */

struct input {
    struct fz_tensor emb, cls;
    int have_cls;
    int64_t n, d;
    int dt;
    double *x;     /* [n, d] normalised rows (double) */
    double *cv;    /* [n] cls values */
    int finite;    /* emb and cls hold no NaN / Inf */
    int well_scaled; /* every row norm is 0 or in [1e-15, 1e15] */
};

FZ_NOCOV static void analyse(struct input *I)
{
    I->x = fz_tensor_doubles(&I->emb, I->dt); /* [n, d], normalised below */
    I->cv = I->have_cls ? fz_tensor_doubles(&I->cls, I->dt) : calloc((size_t)I->n, sizeof *I->cv);
    if (!I->cv) abort();
    I->finite = 1;
    I->well_scaled = 1;
    for (int64_t i = 0; i < I->n; i++) {
        double ss = 0, *row = I->x + i * I->d;
        for (int64_t j = 0; j < I->d; j++) {
            if (!isfinite(row[j])) I->finite = 0;
            ss += row[j] * row[j];
        }
        double norm = sqrt(ss);
        if (ss > 0 && (norm < 1e-15 || norm > 1e15)) I->well_scaled = 0;
        for (int64_t j = 0; j < I->d; j++) row[j] = ss > 0 ? row[j] / norm : 0;
        if (I->have_cls && !isfinite(I->cv[i])) I->finite = 0;
    }
}

FZ_NOCOV static double sim(const struct input *I, int64_t row0, int64_t i, int64_t j)
{
    const double *a = I->x + (row0 + i) * I->d, *b = I->x + (row0 + j) * I->d;
    double s = 0;
    for (int64_t e = 0; e < I->d; e++) s += a[e] * b[e];
    return s;
}

/* Rows r and q (global) hold the same stored values: the library computes
 * the same score for both, so the tie rule (lowest index) decides. */
FZ_NOCOV static int same_rows(const struct input *I, int64_t r, int64_t q)
{
    size_t isz = fz_float_size(I->dt);
    for (int64_t e = 0; e < I->d; e++)
        if (memcmp(fz_tensor_flat(&I->emb, r * I->d + e), fz_tensor_flat(&I->emb, q * I->d + e), isz))
            return 0;
    return 1;
}

/* ---- the reference check of one set's selection ------------------------------ */

FZ_NOCOV static int64_t ref_random(uint64_t seed, int64_t lo, int64_t hi)
{
    uint64_t m = (uint64_t)(hi - lo), state = seed, r = (0 - m) % m, z;
    do z = fz_splitmix64(&state);
    while (z < r);
    return lo + (int64_t)(z % m);
}

/* sel: the selection order of set [row0, row0 + n), k entries. */
FZ_NOCOV static void check_trajectory(const struct input *I, const struct cfgv *v, int64_t row0, int64_t n,
                             int64_t k, const int64_t *sel)
{
    uint8_t taken[NMAX] = {0};
    for (int64_t t = 0; t < k; t++) {
        FZ_CHECK(sel[t] >= 0 && sel[t] < n, "index %lld outside [0, %lld)", (long long)sel[t],
                 (long long)n);
        FZ_CHECK(!taken[sel[t]], "index %lld selected twice", (long long)sel[t]);
        taken[sel[t]] = 1;
    }
    const double *cv = I->cv + row0;
    if (v->objective == TODRE_OBJECTIVE_CLS_TOPK) {
        /* the k largest, descending, ties to the lower index: exact */
        uint8_t used[NMAX] = {0};
        for (int64_t t = 0; t < k; t++) {
            int64_t best = -1;
            for (int64_t i = 0; i < n; i++)
                if (!used[i] && (best < 0 || cv[i] > cv[best])) best = i;
            used[best] = 1;
            FZ_CHECK(sel[t] == best, "CLS_TOPK: entry %lld is %lld, expected %lld (values %.9g, %.9g)",
                     (long long)t, (long long)sel[t], (long long)best, cv[sel[t]], cv[best]);
        }
        return;
    }
    int64_t lo = v->lo, hi = v->hi < 0 ? n : v->hi;
    int64_t pivot = v->pivot;
    if (pivot == TODRE_PIVOT_AUTO)
        pivot = v->objective == TODRE_OBJECTIVE_MAX_MIN ? TODRE_PIVOT_ISOLATED
                : I->have_cls                           ? TODRE_PIVOT_CLS
                                                        : TODRE_PIVOT_CENTER;
    const int64_t p = sel[0];
    const double d = (double)I->d;
    const double tol_s = 1e-6 * (1 + d / 4); /* one similarity, fp32 accumulation of d terms */
    if (pivot == TODRE_PIVOT_CLS || pivot == TODRE_PIVOT_RANDOM) {
        int64_t want = lo;
        if (pivot == TODRE_PIVOT_CLS) {
            for (int64_t i = lo; i < hi; i++)
                if (cv[i] > cv[want]) want = i;
        } else {
            want = ref_random((uint64_t)v->seed, lo, hi);
        }
        FZ_CHECK(p == want, "pivot %lld, expected %lld (%s)", (long long)p, (long long)want,
                 pivot == TODRE_PIVOT_CLS ? "CLS" : "RANDOM");
    } else {
        FZ_CHECK(p >= lo && p < hi, "pivot %lld outside the range [%lld, %lld)", (long long)p,
                 (long long)lo, (long long)hi);
        if (!I->well_scaled) return;
        double score[NMAX];
        if (pivot == TODRE_PIVOT_ISOLATED) {
            for (int64_t i = lo; i < hi; i++) {
                double nearest = -INFINITY;
                for (int64_t u = 0; u < n; u++)
                    if (u != i && sim(I, row0, i, u) > nearest) nearest = sim(I, row0, i, u);
                score[i] = n == 1 ? 0 : -nearest; /* argmax of -nearest */
            }
        } else {
            double mu[DMAX] = {0};
            for (int64_t i = lo; i < hi; i++)
                for (int64_t e = 0; e < I->d; e++) mu[e] += I->x[(row0 + i) * I->d + e] / (double)(hi - lo);
            for (int64_t i = lo; i < hi; i++) {
                double s = 0;
                for (int64_t e = 0; e < I->d; e++) s += I->x[(row0 + i) * I->d + e] * mu[e];
                score[i] = pivot == TODRE_PIVOT_FARTHEST ? -s : s;
            }
        }
        double best = -INFINITY;
        for (int64_t i = lo; i < hi; i++) best = score[i] > best ? score[i] : best;
        FZ_CHECK(score[p] >= best - 4 * tol_s,
                 "pivot %lld (mode %lld) scores %.9g, the best in range scores %.9g", (long long)p,
                 (long long)pivot, score[p], best);
        /* exact ties between identical rows, for every pivot and strategy:
         * copies of a row score bitwise the same (products from BLAS or AMX
         * are read through each row's first copy, src/cpu/select_copies.c) */
        for (int64_t u = lo; u < p; u++)
            FZ_CHECK(!same_rows(I, row0 + u, row0 + p),
                     "pivot %lld (mode %lld): row %lld is identical and lower (ties: the lowest "
                     "index)", (long long)p, (long long)pivot, (long long)u);
    }
    if (!I->well_scaled) return;
    /* greedy steps */
    double S[NMAX];
    uint8_t inC[NMAX] = {0};
    inC[p] = 1;
    int maxmin = v->objective == TODRE_OBJECTIVE_MAX_MIN;
    for (int64_t u = 0; u < n; u++) S[u] = maxmin ? 1 - sim(I, row0, u, p) : sim(I, row0, u, p);
    for (int64_t t = 1; t < k; t++) {
        int64_t c = sel[t];
        double best = maxmin ? -INFINITY : INFINITY;
        for (int64_t u = 0; u < n; u++)
            if (!inC[u]) best = maxmin ? (S[u] > best ? S[u] : best) : (S[u] < best ? S[u] : best);
        double tol = tol_s * (double)(t + 2) * 4;
        if (maxmin)
            FZ_CHECK(S[c] >= best - tol, "MAX_MIN step %lld took %lld (distance %.9g), best %.9g",
                     (long long)t, (long long)c, S[c], best);
        else
            FZ_CHECK(S[c] <= best + tol, "MAX_SUM step %lld took %lld (score %.9g), best %.9g",
                     (long long)t, (long long)c, S[c], best);
        for (int64_t u = 0; u < c; u++)
            FZ_CHECK(inC[u] || !same_rows(I, row0 + u, row0 + c),
                     "step %lld took %lld, but row %lld is identical, lower and not taken (ties: "
                     "the lowest index)", (long long)t, (long long)c, (long long)u);
        inC[c] = 1;
        for (int64_t u = 0; u < n; u++) {
            double s = sim(I, row0, u, c);
            if (maxmin) S[u] = 1 - s < S[u] ? 1 - s : S[u];
            else S[u] += s;
        }
    }
}

/* Expected status of a selection on a set of n rows (before NaN checks). */
static int config_fits(const struct cfgv *v, int have_cls, int64_t n, int64_t keep)
{
    if (v->objective == TODRE_OBJECTIVE_CLS_TOPK && !have_cls) return 0;
    if (v->objective != TODRE_OBJECTIVE_CLS_TOPK) {
        int64_t pivot = v->pivot;
        if (pivot == TODRE_PIVOT_AUTO && v->objective == TODRE_OBJECTIVE_MAX_SUM && have_cls)
            pivot = TODRE_PIVOT_CLS;
        if (pivot == TODRE_PIVOT_CLS && !have_cls) return 0;
        int64_t hi = v->hi < 0 ? n : v->hi;
        if (v->lo >= hi || hi > n) return 0;
    }
    return keep >= 1 && keep <= n;
}

static int64_t keep_for(const struct cfgv *v, int64_t n)
{
    if (v->keep) return v->keep;
    double kk = floor(v->ratio * (double)n + 0.5);
    return kk < 1 ? 1 : kk > (double)n ? n : (int64_t)kk;
}

/* ---- one todre_select call and its checks --------------------------------------- */

/* An [n] or [2, k] int64 output (valid layout from the input). */
static void make_out(struct fz *in, struct fz_tensor *o, int64_t order, int64_t k)
{
    int both = order == TODRE_ORDER_BOTH;
    int64_t shape[2] = {both ? 2 : k, k};
    fz_tensor_valid(in, o, DT_I64, both ? 2 : 1, shape, 0);
}

FZ_NOCOV static int64_t out_at(const struct fz_tensor *o, int64_t f)
{
    int64_t v;
    memcpy(&v, fz_tensor_flat(o, f), 8);
    return v;
}

FZ_NOCOV static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Check the output of a successful selection of set [row0, row0 + n). */
static void check_output(todre_context *ctx, todre_select_config *cfg, const struct input *I,
                         const struct cfgv *v, int64_t row0, int64_t n, int64_t k,
                         const struct fz_tensor *o, const DLTensor *emb_view,
                         const DLTensor *cls_view)
{
    int64_t sel[NMAX], pos[NMAX];
    int have_sel = v->order != TODRE_ORDER_POSITION;
    for (int64_t t = 0; t < k; t++) {
        if (v->order == TODRE_ORDER_BOTH) {
            sel[t] = out_at(o, t);
            pos[t] = out_at(o, k + t);
        } else if (have_sel) {
            sel[t] = out_at(o, t);
        } else {
            pos[t] = out_at(o, t);
        }
    }
    if (v->order != TODRE_ORDER_SELECTION) {
        for (int64_t t = 1; t < k; t++)
            FZ_CHECK(pos[t] > pos[t - 1], "position order not ascending at %lld", (long long)t);
        for (int64_t t = 0; t < k; t++)
            FZ_CHECK(pos[t] >= 0 && pos[t] < n, "position %lld outside [0, %lld)",
                     (long long)pos[t], (long long)n);
    }
    if (!have_sel) {
        /* the selection order from the same call with ORDER_BOTH */
        FZ_CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_ORDER, TODRE_ORDER_BOTH) == TODRE_OK,
                 "order");
        int64_t both[2 * NMAX], shape[2] = {2, k};
        DLTensor t = {both, {kDLCPU, 0}, 2, DT_I64, shape, NULL, 0};
        todre_status st = todre_select(ctx, cfg, emb_view, cls_view, &t);
        FZ_CHECK(st == TODRE_OK, "ORDER_BOTH after ORDER_POSITION: %s", todre_last_error());
        FZ_CHECK(memcmp(both + k, pos, (size_t)k * sizeof *pos) == 0,
                 "ORDER_BOTH's positions differ from ORDER_POSITION's");
        memcpy(sel, both, (size_t)k * sizeof *sel);
        todre_select_config_set_int(cfg, TODRE_SELECT_ORDER, v->order);
    } else if (v->order == TODRE_ORDER_BOTH) {
        int64_t sorted[NMAX];
        memcpy(sorted, sel, (size_t)k * sizeof *sel);
        qsort(sorted, (size_t)k, sizeof *sorted, cmp_i64);
        FZ_CHECK(memcmp(sorted, pos, (size_t)k * sizeof *pos) == 0,
                 "ORDER_BOTH: row 1 is not row 0 sorted");
    }
    check_trajectory(I, v, row0, n, k, sel);
}

static void free_input(struct input *I)
{
    fz_tensor_free(&I->emb);
    if (I->have_cls) fz_tensor_free(&I->cls);
    free(I->x);
    free(I->cv);
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
    struct input I;
    memset(&I, 0, sizeof I);
    I.dt = fz_u8(&in) % 3;
    I.n = 1 + fz_u8(&in) % NMAX;
    I.d = 1 + fz_u8(&in) % DMAX;
    uint8_t flags = fz_u8(&in), dup = fz_u8(&in);
    int batch = (flags & 16) != 0;
    I.have_cls = (flags & 2) != 0;
    int video = !batch && (flags & 4);
    struct cfgv v;
    todre_context *ctx = read_context(&in, &v);
    todre_select_config *cfg = read_config(&in, I.n, &v);

    /* embeddings: a valid layout, then the values (in row-major order) */
    int64_t eshape[2] = {I.n, I.d};
    fz_tensor_valid(&in, &I.emb, fz_float_dtype(I.dt), 2, eshape, 0);
    size_t isz = fz_float_size(I.dt);
    unsigned char *tmp = malloc((size_t)(I.n * I.d) * isz);
    if (!tmp) abort();
    fz_fill_floats(&in, tmp, I.dt, (size_t)(I.n * I.d), !(flags & 1));
    int64_t m = 1 + dup % I.n; /* flags bit 7: rows repeat every m rows (exact ties) */
    if (flags & 128)
        for (int64_t i = m; i < I.n; i++)
            memcpy(tmp + (size_t)(i * I.d) * isz, tmp + (size_t)((i % m) * I.d) * isz,
                   (size_t)I.d * isz);
    fz_tensor_scatter(&I.emb, tmp);
    free(tmp);
    /* cls: [n] or [frames, tokens] */
    int64_t frames = 1;
    if (video)
        for (int64_t f = 1 + dup % 8; f >= 1; f--)
            if (I.n % f == 0) {
                frames = f;
                break;
            }
    if (I.have_cls) {
        int64_t cshape[2] = {frames, I.n / frames};
        fz_tensor_valid(&in, &I.cls, fz_float_dtype(I.dt), video ? 2 : 1,
                        video ? cshape : &I.n, FZ_VALID_INNER_STRIDE | FZ_VALID_ANY_ORDER);
        unsigned char *c = malloc((size_t)I.n * isz);
        if (!c) abort();
        fz_fill_floats(&in, c, I.dt, (size_t)I.n, !(flags & 8));
        fz_tensor_scatter(&I.cls, c);
        free(c);
    }
    analyse(&I);

    if (!batch) {
        int64_t k = keep_for(&v, I.n);
        int fits = config_fits(&v, I.have_cls, I.n, k);
        struct fz_tensor out;
        make_out(&in, &out, v.order, fits ? k : 1);
        fz_tensor_snapshot(&out);
        const DLTensor *cls = I.have_cls ? &I.cls.t : NULL;
        todre_status st = todre_select(ctx, cfg, &I.emb.t, cls, &out.t);
        fz_check_status("todre_select", st, ctx);
        todre_status want = !fits ? TODRE_ERR_INVALID_ARGUMENT
                            : !I.finite ? TODRE_ERR_NONFINITE
                                        : TODRE_OK;
        FZ_CHECK(st == want, "todre_select returned %s (%s), expected %s (n %lld, d %lld, k %lld)",
                 todre_status_string(st), todre_last_error(), todre_status_string(want),
                 (long long)I.n, (long long)I.d, (long long)k);
        if (st != TODRE_OK) {
            FZ_CHECK(fz_tensor_unchanged(&out), "a failed todre_select wrote its output");
        } else {
            check_output(ctx, cfg, &I, &v, 0, I.n, k, &out, &I.emb.t, cls);
            /* determinism */
            struct fz_tensor again;
            fz_tensor_compact_copy(&out, &again);
            memset(again.buf, 0xff, again.bufsize);
            FZ_CHECK(todre_select(ctx, cfg, &I.emb.t, cls, &again.t) == TODRE_OK, "repeat");
            FZ_CHECK(fz_tensor_same_elems(&out, &again), "the same call gave another selection");
            fz_tensor_free(&again);
        }
        fz_tensor_free(&out);
    } else {
        /* B sets from cut points; keep per set from the config or an array */
        int64_t B = 1 + fz_u8(&in) % 4;
        if (B > I.n) B = I.n;
        int64_t off[5] = {0};
        for (int64_t b = 1; b < B; b++) {
            int64_t room = I.n - (B - b) - off[b - 1];
            off[b] = off[b - 1] + 1 + (room > 1 ? fz_u8(&in) % room : 0);
        }
        off[B] = I.n;
        int64_t keep[4], K = 0;
        int fits = 1;
        int keep_arr = (flags & 32) != 0;
        for (int64_t b = 0; b < B; b++) {
            int64_t nb = off[b + 1] - off[b];
            keep[b] = keep_arr ? (int64_t)(fz_u8(&in) % (nb + 1)) : keep_for(&v, nb); /* 0: invalid */
            if (!config_fits(&v, I.have_cls, nb, keep[b])) fits = 0;
            K += keep[b] > 0 ? keep[b] : 1;
        }
        int64_t oshape[1] = {B + 1};
        struct fz_tensor to, tk, out, oo;
        fz_tensor_valid(&in, &to, DT_I64, 1, oshape, FZ_VALID_INNER_STRIDE);
        for (int64_t b = 0; b <= B; b++) memcpy(fz_tensor_flat(&to, b), &off[b], 8);
        if (keep_arr) {
            fz_tensor_valid(&in, &tk, DT_I64, 1, &B, FZ_VALID_INNER_STRIDE);
            for (int64_t b = 0; b < B; b++) memcpy(fz_tensor_flat(&tk, b), &keep[b], 8);
        }
        make_out(&in, &out, v.order, K);
        int with_oo = (flags & 64) != 0;
        if (with_oo) fz_tensor_valid(&in, &oo, DT_I64, 1, oshape, FZ_VALID_INNER_STRIDE);
        fz_tensor_snapshot(&out);
        if (with_oo) fz_tensor_snapshot(&oo);
        const DLTensor *cls = I.have_cls ? &I.cls.t : NULL;
        todre_status st = todre_select_batch(ctx, cfg, &I.emb.t, cls, &to.t,
                                             keep_arr ? &tk.t : NULL, &out.t,
                                             with_oo ? &oo.t : NULL);
        fz_check_status("todre_select_batch", st, ctx);
        todre_status want = !fits ? TODRE_ERR_INVALID_ARGUMENT
                            : !I.finite ? TODRE_ERR_NONFINITE
                                        : TODRE_OK;
        FZ_CHECK(st == want, "todre_select_batch returned %s (%s), expected %s",
                 todre_status_string(st), todre_last_error(), todre_status_string(want));
        if (st != TODRE_OK) {
            FZ_CHECK(fz_tensor_unchanged(&out) && (!with_oo || fz_tensor_unchanged(&oo)),
                     "a failed todre_select_batch wrote its output");
        } else {
            int64_t oacc = 0;
            for (int64_t b = 0; b < B; b++) {
                int64_t nb = off[b + 1] - off[b];
                if (with_oo)
                    FZ_CHECK(out_at(&oo, b) == oacc, "out_offsets[%lld] = %lld, expected %lld",
                             (long long)b, (long long)out_at(&oo, b), (long long)oacc);
                /* the set alone, through views of the same buffers */
                DLTensor ev = I.emb.t, cv;
                int64_t es[2] = {nb, I.d}, cs[1] = {nb};
                ev.shape = es;
                ev.byte_offset += (uint64_t)(off[b] * (I.emb.t.strides ? I.emb.t.strides[0] : I.d)) * isz;
                if (I.have_cls) {
                    cv = I.cls.t;
                    cv.shape = cs;
                    cv.byte_offset += (uint64_t)(off[b] * (I.cls.t.strides ? I.cls.t.strides[0] : 1)) * isz;
                }
                FZ_CHECK(todre_select_config_set_int(cfg, TODRE_SELECT_KEEP, keep[b]) == TODRE_OK, "keep");
                int64_t one[2 * NMAX], sh[2] = {v.order == TODRE_ORDER_BOTH ? 2 : keep[b], keep[b]};
                DLTensor ot = {one, {kDLCPU, 0}, v.order == TODRE_ORDER_BOTH ? 2 : 1, DT_I64, sh, NULL, 0};
                todre_status s1 = todre_select(ctx, cfg, &ev, I.have_cls ? &cv : NULL, &ot);
                FZ_CHECK(s1 == TODRE_OK, "set %lld alone: %s", (long long)b, todre_last_error());
                for (int64_t r = 0; r < (v.order == TODRE_ORDER_BOTH ? 2 : 1); r++)
                    for (int64_t t = 0; t < keep[b]; t++)
                        FZ_CHECK(out_at(&out, r * K + oacc + t) == one[r * keep[b] + t],
                                 "set %lld: the batch differs from todre_select on its rows",
                                 (long long)b);
                /* and that single result against the reference */
                struct fz_tensor single;
                memset(&single, 0, sizeof single);
                single.t = ot;
                single.buf = (unsigned char *)one;
                single.bufsize = sizeof one;
                fz_tensor_classify(&single, INT64_MAX);
                check_output(ctx, cfg, &I, &v, off[b], nb, keep[b], &single, &ev,
                             I.have_cls ? &cv : NULL);
                oacc += keep[b];
            }
            if (with_oo)
                FZ_CHECK(out_at(&oo, B) == oacc, "out_offsets[B] = %lld, expected %lld",
                         (long long)out_at(&oo, B), (long long)oacc);
        }
        fz_tensor_free(&to);
        if (keep_arr) fz_tensor_free(&tk);
        fz_tensor_free(&out);
        if (with_oo) fz_tensor_free(&oo);
    }
    free_input(&I);
    todre_select_config_destroy(cfg);
    todre_context_destroy(ctx);
    return 0;
}
