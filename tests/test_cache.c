/*
 * test_cache.c - the kernel/program cache: keys, round trips, the entry
 * format's checks (damaged entries are removed, never returned), directory
 * safety, modes, LRU eviction, clear, info, verify, the in-process layer,
 * allocation failures. No GPU: the cache stores bytes.
 *
 * Each test works in a fresh mkdtemp directory and removes it after.
 */
#include "cache/cache.h"
#include "cache/cache_internal.h"
#include "check.h"
#include "test_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static fc_context *ctx;

/* ------------------------------------------------------------------ */
/* Helpers.                                                            */
/* ------------------------------------------------------------------ */

/* A fresh directory; the cache goes in <it>/cache so that creating it
 * (mkdir -p, modes) is part of every test. */
static void fresh_dir(char *base, size_t n, char *cache_dir, size_t m) {
    if (!temp_dir(base, n, "fusec-cache-test")) exit(2);
    snprintf(cache_dir, m, "%s/cache", base);
}

/* rm -rf, restoring permissions that tests take away on purpose. */
static fc_cache *open_cache(const char *dir, fc_cache_mode mode, uint64_t max) {
    fc_cache_options o = {.dir = dir, .mode = mode, .max_bytes = max};
    fc_cache *c = NULL;
    fc_status st = fc_cache_open(ctx, &o, &c);
    if (st != FC_OK) fprintf(stderr, "fc_cache_open: %s\n", fc_last_error(ctx));
    return c;
}

static fc_cache_key key_of(const char *s) {
    fc_cache_hasher h;
    fc_cache_key_begin(&h);
    fc_cache_key_add_str(&h, s);
    return fc_cache_key_end(&h);
}

/* The key of two pieces, s then t. */
static fc_cache_key key_of2(const char *s, const char *t) {
    fc_cache_hasher h;
    fc_cache_key_begin(&h);
    fc_cache_key_add_str(&h, s);
    fc_cache_key_add_str(&h, t);
    return fc_cache_key_end(&h);
}

static void entry_path(fc_cache *c, fc_cache_level level, const char *key_text, char *buf, size_t n) {
    fc_cache_key k = key_of(key_text);
    if (!fc_cache_entry_path(c, level, &k, buf, n)) buf[0] = 0;
}

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static long long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

static unsigned mode_of(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0xffff;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fwrite(data, 1, n, f);
    fclose(f);
}

/* Overwrite byte `off` of a file with its complement. */
static void flip_byte(const char *path, long off) {
    int fd = open(path, O_RDWR);
    unsigned char b = 0;
    if (fd < 0 || pread(fd, &b, 1, off) != 1) {
        perror(path);
        exit(2);
    }
    b = (unsigned char)~b;
    if (pwrite(fd, &b, 1, off) != 1) exit(2);
    close(fd);
}

static void set_mtime(const char *path, time_t t) {
    struct timespec ts[2] = {{t, 0}, {t, 0}};
    if (utimensat(AT_FDCWD, path, ts, 0) != 0) perror(path);
}

/* Number of names in dir starting with prefix. */
/* get -> 1 hit with the expected bytes, 0 miss, -1 wrong bytes or error */
static int get_check(fc_cache *c, fc_cache_level level, const char *key_text, const void *want, size_t want_n) {
    fc_cache_key k = key_of(key_text);
    void *data = NULL;
    size_t n = 0;
    if (fc_cache_get(c, ctx, level, &k, &data, &n) != FC_OK) return -1;
    if (!data) return 0;
    int r = (n == want_n && memcmp(data, want, n) == 0) ? 1 : -1;
    fc_free(data);
    return r;
}

static fc_status put(fc_cache *c, fc_cache_level level, const char *key_text, const void *data, size_t n) {
    fc_cache_key k = key_of(key_text);
    return fc_cache_put(c, ctx, level, &k, data, n);
}

/* Puts an entry, closes c, and checks that a fresh handle on dir reads it
 * back from disk; closes that handle too. */
static void put_reopen_get(fc_cache *c, const char *dir, fc_cache_level level, const char *key_text, const void *data,
                           size_t n) {
    CHECK_EQ_INT(put(c, level, key_text, data, n), FC_OK);
    fc_cache_close(c);
    c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK_EQ_INT(get_check(c, level, key_text, data, n), 1);
    fc_cache_close(c);
}

static uint64_t counter(fc_cache *c, fc_cache_counter k) {
    fc_cache_summary s;
    if (fc_cache_info(c, ctx, &s) != FC_OK) return (uint64_t)-1;
    return s.counters[k];
}

static void fill(unsigned char *buf, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 8));
}

/* ------------------------------------------------------------------ */
/* Keys.                                                               */
/* ------------------------------------------------------------------ */
static void test_keys(void) {
    fc_cache_hasher h;
    fc_cache_key a, b;
    char hex[FC_CACHE_KEY_HEX_SIZE];

    /* Deterministic. */
    a = key_of("__global__ void k() {}");
    b = key_of("__global__ void k() {}");
    CHECK(fc_cache_key_equal(&a, &b));

    /* Sensitive to one byte. */
    b = key_of("__global__ void k() {};");
    CHECK(!fc_cache_key_equal(&a, &b));

    /* Framing: piece boundaries are part of the key. */
    a = key_of2("ab", "c");
    b = key_of2("a", "bc");
    CHECK(!fc_cache_key_equal(&a, &b));

    /* Order matters; NULL differs from "". */
    a = key_of2("sm_90", "-O3");
    b = key_of2("-O3", "sm_90");
    CHECK(!fc_cache_key_equal(&a, &b));
    a = key_of(NULL);
    b = key_of("");
    CHECK(!fc_cache_key_equal(&a, &b));

    /* add_str is add of the string's bytes; integers differ by value. */
    fc_cache_key_begin(&h);
    fc_cache_key_add(&h, "xyz", 3);
    a = fc_cache_key_end(&h);
    b = key_of("xyz");
    CHECK(fc_cache_key_equal(&a, &b));
    fc_cache_key_begin(&h);
    fc_cache_key_add_u64(&h, 12040);
    a = fc_cache_key_end(&h);
    fc_cache_key_begin(&h);
    fc_cache_key_add_u64(&h, 12041);
    b = fc_cache_key_end(&h);
    CHECK(!fc_cache_key_equal(&a, &b));

    /* The recipe is frozen for format version 1: if this changes, old
     * entries would be unreachable garbage, so bump FC_CACHE_FORMAT_VERSION
     * and update the expected value together. */
    fc_cache_key_begin(&h);
    a = fc_cache_key_end(&h);
    fc_cache_key_hex(&a, hex);
    CHECK_EQ_INT(FC_CACHE_FORMAT_VERSION, 1);
    CHECK_STR(hex, "5273ed00c9c10872db272b904e638a7c");

    /* Hex: 32 lowercase digits, round trip, strict parsing. */
    a = key_of("hex");
    fc_cache_key_hex(&a, hex);
    CHECK_EQ_INT(strlen(hex), 32);
    CHECK(strspn(hex, "0123456789abcdef") == 32);
    CHECK(fc_cache_key_from_hex(hex, 32, &b) && fc_cache_key_equal(&a, &b));
    CHECK(!fc_cache_key_from_hex(hex, 31, &b));
    char upper[33];
    snprintf(upper, sizeof upper, "%s", hex);
    for (char *p = upper; *p; p++)
        if (*p >= 'a') *p = (char)(*p - 32);
    if (strcmp(upper, hex) != 0) CHECK(!fc_cache_key_from_hex(upper, 32, &b));
    CHECK(!fc_cache_key_from_hex("zz000000000000000000000000000000", 32, &b));
}

