/*
 * aot.c - compiled programs in files: `fusec model.ir -o model.cubin`.
 *
 * The file is a small container (aot.h, docs/AOT.md): a header with the
 * checksum of the whole file, a section table, and the sections: the
 * serialized program (the level-2 cache entry's format), one cubin per
 * distinct kernel (the very cubins the kernel level of the cache holds),
 * and optionally the parameters' data (an imported model's initializers,
 * as a safetensors image).
 *
 * Why a container of the kernels' own cubins, and not one cubin of the
 * whole program: the kernels are compiled one by one (each its own cache
 * entry, shared between programs), so the cubins a file needs are already
 * there after any compile of the model, and writing the file is a copy:
 * no NVRTC, however the model was compiled. One cubin for the whole
 * program would mean compiling the whole unit once more (seconds for a
 * large model), or linking the kernels' cubins, which needs them
 * compiled relocatable (slower code, and nvJitLink at save time) or the
 * driver (a GPU at save time). The loader loads each cubin as its own
 * module, exactly as a compiled program's are loaded.
 *
 * The checksum covers every byte of the file; the loader checks every
 * offset, every section and every kernel's cubin (an ELF for CUDA that
 * defines the kernel by its name) before it uses any, and the program's
 * metadata against itself and the device limits (validation, below).
 */
#include "runtime/cuda/aot.h"
#include "ir/le.h"
#include "ir/outfile.h"
#include "ir/timing.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/program.h"
#include "runtime/cuda/program_cache.h"
#include "runtime/cuda/dynamic.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t's definition, for a state on the stack */
#include <xxhash.h>

/* ELF constants (elf.h has them, but EM_CUDA only in newer glibc). */
#define ELF_CLASS64 2
#define ELF_DATA_LE 1
#define ELF_MACHINE_CUDA 190
#define ELF_SECTION_HEADER_BYTES 64
#define ELF_SYMBOL_BYTES 24
#define ELF_SHT_SYMTAB 2
#define ELF_STT_FUNC 2

/* Sections start at multiples of this (a cubin is read in place by the
 * driver's loader, which wants it aligned). */
#define AOT_ALIGN 16

/* [off, off+n) inside a buffer of `size` bytes, without overflow. */
static bool inside(uint64_t off, uint64_t n, size_t size) { return off <= size && n <= size - off; }

/* ------------------------------------------------------------------ */
/* A kernel's cubin: an ELF for CUDA whose symbol table defines the     */
/* kernel as a function. Every offset read from it is checked against  */
/* its size before it is used. NULL when it is one; else what is wrong. */
/* ------------------------------------------------------------------ */
static const char *cubin_problem(const uint8_t *data, size_t size, const char *kernel) {
    if (size < 64 || memcmp(data, "\x7f" "ELF", 4) != 0) return "not an ELF file";
    if (data[4] != ELF_CLASS64 || data[5] != ELF_DATA_LE) return "not a 64-bit little-endian ELF file";
    if (fc_get_le(data + 18, 2) != ELF_MACHINE_CUDA) return "an ELF file for another machine than CUDA";
    uint64_t shoff = fc_get_le(data + 0x28, 8);
    unsigned shentsize = (unsigned)fc_get_le(data + 0x3a, 2), shnum = (unsigned)fc_get_le(data + 0x3c, 2);
    if (shentsize != ELF_SECTION_HEADER_BYTES || shnum == 0 ||
        !inside(shoff, (uint64_t)shnum * ELF_SECTION_HEADER_BYTES, size))
        return "its ELF section table is not inside it";
    const size_t klen = strlen(kernel) + 1;
    for (unsigned i = 0; i < shnum; i++) {
        const uint8_t *sh = data + shoff + (uint64_t)i * ELF_SECTION_HEADER_BYTES;
        if (fc_get_le(sh + 4, 4) != ELF_SHT_SYMTAB) continue;
        uint64_t soff = fc_get_le(sh + 24, 8), ssize = fc_get_le(sh + 32, 8), entsize = fc_get_le(sh + 56, 8);
        unsigned link = (unsigned)fc_get_le(sh + 40, 4);
        if (entsize != ELF_SYMBOL_BYTES || !inside(soff, ssize, size) || link >= shnum)
            return "its ELF symbol table is broken";
        const uint8_t *strsh = data + shoff + (uint64_t)link * ELF_SECTION_HEADER_BYTES;
        uint64_t stroff = fc_get_le(strsh + 24, 8), strsize = fc_get_le(strsh + 32, 8);
        if (!inside(stroff, strsize, size)) return "its ELF symbol table is broken";
        for (uint64_t j = 0; j < ssize / ELF_SYMBOL_BYTES; j++) {
            const uint8_t *sym = data + soff + j * ELF_SYMBOL_BYTES;
            uint64_t name = fc_get_le(sym, 4);
            if (!inside(name, klen, strsize) || memcmp(data + stroff + name, kernel, klen) != 0) continue;
            unsigned shndx = (unsigned)fc_get_le(sym + 6, 2);
            if ((sym[4] & 0xf) == ELF_STT_FUNC && shndx != 0 && shndx < shnum) return NULL;
        }
    }
    return "it does not define the kernel";
}

/* XXH3-128 of the file with the checksum field read as zeros. */
static void file_checksum(const uint8_t *data, size_t size, uint8_t out[16]) {
    static const uint8_t zeros[16];
    const size_t field = FC_AOT_CHECKSUM_OFFSET;
    XXH3_state_t s; /* on the stack (XXH_STATIC_LINKING_ONLY): nothing to fail */
    XXH3_INITSTATE(&s);
    XXH3_128bits_reset(&s);
    XXH3_128bits_update(&s, data, field);
    XXH3_128bits_update(&s, zeros, sizeof zeros);
    XXH3_128bits_update(&s, data + field + 16, size - field - 16);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&s));
    memcpy(out, c.digest, 16);
}

