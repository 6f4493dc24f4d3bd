/*
 * maint.c - walking the cache directory: LRU eviction, info, verify, clear.
 *
 * Everything here looks only at names fusec makes, in directories fusec
 * makes: DIR/v<N>/{kernels,programs,algos}/<32 hex>.bin (entries),
 * .../.tmp-<32 hex>-<12 chars> (temporary files) and DIR/v<N>/stats. Any
 * other file, wherever it is, is neither counted nor touched.
 */
#include "cache_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* The walk.                                                           */
/* ------------------------------------------------------------------ */
typedef struct walk_item {
    unsigned version;
    bool current;          /* version == FC_CACHE_FORMAT_VERSION */
    fc_cache_level level;
    int dirfd;             /* the level directory */
    const char *name;
    bool is_temp;          /* else an entry */
    fc_cache_key key;      /* of an entry: from its name */
    struct stat st;        /* lstat */
} walk_item;

/* Called for each file; returns false to stop the walk. */
typedef bool (*walk_fn)(const walk_item *it, void *arg);
/* Called for each version directory after its files (may be NULL). */
typedef void (*version_fn)(int verfd, unsigned version, const char *name, void *arg);

/* "v" and a decimal number without leading zeros. */
static bool version_dir_name(const char *name, unsigned *version) {
    if (name[0] != 'v' || name[1] < '1' || name[1] > '9') return false;
    unsigned long v = 0;
    for (const char *p = name + 1; *p; p++) {
        if (*p < '0' || *p > '9' || v > 100000000ul) return false;
        v = v * 10 + (unsigned long)(*p - '0');
    }
    *version = (unsigned)v;
    return true;
}

/* opendir relative to a directory fd; never follows a symlink. */
static DIR *opendir_at(int dirfd, const char *name) {
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return NULL;
    DIR *d = fdopendir(fd);
    if (!d) close(fd);
    return d;
}

static fc_status walk_level(fc_cache *c, fc_context *ctx, int verfd, unsigned version, fc_cache_level level,
                            walk_fn fn, void *arg, bool *stop) {
    DIR *d = opendir_at(verfd, fc_cache_level_dir(level));
    if (!d) {
        if (errno == ENOENT) return FC_OK;
        return fc_set_error(ctx, FC_ERR_RUNTIME, "cannot read %s/v%u/%s: %s", c->dir, version,
                            fc_cache_level_dir(level), strerror(errno));
    }
    walk_item it = {.version = version, .current = version == FC_CACHE_FORMAT_VERSION, .level = level,
                    .dirfd = dirfd(d)};
    struct dirent *de;
    while (!*stop && (de = readdir(d))) {
        it.name = de->d_name;
        if (fc_cache_is_entry_name(de->d_name, &it.key)) it.is_temp = false;
        else if (fc_cache_is_temp_name(de->d_name)) it.is_temp = true;
        else continue; /* not ours */
        if (fstatat(it.dirfd, de->d_name, &it.st, AT_SYMLINK_NOFOLLOW) != 0) continue; /* gone meanwhile */
        if (!fn(&it, arg)) *stop = true;
    }
    closedir(d);
    return FC_OK;
}

