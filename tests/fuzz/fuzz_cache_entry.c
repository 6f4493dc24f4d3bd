/* fuzz_cache_entry.c - libFuzzer harness for the cache entry reader and
 * the program entry decoder: the input is written as an entry file and
 * read back with every check (its key is taken from the input's header, so
 * that the checks behind the key's are reached); a payload that passes is
 * decoded as a program entry, as fc_compile would. */
#include "cache/cache_internal.h"
#include "runtime/cuda/program_cache.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

static int dirfd_once = -1;
static char dir_once[] = "/tmp/fuzz_cache_entry.XXXXXX";

/* The directory goes when the fuzzer exits (not after a crash: then the
 * entry that did it is in the fuzzer's artifact anyway). */
static void remove_dir(void) {
    (void)unlinkat(dirfd_once, "e.bin", 0);
    (void)rmdir(dir_once);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (dirfd_once < 0) {
        if (!mkdtemp(dir_once)) abort();
        dirfd_once = open(dir_once, O_RDONLY | O_DIRECTORY);
        if (dirfd_once < 0) abort();
        atexit(remove_dir);
    }
    /* With the checksum fixed half of the time, the decoder gets fed. */
    uint8_t *b = malloc(size ? size : 1);
    if (!b) return 0;
    if (size) memcpy(b, data, size);
    if (size >= FC_CACHE_HEADER_SIZE && (b[size - 1] & 1)) {
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits(b + FC_CACHE_HEADER_SIZE, size - FC_CACHE_HEADER_SIZE));
        memcpy(b + 24, c.digest, 16);
    }
    int fd = openat(dirfd_once, "e.bin", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) abort();
    if (size && write(fd, b, size) != (ssize_t)size) abort();
    close(fd);
    fc_cache_key key = {{0}};
    if (size >= 56) memcpy(key.bytes, b + 40, FC_CACHE_KEY_SIZE);
    fc_cache_level level = size >= 16 ? (fc_cache_level)(b[12] % FC_CACHE_LEVEL_COUNT) : FC_CACHE_PROGRAM;
    fc_context *ctx = fc_context_new();
    void *payload = NULL;
    size_t n = 0;
    struct stat st;
    int err;
    fc_entry_verdict v = fc_entry_read(ctx, dirfd_once, "e.bin", level, &key, 1 << 26, false, &payload, &n, &st, &err);
    (void)fc_entry_verdict_text(v);
    if (v == FC_ENTRY_OK) {
        fc_program_desc d;
        if (fc_program_desc_decode(ctx, payload, n, &d) == FC_OK) fc_program_desc_release(&d);
        fc_ctx_freemem(ctx, payload);
    }
    /* The program decoder on the raw input too: the cache's own checks
     * are not its only guard. */
    fc_program_desc d;
    if (fc_program_desc_decode(ctx, data, size, &d) == FC_OK) fc_program_desc_release(&d);
    fc_context_free(ctx);
    free(b);
    return 0;
}
