/* test_aot.c - compiled programs in files (`fusec model.ir -o model.cubin`).
 *
 * Everywhere (CI has no GPU):
 *   - save, then load: the same plan text, source, signature and sm; the
 *     loaded program's kernels' cubins are the compiled program's, byte for
 *     byte; no NVRTC when saving (the cubins are the compile's) and none,
 *     and no passes, at load; saving the loaded program gives the same file;
 *   - each kernel's section is a CUDA ELF (e_machine 190) defining the
 *     kernel (checked by our reader, and by cuobjdump when installed);
 *   - fc_program_is_file: yes for the file, no for .ir text, a plain cubin,
 *     an empty or missing file;
 *   - damage anywhere (a kernel's code, the program data, the checksum, a
 *     cut, an empty file, a newer format version, a kernel's cubin that is
 *     not one, a missing or doubled section) is refused with a message
 *     that says what is wrong;
 *   - weights in the file: saved, loaded, checked against the signature;
 *   - loading from memory; allocation failures while loading;
 *   - fc_arch_parse for the CLI's --arch.
 * With a GPU: the loaded program runs, and its outputs equal the JIT
 * program's bit for bit (the same kernels on the same inputs).
 */
#include "check.h"
#include "ir/le.h"
#include "codegen/cuda/attention.h"
#include "runtime/cuda/aot.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/dynamic.h"
#include "runtime/ref/interp.h"
#include "runtime/cuda/program.h"
#include "runtime/cuda/program_cache.h"
#include "test_util.h"
#include "aot_file.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


static char root[256];

static uint64_t nvrtc_count(void) {
    fc_compile_counters c;
    fc_compile_counters_get(&c);
    return c.nvrtc_compiles;
}

/* softmax over rows and a gelu with a broadcast bias, two results: several
 * kernels, one of them a row reduction. */
static fc_graph *g_model(fc_context *ctx, bool bf16) {
    fc_graph *g = fc_graph_new(ctx, bf16 ? "model_bf16" : "model");
    fc_dtype dt = bf16 ? FC_BF16 : FC_F32;
    fc_dim d[2] = {8, 384}, b[1] = {384};
    fc_value *x = fc_param(g, "x", dt, 2, d), *bias = fc_param(g, "bias", dt, 1, b);
    fc_value *outs[2] = {fc_softmax(g, x, -1), fc_gelu(g, fc_add(g, x, bias))};
    fc_graph_return(g, 2, outs);
    return g;
}

/* Causal attention, bf16, D=128: for sm 90 its kernel is fc_attn_fa3 with
 * tensor maps (fc_launch.tmaps), which the file must carry. */
static fc_graph *g_attention(fc_context *ctx) {
    static const char ir[] = "graph attention(%q: bf16[2, 3, 200, 128], %k: bf16[2, 3, 200, 128], %v: bf16[2, 3, 200, 128]) {\n"
                             "  %o = attention(%q, %k, %v, causal=true)\n  return %o\n}\n";
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse(ctx, "attention.ir", ir, strlen(ir), NULL, NULL, 0, &g), FC_OK);
    return g;
}

/* Does the file's symbol table hold `name`? (A plain scan of the string
 * table is enough here: fc_aot_locate is the real reader.) */
static bool has_string(const unsigned char *b, size_t n, const char *name) {
    size_t k = strlen(name) + 1;
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(b + i, name, k) == 0 && (i == 0 || b[i - 1] == 0)) return true;
    return false;
}

static bool tool_exists(const char *name, char *path, size_t n) {
    const char *dirs[] = {"/usr/local/cuda/bin", "/usr/bin", "/usr/local/bin"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, n, "%s/%s", dirs[i], name);
        if (access(path, X_OK) == 0) return true;
    }
    return false;
}

static void fix_checksum(unsigned char *b, size_t n) { aot_fix_checksum(b, n); }

/* The section table entry i of file b (no checks: the file is ours). */
static unsigned char *table_entry(unsigned char *b, int i) { return b + FC_AOT_HEADER_SIZE + (size_t)i * FC_AOT_ENTRY_SIZE; }

/* Load `path` and expect failure with `status` and `msg` in the message. */
static void expect_refused(fc_context *ctx, const char *path, fc_status status, const char *msg) {
    fc_program *p = (fc_program *)&p;
    fc_status st = fc_program_load_file(ctx, path, &p);
    if (st != status || !strstr(fc_last_error(ctx), msg))
        fprintf(stderr, "load %s: status %d, message: %s\n(want %d, \"%s\")\n", path, st, fc_last_error(ctx), status,
                msg);
    CHECK_EQ_INT(st, status);
    CHECK(strstr(fc_last_error(ctx), msg) != NULL);
    CHECK(p == NULL);
}

static void check_same_program(fc_program *a, fc_program *b) {
    check_same_code(a, b);
    CHECK_EQ_INT(fc_program_sm(b), fc_program_sm(a));
    CHECK_EQ_INT(fc_program_num_inputs(b), fc_program_num_inputs(a));
    CHECK_EQ_INT(fc_program_num_outputs(b), fc_program_num_outputs(a));
    for (int i = 0; i < fc_program_num_inputs(a); i++) {
        fc_tensor ta, tb;
        const char *na = NULL, *nb = NULL;
        CHECK_EQ_INT(fc_program_input(a, i, &ta, &na), FC_OK);
        CHECK_EQ_INT(fc_program_input(b, i, &tb, &nb), FC_OK);
        CHECK(memcmp(&ta, &tb, sizeof ta) == 0);
        CHECK_STR(nb, na);
    }
    for (int i = 0; i < fc_program_num_outputs(a); i++) {
        fc_tensor ta, tb;
        CHECK_EQ_INT(fc_program_output(a, i, &ta), FC_OK);
        CHECK_EQ_INT(fc_program_output(b, i, &tb), FC_OK);
        CHECK(memcmp(&ta, &tb, sizeof ta) == 0);
    }
}

