/* Stage-1 strategy planner: the one place where each token set's strategy is
 * chosen, for every backend (the core decides, backends execute). It reads
 * only what does not depend on the data: each set's n, k, the dimension d,
 * the dtype, the objective and the resolved pivot from the job; the
 * requested strategy and the workspace limit from be->params; what the
 * backend can do and how fast from be->caps. Backends follow the plan.
 *
 * Strategies (src/backend.h):
 *   GEMV  one pass over the set's rows per greedy step: (k - 1) n d reads,
 *         O(n) memory beyond the rows. Every backend has it: the fallback.
 *   GRAM  the n x n fp32 Gram matrix up front: n^2 d / 2 products, n^2 * 4
 *         bytes of workspace.
 *   ROWS  Gram rows made on demand, rows_batch at a time (the selected
 *         token's row plus the rows_batch - 1 untaken tokens with the best
 *         current values), kept in a store of store_rows rows.
 * All three give the same selection up to near-ties (docs/semantics.md).
 *
 * How be->caps is read:
 *   strategies       bitmask of 1u << TODRE_STRATEGY_*: GRAM and ROWS are
 *                    planned only when set. GEMV is assumed whatever it says.
 *   gram_max_n       > 0: no GRAM plan for a set with n above it (a device's
 *                    kernel limit); 0: no such limit.
 *   gemv_bytes_per_ns  GEMV cost = (k - 1) n d esize / rate.
 *   gram_fma_per_ns  GRAM from fp32 rows: n^2 d / 2 / rate; a 16-bit set
 *                    first converts its rows to fp32: + n d (4 + esize) /
 *                    pack_bytes_per_ns.
 *   gram_fast_fma_per_ns  > 0: a unit that multiplies bf16 pairs exactly
 *                    (CPU: AMX) makes the products of 16-bit sets: bf16 as
 *                    is, f16 through the exact split x = h + l (4 bf16
 *                    products per value pair, 4 packed bytes per value;
 *                    bf16: 1 product, 2 bytes). It computes in blocks of
 *                    rows_batch rows, so its Gram matrix is padded to a
 *                    multiple of rows_batch and is used for a GRAM plan only
 *                    when the padded matrix fits the limit (the backend makes
 *                    the same check when choosing its kernel); cost
 *                    n^2 d / 2 * products / rate + 2 n d packed / pack rate.
 *                    0: no such unit; ROWS, when declared, is then made
 *                    by FMA units from rows of any dtype (CPU below AMX):
 *                    batches as below with ROWS_FMA_USED_FRACTION, one
 *                    product per pair at ROWS_FMA_RATE_FACTOR *
 *                    gram_fma_per_ns, + 2 n d esize / pack rate (rows
 *                    packed as stored); the rows of batch i (from 0) are
 *                    made only for the tokens not yet taken (the CPU's
 *                    compaction, src/cpu/select_rows.c), about n - i used
 *                    of them, so the batches cost
 *                    batches * rows_batch * (n - used (batches - 1) / 2) d.
 *   pack_bytes_per_ns  conversion and packing before products (above).
 *   rows_batch       ROWS: rows made per batch (also the fast unit's
 *                    padding); ROWS needs rows_batch > 0 and either the
 *                    fast unit and a dtype it makes rows of
 *                    (rows_fast_dtypes), or no fast unit, or
 *                    rows_fma_batch > 0.
 *   rows_fast_dtypes bitmask of 1u << dtype whose ROWS rows the fast unit
 *                    makes; 0: every dtype it takes. GRAM is unaffected.
 *   rows_fma_batch   > 0: beside a fast unit, FMA units make the rows of
 *                    the dtypes it does not make (CPU with AMX: f32 and
 *                    f16), this many per batch, costed as without a fast
 *                    unit (below);
 *                    the batch size and store for such a set use it in
 *                    place of rows_batch. Rows are made at the fast rate; about
 *                    10 of every 32 rows of a batch are used (measured 10 to
 *                    26 on clustered and Gaussian data, bench/results/,
 *                    taken low), so ROWS costs
 *                    ceil((k - 1) / used) * rows_batch * n d products / rate
 *                    + n d packed / pack rate.
 *   fma_dp_dtypes    bitmask of 1u << dtype whose products the FMA units
 *                    make at twice their rate where d is even (CPU: bf16 by
 *                    VDPBF16PS): ROWS without a fast unit and GRAM costed
 *                    at twice gram_fma_per_ns (the CPU then makes that
 *                    GRAM on the same kernels, src/cpu/select_gram.c).
 *   rows_row_bytes_per_n  ROWS store: a stored row takes this many bytes
 *                    per token of the padded set. The store and one batch's
 *                    output must fit the limit:
 *                    store_rows = min(n, floor(limit / row bytes) - rows_batch),
 *                    and ROWS needs store_rows >= min(n, 2 rows_batch).
 * A rate <= 0 means "not measured": a strategy whose cost needs it is never
 * chosen by AUTO (infinite cost); with no known cost AUTO plans GEMV.
 * Only the ratios of the rates matter.
 *
 * Rules, per set:
 *  1. CLS_TOPK, or k = 1 with any pivot but an ISOLATED one over n > 1
 *     rows: GEMV (no greedy step takes products).
 *  2. ISOLATED pivot (n > 1): every pairwise product is needed for the pivot,
 *     so when GEMV is not requested and GRAM fits: GRAM (the greedy reuses
 *     the matrix); otherwise the rules below.
 *  3. Requested GEMV: GEMV. GRAM: GRAM if it fits, else GEMV. ROWS: ROWS if
 *     a store fits, else GRAM if it fits, else GEMV.
 *  4. AUTO: the cheapest of the costs above among the strategies that fit
 *     (ties keep the earlier of GEMV, GRAM, ROWS). A store smaller than n
 *     may evict rows that are selected later and made again; with the
 *     default limit it holds thousands of rows, far more than the few dozen
 *     a batch leaves unused, so that is not modelled. */