static void test_parse_size(void) {
    uint64_t v = 0;
    CHECK(fc_cache_parse_size("1", &v) && v == 1);
    CHECK(fc_cache_parse_size("4096", &v) && v == 4096);
    CHECK(fc_cache_parse_size("64M", &v) && v == 64ull << 20);
    CHECK(fc_cache_parse_size("1G", &v) && v == 1ull << 30);
    CHECK(fc_cache_parse_size("1GiB", &v) && v == 1ull << 30);
    CHECK(fc_cache_parse_size("2k", &v) && v == 2048);
    CHECK(fc_cache_parse_size("10MB", &v) && v == 10ull << 20);
    CHECK(fc_cache_parse_size("3T", &v) && v == 3ull << 40);
    CHECK(!fc_cache_parse_size("", &v));
    CHECK(!fc_cache_parse_size("0", &v));
    CHECK(!fc_cache_parse_size("abc", &v));
    CHECK(!fc_cache_parse_size("1X", &v));
    CHECK(!fc_cache_parse_size("-1", &v));
    CHECK(!fc_cache_parse_size(" 1", &v));
    CHECK(!fc_cache_parse_size("1 G", &v));
    CHECK(!fc_cache_parse_size("99999999999999999999", &v));
    CHECK(!fc_cache_parse_size("20000000T", &v));
    CHECK(!fc_cache_parse_size(NULL, &v));
}

/* ------------------------------------------------------------------ */
/* Round trips, layout, permissions.                                   */
/* ------------------------------------------------------------------ */
static void test_roundtrip(void) {
    char base[256], dir[300];
    fresh_dir(base, sizeof base, dir, sizeof dir);
    fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK(c && fc_cache_disk_enabled(c));
    CHECK(fc_cache_take_warning(c) == NULL);

    static unsigned char big[1 << 20], other[3000];
    fill(big, sizeof big, 1);
    fill(other, sizeof other, 2);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "k1", big, sizeof big), 0); /* miss */
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "k1", big, sizeof big), FC_OK);
    CHECK_EQ_INT(put(c, FC_CACHE_PROGRAM, "k1", other, sizeof other), FC_OK); /* same key, other level */
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "empty", "", 0), FC_OK);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "k1", big, sizeof big), 1);
    CHECK_EQ_INT(get_check(c, FC_CACHE_PROGRAM, "k1", other, sizeof other), 1);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "empty", "", 0), 1);
    fc_cache_close(c);

    /* A new handle has an empty in-process layer: these come from disk. */
    c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "k1", big, sizeof big), 1);
    CHECK_EQ_INT(get_check(c, FC_CACHE_PROGRAM, "k1", other, sizeof other), 1);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "empty", "", 0), 1);
    CHECK_EQ_INT(get_check(c, FC_CACHE_PROGRAM, "empty", "", 0), 0);
    /* A zero-byte hit is still a non-NULL buffer. */
    fc_cache_key k = key_of("empty");
    void *data = NULL;
    size_t n = 99;
    CHECK_EQ_INT(fc_cache_get(c, ctx, FC_CACHE_KERNEL, &k, &data, &n), FC_OK);
    CHECK(data != NULL && n == 0);
    fc_free(data);
    /* Replacing an entry gives the new bytes. */
    put_reopen_get(c, dir, FC_CACHE_PROGRAM, "k1", big, 100);
    rm_rf(base);
}

static void test_layout_and_permissions(void) {
    char base[256], dir[300], path[4096], want[4096];
    fresh_dir(base, sizeof base, dir, sizeof dir);
    /* Missing parents: created too, with the default mode. */
    snprintf(dir, sizeof dir, "%s/a/b/cache", base);
    mode_t old = umask(022);
    fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK(c && fc_cache_disk_enabled(c));
    CHECK_STR(fc_cache_dir(c), dir);
    snprintf(path, sizeof path, "%s/a", base);
    CHECK_EQ_INT(mode_of(path), 0755);
    snprintf(path, sizeof path, "%s/a/b", base);
    CHECK_EQ_INT(mode_of(path), 0755);
    CHECK_EQ_INT(mode_of(dir), 0700);
    snprintf(path, sizeof path, "%s/v1", dir);
    CHECK_EQ_INT(mode_of(path), 0700);
    snprintf(path, sizeof path, "%s/v1/kernels", dir);
    CHECK_EQ_INT(mode_of(path), 0700);
    snprintf(path, sizeof path, "%s/v1/programs", dir);
    CHECK_EQ_INT(mode_of(path), 0700);

    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "layout", "cubin bytes", 11), FC_OK);
    fc_cache_key k = key_of("layout");
    char hex[FC_CACHE_KEY_HEX_SIZE];
    fc_cache_key_hex(&k, hex);
    snprintf(want, sizeof want, "%s/v1/kernels/%s.bin", dir, hex);
    entry_path(c, FC_CACHE_KERNEL, "layout", path, sizeof path);
    CHECK_STR(path, want);
    CHECK(exists(want));
    CHECK_EQ_INT(mode_of(want), 0600);
    CHECK_EQ_INT(file_size(want), FC_CACHE_HEADER_SIZE + 11);
    /* The header starts with the magic and the version. */
    FILE *f = fopen(want, "rb");
    unsigned char head[16] = {0};
    CHECK(f && fread(head, 1, 16, f) == 16);
    if (f) fclose(f);
    CHECK(memcmp(head, "FUSECACH", 8) == 0);
    CHECK_EQ_INT(head[8], FC_CACHE_FORMAT_VERSION);
    /* No temporary file left behind; stats written 0600. */
    snprintf(path, sizeof path, "%s/v1/kernels", dir);
    CHECK_EQ_INT(count_names(path, ".tmp-"), 0);
    snprintf(path, sizeof path, "%s/v1/stats", dir);
    CHECK(exists(path));
    CHECK_EQ_INT(mode_of(path), 0600);
    fc_cache_close(c);

    /* Even under a permissive umask the cache's own modes hold. */
    umask(0);
    snprintf(dir, sizeof dir, "%s/c2", base);
    c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK(c && fc_cache_disk_enabled(c));
    CHECK_EQ_INT(mode_of(dir), 0700);
    snprintf(path, sizeof path, "%s/v1/programs", dir);
    CHECK_EQ_INT(mode_of(path), 0700);
    CHECK_EQ_INT(put(c, FC_CACHE_PROGRAM, "p", "x", 1), FC_OK);
    entry_path(c, FC_CACHE_PROGRAM, "p", path, sizeof path);
    CHECK_EQ_INT(mode_of(path), 0600);
    fc_cache_close(c);
    umask(old);
    rm_rf(base);
}

/* ------------------------------------------------------------------ */
/* Damaged entries: a miss, counted as corrupt, removed, and rebuilt.  */
/* ------------------------------------------------------------------ */
enum damage { FLIP_PAYLOAD, TRUNCATE, EXTEND, ZERO_LENGTH, SHORT_HEADER, WRONG_VERSION, WRONG_MAGIC,
              WRONG_LEVEL, WRONG_KEY, RESERVED, FLIP_CHECKSUM, DAMAGE_COUNT };

