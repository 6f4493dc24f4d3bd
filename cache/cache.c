/*
 * cache.c - the cache handle: where the cache lives and whether it is safe
 * to use, get and put (in-process layer, then disk), counters.
 *
 * Maintenance (eviction, info, verify, clear) is in maint.c, the entry file
 * format in entry.c, the shared counters in stats.c, the in-process layer in
 * memo.c. docs/CACHE.md describes the design.
 */
#include "cache_internal.h"
#include "ir/switches.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

/* ------------------------------------------------------------------ */
/* Names.                                                              */
/* ------------------------------------------------------------------ */
const char *fc_cache_level_name(fc_cache_level level) {
    switch (level) {
    case FC_CACHE_KERNEL: return "kernel";
    case FC_CACHE_PROGRAM: return "program";
    case FC_CACHE_ALGO: return "algorithm";
    default: return "?";
    }
}

const char *fc_cache_level_dir(fc_cache_level level) {
    switch (level) {
    case FC_CACHE_KERNEL: return "kernels";
    case FC_CACHE_PROGRAM: return "programs";
    case FC_CACHE_ALGO: return "algos";
    default: return "?";
    }
}

const char *fc_cache_mode_name(fc_cache_mode mode) {
    switch (mode) {
    case FC_CACHE_OFF: return "off";
    case FC_CACHE_RO: return "ro";
    case FC_CACHE_RW: return "rw";
    default: return "env";
    }
}

const char *fc_cache_counter_name(fc_cache_counter k) {
    switch (k) {
    case FC_CACHE_HITS: return "hits";
    case FC_CACHE_MISSES: return "misses";
    case FC_CACHE_COMPILES: return "compiles";
    case FC_CACHE_BYTES_WRITTEN: return "bytes_written";
    case FC_CACHE_CORRUPT: return "corrupt";
    case FC_CACHE_EVICTIONS: return "evictions";
    default: return "?";
    }
}

bool fc_cache_is_entry_name(const char *name, fc_cache_key *key) {
    fc_cache_key k;
    if (strlen(name) != FC_CACHE_ENTRY_NAME_LEN || strcmp(name + 2 * FC_CACHE_KEY_SIZE, ".bin") != 0) return false;
    if (!fc_cache_key_from_hex(name, 2 * FC_CACHE_KEY_SIZE, &k)) return false;
    if (key) *key = k;
    return true;
}

bool fc_cache_is_temp_name(const char *name) {
    fc_cache_key k;
    const size_t pre = strlen(FC_CACHE_TEMP_PREFIX), hex = 2 * FC_CACHE_KEY_SIZE;
    if (strlen(name) != FC_CACHE_TEMP_NAME_LEN || strncmp(name, FC_CACHE_TEMP_PREFIX, pre) != 0) return false;
    if (!fc_cache_key_from_hex(name + pre, hex, &k) || name[pre + hex] != '-') return false;
    for (const char *p = name + pre + hex + 1; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z'))) return false;
    return true;
}

/* ------------------------------------------------------------------ */
/* Configuration.                                                      */
/* ------------------------------------------------------------------ */
bool fc_cache_parse_size(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return false;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    int shift = 0;
    switch (*s) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    default: break;
    }
    if (shift) {
        s++;
        if (*s == 'i' || *s == 'I') s++;
        if (v > (UINT64_MAX >> shift)) return false;
        v <<= shift;
    }
    if (*s == 'b' || *s == 'B') s++;
    if (*s || v == 0) return false;
    *out = v;
    return true;
}

static fc_status mode_from_env(fc_context *ctx, fc_cache_mode *mode) {
    const char *e = fc_switch_raw(FC_SW_CACHE);
    if (!e || !*e || strcmp(e, "rw") == 0) *mode = FC_CACHE_RW;
    else if (strcmp(e, "ro") == 0) *mode = FC_CACHE_RO;
    else if (strcmp(e, "off") == 0) *mode = FC_CACHE_OFF;
    else return fc_set_error(ctx, FC_ERR_USAGE, "FUSEC_CACHE must be off, ro or rw (it is '%s')", e);
    return FC_OK;
}

