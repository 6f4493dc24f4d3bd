/*
 * le.h - little-endian integers in byte buffers (internal header).
 *
 * Every format fusec writes stores its integers little-endian, whatever
 * the host: cache entries and counters (cache/), program descriptions
 * (runtime/program_cache.c), AOT files (runtime/aot.c) and cuBLASLt
 * algorithm records (runtime/cublaslt.c). These two are the one way they
 * are written and read.
 */
#ifndef FC_IR_LE_H
#define FC_IR_LE_H

#include <stdint.h>

/* The low n bytes (1..8) of v at p, least significant first. */
static inline void fc_put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* The n bytes (1..8) at p as an unsigned integer, least significant first. */
static inline uint64_t fc_get_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#endif
