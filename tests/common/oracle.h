/* Float64 validity oracle for stage-1 selections.
 *
 * Given the input exactly as the library saw it and a selection order the
 * library produced, recompute in double, along THAT order, the score of every
 * remaining candidate at every step and check that the library's choice is
 * within a rounding tolerance of the best one. This is an oracle check, not
 * a second implementation: it never picks tokens itself, and for the RANDOM
 * pivot it only checks the range (the exact pivot is compared against the
 * Python reference's splitmix64 value in the fixtures).
 *
 * Tolerance (tt_oracle_tol). The library normalises rows and accumulates in
 * fp32 (unit roundoff u = 2^-24; f16/bf16 inputs convert exactly). One cosine
 * from fp32-normalised rows with a blocked/FMA dot product of length d has an
 * error of about u * sqrt(d) (rounding errors of the products and partial
 * sums are independent, so they grow like sqrt(d), not d), plus a few u from
 * the normalisation. A MAX_SUM score at step j is a sum of j cosines (plus
 * the rounding of the running sum), so its error grows at most linearly in j.
 * We allow, for the chosen and the best candidate together,
 *     tol(j) = 2u * (sqrt(d) + 8) * m,   m = j (steps j >= 1 of MAX_SUM), else 1.
 * Measured on the fixture trajectories (fp32 normalisation, sgemv scores,
 * fp32 running sums, d = 64 .. 4096, up to 3001 steps) the largest score
 * error is 7% of tol(j), so tol leaves a 14x margin for other summation
 * orders (Gram/sgemm, threads), yet it is far below the gaps a wrong rule
 * (argmax for argmin, a missed update, a wrong pivot) produces; the oracle
 * self-test in test_select_reference checks that it rejects swapped steps.
 * CLS comparisons (CLS pivot, CLS_TOPK) are exact: tol 0.
 */
#ifndef TODRE_TESTS_ORACLE_H
#define TODRE_TESTS_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#include "todre/todre.h"
#include "dtype.h" /* src/dtype.h: todre_dtype */

struct tt_problem {
    int64_t n, d;
    double *x;        /* normalised rows, n * d (owned) */
    double *cls;      /* flat CLS values, n (owned), or NULL */
    todre_objective objective;
    todre_pivot pivot; /* resolved: never AUTO */
    int64_t lo, hi;    /* pivot range, hi resolved */
    const unsigned char *raw; /* input rows as given, for duplicate detection */
    int64_t raw_row_bytes, raw_stride_bytes;
};

/* Build a problem from the library's inputs. emb: [n, d] rows of dtype dt
 * with row stride ld (elements); cls: NULL or n values (flat, contiguous)
 * of cls_dt. pivot may be AUTO (resolved like the library). hi = -1 means n. */
void tt_problem_init(struct tt_problem *p, const void *emb, todre_dtype dt, int64_t n, int64_t d,
                     int64_t ld, const void *cls, todre_dtype cls_dt, todre_objective obj,
                     todre_pivot piv, int64_t lo, int64_t hi);
void tt_problem_free(struct tt_problem *p);

/* Allowed score error at step j (0 = pivot) of this problem. */
double tt_oracle_tol(const struct tt_problem *p, int64_t step);

/* Check order[0..k). Returns -1 when valid, else the first invalid step, with
 * a description in msg. Also rejects repeated or out-of-range indices and an
 * exact duplicate row (bitwise equal input) chosen while a lower-index copy
 * was still available: identical rows get identical scores in any sane
 * arithmetic, so the lowest-index tie rule applies exactly. */
int64_t tt_check_trajectory(const struct tt_problem *p, const int64_t *order, int64_t k, char *msg,
                            size_t cap);

#endif /* TODRE_TESTS_ORACLE_H */
