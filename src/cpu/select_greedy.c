/* Greedy MAX_SUM (ToDRE) and MAX_MIN (DivPrune) from a pivot.
 *
 * Both keep one fp64 value per token, updated with s(v, c) of each newly
 * selected token c, with the strategy the core's planner chose for the set
 * (src/select_plan.c): one matrix-vector product over the n rows per step
 * (GEMV: the rows are read in place, f16 / bf16 included), or one row of a
 * Gram matrix made up front (GRAM), or one row made on demand (ROWS, by
 * AMX or the FMA kernels): when the row of the new c is not there yet, the
 * rows of c and of the 31 (AMX) or 11 (FMA) untaken tokens most likely to
 * come next are made together. AMX makes rows in blocks of 32 anyway and
 * takes the best current values (on clustered or Gaussian data 10 to 26 of
 * the 32 are used); the FMA kernels run the greedy ahead on exact values of
 * a few candidates (next_batch, below: about 11 of 12 used on clustered
 * data, 9 on Gaussian rows, where the best current values gave 9 and 6).
 * Any row is the same, whichever batch makes it, so the speculation changes
 * only the time, never the selection. A row is used once, so ROWS keeps only
 * rows made and not yet used, in a store the planner sized by the workspace
 * limit (any n): a full store evicts the speculative rows least likely to be used, and
 * an evicted row is made again if its token is selected. The per-row products
 * are independent and the arg-min / arg-max is a serial scan, so the result
 * does not depend on the thread count. */
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include <omp.h>

#include "select_internal.h"

/* acc[v] <- acc[v] + s(v, c) (MAX_SUM) or min(acc[v], 1 - s(v, c)) (MAX_MIN)
 * for every untaken v. A NaN similarity cannot come from accepted input
 * (non-finite rows are refused, rows whose raw products would leave the
 * fp32 range are read normalised: select.c), but if one did it would stay
 * in the value (a sum with NaN is NaN; the min keeps it too) rather than be
 * dropped, and todre_sel_argbest takes NaN values last: the CUDA module's
 * rule (docs/cuda.md). A min that skipped it would leave D_v = +inf and take
 * a row with no valid similarity first. */
static inline void fold(double *acc, int64_t v, double sim, int maxmin)
{
    if (maxmin) {
        double dist = 1.0 - sim;
        if (dist < acc[v] || dist != dist) acc[v] = dist;
    } else {
        acc[v] += sim;
    }
}

/* out[v] <- s->acc[v] moved on by s(v, c), for every untaken v, from one
 * matrix-vector product over the set's rows: the GEMV step (out = s->acc),
 * or the first batch's estimate (first_values); or, with dots, from the raw
 * dot products with c already made (dots may be out: each is read before
 * its place is written). */
static void gemv_fold(struct todre_sel_seg *s, int64_t c, int maxmin, double *out,
                      const double *dots)
{
    if (!dots) /* exact: the stored values */
        s->kern->widen(todre_sel_row(s->rows, s->dtype, s->stride, c), s->d, 1.0f, s->w);
    double sc = s->scale[c];
    /* dynamic: a core busy with another process then does less of the step */
#pragma omp parallel for num_threads(s->nthreads) schedule(dynamic, 64)
    for (int64_t v = 0; v < s->n; v++) {
        if (s->taken[v]) continue;
        double dot = dots ? dots[v]
                          : (double)s->kern->dot(todre_sel_row(s->rows, s->dtype, s->stride, v),
                                                 s->w, s->d);
        if (out != s->acc) out[v] = s->acc[v];
        fold(out, v, dot * (s->scale[v] * sc), maxmin);
    }
}

/* s(c, v) from row c of the raw dots, g[v] = dot(e_c, e_v) (BLAS, AMX or the
 * FMA kernels), sc = r_c: read through each row's first copy (s->rep), so
 * that copies get the same value whatever their place in the kernel's
 * blocks (select_copies.c). */
static inline double row_sim(const struct todre_sel_seg *s, const float *g, int64_t v, double sc)
{
    return (double)g[s->rep ? s->rep[v] : v] * (s->scale[v] * sc);
}

/* The update from row c (row_sim). Returns the next token,
 * todre_sel_argbest of the updated values, found in the same pass (a
 * second pass over the n values took 4 % of a call at n = 2880, k = 288).
 * Without copies, the level's vector kernel (todre_sel_update_fn: bitwise
 * this loop; one value at a time it took 2 % of a call, on one thread while
 * the others waited); its -1 (no value below +inf) leaves the choice to
 * todre_sel_argbest. */
