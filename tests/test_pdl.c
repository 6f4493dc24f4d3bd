/*
 * test_pdl.c - programmatic dependent launches of fusec's own kernels
 * (docs/RUNTIME-GRAPHS.md, "Programmatic dependent launches").
 *
 * Without a GPU (plans and sources compiled for sm 90):
 *  - every kernel launch of a plan is a programmatic dependent
 *    (fc_launch.pdl), but a frame's carrier and the kernel after it;
 *  - its source waits (griddepcontrol.wait) before it touches global
 *    memory: the kernels of the pointwise, row, batched, GEMM and
 *    attention generators wait, then trigger, as their first statements
 *    (emit.c, fc_cuda_grid_start); a frame entry waits after loading its
 *    frame words and before its body; the GEMVs, skinny GEMMs and decode
 *    kernels, which fetch weights first, have the wait in their body.
 *    Pointwise, reductions, flash attention, decode attention and cache
 *    updates, GEMVs, skinny GEMMs and a dynamic variant's frame kernels
 *    (generated GEMMs among them) are covered.
 *
 * With a GPU: a chain of 200 dependent kernels (row and column reductions
 * alternating, each stage x + 1, the memory plan reusing every buffer two
 * stages on) must give x0 + 200 exactly, run launch by launch (every
 * launch programmatic, cuLaunchKernelEx) and from its CUDA Graph (every
 * edge programmatic on sm 90): a kernel that read its input before the
 * kernel before it had written it, or wrote a buffer before a kernel
 * before it had read it, shows as a wrong element.
 */
#include "check.h"
#include "fusec.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char grid_start[] = "#if __CUDA_ARCH__ >= 900\n"
                                 "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
                                 "  asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
                                 "#endif\n";
static const char wait_asm[] = "griddepcontrol.wait;";

/* CUDA for sm 90 (the H100/H200; NVRTC needs no device), graphs or not. */
static fc_compile_options sm90(bool graphs) {
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_CUDA;
    o.sm = 90;
    o.cuda_graphs = graphs;
    return o;
}

static fc_program *compile(fc_graph *g, bool graphs) {
    if (!g) return NULL;
    const fc_compile_options o = sm90(graphs);
    fc_program *p = NULL;
    if (fc_compile(g, &o, &p) != FC_OK) printf("compile %s: %s\n", g->name, fc_last_error(g->ctx));
    return p;
}

/* The body of kernel `name` in the unit: what follows `) {` of its entry
 * point (its `__global__` function), or NULL. */
static const char *entry_body(const char *unit, const char *name) {
    char want[96];
    snprintf(want, sizeof want, " %s(", name);
    for (const char *at = strstr(unit, want); at; at = strstr(at + 1, want)) {
        const char *line = at;
        while (line > unit && line[-1] != '\n') line--;
        if (strncmp(line, "extern \"C\" __global__ ", 22)) continue;
        const char *open = strstr(at, ") {\n");
        return open ? open + 4 : NULL;
    }
    return NULL;
}

