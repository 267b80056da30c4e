/* sched_test.h - what the sched tests share: cmocka and a tolerance check
 * (cmocka 1.1.5 has no double comparison). */
#ifndef ALALLO_TEST_SCHED_TEST_H
#define ALALLO_TEST_SCHED_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>

/* Fails with both values printed when |a - b| > eps. */
#define assert_near(a, b, eps)                                                               \
    do {                                                                                     \
        double a_ = (double)(a), b_ = (double)(b);                                           \
        if (!(fabs(a_ - b_) <= (double)(eps))) {                                             \
            print_error("%s = %.9g, expected %.9g (within %g)\n", #a, a_, b_, (double)(eps)); \
            fail();                                                                          \
        }                                                                                    \
    } while (0)

#endif
