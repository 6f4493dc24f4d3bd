/*
 * aot.h - compiled programs in files (ahead of time): internal details.
 *
 * The public API (fc_program_save_file, fc_program_load_file,
 * fc_program_load_data, fc_program_is_file, the program's signature, the
 * cache's location and the compile timings) is in include/fusec.h, under
 * the FC_API_PROGRAM_FILES guard. This header adds the container's layout
 * and the helpers the CLI and the tests use.
 *
 * docs/AOT.md describes the file format; docs/CACHE.md the cache.
 */
#ifndef FC_RUNTIME_AOT_H
#define FC_RUNTIME_AOT_H

#include "fusec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The container (docs/AOT.md), all integers little-endian:
 *    0  magic "FUSECAOT"                 8 bytes
 *    8  container version (u32)         FC_AOT_VERSION
 *   12  reserved (u32), zero
 *   16  number of sections n (u32)
 *   20  reserved (u32), zero
 *   24  XXH3-128 of the whole file, computed with these 16 bytes zero
 *   40  the section table: n entries of FC_AOT_ENTRY_SIZE bytes,
 *       kind (u32), index (u32), offset (u64), size (u64)
 *       then the sections' bytes, each at a multiple of 16, in table order
 */
#define FC_AOT_MAGIC "FUSECAOT"
#define FC_AOT_VERSION 2u
#define FC_AOT_HEADER_SIZE 40
#define FC_AOT_CHECKSUM_OFFSET 24
#define FC_AOT_ENTRY_SIZE 24
/* Largest file fc_program_load_file reads: a bound on what a stray file
 * can make it allocate. */
#define FC_AOT_MAX_FILE_BYTES (1ull << 31)

/* What a section holds. The numbers are part of the format. */
typedef enum fc_aot_kind {
    FC_AOT_PROGRAM = 1, /* the program (fc_program_desc_encode), exactly one */
    FC_AOT_KERNEL = 2,  /* the cubin of distinct kernel `index` (d.src.kernels), one per kernel */
    FC_AOT_WEIGHTS = 3, /* parameters' data (a safetensors image), at most one */
    /* A dynamic program, in place of FC_AOT_PROGRAM: its graph's text
     * (symbols unbound), its compile options and its variant's kernels
     * (name and source hash each; their cubins are the FC_AOT_KERNEL
     * sections). docs/AOT.md, "Dynamic programs". */
    FC_AOT_DYNAMIC = 4,
} fc_aot_kind;

typedef struct fc_aot_section {
    uint32_t kind, index;
    uint64_t offset, size;
} fc_aot_section;

/* "sm_90", "sm90", "90" or "9.0" -> 90. False on anything else. For the
 * CLI's --arch. */
bool fc_arch_parse(const char *s, int *sm);

/*
 * Check that data[0..size) has a container's header and a section table
 * whose sections lie inside it, in order and apart, and return the table
 * (*secs, fc_free; *n entries). FC_ERR_INPUT, with a message that starts
 * with `what` (a file name), when it is not one; neither the checksum nor
 * the sections' contents are checked here (the loader does).
 */
fc_status fc_aot_sections(fc_context *ctx, const char *what, const uint8_t *data, size_t size, fc_aot_section **secs,
                          int *n);

#endif
