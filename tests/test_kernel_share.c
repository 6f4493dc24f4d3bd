/* test_kernel_share.c - one kernel per distinct computation (no GPU needed).
 *
 * tests/layers/gpt2_4.ir is examples/gpt2_block.ir four times over, each
 * layer on its own weights; tests/layers/mlp_4.ir is mlp_1.ir four times
 * (also unfused, where each op is a kernel). Checked, each in a cache
 * directory of its own:
 *
 *   - the four layers compile exactly as many distinct kernels, NVRTC
 *     programs and kernel-cache entries as one block has (fused, and
 *     unfused where every op is a kernel);
 *   - the plan still lists every launch, and layer k's launch i runs the
 *     kernel of layer 0's launch i, with its own arguments, grid and ops;
 *   - the unit source defines each distinct kernel once, and each kernel's
 *     own source defines it;
 *   - the one block after the four layers, another graph under another
 *     name, finds every kernel in the cache: no NVRTC;
 *   - a second compile of the model in a "new process": no NVRTC, no
 *     passes; -o twice: NVRTC for the first file only;
 *   - a damaged kernel entry: that kernel alone is compiled again (the
 *     program entry has no source: the compile goes the cold way), to the
 *     same cubin, and the damaged bytes are never loaded.
 */
#include "check.h"
#include "runtime/cuda/aot.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/program.h"
#include "runtime/cuda/program_cache.h"
#include "test_util.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];
static int ndirs;

static void fresh_cache(char *dir, size_t n) {
    fc_cache_global_close();
    snprintf(dir, n, "%s/cache%d", root, ndirs++);
    setenv("FUSEC_CACHE", "rw", 1);
    CHECK_EQ_INT(fc_cache_configure(dir), FC_OK);
}

static uint64_t nvrtc_count(void) {
    fc_compile_counters c;
    fc_compile_counters_get(&c);
    return c.nvrtc_compiles;
}

