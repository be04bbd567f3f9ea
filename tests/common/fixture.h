/* Stage-1 fixtures written by tests/reference/gen_select_cases.py (ctest
 * fixture `select_cases`): a manifest of cases plus .npy inputs, reference
 * selection orders and per-step margins, in $TODRE_TEST_DATA/select. */
#ifndef TODRE_TESTS_FIXTURE_H
#define TODRE_TESTS_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "npy.h"
#include "todre/todre.h"
#include "dtype.h" /* src/dtype.h: todre_dtype */

enum tt_cls_kind { TT_CLS_NONE = 0, TT_CLS_FLAT = 1, TT_CLS_VIDEO = 2 };

struct tt_case {
    /* from the manifest */
    char name[64];
    int64_t n, d;
    todre_dtype dtype;
    enum tt_cls_kind cls_kind;
    todre_dtype cls_dtype;
    int64_t frames;
    todre_objective objective;
    todre_pivot pivot;
    int64_t lo, hi, seed, keep;
    double ratio;
    int64_t k;   /* the reference's keep count */
    int64_t pad; /* the test lays rows out with stride d + pad */
    int exact;   /* every score exact in any arithmetic: indices must match */
    /* loaded by tt_case_load */
    struct todre_npy emb, cls, order, margin;
};

/* $TODRE_TEST_DATA/select, or NULL (with a printed hint) when unset. */
const char *tt_select_data_dir(void);

/* Parse dir/cases.txt into a malloc'd array. Returns 0 or -1 with err. */
int tt_cases_read(const char *dir, struct tt_case **cases, size_t *count, char *err, size_t cap);

/* Load (and check the shapes of) the arrays of one case. 0 or -1 with err. */
int tt_case_load(const char *dir, struct tt_case *c, char *err, size_t cap);
void tt_case_free(struct tt_case *c);

#endif /* TODRE_TESTS_FIXTURE_H */