static void damage(const char *path, enum damage d, const char *other_entry) {
    switch (d) {
    case FLIP_PAYLOAD: flip_byte(path, FC_CACHE_HEADER_SIZE + 5); break;
    case TRUNCATE: if (truncate(path, file_size(path) - 1) != 0) perror("truncate"); break;
    case EXTEND: {
        FILE *f = fopen(path, "ab");
        fputc('x', f);
        fclose(f);
        break;
    }
    case ZERO_LENGTH: if (truncate(path, 0) != 0) perror("truncate"); break;
    case SHORT_HEADER: if (truncate(path, 10) != 0) perror("truncate"); break;
    case WRONG_VERSION: flip_byte(path, 8); break;
    case WRONG_MAGIC: flip_byte(path, 0); break;
    case WRONG_LEVEL: flip_byte(path, 12); break;
    case WRONG_KEY: { /* a good entry of another key, under this key's name */
        if (rename(other_entry, path) != 0) perror("rename");
        break;
    }
    case RESERVED: flip_byte(path, 60); break;
    case FLIP_CHECKSUM: flip_byte(path, 30); break;
    case DAMAGE_COUNT: break;
    }
}

static void test_corrupt_entries(void) {
    char base[256], dir[300], path[4096], other[4096];
    unsigned char payload[5000];
    fill(payload, sizeof payload, 7);
    for (int d = 0; d < DAMAGE_COUNT; d++) {
        fresh_dir(base, sizeof base, dir, sizeof dir);
        fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
        CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "victim", payload, sizeof payload), FC_OK);
        CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "other", payload, 100), FC_OK);
        entry_path(c, FC_CACHE_KERNEL, "victim", path, sizeof path);
        entry_path(c, FC_CACHE_KERNEL, "other", other, sizeof other);
        fc_cache_close(c);

        damage(path, (enum damage)d, other);
        c = open_cache(dir, FC_CACHE_RW, 0); /* fresh: nothing in process */
        int r = get_check(c, FC_CACHE_KERNEL, "victim", payload, sizeof payload);
        if (r != 0) fprintf(stderr, "damage %d: get gave %d\n", d, r);
        CHECK_EQ_INT(r, 0);
        CHECK(!exists(path)); /* removed */
        CHECK_EQ_INT(counter(c, FC_CACHE_CORRUPT), 1);
        CHECK_EQ_INT(counter(c, FC_CACHE_MISSES), 1);
        CHECK_EQ_INT(counter(c, FC_CACHE_HITS), 0);
        /* Rebuilt: put again, and a fresh handle reads it from disk. */
        put_reopen_get(c, dir, FC_CACHE_KERNEL, "victim", payload, sizeof payload);
        rm_rf(base);
    }

    /* Not a regular file where an entry should be: refused, not followed. */
    fresh_dir(base, sizeof base, dir, sizeof dir);
    fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
    entry_path(c, FC_CACHE_KERNEL, "link", path, sizeof path);
    snprintf(other, sizeof other, "%s/target", base);
    write_file(other, "secret", 6);
    CHECK(symlink(other, path) == 0);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "link", "secret", 6), 0);
    CHECK(!exists(path));
    CHECK(exists(other)); /* the link went, not its target */
    entry_path(c, FC_CACHE_KERNEL, "fifo", path, sizeof path);
    CHECK(mkfifo(path, 0600) == 0);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "fifo", "", 0), 0); /* and does not hang */
    CHECK(!exists(path));
    CHECK_EQ_INT(counter(c, FC_CACHE_CORRUPT), 2);
    fc_cache_close(c);
    rm_rf(base);
}

/* ------------------------------------------------------------------ */
/* Unsafe directories are refused, with a one-time warning.            */
/* ------------------------------------------------------------------ */
static void check_refused(const char *dir, unsigned mode, const char *why) {
    fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK(c != NULL);
    if (!c) return;
    CHECK(!fc_cache_disk_enabled(c));
    const char *w = fc_cache_take_warning(c);
    CHECK(w != NULL);
    if (w) {
        if (!strstr(w, why) || !strstr(w, "running without the cache") || strncmp(w, "fusec: warning: ", 16) != 0)
            fprintf(stderr, "mode %o: warning '%s'\n", mode, w);
        CHECK(strstr(w, why) != NULL);
        CHECK(strstr(w, "running without the cache") != NULL);
        CHECK(strncmp(w, "fusec: warning: ", 16) == 0);
    }
    CHECK(fc_cache_take_warning(c) == NULL); /* once */
    /* Nothing is written there... */
    char path[4096];
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "planted?", "x", 1), FC_OK);
    entry_path(c, FC_CACHE_KERNEL, "planted?", path, sizeof path);
    CHECK(!exists(path));
    /* ...but the in-process layer still spares a second compile. */
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "planted?", "x", 1), 1);
    /* Maintenance refuses; info describes. */
    fc_cache_verify_result vr;
    CHECK_EQ_INT(fc_cache_verify(c, ctx, true, &vr), FC_ERR_RUNTIME);
    CHECK_EQ_INT(fc_cache_clear(c, ctx, NULL, NULL), FC_ERR_RUNTIME);
    CHECK(strstr(fc_last_error(ctx), why) != NULL);
    fc_cache_summary s;
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    CHECK(!s.disk_enabled && s.disabled_reason && strstr(s.disabled_reason, why));
    fc_cache_close(c);
}

static void test_unsafe_dirs(void) {
    char base[256], dir[300], path[4096];
    fresh_dir(base, sizeof base, dir, sizeof dir);
    CHECK(mkdir(dir, 0700) == 0);
    /* A planted entry in an unsafe directory must not be read. */
    fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "planted", "evil", 4), FC_OK);
    fc_cache_close(c);

    chmod(dir, 0777);
    check_refused(dir, 0777, "is writable by others");
    c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "planted", "evil", 4), 0);
    fc_cache_close(c);
    chmod(dir, 0770);
    check_refused(dir, 0770, "is writable by its group");
    chmod(dir, 0702);
    check_refused(dir, 0702, "is writable by others");

    /* A subdirectory counts as much as the root. */
    chmod(dir, 0700);
    snprintf(path, sizeof path, "%s/v1/kernels", dir);
    chmod(path, 0722);
    check_refused(dir, 0722, "is writable by others");
    chmod(path, 0700);

    /* A read-only reader is just as exposed. */
    chmod(dir, 0777);
    c = open_cache(dir, FC_CACHE_RO, 0);
    CHECK(!fc_cache_disk_enabled(c));
    CHECK(fc_cache_take_warning(c) != NULL);
    fc_cache_close(c);
    chmod(dir, 0700);

    /* Readable by others is fine (only writing is dangerous). */
    chmod(dir, 0755);
    c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK(fc_cache_disk_enabled(c));
    CHECK(fc_cache_take_warning(c) == NULL);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "planted", "evil", 4), 1);
    fc_cache_close(c);

    /* Another user's directory (needs root to set up). */
    if (geteuid() == 0) {
        chmod(dir, 0700);
        CHECK(chown(dir, 65534, 65534) == 0);
        check_refused(dir, 0700, "belongs to another user");
        CHECK(chown(dir, 0, 0) == 0);
    }

    /* Not a directory at all. */
    snprintf(path, sizeof path, "%s/file", base);
    write_file(path, "x", 1);
    c = open_cache(path, FC_CACHE_RW, 0);
    CHECK(c && !fc_cache_disk_enabled(c));
    CHECK(fc_cache_take_warning(c) != NULL);
    fc_cache_close(c);
    rm_rf(base);
}

