/*
 * program_cache.h - the compile cache as fc_compile uses it (internal).
 *
 *   - the process's cache handle, opened at first use;
 *   - the keys of the two levels: a kernel (cubin) and a whole program;
 *   - the serialized program: a level-2 entry's payload, and the heart of
 *     an AOT file (runtime/cuda/aot.c);
 *   - the text that `fusec --cache-info` and `--cache-clear` print.
 *
 * cache/ stores bytes and knows nothing of CUDA; this file decides what
 * goes into the keys and what the bytes mean. docs/CACHE.md, "How
 * fc_compile uses the cache", describes it.
 */
#ifndef FC_RUNTIME_PROGRAM_CACHE_H
#define FC_RUNTIME_PROGRAM_CACHE_H

#include "cache/cache.h"
#include "runtime/cuda/program.h"

/* ------------------------------------------------------------------ */
/* The process's cache handle.                                         */
/* ------------------------------------------------------------------ */

/*
 * The handle every fc_compile of this process uses, opened at the first
 * call (thread-safe) from the directory given to fc_cache_configure, else
 * from the environment (fc_cache_open's rules). Errors: a bad FUSEC_CACHE
 * or FUSEC_CACHE_MAX_BYTES (FC_ERR_USAGE), no memory; *out is NULL then,
 * and the next call tries again. An unusable directory is not an error:
 * the handle works without its disk side and holds a warning.
 *
 * After fork() the child drops the parent's handle without using it (a
 * handle must not cross a fork: its lock may be held, its counts are the
 * parent's) and opens its own at its next use.
 */
fc_status fc_cache_global_open(fc_context *ctx, fc_cache **out);
/* The same, returning NULL on failure (the error on ctx). */
fc_cache *fc_cache_global(fc_context *ctx);
/* The handle's one-time warning (fc_cache_take_warning), or NULL; NULL
 * too when no handle is open. The CLI prints it once. */
const char *fc_cache_global_take_warning(void);
/*
 * Close the handle (its counters are flushed); the next use opens a new
 * one, with an empty in-process layer, from the configuration and the
 * environment as they are then. For tests (a "new process" without a
 * fork) and for a clean exit under a leak checker. No compile may be in
 * flight on another thread.
 */
void fc_cache_global_close(void);

/* ------------------------------------------------------------------ */
/* Keys.                                                               */
/* ------------------------------------------------------------------ */

/*
 * Level 1, a cubin (one per distinct kernel of a program, each its own
 * source; and an AOT file's, whose source holds the program): the source,
 * the NVRTC program name, every NVRTC option
 * in order (fc_nvrtc_options_build's list, which names the arch and the
 * include directories), the NVRTC version, and the target arch again. The
 * cache mixes in its format version.
 */
fc_cache_key fc_kernel_cache_key(const char *source, const char *unit_name, int sm, const char *const *opts,
                                 int nopts, int nvrtc_major, int nvrtc_minor);

/*
 * Level 2, a program: the graph's canonical text (fc_print of the user's
 * graph), the dtype and shape of every parameter and result, the compile
 * options (the resolved sm, fast_math, fuse, tf32, precision, numerics), the NVRTC options and
 * version (the entry names a cubin made with them), fusec's version, the
 * program format version, and the build of fusec itself (see
 * fc_build_identity): a rebuilt fusec may plan differently under the same
 * version number, and a stale plan must not be served.
 */
fc_cache_key fc_program_cache_key(const char *graph_text, const fc_graph *g, int sm, bool fast_math, bool fuse, bool tf32,
                                  fc_precision precision, fc_numerics numerics, const char *const *opts, int nopts, int nvrtc_major,
                                  int nvrtc_minor);

/*
 * What identifies this build of fusec: the size, modification time and
 * inode of the file the code was loaded from (the executable, or
 * libfusec.so), as ccache identifies a compiler; the compile date and
 * time of this file when that cannot be found. Computed once.
 */
const char *fc_build_identity(void);

/* ------------------------------------------------------------------ */
/* The serialized program.                                             */
/*                                                                     */
/* A small binary format, little-endian, versioned, read with a check  */
/* before every byte (docs/CACHE.md, "The program entry"). The cache   */
/* checksums entries and AOT files carry a checksum, but the reader     */
/* trusts nothing: a bug or a crafted file gets an error, never a       */
/* crash, an over-read or an unbounded allocation.                      */
/* ------------------------------------------------------------------ */
#define FC_PROGRAM_MAGIC "FCPROGRM"
/* Bump when the layout or the meaning of any field changes; it is in the
 * level-2 key too, so old entries are simply never asked for. */
#define FC_PROGRAM_FORMAT_VERSION 7u /* 2: the GEMMs of library launches; 3: tensor maps; 4: launch flags (pdl); 5: the distinct kernels; 6: launch costs and sources; 7: inout parameters */

/* Serialize d into out->data (fc_free). */
fc_status fc_program_desc_encode(fc_context *ctx, const fc_program_desc *d, fc_bytes *out);
/*
 * Read a program, check every field and every cross-reference (value ids,
 * storage, arena bounds, dtypes, shapes, names), and fill *out (release it
 * with fc_program_desc_release). FC_ERR_INPUT, with what is wrong and
 * where, for bad bytes; FC_ERR_NOMEM. *out is zeroed on failure.
 */
fc_status fc_program_desc_decode(fc_context *ctx, const void *data, size_t size, fc_program_desc *out);

/* ------------------------------------------------------------------ */
/* What the CLI prints. Each returns a malloc'd string (fc_free), or    */
/* NULL with the error on ctx. They use the process's handle.           */
/* ------------------------------------------------------------------ */

/*
 * `fusec --cache-info [--verify]`: the directory and mode, the format
 * version, entries and bytes per level, the total against the limit, the
 * counters (hits, misses, compiles, ...), the least and most recently used
 * entries; with verify, every entry is checked and each bad one listed
 * (*nbad, when not NULL, gets their number). The format is in docs/CACHE.md.
 */
char *fc_cache_info_text(fc_context *ctx, bool verify, size_t *nbad);
/* `fusec --cache-clear`: removes fusec's files and says how many entries
 * and bytes were freed. */
char *fc_cache_clear_text(fc_context *ctx);

#endif
