/* aot_file.h - rewriting an AOT file's checksum after a deliberate change,
 * so that the change itself is what the loader sees (test_aot.c, and the
 * AOT fuzz harness). Include after runtime/aot.h. */
#ifndef FC_TEST_AOT_FILE_H
#define FC_TEST_AOT_FILE_H

#include "runtime/cuda/aot.h"

#include <stdbool.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

static inline void aot_fix_checksum(unsigned char *b, size_t n) {
    fc_context *ctx = fc_context_new();
    size_t off, len;
    bool found = ctx && fc_aot_locate(ctx, "x", b, n, &off, &len) == FC_OK && len >= FC_AOT_HEADER_SIZE;
    fc_context_free(ctx);
    if (!found) return;
    static const unsigned char zeros[16];
    XXH3_state_t s;
    XXH3_INITSTATE(&s);
    XXH3_128bits_reset(&s);
    size_t field = off + FC_AOT_CHECKSUM_OFFSET;
    XXH3_128bits_update(&s, b, field);
    XXH3_128bits_update(&s, zeros, 16);
    XXH3_128bits_update(&s, b + field + 16, n - field - 16);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&s));
    memcpy(b + field, c.digest, 16);
}

#endif