/* g compiled for sm 90 (NULL on failure, counted). */
static fc_program *compile90(fc_graph *g) {
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.sm = 90;
    return compile_checked(g, &o);
}

/* g_model(ctx, false) into *g, compiled for sm_90; NULL (and *g freed)
 * when it does not compile. */
static fc_program *model90(fc_context *ctx, fc_graph **g) {
    *g = g_model(ctx, false);
    fc_program *p = compile90(*g);
    if (!p) {
        fc_graph_free(*g);
        *g = NULL;
    }
    return p;
}

/* ---- save and load ------------------------------------------------------------------ */

static void test_round_trip(fc_context *ctx, fc_graph *g, bool gpu) {
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.sm = 90;
    fc_program *jit = NULL;
    CHECK(g && fc_compile(g, &o, &jit) == FC_OK);
    if (!jit) {
        fc_graph_free(g);
        return;
    }
    char path[300];
    snprintf(path, sizeof path, "%s/%s.cubin", root, fc_graph_name(g));
    double t0 = fc_now_ms();
    fc_status st = fc_program_save_file(jit, path);
    double save_ms = fc_now_ms() - t0;
    if (st != FC_OK) fprintf(stderr, "save: %s\n", fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    CHECK(fc_program_is_file(path));
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && S_ISREG(sb.st_mode));

    size_t n;
    unsigned char *file = read_file(path, &n);
    CHECK(file && n > 64 && memcmp(file, FC_AOT_MAGIC, 8) == 0);
    /* One section per kernel, its cubin the compile's (an ELF64, LE,
     * EM_CUDA naming the kernel); every kernel is named in the file. */
    const int nk = fc_program_nkernels(jit);
    CHECK(file && fc_get_le(file + 16, 4) == (uint64_t)(1 + nk));
    for (int k = 0; file && k < nk; k++) {
        const unsigned char *e = table_entry(file, 1 + k);
        const fc_bytes *c = fc_program_kernel_cubin(jit, k);
        CHECK(fc_get_le(e, 4) == FC_AOT_KERNEL && fc_get_le(e + 4, 4) == (uint64_t)k);
        CHECK(c && fc_get_le(e + 16, 8) == c->size && !memcmp(file + fc_get_le(e + 8, 8), c->data, c->size));
        const unsigned char *cb = file + fc_get_le(e + 8, 8);
        CHECK(cb[4] == 2 && cb[5] == 1 && cb[18] == 190 && cb[19] == 0);
    }
    int ntmaps = 0;
    for (int i = 0; file && i < fc_program_num_launches(jit); i++) {
        const fc_launch *l = fc_program_launch(jit, i);
        if (l->kind == FC_LAUNCH_KERNEL) CHECK(has_string(file, n, l->name));
        ntmaps += l->ntmaps;
    }
    if (!strcmp(fc_graph_name(g), "attention") && fc_cuda_attention_hopper(90))
        CHECK_EQ_INT(ntmaps, 3);

    /* Saving ran no NVRTC: the cubins are the compile's. */
    uint64_t before_save = nvrtc_count();
    CHECK_EQ_INT(fc_program_save_file(jit, path), FC_OK);
    CHECK_EQ_INT(nvrtc_count(), before_save);
    /* Load: no NVRTC, no passes; the same program and cubins. */
    uint64_t n0 = nvrtc_count();
    fc_program *aot = NULL;
    t0 = fc_now_ms();
    st = fc_program_load_file(ctx, path, &aot);
    double load_ms = fc_now_ms() - t0;
    if (st != FC_OK) fprintf(stderr, "load: %s\n", fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    CHECK_EQ_INT(nvrtc_count(), n0);
    printf("%s: saved %zu bytes in %.1f ms (no NVRTC), loaded in %.3f ms; %d tensor maps\n", fc_graph_name(g), n,
           save_ms, load_ms, ntmaps);
    if (aot) {
        check_same_program(jit, aot);
        /* The tensor maps too, field by field. */
        for (int i = 0; i < fc_program_num_launches(jit); i++) {
            const fc_launch *a = fc_program_launch(jit, i), *b = fc_program_launch(aot, i);
            CHECK_EQ_INT(b->ntmaps, a->ntmaps);
            for (int t = 0; t < a->ntmaps && t < b->ntmaps; t++) {
                const fc_tmap *x = &a->tmaps[t], *y = &b->tmaps[t];
                CHECK(x->arg == y->arg && x->offset == y->offset && x->dtype == y->dtype && x->rank == y->rank &&
                      x->swizzle128 == y->swizzle128);
                for (int d = 0; d < x->rank && d < FC_TMAP_MAX_RANK; d++)
                    CHECK(x->dims[d] == y->dims[d] && x->box[d] == y->box[d] && (d == 0 || x->strides[d - 1] == y->strides[d - 1]));
            }
        }
        CHECK_EQ_INT(fc_program_nkernels(aot), nk);
        for (int k = 0; k < nk; k++) {
            const fc_bytes *a = fc_program_kernel_cubin(jit, k), *b = fc_program_kernel_cubin(aot, k);
            CHECK(a && b && a->size == b->size && !memcmp(a->data, b->data, a->size));
        }
        fc_compile_times t;
        fc_program_times(aot, &t);
        CHECK_EQ_INT(t.origin, FC_PROGRAM_FILE);
        CHECK(t.passes_ms == 0 && t.nvrtc_ms == 0 && t.compile_ms > 0);
        char *tt = fc_compile_times_text(&t);
        CHECK(tt && strstr(tt, "(loaded from a compiled program file)"));
        fc_free(tt);
        /* The PTX comes from the stored source, as for any program. */
        char *ptx = fc_program_ptx(aot);
        CHECK(ptx && strstr(ptx, ".entry"));
        fc_free(ptx);
        /* The plan, re-planned from the graph text on demand. */
        const fc_plan *pl = fc_program_plan(aot);
        CHECK(pl && pl->arena_bytes == fc_program_plan(jit)->arena_bytes);

        /* Saving the loaded program gives the same program again. */
        char path2[320];
        snprintf(path2, sizeof path2, "%s.again", path);
        CHECK_EQ_INT(fc_program_save_file(aot, path2), FC_OK);
        fc_program *again = NULL;
        CHECK_EQ_INT(fc_program_load_file(ctx, path2, &again), FC_OK);
        if (again) check_same_program(aot, again);
        fc_program_free(again);
        size_t n2 = 0;
        unsigned char *file2 = read_file(path2, &n2);
        CHECK(file && file2 && n2 == n && !memcmp(file, file2, n));
        free(file2);
    }

    /* From memory, as an application that embeds the file would. */
    fc_program *mem = NULL;
    CHECK_EQ_INT(fc_program_load_data(ctx, file, n, &mem), FC_OK);
    if (mem) check_same_program(jit, mem);
    fc_program_free(mem);

    /* An independent reader of the first kernel's cubin, when installed. */
    char tool[256], cmd[900], one[400];
    snprintf(one, sizeof one, "%s.kernel0", path);
    if (file && nk > 0) {
        const unsigned char *e = table_entry(file, 1);
        write_all(one, file + fc_get_le(e + 8, 8), fc_get_le(e + 16, 8));
    }
    if (nk > 0 && tool_exists("cuobjdump", tool, sizeof tool)) {
        snprintf(cmd, sizeof cmd, "%s -sass '%s' 2>/dev/null | grep -q 'Function : '", tool, one);
        CHECK(system(cmd) == 0);
        printf("cuobjdump accepts the file's first cubin\n");
    } else {
        printf("cuobjdump: not installed here (skipped)\n");
    }

    /* With a GPU: the file runs, and exactly as the JIT program does. */
    if (gpu && aot) {
        int nin = fc_program_num_inputs(jit), nout = fc_program_num_outputs(jit);
        fc_tensor in[4], a[4], b[4];
        unsigned long long rng = 42;
        for (int i = 0; i < nin; i++) {
            CHECK_EQ_INT(fc_program_input(jit, i, &in[i], NULL), FC_OK);
            int64_t numel = fc_tensor_numel(&in[i]);
            in[i].data = malloc((size_t)numel * fc_dtype_size(in[i].dtype));
            for (int64_t j = 0; j < numel; j++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                fc_interp_store(in[i].dtype, in[i].data, j, (double)(rng >> 11) / 9007199254740992.0 * 4 - 2);
            }
        }
        CHECK_EQ_INT(fc_program_run_host(jit, in, nin, a, nout, NULL, 0), FC_OK);
        st = fc_program_run_host(aot, in, nin, b, nout, NULL, 0);
        if (st != FC_OK) fprintf(stderr, "run the file: %s\n", fc_last_error(ctx));
        CHECK_EQ_INT(st, FC_OK);
        for (int k = 0; st == FC_OK && k < nout; k++) {
            fc_tensor ty;
            fc_program_output(aot, k, &ty);
            size_t bytes = (size_t)fc_tensor_numel(&ty) * fc_dtype_size(ty.dtype);
            CHECK(memcmp(a[k].data, b[k].data, bytes) == 0);
            fc_tensor_release(&a[k]);
            fc_tensor_release(&b[k]);
        }
        fc_compile_times t;
        fc_program_times(aot, &t);
        printf("%s: the file ran on the GPU like the JIT program; device %.1f ms, load %.3f ms\n",
               fc_graph_name(g), t.device_ms, t.load_ms);
        CHECK(t.loaded);
        for (int i = 0; i < nin; i++) free(in[i].data);
    }

    free(file);
    fc_program_free(aot);
    fc_program_free(jit);
    fc_graph_free(g);
}

/* ---- what is not a program ------------------------------------------------------------ */

static void test_refused(fc_context *ctx) {
    fc_graph *g;
    fc_program *p = model90(ctx, &g);
    if (!p) return;
    char path[300], bad[300];
    snprintf(path, sizeof path, "%s/refused.cubin", root);
    snprintf(bad, sizeof bad, "%s/bad.cubin", root);
    CHECK_EQ_INT(fc_program_save_file(p, path), FC_OK);
    size_t n;
    unsigned char *file = read_file(path, &n);
    if (!file) {
        fc_program_free(p);
        fc_graph_free(g);
        return;
    }
    fc_aot_section prog;
    CHECK(aot_find_section(file, n, FC_AOT_PROGRAM, &prog));
    const int nk = fc_program_nkernels(p);
    CHECK(nk >= 2);
    const uint64_t k0 = fc_get_le(table_entry(file, 1) + 8, 8), k0size = fc_get_le(table_entry(file, 1) + 16, 8);
    unsigned char *b = malloc(n);

    /* A flipped bit in a kernel's code, in the program data, in the
     * checksum itself. */
    memcpy(b, file, n);
    b[k0 + k0size / 2] ^= 0x04;
    write_all(bad, b, n);
    expect_refused(ctx, bad, FC_ERR_INPUT, "damaged compiled program: checksum mismatch");
    memcpy(b, file, n);
    b[prog.offset + prog.size - 3] ^= 0x01;
    write_all(bad, b, n);
    expect_refused(ctx, bad, FC_ERR_INPUT, "checksum mismatch");
    memcpy(b, file, n);
    b[FC_AOT_CHECKSUM_OFFSET] ^= 0x80;
    write_all(bad, b, n);
    expect_refused(ctx, bad, FC_ERR_INPUT, "checksum mismatch");

    /* Cut short: by one byte (the last section no longer fits), into the
     * table, into the header, to nothing. */
    write_all(bad, file, n - 1);
    expect_refused(ctx, bad, FC_ERR_INPUT, "damaged compiled program");
    write_all(bad, file, FC_AOT_HEADER_SIZE + 5);
    expect_refused(ctx, bad, FC_ERR_INPUT, "damaged compiled program: bad header");
    write_all(bad, file, 20);
    expect_refused(ctx, bad, FC_ERR_INPUT, "damaged compiled program: cut short in its header");
    write_all(bad, file, 0);
    expect_refused(ctx, bad, FC_ERR_INPUT, "no FUSECAOT header");
    CHECK(!fc_program_is_file(bad));

    /* A newer format (with a good checksum): says so. */
    memcpy(b, file, n);
    b[8] = 3;
    fix_checksum(b, n);
    write_all(bad, b, n);
    CHECK(fc_program_is_file(bad)); /* a program file, of another version */
    expect_refused(ctx, bad, FC_ERR_INPUT, "compiled program format version 3; this fusec reads version 2");

    /* Good checksum, bad program inside: refused by the decoder. */
    memcpy(b, file, n);
    b[prog.offset] = 'X';
    fix_checksum(b, n);
    write_all(bad, b, n);
    expect_refused(ctx, bad, FC_ERR_INPUT, "bad compiled program: bad program data at byte");

    /* Good checksum, a kernel's cubin that is not one: not an ELF, an ELF
     * for another machine, one that does not define its kernel (kernel 1's
     * cubin given as kernel 0's, and the other way round). */
    memcpy(b, file, n);
    b[k0] = 'X';
    fix_checksum(b, n);
    write_all(bad, b, n);
    expect_refused(ctx, bad, FC_ERR_INPUT, "bad compiled program: the cubin of kernel 0 (");
    CHECK(strstr(fc_last_error(ctx), "): not an ELF file") != NULL);
    memcpy(b, file, n);
    b[k0 + 18] = 62; /* x86-64 */
    fix_checksum(b, n);
    write_all(bad, b, n);
    expect_refused(ctx, bad, FC_ERR_INPUT, "an ELF file for another machine than CUDA");
    memcpy(b, file, n);
    fc_put_le(table_entry(b, 1) + 4, 1, 4);
    fc_put_le(table_entry(b, 2) + 4, 0, 4);
    fix_checksum(b, n);
    write_all(bad, b, n);
    expect_refused(ctx, bad, FC_ERR_INPUT, "it does not define the kernel");

    /* Good checksum, a bad table: a kernel twice, a kernel missing, a
     * section of an unknown kind, a section outside the file, sections
     * out of order. */
    memcpy(b, file, n);
    fc_put_le(table_entry(b, 2) + 4, 0, 4);
    fix_checksum(b, n);
    write_all(bad, b, n);
    expect_refused(ctx, bad, FC_ERR_INPUT, "which the program has twice");
    memcpy(b, file, n);
    fc_put_le(b + 16, (uint64_t)nk, 4); /* the last kernel's entry is no longer in the table */
    fix_checksum(b, n);
    write_all(bad, b, n);
    expect_refused(ctx, bad, FC_ERR_INPUT, "has no cubin in the file");
    memcpy(b, file, n);
    fc_put_le(table_entry(b, 1), 9, 4);
    fix_checksum(b, n);
    write_all(bad, b, n);
    expect_refused(ctx, bad, FC_ERR_INPUT, "section 1 is of unknown kind 9");
    memcpy(b, file, n);
    fc_put_le(table_entry(b, 1) + 16, (uint64_t)n, 8);
    fix_checksum(b, n);
    write_all(bad, b, n);
    expect_refused(ctx, bad, FC_ERR_INPUT, "section 1 is out of place");
    memcpy(b, file, n);
    fc_put_le(table_entry(b, 2) + 8, k0, 8);
    fix_checksum(b, n);
    write_all(bad, b, n);
    expect_refused(ctx, bad, FC_ERR_INPUT, "section 2 is out of place");

    /* A plain cubin (what NVRTC makes) is not a program file. */
    const fc_bytes *cubin = fc_program_cubin(p);
    write_all(bad, cubin->data, cubin->size);
    CHECK(!fc_program_is_file(bad));
    expect_refused(ctx, bad, FC_ERR_INPUT, "an ELF file: a plain cubin, or a program file from an older fusec");

    /* .ir text, a directory, a missing file. */
    const char *src = getenv("FUSEC_SRC");
    char ir[512];
    snprintf(ir, sizeof ir, "%s/examples/softmax.ir", src ? src : ".");
    CHECK(!fc_program_is_file(ir));
    expect_refused(ctx, ir, FC_ERR_INPUT, "not a compiled fusec program (no FUSECAOT header)");
    expect_refused(ctx, root, FC_ERR_INPUT, "is not a regular file");
    char missing[300];
    snprintf(missing, sizeof missing, "%s/missing.cubin", root);
    CHECK(!fc_program_is_file(missing));
    expect_refused(ctx, missing, FC_ERR_RUNTIME, "cannot open");

    /* Every truncation and every flipped byte of the file: refused or
     * loaded, never a crash (ASan watches the reader). Sampled every
     * 7 bytes to keep the test fast. */
    int loaded = 0;
    for (size_t i = 0; i < n; i += 7) {
        fc_program *x = NULL;
        fc_status st = fc_program_load_data(ctx, file, i, &x);
        CHECK(st == FC_ERR_INPUT && !x);
        memcpy(b, file, n);
        b[i] ^= 0x5a;
        st = fc_program_load_data(ctx, b, n, &x);
        CHECK(st == FC_ERR_INPUT || st == FC_OK);
        loaded += st == FC_OK;
        fc_program_free(x);
    }
    /* The checksum covers every byte: nothing changed loads. */
    CHECK_EQ_INT(loaded, 0);

    /* Allocation failures while loading. */
    int failures = 0;
    for (long k = 1; k < 10000; k++) {
        fc_program *x = NULL;
        fc_context_fail_alloc_after(ctx, k);
        fc_status st = fc_program_load_file(ctx, path, &x);
        fc_context_fail_alloc_after(ctx, 0);
        if (st == FC_OK) {
            fc_program_free(x);
            break;
        }
        failures++;
        CHECK_EQ_INT(st, FC_ERR_NOMEM);
    }
    CHECK(failures > 3);

    /* Misuse. */
    fc_program *x = NULL;
    CHECK_EQ_INT(fc_program_load_file(ctx, NULL, &x), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_program_save_file(NULL, path), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_program_save_file(p, ""), FC_ERR_USAGE);
    char nodir[300];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/x.cubin", root);
    CHECK_EQ_INT(fc_program_save_file(p, nodir), FC_ERR_RUNTIME);
    CHECK(strstr(fc_last_error(ctx), "cannot write") != NULL);
    CHECK(!fc_program_is_file(NULL));
    CHECK_EQ_INT(fc_program_save_file_weights(NULL, path, NULL), FC_ERR_USAGE);
    CHECK(fc_program_weights(NULL) == NULL);
    CHECK_EQ_INT(fc_program_check_save_path(ctx, NULL), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_program_check_save_path(ctx, ""), FC_ERR_USAGE);

    /* The name is checked before anything is written (fusec -o checks it
     * before the compile): a new name and a regular file pass; a FIFO, a
     * directory, a dangling symlink and a missing directory do not, and
     * nothing is created. */
    char node[400];
    snprintf(node, sizeof node, "%s/new.cubin", root);
    CHECK_EQ_INT(fc_program_check_save_path(ctx, node), FC_OK);
    CHECK(access(node, F_OK) != 0);
    CHECK_EQ_INT(fc_program_check_save_path(ctx, path), FC_OK);
    snprintf(node, sizeof node, "%s/fifo", root);
    CHECK(mkfifo(node, 0600) == 0);
    CHECK_EQ_INT(fc_program_check_save_path(ctx, node), FC_ERR_RUNTIME);
    CHECK(strstr(fc_last_error(ctx), "it is a FIFO; fusec writes only regular files") != NULL);
    CHECK_EQ_INT(fc_program_check_save_path(ctx, root), FC_ERR_RUNTIME);
    CHECK(strstr(fc_last_error(ctx), "it is a directory") != NULL);
    snprintf(node, sizeof node, "%s/dangling", root);
    CHECK(symlink("nothing-here", node) == 0);
    CHECK_EQ_INT(fc_program_check_save_path(ctx, node), FC_ERR_RUNTIME);
    CHECK(strstr(fc_last_error(ctx), "dangling symlink") != NULL);
    CHECK_EQ_INT(fc_program_check_save_path(ctx, nodir), FC_ERR_RUNTIME);
    CHECK(strstr(fc_last_error(ctx), "cannot write") != NULL);

    free(b);
    free(file);
    fc_program_free(p);
    fc_graph_free(g);
}

/* Metadata that contradicts itself, with a valid checksum: each is refused
 * with a clean message before any buffer is sized from it (docs/AOT.md,
 * "Trust"). The program bytes are decoded, changed, and encoded again at
 * the same length, so only the one inconsistency differs. */
enum aot_lie { LIE_OUTPUT_ZERO, LIE_INPUT_HUGE, LIE_ARENA, LIE_GRID, LIE_BLOCK, LIE_SMEM, LIE_GRAPH_DIM,
               LIE_GRAPH_TEXT, LIE_COUNT };

static void test_inconsistent(fc_context *ctx) {
    fc_graph *g = g_model(ctx, false);
    fc_program *p = compile90(g);
    char path[300], bad[300];
    snprintf(path, sizeof path, "%s/lies.cubin", root);
    snprintf(bad, sizeof bad, "%s/lie.cubin", root);
    CHECK_EQ_INT(fc_program_save_file(p, path), FC_OK);
    size_t n = 0;
    unsigned char *file = read_file(path, &n);
    fc_aot_section ps = {0};
    CHECK(file && aot_find_section(file, n, FC_AOT_PROGRAM, &ps));
    unsigned char *b = malloc(n);
    const size_t prog = ps.offset, plen = ps.size;
    static const char *want[LIE_COUNT] = {
        "result 0 is declared as 0 bytes, but the kernels use 12288",
        "parameter 0 has no valid type, or one larger than any GPU's memory",
        "an arena of 4611686018427387904 bytes, more than any GPU has",
        "grid [4294967295, 1, 1] exceeds what any CUDA device launches",
        "block [4294967295, 1, 1] exceeds what any CUDA device launches",
        "4294967295 bytes of shared memory, more than any CUDA device has",
        "parameter 0 of its embedded graph is not the one of its signature",
        "its embedded graph does not parse",
    };
    for (int lie = 0; file && b && lie < LIE_COUNT; lie++) {
        fc_program_desc d;
        CHECK_EQ_INT(fc_program_desc_decode(ctx, file + prog, plen, &d), FC_OK);
        int k = 0;
        while (k < d.src.nlaunches && d.src.launches[k].kind != FC_LAUNCH_KERNEL) k++;
        CHECK(k < d.src.nlaunches);
        char *dim;
        switch ((enum aot_lie)lie) {
        case LIE_OUTPUT_ZERO: d.outputs[0].dims[0] = 0; break;
        case LIE_INPUT_HUGE: d.params[0].dims[0] = (int64_t)1 << 40; break;
        case LIE_ARENA: d.arena_bytes = (int64_t)1 << 62; break;
        case LIE_GRID: d.src.launches[k].grid[0] = UINT32_MAX; break;
        case LIE_BLOCK: d.src.launches[k].block[0] = UINT32_MAX; break;
        case LIE_SMEM: d.src.launches[k].smem = UINT32_MAX; break;
        case LIE_GRAPH_DIM: /* every f32[8, 384] -> f32[9, 384]: same length, and it parses */
            dim = strstr(d.graph_text, "f32[8, 384]");
            CHECK(dim != NULL);
            for (; dim; dim = strstr(dim, "f32[8, 384]")) dim[4] = '9';
            break;
        case LIE_GRAPH_TEXT: d.graph_text[0] = '}'; break;
        case LIE_COUNT: break;
        }
        fc_bytes enc = {NULL, 0};
        CHECK_EQ_INT(fc_program_desc_encode(ctx, &d, &enc), FC_OK);
        fc_program_desc_release(&d);
        CHECK_EQ_INT(enc.size, plen);
        memcpy(b, file, n);
        if (enc.size == plen) memcpy(b + prog, enc.data, plen);
        fc_bytes_free(&enc);
        fix_checksum(b, n);
        write_all(bad, b, n);
        expect_refused(ctx, bad, FC_ERR_INPUT, want[lie]);
        CHECK(strstr(fc_last_error(ctx), "bad compiled program") != NULL);
    }
    free(b);
    free(file);
    fc_program_free(p);
    fc_graph_free(g);
}

/* ---- weights in the file -------------------------------------------------------------- */

/* The parameters' data saved with the program comes back with the
 * loaded program, unchanged; a tensor that is not a parameter's is
 * refused at save time, and a file whose weights contradict the signature
 * (with a valid checksum) at load time. */
static void test_weights(fc_context *ctx) {
    fc_graph *g;
    fc_program *p = model90(ctx, &g);
    if (!p) return;
    char path[300], again[320], bad[300];
    snprintf(path, sizeof path, "%s/weights.cubin", root);
    snprintf(again, sizeof again, "%s/weights2.cubin", root);
    snprintf(bad, sizeof bad, "%s/weights_bad.cubin", root);
    float bias[384];
    for (int i = 0; i < 384; i++) bias[i] = (float)i * 0.25f - 7.0f;
    fc_tensor t = {FC_F32, 1, {384}, bias};
    fc_weights *w = fc_weights_new();
    CHECK_EQ_INT(fc_weights_add(w, "bias", &t), FC_OK);
    uint64_t n0 = nvrtc_count();
    fc_status st = fc_program_save_file_weights(p, path, w);
    if (st != FC_OK) fprintf(stderr, "save with weights: %s\n", fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    CHECK_EQ_INT(nvrtc_count(), n0);
    CHECK(fc_program_weights(p) == NULL); /* a compiled program carries none */

    fc_program *q = NULL;
    CHECK_EQ_INT(fc_program_load_file(ctx, path, &q), FC_OK);
    const fc_weights *back = q ? fc_program_weights(q) : NULL;
    CHECK(back && fc_weights_count(back) == 1);
    const fc_tensor *b = back ? fc_weights_find(back, "bias") : NULL;
    CHECK(b && b->dtype == FC_F32 && b->rank == 1 && b->shape[0] == 384 && !memcmp(b->data, bias, sizeof bias));
    /* Saving the loaded program keeps its weights: the same file. */
    CHECK(q && fc_program_save_file(q, again) == FC_OK);
    size_t n = 0, n2 = 0;
    unsigned char *file = read_file(path, &n), *file2 = read_file(again, &n2);
    CHECK(file && file2 && n == n2 && !memcmp(file, file2, n));
    free(file2);
    fc_program_free(q);

    /* Not a parameter, or not its type: refused, nothing written. */
    fc_weights *stray = fc_weights_new();
    fc_tensor z = {FC_F32, 1, {4}, bias};
    CHECK_EQ_INT(fc_weights_add(stray, "nobody", &z), FC_OK);
    CHECK_EQ_INT(fc_program_save_file_weights(p, bad, stray), FC_ERR_USAGE);
    CHECK(strstr(fc_last_error(ctx), "cannot save weight 'nobody' with program model: it names no parameter"));
    fc_weights_free(stray);
    stray = fc_weights_new();
    CHECK_EQ_INT(fc_weights_add(stray, "bias", &z), FC_OK);
    CHECK_EQ_INT(fc_program_save_file_weights(p, bad, stray), FC_ERR_USAGE);
    CHECK(strstr(fc_last_error(ctx), "its type is not its parameter's"));
    fc_weights_free(stray);
    CHECK(access(bad, F_OK) != 0);

    /* A crafted file: the weight's dtype changed in place (F32 -> I32),
     * the checksum recomputed. */
    fc_aot_section ws;
    CHECK(file && aot_find_section(file, n, FC_AOT_WEIGHTS, &ws));
    unsigned char *dt = NULL;
    for (size_t i = 0; file && !dt && i + 5 <= ws.size; i++)
        if (!memcmp(file + ws.offset + i, "\"F32\"", 5)) dt = file + ws.offset + i;
    CHECK(dt != NULL);
    if (dt) {
        dt[1] = 'I';
        fix_checksum(file, n);
        write_all(bad, file, n);
        expect_refused(ctx, bad, FC_ERR_INPUT, "bad compiled program: weight 'bias' does not have its parameter's type");
    }
    free(file);
    fc_weights_free(w);
    fc_program_free(p);
    fc_graph_free(g);
}

/* ---- dynamic programs ------------------------------------------------------------------- */

/* A dynamic program (N unbound) in a file: saved with no NVRTC, loaded
 * with none (its graph planned again, the variant's cubins the file's),
 * dynamic again with the same signature and kernels, and every shape is
 * served by the variant (no specialization: those would need NVRTC).
 * A file whose kernels are not the ones its graph makes is refused. */
static void test_dynamic(fc_context *ctx, bool gpu) {
    static const char ir[] = "graph dyn(%x: f32[N, 384], %b: f32[384]) {\n  %s = softmax(%x, axis=-1)\n"
                             "  %a = add(%s, %b)\n  %y = gelu(%a)\n  return %y\n}\n";
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse(ctx, "dyn.ir", ir, strlen(ir), NULL, NULL, 0, &g), FC_OK);
    if (!g) return;
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.sm = 90;
    o.dynamic = true;
    o.specialize = FC_SPECIALIZE_OFF;
    fc_program *p = NULL;
    CHECK_EQ_INT(fc_compile(g, &o, &p), FC_OK);
    fc_program *v = p ? fc_dynamic_variant(fc_program_dynamic(p)) : NULL;
    CHECK(v != NULL);
    if (!v) {
        fc_program_free(p);
        fc_graph_free(g);
        return;
    }
    char path[300], again[320], bad[300];
    snprintf(path, sizeof path, "%s/dyn.cubin", root);
    snprintf(again, sizeof again, "%s/dyn2.cubin", root);
    snprintf(bad, sizeof bad, "%s/dyn_bad.cubin", root);
    uint64_t n0 = nvrtc_count();
    fc_status st = fc_program_save_file(p, path);
    if (st != FC_OK) fprintf(stderr, "save dynamic: %s\n", fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    CHECK_EQ_INT(nvrtc_count(), n0);
    CHECK(fc_program_is_file(path));

    fc_program *q = NULL;
    double t0 = fc_now_ms();
    st = fc_program_load_file(ctx, path, &q);
    double load_ms = fc_now_ms() - t0;
    if (st != FC_OK) fprintf(stderr, "load dynamic: %s\n", fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    CHECK_EQ_INT(nvrtc_count(), n0);
    fc_program *qv = q ? fc_dynamic_variant(fc_program_dynamic(q)) : NULL;
    CHECK(qv != NULL);
    if (qv) {
        printf("dynamic: a file of %d kernels loaded in %.1f ms (planned again, no NVRTC)\n", fc_program_nkernels(qv),
               load_ms);
        CHECK_EQ_INT(fc_program_nkernels(qv), fc_program_nkernels(v));
        for (int k = 0; k < fc_program_nkernels(v); k++) {
            const fc_bytes *a = fc_program_kernel_cubin(v, k), *b = fc_program_kernel_cubin(qv, k);
            CHECK(a && b && a->size == b->size && !memcmp(a->data, b->data, a->size));
        }
        CHECK_EQ_INT(fc_program_num_inputs(q), 2);
        fc_tensor ta, tb;
        const char *na = NULL, *nb = NULL;
        CHECK(fc_program_input(p, 0, &ta, &na) == FC_OK && fc_program_input(q, 0, &tb, &nb) == FC_OK);
        CHECK(!memcmp(&ta, &tb, sizeof ta) && !strcmp(na, nb));
        CHECK_STR(fc_program_graph_text(q), fc_program_graph_text(p));
        /* Any N: the variant serves it. */
        for (int64_t nval = 1; nval <= 1000; nval *= 10) {
            fc_program *spec = (fc_program *)&spec;
            CHECK_EQ_INT(fc_dynamic_select(q, &nval, &spec), FC_OK);
            CHECK(spec == NULL);
        }
        CHECK_EQ_INT(nvrtc_count(), n0);
        /* Saving the loaded program gives the same file. */
        CHECK_EQ_INT(fc_program_save_file(q, again), FC_OK);
        size_t n1 = 0, n2 = 0;
        unsigned char *f1 = read_file(path, &n1), *f2 = read_file(again, &n2);
        CHECK(f1 && f2 && n1 == n2 && !memcmp(f1, f2, n1));
        free(f2);

        /* Crafted, with a good checksum: a kernel's source hash changed
         * (its cubin is not what this graph's kernel compiles to), the
         * graph text broken, every dim bound. */
        fc_aot_section ds;
        CHECK(f1 && aot_find_section(f1, n1, FC_AOT_DYNAMIC, &ds));
        unsigned char *b = malloc(n1);
        if (f1 && b) {
            memcpy(b, f1, n1);
            b[ds.offset + ds.size - 1] ^= 1; /* the last kernel's hash */
            fix_checksum(b, n1);
            write_all(bad, b, n1);
            expect_refused(ctx, bad, FC_ERR_INPUT, "its kernels are not the ones this fusec makes for its graph");
            CHECK_EQ_INT(nvrtc_count(), n0);
            memcpy(b, f1, n1);
            b[ds.offset + 24] = '}';
            fix_checksum(b, n1);
            write_all(bad, b, n1);
            expect_refused(ctx, bad, FC_ERR_INPUT, "its embedded graph does not parse");
            memcpy(b, f1, n1);
            int bound = 0; /* every [N, -> [7, (the parameter's and the annotations') */
            for (size_t i = ds.offset; i + 3 <= ds.offset + ds.size; i++)
                if (!memcmp(b + i, "[N,", 3)) b[i + 1] = '7', bound++;
            CHECK(bound >= 2);
            if (bound) {
                fix_checksum(b, n1);
                write_all(bad, b, n1);
                expect_refused(ctx, bad, FC_ERR_INPUT, "a dynamic program whose graph has every dim bound");
            }
            memcpy(b, f1, n1);
            fc_put_le(b + ds.offset, 5, 4); /* sm_5 */
            fix_checksum(b, n1);
            write_all(bad, b, n1);
            expect_refused(ctx, bad, FC_ERR_INPUT, "bad target or bad options");
        }
        free(b);
        free(f1);
    }
    /* With a GPU: the file at two shapes, as the JIT dynamic program
     * computes them (the same kernels on the same inputs). */
    for (int64_t nval = 3; gpu && q && nval <= 700; nval += 697) {
        fc_tensor in[2] = {{FC_F32, 2, {nval, 384}, NULL}, {FC_F32, 1, {384}, NULL}}, a[1], b[1];
        for (int i = 0; i < 2; i++) {
            int64_t numel = fc_tensor_numel(&in[i]);
            float *x = malloc((size_t)numel * sizeof *x);
            for (int64_t j = 0; j < numel; j++) x[j] = (float)((j * 7919 + i * 13) % 1000) / 250.0f - 2.0f;
            in[i].data = x;
        }
        CHECK_EQ_INT(fc_program_run_host(p, in, 2, a, 1, NULL, 0), FC_OK);
        st = fc_program_run_host(q, in, 2, b, 1, NULL, 0);
        if (st != FC_OK) fprintf(stderr, "run the dynamic file: %s\n", fc_last_error(ctx));
        CHECK_EQ_INT(st, FC_OK);
        if (st == FC_OK) {
            CHECK(b[0].rank == 2 && b[0].shape[0] == nval && b[0].shape[1] == 384);
            CHECK(!memcmp(a[0].data, b[0].data, (size_t)nval * 384 * sizeof(float)));
            fc_tensor_release(&b[0]);
        }
        fc_tensor_release(&a[0]);
        free(in[0].data);
        free(in[1].data);
    }
    CHECK_EQ_INT(nvrtc_count(), n0);
    fc_program_free(q);
    fc_program_free(p);
    fc_graph_free(g);
}

static void test_arch(void) {
    static const struct {
        const char *text;
        int sm; /* 0: refused */
    } cases[] = {{"sm_90", 90}, {"sm_80", 80},  {"sm89", 89},      {"90", 90}, {"9.0", 90}, {"sm_100", 100},
                 {"sm_90a", 0}, {"compute_90", 0}, {"sm_", 0}, {"5", 0},   {"", 0},    {NULL, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int sm = 0;
        const bool ok = fc_arch_parse(cases[i].text, &sm);
        if (ok != (cases[i].sm != 0) || (ok && sm != cases[i].sm))
            fprintf(stderr, "fc_arch_parse(\"%s\"): %d, sm %d\n", cases[i].text ? cases[i].text : "(null)", ok, sm);
        CHECK(ok == (cases[i].sm != 0));
        if (ok) CHECK_EQ_INT(sm, cases[i].sm);
    }
}

int main(void) {
    if (!temp_dir(root, sizeof root, "fusec-test-aot")) return 1;
    /* Saving and loading need no cache; keep the user's out of it. */
    setenv("FUSEC_CACHE", "off", 1);
    fc_context *ctx = fc_context_new();
    bool gpu = fc_cuda_available(NULL);
    test_arch();
    test_round_trip(ctx, g_model(ctx, false), gpu);
    test_round_trip(ctx, g_model(ctx, true), gpu);
    /* Attention for sm 90: fc_attn_fa3, its tensor maps in the file. */
    test_round_trip(ctx, g_attention(ctx), gpu);
    test_refused(ctx);
    test_inconsistent(ctx);
    test_weights(ctx);
    test_dynamic(ctx, gpu);
    if (!gpu) printf("test_aot: GPU part skipped (no CUDA device)\n");
    fc_cache_global_close();
    fc_context_free(ctx);
    rm_rf(root);
    return check_report("test_aot");
}