static int64_t update_row(struct todre_sel_seg *s, const float *g, int64_t c, int maxmin,
                          int sign)
{
    const double sc = s->scale[c];
    if (!s->rep) {
        int64_t next = s->kern->update(s->acc, s->taken, g, s->scale, sc, s->n, maxmin, sign);
        return next >= 0 ? next : todre_sel_argbest(s->acc, s->taken, s->n, sign);
    }
    const uint8_t *taken = s->taken;
    double *acc = s->acc;
    int64_t best = -1;
    double bv = 0;
    for (int64_t v = 0; v < s->n; v++) {
        if (taken[v]) continue;
        fold(acc, v, row_sim(s, g, v, sc), maxmin);
        double x = sign * acc[v];
        if (todre_sel_better(x, bv, best)) {
            best = v;
            bv = x;
        }
    }
    return best;
}

/* The speculative rows of a batch on the FMA kernels: the greedy run ahead
 * on a few exact values. The candidates are the LOOKAHEAD untaken tokens
 * other than c with the best current values; the greedy's next steps take
 * almost only from them. Their values are moved on by c's similarities with
 * them, then by those of each simulated pick in turn (from the pick's
 * stored row where it has one, else as a "mini-row": LOOKAHEAD dot products
 * of d, about 2 % of a batch row's n), and each pick without a row joins the
 * batch. Within the candidates the simulation follows the greedy exactly;
 * it misses only where a token outside them, or a near-tie rounded the
 * other way, comes next. bench/speculation_sim.py models it: rows made per
 * step at n = 2880, k = 288, batches of 12, 1.34 -> 1.06 on clustered rows
 * (26 batches instead of 32) and 1.94 -> 1.32 on Gaussian ones (48
 * candidates: 1.09 and 1.50; 32: 1.20 and 1.69). AMX keeps the best
 * current values: its batches of 32 rows gain little from the lookahead
 * (2.06 -> 1.85 rows per step on clustered rows, none on Gaussian ones)
 * for up to 31 mini-rows each, and a first version measured bf16 rows on
 * AMX 1.15x slower with it. */
#define LOOKAHEAD 64

/* Whether (x, v) ranks after (y, u): the worse value, ties to the higher
 * index, NaN after every number (todre_sel_better's order). */
static inline int worse(double x, int64_t v, double y, int64_t u)
{
    if (x != x || y != y) return y == y || (x != x && v > u);
    return x > y || (x == y && v > u);
}

/* Up to m untaken tokens other than those in skip[0..ns) whose row is not
 * made (no_row) or any (all), with the best sign * vals[v] (vals: s->acc,
 * or first_values' estimate), into ids[] (a heap, the worst first: a
 * batch's order does not matter, todre_sel_store_place). Returns how many. */
static int best_values(const struct todre_sel_seg *s, const struct todre_sel_rows *r, int sign,
                       const double *vals, const int64_t *skip, int ns, int no_row, int m,
                       int64_t *ids, double *val)
{
    int h = 0;
    for (int64_t v = 0; v < s->n; v++) {
        if (s->taken[v] || (no_row && r->slot[v] >= 0)) continue;
        double x = sign * vals[v];
        if (h == m && !worse(val[0], ids[0], x, v)) continue; /* no better than the worst */
        int in = 0;
        for (int i = 0; i < ns && !in; i++) in = skip[i] == v;
        if (in) continue;
        int i;
        if (h < m) { /* sift up */
            for (i = h++; i > 0 && worse(x, v, val[(i - 1) / 2], ids[(i - 1) / 2]); i = (i - 1) / 2) {
                val[i] = val[(i - 1) / 2];
                ids[i] = ids[(i - 1) / 2];
            }
        } else { /* replace the worst, sift down */
            for (i = 0;;) {
                int l = 2 * i + 1, w = l;
                if (l >= h) break;
                if (l + 1 < h && worse(val[l + 1], ids[l + 1], val[l], ids[l])) w = l + 1;
                if (!worse(val[w], ids[w], x, v)) break;
                val[i] = val[w];
                ids[i] = ids[w];
                i = w;
            }
        }
        val[i] = x;
        ids[i] = v;
    }
    return h;
}

