/*
 * cache_internal.h - what the files of cache/ share among themselves.
 * Not for callers: they use cache.h.
 */
#ifndef FC_CACHE_INTERNAL_H
#define FC_CACHE_INTERNAL_H

#include "cache.h"
#include "ir.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* Longest path the cache handles (root included). */
#define FC_CACHE_PATH_MAX 4096
/* A temporary file older than this is a leftover of a crashed writer. */
#define FC_CACHE_STALE_TEMP_SECONDS 3600

/* ------------------------------------------------------------------ */
/* The in-process layer (memo.c): key -> bytes, bounded, LRU. Not      */
/* locked by itself: the handle's mutex guards every call.             */
/* ------------------------------------------------------------------ */
typedef struct fc_memo_entry fc_memo_entry;
typedef struct fc_memo {
    fc_memo_entry **buckets;
    size_t nbuckets, count;
    uint64_t bytes, cap;
    uint64_t tick; /* use counter: the LRU clock */
} fc_memo;

void fc_memo_init(fc_memo *m, uint64_t cap);
void fc_memo_release(fc_memo *m);
/* On a hit *data is a new buffer (through ctx) and *found true. */
fc_status fc_memo_get(fc_memo *m, fc_context *ctx, fc_cache_level level, const fc_cache_key *key,
                      void **data, size_t *size, bool *found);
/* Insert or replace; entries over the cap are not kept. */
fc_status fc_memo_put(fc_memo *m, fc_context *ctx, fc_cache_level level, const fc_cache_key *key,
                      const void *data, size_t size);
/* Drop (level, key) if present. */
void fc_memo_remove(fc_memo *m, fc_cache_level level, const fc_cache_key *key);

/* ------------------------------------------------------------------ */
/* The handle (cache.c).                                               */
/* ------------------------------------------------------------------ */
struct fc_cache {
    pthread_mutex_t lock; /* guards memo, pending, warning_taken */
    fc_cache_mode mode;
    uint64_t max_bytes;

    char dir[FC_CACHE_PATH_MAX];     /* the root as given or found; "" if none */
    char ver_dir[FC_CACHE_PATH_MAX]; /* DIR/v<N>, for messages */
    /* Directories, opened once and checked (owner, mode) through these very
     * descriptors; every file operation is relative to them, so swapping a
     * directory after the check changes nothing. -1 when absent. */
    int root_fd, ver_fd, level_fd[FC_CACHE_LEVEL_COUNT];
    bool unsafe;                    /* a directory was refused: maintenance refuses too */
    char reason[FC_CACHE_PATH_MAX + 128];  /* why the disk cache is off; "" when on */
    char warning[FC_CACHE_PATH_MAX + 320]; /* for the user, once; "" if none */
    bool warning_taken;

    fc_memo memo;
    uint64_t pending[FC_CACHE_COUNTER_COUNT]; /* counts not yet in the stats file */
};

/* Directory names. */
const char *fc_cache_level_dir(fc_cache_level level); /* "kernels", "programs", "algos" */

/* Names: "<32 hex>.bin" for an entry; ".tmp-<32 hex>-<12 of [0-9a-z]>" for
 * a temporary file. Only names of these two shapes are ever deleted. */
#define FC_CACHE_ENTRY_NAME_LEN (2 * FC_CACHE_KEY_SIZE + 4)
#define FC_CACHE_TEMP_PREFIX ".tmp-"
#define FC_CACHE_TEMP_RANDOM_LEN 12
#define FC_CACHE_TEMP_NAME_LEN (5 + 2 * FC_CACHE_KEY_SIZE + 1 + FC_CACHE_TEMP_RANDOM_LEN)
bool fc_cache_is_entry_name(const char *name, fc_cache_key *key);
bool fc_cache_is_temp_name(const char *name);

/*
 * After a put: remove least recently used entries (of every format version;
 * old versions are never read, so they are the least recent) until the
 * disk cache is within max_bytes, and temporary files older than
 * FC_CACHE_STALE_TEMP_SECONDS. `keep` (a level dir entry name of the current
 * version, at `keep_level`) is never removed: it was just written. Best
 * effort: failures only leave the cache larger. Returns the number evicted.
 */
uint64_t fc_cache_evict(fc_cache *c, fc_context *ctx, fc_cache_level keep_level, const char *keep);