/* ------------------------------------------------------------------ */
/* Validation on load. An AOT file is code: whoever wrote it chose the  */
/* kernels the GPU runs, so only files one trusts should be run, and   */
/* the checksum proves no more than that the bytes are as written. But */
/* the metadata beside the kernels must never make the host misbehave: */
/* before any buffer is sized or launch made, the signature, the       */
/* storage, the arena, the launch dimensions and the embedded graph    */
/* are checked against one another and against what any CUDA device   */
/* allows (the decoder has checked every index and offset already).   */
/* ------------------------------------------------------------------ */

/* Limits every CUDA device since sm_30 shares; shared memory is sm_90's
 * opt-in maximum per block, the largest of any GPU. A larger value cannot
 * launch anywhere, so it can only come from a damaged or crafted file. */
#define AOT_MAX_GRID_X 2147483647u
#define AOT_MAX_GRID_YZ 65535u
#define AOT_MAX_BLOCK_XY 1024u
#define AOT_MAX_BLOCK_Z 64u
#define AOT_MAX_BLOCK_THREADS 1024u
#define AOT_MAX_SHARED_BYTES (227u * 1024u)
/* More than any GPU's memory: an arena or tensor beyond it cannot exist. */
#define AOT_MAX_BUFFER_BYTES ((int64_t)1 << 40)

/* The bytes of t, or -1 when its type is not one (bad dtype, rank or dim,
 * or a size past AOT_MAX_BUFFER_BYTES). */
static int64_t aot_tensor_bytes(const fc_program_tensor *t) {
    if ((unsigned)t->dtype >= FC_DTYPE_COUNT || t->rank < 0 || t->rank > FC_MAX_RANK) return -1;
    int64_t n = (int64_t)fc_dtype_size(t->dtype);
    for (int i = 0; i < t->rank; i++) {
        if (t->dims[i] < 0 || (t->dims[i] > 0 && n > AOT_MAX_BUFFER_BYTES / t->dims[i])) return -1;
        n *= t->dims[i];
    }
    return n;
}

/* Tensor t (parameter or result `index`) against its storage record and
 * against value v of the embedded graph (NULL: not checked). */
static fc_status aot_check_tensor(fc_context *ctx, const char *what, const fc_program_desc *d, const char *kind,
                                  int index, const fc_program_tensor *t, const fc_value *v) {
    int64_t bytes = aot_tensor_bytes(t);
    if (bytes < 0)
        return fc_set_error(ctx, FC_ERR_INPUT,
                            "%s: bad compiled program: %s %d has no valid type, or one larger than any GPU's memory",
                            what, kind, index);
    const fc_store *s = &d->store[t->value];
    if (s->bytes != bytes)
        return fc_set_error(ctx, FC_ERR_INPUT,
                            "%s: bad compiled program: %s %d is declared as %lld bytes, but the kernels use %lld",
                            what, kind, index, (long long)bytes, (long long)s->bytes);
    if (!v) return FC_OK;
    bool same = fc_value_dtype(v) == t->dtype && fc_value_rank(v) == t->rank;
    for (int i = 0; same && i < t->rank; i++) same = fc_value_dim(v, i) == t->dims[i];
    if (!same)
        return fc_set_error(ctx, FC_ERR_INPUT,
                            "%s: bad compiled program: %s %d of its embedded graph is not the one of its signature",
                            what, kind, index);
    return FC_OK;
}

static fc_status aot_check_launch(fc_context *ctx, const char *what, int i, const fc_launch *l) {
    if (l->kind != FC_LAUNCH_KERNEL) return FC_OK;
    uint64_t threads = (uint64_t)l->block[0] * l->block[1] * l->block[2];
    if (l->grid[0] > AOT_MAX_GRID_X || l->grid[1] > AOT_MAX_GRID_YZ || l->grid[2] > AOT_MAX_GRID_YZ)
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: bad compiled program: launch %d: grid [%u, %u, %u] exceeds what "
                            "any CUDA device launches", what, i, l->grid[0], l->grid[1], l->grid[2]);
    if (l->block[0] > AOT_MAX_BLOCK_XY || l->block[1] > AOT_MAX_BLOCK_XY || l->block[2] > AOT_MAX_BLOCK_Z ||
        threads > AOT_MAX_BLOCK_THREADS)
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: bad compiled program: launch %d: block [%u, %u, %u] exceeds what "
                            "any CUDA device launches", what, i, l->block[0], l->block[1], l->block[2]);
    if (l->smem > AOT_MAX_SHARED_BYTES)
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: bad compiled program: launch %d: %u bytes of shared memory, more "
                            "than any CUDA device has (%u)", what, i, l->smem, AOT_MAX_SHARED_BYTES);
    return FC_OK;
}

/* The embedded graph: it parses, and it is the program's graph (name and
 * signature). *g is the parsed graph (the caller frees it). */
static fc_status aot_parse_graph(fc_context *ctx, const char *what, const fc_program_desc *d, fc_graph **g) {
    fc_status st = fc_parse(ctx, "embedded graph", d->graph_text, strlen(d->graph_text), NULL, NULL, 0, g);
    if (st == FC_ERR_NOMEM) return st;
    if (st != FC_OK) {
        char why[512];
        snprintf(why, sizeof why, "%.500s", fc_last_error(ctx));
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: bad compiled program: its embedded graph does not parse: %s",
                            what, why);
    }
    if (strcmp(fc_graph_name(*g), d->graph_name) != 0 || fc_graph_num_params(*g) != d->nparams ||
        fc_graph_num_outputs(*g) != d->noutputs)
        return fc_set_error(ctx, FC_ERR_INPUT,
                            "%s: bad compiled program: its embedded graph (%s, %d parameters, %d results) is not the "
                            "program's (%s, %d parameters, %d results)",
                            what, fc_graph_name(*g), fc_graph_num_params(*g), fc_graph_num_outputs(*g), d->graph_name,
                            d->nparams, d->noutputs);
    return FC_OK;
}