/* ------------------------------------------------------------------ */
/* Modes and the environment.                                          */
/* ------------------------------------------------------------------ */
static void test_modes(void) {
    char base[256], dir[300], path[4096];
    fresh_dir(base, sizeof base, dir, sizeof dir);

    /* ro on a missing directory creates nothing and just misses. */
    fc_cache *c = open_cache(dir, FC_CACHE_RO, 0);
    CHECK(c != NULL);
    CHECK(fc_cache_take_warning(c) == NULL);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "a", "A", 1), 0);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "a", "A", 1), FC_OK);
    CHECK(!exists(dir));
    fc_cache_close(c);

    c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "a", "A", 1), FC_OK);
    fc_cache_close(c);
    c = open_cache(dir, FC_CACHE_RO, 0);
    entry_path(c, FC_CACHE_KERNEL, "a", path, sizeof path);
    time_t past = time(NULL) - 1000;
    set_mtime(path, past);
    char stats[4096];
    snprintf(stats, sizeof stats, "%s/v1/stats", dir);
    long long stats_size = file_size(stats);
    /* ro reads... */
    CHECK(fc_cache_disk_enabled(c));
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "a", "A", 1), 1);
    /* ...never writes: no entry, no LRU touch, no stats. */
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "b", "B", 1), FC_OK);
    char pb[4096];
    entry_path(c, FC_CACHE_KERNEL, "b", pb, sizeof pb);
    CHECK(!exists(pb));
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "b", "B", 1), 1); /* in process only */
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_mtime == past);
    fc_cache_close(c);
    CHECK_EQ_INT(file_size(stats), stats_size);
    /* ro leaves even a damaged entry in place (it is still never returned). */
    flip_byte(path, FC_CACHE_HEADER_SIZE);
    c = open_cache(dir, FC_CACHE_RO, 0);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "a", "A", 1), 0);
    CHECK(exists(path));
    fc_cache_close(c);
    flip_byte(path, FC_CACHE_HEADER_SIZE);

    /* off: nothing read, written or counted. */
    c = open_cache(dir, FC_CACHE_OFF, 0);
    CHECK(!fc_cache_disk_enabled(c));
    CHECK(fc_cache_take_warning(c) == NULL);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "a", "A", 1), 0);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "c", "C", 1), FC_OK);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "c", "C", 1), 0);
    fc_cache_note_compile(c);
    fc_cache_summary s;
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    CHECK_EQ_INT(s.mode, FC_CACHE_OFF);
    CHECK_EQ_INT(s.counters[FC_CACHE_HITS] + s.counters[FC_CACHE_MISSES] + s.counters[FC_CACHE_COMPILES], 0);
    CHECK_EQ_INT(s.entries[FC_CACHE_KERNEL], 1); /* info still describes the directory */
    fc_cache_close(c);
    c = open_cache(dir, FC_CACHE_RW, 0);
    entry_path(c, FC_CACHE_KERNEL, "c", path, sizeof path);
    CHECK(!exists(path));
    fc_cache_close(c);

    /* The environment: FUSEC_CACHE, FUSEC_CACHE_DIR, FUSEC_CACHE_MAX_BYTES. */
    setenv("FUSEC_CACHE", "ro", 1);
    setenv("FUSEC_CACHE_DIR", dir, 1);
    setenv("FUSEC_CACHE_MAX_BYTES", "64M", 1);
    c = open_cache(NULL, FC_CACHE_MODE_ENV, 0);
    CHECK(c && fc_cache_mode_of(c) == FC_CACHE_RO);
    CHECK_STR(fc_cache_dir(c), dir);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "a", "A", 1), 1);
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    CHECK_EQ_INT(s.max_bytes, 64ull << 20);
    fc_cache_close(c);
    /* Explicit options win over the environment. */
    snprintf(path, sizeof path, "%s/explicit", base);
    c = open_cache(path, FC_CACHE_RW, 1000);
    CHECK(c && fc_cache_mode_of(c) == FC_CACHE_RW);
    CHECK_STR(fc_cache_dir(c), path);
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    CHECK_EQ_INT(s.max_bytes, 1000);
    fc_cache_close(c);

    fc_cache *bad = (fc_cache *)1;
    setenv("FUSEC_CACHE", "maybe", 1);
    CHECK_EQ_INT(fc_cache_open(ctx, NULL, &bad), FC_ERR_USAGE);
    CHECK(bad == NULL);
    CHECK(strstr(fc_last_error(ctx), "FUSEC_CACHE") != NULL);
    setenv("FUSEC_CACHE", "off", 1);
    c = open_cache(NULL, FC_CACHE_MODE_ENV, 0);
    CHECK(c && fc_cache_mode_of(c) == FC_CACHE_OFF);
    fc_cache_close(c);
    unsetenv("FUSEC_CACHE");
    setenv("FUSEC_CACHE_MAX_BYTES", "lots", 1);
    CHECK_EQ_INT(fc_cache_open(ctx, NULL, &bad), FC_ERR_USAGE);
    CHECK(strstr(fc_last_error(ctx), "FUSEC_CACHE_MAX_BYTES") != NULL);
    unsetenv("FUSEC_CACHE_MAX_BYTES");

    /* Default locations: $XDG_CACHE_HOME/fusec, then $HOME/.cache/fusec. */
    unsetenv("FUSEC_CACHE_DIR");
    char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    char *xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
    setenv("XDG_CACHE_HOME", base, 1);
    c = open_cache(NULL, FC_CACHE_MODE_ENV, 0);
    snprintf(path, sizeof path, "%s/fusec", base);
    CHECK_STR(fc_cache_dir(c), path);
    CHECK_EQ_INT(mode_of(path), 0700);
    fc_cache_close(c);
    setenv("XDG_CACHE_HOME", "relative/ignored", 1);
    setenv("HOME", base, 1);
    c = open_cache(NULL, FC_CACHE_MODE_ENV, 0);
    snprintf(path, sizeof path, "%s/.cache/fusec", base);
    CHECK_STR(fc_cache_dir(c), path);
    CHECK(fc_cache_disk_enabled(c));
    CHECK_EQ_INT(mode_of(path), 0700);
    fc_cache_close(c);
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    c = open_cache(NULL, FC_CACHE_MODE_ENV, 0);
    CHECK(c && !fc_cache_disk_enabled(c));
    const char *w = fc_cache_take_warning(c);
    CHECK(w && strstr(w, "FUSEC_CACHE_DIR"));
    fc_cache_close(c);
    if (home) setenv("HOME", home, 1);
    if (xdg) setenv("XDG_CACHE_HOME", xdg, 1);
    free(home);
    free(xdg);
    rm_rf(base);
}

