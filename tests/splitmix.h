/* splitmix.h - the tests' seeded random numbers (splitmix64): the same
 * seed gives the same sequence on every platform. */
#ifndef FC_TEST_SPLITMIX_H
#define FC_TEST_SPLITMIX_H
#include <stdint.h>

static inline uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline double splitmix_uniform(uint64_t *state) {
    return (double)(splitmix64(state) >> 11) / 4503599627370496.0 - 1.0;
}

#endif