static fc_status max_from_env(fc_context *ctx, uint64_t *max) {
    const char *e = fc_switch_raw(FC_SW_CACHE_MAX_BYTES);
    if (!e || !*e) {
        *max = FC_CACHE_DEFAULT_MAX_BYTES;
        return FC_OK;
    }
    if (!fc_cache_parse_size(e, max))
        return fc_set_error(ctx, FC_ERR_USAGE,
                            "FUSEC_CACHE_MAX_BYTES must be a size such as 1073741824, 512M or 1G (it is '%s')", e);
    return FC_OK;
}

/* A FUSEC_CACHE_DIR that is set but empty is a mistake (a script's unset
 * variable, say), not a request for the default: the cache would then
 * land somewhere the user did not name. */
static fc_status dir_from_env(fc_context *ctx, const fc_cache_options *o) {
    const char *e = fc_switch_raw(FC_SW_CACHE_DIR);
    if ((o->dir && *o->dir) || o->mode == FC_CACHE_OFF || !e || *e) return FC_OK;
    return fc_set_error(ctx, FC_ERR_USAGE,
                        "FUSEC_CACHE_DIR is set but empty: name a directory, or unset it for the default");
}

/* The root: the option, $FUSEC_CACHE_DIR, $XDG_CACHE_HOME/fusec (XDG wants
 * it absolute; a relative one is ignored), $HOME/.cache/fusec. False when
 * none is known or the path is too long (c->reason says which). HOME and
 * XDG_CACHE_HOME are the system's variables, not fusec switches, so they
 * are read directly. */
static bool find_root(fc_cache *c, const char *opt_dir) {
    const char *e;
    int n;
    if (opt_dir && *opt_dir) n = snprintf(c->dir, sizeof c->dir, "%s", opt_dir);
    else if ((e = fc_switch_raw(FC_SW_CACHE_DIR)) && *e) n = snprintf(c->dir, sizeof c->dir, "%s", e);
    else if ((e = fc_switch_env("XDG_CACHE_HOME")) && e[0] == '/') n = snprintf(c->dir, sizeof c->dir, "%s/fusec", e);
    else if ((e = fc_switch_env("HOME")) && *e) n = snprintf(c->dir, sizeof c->dir, "%s/.cache/fusec", e);
    else {
        snprintf(c->reason, sizeof c->reason, "no cache directory: set FUSEC_CACHE_DIR or HOME");
        return false;
    }
    /* Room is left for "/v<N>/programs/<name>" under the root. */
    if (n < 0 || (size_t)n + 128 >= sizeof c->dir) {
        snprintf(c->reason, sizeof c->reason, "cache directory path is too long");
        c->dir[0] = 0;
        return false;
    }
    /* Trailing slashes would double up in messages. */
    while (n > 1 && c->dir[n - 1] == '/') c->dir[--n] = 0;
    return true;
}

/* ------------------------------------------------------------------ */
/* Directories.                                                        */
/* ------------------------------------------------------------------ */

/* mkdir -p: missing parents with the default mode (0777 less the umask),
 * the last component 0700. Sets *created when the last one was made here. */
static int mkdir_p(const char *path, bool *created) {
    char buf[FC_CACHE_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    *created = false;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0700) == 0) *created = true;
    else if (errno != EEXIST) return -1;
    return 0;
}

/* A directory may hold the cache only if this user owns it and nobody else
 * can write it: whoever can write the cache can plant a cubin that this
 * process will load and run. Checked on the open descriptor itself. */
static bool dir_is_safe(int fd, char *why, size_t n) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(why, n, "cannot be examined (%s)", strerror(errno));
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, n, "is not a directory");
        return false;
    }
    if (st.st_uid != geteuid()) {
        snprintf(why, n, "belongs to another user (uid %lu)", (unsigned long)st.st_uid);
        return false;
    }
    if (st.st_mode & S_IWOTH) {
        snprintf(why, n, "is writable by others");
        return false;
    }
    if (st.st_mode & S_IWGRP) {
        snprintf(why, n, "is writable by its group");
        return false;
    }
    return true;
}

/* Turn the disk cache off, with a reason and (unless quiet) a warning. */
static void disable(fc_cache *c, bool quiet, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void disable(fc_cache *c, bool quiet, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->reason, sizeof c->reason, fmt, ap);
    va_end(ap);
    if (!quiet) snprintf(c->warning, sizeof c->warning, "fusec: warning: %s; running without the cache", c->reason);
    if (c->root_fd >= 0) close(c->root_fd);
    if (c->ver_fd >= 0) close(c->ver_fd);
    for (int l = 0; l < FC_CACHE_LEVEL_COUNT; l++)
        if (c->level_fd[l] >= 0) close(c->level_fd[l]);
    c->root_fd = c->ver_fd = -1;
    for (int l = 0; l < FC_CACHE_LEVEL_COUNT; l++) c->level_fd[l] = -1;
}

