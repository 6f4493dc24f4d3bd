/*
 * cache.h - the cache of compiled artifacts: bytes stored under keys, on
 * disk and in process (internal header; see docs/CACHE.md).
 *
 * The cache knows nothing of CUDA. A caller hashes everything that decides
 * the artifact (source, options, compiler version, arch) into a key, asks
 * for the key, and on a miss compiles and puts the bytes:
 *
 *     fc_cache_hasher h;
 *     fc_cache_key_begin(&h);              // mixes in FC_CACHE_FORMAT_VERSION
 *     fc_cache_key_add_str(&h, source);
 *     fc_cache_key_add_str(&h, "sm_90");
 *     fc_cache_key key = fc_cache_key_end(&h);
 *
 *     void *bin; size_t n;
 *     if (fc_cache_get(c, ctx, FC_CACHE_KERNEL, &key, &bin, &n) != FC_OK) ...;
 *     if (!bin) {                          // a miss
 *         ...compile...
 *         fc_cache_note_compile(c);
 *         fc_cache_put(c, ctx, FC_CACHE_KERNEL, &key, bin, n);  // failure is not fatal
 *     }
 *
 * Conventions are the library's: functions return fc_status with the message
 * on the context given to the call; nothing prints, nothing exits. The one
 * thing a caller should print is the cache's warning (fc_cache_take_warning),
 * set once when the cache turns itself off, e.g. for an unsafe directory.
 *
 * Threads: one fc_cache may be shared by the threads of a process; each
 * thread passes its own fc_context. Processes share the directory safely
 * (atomic renames, flock'ed counters). Do not use a handle across fork().
 */
#ifndef FC_CACHE_H
#define FC_CACHE_H

#include "fusec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Version of the on-disk layout and entry format. Bump it whenever the entry
 * format, the key recipe or the meaning of cached bytes changes: entries live
 * under DIR/v<FORMAT>/, and the version is both mixed into every key and
 * checked in every entry header, so old entries are never read.
 */
#define FC_CACHE_FORMAT_VERSION 1u

/* Default size limit of the on-disk cache (FUSEC_CACHE_MAX_BYTES). */
#define FC_CACHE_DEFAULT_MAX_BYTES (1ull << 30)
/* Upper bound on the in-process layer (it is also capped by max_bytes). */
#define FC_CACHE_MEMORY_MAX_BYTES (256ull << 20)

/* ------------------------------------------------------------------ */
/* Keys.                                                               */
/* ------------------------------------------------------------------ */

/* A key: 16 bytes of XXH3-128 (canonical, big-endian byte order). */
#define FC_CACHE_KEY_SIZE 16
/* Size of a key's hex text, with its NUL (32 lowercase hex digits + 1). */
#define FC_CACHE_KEY_HEX_SIZE 33

typedef struct fc_cache_key {
    uint8_t bytes[FC_CACHE_KEY_SIZE];
} fc_cache_key;

/*
 * A streaming key hasher. It lives on the caller's stack and never fails.
 * The storage is opaque here so that xxhash.h stays out of callers; key.c
 * checks at compile time that XXH3's state fits.
 */
typedef struct fc_cache_hasher {
    _Alignas(64) unsigned char opaque[1024];
} fc_cache_hasher;

/* Start a key. Mixes in a domain tag and FC_CACHE_FORMAT_VERSION. */
void fc_cache_key_begin(fc_cache_hasher *h);
/*
 * Add bytes. Each piece is framed by its length, so ("ab", "c") and
 * ("a", "bc") give different keys. data may be NULL when len is 0.
 */
void fc_cache_key_add(fc_cache_hasher *h, const void *data, size_t len);
/* Add a NUL-terminated string (framed as above). NULL differs from "". */
void fc_cache_key_add_str(fc_cache_hasher *h, const char *s);
/* Add an integer (8 bytes, little-endian, framed as above). */
void fc_cache_key_add_u64(fc_cache_hasher *h, uint64_t v);
/* The key of everything added so far. The hasher may go on being used. */
fc_cache_key fc_cache_key_end(const fc_cache_hasher *h);

bool fc_cache_key_equal(const fc_cache_key *a, const fc_cache_key *b);
/* 32 lowercase hex digits and a NUL, as used in file names. */
void fc_cache_key_hex(const fc_cache_key *k, char out[FC_CACHE_KEY_HEX_SIZE]);
/* Parse hex[0..len) as a key: len must be 32, digits lowercase (exactly
 * what fc_cache_key_hex writes); false if not. */
bool fc_cache_key_from_hex(const char *hex, size_t len, fc_cache_key *k);

/* ------------------------------------------------------------------ */
/* Levels, modes, options.                                             */
/* ------------------------------------------------------------------ */

/* Three namespaces: compiled kernels (cubins), whole compiled programs,
 * and the GEMM algorithms cuBLASLt chose (runtime/cublaslt.c). The value
 * is stored in each entry's header, so existing ones never change. */
typedef enum fc_cache_level {
    FC_CACHE_KERNEL,
    FC_CACHE_PROGRAM,
    FC_CACHE_ALGO,
    FC_CACHE_LEVEL_COUNT
} fc_cache_level;

