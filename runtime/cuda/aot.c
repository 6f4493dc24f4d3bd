/*
 * aot.c - compiled programs in files: `fusec model.ir -o model.cubin`.
 *
 * The file is a real cubin: NVRTC compiles the program's CUDA source with
 * one more declaration at its end,
 *
 *     extern "C" __device__ const unsigned char fusec_program[N] = {...};
 *
 * whose bytes are the container of aot.h (magic, version, the checksum of
 * the whole file, the serialized program). So the file is an ELF that
 * cuModuleLoadData and cuobjdump accept, with every kernel of the program,
 * and fusec finds its launch plan in it by the symbol's name, without a
 * GPU. The checksum covers every byte of the file (its own 16 bytes read
 * as zeros): NVRTC writes the file first, then the checksum is patched
 * into the symbol's data, which nothing else in the ELF describes.
 *
 * Why a data symbol and not a section of our own: NVRTC makes the symbol
 * itself, so the ELF stays exactly what the CUDA tools produce; adding a
 * section would mean rewriting NVIDIA's ELF behind its back. The cost is
 * a second NVRTC compile at save time (its cubin is cached like a
 * kernel's, so saving the same program again compiles nothing) and the
 * plan's few kilobytes in device memory once the module is loaded.
 *
 * docs/AOT.md describes the format.
 */
#include "runtime/cuda/aot.h"
#include "ir/le.h"
#include "ir/outfile.h"
#include "ir/timing.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/program.h"
#include "runtime/cuda/program_cache.h"

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
#define ELF_SHT_PROGBITS 1
#define ELF_SHT_SYMTAB 2

/* ------------------------------------------------------------------ */
/* Finding the program in the ELF. Every offset and size read from the  */
/* file is checked against the file before it is used.                 */
/* ------------------------------------------------------------------ */

/* [off, off+n) inside a buffer of `size` bytes, without overflow. */
static bool inside(uint64_t off, uint64_t n, size_t size) { return off <= size && n <= size - off; }

fc_status fc_aot_locate(fc_context *ctx, const char *what, const uint8_t *data, size_t size, size_t *off,
                        size_t *len) {
    if (size < 64 || memcmp(data, "\x7f" "ELF", 4) != 0)
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: not a compiled fusec program (not an ELF file)", what);
    if (data[4] != ELF_CLASS64 || data[5] != ELF_DATA_LE)
        return fc_set_error(ctx, FC_ERR_INPUT,
                            "%s: not a compiled fusec program (not a 64-bit little-endian ELF file)", what);
    unsigned machine = (unsigned)fc_get_le(data + 18, 2);
    if (machine != ELF_MACHINE_CUDA)
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: not a compiled fusec program (an ELF file for machine %u, not a "
                            "CUDA cubin)", what, machine);
    uint64_t shoff = fc_get_le(data + 0x28, 8);
    unsigned shentsize = (unsigned)fc_get_le(data + 0x3a, 2), shnum = (unsigned)fc_get_le(data + 0x3c, 2);
    if (shentsize != ELF_SECTION_HEADER_BYTES || shnum == 0 ||
        !inside(shoff, (uint64_t)shnum * ELF_SECTION_HEADER_BYTES, size))
        return fc_set_error(ctx, FC_ERR_INPUT,
                            "%s: damaged compiled program: its ELF section table is not inside the file "
                            "(truncated?)", what);

    for (unsigned i = 0; i < shnum; i++) {
        const uint8_t *sh = data + shoff + (uint64_t)i * ELF_SECTION_HEADER_BYTES;
        if (fc_get_le(sh + 4, 4) != ELF_SHT_SYMTAB) continue;
        uint64_t soff = fc_get_le(sh + 24, 8), ssize = fc_get_le(sh + 32, 8), entsize = fc_get_le(sh + 56, 8);
        unsigned link = (unsigned)fc_get_le(sh + 40, 4);
        if (entsize != ELF_SYMBOL_BYTES || !inside(soff, ssize, size) || link >= shnum) goto damaged;
        const uint8_t *strsh = data + shoff + (uint64_t)link * ELF_SECTION_HEADER_BYTES;
        uint64_t stroff = fc_get_le(strsh + 24, 8), strsize = fc_get_le(strsh + 32, 8);
        if (!inside(stroff, strsize, size)) goto damaged;

        for (uint64_t j = 0; j < ssize / ELF_SYMBOL_BYTES; j++) {
            const uint8_t *sym = data + soff + j * ELF_SYMBOL_BYTES;
            uint64_t name = fc_get_le(sym, 4);
            if (!inside(name, sizeof FC_AOT_SYMBOL, strsize) ||
                memcmp(data + stroff + name, FC_AOT_SYMBOL, sizeof FC_AOT_SYMBOL) != 0)
                continue;
            unsigned shndx = (unsigned)fc_get_le(sym + 6, 2);
            uint64_t value = fc_get_le(sym + 8, 8), symsize = fc_get_le(sym + 16, 8);
            if (shndx == 0 || shndx >= shnum) goto damaged;
            const uint8_t *tsh = data + shoff + (uint64_t)shndx * ELF_SECTION_HEADER_BYTES;
            uint64_t taddr = fc_get_le(tsh + 16, 8), toff = fc_get_le(tsh + 24, 8), tsize = fc_get_le(tsh + 32, 8);
            if (fc_get_le(tsh + 4, 4) != ELF_SHT_PROGBITS || !inside(toff, tsize, size) || value < taddr ||
                !inside(value - taddr, symsize, tsize))
                goto damaged;
            *off = (size_t)(toff + value - taddr);
            *len = (size_t)symsize;
            return FC_OK;
        }
    }
    return fc_set_error(ctx, FC_ERR_INPUT,
                        "%s: not a compiled fusec program (a cubin without fusec's program in it; fusec runs the "
                        "files that `fusec FILE.ir -o FILE.cubin` writes)",
                        what);
damaged:
    return fc_set_error(ctx, FC_ERR_INPUT, "%s: damaged compiled program: its ELF symbol table is broken", what);
}