static fc_status walk(fc_cache *c, fc_context *ctx, bool current_only, walk_fn fn, version_fn after, void *arg) {
    if (c->root_fd < 0) return FC_OK; /* no directory: an empty cache */
    DIR *root = opendir_at(c->root_fd, ".");
    if (!root) return fc_set_error(ctx, FC_ERR_RUNTIME, "cannot read %s: %s", c->dir, strerror(errno));
    fc_status st = FC_OK;
    bool stop = false;
    struct dirent *de;
    while (st == FC_OK && !stop && (de = readdir(root))) {
        unsigned version;
        if (!version_dir_name(de->d_name, &version)) continue;
        if (current_only && version != FC_CACHE_FORMAT_VERSION) continue;
        int verfd = openat(c->root_fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (verfd < 0) continue; /* a file named like a version dir: not ours */
        for (int l = 0; l < FC_CACHE_LEVEL_COUNT && st == FC_OK && !stop; l++)
            st = walk_level(c, ctx, verfd, version, (fc_cache_level)l, fn, arg, &stop);
        if (st == FC_OK && !stop && after) after(verfd, version, de->d_name, arg);
        close(verfd);
    }
    closedir(root);
    return st;
}

static fc_status refuse_unsafe(fc_cache *c, fc_context *ctx, const char *what) {
    return fc_set_error(ctx, FC_ERR_RUNTIME, "not %s the cache: %s", what, c->reason);
}

/* ------------------------------------------------------------------ */
/* Eviction.                                                           */
/* ------------------------------------------------------------------ */
typedef struct evict_rec {
    struct timespec mtime;
    uint64_t size;
    unsigned version;
    fc_cache_level level;
    char name[FC_CACHE_ENTRY_NAME_LEN + 1];
} evict_rec;

typedef struct evict_scan {
    fc_context *ctx;
    evict_rec *recs;
    size_t n, cap;
    uint64_t total;
    bool oom;
    time_t now;
    fc_cache_level keep_level;
    const char *keep;
} evict_scan;

static bool evict_visit(const walk_item *it, void *arg) {
    evict_scan *s = arg;
    if (!S_ISREG(it->st.st_mode)) return true;
    if (it->is_temp) {
        /* A writer renames its temporary file within moments; one this old
         * belongs to a writer that died. */
        if (s->now - it->st.st_mtim.tv_sec > FC_CACHE_STALE_TEMP_SECONDS) (void)unlinkat(it->dirfd, it->name, 0);
        return true;
    }
    s->total += (uint64_t)it->st.st_size;
    if (it->current && it->level == s->keep_level && strcmp(it->name, s->keep) == 0) return true;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        evict_rec *r = fc_ctx_realloc(s->ctx, s->recs, cap * sizeof *r);
        if (!r) {
            s->oom = true;
            return false;
        }
        s->recs = r;
        s->cap = cap;
    }
    evict_rec *r = &s->recs[s->n++];
    r->mtime = it->st.st_mtim;
    r->size = (uint64_t)it->st.st_size;
    r->version = it->version;
    r->level = it->level;
    snprintf(r->name, sizeof r->name, "%s", it->name);
    return true;
}

/* Least recently used first; ties (coarse timestamps) by version, then name,
 * so the order is the same in every process. */
static int evict_order(const void *pa, const void *pb) {
    const evict_rec *a = pa, *b = pb;
    if (a->mtime.tv_sec != b->mtime.tv_sec) return a->mtime.tv_sec < b->mtime.tv_sec ? -1 : 1;
    if (a->mtime.tv_nsec != b->mtime.tv_nsec) return a->mtime.tv_nsec < b->mtime.tv_nsec ? -1 : 1;
    if (a->version != b->version) return a->version < b->version ? -1 : 1;
    return strcmp(a->name, b->name);
}

uint64_t fc_cache_evict(fc_cache *c, fc_context *ctx, fc_cache_level keep_level, const char *keep) {
    evict_scan s = {.ctx = ctx, .now = time(NULL), .keep_level = keep_level, .keep = keep};
    /* One directory scan per put. Puts follow compiles (tens of ms or
     * more); a scan of thousands of entries costs a few ms. */
    fc_status st = walk(c, ctx, false, evict_visit, NULL, &s);
    uint64_t evicted = 0;
    if (st == FC_OK && !s.oom && s.total > c->max_bytes) {
        qsort(s.recs, s.n, sizeof *s.recs, evict_order);
        for (size_t i = 0; i < s.n && s.total > c->max_bytes; i++) {
            char rel[64];
            snprintf(rel, sizeof rel, "v%u/%s/%s", s.recs[i].version, fc_cache_level_dir(s.recs[i].level),
                     s.recs[i].name);
            int r = unlinkat(c->root_fd, rel, 0);
            if (r == 0) evicted++;
            /* ENOENT: another process evicted it first; it is gone either way. */
            if (r == 0 || errno == ENOENT) s.total -= s.recs[i].size;
        }
    }
    fc_ctx_freemem(ctx, s.recs);
    return evicted;
}