#include <math.h>

#include "core.h"

/* ROWS: rows of a batch that are used, per row made (10 of 32). */
#define ROWS_USED_FRACTION (10.0 / 32.0)
/* ROWS by FMA units (no fast unit): rows used per row made, in batches of
 * 12 (measured about 0.75 on clustered data at k = 288 and 720, taken low),
 * and their rate against gram_fma_per_ns (BLAS ssyrk). On a 2-core Zen 3
 * (bench/results/cpu-zen3-2026-11-23.json), with the packed rows prefetched, ROWS made rows
 * 1.1 to 1.2 times as fast as ssyrk's Gram matrix at n = 2880, d = 4096
 * (k = 720 and 1000, f16 / bf16 / f32): so 1.1. With these, n = 2880 and
 * d = 4096 took ROWS for k in [14, 965] (f16) and [12, 886] (f32), where
 * ROWS measured faster up to k = 1000 and GRAM at k = 1440. Since the rows
 * are made only for untaken tokens (fewer columns as k grows), [14, 1217]
 * and [12, 1095]: on a 2-core Zen 4, f16 ROWS measured 145-156 ms against
 * GRAM's 192-195 at k = 1440, 239-241 against 194-200 at k = 2000. */
#define ROWS_FMA_USED_FRACTION 0.6
#define ROWS_FMA_RATE_FACTOR 1.1

static int has_strategy(const struct todre_backend_caps *caps, int strategy)
{
    return (caps->strategies >> strategy) & 1u;
}

static int is_16bit(todre_dtype dt) { return dt == TODRE_DTYPE_F16 || dt == TODRE_DTYPE_BF16; }

/* n rounded up to a multiple of @p block (> 0), in double (no overflow). */
static double padded(int64_t n, int64_t block)
{
    return block > 0 ? ceil((double)n / (double)block) * (double)block : (double)n;
}

/* work / rate, infinite when the rate is not known. */
static double cost(double work, double rate) { return rate > 0 ? work / rate : INFINITY; }

/* Whether an m x m fp32 matrix has a byte size that fits int64 (and so
 * size_t on 64-bit hosts): the bound a backend relies on when it allocates a
 * planned Gram matrix; the workspace limit (double, as the backends compare
 * it) decides below it. */