/* Open (creating it if asked) the subdirectory `name` of parent and check
 * it. Returns the fd, or -1 with c disabled, or -1 quietly if it is just
 * missing and not to be created. */
static int open_subdir(fc_cache *c, int parent, const char *name, const char *shown, bool create, bool quiet) {
    bool created = false;
    if (create) {
        if (mkdirat(parent, name, 0700) == 0) created = true;
        else if (errno != EEXIST) {
            disable(c, quiet, "cannot create cache directory %s: %s", shown, strerror(errno));
            return -1;
        }
    }
    /* O_NOFOLLOW: the subdirectories are real directories, never links. */
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT || create) disable(c, quiet, "cannot open cache directory %s: %s", shown, strerror(errno));
        return -1;
    }
    if (created) (void)fchmod(fd, 0700); /* exactly 0700, whatever the umask */
    char why[128];
    if (!dir_is_safe(fd, why, sizeof why)) {
        close(fd);
        c->unsafe = true;
        disable(c, quiet, "cache directory %s %s", shown, why);
        return -1;
    }
    return fd;
}

/* Find, create (rw) and check the directories. Never fails: trouble turns
 * the disk cache off with a reason (and a warning unless the mode is off). */
static void setup_dirs(fc_cache *c, const char *opt_dir) {
    bool create = c->mode == FC_CACHE_RW;
    bool quiet = c->mode == FC_CACHE_OFF;
    if (!find_root(c, opt_dir)) {
        if (!quiet) snprintf(c->warning, sizeof c->warning, "fusec: warning: %s; running without the cache", c->reason);
        return;
    }
    /* Fits: find_root left room. */
    if (snprintf(c->ver_dir, sizeof c->ver_dir, "%s/v%u", c->dir, FC_CACHE_FORMAT_VERSION) >= (int)sizeof c->ver_dir)
        return;

    bool created = false;
    if (create && mkdir_p(c->dir, &created) != 0) {
        disable(c, quiet, "cannot create cache directory %s: %s", c->dir, strerror(errno));
        return;
    }
    /* The root may be a symlink (say ~/.cache -> /data/cache): follow it,
     * and check what it leads to. */
    c->root_fd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (c->root_fd < 0) {
        /* Missing in ro/off mode: an empty cache, nothing to warn about. */
        disable(c, quiet || errno == ENOENT, "cannot open cache directory %s: %s", c->dir, strerror(errno));
        return;
    }
    if (created) (void)fchmod(c->root_fd, 0700);
    char why[128];
    if (!dir_is_safe(c->root_fd, why, sizeof why)) {
        c->unsafe = true;
        disable(c, quiet, "cache directory %s %s", c->dir, why);
        return;
    }

    char vname[16], shown[FC_CACHE_PATH_MAX + 32];
    snprintf(vname, sizeof vname, "v%u", FC_CACHE_FORMAT_VERSION);
    c->ver_fd = open_subdir(c, c->root_fd, vname, c->ver_dir, create, quiet);
    if (c->ver_fd < 0) return; /* disabled, or missing (ro/off: an empty cache) */
    for (int l = 0; l < FC_CACHE_LEVEL_COUNT; l++) {
        snprintf(shown, sizeof shown, "%s/%s", c->ver_dir, fc_cache_level_dir((fc_cache_level)l));
        c->level_fd[l] = open_subdir(c, c->ver_fd, fc_cache_level_dir((fc_cache_level)l), shown, create, quiet);
        if (c->root_fd < 0) return; /* disabled */
    }
}