typedef enum fc_cache_mode {
    FC_CACHE_MODE_ENV = 0, /* options only: take $FUSEC_CACHE (default rw) */
    FC_CACHE_OFF,          /* nothing is read or written, nothing counted */
    FC_CACHE_RO,           /* read the disk, never write it (no puts, no stats, no touch) */
    FC_CACHE_RW,           /* the default */
} fc_cache_mode;

/* Options for fc_cache_open. All-zero (or a NULL pointer) means "from the
 * environment", which is what the library and CLI normally want. */
typedef struct fc_cache_options {
    /* The cache root (a --cache-dir override). NULL: $FUSEC_CACHE_DIR,
     * else $XDG_CACHE_HOME/fusec, else $HOME/.cache/fusec. */
    const char *dir;
    fc_cache_mode mode;  /* FC_CACHE_MODE_ENV: $FUSEC_CACHE */
    uint64_t max_bytes;  /* 0: $FUSEC_CACHE_MAX_BYTES, else 1 GiB */
} fc_cache_options;

const char *fc_cache_level_name(fc_cache_level level); /* "kernel", "program", "algorithm" */
const char *fc_cache_mode_name(fc_cache_mode mode);    /* "off", "ro", "rw" */
/*
 * Parse a size: decimal digits with an optional binary suffix K, M, G or T
 * (case-insensitive, optionally followed by "B" or "iB"): "1048576", "64M",
 * "1GiB". False on anything else, on 0 and on overflow.
 */
bool fc_cache_parse_size(const char *s, uint64_t *out);

/* ------------------------------------------------------------------ */
/* The handle.                                                         */
/* ------------------------------------------------------------------ */
typedef struct fc_cache fc_cache;

/*
 * Open the cache. Errors (returned, *out = NULL): a bad argument, a bad
 * $FUSEC_CACHE or $FUSEC_CACHE_MAX_BYTES value (FC_ERR_USAGE), no memory.
 *
 * A directory that cannot be used is NOT an error: the handle opens with the
 * disk cache turned off and a warning set (fc_cache_take_warning). That
 * happens when the directory belongs to another user or is writable by group
 * or others (anyone who can write it could plant code that this process would
 * load and run), when it cannot be created, or when no location is known.
 * The in-process layer keeps working then, unless the mode is off.
 *
 * In rw mode the directory is created (mkdir -p; the cache directory itself
 * and its subdirectories with mode 0700). In ro and off modes nothing is
 * created.
 */
fc_status fc_cache_open(fc_context *ctx, const fc_cache_options *opts, fc_cache **out);
/* Flush counters (best effort; see fc_cache_flush_stats) and free. NULL is ignored. */
void fc_cache_close(fc_cache *c);

/* The cache root directory ("" when none could be determined). */
const char *fc_cache_dir(const fc_cache *c);
fc_cache_mode fc_cache_mode_of(const fc_cache *c);
/* True when entries are read from (and, in rw mode, written to) disk. */
bool fc_cache_disk_enabled(const fc_cache *c);
/*
 * The warning to show the user, the first time only: returns the message
 * (e.g. "fusec: warning: cache directory /x is writable by others; running
 * without the cache") once, then NULL. Owned by the handle.
 */
const char *fc_cache_take_warning(fc_cache *c);

/*
 * Path of the entry file of (level, key) into buf; false when there is no
 * cache directory or buf is too small. For diagnostics and tests.
 */
bool fc_cache_entry_path(const fc_cache *c, fc_cache_level level, const fc_cache_key *key,
                         char *buf, size_t n);

/* ------------------------------------------------------------------ */
/* Get and put.                                                        */
/* ------------------------------------------------------------------ */

/*
 * Look a key up: the in-process layer first, then the disk. On a hit *data
 * is a new buffer (fc_free; never NULL, even for 0 bytes) and *size its
 * length; on a miss *data is NULL and *size 0. A corrupt, truncated or
 * foreign entry is never returned: it counts as corrupt and as a miss, and
 * in rw mode it is deleted so that the rebuilt entry can take its place.
 * An entry read from disk has its mtime set to now (rw mode): the LRU clock.
 * Disk trouble is a miss, not an error. Errors: bad arguments, no memory.
 */
fc_status fc_cache_get(fc_cache *c, fc_context *ctx, fc_cache_level level, const fc_cache_key *key,
                       void **data, size_t *size);

/*
 * Store bytes under a key: in the in-process layer, and on disk in rw mode
 * (atomically: a temporary file, fsync, rename), then evict the least
 * recently used entries until the disk cache is under its limit. An entry
 * larger than the limit is kept in process only. Concurrent puts of one key,
 * from threads or processes, all succeed and leave one good entry.
 *
 * Returns FC_ERR_RUNTIME (message on ctx) when the entry could not be written
 * to disk; the in-process copy is kept then. Callers should treat that as
 * non-fatal (report it, carry on): the compile itself succeeded.
 */
fc_status fc_cache_put(fc_cache *c, fc_context *ctx, fc_cache_level level, const fc_cache_key *key,
                       const void *data, size_t size);