/* ---- the lookahead's mini-rows on several threads --------------------------
 *
 * A mini-row is up to LOOKAHEAD dot products of d (dot4: four at a time),
 * a run of up to 11 of them per batch, each needing the one before: about
 * 5 ms of a 44 ms call at n = 2880, d = 4096, k = 288 (f16), during which
 * the other threads had nothing to do. Spread over the threads with OpenMP
 * barriers it took three barriers per pick, about 900 a call; on an
 * oversubscribed machine (more runnable threads than cores) every barrier
 * waits for a thread the scheduler has parked, and a call took 50x longer
 * than alone (docs/performance.md, "Threads"). So the team shares
 * the work without barriers. The candidates' groups of 4 are split in
 * fixed parts, one per thread (a thread's candidate rows stay in its own
 * L2 from one pick to the next). The lookahead's thread (the master)
 * publishes each mini-row as a job: every helper's span of groups, then
 * one atomic word with the job's number and the pick. A helper widens the
 * pick's row into its own buffer and claims its span's groups from the
 * front, one compare-and-swap each, marking each group done; the master
 * computes its own part, then takes the helpers' unclaimed groups from the
 * back of their spans, then each claimed group once marked done for this
 * job, waiting for it a little (a group takes about a microsecond) and
 * otherwise computing it itself. So a helper the scheduler has parked
 * costs a mini-row at most one short wait, never a timeslice (the
 * lookahead's region still ends with the team: see lookahead() for how a
 * set stops using helpers that fall behind). dot4 gives the
 * same bits on any thread, a result is read only under its job's number,
 * and only the speculation depends on the mini-rows, never the selection. */
#define LA_THREADS TODRE_SEL_LOOKAHEAD_THREADS
#define LA_GROUPS (LOOKAHEAD / 4)
#define JOB(gen, u) ((uint64_t)(gen) << 40 | (uint64_t)(u))
#define JOB_GEN(j) ((uint32_t)((j) >> 40))
#define JOB_U(j) ((int64_t)((j) & (((uint64_t)1 << 40) - 1)))
#define SPAN(gen, next, end) ((uint64_t)(gen) << 32 | (uint64_t)(next) << 16 | (uint64_t)(end))
#define SPAN_GEN(s) ((uint32_t)((s) >> 32))
#define SPAN_NEXT(s) ((int)(((s) >> 16) & 0xffffu))
#define SPAN_END(s) ((int)((s) & 0xffffu))
#define JOB_STOP 0u /* gen 0 */
#define JOB_IDLE 1u /* gen 1: no mini-row yet */

/* Ticks the master waits for a claimed group before computing it itself:
 * about 5 us (a group of 4 dot products takes about 1). */
#define LA_WAIT_TICKS 10000u
/* Ticks a helper spins without work before it yields its core once (to a
 * thread the scheduler parked, ours or another process's): about 8 us. */
#define LA_YIELD_TICKS 20000u

struct la_team {
    _Alignas(64) _Atomic uint64_t job;
    _Alignas(64) _Atomic uint32_t done[LA_GROUPS]; /* job number of each group's result */
    struct {
        _Alignas(64) _Atomic uint64_t span; /* SPAN(job, next to claim, end) */
    } part[LA_THREADS];
    _Alignas(64) float res[LOOKAHEAD]; /* the helpers' raw dots, by candidate */
    const int64_t *cand;
    int ngroups, nt; /* whole groups of 4 candidates; threads */
    int64_t shared, helped; /* groups in the helpers' parts; those they made */
};

/* A clock for short waits: the time-stamp counter on x86 (about 2-4 ticks
 * a nanosecond), else a count of calls. */
static inline uint64_t la_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    static _Thread_local uint64_t n;
    return n += 64;
#endif
}

static inline void la_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Thread t's part: groups [*g0, *g1). */
static inline void la_part(const struct la_team *T, int t, int *g0, int *g1)
{
    *g0 = T->ngroups * t / T->nt;
    *g1 = T->ngroups * (t + 1) / T->nt;
}

/* Whether group g holds a candidate not yet picked (whose dot is used). */
static inline int la_needed(const uint8_t *picked, int g)
{
    return !(picked[4 * g] & picked[4 * g + 1] & picked[4 * g + 2] & picked[4 * g + 3]);
}