/* ------------------------------------------------------------------ */
/* Open, close, accessors.                                             */
/* ------------------------------------------------------------------ */
fc_status fc_cache_open(fc_context *ctx, const fc_cache_options *opts, fc_cache **out) {
    if (!out) return fc_set_error(ctx, FC_ERR_USAGE, "fc_cache_open: out is NULL");
    *out = NULL;
    fc_cache_options o = {0};
    if (opts) o = *opts;
    if (o.mode != FC_CACHE_MODE_ENV && o.mode != FC_CACHE_OFF && o.mode != FC_CACHE_RO && o.mode != FC_CACHE_RW)
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_cache_open: bad mode %d", (int)o.mode);

    fc_status st = FC_OK;
    if (o.mode == FC_CACHE_MODE_ENV && (st = mode_from_env(ctx, &o.mode)) != FC_OK) return st;
    if (o.max_bytes == 0 && (st = max_from_env(ctx, &o.max_bytes)) != FC_OK) return st;
    if ((st = dir_from_env(ctx, &o)) != FC_OK) return st;

    fc_cache *c = fc_ctx_malloc(ctx, sizeof *c);
    if (!c) return FC_ERR_NOMEM;
    memset(c, 0, sizeof *c);
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        fc_ctx_freemem(ctx, c);
        return fc_set_error(ctx, FC_ERR_RUNTIME, "fc_cache_open: cannot create a mutex");
    }
    c->mode = o.mode;
    c->max_bytes = o.max_bytes;
    c->root_fd = c->ver_fd = -1;
    for (int l = 0; l < FC_CACHE_LEVEL_COUNT; l++) c->level_fd[l] = -1;
    fc_memo_init(&c->memo, o.max_bytes < FC_CACHE_MEMORY_MAX_BYTES ? o.max_bytes : FC_CACHE_MEMORY_MAX_BYTES);

    setup_dirs(c, o.dir);
    if (c->mode == FC_CACHE_OFF && !c->reason[0]) snprintf(c->reason, sizeof c->reason, "the cache mode is off");
    *out = c;
    return FC_OK;
}

void fc_cache_close(fc_cache *c) {
    if (!c) return;
    /* Best effort: a handle being closed has nobody left to report to. */
    fc_context scratch = {0};
    (void)fc_cache_flush_stats(c, &scratch);
    if (c->root_fd >= 0) close(c->root_fd);
    if (c->ver_fd >= 0) close(c->ver_fd);
    for (int l = 0; l < FC_CACHE_LEVEL_COUNT; l++)
        if (c->level_fd[l] >= 0) close(c->level_fd[l]);
    fc_memo_release(&c->memo);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

const char *fc_cache_dir(const fc_cache *c) { return c ? c->dir : ""; }
fc_cache_mode fc_cache_mode_of(const fc_cache *c) { return c ? c->mode : FC_CACHE_OFF; }

bool fc_cache_disk_enabled(const fc_cache *c) {
    return c && c->mode != FC_CACHE_OFF && c->root_fd >= 0;
}

const char *fc_cache_take_warning(fc_cache *c) {
    if (!c) return NULL;
    pthread_mutex_lock(&c->lock);
    const char *w = NULL;
    if (c->warning[0] && !c->warning_taken) {
        c->warning_taken = true;
        w = c->warning;
    }
    pthread_mutex_unlock(&c->lock);
    return w;
}

bool fc_cache_entry_path(const fc_cache *c, fc_cache_level level, const fc_cache_key *key, char *buf, size_t n) {
    if (!c || !key || !buf || !c->ver_dir[0] || (unsigned)level >= FC_CACHE_LEVEL_COUNT) return false;
    char hex[FC_CACHE_KEY_HEX_SIZE];
    fc_cache_key_hex(key, hex);
    int k = snprintf(buf, n, "%s/%s/%s.bin", c->ver_dir, fc_cache_level_dir(level), hex);
    return k >= 0 && (size_t)k < n;
}

/* ------------------------------------------------------------------ */
/* Counters.                                                           */
/* ------------------------------------------------------------------ */
static void count(fc_cache *c, fc_cache_counter k, uint64_t n) {
    pthread_mutex_lock(&c->lock);
    c->pending[k] += n;
    pthread_mutex_unlock(&c->lock);
}

void fc_cache_note_compile(fc_cache *c) {
    if (c && c->mode != FC_CACHE_OFF) count(c, FC_CACHE_COMPILES, 1);
}

void fc_cache_note_corrupt(fc_cache *c) {
    if (!c || c->mode == FC_CACHE_OFF) return;
    pthread_mutex_lock(&c->lock);
    /* The hit is still pending unless another thread's put flushed the
     * counts in between; then the shared count keeps it. */
    if (c->pending[FC_CACHE_HITS]) c->pending[FC_CACHE_HITS]--;
    c->pending[FC_CACHE_MISSES]++;
    c->pending[FC_CACHE_CORRUPT]++;
    pthread_mutex_unlock(&c->lock);
}

void fc_cache_reject(fc_cache *c, fc_context *ctx, fc_cache_level level, const fc_cache_key *key) {
    fc_cache_note_corrupt(c);
    fc_context scratch = {0}; /* best effort: the caller's message stays */
    (void)fc_cache_remove(c, &scratch, level, key);
    (void)ctx;
}

fc_status fc_cache_flush_stats(fc_cache *c, fc_context *ctx) {
    if (!c) return fc_set_error(ctx, FC_ERR_USAGE, "fc_cache_flush_stats: cache is NULL");
    /* ro never writes; without a directory the counts stay in process. */
    if (c->mode != FC_CACHE_RW || c->ver_fd < 0) return FC_OK;

    uint64_t delta[FC_CACHE_COUNTER_COUNT];
    bool any = false;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < FC_CACHE_COUNTER_COUNT; i++) {
        delta[i] = c->pending[i];
        c->pending[i] = 0;
        any |= delta[i] != 0;
    }
    pthread_mutex_unlock(&c->lock);
    if (!any) return FC_OK;

    /* The file is updated outside the mutex (it may wait on another
     * process's lock); counts that fail to land go back to pending. */
    fc_status st = fc_stats_add(ctx, c->ver_fd, c->ver_dir, delta);
    if (st != FC_OK) {
        pthread_mutex_lock(&c->lock);
        for (int i = 0; i < FC_CACHE_COUNTER_COUNT; i++) c->pending[i] += delta[i];
        pthread_mutex_unlock(&c->lock);
    }
    return st;
}

