/*
 * timing.h - the clock and the median behind every time fusec reports
 * (compile and load times, --bench and --time, the benches, the tests).
 */
#ifndef FC_IR_TIMING_H
#define FC_IR_TIMING_H

#include <stdlib.h>
#include <time.h>

/* A monotonic clock, in milliseconds. */
static inline double fc_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static inline int fc_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0 .. n), n > 0 (v is sorted in place). */
static inline double fc_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, fc_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