/* The raw dots of candidate group g with w into out[0..4). */
static inline void la_group(const struct todre_sel_seg *s, const int64_t *cand, int g,
                            const float *w, float *out)
{
    const void *x[4];
    for (int q = 0; q < 4; q++) x[q] = todre_sel_row(s->rows, s->dtype, s->stride, cand[4 * g + q]);
    s->kern->dot4(x, w, s->d, out);
}

/* Claim the front (front != 0) or back group of a span under job gen:
 * returns it, or -1 when the span is empty or of another job. */
static int la_claim(_Atomic uint64_t *span, uint32_t gen, int front)
{
    uint64_t v = atomic_load_explicit(span, memory_order_acquire);
    for (;;) {
        int next = SPAN_NEXT(v), end = SPAN_END(v);
        if (SPAN_GEN(v) != gen || next >= end) return -1;
        uint64_t w = front ? SPAN(gen, next + 1, end) : SPAN(gen, next, end - 1);
        if (atomic_compare_exchange_weak_explicit(span, &v, w, memory_order_acq_rel,
                                                  memory_order_acquire))
            return front ? next : end - 1;
    }
}

/* A helper: claims and computes its span's groups of every job until
 * JOB_STOP. */
static void la_help(const struct todre_sel_seg *s, struct la_team *T, int tid)
{
    float *w = s->w + (size_t)tid * (size_t)s->d; /* this thread's widened pick */
    uint32_t last = JOB_IDLE;
    uint64_t since = la_ticks();
    for (;;) {
        uint64_t j = atomic_load_explicit(&T->job, memory_order_acquire);
        uint32_t gen = JOB_GEN(j);
        if (gen == JOB_STOP) return;
        if (gen == last) {
            la_pause();
            if (la_ticks() - since > LA_YIELD_TICKS) {
                sched_yield();
                since = la_ticks();
            }
            continue;
        }
        last = gen;
        s->kern->widen(todre_sel_row(s->rows, s->dtype, s->stride, JOB_U(j)), s->d, 1.0f, w);
        for (int g; (g = la_claim(&T->part[tid].span, gen, 1)) >= 0;) {
            la_group(s, T->cand, g, w, T->res + 4 * g);
            atomic_store_explicit(&T->done[g], gen, memory_order_release);
        }
        since = la_ticks();
    }
}

/* The mini-row of u (widened into s->w) over the candidates cand[0..nc):
 * raw dots into dot[] for every group with an unpicked candidate (picked
 * candidates' too in such groups and in the helpers' groups), with the
 * team's help when T is given (job number gen). */
static void mini_row(const struct todre_sel_seg *s, const int64_t *cand, int nc,
                     const uint8_t *picked, int64_t u, struct la_team *T, uint32_t gen,
                     float *dot)
{
    int g0 = 0, g1 = nc / 4;
    if (T) {
        for (int t = 1; t < T->nt; t++) {
            int h0, h1;
            la_part(T, t, &h0, &h1);
            atomic_store_explicit(&T->part[t].span, SPAN(gen, h0, h1), memory_order_relaxed);
        }
        atomic_store_explicit(&T->job, JOB(gen, u), memory_order_release);
        la_part(T, 0, &g0, &g1);
    }
    for (int g = g0; g < g1; g++)
        if (la_needed(picked, g)) la_group(s, cand, g, s->w, dot + 4 * g);
    for (int t = 1; T && t < T->nt; t++) {
        int h0, h1, g;
        la_part(T, t, &h0, &h1);
        T->shared += h1 - h0;
        /* what the helper has not claimed, from the back */
        while ((g = la_claim(&T->part[t].span, gen, 0)) >= 0) {
            if (la_needed(picked, g)) la_group(s, cand, g, s->w, dot + 4 * g);
            h1 = g; /* groups [h1, ...) are done here */
        }
        for (g = h0; g < h1; g++) { /* claimed by the helper */
            uint32_t dn = atomic_load_explicit(&T->done[g], memory_order_acquire);
            for (uint64_t t0 = la_ticks(); dn != gen && la_ticks() - t0 < LA_WAIT_TICKS;) {
                la_pause();
                dn = atomic_load_explicit(&T->done[g], memory_order_acquire);
            }
            if (dn == gen) {
                for (int q = 0; q < 4; q++) dot[4 * g + q] = T->res[4 * g + q];
                T->helped++;
                continue;
            }
            if (la_needed(picked, g)) la_group(s, cand, g, s->w, dot + 4 * g); /* made here */
        }
    }
    for (int i = nc / 4 * 4; i < nc; i++)
        if (!picked[i])
            dot[i] = s->kern->dot(todre_sel_row(s->rows, s->dtype, s->stride, cand[i]), s->w, s->d);
}