/* ------------------------------------------------------------------ */
/* Get.                                                                */
/* ------------------------------------------------------------------ */

/* The largest payload a read accepts: bounds what a planted file can make
 * us allocate, without rejecting entries written under a larger limit. */
static uint64_t max_payload(const fc_cache *c) {
    return c->max_bytes > FC_CACHE_DEFAULT_MAX_BYTES ? c->max_bytes : FC_CACHE_DEFAULT_MAX_BYTES;
}

static fc_status check_args(fc_cache *c, fc_context *ctx, const char *fn, fc_cache_level level,
                            const fc_cache_key *key) {
    if (!c) return fc_set_error(ctx, FC_ERR_USAGE, "%s: cache is NULL", fn);
    if (!key) return fc_set_error(ctx, FC_ERR_USAGE, "%s: key is NULL", fn);
    if ((unsigned)level >= FC_CACHE_LEVEL_COUNT) return fc_set_error(ctx, FC_ERR_USAGE, "%s: bad level %d", fn, (int)level);
    return FC_OK;
}

fc_status fc_cache_get(fc_cache *c, fc_context *ctx, fc_cache_level level, const fc_cache_key *key,
                       void **data, size_t *size) {
    if (!data || !size) return fc_set_error(ctx, FC_ERR_USAGE, "fc_cache_get: data or size is NULL");
    *data = NULL;
    *size = 0;
    fc_status st = check_args(c, ctx, "fc_cache_get", level, key);
    if (st != FC_OK || c->mode == FC_CACHE_OFF) return st;

    /* The in-process layer. */
    bool found = false;
    pthread_mutex_lock(&c->lock);
    st = fc_memo_get(&c->memo, ctx, level, key, data, size, &found);
    if (found) c->pending[FC_CACHE_HITS]++;
    pthread_mutex_unlock(&c->lock);
    if (st != FC_OK || found) return st;

    /* The disk. */
    int dfd = c->level_fd[level];
    if (c->root_fd < 0 || dfd < 0) {
        count(c, FC_CACHE_MISSES, 1);
        return FC_OK;
    }
    char name[FC_CACHE_ENTRY_NAME_LEN + 1];
    fc_cache_key_hex(key, name);
    strcat(name, ".bin");
    void *payload = NULL;
    size_t n = 0;
    struct stat fst;
    int err;
    fc_entry_verdict v = fc_entry_read(ctx, dfd, name, level, key, max_payload(c), c->mode == FC_CACHE_RW,
                                       &payload, &n, &fst, &err);
    switch (v) {
    case FC_ENTRY_OK:
        pthread_mutex_lock(&c->lock);
        st = fc_memo_put(&c->memo, ctx, level, key, payload, n);
        if (st == FC_OK) c->pending[FC_CACHE_HITS]++;
        pthread_mutex_unlock(&c->lock);
        if (st != FC_OK) {
            fc_ctx_freemem(ctx, payload);
            return st;
        }
        *data = payload;
        *size = n;
        return FC_OK;
    case FC_ENTRY_NOMEM:
        return FC_ERR_NOMEM;
    case FC_ENTRY_MISSING:
    case FC_ENTRY_IO_ERROR: /* unreadable is not known to be bad: leave it */
        count(c, FC_CACHE_MISSES, 1);
        return FC_OK;
    default:
        /* Damaged, foreign or writable by others: never returned, and
         * removed (whatever it is) so that the rebuilt entry can take its
         * place (ro mode leaves the disk alone). */
        if (c->mode == FC_CACHE_RW) (void)fc_entry_remove(dfd, name, &fst);
        pthread_mutex_lock(&c->lock);
        if ((v == FC_ENTRY_NOT_OWNED || v == FC_ENTRY_UNSAFE) && !c->warning[0])
            snprintf(c->warning, sizeof c->warning,
                     "fusec: warning: cache entry %s/%s/%s is %s; not used (someone else could have written it), "
                     "compiled again",
                     c->ver_dir, fc_cache_level_dir(level), name, fc_entry_verdict_text(v));
        c->pending[FC_CACHE_CORRUPT]++;
        c->pending[FC_CACHE_MISSES]++;
        pthread_mutex_unlock(&c->lock);
        return FC_OK;
    }
}