/* ------------------------------------------------------------------ */
/* LRU eviction.                                                       */
/* ------------------------------------------------------------------ */
static void test_lru_eviction(void) {
    char base[256], dir[300], pa[4096], pb[4096], pc[4096], pd[4096], pe[4096];
    fresh_dir(base, sizeof base, dir, sizeof dir);
    unsigned char payload[1000];
    fill(payload, sizeof payload, 3);
    const uint64_t entry = FC_CACHE_HEADER_SIZE + sizeof payload;
    const uint64_t limit = 3 * entry + 500; /* room for three entries */

    fc_cache *c = open_cache(dir, FC_CACHE_RW, limit);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "A", payload, sizeof payload), FC_OK);
    CHECK_EQ_INT(put(c, FC_CACHE_PROGRAM, "B", payload, sizeof payload), FC_OK);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "C", payload, sizeof payload), FC_OK);
    entry_path(c, FC_CACHE_KERNEL, "A", pa, sizeof pa);
    entry_path(c, FC_CACHE_PROGRAM, "B", pb, sizeof pb);
    entry_path(c, FC_CACHE_KERNEL, "C", pc, sizeof pc);
    entry_path(c, FC_CACHE_KERNEL, "D", pd, sizeof pd);
    entry_path(c, FC_CACHE_KERNEL, "E", pe, sizeof pe);
    CHECK(exists(pa) && exists(pb) && exists(pc));
    fc_cache_close(c);

    /* Written oldest A, then B, then C; then A is read, which makes B the
     * least recently used. File timestamps are coarse, so set them. */
    time_t now = time(NULL);
    set_mtime(pa, now - 300);
    set_mtime(pb, now - 200);
    set_mtime(pc, now - 100);
    c = open_cache(dir, FC_CACHE_RW, limit);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "A", payload, sizeof payload), 1);
    struct stat st;
    CHECK(stat(pa, &st) == 0 && st.st_mtime >= now); /* touched */

    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "D", payload, sizeof payload), FC_OK);
    CHECK(exists(pa));
    CHECK(!exists(pb)); /* evicted: least recently used */
    CHECK(exists(pc));
    CHECK(exists(pd));
    CHECK_EQ_INT(counter(c, FC_CACHE_EVICTIONS), 1);

    /* Next in line is C (A was read, D just written). */
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "E", payload, sizeof payload), FC_OK);
    CHECK(exists(pa) && !exists(pc) && exists(pd) && exists(pe));
    CHECK_EQ_INT(counter(c, FC_CACHE_EVICTIONS), 2);
    fc_cache_summary s;
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    CHECK(s.total_bytes <= limit);
    CHECK_EQ_INT(s.entries[FC_CACHE_KERNEL], 3);

    /* An entry larger than the whole limit stays in process only. */
    static unsigned char huge[8000];
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "huge", huge, sizeof huge), FC_OK);
    char ph[4096];
    entry_path(c, FC_CACHE_KERNEL, "huge", ph, sizeof ph);
    CHECK(!exists(ph));
    CHECK(exists(pa) && exists(pd) && exists(pe));
    fc_cache_close(c);

    /* Entries of an old format version are never read: they go first. */
    char old[4096];
    snprintf(old, sizeof old, "%s/v9", dir);
    mkdir(old, 0700);
    snprintf(old, sizeof old, "%s/v9/kernels", dir);
    mkdir(old, 0700);
    snprintf(old, sizeof old, "%s/v9/kernels/00000000000000000000000000000000.bin", dir);
    write_file(old, payload, 500);
    set_mtime(old, now - 50);
    set_mtime(pa, now - 40);
    c = open_cache(dir, FC_CACHE_RW, limit);
    CHECK_EQ_INT(put(c, FC_CACHE_PROGRAM, "F", payload, 10), FC_OK);
    CHECK(!exists(old));
    CHECK(exists(pa));
    fc_cache_close(c);
    rm_rf(base);
}

/* ------------------------------------------------------------------ */
/* Clear removes fusec's files and nothing else.                       */
/* ------------------------------------------------------------------ */
static void test_clear(void) {
    char base[256], dir[300], path[4096];
    fresh_dir(base, sizeof base, dir, sizeof dir);
    fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "k1", "1234", 4), FC_OK);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "k2", "12345", 5), FC_OK);
    CHECK_EQ_INT(put(c, FC_CACHE_PROGRAM, "p1", "123456", 6), FC_OK);

    /* Foreign files, some named almost like ours. */
    const char *foreign[] = {
        "foreign.txt",
        "v1/notes.txt",
        "v1/kernels/README",
        "v1/kernels/ABCDEF0123456789ABCDEF0123456789.bin",   /* uppercase: not a name we make */
        "v1/kernels/0123456789abcdef0123456789abcdef.bin.bak",
        "v1/kernels/.tmp-notours",
        "v1/programs/0123456789abcdef0123456789abcdef.txt",
        "v01/kernels/0123456789abcdef0123456789abcdef.bin", /* "v01" is not a version dir */
    };
    snprintf(path, sizeof path, "%s/v01", dir);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/v01/kernels", dir);
    mkdir(path, 0700);
    for (size_t i = 0; i < sizeof foreign / sizeof *foreign; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, foreign[i]);
        write_file(path, "mine", 4);
    }
    /* Ours: a leftover temporary file, and an entry of an older version. */
    char tmpf[4096], old[4096];
    snprintf(tmpf, sizeof tmpf, "%s/v1/programs/.tmp-0123456789abcdef0123456789abcdef-abcdefghij01", dir);
    write_file(tmpf, "partial", 7);
    snprintf(old, sizeof old, "%s/v2", dir);
    mkdir(old, 0700);
    snprintf(old, sizeof old, "%s/v2/programs", dir);
    mkdir(old, 0700);
    snprintf(old, sizeof old, "%s/v2/programs/fedcba9876543210fedcba9876543210.bin", dir);
    write_file(old, "old entry", 9);

    fc_cache_summary s;
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    CHECK_EQ_INT(s.entries[FC_CACHE_KERNEL], 2);
    CHECK_EQ_INT(s.entries[FC_CACHE_PROGRAM], 1);
    CHECK_EQ_INT(s.temp_files, 1);
    CHECK_EQ_INT(s.stale_entries, 1);
    CHECK_EQ_INT(s.stale_bytes, 9);

    uint64_t n = 0, bytes = 0;
    CHECK_EQ_INT(fc_cache_clear(c, ctx, &n, &bytes), FC_OK);
    CHECK_EQ_INT(n, 4);
    CHECK_EQ_INT(bytes, 3 * FC_CACHE_HEADER_SIZE + 4 + 5 + 6 + 7 + 9);
    for (size_t i = 0; i < sizeof foreign / sizeof *foreign; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, foreign[i]);
        if (!exists(path)) fprintf(stderr, "clear removed %s\n", foreign[i]);
        CHECK(exists(path));
    }
    CHECK(!exists(tmpf));
    CHECK(!exists(old));
    snprintf(path, sizeof path, "%s/v2", dir);
    CHECK(!exists(path)); /* an emptied old version goes */
    snprintf(path, sizeof path, "%s/v1/stats", dir);
    CHECK(!exists(path));
    entry_path(c, FC_CACHE_KERNEL, "k1", path, sizeof path);
    CHECK(!exists(path));
    /* The in-process layer is cleared too, and the cache still works. */
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "k1", "1234", 4), 0);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "k1", "1234", 4), FC_OK);
    CHECK(exists(path));
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    CHECK_EQ_INT(s.entries[FC_CACHE_KERNEL], 1);
    CHECK_EQ_INT(s.counters[FC_CACHE_MISSES], 1);
    fc_cache_close(c);

    /* Clearing a cache that does not exist is fine, and creates nothing. */
    snprintf(path, sizeof path, "%s/none", base);
    c = open_cache(path, FC_CACHE_RO, 0);
    CHECK_EQ_INT(fc_cache_clear(c, ctx, &n, &bytes), FC_OK);
    CHECK(n == 0 && bytes == 0 && !exists(path));
    fc_cache_close(c);
    rm_rf(base);
}