static fc_status aot_check_desc(fc_context *ctx, const char *what, const fc_program_desc *d) {
    if (d->arena_bytes > AOT_MAX_BUFFER_BYTES || d->intermediate_bytes > AOT_MAX_BUFFER_BYTES)
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: bad compiled program: an arena of %lld bytes, more than any GPU "
                            "has", what, (long long)(d->arena_bytes > d->intermediate_bytes ? d->arena_bytes
                                                                                            : d->intermediate_bytes));
    for (int i = 0; i < d->src.nlaunches; i++) {
        fc_status st = aot_check_launch(ctx, what, i, &d->src.launches[i]);
        if (st != FC_OK) return st;
    }
    fc_graph *g = NULL;
    fc_status st = aot_parse_graph(ctx, what, d, &g);
    for (int i = 0; st == FC_OK && i < d->nparams; i++)
        st = aot_check_tensor(ctx, what, d, "parameter", i, &d->params[i], fc_graph_param(g, i));
    for (int i = 0; st == FC_OK && i < d->noutputs; i++)
        st = aot_check_tensor(ctx, what, d, "result", i, &d->outputs[i], fc_graph_output(g, i));
    fc_graph_free(g);
    return st;
}

/* ------------------------------------------------------------------ */
/* The container.                                                      */
/* ------------------------------------------------------------------ */

fc_status fc_aot_sections(fc_context *ctx, const char *what, const uint8_t *data, size_t size, fc_aot_section **secs,
                          int *n) {
    *secs = NULL;
    *n = 0;
    if (size < 8 || memcmp(data, FC_AOT_MAGIC, 8) != 0) {
        if (size >= 4 && memcmp(data, "\x7f" "ELF", 4) == 0)
            return fc_set_error(ctx, FC_ERR_INPUT,
                                "%s: not a compiled fusec program (an ELF file: a plain cubin, or a program file "
                                "from an older fusec; compile the model again with `fusec FILE.ir -o FILE.cubin`)",
                                what);
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: not a compiled fusec program (no FUSECAOT header)", what);
    }
    if (size < FC_AOT_HEADER_SIZE)
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: damaged compiled program: cut short in its header", what);
    uint32_t version = (uint32_t)fc_get_le(data + 8, 4);
    if (version != FC_AOT_VERSION)
        return fc_set_error(ctx, FC_ERR_INPUT,
                            "%s: compiled program format version %u; this fusec reads version %u (compile the "
                            "model again with this fusec)",
                            what, version, FC_AOT_VERSION);
    uint64_t count = fc_get_le(data + 16, 4);
    if (fc_get_le(data + 12, 4) != 0 || fc_get_le(data + 20, 4) != 0 ||
        !inside(FC_AOT_HEADER_SIZE, count * FC_AOT_ENTRY_SIZE, size))
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: damaged compiled program: bad header (cut short?)", what);
    fc_aot_section *s = fc_ctx_malloc(ctx, sizeof *s * (size_t)(count + 1));
    if (!s) return FC_ERR_NOMEM;
    uint64_t end = FC_AOT_HEADER_SIZE + count * FC_AOT_ENTRY_SIZE;
    for (uint64_t i = 0; i < count; i++) {
        const uint8_t *e = data + FC_AOT_HEADER_SIZE + i * FC_AOT_ENTRY_SIZE;
        s[i] = (fc_aot_section){(uint32_t)fc_get_le(e, 4), (uint32_t)fc_get_le(e + 4, 4), fc_get_le(e + 8, 8),
                                fc_get_le(e + 16, 8)};
        /* In table order, apart, inside the file: no section reads another's bytes. */
        if (s[i].offset < end || s[i].offset % AOT_ALIGN || !inside(s[i].offset, s[i].size, size)) {
            fc_ctx_freemem(ctx, s);
            return fc_set_error(ctx, FC_ERR_INPUT,
                                "%s: damaged compiled program: section %llu is out of place (outside the file, cut short, or over "
                                "another)", what,
                                (unsigned long long)i);
        }
        end = s[i].offset + s[i].size;
    }
    *secs = s;
    *n = (int)count;
    return FC_OK;
}

/* What a file holds, read and checked. */
typedef struct aot_contents {
    fc_program_desc desc;
    fc_bytes *kcubins; /* desc.src.nkernels */
    fc_weights *weights;
} aot_contents;

static void contents_release(fc_context *ctx, aot_contents *c) {
    for (int k = 0; c->kcubins && k < c->desc.src.nkernels; k++) fc_bytes_free(&c->kcubins[k]);
    fc_ctx_freemem(ctx, c->kcubins);
    fc_weights_free(c->weights);
    fc_program_desc_release(&c->desc);
    memset(c, 0, sizeof *c);
}

static fc_status bad(fc_context *ctx, const char *what, const char *why) {
    return fc_set_error(ctx, FC_ERR_INPUT, "%s: bad compiled program: %s", what, why);
}

/* The program section, decoded (a checksum-valid program that does not
 * decode is a fusec bug or a crafted file). */
static fc_status read_program(fc_context *ctx, const char *what, const uint8_t *prog, size_t n, fc_program_desc *d) {
    /* A program in another format version is a file from another fusec,
     * not damage: say so as for the container, with the fix. */
    if (n >= 12 && memcmp(prog, FC_PROGRAM_MAGIC, 8) == 0 && fc_get_le(prog + 8, 4) != FC_PROGRAM_FORMAT_VERSION)
        return fc_set_error(ctx, FC_ERR_INPUT,
                            "%s: its program is in format version %u; this fusec reads version %u (compile the "
                            "model again with this fusec)",
                            what, (unsigned)fc_get_le(prog + 8, 4), FC_PROGRAM_FORMAT_VERSION);
    fc_status st = fc_program_desc_decode(ctx, prog, n, d);
    if (st == FC_ERR_INPUT) {
        char why[512];
        snprintf(why, sizeof why, "%.500s", fc_last_error(ctx));
        return bad(ctx, what, why);
    }
    return st;
}

/* The kernels' cubins: one section per distinct kernel, each a cubin that
 * defines that kernel. */