/* ------------------------------------------------------------------ */
/* Put.                                                                */
/* ------------------------------------------------------------------ */

static bool write_all(int fd, const void *buf, size_t n) {
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* A name no other writer (thread or process) will pick at the same time;
 * O_EXCL settles the rare clash. */
static void temp_name(char out[FC_CACHE_TEMP_NAME_LEN + 1], const char *hex) {
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed[4] = {(uint64_t)getpid(), atomic_fetch_add(&counter, 1), (uint64_t)ts.tv_sec,
                        (uint64_t)ts.tv_nsec};
    uint64_t r = XXH3_64bits(seed, sizeof seed);
    static const char alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    char rnd[FC_CACHE_TEMP_RANDOM_LEN + 1];
    for (int i = 0; i < FC_CACHE_TEMP_RANDOM_LEN; i++) { /* 36^12 > 2^62: the digits use nearly all of r */
        rnd[i] = alphabet[r % 36];
        r /= 36;
    }
    rnd[FC_CACHE_TEMP_RANDOM_LEN] = 0;
    snprintf(out, FC_CACHE_TEMP_NAME_LEN + 1, "%s%s-%s", FC_CACHE_TEMP_PREFIX, hex, rnd);
}

/*
 * Levels whose entries are put from inside a run, where a put must cost
 * microseconds: cuBLASLt algorithm records, written at a GEMM's first use
 * (an fsync cost ~0.5 ms there). They skip the fsync (a record a crash tears
 * is refused by its checksum and asked for again), and after such a put the
 * eviction scan and the counters' flush (milliseconds with thousands of
 * entries) wait for the next compile's put, or the close.
 */
static bool put_in_run(fc_cache_level level) { return level == FC_CACHE_ALGO; }

/*
 * Write an entry safely: a temporary file in the same directory (created
 * O_EXCL, 0600), all bytes, fsync (except put_in_run levels), then rename
 * over the entry's name.
 * rename is atomic, so a reader sees the old entry, no entry or the whole
 * new one, never a part; fsync before the rename keeps a crash from leaving
 * an entry whose data never reached the disk. Concurrent writers of one key
 * each rename their own complete file; the last rename wins.
 *
 * mkstemp would do for the temporary file, but it takes a path; openat with
 * O_EXCL and our own random suffix keeps every operation relative to the
 * directory descriptor that was checked at open.
 */
static fc_status write_entry(fc_cache *c, fc_context *ctx, fc_cache_level level, const fc_cache_key *key,
                             const void *data, size_t size, char name[FC_CACHE_ENTRY_NAME_LEN + 1]) {
    int dfd = c->level_fd[level];
    const char *shown = fc_cache_level_dir(level);
    char hex[FC_CACHE_KEY_HEX_SIZE], tmp[FC_CACHE_TEMP_NAME_LEN + 1];
    fc_cache_key_hex(key, hex);
    snprintf(name, FC_CACHE_ENTRY_NAME_LEN + 1, "%s.bin", hex);

    int fd = -1;
    for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
        temp_name(tmp, hex);
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0)
        return fc_set_error(ctx, FC_ERR_RUNTIME, "cannot create a cache file in %s/%s: %s", c->ver_dir, shown,
                            strerror(errno));

    uint8_t header[FC_CACHE_HEADER_SIZE];
    fc_entry_header(header, level, key, data, size);
    const char *what = NULL;
    if (!write_all(fd, header, sizeof header) || !write_all(fd, data, size)) what = "write";
    else if (!put_in_run(level) && fsync(fd) != 0) what = "fsync";
    int saved = errno;
    if (close(fd) != 0 && !what) {
        what = "close";
        saved = errno;
    }
    if (!what && renameat(dfd, tmp, dfd, name) != 0) {
        /* A directory under the entry's name: damage, removed, then the
         * rename again (a rename never replaces a directory with a file). */
        if ((errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST) && fc_entry_remove(dfd, name, NULL) &&
            renameat(dfd, tmp, dfd, name) == 0) {
            saved = 0;
        } else {
            what = "rename";
            saved = errno;
        }
    }
    if (what) {
        (void)unlinkat(dfd, tmp, 0);
        return fc_set_error(ctx, FC_ERR_RUNTIME, "cannot store cache entry %s/%s/%s (%s): %s", c->ver_dir, shown,
                            name, what, strerror(saved));
    }
    return FC_OK;
}