/* ------------------------------------------------------------------ */
/* Info and the shared counters.                                       */
/* ------------------------------------------------------------------ */
static void test_info(void) {
    char base[256], dir[300];
    fresh_dir(base, sizeof base, dir, sizeof dir);
    time_t t0 = time(NULL);
    fc_cache *c = open_cache(dir, FC_CACHE_RW, 5000000);
    fc_cache_summary s;
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    CHECK_STR(s.dir, dir);
    CHECK(s.disk_enabled && s.disabled_reason == NULL);
    CHECK_EQ_INT(s.mode, FC_CACHE_RW);
    CHECK_EQ_INT(s.format_version, FC_CACHE_FORMAT_VERSION);
    CHECK_EQ_INT(s.max_bytes, 5000000);
    CHECK(s.total_bytes == 0 && s.oldest == 0 && s.newest == 0);

    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "x", "", 0), 0);           /* miss */
    fc_cache_note_compile(c);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "x", "xxxx", 4), FC_OK);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "x", "xxxx", 4), 1);       /* hit (in process) */
    CHECK_EQ_INT(get_check(c, FC_CACHE_PROGRAM, "y", "", 0), 0);          /* miss */
    fc_cache_note_compile(c);
    CHECK_EQ_INT(put(c, FC_CACHE_PROGRAM, "y", "yyyyyyyy", 8), FC_OK);
    CHECK_EQ_INT(put(c, FC_CACHE_PROGRAM, "z", "zz", 2), FC_OK);

    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    CHECK_EQ_INT(s.entries[FC_CACHE_KERNEL], 1);
    CHECK_EQ_INT(s.entries[FC_CACHE_PROGRAM], 2);
    CHECK_EQ_INT(s.bytes[FC_CACHE_KERNEL], FC_CACHE_HEADER_SIZE + 4);
    CHECK_EQ_INT(s.bytes[FC_CACHE_PROGRAM], 2 * FC_CACHE_HEADER_SIZE + 10);
    CHECK_EQ_INT(s.total_bytes, 3 * FC_CACHE_HEADER_SIZE + 14);
    CHECK_EQ_INT(s.counters[FC_CACHE_HITS], 1);
    CHECK_EQ_INT(s.counters[FC_CACHE_MISSES], 2);
    CHECK_EQ_INT(s.counters[FC_CACHE_COMPILES], 2);
    CHECK_EQ_INT(s.counters[FC_CACHE_BYTES_WRITTEN], 3 * FC_CACHE_HEADER_SIZE + 14);
    CHECK_EQ_INT(s.counters[FC_CACHE_CORRUPT], 0);
    CHECK(s.oldest >= t0 - 1 && s.newest >= s.oldest && s.newest <= time(NULL) + 1);
    CHECK_EQ_INT(s.memory_entries, 3);
    CHECK_EQ_INT(s.memory_bytes, 14);
    CHECK_STR(fc_cache_counter_name(FC_CACHE_COMPILES), "compiles");
    fc_cache_close(c);

    /* The counters persist, and a second handle adds to them. */
    c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK_EQ_INT(get_check(c, FC_CACHE_PROGRAM, "y", "yyyyyyyy", 8), 1); /* hit (disk) */
    fc_cache_close(c);
    c = open_cache(dir, FC_CACHE_RO, 0);
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    CHECK_EQ_INT(s.counters[FC_CACHE_HITS], 2);
    CHECK_EQ_INT(s.counters[FC_CACHE_MISSES], 2);
    CHECK_EQ_INT(s.counters[FC_CACHE_COMPILES], 2);
    CHECK_EQ_INT(s.memory_entries, 0);
    fc_cache_close(c);

    /* A damaged stats file reads as zeros and is rewritten whole. */
    char path[4096];
    snprintf(path, sizeof path, "%s/v1/stats", dir);
    flip_byte(path, 20);
    c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    CHECK_EQ_INT(s.counters[FC_CACHE_HITS], 0);
    fc_cache_note_compile(c);
    CHECK_EQ_INT(fc_cache_flush_stats(c, ctx), FC_OK);
    fc_cache_close(c);
    c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK_EQ_INT(counter(c, FC_CACHE_COMPILES), 1);
    fc_cache_close(c);
    rm_rf(base);
}

/* ------------------------------------------------------------------ */
/* Verify.                                                             */
/* ------------------------------------------------------------------ */
static void test_verify(void) {
    char base[256], dir[300], p1[4096], p2[4096];
    fresh_dir(base, sizeof base, dir, sizeof dir);
    fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "good", "good bytes", 10), FC_OK);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "flipped", "some bytes", 10), FC_OK);
    CHECK_EQ_INT(put(c, FC_CACHE_PROGRAM, "cut", "more bytes", 10), FC_OK);
    entry_path(c, FC_CACHE_KERNEL, "flipped", p1, sizeof p1);
    entry_path(c, FC_CACHE_PROGRAM, "cut", p2, sizeof p2);
    flip_byte(p1, FC_CACHE_HEADER_SIZE + 3);
    CHECK(truncate(p2, FC_CACHE_HEADER_SIZE + 4) == 0);
    /* A good entry in the wrong folder is wrong too. */
    char wrong[4096], src[4096];
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "misplaced", "abc", 3), FC_OK);
    entry_path(c, FC_CACHE_KERNEL, "misplaced", src, sizeof src);
    entry_path(c, FC_CACHE_PROGRAM, "misplaced", wrong, sizeof wrong);
    CHECK(rename(src, wrong) == 0);

    fc_cache_verify_result r;
    CHECK_EQ_INT(fc_cache_verify(c, ctx, false, &r), FC_OK);
    CHECK_EQ_INT(r.checked, 4);
    CHECK_EQ_INT(r.nbad, 3);
    CHECK_EQ_INT(r.nremoved, 0);
    int seen = 0;
    for (size_t i = 0; i < r.nbad; i++) {
        if (strcmp(r.bad[i].path, p1) == 0 && strcmp(r.bad[i].reason, "checksum mismatch") == 0) seen |= 1;
        if (strcmp(r.bad[i].path, p2) == 0 && strstr(r.bad[i].reason, "size mismatch")) seen |= 2;
        if (strcmp(r.bad[i].path, wrong) == 0 && strcmp(r.bad[i].reason, "wrong level") == 0) seen |= 4;
        CHECK(!r.bad[i].removed);
    }
    CHECK_EQ_INT(seen, 7);
    fc_cache_verify_result_free(&r);
    CHECK(exists(p1) && exists(p2) && exists(wrong));

    CHECK_EQ_INT(fc_cache_verify(c, ctx, true, &r), FC_OK);
    CHECK_EQ_INT(r.nbad, 3);
    CHECK_EQ_INT(r.nremoved, 3);
    fc_cache_verify_result_free(&r);
    CHECK(!exists(p1) && !exists(p2) && !exists(wrong));
    CHECK_EQ_INT(fc_cache_verify(c, ctx, true, &r), FC_OK);
    CHECK_EQ_INT(r.checked, 1);
    CHECK_EQ_INT(r.nbad, 0);
    fc_cache_verify_result_free(&r);
    fc_cache_close(c);
    rm_rf(base);
}

/* ------------------------------------------------------------------ */
/* The in-process layer.                                               */
/* ------------------------------------------------------------------ */
static void test_memory_layer(void) {
    char base[256], dir[300], path[4096];
    fresh_dir(base, sizeof base, dir, sizeof dir);
    fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "m", "memory", 6), FC_OK);
    entry_path(c, FC_CACHE_KERNEL, "m", path, sizeof path);
    CHECK(unlink(path) == 0);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "m", "memory", 6), 1); /* without the disk */
    CHECK_EQ_INT(get_check(c, FC_CACHE_PROGRAM, "m", "memory", 6), 0); /* levels are apart */
    fc_cache_close(c);

    /* Read once from disk, then from memory even when the file is gone. */
    c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "m", "memory", 6), FC_OK);
    fc_cache_close(c);
    c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "m", "memory", 6), 1);
    CHECK(unlink(path) == 0);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "m", "memory", 6), 1);
    CHECK_EQ_INT(counter(c, FC_CACHE_HITS), 3); /* one from the first handle, persisted */
    fc_cache_close(c);

    /* The layer is bounded (here by a tiny max_bytes) and drops the least
     * recently used; many entries also exercise its growth. */
    c = open_cache(dir, FC_CACHE_RO, 1000);
    char name[32];
    for (int i = 0; i < 500; i++) {
        snprintf(name, sizeof name, "many%d", i);
        CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, name, "0123456789", 10), FC_OK);
        if (i % 10 == 9) CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "many0", "0123456789", 10), 1); /* keep it hot */
    }
    fc_cache_summary s;
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    CHECK(s.memory_bytes <= 1000);
    CHECK_EQ_INT(s.memory_entries, 100);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "many0", "0123456789", 10), 1);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "many499", "0123456789", 10), 1);
    CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "many1", "0123456789", 10), 0);
    fc_cache_close(c);
    rm_rf(base);
}