/* Count one compile (the caller compiled after a miss). */
void fc_cache_note_compile(fc_cache *c);

/*
 * Remove the entry of (level, key): from the in-process layer, and from
 * the disk in rw mode (ro leaves the disk alone, as for a damaged entry).
 * For a caller that got bytes it cannot use: they passed the cache's
 * checks but do not decode, or describe something the library now
 * refuses. The next get misses instead of returning them again. A missing
 * entry is not an error; disk trouble is ignored (the entry is then
 * replaced by the caller's next put). Counts nothing. Errors: bad
 * arguments.
 */
fc_status fc_cache_remove(fc_cache *c, fc_context *ctx, fc_cache_level level, const fc_cache_key *key);
/* Count one corrupt entry that the caller found (fc_cache_get counts the
 * ones it finds itself): a good checksum over bytes that do not decode.
 * The get that returned them counted a hit; that hit becomes a miss. */
void fc_cache_note_corrupt(fc_cache *c);
/* fc_cache_note_corrupt, and the entry removed (memory and, rw, disk), so
 * that the rebuilt one takes its place: what a caller does with bytes of a
 * hit that do not decode, or decode to something the key did not ask for. */
void fc_cache_reject(fc_cache *c, fc_context *ctx, fc_cache_level level, const fc_cache_key *key);

/*
 * Add this handle's pending counts to the shared counters in DIR/v<N>/stats
 * (under flock, so concurrent processes lose nothing). Done automatically
 * after every disk put and at close; a no-op unless the mode is rw and the
 * disk cache is enabled.
 */
fc_status fc_cache_flush_stats(fc_cache *c, fc_context *ctx);

/* ------------------------------------------------------------------ */
/* Maintenance: what `fusec --cache-info` and `--cache-clear` use.      */
/* The maintenance calls ignore the mode (they are explicit requests)   */
/* but refuse to act on a directory found unsafe.                       */
/* ------------------------------------------------------------------ */

/* Counters, shared by all processes (persistent) plus this handle's pending ones. */
typedef enum fc_cache_counter {
    FC_CACHE_HITS,
    FC_CACHE_MISSES,
    FC_CACHE_COMPILES,
    FC_CACHE_BYTES_WRITTEN,
    FC_CACHE_CORRUPT,
    FC_CACHE_EVICTIONS,
    FC_CACHE_COUNTER_COUNT
} fc_cache_counter;

typedef struct fc_cache_summary {
    const char *dir;             /* cache root, owned by the handle ("" if none) */
    fc_cache_mode mode;
    bool disk_enabled;
    const char *disabled_reason; /* why not, when !disk_enabled; owned by the handle */
    uint32_t format_version;     /* FC_CACHE_FORMAT_VERSION */
    uint64_t max_bytes;
    /* Entries of this format version, per level; bytes are file sizes. */
    uint64_t entries[FC_CACHE_LEVEL_COUNT];
    uint64_t bytes[FC_CACHE_LEVEL_COUNT];
    /* Entries of other format versions (never read; evicted first, cleared). */
    uint64_t stale_entries, stale_bytes;
    uint64_t temp_files;         /* leftovers of interrupted writes, or writes in flight */
    uint64_t total_bytes;        /* entries of all versions: what counts against max_bytes */
    /* Last-use times (mtime, seconds since the epoch) of the least and most
     * recently used entries of this version; 0 when there are none. */
    int64_t oldest, newest;
    uint64_t counters[FC_CACHE_COUNTER_COUNT];
    uint64_t memory_entries, memory_bytes; /* the in-process layer of this handle */
} fc_cache_summary;

/* Fill *s (scans the directory, reads the shared counters). */
fc_status fc_cache_info(fc_cache *c, fc_context *ctx, fc_cache_summary *s);
const char *fc_cache_counter_name(fc_cache_counter k); /* "hits", "misses", ... */

typedef struct fc_cache_problem {
    char *path;       /* the entry file */
    char reason[96];  /* e.g. "checksum mismatch" */
    bool removed;
} fc_cache_problem;

typedef struct fc_cache_verify_result {
    size_t checked;            /* entries of this format version looked at */
    size_t nbad, nremoved;
    fc_cache_problem *bad;     /* nbad of them */
} fc_cache_verify_result;

/*
 * Check every entry of this format version as a read would (header, size,
 * checksum, key against file name, level against folder). With remove_bad,
 * delete the bad ones. Free the result with fc_cache_verify_result_free.
 */
fc_status fc_cache_verify(fc_cache *c, fc_context *ctx, bool remove_bad, fc_cache_verify_result *res);
void fc_cache_verify_result_free(fc_cache_verify_result *res);

/*
 * Remove fusec's own files, and only those: entries (of every format
 * version), temporary files of fusec's name pattern, and the stats file.
 * Anything else in the directory stays. Also empties the in-process layer.
 * Reports how many entries and bytes (file sizes) were freed; either
 * pointer may be NULL.
 */
fc_status fc_cache_clear(fc_cache *c, fc_context *ctx, uint64_t *entries_removed, uint64_t *bytes_freed);

#endif