/* XXH3-128 of the file with the checksum field read as zeros. */
static void file_checksum(const uint8_t *data, size_t size, size_t field, uint8_t out[16]) {
    static const uint8_t zeros[16];
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

/* Check the container in data (located by fc_aot_locate) and decode its
 * program. */
static fc_status read_container(fc_context *ctx, const char *what, const uint8_t *data, size_t size,
                                fc_program_desc *desc) {
    size_t off = 0, len = 0;
    fc_status st = fc_aot_locate(ctx, what, data, size, &off, &len);
    if (st != FC_OK) return st;
    const uint8_t *c = data + off;
    if (len < FC_AOT_HEADER_SIZE || memcmp(c, FC_AOT_MAGIC, 8) != 0)
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: damaged compiled program: fusec's program data has no header",
                            what);
    uint32_t version = (uint32_t)fc_get_le(c + 8, 4), reserved = (uint32_t)fc_get_le(c + 12, 4);
    if (version != FC_AOT_VERSION)
        return fc_set_error(ctx, FC_ERR_INPUT,
                            "%s: compiled program format version %u; this fusec reads version %u (compile the "
                            "model again with this fusec)",
                            what, version, FC_AOT_VERSION);
    uint64_t n = fc_get_le(c + 16, 8);
    if (reserved != 0 || n > len - FC_AOT_HEADER_SIZE)
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: damaged compiled program: bad header", what);
    uint8_t sum[16];
    file_checksum(data, size, off + FC_AOT_CHECKSUM_OFFSET, sum);
    if (memcmp(sum, c + FC_AOT_CHECKSUM_OFFSET, 16) != 0)
        return fc_set_error(ctx, FC_ERR_INPUT,
                            "%s: damaged compiled program: checksum mismatch (the file was changed or cut short "
                            "after fusec wrote it)",
                            what);
    /* A program in another format version is a file from another fusec,
     * not damage: say so as for the container, with the fix. */
    const uint8_t *prog = c + FC_AOT_HEADER_SIZE;
    if (n >= 12 && memcmp(prog, FC_PROGRAM_MAGIC, 8) == 0 && fc_get_le(prog + 8, 4) != FC_PROGRAM_FORMAT_VERSION)
        return fc_set_error(ctx, FC_ERR_INPUT,
                            "%s: its program is in format version %u; this fusec reads version %u (compile the "
                            "model again with this fusec)",
                            what, (unsigned)fc_get_le(prog + 8, 4), FC_PROGRAM_FORMAT_VERSION);
    st = fc_program_desc_decode(ctx, prog, (size_t)n, desc);
    if (st == FC_ERR_INPUT) {
        /* The checksum matched, so this is a fusec bug, or a crafted file. */
        char why[512];
        snprintf(why, sizeof why, "%.500s", fc_last_error(ctx));
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: bad compiled program: %s", what, why);
    }
    if (st == FC_OK && (st = aot_check_desc(ctx, what, desc)) != FC_OK) fc_program_desc_release(desc);
    return st;
}