/* The lookahead from c over the nc candidates cand[] (values val[], raw):
 * appends to ids[1..] up to cap picks that have no row; returns how many.
 * With T, the mini-rows are shared with the team (above). */
static int simulate(struct todre_sel_seg *s, const struct todre_sel_rows *r, int64_t c,
                    int maxmin, int sign, const int64_t *cand, double *val, int nc, int cap,
                    int64_t *ids, struct la_team *T)
{
    double sim[LOOKAHEAD];
    float dot[LOOKAHEAD];
    uint8_t picked[LOOKAHEAD] = {0};
    int m = 0;
    uint32_t gen = JOB_IDLE;
    int64_t u = c;
    for (;;) {
        const double su = s->scale[u];
        if (r->slot[u] >= 0) {
            const float *g = r->g + r->slot[u] * r->ld;
            for (int i = 0; i < nc; i++)
                if (!picked[i]) sim[i] = row_sim(s, g, cand[i], su);
        } else {
            s->kern->widen(todre_sel_row(s->rows, s->dtype, s->stride, u), s->d, 1.0f, s->w);
            mini_row(s, cand, nc, picked, u, T, ++gen, dot);
            for (int i = 0; i < nc; i++)
                if (!picked[i]) sim[i] = (double)dot[i] * (s->scale[cand[i]] * su);
        }
        int best = -1;
        double bv = 0;
        for (int i = 0; i < nc; i++) {
            if (picked[i]) continue;
            fold(val, i, sim[i], maxmin);
            double x = sign * val[i];
            if (todre_sel_better(x, bv, best)) best = i, bv = x;
        }
        if (best < 0) break;
        picked[best] = 1;
        u = cand[best];
        if (r->slot[u] < 0) {
            ids[1 + m++] = u;
            if (m == cap) break;
        }
    }
    return m;
}

/* simulate, on the set's threads (up to LA_THREADS) while *team: the set
 * has more than one thread, and its helpers have made at least half of
 * their parts in every lookahead so far. Where they fall behind (other
 * processes hold the cores: the master then makes their groups, and the
 * region's end waits for a parked helper), the rest of the set's
 * lookaheads run on the master alone: measured with 4 processes of
 * `bench_select 2880 4096 288 f16 auto 3 2` at once on a 2-core Emerald
 * Rapids, the team without this rule took 1.3x as long as the serial
 * lookahead. */
static int lookahead(struct todre_sel_seg *s, const struct todre_sel_rows *r, int64_t c,
                     int maxmin, int sign, const int64_t *cand, double *val, int nc, int cap,
                     int64_t *ids, int *team)
{
    const int nt = s->nthreads < LA_THREADS ? s->nthreads : LA_THREADS;
    if (!*team || nt < 2 || nc < 16)
        return simulate(s, r, c, maxmin, sign, cand, val, nc, cap, ids, NULL);
    struct la_team T;
    T.cand = cand;
    T.ngroups = nc / 4;
    T.nt = nt;
    T.shared = T.helped = 0;
    for (int g = 0; g < LA_GROUPS; g++) atomic_init(&T.done[g], JOB_IDLE);
    for (int i = 0; i < LA_THREADS; i++) atomic_init(&T.part[i].span, SPAN(JOB_IDLE, 0, 0));
    atomic_init(&T.job, JOB(JOB_IDLE, 0));
    int m = 0;
#pragma omp parallel num_threads(nt)
    {
        if (omp_get_thread_num() == 0) {
            m = simulate(s, r, c, maxmin, sign, cand, val, nc, cap, ids, &T);
            atomic_store_explicit(&T.job, JOB(JOB_STOP, 0), memory_order_release);
        } else {
            la_help(s, &T, omp_get_thread_num());
        }
    }
    if (2 * T.helped < T.shared) *team = 0;
    return m;
}