/* ------------------------------------------------------------------ */
/* Misuse and allocation failures.                                     */
/* ------------------------------------------------------------------ */
static void test_usage_errors(void) {
    char base[256], dir[300];
    fresh_dir(base, sizeof base, dir, sizeof dir);
    fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
    fc_cache_key k = key_of("k");
    void *data;
    size_t n;
    CHECK_EQ_INT(fc_cache_open(ctx, NULL, NULL), FC_ERR_USAGE);
    fc_cache_options bad = {.mode = (fc_cache_mode)42};
    fc_cache *c2 = NULL;
    CHECK_EQ_INT(fc_cache_open(ctx, &bad, &c2), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_cache_get(NULL, ctx, FC_CACHE_KERNEL, &k, &data, &n), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_cache_get(c, ctx, FC_CACHE_KERNEL, NULL, &data, &n), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_cache_get(c, ctx, FC_CACHE_LEVEL_COUNT, &k, &data, &n), FC_ERR_USAGE);
    CHECK(strstr(fc_last_error(ctx), "level") != NULL);
    CHECK_EQ_INT(fc_cache_get(c, ctx, FC_CACHE_KERNEL, &k, NULL, &n), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_cache_put(c, ctx, FC_CACHE_KERNEL, &k, NULL, 3), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_cache_put(c, ctx, (fc_cache_level)-1, &k, "x", 1), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_cache_info(c, ctx, NULL), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_cache_verify(NULL, ctx, false, NULL), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_cache_clear(NULL, ctx, NULL, NULL), FC_ERR_USAGE);
    fc_cache_close(NULL);
    fc_cache_note_compile(NULL);
    CHECK(fc_cache_take_warning(NULL) == NULL);
    fc_cache_close(c);

    /* A directory we may not write: put reports the error, and the entry
     * still serves this process. (root writes anywhere: skip as root.) */
    if (geteuid() != 0) {
        c = open_cache(dir, FC_CACHE_RW, 0);
        char kd[4096];
        snprintf(kd, sizeof kd, "%s/v1/kernels", dir);
        chmod(kd, 0500);
        CHECK_EQ_INT(fc_cache_put(c, ctx, FC_CACHE_KERNEL, &k, "x", 1), FC_ERR_RUNTIME);
        CHECK(strstr(fc_last_error(ctx), "cannot") != NULL);
        CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "k", "x", 1), 1);
        chmod(kd, 0700);
        fc_cache_close(c);
    }
    rm_rf(base);
}

/* Every allocation, failed in turn: each call fails cleanly (NOMEM) or
 * works, and nothing leaks (LeakSanitizer checks under FUSEC_SANITIZE). */
static void test_alloc_failures(void) {
    char base[256], dir[300];
    fresh_dir(base, sizeof base, dir, sizeof dir);
    fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "disk", "on disk", 7), FC_OK);
    char path[4096];
    entry_path(c, FC_CACHE_KERNEL, "disk", path, sizeof path);
    fc_cache_close(c);
    CHECK(exists(path));

    int completed = 0;
    for (long n = 1; n < 40 && !completed; n++) {
        fc_context *fctx = fc_context_new();
        fc_context_fail_alloc_after(fctx, n);
        fc_cache_options o = {.dir = dir, .mode = FC_CACHE_RW};
        fc_cache *fc = NULL;
        fc_status st = fc_cache_open(fctx, &o, &fc);
        bool ok = st == FC_OK;
        if (ok) {
            fc_cache_key k = key_of("disk"), k2 = key_of("new");
            void *data = NULL;
            size_t size = 0;
            st = fc_cache_get(fc, fctx, FC_CACHE_KERNEL, &k, &data, &size);
            ok = st == FC_OK;
            CHECK(ok || st == FC_ERR_NOMEM);
            if (ok) CHECK(data && size == 7);
            fc_free(data);
            if (ok) {
                st = fc_cache_put(fc, fctx, FC_CACHE_PROGRAM, &k2, "abc", 3);
                ok = st == FC_OK;
                CHECK(ok || st == FC_ERR_NOMEM);
            }
            if (ok) {
                fc_cache_verify_result r;
                st = fc_cache_verify(fc, fctx, false, &r);
                ok = st == FC_OK;
                CHECK(ok || st == FC_ERR_NOMEM);
                fc_cache_verify_result_free(&r);
            }
            fc_cache_close(fc);
        } else {
            CHECK_EQ_INT(st, FC_ERR_NOMEM);
            CHECK(fc == NULL);
        }
        if (!ok) CHECK(strstr(fc_last_error(fctx), "out of memory") != NULL);
        completed = ok;
        fc_context_free(fctx);
    }
    CHECK(completed);
    rm_rf(base);
}