/* data becomes the program's cubin (owned), on success and failure. */
static fc_status load_owned(fc_context *ctx, const char *what, uint8_t *data, size_t size, double t0,
                            fc_program **out) {
    fc_program_desc desc;
    fc_status st = read_container(ctx, what, data, size, &desc);
    if (st != FC_OK) {
        fc_free(data);
        return st;
    }
    fc_bytes cubin = {data, size};
    st = fc_program_from_desc(ctx, &desc, &cubin, FC_PROGRAM_FILE, out);
    if (st == FC_OK) fc_program_times_ref(*out)->compile_ms = fc_now_ms() - t0;
    return st;
}

fc_status fc_program_load_data(fc_context *ctx, const void *data, size_t size, fc_program **out) {
    if (out) *out = NULL;
    if (!out || (!data && size)) return fc_set_error(ctx, FC_ERR_USAGE, "fc_program_load_data: NULL argument");
    double t0 = fc_now_ms();
    uint8_t *copy = fc_ctx_malloc(ctx, size);
    if (!copy) return FC_ERR_NOMEM;
    if (size) memcpy(copy, data, size);
    return load_owned(ctx, "program data", copy, size, t0, out);
}

/* The whole file into a new buffer; FC_ERR_RUNTIME when it cannot be read. */
static fc_status read_file(fc_context *ctx, const char *path, uint8_t **data, size_t *size) {
    *data = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return fc_set_error(ctx, FC_ERR_RUNTIME, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    fc_status status = FC_OK;
    if (fstat(fd, &st) != 0) status = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot read %s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode)) status = fc_set_error(ctx, FC_ERR_INPUT, "%s is not a regular file", path);
    else if ((uint64_t)st.st_size > FC_AOT_MAX_FILE_BYTES)
        status = fc_set_error(ctx, FC_ERR_INPUT, "%s: not a compiled fusec program (%lld bytes is too large)", path,
                              (long long)st.st_size);
    uint8_t *buf = NULL;
    size_t n = status == FC_OK ? (size_t)st.st_size : 0;
    if (status == FC_OK && !(buf = fc_ctx_malloc(ctx, n))) status = FC_ERR_NOMEM;
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
    uint8_t *data;
    size_t size;
    fc_status st = read_file(ctx, path, &data, &size);
    if (st != FC_OK) return st;
    return load_owned(ctx, path, data, size, t0, out);
}

bool fc_program_is_file(const char *path) {
    if (!path) return false;
    fc_context scratch = {0}; /* a probe has no error to report */
    uint8_t *data;
    size_t size, off, len;
    if (read_file(&scratch, path, &data, &size) != FC_OK) return false;
    bool yes = fc_aot_locate(&scratch, path, data, size, &off, &len) == FC_OK && len >= FC_AOT_HEADER_SIZE &&
               memcmp(data + off, FC_AOT_MAGIC, 8) == 0;
    fc_free(data);
    return yes;
}

/* ------------------------------------------------------------------ */
/* Saving.                                                             */
/* ------------------------------------------------------------------ */

/* The program's source with the container as a data symbol at its end.
 * The bytes are written as a brace list of decimal numbers: unambiguous
 * (a string literal's \x escapes swallow following hex digits), and
 * NVRTC reads a few hundred kilobytes of it in milliseconds. */
