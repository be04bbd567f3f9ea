/* Stage-2 sums from attention probabilities (CPU).
 *
 * For every active sequence and head, each query row is read once: its total
 * (the denominator term) and its mass on keys of the "other" type (visual
 * keys for a text query, text keys for a visual query) are summed run by run
 * over the sequence's maximal runs of equal token type, so every element is
 * added once and contiguous rows vectorise. All K columns of a row count, as
 * the formula sums over every key; causal inputs hold zeros past the query.
 *
 * Determinism: each head's partial sums are computed serially by one thread
 * and added in head order afterwards, so the result does not depend on the
 * thread count or scheduling. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_internal.h"
#include "relevance_util.h"

struct type_run {
    int64_t start, end;
    uint8_t type;
};

struct probs_head_result {
    double s[TODRE_NUM_SUMS];
    int64_t bad_row; /* -1, or the first query row holding NaN/Inf */
};

static int64_t build_runs(const uint8_t *types, int64_t K, struct type_run *runs)
{
    int64_t n = 0;
    for (int64_t j = 0; j < K; j++) {
        if (n > 0 && runs[n - 1].type == types[j]) {
            runs[n - 1].end = j + 1;
        } else {
            runs[n].start = j;
            runs[n].end = j + 1;
            runs[n].type = types[j];
            n++;
        }
    }
    return n;
}

static uint8_t other_type(uint8_t t)
{
    return t == TODRE_TOKEN_TEXT ? TODRE_TOKEN_VISUAL : TODRE_TOKEN_TEXT;
}

/* A row as float: the input itself when it already is contiguous f32. */
static const float *row_as_f32(const struct todre_relevance_probs_job *job, const void *row,
                               float *buf)
{
    if (job->dtype == TODRE_DTYPE_F32 && job->s_k == 1) return row;
    todre_rel_load(buf, row, job->dtype, job->s_k, job->c.K);
    return buf;
}

static void probs_head(const struct todre_relevance_probs_job *job, int64_t b, int64_t h,
                       const struct type_run *runs, int64_t nruns, float *buf,
                       struct probs_head_result *res)
{
    const int64_t Q = job->c.Q, K = job->c.K;
    const uint8_t *types = job->c.types + b * K;
    for (int k = 0; k < TODRE_NUM_SUMS; k++) res->s[k] = 0.0;
    res->bad_row = -1;
    for (int64_t i = 0; i < Q; i++) {
        const void *row = todre_rel_at(job->attn, job->dtype, b * job->s_b + h * job->s_h + i * job->s_q);
        const float *a = row_as_f32(job, row, buf);
        /* System rows are read only for this check: NaN anywhere is an error. */
        if (!todre_rel_finite(a, TODRE_DTYPE_F32, 1, K)) {
            res->bad_row = i;
            return;
        }
        uint8_t t = types[K - Q + i];
        if (t == TODRE_TOKEN_SYSTEM) continue;
        uint8_t other = other_type(t);
        double total = 0.0, cross = 0.0;
        for (int64_t r = 0; r < nruns; r++) {
            double s = todre_rel_sum(a + runs[r].start, runs[r].end - runs[r].start);
            total += s;
            if (runs[r].type == other) cross += s;
        }
        int base = t == TODRE_TOKEN_TEXT ? TODRE_SUM_T2V_NUM : TODRE_SUM_V2T_NUM;
        res->s[base] += cross;
        res->s[base + 1] += total;
    }
}

/* Workspace: the runs of one sequence, one float row per thread (only used
 * for non-contiguous or 16-bit input), and one result per head. */
struct probs_ws {
    struct type_run *runs;
    float *rows;
    struct probs_head_result *heads;
    size_t row_stride; /* floats, rounded to 64 bytes */
};

static int probs_ws_get(struct todre_cpu_backend *be, const struct todre_relevance_probs_job *job,
                        int nt, struct probs_ws *ws)
{
    size_t K = (size_t)job->c.K, H = (size_t)job->c.H;
    size_t runs_bytes = (K * sizeof(struct type_run) + 63u) & ~(size_t)63u;
    ws->row_stride = (K + 15u) & ~(size_t)15u;
    size_t rows_bytes = (size_t)nt * ws->row_stride * sizeof(float);
    size_t heads_bytes = H * sizeof(struct probs_head_result);
    char *p = todre_cpu_workspace(be, TODRE_CPU_WS_RELEVANCE, runs_bytes + rows_bytes + heads_bytes);
    if (!p) return 0;
    ws->runs = (struct type_run *)p;
    ws->rows = (float *)(p + runs_bytes);
    ws->heads = (struct probs_head_result *)(p + runs_bytes + rows_bytes);
    return 1;
}

todre_status todre_cpu_relevance_probs(struct todre_backend *base,
                                       const struct todre_relevance_probs_job *job,
                                       struct todre_diag *diag)
{
    struct todre_cpu_backend *be = (struct todre_cpu_backend *)base;
    const struct todre_relevance_common *c = &job->c;
    int nt = todre_cpu_threads(be);
    struct probs_ws ws;
    if (!probs_ws_get(be, job, nt, &ws))
        return todre_diag_set(diag, TODRE_ERR_OUT_OF_MEMORY,
                    "cannot allocate the probability-path workspace (K = %lld, H = %lld, "
                    "%d threads)", (long long)c->K, (long long)c->H, nt);
    for (int64_t b = 0; b < c->B; b++) {
        if (!c->active[b]) continue;
        int64_t nruns = build_runs(c->types + b * c->K, c->K, ws.runs);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1 && c->H > 1)
        for (int64_t h = 0; h < c->H; h++) {
#ifdef _OPENMP
            int tid = omp_get_thread_num();
#else
            int tid = 0;
#endif
            probs_head(job, b, h, ws.runs, nruns, ws.rows + (size_t)tid * ws.row_stride,
                       &ws.heads[h]);
        }
        for (int64_t h = 0; h < c->H; h++)
            if (ws.heads[h].bad_row >= 0)
                return todre_diag_set(diag, TODRE_ERR_NONFINITE,
                            "attn: NaN or Inf in sequence %lld, head %lld, query row %lld",
                            (long long)b, (long long)h, (long long)ws.heads[h].bad_row);
        for (int64_t h = 0; h < c->H; h++)
            for (int k = 0; k < TODRE_NUM_SUMS; k++) c->sums[TODRE_NUM_SUMS * b + k] += ws.heads[h].s[k];
    }
    return TODRE_OK;
}