static fc_status read_kernels(fc_context *ctx, const char *what, const uint8_t *data, const fc_aot_section *s, int n,
                              aot_contents *c) {
    const int nk = c->desc.src.nkernels;
    c->kcubins = fc_ctx_malloc(ctx, sizeof *c->kcubins * (size_t)(nk + 1));
    if (!c->kcubins) return FC_ERR_NOMEM;
    memset(c->kcubins, 0, sizeof *c->kcubins * (size_t)(nk + 1));
    char why[200];
    for (int i = 0; i < n; i++) {
        if (s[i].kind != FC_AOT_KERNEL) continue;
        const uint32_t k = s[i].index;
        if (k >= (uint32_t)nk || c->kcubins[k].data) {
            snprintf(why, sizeof why, "section %d is the cubin of kernel %u, which the program has %s", i, k,
                     k >= (uint32_t)nk ? "not" : "twice");
            return bad(ctx, what, why);
        }
        const char *kname = c->desc.src.kernels[k].name, *problem = cubin_problem(data + s[i].offset, s[i].size, kname);
        if (problem) {
            snprintf(why, sizeof why, "the cubin of kernel %u (%s): %s", k, kname, problem);
            return bad(ctx, what, why);
        }
        if (!(c->kcubins[k].data = fc_ctx_malloc(ctx, s[i].size))) return FC_ERR_NOMEM;
        memcpy(c->kcubins[k].data, data + s[i].offset, s[i].size);
        c->kcubins[k].size = s[i].size;
    }
    for (int k = 0; k < nk; k++)
        if (!c->kcubins[k].data) {
            snprintf(why, sizeof why, "kernel %d (%s) has no cubin in the file", k, c->desc.src.kernels[k].name);
            return bad(ctx, what, why);
        }
    return FC_OK;
}