static char *source_with_container(fc_context *ctx, const char *source, const uint8_t *c, size_t n) {
    size_t slen = strlen(source);
    size_t cap = slen + 256 + 5 * n + n / 16 + 1;
    char *s = fc_ctx_malloc(ctx, cap);
    if (!s) return NULL;
    size_t len = (size_t)snprintf(s, cap,
                                  "%s\n/* fusec: the program's launch plan, read back by fusec from this symbol "
                                  "(docs/AOT.md). */\nextern \"C\" __device__ const unsigned char %s[%zu] = {",
                                  source, FC_AOT_SYMBOL, n);
    /* By hand: a snprintf a byte is most of a warm save's time. */
    for (size_t i = 0; i < n; i++) {
        const unsigned v = c[i];
        if (i % 32 == 0) s[len++] = '\n';
        if (v >= 100) s[len++] = (char)('0' + v / 100);
        if (v >= 10) s[len++] = (char)('0' + v / 10 % 10);
        s[len++] = (char)('0' + v % 10);
        s[len++] = ',';
    }
    snprintf(s + len, cap - len, "\n};\n");
    return s;
}

/* Compile the program with its container into *cubin, then patch the
 * checksum in. Checks on the way that NVRTC kept the bytes as written. */
static fc_status build_file(fc_context *ctx, const fc_program_desc *d, const char *path, fc_bytes *cubin) {
    fc_bytes prog = {NULL, 0};
    fc_status st = fc_program_desc_encode(ctx, d, &prog);
    if (st != FC_OK) return st;
    size_t n = FC_AOT_HEADER_SIZE + prog.size;
    uint8_t *c = fc_ctx_malloc(ctx, n);
    if (!c) {
        fc_bytes_free(&prog);
        return FC_ERR_NOMEM;
    }
    memset(c, 0, FC_AOT_HEADER_SIZE);
    memcpy(c, FC_AOT_MAGIC, 8);
    fc_put_le(c + 8, FC_AOT_VERSION, 4);
    fc_put_le(c + 16, prog.size, 8);
    memcpy(c + FC_AOT_HEADER_SIZE, prog.data, prog.size);
    fc_bytes_free(&prog);

    char *source = source_with_container(ctx, d->src.source, c, n);
    if (!source) {
        fc_free(c);
        return FC_ERR_NOMEM;
    }
    char unit[96];
    fc_program_unit_name(d->graph_name, unit, sizeof unit);
    /* The source holds the whole description: the kernel level of the
     * cache keeps the file's cubin under it, and saving again is a lookup. */
    st = fc_program_nvrtc_cached(ctx, source, unit, d->sm, d->fast_math, cubin);
    fc_free(source);

    size_t off = 0, len = 0;
    if (st == FC_OK) st = fc_aot_locate(ctx, path, cubin->data, cubin->size, &off, &len);
    if (st == FC_OK && (len != n || memcmp(cubin->data + off, c, n) != 0))
        st = fc_set_error(ctx, FC_ERR_RUNTIME,
                          "internal error: NVRTC did not keep fusec's program data as written (%zu bytes at %zu, "
                          "want %zu)",
                          len, off, n);
    fc_free(c);
    if (st == FC_OK) {
        uint8_t sum[16];
        file_checksum(cubin->data, cubin->size, off + FC_AOT_CHECKSUM_OFFSET, sum);
        memcpy(cubin->data + off + FC_AOT_CHECKSUM_OFFSET, sum, 16);
    }
    if (st != FC_OK) fc_bytes_free(cubin);
    return st;
}

fc_status fc_program_save_file(fc_program *p, const char *path) {
    if (!p) return FC_ERR_USAGE;
    fc_context *ctx = fc_program_context(p);
    if (!path || !*path) return fc_set_error(ctx, FC_ERR_USAGE, "fc_program_save_file: no path");
    const fc_program_desc *d = fc_program_desc_of(p);
    if (!d->src.source)
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "program %s has no CUDA source to compile", d->graph_name);
    fc_bytes file = {NULL, 0};
    fc_status st = build_file(ctx, d, path, &file);
    if (st != FC_OK) return st;
    /* Read it back as a load would: what is written must load. */
    fc_program_desc check;
    st = read_container(ctx, path, file.data, file.size, &check);
    if (st == FC_OK) fc_program_desc_release(&check);
    if (st == FC_OK) st = fc_write_file_atomic(ctx, path, file.data, file.size);
    fc_bytes_free(&file);
    return st;
}