static bool starts_with(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

/* Checks the launches of src (described in the file comment); returns how
 * many kernels it checked; *kinds gets a bit per kind seen. */
static int check_launches(const char *what, const fc_cuda_src *src, unsigned *kinds) {
    static const char *const generic[] = {"fc_pointwise_", "fc_reduce_", "fc_batch_", "fc_gemm_", "fc_attention_"};
    static const char *const own[] = {"fc_gemv_", "fc_skinny_", "fc_update_slice_", "fc_cache_attention_"};
    const int carrier = fc_cuda_src_frame_carrier(src);
    int after_carrier = -1;
    for (int i = carrier + 1; carrier >= 0 && i < src->nlaunches && after_carrier < 0; i++)
        if (src->launches[i].kind == FC_LAUNCH_KERNEL) after_carrier = i;
    int n = 0;
    for (int i = 0; i < src->nlaunches; i++) {
        const fc_launch *l = &src->launches[i];
        if (l->kind != FC_LAUNCH_KERNEL) continue;
        n++;
        const bool exempt = i == carrier || i == after_carrier;
        if (l->pdl == exempt) printf("%s: launch %d (%s, %s): pdl %d\n", what, i, l->name, l->summary, l->pdl);
        CHECK_EQ_INT(l->pdl, !exempt);
        const char *body = entry_body(src->source, l->name);
        CHECK(body != NULL);
        if (!body) continue;
        const char *end = strstr(body, "\n}\n");
        CHECK(end != NULL);
        /* A skinny GEMM's wait is in fc_sk_start (skinny.cuh.inc), which
         * its template (fc_sk_run, fc_ska_run) calls after it has
         * fetched its weights. */
        const bool skinny = starts_with(l->name, "fc_skinny_");
        const char *wait = strstr(body, skinny ? "  fc_sk" : wait_asm);
        if (skinny) CHECK(strstr(src->source, "  asm volatile(\"griddepcontrol.wait;\\n\" ::: \"memory\");\n") != NULL);
        if (!wait || !end || wait > end) printf("%s: %s: no wait in its body\n", what, l->name);
        CHECK(wait != NULL && end && wait < end);
        if (l->frame) {
            /* Before the wait only the frame's words: `  const long long
             * wN = fc_frame[..];` lines (and the carrier's store). */
            *kinds |= 1u << 9;
            const char *call = strstr(body, "_main(");
            CHECK(call != NULL && wait < call);
            CHECK(strstr(body, grid_start) != NULL && strstr(body, grid_start) < call);
            for (const char *ln = body; ln && ln < wait;) {
                const char *nl = strchr(ln, '\n');
                const bool ok = starts_with(ln, "  const long long ") || starts_with(ln, "  fc_frame_store(") ||
                                starts_with(ln, "#if __CUDA_ARCH__ >= 900") || starts_with(ln, "  asm volatile(\"griddepcontrol.wait");
                if (!ok) printf("%s: %s: before its wait: %.*s\n", what, l->name, nl ? (int)(nl - ln) : 40, ln);
                CHECK(ok);
                ln = nl ? nl + 1 : NULL;
            }
            continue;
        }
        bool known = false;
        for (int k = 0; k < (int)(sizeof generic / sizeof *generic); k++)
            if (starts_with(l->name, generic[k])) {
                /* The wait and the trigger are the body's first statements. */
                known = true;
                *kinds |= 1u << k;
                if (!starts_with(body, grid_start)) printf("%s: %s starts with: %.80s\n", what, l->name, body);
                CHECK(starts_with(body, grid_start));
            }
        for (int k = 0; k < (int)(sizeof own / sizeof *own); k++)
            if (starts_with(l->name, own[k])) {
                known = true;
                *kinds |= 1u << (5 + k);
            }
        if (!known) printf("%s: launch %d: a kernel of an unknown kind: %s\n", what, i, l->name);
        CHECK(known);
    }
    return n;
}

static void check_file(fc_context *ctx, const char *file, const fc_binding *b, int nb, unsigned *kinds) {
    const char *src = getenv("FUSEC_SRC");
    char path[512];
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", file);
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse_file(ctx, path, NULL, b, nb, &g), FC_OK);
    fc_program *p = compile(g, true);
    CHECK(p != NULL);
    if (p) {
        const int n = check_launches(file, &fc_program_desc_of(p)->src, kinds);
        printf("%s: %d kernels, each a programmatic dependent that waits first\n", file, n);
        CHECK(n > 0);
    }
    fc_program_free(p);
    fc_graph_free(g);
}

/* A dynamic variant (T symbolic): frame kernels, its GEMMs generated. */
static void check_variant(fc_context *ctx, const char *file, unsigned *kinds) {
    const char *src = getenv("FUSEC_SRC");
    char path[512];
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", file);
    const fc_binding b1 = {"B", 1};
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse_file(ctx, path, NULL, &b1, 1, &g), FC_OK);
    const fc_compile_options o = sm90(true);
    fc_program *v = NULL;
    if (g && fc_program_compile_variant(g, &o, &v) != FC_OK) printf("variant %s: %s\n", file, fc_last_error(ctx));
    CHECK(v != NULL);
    if (v) printf("%s (variant): %d kernels\n", file, check_launches(file, &fc_program_desc_of(v)->src, kinds));
    fc_program_free(v);
    fc_graph_free(g);
}

