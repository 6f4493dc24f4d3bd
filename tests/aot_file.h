/* aot_file.h - rewriting an AOT file's checksum after a deliberate change,
 * so that the change itself is what the loader sees (test_aot.c, and the
 * AOT fuzz harness). Include after runtime/cuda/aot.h. */
#ifndef FC_TEST_AOT_FILE_H
#define FC_TEST_AOT_FILE_H

#include "runtime/cuda/aot.h"

#include <stdbool.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

static inline void aot_fix_checksum(unsigned char *b, size_t n) {
    if (n < FC_AOT_HEADER_SIZE) return;
    static const unsigned char zeros[16];
    XXH3_state_t s;
    XXH3_INITSTATE(&s);
    XXH3_128bits_reset(&s);
    const size_t field = FC_AOT_CHECKSUM_OFFSET;
    XXH3_128bits_update(&s, b, field);
    XXH3_128bits_update(&s, zeros, 16);
    XXH3_128bits_update(&s, b + field + 16, n - field - 16);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&s));
    memcpy(b + field, c.digest, 16);
}

/* The first section of `kind` in the file (its table checked), or false. */
static inline bool aot_find_section(const unsigned char *b, size_t n, unsigned kind, fc_aot_section *out) {
    fc_context *ctx = fc_context_new();
    fc_aot_section *s = NULL;
    int ns = 0;
    bool found = false;
    if (ctx && fc_aot_sections(ctx, "x", b, n, &s, &ns) == FC_OK)
        for (int i = 0; i < ns && !found; i++)
            if (s[i].kind == kind) {
                *out = s[i];
                found = true;
            }
    fc_free(s);
    fc_context_free(ctx);
    return found;
}

#endif