/* The parameters' data: each tensor names a parameter and has its type. */
static fc_status read_weights(fc_context *ctx, const char *what, const uint8_t *data, size_t n, aot_contents *c) {
    fc_status st = fc_weights_load_safetensors_data(ctx, what, data, n, &c->weights);
    if (st == FC_ERR_NOMEM || st == FC_ERR_UNSUPPORTED) return st;
    char why[600];
    if (st != FC_OK) {
        snprintf(why, sizeof why, "its weights: %.500s", fc_last_error(ctx));
        return bad(ctx, what, why);
    }
    const fc_program_desc *d = &c->desc;
    for (int i = 0; i < fc_weights_count(c->weights); i++) {
        const char *name = fc_weights_name(c->weights, i);
        const fc_tensor *t = fc_weights_tensor(c->weights, i);
        int p = 0;
        while (p < d->nparams && strcmp(d->params[p].name, name) != 0) p++;
        bool same = p < d->nparams && d->params[p].dtype == t->dtype && d->params[p].rank == t->rank;
        for (int k = 0; same && k < t->rank; k++) same = d->params[p].dims[k] == t->shape[k];
        if (!same) {
            snprintf(why, sizeof why, "weight '%.200s' %s", name,
                     p < d->nparams ? "does not have its parameter's type" : "names no parameter");
            return bad(ctx, what, why);
        }
    }
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* Dynamic programs. The record: sm (u32), flags (u32: fast math 1,    */
/* fuse 2, tf32 4, eager numerics 8), precision (u32), kernels (u32),   */
/* the graph's text (u64 length, bytes), then per kernel its name (64   */
/* bytes, NUL-padded) and the hash of its source (16 bytes).            */
/* ------------------------------------------------------------------ */
#define DYN_FAST_MATH 1u
#define DYN_FUSE 2u
#define DYN_TF32 4u
#define DYN_EAGER 8u
#define DYN_FIXED_BYTES 24
#define DYN_KERNEL_BYTES (64 + 16)

typedef struct dyn_record {
    fc_compile_options opts;
    char *text; /* NUL-terminated copy */
    int nkernels;
    fc_given_cubin *kernels;
} dyn_record;

static void dyn_release(fc_context *ctx, dyn_record *r) {
    fc_ctx_freemem(ctx, r->text);
    fc_ctx_freemem(ctx, r->kernels);
    memset(r, 0, sizeof *r);
}

static fc_status read_dynamic(fc_context *ctx, const char *what, const uint8_t *b, size_t n, dyn_record *r) {
    memset(r, 0, sizeof *r);
    if (n < DYN_FIXED_BYTES) return bad(ctx, what, "its dynamic program is cut short");
    const uint32_t sm = (uint32_t)fc_get_le(b, 4), flags = (uint32_t)fc_get_le(b + 4, 4);
    const uint32_t precision = (uint32_t)fc_get_le(b + 8, 4), nk = (uint32_t)fc_get_le(b + 12, 4);
    const uint64_t tlen = fc_get_le(b + 16, 8);
    if (sm < 10 || sm > 999 || (flags & ~(DYN_FAST_MATH | DYN_FUSE | DYN_TF32 | DYN_EAGER)) ||
        precision >= (uint32_t)FC_PRECISION_COUNT)
        return bad(ctx, what, "its dynamic program has a bad target or bad options");
    if (tlen > n - DYN_FIXED_BYTES || nk > (n - DYN_FIXED_BYTES - tlen) / DYN_KERNEL_BYTES ||
        DYN_FIXED_BYTES + tlen + (uint64_t)nk * DYN_KERNEL_BYTES != n)
        return bad(ctx, what, "its dynamic program's sizes do not add up");
    if (memchr(b + DYN_FIXED_BYTES, 0, (size_t)tlen)) return bad(ctx, what, "its graph text holds a NUL byte");
    fc_compile_options_default(&r->opts);
    r->opts.device = FC_DEVICE_CUDA;
    r->opts.sm = (int)sm;
    r->opts.fast_math = flags & DYN_FAST_MATH;
    r->opts.fuse = flags & DYN_FUSE;
    r->opts.allow_tf32 = flags & DYN_TF32;
    r->opts.numerics = flags & DYN_EAGER ? FC_NUMERICS_EAGER : FC_NUMERICS_FAST;
    r->opts.precision = (fc_precision)precision;
    r->opts.dynamic = true;
    /* A file runs no NVRTC: the variant serves every shape. */
    r->opts.specialize = FC_SPECIALIZE_OFF;
    r->text = fc_ctx_malloc(ctx, (size_t)tlen + 1);
    r->kernels = fc_ctx_malloc(ctx, sizeof *r->kernels * ((size_t)nk + 1));
    if (!r->text || !r->kernels) {
        dyn_release(ctx, r);
        return FC_ERR_NOMEM;
    }
    memcpy(r->text, b + DYN_FIXED_BYTES, (size_t)tlen);
    r->text[tlen] = 0;
    memset(r->kernels, 0, sizeof *r->kernels * ((size_t)nk + 1));
    r->nkernels = (int)nk;
    const uint8_t *k = b + DYN_FIXED_BYTES + tlen;
    for (uint32_t i = 0; i < nk; i++, k += DYN_KERNEL_BYTES) {
        fc_given_cubin *g = &r->kernels[i];
        bool named = memchr(k, 0, 64) && k[0], twice = false;
        if (named) memcpy(g->name, k, 64);
        memcpy(g->source_hash, k + 64, 16);
        for (uint32_t j = 0; named && j < i; j++) twice |= !strcmp(r->kernels[j].name, g->name);
        if (!named || twice) {
            dyn_release(ctx, r);
            return bad(ctx, what, twice ? "its dynamic program names a kernel twice"
                                        : "its dynamic program names a kernel badly");
        }
    }
    return FC_OK;
}

/* The cubins of r's kernels: a section each, a cubin defining it. */
static fc_status dynamic_cubins(fc_context *ctx, const char *what, const uint8_t *data, const fc_aot_section *s, int n,
                                dyn_record *r) {
    char why[200];
    for (int i = 0; i < n; i++) {
        if (s[i].kind != FC_AOT_KERNEL) continue;
        const uint32_t k = s[i].index;
        if (k >= (uint32_t)r->nkernels || r->kernels[k].data) {
            snprintf(why, sizeof why, "section %d is the cubin of kernel %u, which the program has %s", i, k,
                     k >= (uint32_t)r->nkernels ? "not" : "twice");
            return bad(ctx, what, why);
        }
        const char *problem = cubin_problem(data + s[i].offset, s[i].size, r->kernels[k].name);
        if (problem) {
            snprintf(why, sizeof why, "the cubin of kernel %u (%s): %s", k, r->kernels[k].name, problem);
            return bad(ctx, what, why);
        }
        r->kernels[k].data = data + s[i].offset;
        r->kernels[k].size = s[i].size;
    }
    for (int k = 0; k < r->nkernels; k++)
        if (!r->kernels[k].data) {
            snprintf(why, sizeof why, "kernel %d (%s) has no cubin in the file", k, r->kernels[k].name);
            return bad(ctx, what, why);
        }
    return FC_OK;
}

/* The dynamic program of record r: its graph compiled again (passes and
 * codegen), its variant's cubins the file's, no NVRTC. */
static fc_status load_dynamic(fc_context *ctx, const char *what, dyn_record *r, fc_program **out) {
    char why[600];
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, "embedded graph", r->text, strlen(r->text), NULL, NULL, 0, &g);
    if (st == FC_OK) st = fc_verify(g);
    if (st != FC_OK) {
        fc_graph_free(g);
        if (st == FC_ERR_NOMEM) return st;
        snprintf(why, sizeof why, "its embedded graph does not parse: %.500s", fc_last_error(ctx));
        return bad(ctx, what, why);
    }
    if (fc_graph_check_static(g) == FC_OK) {
        fc_graph_free(g);
        return bad(ctx, what, "a dynamic program whose graph has every dim bound");
    }
    fc_program_give_cubins(r->kernels, r->nkernels);
    st = fc_compile(g, &r->opts, out);
    fc_program_give_cubins(NULL, 0);
    fc_graph_free(g);
    if (st == FC_ERR_INPUT) {
        snprintf(why, sizeof why, "%.500s", fc_last_error(ctx));
        return bad(ctx, what, why);
    }
    if (st != FC_OK) return st;
    /* The variant exists (a compile that lacked a cubin has none, and says
     * why only in its trace), and took every kernel the file has. */
    bool all = fc_dynamic_variant(fc_program_dynamic(*out)) != NULL;
    for (int k = 0; all && k < r->nkernels; k++) all = r->kernels[k].used;
    if (!all) {
        fc_program_free(*out);
        *out = NULL;
        return bad(ctx, what, "its kernels are not the ones this fusec makes for its graph (a file from another "
                              "fusec: compile the model again)");
    }
    return FC_OK;
}

/* Check the whole file and read what it holds into *c. */
static fc_status read_container(fc_context *ctx, const char *what, const uint8_t *data, size_t size, aot_contents *c,
                                fc_program **dynamic) {
    memset(c, 0, sizeof *c);
    if (dynamic) *dynamic = NULL;
    fc_aot_section *s = NULL;
    int n = 0;
    fc_status st = fc_aot_sections(ctx, what, data, size, &s, &n);
    if (st != FC_OK) return st;
    uint8_t sum[16];
    file_checksum(data, size, sum);
    if (memcmp(sum, data + FC_AOT_CHECKSUM_OFFSET, 16) != 0) {
        fc_ctx_freemem(ctx, s);
        return fc_set_error(ctx, FC_ERR_INPUT,
                            "%s: damaged compiled program: checksum mismatch (the file was changed or cut short "
                            "after fusec wrote it)",
                            what);
    }
    int prog = -1, weights = -1, dyn = -1;
    char why[128] = "";
    for (int i = 0; i < n && !why[0]; i++) {
        int *slot = s[i].kind == FC_AOT_PROGRAM ? &prog : s[i].kind == FC_AOT_WEIGHTS ? &weights
                  : s[i].kind == FC_AOT_DYNAMIC ? &dyn : NULL;
        if (s[i].kind == FC_AOT_KERNEL) continue;
        if (!slot) snprintf(why, sizeof why, "section %d is of unknown kind %u", i, s[i].kind);
        else if (*slot >= 0 || s[i].index != 0) snprintf(why, sizeof why, "section %d: a second program or weights", i);
        else *slot = i;
    }
    if (!why[0] && (prog < 0) == (dyn < 0))
        snprintf(why, sizeof why, "it holds %s", prog < 0 ? "no program" : "two programs");
    if (!why[0] && dyn >= 0 && weights >= 0) snprintf(why, sizeof why, "a dynamic program with weights");
    if (why[0]) st = bad(ctx, what, why);
    if (st == FC_OK && dyn >= 0) {
        /* Read and checked here; compiled only by a load. */
        dyn_record r;
        st = read_dynamic(ctx, what, data + s[dyn].offset, s[dyn].size, &r);
        if (st == FC_OK) st = dynamic_cubins(ctx, what, data, s, n, &r);
        if (st == FC_OK && dynamic) st = load_dynamic(ctx, what, &r, dynamic);
        dyn_release(ctx, &r);
        fc_ctx_freemem(ctx, s);
        return st;
    }
    if (st == FC_OK) st = read_program(ctx, what, data + s[prog].offset, s[prog].size, &c->desc);
    if (st == FC_OK) st = read_kernels(ctx, what, data, s, n, c);
    if (st == FC_OK && weights >= 0) st = read_weights(ctx, what, data + s[weights].offset, s[weights].size, c);
    if (st == FC_OK) st = aot_check_desc(ctx, what, &c->desc);
    fc_ctx_freemem(ctx, s);
    if (st != FC_OK) contents_release(ctx, c);
    return st;
}

/* Load from data (not owned). */
static fc_status load(fc_context *ctx, const char *what, const uint8_t *data, size_t size, double t0,
                      fc_program **out) {
    aot_contents c;
    fc_program *dynamic = NULL;
    fc_status st = read_container(ctx, what, data, size, &c, &dynamic);
    if (st != FC_OK) return st;
    if (dynamic) {
        *out = dynamic;
        return FC_OK;
    }
    st = fc_program_from_desc(ctx, &c.desc, c.kcubins, FC_PROGRAM_FILE, out);
    c.kcubins = NULL; /* moved, also on failure */
    if (st == FC_OK) {
        fc_program_set_weights(*out, c.weights);
        c.weights = NULL;
        fc_program_times_ref(*out)->compile_ms = fc_now_ms() - t0;
    }
    contents_release(ctx, &c);
    return st;
}

fc_status fc_program_load_data(fc_context *ctx, const void *data, size_t size, fc_program **out) {
    if (out) *out = NULL;
    if (!out || (!data && size)) return fc_set_error(ctx, FC_ERR_USAGE, "fc_program_load_data: NULL argument");
    return load(ctx, "program data", data, size, fc_now_ms(), out);
}

/* Open path for reading: a regular file. *fd, and its size in *size. */
static fc_status open_regular(fc_context *ctx, const char *path, int *fd, size_t *size) {
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0) return fc_set_error(ctx, FC_ERR_RUNTIME, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    fc_status status = FC_OK;
    if (fstat(*fd, &st) != 0) status = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot read %s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode)) status = fc_set_error(ctx, FC_ERR_INPUT, "%s is not a regular file", path);
    else if ((uint64_t)st.st_size > FC_AOT_MAX_FILE_BYTES)
        status = fc_set_error(ctx, FC_ERR_INPUT, "%s: not a compiled fusec program (%lld bytes is too large)", path,
                              (long long)st.st_size);
    if (status != FC_OK) {
        close(*fd);
        *fd = -1;
    }
    *size = status == FC_OK ? (size_t)st.st_size : 0;
    return status;
}

