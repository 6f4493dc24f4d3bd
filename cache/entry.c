/* entry.c - the entry file format: building headers, and reading an entry
 * back with every check, so that a damaged entry is never returned. */
#include "cache_internal.h"
#include "ir/le.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t, for the streaming checksum */
#include <xxhash.h>

const char *fc_entry_verdict_text(fc_entry_verdict v) {
    switch (v) {
    case FC_ENTRY_OK: return "ok";
    case FC_ENTRY_MISSING: return "missing";
    case FC_ENTRY_NOT_REGULAR: return "not a regular file";
    case FC_ENTRY_NOT_OWNED: return "owned by another user";
    case FC_ENTRY_UNSAFE: return "writable by its group or by others";
    case FC_ENTRY_EMPTY: return "empty file";
    case FC_ENTRY_SHORT_HEADER: return "truncated header";
    case FC_ENTRY_BAD_MAGIC: return "bad magic";
    case FC_ENTRY_BAD_VERSION: return "wrong format version";
    case FC_ENTRY_BAD_LEVEL: return "wrong level";
    case FC_ENTRY_BAD_KEY: return "key does not match";
    case FC_ENTRY_BAD_RESERVED: return "bad header";
    case FC_ENTRY_BAD_SIZE: return "size mismatch (truncated or extended)";
    case FC_ENTRY_TOO_LARGE: return "payload larger than the cache limit";
    case FC_ENTRY_BAD_CHECKSUM: return "checksum mismatch";
    case FC_ENTRY_IO_ERROR: return "read error";
    case FC_ENTRY_NOMEM: return "out of memory";
    }
    return "?";
}


static void checksum_bytes(uint8_t out[16], XXH128_hash_t h) {
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, h);
    memcpy(out, canon.digest, 16);
}

void fc_entry_header(uint8_t out[FC_CACHE_HEADER_SIZE], fc_cache_level level, const fc_cache_key *key,
                     const void *payload, size_t size) {
    memset(out, 0, FC_CACHE_HEADER_SIZE);
    memcpy(out, FC_CACHE_MAGIC, 8);
    fc_put_le(out + 8, FC_CACHE_FORMAT_VERSION, 4);
    fc_put_le(out + 12, (uint32_t)level, 4);
    fc_put_le(out + 16, (uint64_t)size, 8);
    checksum_bytes(out + 24, XXH3_128bits(size ? payload : "", size));
    memcpy(out + 40, key->bytes, FC_CACHE_KEY_SIZE);
    /* 56..63: reserved, zero */
}

/* Read exactly n bytes (a regular file only comes up short at its end, or
 * when it shrank under us, which is then a size mismatch). */
static bool read_full(int fd, void *buf, size_t n, int *err) {
    uint8_t *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0) {
            if (errno == EINTR) continue;
            *err = errno;
            return false;
        }
        if (r == 0) {
            *err = 0;
            return false;
        }
        p += r;
        n -= (size_t)r;
    }
    return true;
}

static fc_entry_verdict check_header(const uint8_t *h, fc_cache_level level, const fc_cache_key *key,
                                     uint64_t file_size, uint64_t max_payload) {
    if (memcmp(h, FC_CACHE_MAGIC, 8) != 0) return FC_ENTRY_BAD_MAGIC;
    if (fc_get_le(h + 8, 4) != FC_CACHE_FORMAT_VERSION) return FC_ENTRY_BAD_VERSION;
    if (fc_get_le(h + 12, 4) != (uint32_t)level) return FC_ENTRY_BAD_LEVEL;
    if (memcmp(h + 40, key->bytes, FC_CACHE_KEY_SIZE) != 0) return FC_ENTRY_BAD_KEY;
    if (fc_get_le(h + 56, 8) != 0) return FC_ENTRY_BAD_RESERVED;
    uint64_t payload = fc_get_le(h + 16, 8);
    if (payload != file_size - FC_CACHE_HEADER_SIZE) return FC_ENTRY_BAD_SIZE;
    if (payload > max_payload) return FC_ENTRY_TOO_LARGE;
    return FC_ENTRY_OK;
}