static int square_bytes_fit(int64_t m)
{
    int64_t bytes;
    return todre_mul_i64(m, m, &bytes) && todre_mul_i64(bytes, (int64_t)sizeof(float), &bytes) &&
           (uint64_t)bytes <= SIZE_MAX;
}

/* Whether an n x n fp32 Gram matrix may be planned. */
static int gram_fits(const struct todre_backend *be, int64_t n)
{
    const struct todre_backend_caps *c = &be->caps;
    if (!has_strategy(c, TODRE_STRATEGY_GRAM)) return 0;
    if (c->gram_max_n > 0 && n > c->gram_max_n) return 0;
    if (!square_bytes_fit(n)) return 0;
    return (double)n * (double)n * sizeof(float) <= (double)be->params.workspace_limit;
}

/* Whether the fast unit multiplies this dtype. */
static int fast_unit(const struct todre_backend *be, todre_dtype dt)
{
    return be->caps.gram_fast_fma_per_ns > 0 && is_16bit(dt);
}

/* Whether a Gram matrix of this set is made on the fast unit. */
static int gram_fast(const struct todre_backend *be, int64_t n, todre_dtype dt)
{
    double np = padded(n, be->caps.rows_batch);
    return fast_unit(be, dt) && np < 0x1p62 && square_bytes_fit((int64_t)np) &&
           np * np * sizeof(float) <= (double)be->params.workspace_limit;
}

/* Whether the fast unit makes this set's ROWS rows (caps.rows_fast_dtypes). */
static int fast_rows(const struct todre_backend *be, todre_dtype dt)
{
    uint32_t m = be->caps.rows_fast_dtypes;
    return fast_unit(be, dt) && (m == 0 || (m >> (unsigned)dt & 1u));
}

/* Whether ROWS can make this set's rows: on the fast unit, or by FMA units
 * at gram_fma_per_ns (src/cpu/select_rows.h): from rows of any dtype on a
 * backend that declares ROWS without a fast unit (CPU below AMX), and from
 * the dtypes the fast unit does not take where rows_fma_batch says so (CPU
 * with AMX: f32). */
static int rows_unit(const struct todre_backend *be, todre_dtype dt)
{
    return fast_rows(be, dt) || be->caps.gram_fast_fma_per_ns <= 0 || be->caps.rows_fma_batch > 0;
}

/* Rows per ROWS batch for this dtype: the fast unit's rows_batch, else the
 * FMA units' rows_fma_batch where declared, else rows_batch. */
static int64_t rows_batch(const struct todre_backend *be, todre_dtype dt)
{
    const struct todre_backend_caps *c = &be->caps;
    return fast_rows(be, dt) || c->rows_fma_batch <= 0 ? c->rows_batch : c->rows_fma_batch;
}

/* Rows the ROWS store holds within the limit (the batch output counts too),
 * at most n; 0 when ROWS cannot be planned. Each row is used at most once,
 * so the store needs only the rows made and not yet used: at least 2
 * batches (or n) suffice, evicting unused speculative rows. */
static int64_t rows_store(const struct todre_backend *be, int64_t n, todre_dtype dt)
{
    const struct todre_backend_caps *c = &be->caps;
    const int64_t batch = rows_batch(be, dt);
    if (!has_strategy(c, TODRE_STRATEGY_ROWS) || !rows_unit(be, dt) || batch <= 0 ||
        c->rows_row_bytes_per_n <= 0 || n > INT32_MAX)
        return 0;
    double row = padded(n, batch) * (double)c->rows_row_bytes_per_n;
    double fit = floor((double)be->params.workspace_limit / row) - (double)batch;
    int64_t need = n < 2 * batch ? n : 2 * batch;
    if (fit < (double)need) return 0;
    return fit < (double)n ? (int64_t)fit : n;
}