static fc_graph *parse(fc_context *ctx, const char *file) {
    const char *src = getenv("FUSEC_SRC");
    char path[512];
    snprintf(path, sizeof path, "%s/%s", src && *src ? src : ".", file);
    fc_binding b[2] = {{"B", 1}, {"T", 16}};
    fc_graph *g = NULL;
    fc_status st = fc_parse_file(ctx, path, NULL, b, 2, &g);
    if (st != FC_OK) fprintf(stderr, "%s: %s\n", path, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    return g;
}

static fc_program *compile(fc_graph *g, bool fuse) {
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.sm = 90;
    o.fuse = fuse;
    return compile_checked(g, &o);
}

static int count_substr(const char *s, const char *what) {
    int n = 0;
    for (const char *q = strstr(s, what); q; q = strstr(q + 1, what)) n++;
    return n;
}

/* Whether the n bytes at p hold the string s. */
static bool has_bytes(const char *p, size_t n, const char *s) {
    const size_t m = strlen(s);
    for (size_t i = 0; i + m <= n; i++)
        if (!memcmp(p + i, s, m)) return true;
    return false;
}

/* Layer k's launches are layer 0's: the same kernels and ops, in order. */
static void check_layers(const fc_program *block, const fc_program *model, int layers) {
    const fc_program_desc *b = fc_program_desc_of(block), *m = fc_program_desc_of(model);
    CHECK_EQ_INT(m->src.nlaunches, layers * b->src.nlaunches);
    CHECK_EQ_INT(m->src.nkernels, b->src.nkernels);
    for (int i = 0; i < m->src.nlaunches && b->src.nlaunches > 0; i++) {
        const fc_launch *l = &m->src.launches[i], *l0 = &b->src.launches[i % b->src.nlaunches];
        CHECK_EQ_INT(l->kind, l0->kind);
        CHECK_STR(l->name, l0->name);
        CHECK_STR(l->summary, l0->summary);
        CHECK(l->grid[0] == l0->grid[0] && l->block[0] == l0->block[0] && l->nargs == l0->nargs);
        if (i >= b->src.nlaunches && l->kind == FC_LAUNCH_KERNEL) /* other buffers */
            CHECK(memcmp(l->args, m->src.launches[i - b->src.nlaunches].args, sizeof(int) * (size_t)l->nargs) != 0);
    }
    /* The plan has a line per launch. */
    char *plan = fc_program_plan_text((fc_program *)model);
    CHECK(plan && count_substr(plan, "\nlaunch ") + (strncmp(plan, "launch ", 7) == 0) == m->src.nlaunches);
    fc_free(plan);
    /* Each distinct kernel once in the unit; each in its own source. */
    CHECK_EQ_INT(count_substr(m->src.source, "__global__ void"), m->src.nkernels);
    for (int k = 0; k < m->src.nkernels; k++) {
        const fc_cuda_kernel *kn = &m->src.kernels[k];
        CHECK(kn->source && strstr(kn->source, kn->name) && count_substr(kn->source, "__global__ void") == 1);
        char def[80];
        snprintf(def, sizeof def, "%s(", kn->name);
        CHECK(strstr(m->src.source, def) != NULL); /* defined in the unit under its name */
        CHECK(strstr(kn->source, "fc__KERNEL__") == NULL);
    }
}

static void test_layers(fc_context *ctx, const char *file4, const char *file1, bool fuse) {
    char dir[300];
    fresh_cache(dir, sizeof dir);
    fc_graph *g4 = parse(ctx, file4), *g1 = parse(ctx, file1);
    if (!g4 || !g1) {
        fc_graph_free(g4);
        fc_graph_free(g1);
        return;
    }

    uint64_t n0 = nvrtc_count();
    fc_program *model = compile(g4, fuse);
    const int nk = fc_program_nkernels(model);
    CHECK(nk >= 1);
    CHECK_EQ_INT(nvrtc_count() - n0, nk); /* one NVRTC program per distinct kernel */
    CHECK_EQ_INT(count_entries(dir, "kernels"), nk);
    CHECK_EQ_INT(count_entries(dir, "programs"), 1);
    CHECK_EQ_INT(origin_of(model), FC_PROGRAM_COMPILED);
    for (int k = 0; k < nk; k++) {
        const fc_bytes *c = fc_program_kernel_cubin(model, k);
        CHECK(c && c->size > 64 && memcmp(c->data, "\x7f" "ELF", 4) == 0);
    }

    /* The block: another graph, other names, the same kernels. */
    n0 = nvrtc_count();
    fc_program *block = compile(g1, fuse);
    CHECK_EQ_INT(nvrtc_count() - n0, 0);
    CHECK_EQ_INT(origin_of(block), FC_PROGRAM_KERNEL_CACHE);
    CHECK_EQ_INT(count_entries(dir, "kernels"), nk);
    check_layers(block, model, 4);
    printf("%s (%s): %d launches, %d distinct kernels, %d NVRTC programs\n", file4, fuse ? "fused" : "unfused",
           fc_program_desc_of(model)->src.nlaunches, nk, nk);

    /* A new process: the whole model from the cache. */
    fc_cache_global_close();
    n0 = nvrtc_count();
    fc_program *warm = compile(g4, fuse);
    CHECK_EQ_INT(nvrtc_count() - n0, 0);
    CHECK_EQ_INT(origin_of(warm), FC_PROGRAM_PROGRAM_CACHE);
    fc_compile_times t;
    fc_program_times(warm, &t);
    CHECK(t.passes_ms == 0 && t.codegen_ms == 0 && t.nvrtc_ms == 0);
    CHECK_EQ_INT(fc_program_nkernels(warm), nk);
    for (int k = 0; k < nk; k++) {
        const fc_bytes *a = fc_program_kernel_cubin(model, k), *b = fc_program_kernel_cubin(warm, k);
        CHECK(a && b && a->size == b->size && memcmp(a->data, b->data, a->size) == 0);
    }
    char *p1 = fc_program_plan_text(model), *p2 = fc_program_plan_text(warm);
    CHECK(p1 && p2 && !strcmp(p1, p2));
    fc_free(p1);
    fc_free(p2);

    if (fuse) {
        /* -o from the cache: no NVRTC, for the first file and the second;
         * the file holds the kernels' own cubins. */
        char f1[400], f2[400];
        snprintf(f1, sizeof f1, "%s/a.cubin", dir);
        snprintf(f2, sizeof f2, "%s/b.cubin", dir);
        n0 = nvrtc_count();
        CHECK_EQ_INT(fc_program_save_file(warm, f1), FC_OK);
        CHECK_EQ_INT(nvrtc_count() - n0, 0);
        fc_cache_global_close();
        n0 = nvrtc_count();
        CHECK_EQ_INT(fc_program_save_file(warm, f2), FC_OK);
        CHECK_EQ_INT(nvrtc_count() - n0, 0);
        size_t na = 0, nb = 0;
        char *a = read_file(f1, &na), *b = read_file(f2, &nb);
        CHECK(a && b && na == nb && memcmp(a, b, na) == 0);
        /* The file names every kernel. */
        const fc_program_desc *md = fc_program_desc_of(model);
        for (int k = 0; k < md->src.nkernels && a; k++) CHECK(has_bytes(a, na, md->src.kernels[k].name));
        free(a);
        free(b);
        fc_program *loaded = NULL;
        CHECK_EQ_INT(fc_program_load_file(ctx, f2, &loaded), FC_OK);
        CHECK_EQ_INT(fc_program_nkernels(loaded), nk);
        for (int k = 0; k < nk && loaded; k++) {
            const fc_bytes *x = fc_program_kernel_cubin(model, k), *y = fc_program_kernel_cubin(loaded, k);
            CHECK(x && y && x->size == y->size && !memcmp(x->data, y->data, x->size));
        }
        fc_program_free(loaded);
    }

    /* A damaged kernel entry: that kernel alone compiles again. */
    fc_cache_global_close();
    const int entries = count_entries(dir, "kernels");
    char path[600];
    {
        uint8_t key0[16];
        memcpy(key0, fc_program_desc_of(model)->src.kernels[0].key, 16);
        char hex[33];
        for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", key0[i]);
        snprintf(path, sizeof path, "%s/v%u/kernels/%s.bin", dir, FC_CACHE_FORMAT_VERSION, hex);
        FILE *f = fopen(path, "r+b");
        CHECK(f != NULL);
        if (f) {
            fseek(f, 100, SEEK_SET);
            int c = fgetc(f);
            fseek(f, 100, SEEK_SET);
            fputc(c ^ 0x10, f);
            fclose(f);
        }
    }
    n0 = nvrtc_count();
    fc_program *again = compile(g4, fuse);
    CHECK_EQ_INT(nvrtc_count() - n0, 1);
    CHECK_EQ_INT(origin_of(again), FC_PROGRAM_COMPILED);
    const fc_bytes *a = fc_program_kernel_cubin(model, 0), *b = fc_program_kernel_cubin(again, 0);
    CHECK(a && b && a->size == b->size && memcmp(a->data, b->data, a->size) == 0);
    CHECK_EQ_INT(count_entries(dir, "kernels"), entries);

    fc_program_free(again);
    fc_program_free(warm);
    fc_program_free(block);
    fc_program_free(model);
    fc_graph_free(g1);
    fc_graph_free(g4);
}

/* A unit whose second kernel needs templates the first brought: each
 * kernel is defined in the unit under its name, and the file saved from
 * it has them all. */
static void test_unit(fc_context *ctx, const char *file) {
    char dir[300];
    fresh_cache(dir, sizeof dir);
    const char *src = getenv("FUSEC_SRC");
    char path[512], out[400];
    snprintf(path, sizeof path, "%s/%s", src && *src ? src : ".", file);
    fc_binding b[1] = {{"B", 4}};
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse_file(ctx, path, NULL, b, 1, &g), FC_OK);
    if (!g) return;
    fc_program *p = compile(g, true);
    const fc_program_desc *d = p ? fc_program_desc_of(p) : NULL;
    CHECK(d && d->src.nkernels >= 2);
    snprintf(out, sizeof out, "%s/unit.cubin", dir);
    CHECK(p && fc_program_save_file(p, out) == FC_OK);
    size_t n = 0;
    char *bytes = read_file(out, &n);
    CHECK(bytes != NULL);
    for (int k = 0; d && k < d->src.nkernels; k++) {
        const char *name = d->src.kernels[k].name;
        char def[80];
        snprintf(def, sizeof def, "%s(", name);
        CHECK(strstr(d->src.source, def) != NULL);
        CHECK(strstr(d->src.kernels[k].source, def) != NULL);
        CHECK(bytes && has_bytes(bytes, n, name));
    }
    CHECK_EQ_INT(count_substr(d ? d->src.source : "", "__global__ void"), d ? d->src.nkernels : -1);
    free(bytes);
    fc_program_free(p);
    fc_graph_free(g);
}

int main(void) {
    if (!temp_dir(root, sizeof root, "fusec-test-kshare")) return 1;
    unsetenv("FUSEC_CACHE_MAX_BYTES");
    int major = 0, minor = 0;
    if (fc_nvrtc_version(&major, &minor) != FC_OK) {
        printf("test_kernel_share: no NVRTC, skipped\n");
        rm_rf(root);
        return 0;
    }
    fc_context *ctx = fc_context_new();
    test_layers(ctx, "tests/layers/gpt2_4.ir", "examples/gpt2_block.ir", true);
    test_layers(ctx, "tests/layers/mlp_4.ir", "tests/layers/mlp_1.ir", true);
    /* bf16 skinny GEMMs: the second is written after the templates the
     * unit has (generated again without them), under its own name. */
    test_unit(ctx, "examples/mlp.ir");
    /* Unfused, every op is a kernel: more of them to share. */
    test_layers(ctx, "tests/layers/mlp_4.ir", "tests/layers/mlp_1.ir", false);
    fc_cache_global_close();
    fc_cache_configure(NULL);
    fc_context_free(ctx);
    rm_rf(root);
    return check_report("test_kernel_share");
}
