/*
 * stats.c - the counters shared by every process using a cache directory.
 *
 * DIR/v<N>/stats is one fixed 72-byte record:
 *     0  magic "FUSECSTA"   8 bytes
 *     8  format version     u32
 *    12  counter count      u32  (FC_CACHE_COUNTER_COUNT)
 *    16  counters           u64 each, in fc_cache_counter order
 *    64  XXH3-64 of bytes 0..63
 * all little-endian.
 *
 * Why a locked read-modify-write of one record rather than appended
 * records: the file stays small and constant-sized however long the cache
 * lives, reading it is one pread, and flock(LOCK_EX) makes each update
 * atomic with respect to every other process, so no count is lost. Updates
 * are rare (a handle batches its counts and flushes them after a disk put
 * and at close), so the lock is never contended for long. A record that is
 * damaged (bad magic or checksum) reads as zeros: the counts are only
 * statistics, and starting over beats failing. So does a stats file that is
 * not ours alone (a symlink, not a regular file, another user's, writable
 * by group or others): it is not read, and the next update replaces it.
 */
#include "cache_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <xxhash.h>

#include "ir/le.h"

#define STATS_MAGIC "FUSECSTA"
#define STATS_BODY (16 + 8 * FC_CACHE_COUNTER_COUNT)
#define STATS_SIZE (STATS_BODY + 8)


static void encode(uint8_t out[STATS_SIZE], const uint64_t c[FC_CACHE_COUNTER_COUNT]) {
    memcpy(out, STATS_MAGIC, 8);
    fc_put_le(out + 8, FC_CACHE_FORMAT_VERSION, 4);
    fc_put_le(out + 12, FC_CACHE_COUNTER_COUNT, 4);
    for (int i = 0; i < FC_CACHE_COUNTER_COUNT; i++) fc_put_le(out + 16 + 8 * i, c[i], 8);
    fc_put_le(out + STATS_BODY, XXH3_64bits(out, STATS_BODY), 8);
}

/* Decode a record; false (and zeros) if it is not a good one. */
static bool decode(const uint8_t *in, size_t n, uint64_t c[FC_CACHE_COUNTER_COUNT]) {
    memset(c, 0, sizeof(uint64_t) * FC_CACHE_COUNTER_COUNT);
    if (n != STATS_SIZE || memcmp(in, STATS_MAGIC, 8) != 0 || fc_get_le(in + 8, 4) != FC_CACHE_FORMAT_VERSION ||
        fc_get_le(in + 12, 4) != FC_CACHE_COUNTER_COUNT || fc_get_le(in + STATS_BODY, 8) != XXH3_64bits(in, STATS_BODY))
        return false;
    for (int i = 0; i < FC_CACHE_COUNTER_COUNT; i++) c[i] = fc_get_le(in + 16 + 8 * i, 8);
    return true;
}

static int lock(int fd, int op) {
    int r;
    while ((r = flock(fd, op)) != 0 && errno == EINTR) {}
    return r;
}

static ssize_t pread_full(int fd, uint8_t *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* Not ours alone, or not a file at all: errno values of an open that met
 * a symlink (O_NOFOLLOW), a socket, a directory opened for writing. */
static bool not_a_file(int err) { return err == ELOOP || err == ENXIO || err == EISDIR || err == EOPNOTSUPP; }

static bool is_ours(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && fc_entry_check_owner(&st) == FC_ENTRY_OK;
}

fc_status fc_stats_load(fc_context *ctx, int verfd, const char *shown_dir, uint64_t out[FC_CACHE_COUNTER_COUNT]) {
    memset(out, 0, sizeof(uint64_t) * FC_CACHE_COUNTER_COUNT);
    /* O_NONBLOCK: a FIFO under the name must not hang the read. */
    int fd = openat(verfd, FC_CACHE_STATS_NAME, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || not_a_file(errno)) return FC_OK; /* no counts (yet, or that we trust) */
        return fc_set_error(ctx, FC_ERR_RUNTIME, "cannot open %s/%s: %s", shown_dir, FC_CACHE_STATS_NAME,
                            strerror(errno));
    }
    if (!is_ours(fd)) {
        close(fd);
        return FC_OK;
    }
    /* A shared lock: never read a record half-way through an update. */
    fc_status st = FC_OK;
    uint8_t buf[STATS_SIZE + 1];
    if (lock(fd, LOCK_SH) != 0) {
        st = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot lock %s/%s: %s", shown_dir, FC_CACHE_STATS_NAME,
                          strerror(errno));
    } else {
        ssize_t n = pread_full(fd, buf, sizeof buf);
        if (n < 0)
            st = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot read %s/%s: %s", shown_dir, FC_CACHE_STATS_NAME,
                              strerror(errno));
        else (void)decode(buf, (size_t)n, out);
    }
    close(fd); /* releases the lock */
    return st;
}

/* The stats file opened for an update: one of ours alone, made afresh
 * (0600) when what is there is not. -1 with errno on failure. */
static int open_for_update(int verfd) {
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = openat(verfd, FC_CACHE_STATS_NAME, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
        if (fd >= 0 && is_ours(fd)) return fd;
        if (fd >= 0) close(fd);
        else if (!not_a_file(errno)) return -1;
        struct stat st;
        if (fstatat(verfd, FC_CACHE_STATS_NAME, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !fc_entry_remove(verfd, FC_CACHE_STATS_NAME, &st))
            return -1;
    }
    errno = EPERM;
    return -1;
}

fc_status fc_stats_add(fc_context *ctx, int verfd, const char *shown_dir,
                       const uint64_t delta[FC_CACHE_COUNTER_COUNT]) {
    int fd = open_for_update(verfd);
    if (fd < 0)
        return fc_set_error(ctx, FC_ERR_RUNTIME, "cannot open %s/%s: %s", shown_dir, FC_CACHE_STATS_NAME,
                            strerror(errno));
    fc_status st = FC_OK;
    if (lock(fd, LOCK_EX) != 0) {
        st = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot lock %s/%s: %s", shown_dir, FC_CACHE_STATS_NAME,
                          strerror(errno));
        goto out;
    }
    uint8_t buf[STATS_SIZE + 1]; /* one byte more: a longer file is not a record */
    ssize_t n = pread_full(fd, buf, sizeof buf);
    if (n < 0) {
        st = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot read %s/%s: %s", shown_dir, FC_CACHE_STATS_NAME,
                          strerror(errno));
        goto out;
    }
    uint64_t c[FC_CACHE_COUNTER_COUNT];
    (void)decode(buf, (size_t)n, c);
    for (int i = 0; i < FC_CACHE_COUNTER_COUNT; i++) c[i] += delta[i];
    encode(buf, c);
    /* One small write at offset 0 (the record never changes size, so no
     * truncate is needed except to drop junk from a damaged longer file). */
    ssize_t w;
    while ((w = pwrite(fd, buf, STATS_SIZE, 0)) < 0 && errno == EINTR) {}
    if (w != STATS_SIZE) {
        st = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot write %s/%s: %s", shown_dir, FC_CACHE_STATS_NAME,
                          w < 0 ? strerror(errno) : "short write");
        goto out;
    }
    if (n > STATS_SIZE && ftruncate(fd, STATS_SIZE) != 0)
        st = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot truncate %s/%s: %s", shown_dir, FC_CACHE_STATS_NAME,
                          strerror(errno));
out:
    close(fd); /* releases the lock */
    return st;
}
