/* key.c - cache keys: a streaming XXH3-128 hasher with framed inputs, and
 * the hex form used in file names. */
#include "cache.h"

#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t's definition, to embed it */
#include <xxhash.h>

/* The hasher keeps XXH3's state inside the caller's fc_cache_hasher. */
_Static_assert(sizeof(XXH3_state_t) <= sizeof(((fc_cache_hasher *)0)->opaque),
               "fc_cache_hasher is too small for XXH3_state_t");
_Static_assert(_Alignof(XXH3_state_t) <= 64, "fc_cache_hasher is not aligned enough for XXH3_state_t");

static XXH3_state_t *state_of(fc_cache_hasher *h) { return (XXH3_state_t *)(void *)h->opaque; }
static const XXH3_state_t *cstate_of(const fc_cache_hasher *h) {
    return (const XXH3_state_t *)(const void *)h->opaque;
}

static void put_le64(uint8_t out[8], uint64_t v) {
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(v >> (8 * i));
}

/* Every piece is preceded by its length, so that the boundaries between
 * pieces are part of the key: ("ab","c") and ("a","bc") must not collide. */
static void add_framed(fc_cache_hasher *h, uint64_t len_tag, const void *data, size_t len) {
    uint8_t le[8];
    put_le64(le, len_tag);
    XXH3_128bits_update(state_of(h), le, sizeof le);
    if (len) XXH3_128bits_update(state_of(h), data, len);
}

void fc_cache_key_begin(fc_cache_hasher *h) {
    memset(h, 0, sizeof *h);
    XXH3_128bits_reset(state_of(h));
    /* A domain tag, and the format version: bumping the version changes
     * every key, whatever the caller hashes. */
    fc_cache_key_add_str(h, "fusec-cache-key");
    fc_cache_key_add_u64(h, FC_CACHE_FORMAT_VERSION);
}

void fc_cache_key_add(fc_cache_hasher *h, const void *data, size_t len) {
    add_framed(h, (uint64_t)len, data, len);
}

void fc_cache_key_add_str(fc_cache_hasher *h, const char *s) {
    /* NULL gets a length no real string has, so it differs from "". */
    if (!s) add_framed(h, UINT64_MAX, NULL, 0);
    else add_framed(h, (uint64_t)strlen(s), s, strlen(s));
}

void fc_cache_key_add_u64(fc_cache_hasher *h, uint64_t v) {
    uint8_t le[8];
    put_le64(le, v);
    fc_cache_key_add(h, le, sizeof le);
}

fc_cache_key fc_cache_key_end(const fc_cache_hasher *h) {
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(cstate_of(h)));
    fc_cache_key k;
    _Static_assert(sizeof canon.digest == sizeof k.bytes, "key size");
    memcpy(k.bytes, canon.digest, sizeof k.bytes);
    return k;
}

bool fc_cache_key_equal(const fc_cache_key *a, const fc_cache_key *b) {
    return memcmp(a->bytes, b->bytes, sizeof a->bytes) == 0;
}

void fc_cache_key_hex(const fc_cache_key *k, char out[FC_CACHE_KEY_HEX_SIZE]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < FC_CACHE_KEY_SIZE; i++) {
        out[2 * i] = digits[k->bytes[i] >> 4];
        out[2 * i + 1] = digits[k->bytes[i] & 15];
    }
    out[2 * FC_CACHE_KEY_SIZE] = 0;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1; /* lowercase only: exactly the names fc_cache_key_hex makes */
}

bool fc_cache_key_from_hex(const char *hex, size_t len, fc_cache_key *k) {
    if (len != 2 * FC_CACHE_KEY_SIZE) return false;
    for (int i = 0; i < FC_CACHE_KEY_SIZE; i++) {
        int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return false;
        k->bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}