/* The whole file into a new buffer; FC_ERR_RUNTIME when it cannot be read. */
static fc_status read_file(fc_context *ctx, const char *path, uint8_t **data, size_t *size) {
    *data = NULL;
    int fd = -1;
    size_t n = 0;
    fc_status status = open_regular(ctx, path, &fd, &n);
    if (status != FC_OK) return status;
    uint8_t *buf = fc_ctx_malloc(ctx, n ? n : 1);
    if (!buf) status = FC_ERR_NOMEM;
    for (size_t got = 0; status == FC_OK && got < n;) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            status = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot read %s: %s", path,
                                  r < 0 ? strerror(errno) : "the file shrank while it was read");
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    if (status != FC_OK) {
        fc_ctx_freemem(ctx, buf);
        return status;
    }
    *data = buf;
    *size = n;
    return FC_OK;
}

fc_status fc_program_load_file(fc_context *ctx, const char *path, fc_program **out) {
    if (out) *out = NULL;
    if (!path || !out) return fc_set_error(ctx, FC_ERR_USAGE, "fc_program_load_file: NULL argument");
    double t0 = fc_now_ms();
    uint8_t *data = NULL;
    size_t size = 0;
    fc_status st = read_file(ctx, path, &data, &size);
    if (st != FC_OK) return st;
    st = load(ctx, path, data, size, t0, out);
    fc_ctx_freemem(ctx, data);
    return st;
}

/* The magic alone: a probe reads 8 bytes, not the file. */
bool fc_program_is_file(const char *path) {
    if (!path) return false;
    fc_context scratch = {0}; /* a probe has no error to report */
    int fd = -1;
    size_t size = 0;
    if (open_regular(&scratch, path, &fd, &size) != FC_OK) return false;
    char magic[8];
    bool yes = size >= FC_AOT_HEADER_SIZE && read(fd, magic, sizeof magic) == (ssize_t)sizeof magic &&
               memcmp(magic, FC_AOT_MAGIC, 8) == 0;
    close(fd);
    return yes;
}

/* ------------------------------------------------------------------ */
/* Saving.                                                             */
/* ------------------------------------------------------------------ */

static const char *const st_dtype_names[FC_DTYPE_COUNT] = {
    [FC_F64] = "F64", [FC_F32] = "F32", [FC_F16] = "F16", [FC_BF16] = "BF16",
    [FC_I64] = "I64", [FC_I32] = "I32", [FC_I8] = "I8",   [FC_BOOL] = "BOOL",
};

