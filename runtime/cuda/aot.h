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

/* The data symbol that holds the program in the cubin. */
#define FC_AOT_SYMBOL "fusec_program"
/* The container inside that symbol (docs/AOT.md):
 *    0  magic "FUSECAOT"                 8 bytes
 *    8  container version (u32 LE)       FC_AOT_VERSION
 *   12  reserved (u32), zero
 *   16  program size n (u64 LE)
 *   24  XXH3-128 of the whole file, computed with these 16 bytes zero
 *   40  the program (fc_program_desc_encode), n bytes
 */
#define FC_AOT_MAGIC "FUSECAOT"
#define FC_AOT_VERSION 1u
#define FC_AOT_HEADER_SIZE 40
#define FC_AOT_CHECKSUM_OFFSET 24
/* Largest file fc_program_load_file reads: a bound on what a stray file
 * can make it allocate. */
#define FC_AOT_MAX_FILE_BYTES (1ull << 31)

/* "sm_90", "sm90", "90" or "9.0" -> 90. False on anything else. For the
 * CLI's --arch. */
bool fc_arch_parse(const char *s, int *sm);

/*
 * Check that data[0..size) is a fusec program file and find the container:
 * *off and *len locate the FC_AOT_SYMBOL data in it. FC_ERR_INPUT, with a
 * message that starts with `what` (a file name), when it is not one; the
 * checksum is not checked here.
 */
fc_status fc_aot_locate(fc_context *ctx, const char *what, const uint8_t *data, size_t size, size_t *off,
                        size_t *len);

#endif
