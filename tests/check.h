/* check.h - the tiny test harness every C test uses.
 *
 *   CHECK(cond)            record a failure (with file:line) and go on
 *   CHECK_EQ_INT(a, b)     integers, prints both on failure
 *   CHECK_STR(a, b)        strings, prints both on failure
 *   CHECK_NEAR(a, b, tol)  doubles, |a-b| <= tol (NaN equals NaN)
 *   return check_report("name");   prints "N passed, N failed", returns exit code
 */
#ifndef FC_TEST_CHECK_H
#define FC_TEST_CHECK_H
#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (cond) check_passed++;                                                \
        else { check_failed++; fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                       \
    do {                                                                         \
        long long va_ = (long long)(a), vb_ = (long long)(b);                    \
        if (va_ == vb_) check_passed++;                                          \
        else { check_failed++; fprintf(stderr, "%s:%d: CHECK_EQ_INT failed: %s = %lld, %s = %lld\n", \
                                       __FILE__, __LINE__, #a, va_, #b, vb_); } \
    } while (0)

#define CHECK_STR(a, b)                                                          \
    do {                                                                         \
        const char *sa_ = (a), *sb_ = (b);                                       \
        if (sa_ && sb_ && strcmp(sa_, sb_) == 0) check_passed++;                 \
        else { check_failed++; fprintf(stderr, "%s:%d: CHECK_STR failed: %s\n--- got:\n%s\n--- expected:\n%s\n---\n", \
                                       __FILE__, __LINE__, #a, sa_ ? sa_ : "(null)", sb_ ? sb_ : "(null)"); } \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                    \
    do {                                                                         \
        double va_ = (double)(a), vb_ = (double)(b);                             \
        if ((isnan(va_) && isnan(vb_)) || va_ == vb_ || fabs(va_ - vb_) <= (tol)) check_passed++; \
        else { check_failed++; fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.17g, %s = %.17g (tol %g)\n", \
                                       __FILE__, __LINE__, #a, va_, #b, vb_, (double)(tol)); } \
    } while (0)

static int check_report(const char *name) {
    printf("%s: %d passed, %d failed\n", name, check_passed, check_failed);
    return check_failed ? 1 : 0;
}
#endif