/* s as a JSON string's contents. */
static void json_escaped(fc_strbuf *b, const char *s) {
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fc_strbuf_printf(b, "\\%c", ch);
        else if (ch < 0x20) fc_strbuf_printf(b, "\\u%04x", ch);
        else fc_strbuf_printf(b, "%c", ch);
    }
}

/*
 * The weights of w that p's parameters take, as a safetensors image (an
 * 8-byte header length, the JSON header padded with spaces to a multiple
 * of 8, the tensors' bytes), so that the loader reads them with the
 * safetensors reader every weights file goes through. A tensor that
 * names no parameter, or has another type, is FC_ERR_USAGE.
 */
static fc_status weights_image(fc_context *ctx, const fc_program_desc *d, const fc_weights *w, fc_bytes *out) {
    out->data = NULL;
    out->size = 0;
    fc_strbuf h = {ctx, NULL, 0, 0, false};
    fc_strbuf_printf(&h, "{");
    uint64_t data_bytes = 0;
    for (int i = 0; i < fc_weights_count(w); i++) {
        const char *name = fc_weights_name(w, i);
        const fc_tensor *t = fc_weights_tensor(w, i);
        int p = 0;
        while (p < d->nparams && strcmp(d->params[p].name, name) != 0) p++;
        bool same = p < d->nparams && d->params[p].dtype == t->dtype && d->params[p].rank == t->rank;
        for (int k = 0; same && k < t->rank; k++) same = d->params[p].dims[k] == t->shape[k];
        if (!same) {
            fc_ctx_freemem(ctx, h.buf);
            return fc_set_error(ctx, FC_ERR_USAGE, "cannot save weight '%s' with program %s: %s", name, d->graph_name,
                                p < d->nparams ? "its type is not its parameter's" : "it names no parameter");
        }
        uint64_t bytes = (uint64_t)fc_tensor_numel(t) * fc_dtype_size(t->dtype);
        fc_strbuf_printf(&h, "%s\"", i ? "," : "");
        json_escaped(&h, name);
        fc_strbuf_printf(&h, "\":{\"dtype\":\"%s\",\"shape\":[", st_dtype_names[t->dtype]);
        for (int k = 0; k < t->rank; k++) fc_strbuf_printf(&h, "%s%lld", k ? "," : "", (long long)t->shape[k]);
        fc_strbuf_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)data_bytes,
                         (unsigned long long)(data_bytes + bytes));
        data_bytes += bytes;
    }
    fc_strbuf_printf(&h, "}");
    while (!h.oom && h.len % 8) fc_strbuf_printf(&h, " ");
    if (h.oom) {
        fc_ctx_freemem(ctx, h.buf);
        return FC_ERR_NOMEM;
    }
    size_t n = 8 + h.len + (size_t)data_bytes;
    uint8_t *img = fc_ctx_malloc(ctx, n);
    if (!img) {
        fc_ctx_freemem(ctx, h.buf);
        return FC_ERR_NOMEM;
    }
    fc_put_le(img, h.len, 8);
    memcpy(img + 8, h.buf, h.len);
    size_t at = 8 + h.len;
    for (int i = 0; i < fc_weights_count(w); i++) {
        const fc_tensor *t = fc_weights_tensor(w, i);
        size_t bytes = (size_t)fc_tensor_numel(t) * fc_dtype_size(t->dtype);
        if (bytes) memcpy(img + at, t->data, bytes);
        at += bytes;
    }
    fc_ctx_freemem(ctx, h.buf);
    out->data = img;
    out->size = n;
    return FC_OK;
}

/* The record of dynamic program p's section (read_dynamic's format). */
static fc_status dynamic_record(fc_context *ctx, const fc_program *p, const fc_program *variant, fc_bytes *out) {
    const fc_program_desc *vd = fc_program_desc_of(variant);
    const char *text = fc_program_graph_text(p);
    if (!text) return fc_set_error(ctx, FC_ERR_RUNTIME, "internal error: dynamic program %s has no graph text",
                                   fc_program_name(p));
    const size_t tlen = strlen(text), nk = (size_t)vd->src.nkernels;
    const size_t n = DYN_FIXED_BYTES + tlen + nk * DYN_KERNEL_BYTES;
    uint8_t *b = fc_ctx_malloc(ctx, n);
    if (!b) return FC_ERR_NOMEM;
    memset(b, 0, n);
    fc_put_le(b, (uint64_t)vd->sm, 4);
    fc_put_le(b + 4, (vd->fast_math ? DYN_FAST_MATH : 0) | (vd->fuse ? DYN_FUSE : 0) | (vd->tf32 ? DYN_TF32 : 0) |
                         (vd->numerics == FC_NUMERICS_EAGER ? DYN_EAGER : 0), 4);
    fc_put_le(b + 8, (uint64_t)vd->precision, 4);
    fc_put_le(b + 12, nk, 4);
    fc_put_le(b + 16, tlen, 8);
    memcpy(b + DYN_FIXED_BYTES, text, tlen);
    for (size_t k = 0; k < nk; k++) {
        const fc_cuda_kernel *kn = &vd->src.kernels[k];
        uint8_t *e = b + DYN_FIXED_BYTES + tlen + k * DYN_KERNEL_BYTES;
        if (!kn->source) {
            fc_ctx_freemem(ctx, b);
            return fc_set_error(ctx, FC_ERR_RUNTIME, "internal error: kernel %s has no source", kn->name);
        }
        memcpy(e, kn->name, strnlen(kn->name, 63));
        fc_program_kernel_source_hash(kn->source, e + 64);
    }
    out->data = b;
    out->size = n;
    return FC_OK;
}

/* The file into *file: `first` (a section of kind `kind`: the program, or
 * a dynamic program's record), the cubins of kp's kernels, the weights
 * (an image, or empty). */