/* ---- the chain on the GPU ------------------------------------------------ */

enum { ROWS = 64, COLS = 256, STAGES = 200 };

/* Stage k: r = the max of x over a row (k even) or a column (k odd);
 * x + 1 + r * 0 (which no pass may fold: r could be inf). Each stage
 * is a kernel of its own (a row and a column reduction do not fuse), and
 * every stage's result lands where the one two stages before was. */
static fc_graph *chain_graph(fc_context *ctx) {
    fc_strbuf t = {0};
    fc_strbuf_printf(&t, "graph pdl_chain(%%x0: f32[%d, %d]) {\n", ROWS, COLS);
    for (int k = 0; k < STAGES; k++) {
        fc_strbuf_printf(&t, "  %%r%d = reduce_max(%%x%d, axes=[%d], keepdim=true)\n", k, k, k % 2 ? 0 : 1);
        fc_strbuf_printf(&t, "  %%z%d = mul(%%r%d, 0.0)\n  %%y%d = add(%%x%d, 1.0)\n", k, k, k, k);
        fc_strbuf_printf(&t, "  %%x%d = add(%%y%d, %%z%d)\n", k + 1, k, k);
    }
    fc_strbuf_printf(&t, "  return %%x%d\n}\n", STAGES);
    fc_graph *g = NULL;
    CHECK(!t.oom && t.buf);
    if (t.buf) CHECK_EQ_INT(fc_parse(ctx, "<pdl_chain>", t.buf, strlen(t.buf), NULL, NULL, 0, &g), FC_OK);
    free(t.buf);
    return g;
}

/* The chain's plan (no GPU): a kernel a stage, each programmatic. */
static void check_chain_plan(fc_context *ctx, unsigned *kinds) {
    fc_graph *g = chain_graph(ctx);
    fc_program *p = compile(g, true);
    CHECK(p != NULL);
    if (p) {
        const int n = check_launches("pdl_chain", &fc_program_desc_of(p)->src, kinds);
        printf("pdl_chain: %d kernels for %d stages\n", n, STAGES);
        CHECK(n >= STAGES - 1);
    }
    fc_program_free(p);
    fc_graph_free(g);
}