/* The values after the first step's update, estimated, into s->near
 * (free once the pivot is chosen): before it every value is the same, and
 * the lookahead's candidates would be the lowest indices. From dot
 * products of the stored rows with c's: the packing's where it made them
 * (s->near_dots == c: select.c, pack_ahead), else the GEMV step's pass
 * (1.25-1.9 ms of a 40-65 ms call at n = 2880, d = 4096, 2 threads,
 * re-reading the rows from memory); not the batch kernel's bits, and only
 * the batch's choice depends on them. Measured by `bench_select 2880 4096
 * 288 f16` (FMA kernels; it prints the rows made): the first batch of 12
 * makes 9 used rows instead of 3, 294 rows in all instead of 303. Not for
 * AMX, whose batches of 32 cost about what the pass does (measured 6 %
 * slower at n = 576, k = 64, where the FMA kernels gain 5-12 %). */
static const double *first_values(struct todre_sel_seg *s, int64_t c, int maxmin)
{
    /* taken rows are skipped by best_values */
    gemv_fold(s, c, maxmin, s->near, s->near_dots == c ? s->near : NULL);
    s->near_dots = -1;
    return s->near;
}

/* The batch for c, which has no row: c, then up to min(rows_batch - 1,
 * left) tokens without a row, from the lookahead (FMA kernels; the first
 * batch's candidates from first_values' estimate) and then the best
 * current values (ties: lowest index). `left` are the steps after c's that
 * still take a row: the last step's token needs none, so a batch made near
 * the end speculates only on what can still be used. */
static void next_batch(struct todre_sel_seg *s, struct todre_sel_rows *r, int64_t c, int maxmin,
                       int sign, int64_t left, int first, int *team)
{
    int64_t ids[TODRE_SEL_AMX_BATCH], cand[LOOKAHEAD];
    double val[LOOKAHEAD];
    /* <= TODRE_SEL_AMX_BATCH - 1 (follow_plan) */
    const int cap = left < s->rows_batch - 1 ? (int)left : s->rows_batch - 1;
    const double *vals = first && cap > 0 && !s->rows_amx ? first_values(s, c, maxmin) : s->acc;
    int m = 0;
    ids[0] = c;
    if (cap > 0 && !s->rows_amx) {
        int nc = best_values(s, r, sign, vals, &c, 1, 0, LOOKAHEAD, cand, val);
        for (int i = 0; i < nc; i++) val[i] = s->acc[cand[i]];
        if (nc > 0) m = lookahead(s, r, c, maxmin, sign, cand, val, nc, cap, ids, team);
    }
    if (m < cap) /* the places left: the best values without a row */
        m += best_values(s, r, sign, vals, ids, m + 1, 1, cap - m, ids + m + 1, val);
    todre_sel_rows_batch(s, r, ids, m + 1, sign);
}

todre_status todre_sel_greedy(struct todre_sel_seg *s, int64_t p, const float *gram,
                              int64_t *sel, struct todre_diag *diag)
{
    int maxmin = s->job->objective == TODRE_OBJECTIVE_MAX_MIN, sign = maxmin ? -1 : +1;
    todre_status st = TODRE_OK;
    int32_t plan = s->plan->strategy;
    struct todre_sel_rows rows;
    int team = 1; /* the lookahead's mini-rows on the set's threads (lookahead) */
    /* k = 1 takes no step: no products to prepare */
    if (s->k > 1 && plan == TODRE_STRATEGY_GRAM && !gram) gram = todre_sel_gram(s, &st, diag);
    if (s->k > 1 && plan == TODRE_STRATEGY_ROWS) st = todre_sel_rows_init(s, &rows, diag);
    if (st != TODRE_OK) return st;
    for (int64_t v = 0; v < s->n; v++) s->acc[v] = maxmin ? INFINITY : 0.0;
    int64_t c = p;
    for (int64_t t = 0;; t++) {
        sel[t] = c;
        s->taken[c] = 1;
        if (t + 1 == s->k) break;
        if (plan == TODRE_STRATEGY_ROWS) {
            /* steps t + 1 .. k - 2 need rows after this one */
            if (rows.slot[c] < 0) next_batch(s, &rows, c, maxmin, sign, s->k - 2 - t, t == 0, &team);
            int64_t next = update_row(s, rows.g + rows.slot[c] * rows.ld, c, maxmin, sign);
            todre_sel_rows_drop(&rows, c);
            c = next;
        } else if (gram) {
            c = update_row(s, gram + c * s->n, c, maxmin, sign);
        } else {
            gemv_fold(s, c, maxmin, s->acc, NULL);
            c = todre_sel_argbest(s->acc, s->taken, s->n, sign);
        }
    }
    return TODRE_OK;
}