static fc_status build_file(fc_context *ctx, fc_aot_kind kind, const fc_bytes *first, const fc_program *kp,
                            const fc_bytes *weights, fc_bytes *file) {
    const fc_program_desc *d = fc_program_desc_of(kp);
    const int nk = d->src.nkernels;
    for (int k = 0; k < nk; k++) {
        const fc_bytes *c = fc_program_kernel_cubin(kp, k);
        if (!c || !c->data)
            return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "program %s has no cubin for its kernel %s", d->graph_name,
                                d->src.kernels[k].name);
    }
    fc_status st = FC_OK;
    const int nsec = 1 + nk + (weights->data ? 1 : 0);
    fc_aot_section *s = fc_ctx_malloc(ctx, sizeof *s * (size_t)nsec);
    const uint8_t **src = fc_ctx_malloc(ctx, sizeof *src * (size_t)nsec);
    uint8_t *out = NULL;
    uint64_t at = FC_AOT_HEADER_SIZE + (uint64_t)nsec * FC_AOT_ENTRY_SIZE;
    if (s && src) {
        s[0] = (fc_aot_section){kind, 0, 0, first->size};
        src[0] = first->data;
        for (int k = 0; k < nk; k++) {
            const fc_bytes *c = fc_program_kernel_cubin(kp, k);
            s[1 + k] = (fc_aot_section){FC_AOT_KERNEL, (uint32_t)k, 0, c->size};
            src[1 + k] = c->data;
        }
        if (weights->data) {
            s[nsec - 1] = (fc_aot_section){FC_AOT_WEIGHTS, 0, 0, weights->size};
            src[nsec - 1] = weights->data;
        }
        for (int i = 0; i < nsec; i++) {
            at = (at + AOT_ALIGN - 1) / AOT_ALIGN * AOT_ALIGN;
            s[i].offset = at;
            at += s[i].size;
        }
    }
    if (at > FC_AOT_MAX_FILE_BYTES)
        st = fc_set_error(ctx, FC_ERR_UNSUPPORTED, "program %s would make a file of %llu bytes, more than fusec loads",
                          d->graph_name, (unsigned long long)at);
    else if (!s || !src || !(out = fc_ctx_malloc(ctx, (size_t)at)))
        st = FC_ERR_NOMEM;
    if (st == FC_OK) {
        memset(out, 0, (size_t)at);
        memcpy(out, FC_AOT_MAGIC, 8);
        fc_put_le(out + 8, FC_AOT_VERSION, 4);
        fc_put_le(out + 16, (uint64_t)nsec, 4);
        for (int i = 0; i < nsec; i++) {
            uint8_t *e = out + FC_AOT_HEADER_SIZE + (size_t)i * FC_AOT_ENTRY_SIZE;
            fc_put_le(e, s[i].kind, 4);
            fc_put_le(e + 4, s[i].index, 4);
            fc_put_le(e + 8, s[i].offset, 8);
            fc_put_le(e + 16, s[i].size, 8);
            if (s[i].size) memcpy(out + s[i].offset, src[i], s[i].size);
        }
        uint8_t sum[16];
        file_checksum(out, (size_t)at, sum);
        memcpy(out + FC_AOT_CHECKSUM_OFFSET, sum, 16);
        file->data = out;
        file->size = (size_t)at;
    }
    fc_ctx_freemem(ctx, s);
    fc_ctx_freemem(ctx, src);
    return st;
}

/* The file of p (and of w, when not NULL) into *file. */
static fc_status program_file(fc_context *ctx, const fc_program *p, const fc_weights *w, fc_bytes *file) {
    fc_bytes first = {NULL, 0}, weights = {NULL, 0};
    const fc_program *kp = p;
    fc_aot_kind kind = FC_AOT_PROGRAM;
    fc_status st;
    if (fc_program_dynamic(p)) {
        kind = FC_AOT_DYNAMIC;
        kp = fc_dynamic_variant(fc_program_dynamic(p));
        if (!kp)
            return fc_set_error(ctx, FC_ERR_UNSUPPORTED,
                                "dynamic program %s has no dynamic variant (every shape is specialized), so a file "
                                "cannot hold it: bind every symbol (--bind, or --inputs) to save it",
                                fc_program_name(p));
        if (w && fc_weights_count(w) > 0)
            return fc_set_error(ctx, FC_ERR_UNSUPPORTED,
                                "dynamic program %s: a file holds weights with a static program only",
                                fc_program_name(p));
        st = dynamic_record(ctx, p, kp, &first);
    } else {
        st = fc_program_desc_encode(ctx, fc_program_desc_of(p), &first);
        if (st == FC_OK && w && fc_weights_count(w) > 0) st = weights_image(ctx, fc_program_desc_of(p), w, &weights);
    }
    if (st == FC_OK) st = build_file(ctx, kind, &first, kp, &weights, file);
    fc_bytes_free(&first);
    fc_bytes_free(&weights);
    return st;
}

fc_status fc_program_check_save_path(fc_context *ctx, const char *path) {
    if (!path || !*path) return fc_set_error(ctx, FC_ERR_USAGE, "fc_program_check_save_path: no path");
    return fc_output_check(ctx, path);
}

fc_status fc_program_save_file_weights(fc_program *p, const char *path, const fc_weights *w) {
    if (!p) return FC_ERR_USAGE;
    fc_context *ctx = fc_program_context(p);
    if (!path || !*path) return fc_set_error(ctx, FC_ERR_USAGE, "fc_program_save_file: no path");
    if (fc_program_device_of(p) != FC_DEVICE_CUDA)
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "program %s runs on the %s device: only a CUDA program can be "
                            "saved", fc_program_name(p), fc_device_name(fc_program_device_of(p)));
    fc_bytes file = {NULL, 0};
    fc_status st = program_file(ctx, p, w, &file);
    if (st != FC_OK) return st;
    /* Read it back as a load would: what is written must load. */
    aot_contents check;
    st = read_container(ctx, path, file.data, file.size, &check, NULL);
    if (st == FC_OK) contents_release(ctx, &check);
    if (st == FC_OK) st = fc_write_file_atomic(ctx, path, file.data, file.size);
    fc_bytes_free(&file);
    return st;
}

fc_status fc_program_save_file(fc_program *p, const char *path) {
    return fc_program_save_file_weights(p, path, fc_program_weights(p));
}