/* Rule 4: the cost model. */
static int32_t cheapest(const struct todre_backend *be, int64_t n_, int64_t k_, int64_t d_,
                        todre_dtype dt, int fits, int64_t store)
{
    const struct todre_backend_caps *c = &be->caps;
    double n = (double)n_, d = (double)d_, esz = (double)todre_dtype_size(dt);
    double best = cost((double)(k_ - 1) * n * d * esz, c->gemv_bytes_per_ns);
    int32_t plan = TODRE_STRATEGY_GEMV;
    /* the fast unit: f16 through the exact split, four bf16 products per
     * value pair and 4 packed bytes per value and side; bf16: one, 2 bytes */
    double f16 = dt == TODRE_DTYPE_F16, prod = f16 ? 4 : 1, pack = f16 ? 4 : 2;
    /* FMA units at two products an instruction (fma_dp_dtypes) */
    double dp = (c->fma_dp_dtypes >> (unsigned)dt & 1u) && d_ % 2 == 0 ? 2.0 : 1.0;
    if (fits) {
        double gram;
        if (gram_fast(be, n_, dt)) {
            gram = cost(n * n * d / 2 * prod, c->gram_fast_fma_per_ns) +
                   cost(2 * n * d * pack, c->pack_bytes_per_ns);
        } else {
            gram = cost(n * n * d / 2, c->gram_fma_per_ns * dp);
            if (dt != TODRE_DTYPE_F32) gram += cost(n * d * (4 + esz), c->pack_bytes_per_ns);
        }
        if (gram < best) best = gram, plan = TODRE_STRATEGY_GRAM;
    }
    if (store) {
        double batch = (double)rows_batch(be, dt);
        double used = batch * (fast_rows(be, dt) ? ROWS_USED_FRACTION : ROWS_FMA_USED_FRACTION);
        double batches = ceil((double)(k_ - 1) / used);
        /* FMA units: batch i meets about n - i used tokens untaken, the
         * columns its rows are made for (the taken ones are dropped) */
        double cols = n - used * (batches - 1) / 2;
        double rows = fast_rows(be, dt)
            ? cost(batches * batch * n * d * prod, c->gram_fast_fma_per_ns) +
                  cost(n * d * pack, c->pack_bytes_per_ns)
            /* FMA units: one product per pair, rows packed as stored */
            : cost(batches * batch * cols * d, c->gram_fma_per_ns * ROWS_FMA_RATE_FACTOR * dp) +
                  cost(2 * n * d * esz, c->pack_bytes_per_ns);
        if (rows < best) plan = TODRE_STRATEGY_ROWS;
    }
    return plan;
}

static struct todre_select_plan plan_set(const struct todre_backend *be,
                                         const struct todre_select_job *job, int64_t n,
                                         int64_t k)
{
    struct todre_select_plan p = {TODRE_STRATEGY_GEMV, 0, 0};
    int64_t req = be->params.strategy;
    if (job->objective == TODRE_OBJECTIVE_CLS_TOPK) return p;
    int fits = gram_fits(be, n);
    /* rule 2 */
    if (job->pivot == TODRE_PIVOT_ISOLATED && n > 1 && req != TODRE_STRATEGY_GEMV && fits) {
        p.strategy = TODRE_STRATEGY_GRAM;
        return p;
    }
    if (k <= 1 || req == TODRE_STRATEGY_GEMV) return p; /* rules 1, 3 */
    int64_t store = rows_store(be, n, job->emb_dtype);
    if (req == TODRE_STRATEGY_GRAM) {
        p.strategy = fits ? TODRE_STRATEGY_GRAM : TODRE_STRATEGY_GEMV;
    } else if (req == TODRE_STRATEGY_ROWS) {
        p.strategy = store ? TODRE_STRATEGY_ROWS
                   : fits  ? TODRE_STRATEGY_GRAM
                           : TODRE_STRATEGY_GEMV;
    } else {
        p.strategy = cheapest(be, n, k, job->d, job->emb_dtype, fits, store);
    }
    if (p.strategy == TODRE_STRATEGY_ROWS) p.store_rows = store;
    return p;
}

void todre_select_plan_sets(const struct todre_backend *be, const struct todre_select_job *job,
                            struct todre_select_plan *plans)
{
    for (int64_t b = 0; b < job->nseg; b++)
        plans[b] = plan_set(be, job, job->seg_offsets[b + 1] - job->seg_offsets[b], job->seg_k[b]);
}