/* ------------------------------------------------------------------ */
/* Info.                                                               */
/* ------------------------------------------------------------------ */
static bool info_visit(const walk_item *it, void *arg) {
    fc_cache_summary *s = arg;
    if (!S_ISREG(it->st.st_mode)) return true;
    uint64_t size = (uint64_t)it->st.st_size;
    if (it->is_temp) {
        s->temp_files++;
    } else if (!it->current) {
        s->stale_entries++;
        s->stale_bytes += size;
    } else {
        s->entries[it->level]++;
        s->bytes[it->level] += size;
        int64_t t = (int64_t)it->st.st_mtim.tv_sec;
        if (!s->oldest || t < s->oldest) s->oldest = t;
        if (t > s->newest) s->newest = t;
    }
    return true;
}

fc_status fc_cache_info(fc_cache *c, fc_context *ctx, fc_cache_summary *s) {
    if (!c || !s) return fc_set_error(ctx, FC_ERR_USAGE, "fc_cache_info: cache or summary is NULL");
    memset(s, 0, sizeof *s);
    s->dir = c->dir;
    s->mode = c->mode;
    s->disk_enabled = fc_cache_disk_enabled(c);
    s->disabled_reason = s->disk_enabled ? NULL : c->reason;
    s->format_version = FC_CACHE_FORMAT_VERSION;
    s->max_bytes = c->max_bytes;

    /* An unsafe directory is described, not read (root_fd is closed). */
    fc_status st = walk(c, ctx, false, info_visit, NULL, s);
    if (st != FC_OK) return st;
    for (int l = 0; l < FC_CACHE_LEVEL_COUNT; l++) s->total_bytes += s->bytes[l];
    s->total_bytes += s->stale_bytes;

    if (c->ver_fd >= 0 && (st = fc_stats_load(ctx, c->ver_fd, c->ver_dir, s->counters)) != FC_OK) return st;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < FC_CACHE_COUNTER_COUNT; i++) s->counters[i] += c->pending[i];
    s->memory_entries = c->memo.count;
    s->memory_bytes = c->memo.bytes;
    pthread_mutex_unlock(&c->lock);
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* Verify.                                                             */
/* ------------------------------------------------------------------ */
typedef struct verify_scan {
    fc_cache *c;
    fc_context *ctx;
    fc_cache_verify_result *res;
    size_t cap;
    bool remove_bad, oom;
} verify_scan;

static bool verify_visit(const walk_item *it, void *arg) {
    verify_scan *s = arg;
    if (it->is_temp) return true;
    s->res->checked++;
    struct stat st;
    int err = 0;
    uint64_t limit = s->c->max_bytes > FC_CACHE_DEFAULT_MAX_BYTES ? s->c->max_bytes : FC_CACHE_DEFAULT_MAX_BYTES;
    fc_entry_verdict v = fc_entry_read(s->ctx, it->dirfd, it->name, it->level, &it->key, limit, false, NULL, NULL,
                                       &st, &err);
    if (v == FC_ENTRY_OK || v == FC_ENTRY_MISSING) return true; /* missing: removed meanwhile */

    if (s->res->nbad == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        fc_cache_problem *p = fc_ctx_realloc(s->ctx, s->res->bad, cap * sizeof *p);
        if (!p) goto oom;
        s->res->bad = p;
        s->cap = cap;
    }
    fc_cache_problem *p = &s->res->bad[s->res->nbad];
    memset(p, 0, sizeof *p);
    size_t n = strlen(s->c->ver_dir) + strlen(it->name) + 16;
    if (!(p->path = fc_ctx_malloc(s->ctx, n))) goto oom;
    snprintf(p->path, n, "%s/%s/%s", s->c->ver_dir, fc_cache_level_dir(it->level), it->name);
    if (v == FC_ENTRY_IO_ERROR) snprintf(p->reason, sizeof p->reason, "%s: %s", fc_entry_verdict_text(v), strerror(err));
    else snprintf(p->reason, sizeof p->reason, "%s", fc_entry_verdict_text(v));
    if (s->remove_bad) {
        /* st is unset when even opening failed; then remove by name. */
        p->removed = fc_entry_remove(it->dirfd, it->name, st.st_ino ? &st : &it->st);
        if (p->removed) s->res->nremoved++;
    }
    s->res->nbad++;
    return true;
oom:
    s->oom = true;
    return false;
}

