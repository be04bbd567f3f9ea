/* The fused Q/K path on long sequences (K = 8192): ratios equal the float64
 * reference, and working memory stays bounded: peak RSS growth during the
 * call is far below the H * Q * K * 4 bytes an attention matrix would take.
 * A separate program, so no other test's allocations hide the peak. */
#include "test_relevance_fixture.h"

#include <sys/resource.h>

static long max_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss; /* KiB on Linux */
}

static void run_case(todre_context *ctx, const struct rf_case *c, const struct rf_arrays *a,
                     int64_t Q, double *ratios)
{
    todre_dtype dt = rf_dtype(c);
    size_t es = dt == TODRE_DTYPE_F32 ? 4 : 2;
    int64_t sq[4] = {c->B, c->H, Q, c->dh}, sk[4] = {c->B, c->Hkv, c->K, c->dh};
    int64_t stq[4] = {c->H * c->Q * c->dh, c->Q * c->dh, c->dh, 1};
    /* the last Q queries of the full prefill */
    char *q0 = (char *)a->q.data + (size_t)((c->Q - Q) * c->dh) * es;
    tt_array q, k;
    rf_observe(ctx, c->B, c->K, a->types.data, tt_array_init(&q, q0, dt, 4, sq, stq),
               tt_array_init(&k, a->k.data, dt, 4, sk, NULL), c->scale, ratios);
}

static void test_long_sequences(void **state)
{
    (void)state;
    int checked = 0;
    todre_context *ctx = tt_cpu_context();
    for (int i = 0; i < rf_ncases; i++) {
        const struct rf_case *c = &rf_cases[i];
        if (c->K < 8192) continue;
        struct rf_arrays a;
        rf_load(c, &a);
        double r[2];
        /* Warm-up on a short chunk: the workspace (sized by block sizes, dh
         * and threads, not K) and OpenBLAS's buffers are allocated here. */
        run_case(ctx, c, &a, 64, r);
        long before = max_rss_kib();
        run_case(ctx, c, &a, c->Q, r);
        long growth = max_rss_kib() - before;
        double attn_kib = (double)(c->H * c->Q * c->K) * 4.0 / 1024.0;
        print_message("%s: K = %lld, peak RSS growth %ld KiB (an attention matrix: %.0f KiB)\n",
                      c->name, (long long)c->K, growth, attn_kib);
        if (!((double)growth < attn_kib / 64.0))
            fail_msg("%s: peak RSS grew by %ld KiB during the call", c->name, growth);
        rf_assert_close(r[0], rf_ref(&a)[2], 1e-5, 1e-12, "qk t2v", c->name, 0);
        rf_assert_close(r[1], rf_ref(&a)[3], 1e-5, 1e-12, "qk v2t", c->name, 0);
        rf_free(&a);
        checked++;
    }
    assert_true(checked >= 2);
    todre_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_sequences),
    };
    return cmocka_run_group_tests(tests, rf_load_cases, NULL);
}
