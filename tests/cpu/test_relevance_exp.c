/* The fused path's softmax exponential (src/cpu/relevance_util.h, inline):
 * relative error against libm's double exp stays below 2e-7 over the whole
 * range the online softmax feeds it (x <= 0), and exp(0) is exactly 1, so
 * equal scores give exactly uniform weights. */
#include "todre_test.h"

#include <math.h>

#include "cpu/relevance_util.h"

static void test_exp_accuracy(void **state)
{
    (void)state;
    double worst = 0.0, worst_x = 0.0;
    for (int i = 0; i <= 2000000; i++) {
        float x = (float)(-87.0 * (double)i / 2000000.0);
        double want = exp((double)x), got = todre_rel_exp_nonpos(x);
        double err = fabs(got - want) / want;
        if (err > worst) {
            worst = err;
            worst_x = x;
        }
    }
    print_message("max relative error %.3g at x = %.7g\n", worst, worst_x);
    assert_true(worst < 2e-7);
    assert_true(todre_rel_exp_nonpos(0.0f) == 1.0f);
    assert_true(todre_rel_exp_nonpos(-1000.0f) < 1e-37f); /* flushed, not wrapped */
    assert_true(todre_rel_exp_nonpos(-INFINITY) < 1e-37f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp_accuracy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