fc_status fc_cache_verify(fc_cache *c, fc_context *ctx, bool remove_bad, fc_cache_verify_result *res) {
    if (!c || !res) return fc_set_error(ctx, FC_ERR_USAGE, "fc_cache_verify: cache or result is NULL");
    memset(res, 0, sizeof *res);
    if (c->unsafe) return refuse_unsafe(c, ctx, "verifying");
    verify_scan s = {.c = c, .ctx = ctx, .res = res, .remove_bad = remove_bad};
    fc_status st = walk(c, ctx, true, verify_visit, NULL, &s);
    if (st == FC_OK && s.oom) st = FC_ERR_NOMEM;
    if (st != FC_OK) fc_cache_verify_result_free(res);
    return st;
}

void fc_cache_verify_result_free(fc_cache_verify_result *res) {
    if (!res) return;
    for (size_t i = 0; i < res->nbad; i++) free(res->bad[i].path);
    free(res->bad);
    memset(res, 0, sizeof *res);
}

/* ------------------------------------------------------------------ */
/* Clear.                                                              */
/* ------------------------------------------------------------------ */
typedef struct clear_scan {
    fc_cache *c;
    uint64_t entries, bytes;
    int err;                          /* the first failed removal's errno; 0 if none */
    char failed[FC_CACHE_PATH_MAX];   /* what it was, relative to the root */
} clear_scan;

/* A removal that failed, other than for something already gone: a
 * read-only file system, say. Clearing must not then report success. */
static void clear_failed(clear_scan *s, unsigned version, const char *level_dir, const char *name) {
    if (errno == ENOENT || s->err) return;
    s->err = errno;
    snprintf(s->failed, sizeof s->failed, "v%u%s%s/%s", version, level_dir ? "/" : "", level_dir ? level_dir : "",
             name);
}

static bool clear_visit(const walk_item *it, void *arg) {
    clear_scan *s = arg;
    if (!S_ISREG(it->st.st_mode)) {
        /* A directory, link or FIFO under an entry's name: damage, which
         * would block the entry's rebuild. Not counted as an entry. */
        if (!it->is_temp && !fc_entry_remove(it->dirfd, it->name, &it->st))
            clear_failed(s, it->version, fc_cache_level_dir(it->level), it->name);
        return true;
    }
    if (unlinkat(it->dirfd, it->name, 0) != 0) {
        clear_failed(s, it->version, fc_cache_level_dir(it->level), it->name);
        return true;
    }
    s->bytes += (uint64_t)it->st.st_size;
    if (!it->is_temp) s->entries++;
    return true;
}

static void clear_version(int verfd, unsigned version, const char *name, void *arg) {
    clear_scan *s = arg;
    struct stat st;
    if (fstatat(verfd, FC_CACHE_STATS_NAME, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        !fc_entry_remove(verfd, FC_CACHE_STATS_NAME, &st))
        clear_failed(s, version, NULL, FC_CACHE_STATS_NAME);
    /* Directories of other versions go too, when empty (a foreign file
     * keeps them). The current version's stay: this handle writes there. */
    if (version == FC_CACHE_FORMAT_VERSION) return;
    for (int l = 0; l < FC_CACHE_LEVEL_COUNT; l++)
        (void)unlinkat(verfd, fc_cache_level_dir((fc_cache_level)l), AT_REMOVEDIR);
    (void)unlinkat(s->c->root_fd, name, AT_REMOVEDIR);
}

fc_status fc_cache_clear(fc_cache *c, fc_context *ctx, uint64_t *entries_removed, uint64_t *bytes_freed) {
    if (entries_removed) *entries_removed = 0;
    if (bytes_freed) *bytes_freed = 0;
    if (!c) return fc_set_error(ctx, FC_ERR_USAGE, "fc_cache_clear: cache is NULL");
    if (c->unsafe) return refuse_unsafe(c, ctx, "clearing");
    clear_scan s = {.c = c};
    fc_status st = walk(c, ctx, false, clear_visit, clear_version, &s);
    /* What this process holds goes too: cleared means cleared. */
    pthread_mutex_lock(&c->lock);
    fc_memo_release(&c->memo);
    memset(c->pending, 0, sizeof c->pending);
    pthread_mutex_unlock(&c->lock);
    if (entries_removed) *entries_removed = s.entries;
    if (bytes_freed) *bytes_freed = s.bytes;
    if (st == FC_OK && s.err)
        st = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot clear the cache: cannot remove %s/%s: %s (%llu entries removed)",
                          c->dir, s.failed, strerror(s.err), (unsigned long long)s.entries);
    return st;
}