/* ------------------------------------------------------------------ */
/* Entry files (entry.c).                                              */
/*                                                                     */
/* An entry is a 64-byte header and the payload. All integers are      */
/* little-endian:                                                      */
/*    0  magic "FUSECACH"          8 bytes                             */
/*    8  format version            u32  (FC_CACHE_FORMAT_VERSION)       */
/*   12  level                     u32  (fc_cache_level)                */
/*   16  payload size              u64                                 */
/*   24  XXH3-128 of the payload   16 bytes, canonical (big-endian)     */
/*   40  the key                   16 bytes                            */
/*   56  reserved                  u64, zero                           */
/*   64  payload                                                       */
/* ------------------------------------------------------------------ */
#define FC_CACHE_HEADER_SIZE 64
#define FC_CACHE_MAGIC "FUSECACH"

/* Why an entry file is not a good entry. */
typedef enum fc_entry_verdict {
    FC_ENTRY_OK,
    FC_ENTRY_MISSING,      /* no such file: a plain miss */
    FC_ENTRY_NOT_REGULAR,  /* a directory, symlink, fifo... */
    FC_ENTRY_NOT_OWNED,    /* owned by another user */
    FC_ENTRY_UNSAFE,       /* writable by its group or by others */
    FC_ENTRY_EMPTY,        /* zero bytes */
    FC_ENTRY_SHORT_HEADER, /* shorter than the header */
    FC_ENTRY_BAD_MAGIC,
    FC_ENTRY_BAD_VERSION,
    FC_ENTRY_BAD_LEVEL,
    FC_ENTRY_BAD_KEY,      /* the header's key is not the one asked for */
    FC_ENTRY_BAD_RESERVED,
    FC_ENTRY_BAD_SIZE,     /* header size disagrees with the file: truncated or grown */
    FC_ENTRY_TOO_LARGE,    /* larger than the cache could ever have written */
    FC_ENTRY_BAD_CHECKSUM,
    FC_ENTRY_IO_ERROR,     /* could not be opened or read (errno kept) */
    FC_ENTRY_NOMEM,        /* the payload buffer could not be allocated (error on ctx) */
} fc_entry_verdict;

const char *fc_entry_verdict_text(fc_entry_verdict v);

/* Fill the header of an entry for (level, key, payload). */
void fc_entry_header(uint8_t out[FC_CACHE_HEADER_SIZE], fc_cache_level level, const fc_cache_key *key,
                     const void *payload, size_t size);

/*
 * Open and check the entry `name` in directory dirfd as a read would.
 * max_payload bounds the payload size (so a planted huge file cannot make
 * us allocate without limit). With payload != NULL the payload is returned
 * in a new buffer (allocated through ctx); with payload == NULL it is only
 * checksummed, in chunks. *st receives the file's lstat/fstat (for a later
 * same-file check before deleting it); *err the errno of an I/O error.
 * With touch, a good entry's mtime is set to now: the LRU clock.
 */
fc_entry_verdict fc_entry_read(fc_context *ctx, int dirfd, const char *name, fc_cache_level level,
                               const fc_cache_key *key, uint64_t max_payload, bool touch,
                               void **payload, size_t *size, struct stat *st, int *err);

/*
 * Delete `name` from dirfd only if it is still the file described by st:
 * between our read and the unlink another process may have renamed a fresh,
 * good entry into place, and that one must stay.
 */
bool fc_entry_unlink_if_same(int dirfd, const char *name, const struct stat *st);

/*
 * Remove whatever stands under `name` in dirfd, if it is still the thing
 * described by st: a file, symlink, FIFO or socket is unlinked, a directory
 * removed with what it holds (never following a link, at most a few levels
 * deep). A directory under an entry's name would otherwise block the
 * rename that rebuilds the entry, and every compile would miss.
 */
bool fc_entry_remove(int dirfd, const char *name, const struct stat *st);

/* Is an entry or the stats file, as fstat found it, ours alone: a regular
 * file owned by this user that neither its group nor others can write? A
 * file anyone else can write is a file anyone else can forge (a checksum
 * is not a signature). Returns the verdict (FC_ENTRY_OK if safe). */
fc_entry_verdict fc_entry_check_owner(const struct stat *st);

/* ------------------------------------------------------------------ */
/* Shared counters (stats.c): DIR/v<N>/stats, a fixed record updated     */
/* read-modify-write under flock(LOCK_EX).                             */
/* ------------------------------------------------------------------ */
#define FC_CACHE_STATS_NAME "stats"

/* Read the counters (zeros if the file is missing or damaged). */
fc_status fc_stats_load(fc_context *ctx, int verfd, const char *shown_dir, uint64_t out[FC_CACHE_COUNTER_COUNT]);
/* Add delta to the counters, atomically with respect to other processes. */
fc_status fc_stats_add(fc_context *ctx, int verfd, const char *shown_dir,
                       const uint64_t delta[FC_CACHE_COUNTER_COUNT]);

#endif
