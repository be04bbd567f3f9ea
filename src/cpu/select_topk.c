/* CLS_TOPK: the k largest CLS attentions, in descending order, ties to the
 * lower index. */
#include "select_internal.h"

struct cls_rec {
    float v;
    int64_t i;
};

/* Whether a comes before b: larger value first, then lower index. A total
 * order, so any correct sort gives the same result. */
static int before(const struct cls_rec *a, const struct cls_rec *b)
{
    if (a->v != b->v) return a->v > b->v;
    return a->i < b->i;
}

static void sift_down(struct cls_rec *h, int64_t root, int64_t n)
{
    for (;;) {
        int64_t child = 2 * root + 1;
        if (child >= n) return;
        /* a heap whose root is the LAST element in the order */
        if (child + 1 < n && before(&h[child], &h[child + 1])) child++;
        if (!before(&h[root], &h[child])) return;
        struct cls_rec t = h[root];
        h[root] = h[child];
        h[child] = t;
        root = child;
    }
}

/* In-place heap sort: qsort may allocate (glibc's does for large arrays),
 * and the hot path must not. */
static void sort_records(struct cls_rec *h, int64_t n)
{
    for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(h, i, n);
    for (int64_t end = n - 1; end > 0; end--) {
        struct cls_rec t = h[0];
        h[0] = h[end];
        h[end] = t;
        sift_down(h, 0, end);
    }
}

todre_status todre_sel_cls_topk(struct todre_sel_seg *s, int64_t *sel, struct todre_diag *diag)
{
    (void)diag;
    struct cls_rec *rec = s->pairs;
    for (int64_t i = 0; i < s->n; i++) rec[i] = (struct cls_rec){todre_sel_cls(s, i), i};
    sort_records(rec, s->n);
    for (int64_t t = 0; t < s->k; t++) {
        sel[t] = rec[t].i;
        s->taken[rec[t].i] = 1;
    }
    return TODRE_OK;
}