/* ------------------------------------------------------------------ */
/* Trust: the cache serves only what this user alone can write.         */
/* ------------------------------------------------------------------ */
static void test_entry_trust(void) {
    char base[256], dir[300], path[4096], inner[4200];
    unsigned char payload[300];
    fill(payload, sizeof payload, 3);

    /* An entry others can write (0666, 0620): a checksum is not a
     * signature, so it is refused with one warning, removed, rebuilt. */
    const unsigned modes[] = {0666, 0620, 0602};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        fresh_dir(base, sizeof base, dir, sizeof dir);
        fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
        CHECK_EQ_INT(put(c, FC_CACHE_PROGRAM, "p", payload, sizeof payload), FC_OK);
        entry_path(c, FC_CACHE_PROGRAM, "p", path, sizeof path);
        fc_cache_close(c);
        CHECK(chmod(path, modes[m]) == 0);
        c = open_cache(dir, FC_CACHE_RW, 0);
        fc_cache_verify_result vr;
        CHECK_EQ_INT(fc_cache_verify(c, ctx, false, &vr), FC_OK);
        CHECK_EQ_INT(vr.nbad, 1); /* --verify no longer says "0 bad" */
        if (vr.nbad == 1) CHECK(strstr(vr.bad[0].reason, "writable by its group or by others") != NULL);
        fc_cache_verify_result_free(&vr);
        CHECK_EQ_INT(get_check(c, FC_CACHE_PROGRAM, "p", payload, sizeof payload), 0); /* never served */
        const char *w = fc_cache_take_warning(c);
        CHECK(w && strstr(w, "writable by its group or by others") && strstr(w, "not used"));
        CHECK(fc_cache_take_warning(c) == NULL); /* one warning */
        CHECK(!exists(path));
        CHECK_EQ_INT(counter(c, FC_CACHE_CORRUPT), 1);
        CHECK_EQ_INT(counter(c, FC_CACHE_HITS), 0);
        CHECK_EQ_INT(put(c, FC_CACHE_PROGRAM, "p", payload, sizeof payload), FC_OK);
        CHECK_EQ_INT(mode_of(path), 0600);
        fc_cache_close(c);
        c = open_cache(dir, FC_CACHE_RW, 0);
        CHECK_EQ_INT(get_check(c, FC_CACHE_PROGRAM, "p", payload, sizeof payload), 1);
        fc_cache_close(c);
        rm_rf(base);
    }

    /* A directory under an entry's name (with a file in it): removed and
     * rebuilt, by a get or by a put that meets it first. */
    for (int via_put = 0; via_put < 2; via_put++) {
        fresh_dir(base, sizeof base, dir, sizeof dir);
        fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
        entry_path(c, FC_CACHE_KERNEL, "d", path, sizeof path);
        CHECK(mkdir(path, 0700) == 0);
        snprintf(inner, sizeof inner, "%s/x", path);
        write_file(inner, "x", 1);
        if (!via_put) {
            CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "d", payload, sizeof payload), 0);
            CHECK(!exists(path));
            CHECK_EQ_INT(counter(c, FC_CACHE_CORRUPT), 1);
        }
        put_reopen_get(c, dir, FC_CACHE_KERNEL, "d", payload, sizeof payload);
        rm_rf(base);
    }

    /* A socket under an entry's name is damage too, not a read error. */
    fresh_dir(base, sizeof base, dir, sizeof dir);
    {
        fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
        entry_path(c, FC_CACHE_KERNEL, "s", path, sizeof path);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd >= 0 && strlen(path) < sizeof sa.sun_path) {
            memcpy(sa.sun_path, path, strlen(path) + 1);
            CHECK(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
            CHECK(exists(path));
            CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "s", payload, 1), 0);
            CHECK(!exists(path));
            CHECK_EQ_INT(counter(c, FC_CACHE_CORRUPT), 1);
        } else {
            printf("skip: a socket under an entry's name (path too long for a socket)\n");
        }
        if (fd >= 0) close(fd);
        fc_cache_close(c);
    }
    rm_rf(base);

    /* Bytes of a hit that the caller cannot decode: corrupt, not a hit. */
    fresh_dir(base, sizeof base, dir, sizeof dir);
    {
        fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
        CHECK_EQ_INT(put(c, FC_CACHE_PROGRAM, "junk", "junk", 4), FC_OK);
        fc_cache_close(c);
        c = open_cache(dir, FC_CACHE_RW, 0);
        CHECK_EQ_INT(get_check(c, FC_CACHE_PROGRAM, "junk", "junk", 4), 1);
        fc_cache_key k = key_of("junk");
        fc_cache_reject(c, ctx, FC_CACHE_PROGRAM, &k);
        CHECK_EQ_INT(counter(c, FC_CACHE_HITS), 0);
        CHECK_EQ_INT(counter(c, FC_CACHE_CORRUPT), 1);
        CHECK_EQ_INT(counter(c, FC_CACHE_MISSES), 1);
        CHECK_EQ_INT(get_check(c, FC_CACHE_PROGRAM, "junk", "junk", 4), 0); /* gone from memory and disk */
        entry_path(c, FC_CACHE_PROGRAM, "junk", path, sizeof path);
        CHECK(!exists(path));
        fc_cache_close(c);
    }
    rm_rf(base);
}

/* The stats file: a world-writable one or a symlink is not read (its
 * counts are not trusted, and --cache-info does not fail), and the next
 * update replaces it with a file of ours. */
static void test_stats_trust(void) {
    char base[256], dir[300], stats[4096], target[4096];
    for (int kind = 0; kind < 3; kind++) {
        fresh_dir(base, sizeof base, dir, sizeof dir);
        fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
        CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "k", "x", 1), FC_OK);
        CHECK_EQ_INT(get_check(c, FC_CACHE_KERNEL, "k", "x", 1), 1);
        CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "k2", "y", 1), FC_OK); /* flushes a hit */
        fc_cache_close(c);
        snprintf(stats, sizeof stats, "%s/v%u/stats", dir, FC_CACHE_FORMAT_VERSION);
        snprintf(target, sizeof target, "%s/elsewhere", base);
        if (kind == 0) {
            CHECK(chmod(stats, 0666) == 0);
        } else if (kind == 1) {
            CHECK(rename(stats, target) == 0);
            CHECK(symlink(target, stats) == 0);
        } else {
            CHECK(unlink(stats) == 0);
            CHECK(mkdir(stats, 0700) == 0);
        }
        c = open_cache(dir, FC_CACHE_RW, 0);
        fc_cache_summary s;
        CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK); /* a symlink made --cache-info exit 3 */
        CHECK_EQ_INT(s.counters[FC_CACHE_HITS], 0);     /* not trusted, not read */
        CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "k3", "z", 1), FC_OK); /* an update */
        struct stat st;
        CHECK(lstat(stats, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600);
        if (kind == 1) CHECK(lstat(target, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 72); /* untouched */
        fc_cache_close(c);
        rm_rf(base);
    }
}

/* FUSEC_CACHE_DIR set but empty is a usage error, not the default. */
static void test_empty_dir_env(void) {
    setenv("FUSEC_CACHE_DIR", "", 1);
    fc_cache_options o = {.mode = FC_CACHE_RW};
    fc_cache *c = NULL;
    CHECK_EQ_INT(fc_cache_open(ctx, &o, &c), FC_ERR_USAGE);
    CHECK(c == NULL);
    CHECK(strstr(fc_last_error(ctx), "FUSEC_CACHE_DIR is set but empty") != NULL);
    o.mode = FC_CACHE_OFF; /* nothing is read from a directory then */
    CHECK_EQ_INT(fc_cache_open(ctx, &o, &c), FC_OK);
    fc_cache_close(c);
    unsetenv("FUSEC_CACHE_DIR");
}

/* A removal that fails makes clear fail (a read-only file system; here a
 * read-only directory, which only stops a user who is not root). */
static void test_clear_failure(void) {
    if (geteuid() == 0) {
        printf("skip: clear on a read-only directory (root writes anyway; test_cli.sh mounts a read-only one)\n");
        return;
    }
    char base[256], dir[300], level[4096];
    fresh_dir(base, sizeof base, dir, sizeof dir);
    fc_cache *c = open_cache(dir, FC_CACHE_RW, 0);
    CHECK_EQ_INT(put(c, FC_CACHE_KERNEL, "k", "x", 1), FC_OK);
    snprintf(level, sizeof level, "%s/v%u/kernels", dir, FC_CACHE_FORMAT_VERSION);
    CHECK(chmod(level, 0500) == 0);
    uint64_t n = 9;
    CHECK_EQ_INT(fc_cache_clear(c, ctx, &n, NULL), FC_ERR_RUNTIME);
    CHECK(strstr(fc_last_error(ctx), "cannot clear the cache") != NULL);
    CHECK_EQ_INT(n, 0);
    chmod(level, 0700);
    fc_cache_close(c);
    rm_rf(base);
}

int main(void) {
    /* The caller's environment must not steer these tests. */
    unsetenv("FUSEC_CACHE");
    unsetenv("FUSEC_CACHE_DIR");
    unsetenv("FUSEC_CACHE_MAX_BYTES");
    ctx = fc_context_new();
    test_keys();
    test_parse_size();
    test_roundtrip();
    test_layout_and_permissions();
    test_corrupt_entries();
    test_unsafe_dirs();
    test_modes();
    test_lru_eviction();
    test_clear();
    test_info();
    test_verify();
    test_memory_layer();
    test_usage_errors();
    test_alloc_failures();
    test_entry_trust();
    test_stats_trust();
    test_empty_dir_env();
    test_clear_failure();
    fc_context_free(ctx);
    return check_report("test_cache");
}