fc_entry_verdict fc_entry_read(fc_context *ctx, int dirfd, const char *name, fc_cache_level level,
                               const fc_cache_key *key, uint64_t max_payload, bool touch,
                               void **payload, size_t *size, struct stat *st, int *err) {
    if (payload) *payload = NULL;
    if (size) *size = 0;
    *err = 0;
    memset(st, 0, sizeof *st);

    /* O_NOFOLLOW: an entry is never a symlink. O_NONBLOCK: a fifo planted
     * under an entry's name must not hang us (it is refused below). */
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return FC_ENTRY_MISSING;
        *err = errno;
        /* A symlink (ELOOP), a socket (ENXIO): damage, not a read error. */
        if (fstatat(dirfd, name, st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st->st_mode)) return FC_ENTRY_NOT_REGULAR;
        return FC_ENTRY_IO_ERROR;
    }

    fc_entry_verdict v = FC_ENTRY_OK;
    uint8_t *buf = NULL;
    if (fstat(fd, st) != 0) {
        *err = errno;
        v = FC_ENTRY_IO_ERROR;
        goto out;
    }
    if ((v = fc_entry_check_owner(st)) != FC_ENTRY_OK) goto out;
    if (st->st_size == 0) {
        v = FC_ENTRY_EMPTY;
        goto out;
    }
    if (st->st_size < FC_CACHE_HEADER_SIZE) {
        v = FC_ENTRY_SHORT_HEADER;
        goto out;
    }

    uint8_t header[FC_CACHE_HEADER_SIZE];
    if (!read_full(fd, header, sizeof header, err)) {
        v = *err ? FC_ENTRY_IO_ERROR : FC_ENTRY_SHORT_HEADER;
        goto out;
    }
    v = check_header(header, level, key, (uint64_t)st->st_size, max_payload);
    if (v != FC_ENTRY_OK) goto out;
    size_t n = (size_t)((uint64_t)st->st_size - FC_CACHE_HEADER_SIZE);

    XXH128_hash_t sum;
    if (payload) {
        buf = fc_ctx_malloc(ctx, n ? n : 1);
        if (!buf) {
            v = FC_ENTRY_NOMEM;
            goto out;
        }
        if (!read_full(fd, buf, n, err)) {
            v = *err ? FC_ENTRY_IO_ERROR : FC_ENTRY_BAD_SIZE;
            goto out;
        }
        sum = XXH3_128bits(n ? (const void *)buf : "", n);
    } else {
        /* Verification only: stream the payload through the hash in chunks
         * rather than holding a whole entry in memory. */
        XXH3_state_t state;
        XXH3_128bits_reset(&state);
        uint8_t chunk[16384];
        size_t left = n;
        while (left) {
            size_t k = left < sizeof chunk ? left : sizeof chunk;
            if (!read_full(fd, chunk, k, err)) {
                v = *err ? FC_ENTRY_IO_ERROR : FC_ENTRY_BAD_SIZE;
                goto out;
            }
            XXH3_128bits_update(&state, chunk, k);
            left -= k;
        }
        sum = XXH3_128bits_digest(&state);
    }
    uint8_t want[16];
    checksum_bytes(want, sum);
    if (memcmp(want, header + 24, 16) != 0) {
        v = FC_ENTRY_BAD_CHECKSUM;
        goto out;
    }

    /* A good entry: reading it is a use, so move it to the front of the
     * LRU order. Failure (a read-only file system) only costs LRU accuracy. */
    if (touch) (void)futimens(fd, NULL);
    if (payload) {
        *payload = buf;
        buf = NULL;
    }
    if (size) *size = n;

out:
    fc_ctx_freemem(ctx, buf);
    close(fd);
    return v;
}

fc_entry_verdict fc_entry_check_owner(const struct stat *st) {
    if (!S_ISREG(st->st_mode)) return FC_ENTRY_NOT_REGULAR;
    if (st->st_uid != geteuid()) return FC_ENTRY_NOT_OWNED;
    if (st->st_mode & (S_IWGRP | S_IWOTH)) return FC_ENTRY_UNSAFE;
    return FC_ENTRY_OK;
}

/* Deep enough for anything planted by hand; a deeper tree stays (and the
 * entry keeps missing) rather than recursing without bound. */
#define REMOVE_MAX_DEPTH 8

static bool remove_tree(int dirfd, const char *name, int depth) {
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return false;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return false;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        struct stat st;
        if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            if (depth < REMOVE_MAX_DEPTH) (void)remove_tree(fd, de->d_name, depth + 1);
        } else {
            (void)unlinkat(fd, de->d_name, 0);
        }
    }
    closedir(d);
    return unlinkat(dirfd, name, AT_REMOVEDIR) == 0;
}

bool fc_entry_remove(int dirfd, const char *name, const struct stat *st) {
    struct stat now;
    if (fstatat(dirfd, name, &now, AT_SYMLINK_NOFOLLOW) != 0) return false;
    if (st && (now.st_dev != st->st_dev || now.st_ino != st->st_ino)) return false;
    if (S_ISDIR(now.st_mode)) return remove_tree(dirfd, name, 0);
    return unlinkat(dirfd, name, 0) == 0;
}

bool fc_entry_unlink_if_same(int dirfd, const char *name, const struct stat *st) {
    struct stat now;
    if (fstatat(dirfd, name, &now, AT_SYMLINK_NOFOLLOW) != 0) return false;
    if (now.st_dev != st->st_dev || now.st_ino != st->st_ino) return false;
    return unlinkat(dirfd, name, 0) == 0;
}
