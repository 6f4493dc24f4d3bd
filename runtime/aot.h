/*
 * aot.h - compiled programs in files (ahead of time), and the proposed
 * public API of the compile cache and the AOT work.
 *
 * The block between the two PUBLIC markers is written for include/fusec.h:
 * it needs nothing but fusec.h, and it is guarded by FC_API_PROGRAM_FILES,
 * so that it can be moved there verbatim (keep the guard) while this header
 * still includes it. Everything after the block is internal.
 *
 * docs/AOT.md describes the file format; docs/CACHE.md the cache.
 */
#ifndef FC_RUNTIME_AOT_H
#define FC_RUNTIME_AOT_H

#include "fusec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ======================= PUBLIC (for include/fusec.h) ======================= */
#ifndef FC_API_PROGRAM_FILES
#define FC_API_PROGRAM_FILES

/* ------------------------------------------------------------------ */
/* A program's parameters and results: what to allocate for fc_run.   */
/* A program loaded from a file has no graph to ask.                   */
/* ------------------------------------------------------------------ */
int fc_program_num_inputs(const fc_program *p);
int fc_program_num_outputs(const fc_program *p);
/*
 * The dtype and shape of input i (fc_run's inputs[i]) into *type, with
 * type->data NULL; its name in the graph ("" if it had none) into *name
 * when name is not NULL (owned by the program). FC_ERR_USAGE for a bad i.
 */
fc_status fc_program_input(const fc_program *p, int i, fc_tensor *type, const char **name);
/* The dtype and shape of result i (fc_run's outputs[i]). */
fc_status fc_program_output(const fc_program *p, int i, fc_tensor *type);

/* ------------------------------------------------------------------ */
/* Programs in files: compile once, ship one file, run it with no      */
/* parse, no passes and no NVRTC (`fusec model.ir -o model.cubin`).    */
/*                                                                     */
/* The file is a cubin, an ELF file that cuModuleLoadData and          */
/* cuobjdump accept, holding every kernel of the program; the launch   */
/* plan is embedded in it as the data symbol `fusec_program`, with a   */
/* checksum over the whole file (docs/AOT.md).                         */
/* ------------------------------------------------------------------ */

/*
 * Write p to `path` (replaced atomically: readers see the old file or the
 * new one). This compiles p's source once more with NVRTC (no GPU needed),
 * for p's target (fc_compile_options.sm). FC_ERR_RUNTIME for I/O errors.
 */
fc_status fc_program_save_file(fc_program *p, const char *path);
/*
 * Load a program written by fc_program_save_file. Nothing is compiled; the
 * GPU is touched at the first fc_run, as for fc_compile. A file that is not
 * such a program, or is damaged (checksum), or of a newer format, is
 * FC_ERR_INPUT with a message that says which; an unreadable file is
 * FC_ERR_RUNTIME.
 */
fc_status fc_program_load_file(fc_context *ctx, const char *path, fc_program **out);
/* The same from memory (a file embedded in an application); the bytes are
 * copied. */
fc_status fc_program_load_data(fc_context *ctx, const void *data, size_t size, fc_program **out);
/* True when `path` looks like such a file (an ELF holding fusec's program
 * symbol); cheap, and it does not check the checksum: load does. */
bool fc_program_is_file(const char *path);

/* ------------------------------------------------------------------ */
/* The compile cache (docs/CACHE.md). fc_compile uses one cache per    */
/* process, opened at first use from the environment: FUSEC_CACHE_DIR  */
/* (else $XDG_CACHE_HOME/fusec, else ~/.cache/fusec), FUSEC_CACHE      */
/* (off, ro, rw) and FUSEC_CACHE_MAX_BYTES.                            */
/* ------------------------------------------------------------------ */

/*
 * Use `dir` as the cache directory instead of the environment's (NULL: the
 * environment's again). Only before the cache is first used (the first
 * fc_compile): FC_ERR_USAGE after that, or for "".
 */
fc_status fc_cache_configure(const char *dir);

/* ------------------------------------------------------------------ */
/* Where the compile time went (`fusec --time`).                       */
/* ------------------------------------------------------------------ */
typedef enum fc_program_origin {
    FC_PROGRAM_COMPILED,      /* passes, codegen and NVRTC all ran */
    FC_PROGRAM_KERNEL_CACHE,  /* passes and codegen ran; the cubin came from the cache */
    FC_PROGRAM_PROGRAM_CACHE, /* a warm start: everything came from the cache */
    FC_PROGRAM_FILE,          /* loaded from a file (fc_program_load_file) */
} fc_program_origin;

typedef struct fc_compile_times {
    fc_program_origin origin;
    double parse_ms;   /* 0 from the library: the caller measures its parse */
    double passes_ms;  /* the passes: fusion, scheduling, memory plan */
    double codegen_ms; /* CUDA C generation */
    double nvrtc_ms;   /* NVRTC; 0 when the cubin came from the cache */
    double cache_ms;   /* keys, cache lookups and stores, (de)serialization */
    double compile_ms; /* all of fc_compile (or of the load), the above included */
    /* At the first fc_run (0 until then, or without a GPU): */
    double device_ms;  /* opening the CUDA device (its primary context) */
    double load_ms;    /* loading the cubin and resolving the kernels */
    bool loaded;       /* a run has loaded the module */
} fc_compile_times;

/* The times of p, as they stand now (load is filled by the first run). */
void fc_program_times(const fc_program *p, fc_compile_times *out);

#endif /* FC_API_PROGRAM_FILES */
/* ======================= end of PUBLIC ======================= */

/* ------------------------------------------------------------------ */
/* Internal.                                                           */
/* ------------------------------------------------------------------ */

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