fc_status fc_cache_put(fc_cache *c, fc_context *ctx, fc_cache_level level, const fc_cache_key *key,
                       const void *data, size_t size) {
    fc_status st = check_args(c, ctx, "fc_cache_put", level, key);
    if (st != FC_OK) return st;
    if (!data && size) return fc_set_error(ctx, FC_ERR_USAGE, "fc_cache_put: data is NULL");
    if (c->mode == FC_CACHE_OFF) return FC_OK;

    pthread_mutex_lock(&c->lock);
    st = fc_memo_put(&c->memo, ctx, level, key, data, size);
    pthread_mutex_unlock(&c->lock);
    if (st != FC_OK) return st;

    if (c->mode != FC_CACHE_RW || c->root_fd < 0 || c->level_fd[level] < 0) return FC_OK;
    /* An entry that could never fit stays in process only. */
    if (c->max_bytes < FC_CACHE_HEADER_SIZE || (uint64_t)size > c->max_bytes - FC_CACHE_HEADER_SIZE) return FC_OK;

    char name[FC_CACHE_ENTRY_NAME_LEN + 1];
    st = write_entry(c, ctx, level, key, data, size, name);
    if (st != FC_OK) return st;
    count(c, FC_CACHE_BYTES_WRITTEN, FC_CACHE_HEADER_SIZE + (uint64_t)size);

    if (put_in_run(level)) return FC_OK;
    /* The rest is best effort, so it reports to a scratch context: its
     * failures must neither fail the put nor overwrite the caller's message. */
    fc_context scratch = {0};
    uint64_t evicted = fc_cache_evict(c, &scratch, level, name);
    if (evicted) count(c, FC_CACHE_EVICTIONS, evicted);
    /* Puts follow compiles, which cost far more than this: a good moment to
     * publish the counts. On failure they stay pending for a later flush. */
    (void)fc_cache_flush_stats(c, &scratch);
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* Remove.                                                             */
/* ------------------------------------------------------------------ */

fc_status fc_cache_remove(fc_cache *c, fc_context *ctx, fc_cache_level level, const fc_cache_key *key) {
    fc_status st = check_args(c, ctx, "fc_cache_remove", level, key);
    if (st != FC_OK || c->mode == FC_CACHE_OFF) return st;
    pthread_mutex_lock(&c->lock);
    fc_memo_remove(&c->memo, level, key);
    pthread_mutex_unlock(&c->lock);
    if (c->mode != FC_CACHE_RW || c->root_fd < 0 || c->level_fd[level] < 0) return FC_OK;
    char name[FC_CACHE_ENTRY_NAME_LEN + 1];
    fc_cache_key_hex(key, name);
    strcat(name, ".bin");
    /* Only a regular file of ours: a planted directory or link under the
     * name is not something this call made. ENOENT: already gone. */
    struct stat st_file;
    if (fstatat(c->level_fd[level], name, &st_file, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st_file.st_mode))
        (void)fc_entry_unlink_if_same(c->level_fd[level], name, &st_file);
    return FC_OK;
}