static void run_chain(fc_context *ctx, fc_cuda_device *dev, bool graphs) {
    fc_graph *g = chain_graph(ctx);
    fc_compile_options o = sm90(graphs);
    o.sm = 0; /* the device's own */
    fc_program *p = NULL;
    if (g && fc_compile(g, &o, &p) != FC_OK) printf("compile pdl_chain: %s\n", fc_last_error(ctx));
    CHECK(p != NULL);
    static float x[ROWS * COLS], y[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++) x[i] = (float)((i * 7919) % 61 - 30);
    CUdeviceptr dx = 0, dy = 0;
    CHECK_EQ_INT(fc_cuda_alloc(dev, sizeof x, &dx), FC_OK);
    CHECK_EQ_INT(fc_cuda_alloc(dev, sizeof y, &dy), FC_OK);
    CHECK_EQ_INT(fc_cuda_upload(dev, dx, x, sizeof x), FC_OK);
    void *in[1] = {(void *)(uintptr_t)dx}, *out[1] = {(void *)(uintptr_t)dy};
    /* Runs 1 (launch by launch, both ways), 2 (the graph built) and 3-6
     * (replays, back to back: a replay's first kernel after the last
     * one's end). */
    int bad = 0;
    for (int rep = 0; p && rep < 6; rep++) {
        CHECK_EQ_INT(fc_cuda_memset_async(dev, dy, 0xff, sizeof y, NULL), FC_OK);
        fc_status st = FC_OK;
        for (int b = 0; b < (rep >= 2 ? 4 : 1) && st == FC_OK; b++) st = fc_run(p, in, 1, out, 1, dev->stream);
        if (st != FC_OK) printf("fc_run: %s\n", fc_last_error(ctx));
        CHECK_EQ_INT(st, FC_OK);
        CHECK_EQ_INT(fc_cuda_stream_sync(dev, NULL), FC_OK);
        CHECK_EQ_INT(fc_cuda_download(dev, y, dy, sizeof y), FC_OK);
        int wrong = 0;
        for (int i = 0; i < ROWS * COLS; i++) wrong += y[i] != x[i] + (float)STAGES;
        if (wrong) printf("pdl_chain (graphs %s), run %d: %d of %d elements wrong (y[0] %g, want %g)\n", graphs ? "on" : "off",
                          rep + 1, wrong, ROWS * COLS, (double)y[0], (double)(x[0] + STAGES));
        bad += wrong;
    }
    CHECK_EQ_INT(bad, 0);
    if (p && graphs && dev->info.cc_major >= 9) {
        const int edges = fc_program_programmatic_edges(p);
        int kernels = 0;
        for (int i = 0; i < fc_program_desc_of(p)->src.nlaunches; i++)
            kernels += fc_program_desc_of(p)->src.launches[i].kind == FC_LAUNCH_KERNEL;
        printf("pdl_chain: %d kernels, %d programmatic edges in the graph\n", kernels, edges);
        CHECK_EQ_INT(edges, kernels - 1);
    }
    if (p) printf("pdl_chain (graphs %s): 6 runs, %s\n", graphs ? "on" : "off", bad ? "WRONG" : "exact");
    fc_cuda_free(dev, dx);
    fc_cuda_free(dev, dy);
    fc_program_free(p);
    fc_graph_free(g);
}

int main(void) {
    fc_context *ctx = fc_context_new();
    unsigned kinds = 0;
    check_file(ctx, "bench/pointwise.ir", NULL, 0, &kinds);
    check_file(ctx, "bench/add_layernorm.ir", NULL, 0, &kinds);
    check_file(ctx, "bench/softmax.ir", NULL, 0, &kinds);
    check_file(ctx, "bench/attention.ir", NULL, 0, &kinds);
    const fc_binding step[2] = {{"B", 1}, {"T", 1}}, block[2] = {{"B", 1}, {"T", 64}};
    check_file(ctx, "tests/decode/gpt2_tiny.ir", step, 2, &kinds);
    check_file(ctx, "tests/decode/llama_bf16.ir", step, 2, &kinds);
    check_file(ctx, "examples/gpt2_block_bf16.ir", block, 2, &kinds);
    check_variant(ctx, "examples/gpt2_block_bf16.ir", &kinds);
    check_chain_plan(ctx, &kinds);
    /* pointwise, reduce, gemm (the variant's), attention, gemv, skinny,
     * update_slice or cache_attention, frame entries. */
    printf("kinds seen: 0x%x\n", kinds);
    CHECK(kinds & 1u);          /* pointwise */
    CHECK(kinds & 2u);          /* reduce */
    CHECK(kinds & 16u);         /* flash attention */
    CHECK(kinds & (1u << 5));   /* gemv */
    CHECK(kinds & (1u << 6));   /* skinny */
    CHECK(kinds & (3u << 7));   /* decode */
    CHECK(kinds & (1u << 9));   /* frame entries */

    if (!fc_cuda_available(NULL)) {
        printf("test_pdl: GPU part skipped (no CUDA device)\n");
    } else {
        fc_cuda_device *dev = NULL;
        CHECK_EQ_INT(fc_cuda_device_open(ctx, 0, &dev), FC_OK);
        if (dev) {
            printf("device: %s, sm %d.%d, driver %d\n", dev->info.name, dev->info.cc_major, dev->info.cc_minor,
                   dev->info.driver_version);
            run_chain(ctx, dev, false);
            run_chain(ctx, dev, true);
        }
        fc_cuda_device_close(dev);
    }
    fc_context_free(ctx);
    return check_report("test_pdl");
}
